"""A point's scratch folder under ``--workdir``: data a point writes outside the results
folder (received copies, append-only files), removed when the point ends.

Why two naming rules: in emulation the folder gets a random name (``tempfile.mkdtemp``), so
a careless ``--workdir`` never has anything that was there before reused or removed. In
simulation the folder's path reaches the node logs (a receiver logs where it wrote), and a
seed must repeat a run's logs byte for byte, so the name is the point's tag alone; it is
still made with ``mkdir`` (never reused), and a folder of that name already there (another
simulated run on the same ``--workdir``, or one a killed run left) fails the point with one
sentence instead.

The default ``--workdir`` itself (:func:`default_workdir`) names the user unless it is root,
so a folder a root run left is never in the way of a run without root.
"""

import os
import tempfile


def default_workdir(name, base='/tmp', uid=None):
    """The default ``--workdir`` of experiment name: ``base/repronet-NAME`` for root, and
    ``base/repronet-NAME-UID`` for any other user (uid: this process's). A run under sudo
    leaves its folder owned by root; a later simulated run without root (no sudo needed)
    could neither write that folder nor lock it, and two users' runs would share one."""
    uid = os.geteuid() if uid is None else uid
    return os.path.join(base, 'repronet-%s%s' % (name, '-%d' % uid if uid else ''))


class ScratchInUse(RuntimeError):
    """A simulated point's folder exists already (one sentence)."""


def point_folder(ctx, prefix):
    """Make and return a new empty folder for one point (mode 0755) under --workdir."""
    workdir = ctx.params.workdir
    os.makedirs(workdir, exist_ok=True)
    if getattr(ctx.params, 'backend', 'emu') != 'sim':
        path = tempfile.mkdtemp(prefix=prefix + '-', dir=workdir)
    else:
        path = os.path.join(workdir, prefix + '-sim')
        try:
            os.mkdir(path)
        except FileExistsError:
            raise ScratchInUse('%s exists already: another simulated run is using --workdir '
                               '%s, or a killed one left it (remove it, or give another '
                               '--workdir)' % (path, workdir)) from None
    os.chmod(path, 0o755)
    return path
