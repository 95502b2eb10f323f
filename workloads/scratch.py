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

:func:`memory_workdir` is the same name on ``/dev/shm`` when that is a tmpfs: for files an
emulated host creates one after another during a timed part (dht8's downloads), which cost
no disk there. Why it matters: creating a file is kernel work the creating process does
without yielding the CPU, and on a disk's file system it can be long: on this project's
development machine (ext4 on a virtio disk) 0.55-1.1 ms per new file, against 10 us on
tmpfs and 30 us on a fresh ext4 (docs/link-emulation.md, "Step 11"). While it runs, the
link-delay daemons wait for the CPU, and the emulated wire is late.
"""

import os
import tempfile

MEMORY_BASE = '/dev/shm'    # a tmpfs on Debian (systemd mounts it), shared by Mininet's hosts


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


def file_system(path):
    """Return the type of the file system holding path (ext4, tmpfs, overlay...)."""
    path, best, kind = os.path.realpath(path), -1, None
    with open('/proc/self/mounts') as f:
        for line in f:
            fields = line.split()
            mount = fields[1].replace('\\040', ' ')
            inside = path == mount or path.startswith(mount.rstrip('/') + '/')
            if inside and len(mount) > best:
                best, kind = len(mount), fields[2]
    return kind


def memory_workdir(name, uid=None):
    """Return ``default_workdir(name)`` on the tmpfs at ``/dev/shm``, or None when that is
    not a tmpfs (or is missing) on this machine."""
    if not os.path.isdir(MEMORY_BASE) or file_system(MEMORY_BASE) != 'tmpfs':
        return None
    return default_workdir(name, MEMORY_BASE, uid)
