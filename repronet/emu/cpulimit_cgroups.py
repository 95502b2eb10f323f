"""The cgroup files behind per-host CPU limits (``repronet.emu.cpulimit``), v2 and v1 alike.

A CFS bandwidth limit is a quota of CPU time per period for the processes of one cgroup; the
kernel offers it through two interfaces, and repronet writes both directly (no cgcreate,
cgset or cgclassify, which are cgroup-v1 tools):

- cgroup v2 (Debian 12, Ubuntu 22.04+, the project's VM): one unified hierarchy, found as the
  ``cgroup2`` mount whose ``cgroup.controllers`` lists ``cpu``.  A group's ``cpu.max`` exists
  only when its parent enables the controller for its children, so ``+cpu`` is written to
  ``cgroup.subtree_control`` of the hierarchy's root and of our parent group ``repronet``;
  the limit is one write of ``"<quota> <period>"`` to ``repronet/<host>/cpu.max``.  Enabling
  ``cpu`` at the root stays enabled afterwards (systemd usually has it on already).
- cgroup v1: the ``cgroup`` mount whose options include ``cpu``; the limit is
  ``cpu.cfs_period_us`` then ``cpu.cfs_quota_us`` in ``repronet/<host>``.

Either way a process joins a group by writing its PID (or ``0``, meaning the writer itself) to
``cgroup.procs``.  Every group repronet makes for a run lives under the ``repronet`` parent,
so a crashed run's groups are recognised by place alone (:func:`remove_stale`) and no other
group is ever touched; the capability probe's trial groups are ``rncap-*`` beside it.

Functions take the hierarchy's root as a path, so the unit tests run them on a plain
directory.  Nothing here imports Mininet.
"""

import errno
import os
import signal
import time

from repronet.run.namespaces import proc_state

PARENT = 'repronet'
V2, V1 = 'v2', 'v1'
MOUNTINFO = '/proc/self/mountinfo'


class CgroupError(RuntimeError):
    """A cgroup step failed (one sentence naming the file)."""


def _unescape(field):
    """Undo mountinfo's octal escapes (a space is written \\040)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == '\\' and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return ''.join(out)


def cgroup_mounts(text):
    """Return [(mount point, fstype, super options)] of the cgroup mounts in mountinfo text."""
    mounts = []
    for line in text.splitlines():
        fields = line.split(' ')
        if '-' not in fields[6:]:
            continue
        dash = fields.index('-', 6)
        fstype, options = fields[dash + 1], fields[dash + 3:dash + 4]
        if fstype in ('cgroup', 'cgroup2') and len(fields) > 4:
            mounts.append((_unescape(fields[4]), fstype,
                           options[0].split(',') if options else []))
    return mounts


def _read(path):
    """Return the text of a file, or '' when it cannot be read."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ''


def _write(path, text):
    """Write text to a cgroup file in one write; CgroupError names the file on failure."""
    try:
        with open(path, 'w') as f:
            f.write(text)
    except OSError as e:
        raise CgroupError('writing %r to %s failed: %s' % (text, path, e.strerror or e))


def find(mountinfo=None):
    """Return {mechanism: hierarchy root} of the mounted cpu controllers ('v2' and/or 'v1').

    v2: a cgroup2 mount whose cgroup.controllers lists cpu; v1: a cgroup mount with the
    cpu option.  A controller is bound to one hierarchy, so normally one key is present.
    """
    if mountinfo is None:
        mountinfo = _read(MOUNTINFO)
    found = {}
    for point, fstype, options in cgroup_mounts(mountinfo):
        if fstype == 'cgroup2' and V2 not in found and \
                'cpu' in _read(os.path.join(point, 'cgroup.controllers')).split():
            found[V2] = point
        elif fstype == 'cgroup' and V1 not in found and 'cpu' in options:
            found[V1] = point
    return found


def preferred(roots):
    """Return find()'s hierarchies as [(mechanism, root)], v2 first."""
    return [(m, roots[m]) for m in (V2, V1) if m in roots]


def _enable_cpu(group):
    """Let the children of a v2 group have cpu.max (``+cpu`` in its subtree_control)."""
    control = os.path.join(group, 'cgroup.subtree_control')
    if 'cpu' not in _read(control).replace('+', ' ').split():
        _write(control, '+cpu')


