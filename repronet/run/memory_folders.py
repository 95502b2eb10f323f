"""Folders a simulated run keeps in memory (``/dev/shm``), and their removal once no run owns them.

A simulated run holds no machine lock (two may run at once), so a folder it keeps on the
tmpfs is its own only through its ``--workdir``, whose lock (``<workdir>/.lock``,
``leftovers.workdir_lock``) the run holds from before it starts until it ends. A run
removes its folder when it finishes; a SIGKILLed one cannot, and its folder (downloaded
files, up to a share of the machine's memory) would stay until the next run with the same
--workdir. So the run writes the --workdir into the folder (``mark``), and ``repronet
clean`` removes every marked folder whose --workdir lock nobody holds (``remove_stale``):
it takes that lock for the moment of the removal, so a run starting then finds the
--workdir busy and says so, instead of losing files it has just written. A folder without a
mark (made before marks existed, or not a run's) is left alone: nothing says whose it is.

An emulated run's folder is guarded by the machine lock instead (one emulated run at a
time): it is marked ``MACHINE`` (``mark_machine``), the run removes it when it ends, and a
killed run's goes with the next ``clean()``, which always runs under that lock (the
runner's before an emulated run, ``repronet clean``'s): before this, only the next run of
the same experiment emptied it, so downloads of a killed dht8 point (up to a share of the
machine's memory) stayed in memory through every other experiment's runs.
"""

import fcntl
import os
import shutil

MARK = '.workdir'       # inside a run's memory folder: the --workdir whose lock guards it
MACHINE = '.machine'    # inside an emulated run's: the machine lock guards it
BASE = '/dev/shm'


def mark(folder, workdir):
    """Make folder (a run's own, under BASE) and write into it the --workdir guarding it."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, MARK), 'w') as f:
        f.write(os.path.realpath(workdir) + '\n')


def mark_machine(folder):
    """Make folder (an emulated run's own, under BASE) and mark it as guarded by the machine
    lock, which the run holds."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, MACHINE), 'w') as f:
        f.write('guarded by the machine lock\n')


def remove_stale(base=None, machine_locked=False):
    """Remove the marked folders directly under base whose --workdir no live run locks,
    and, when the caller holds the machine lock (machine_locked), the folders of emulated
    runs (no emulated run can be alive then); return a description of each removed.
    base None is BASE."""
    base = BASE if base is None else base
    removed = []
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return removed
    for name in names:
        folder = os.path.join(base, name)
        if machine_locked and _is_folder(folder) and \
                os.path.exists(os.path.join(folder, MACHINE)):
            shutil.rmtree(folder, ignore_errors=True)
            if not os.path.exists(folder):
                removed.append('memory folder %s (of an emulated run)' % folder)
            continue
        workdir = _marked_workdir(folder)
        if workdir is not None and _remove_unless_owned(folder, workdir):
            removed.append('memory folder %s (of --workdir %s)' % (folder, workdir))
    return removed


def _is_folder(path):
    """True for a real folder (a link to one is not a run's)."""
    return not os.path.islink(path) and os.path.isdir(path)


def _marked_workdir(folder):
    """The --workdir written in folder's mark, or None (no mark, not a folder, unreadable)."""
    if not _is_folder(folder):
        return None
    try:
        with open(os.path.join(folder, MARK)) as f:
            workdir = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return workdir if os.path.isabs(workdir) else None


def _remove_unless_owned(folder, workdir):
    """Remove folder unless a live run holds workdir's lock; True if removed. With the
    --workdir gone, no run can hold its lock."""
    try:
        lock = open(os.path.join(workdir, '.lock'), 'r')
    except FileNotFoundError:
        lock = None
    except OSError:
        return False        # cannot tell (permissions): leave it
    try:
        if lock is not None:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False        # a live run owns it
        shutil.rmtree(folder, ignore_errors=True)
        return not os.path.exists(folder)
    finally:
        if lock is not None:
            lock.close()
