"""A point's scratch folder under ``--workdir``: data a point writes outside the results
folder (received copies, append-only files), removed when the point ends.

Why two naming rules: in emulation the folder gets a random name (``tempfile.mkdtemp``), so
a careless ``--workdir`` never has anything that was there before reused or removed. In
simulation the folder's path reaches the node logs (a receiver logs where it wrote), and a
seed must repeat a run's logs byte for byte, so the name is the point's tag alone; it is
still made with ``mkdir`` (never reused), and a folder of that name already there (another
simulated run on the same ``--workdir``, or one a killed run left) fails the point with one
sentence instead.
"""

import os
import tempfile


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
