"""A process known by its PID: its start time, and signalling its process group.

A PID is reused once its process is reaped, so whoever records a PID to kill it later
(``repronet.run.leftovers``, the cluster agent) records its start time beside it and
kills only a process whose start time still matches. Node processes lead their own
process group (a new session), so what they started goes with them when the group is
signalled.

Standard library only, and only ``os``: ``repronet/cluster/launch.py`` imports this on
every process a cluster run starts on another server, where start-up time counts.
"""

import os


def start_time(pid):
    """Return the start time of pid (clock ticks since boot) or None."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return int(f.read().rsplit(')', 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def same_process(pid, started):
    """Is pid still the process that had start time started (both recorded earlier)? False
    for a missing record, a process that is gone, or a PID reused since."""
    return bool(pid) and started is not None and start_time(pid) == started


def signal_group(pid, signum, group_only=False):
    """Signal the process group pid leads, else (unless group_only) pid alone.

    Returns True if a signal was delivered; a group or process that is gone, or one we
    may not signal, is not an error (the caller is ending it anyway)."""
    for kill in (os.killpg,) if group_only else (os.killpg, os.kill):
        try:
            kill(pid, signum)
            return True
        except (ProcessLookupError, PermissionError):
            continue
    return False


def cmdlines():
    """Return {pid: argv} of the processes running now (argv a list of str; a process
    that ends while this reads, or a kernel thread, has an empty one or none)."""
    found = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % entry, 'rb') as f:
                raw = f.read()
        except OSError:
            continue
        found[int(entry)] = raw.decode(errors='replace').split('\0')[:-1]
    return found