class Group:
    """One cgroup with a CFS bandwidth limit: ``<root>/<parent>/<name>``."""

    def __init__(self, mechanism, root, name, parent=PARENT):
        if mechanism not in (V2, V1):
            raise ValueError('unknown cgroup mechanism %r' % (mechanism,))
        self.mechanism = mechanism
        self.root = root
        self.parent = os.path.join(root, parent) if parent else root
        self.path = os.path.join(self.parent, name)
        self.procs = os.path.join(self.path, 'cgroup.procs')

    def create(self, quota_us, period_us):
        """Make the group (and its parent) and set quota_us of CPU time per period_us."""
        if self.mechanism == V2:
            _enable_cpu(self.root)
        try:
            if self.parent != self.root:
                os.makedirs(self.parent, exist_ok=True)
            if self.mechanism == V2 and self.parent != self.root:
                _enable_cpu(self.parent)
            os.mkdir(self.path)
        except FileExistsError:
            raise CgroupError('cgroup %s already exists (left by a crashed run?); run '
                              '"repronet clean" first' % self.path)
        except OSError as e:
            raise CgroupError('cannot create cgroup %s: %s' % (self.path, e.strerror or e))
        if self.mechanism == V2:
            _write(os.path.join(self.path, 'cpu.max'), '%d %d' % (quota_us, period_us))
        else:
            _write(os.path.join(self.path, 'cpu.cfs_period_us'), str(period_us))
            _write(os.path.join(self.path, 'cpu.cfs_quota_us'), str(quota_us))

    def limit(self):
        """Return (quota_us, period_us) as the kernel reports them, or None."""
        try:
            if self.mechanism == V2:
                quota, period = _read(os.path.join(self.path, 'cpu.max')).split()
                return (int(quota) if quota != 'max' else -1), int(period)
            return (int(_read(os.path.join(self.path, 'cpu.cfs_quota_us'))),
                    int(_read(os.path.join(self.path, 'cpu.cfs_period_us'))))
        except ValueError:
            return None

    def add(self, pid):
        """Move process pid (and later its children) into the group."""
        _write(self.procs, str(pid))

    def joiner(self, then=None):
        """Return a Popen preexec_fn that moves the new child into the group before it execs,
        so nothing it starts can escape (then: the caller's own preexec_fn, run after)."""
        path = self.procs

        def join():
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b'0')      # 0: the writing process itself
            finally:
                os.close(fd)
            if then is not None:
                then()
        return join

    def pids(self):
        """Return the PIDs in the group (empty once it is gone)."""
        return _tasks(self.path)

    def remove(self, timeout=3.0):
        """SIGKILL what is still in the group, then remove it; return the killed PIDs.

        Idempotent (a missing group is already removed); CgroupError after timeout."""
        return _remove_dir(self.path, timeout)


def _tasks(path):
    """Return the live PIDs listed in the cgroup.procs of the group at path (a zombie has
    left its group already: only its parent can make it go)."""
    pids = [int(p) for p in _read(os.path.join(path, 'cgroup.procs')).split() if p.isdigit()]
    return [p for p in pids if proc_state(p) not in (None, 'Z')]


def _rmdir(path):
    """rmdir of one cgroup (the unit tests replace it: a plain directory keeps its files)."""
    os.rmdir(path)


def _remove_dir(path, timeout):
    """Kill the tasks of the cgroup at path until it can be removed; return the killed PIDs."""
    killed, deadline = [], time.monotonic() + timeout
    while True:
        if not os.path.isdir(path):
            return killed
        pids = _tasks(path)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            if pid not in killed:
                killed.append(pid)
        if not pids:
            try:
                _rmdir(path)
                return killed
            except FileNotFoundError:
                return killed
            except OSError as e:
                if e.errno not in (errno.EBUSY, errno.ENOTEMPTY) or \
                        time.monotonic() > deadline:
                    raise CgroupError('cannot remove cgroup %s: %s'
                                      % (path, e.strerror or e))
        elif time.monotonic() > deadline:
            raise CgroupError('cannot remove cgroup %s: processes %s survive SIGKILL'
                              % (path, ', '.join(map(str, pids))))
        time.sleep(0.02)


def remove_parent(root, parent=PARENT):
    """Remove the (empty) parent group; False if it still has children or is absent."""
    try:
        _rmdir(os.path.join(root, parent))
        return True
    except OSError:
        return False


def _bottom_up(path):
    """Yield path's descendant directories, deepest first in name order, then path."""
    try:
        children = sorted(e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False))
    except OSError:
        children = []
    for child in children:
        yield from _bottom_up(child)
    yield path


def remove_stale(roots=None, parent=PARENT, timeout=3.0):
    """Remove every group under ``<root>/repronet`` (deepest first, killing their tasks),
    then the parent itself; groups elsewhere are never looked at.

    For ``repronet clean``: returns (what went, what could not be removed) as sentences."""
    done, failed = [], []
    for mechanism, root in sorted((roots if roots is not None else find()).items()):
        top = os.path.join(root, parent)
        if not os.path.isdir(top):
            continue
        for path in _bottom_up(top):
            try:
                killed = _remove_dir(path, timeout)
            except CgroupError as e:
                failed.append(str(e))
                continue
            done += ['process %d in cgroup %s' % (pid, path) for pid in killed]
            done.append('cgroup %s (%s)' % (path, mechanism))
    return done, failed


def trial(mechanism, root, name):
    """Return True if a group with a 1 ms / 10 ms quota can be made at root/name and removed.

    The capability probe's test: the same steps as a run, on a throwaway group."""
    group = Group(mechanism, root, name, parent=None)
    try:
        group.create(1000, 10000)
        return group.limit() == (1000, 10000)
    except CgroupError:
        return False
    finally:
        try:
            group.remove()
        except CgroupError:
            pass
