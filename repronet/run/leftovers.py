"""The machine-wide lock and the removal of what a crashed run left behind.

Two emulations on one machine would share its CPUs and Mininet's interface
names, so every run holds ``/run/repronet.lock`` (``fcntl.flock``) from before
its cleanup until its teardown is done.  A run whose ancestor already holds
the lock (``flock /run/repronet.lock pytest ...``, or a pytest fixture that
then starts the run as a subprocess) runs under that lock instead of waiting
for itself forever; ``/proc/locks`` says which process holds it.

While a network is up, the runner keeps ``/run/repronet/state.json`` with
everything a crash would leave: the PIDs (with their start times, so a reused
PID is never killed) of host shells, switches, the controller and node
processes, the switch-side interfaces and the bridges.  Teardown and the next
run's start both call ``State.clear()``, which kills the recorded processes
still alive (their process groups too), deletes recorded bridges and
interfaces and removes the file.  ``clean()`` also deletes Mininet-style
``*-eth*`` interfaces in the root namespace, which only a crashed run can have
left while we hold the lock.  Processes are found by recorded PID, never by a
name pattern.
"""

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys

LOCK_PATH = '/run/repronet.lock'
STATE_PATH = '/run/repronet/state.json'
MININET_INTF = re.compile(r'^[^@\s]+-eth\d+$')


def _lock_holders(path):
    """Return the PIDs that hold a flock on path, from /proc/locks."""
    try:
        st = os.stat(path)
        with open('/proc/locks') as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    dev_ino = ':%d' % st.st_ino
    holders = set()
    for line in lines:
        fields = line.split()
        if 'FLOCK' in fields and len(fields) >= 6:
            i = fields.index('FLOCK')
            pid, where = fields[i + 3], fields[i + 4]
            if where.endswith(dev_ino) and pid.isdigit():
                holders.add(int(pid))
    return holders


def _ancestors():
    """Return the PIDs of this process's ancestors."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        try:
            with open('/proc/%d/stat' % pid) as f:
                pid = int(f.read().rsplit(')', 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        pids.add(pid)
    return pids


@contextlib.contextmanager
def machine_lock(path=LOCK_PATH):
    """Hold the machine-wide lock; say so when waiting for another run."""
    held_by_parent = _lock_holders(path) & _ancestors()
    if held_by_parent:
        print('using %s held by parent process %s' % (
            path, ', '.join(map(str, sorted(held_by_parent)))), flush=True)
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holders = ', '.join(map(str, sorted(_lock_holders(path)))) or '?'
            print('waiting for %s: another run holds it (pid %s)'
                  % (path, holders), flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _start_time(pid):
    """Return the start time of pid (clock ticks since boot) or None."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return int(f.read().rsplit(')', 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _links():
    """Return the names of the root namespace's interfaces."""
    out = subprocess.run(['ip', '-o', 'link', 'show'],
                         capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(': ', 2)
        if len(parts) == 3:
            names.append(parts[1].split('@')[0])
    return names


def _ovs_bridges():
    """Return the OVS bridge names, or [] if OVS does not answer."""
    try:
        out = subprocess.run(['ovs-vsctl', '--timeout=5', 'list-br'],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return out.stdout.split() if out.returncode == 0 else []


class State:
    """What the live run would leave behind if it crashed, kept on disk."""

    def __init__(self, path=STATE_PATH, data=None):
        self.path = path
        self.data = data or {'runner': os.getpid(), 'pids': [], 'intfs': [],
                             'bridges': [], 'ovs_bridges': []}

    @classmethod
    def load(cls, path=STATE_PATH):
        """Return the state a previous run left, or None."""
        try:
            with open(path) as f:
                return cls(path, json.load(f))
        except (OSError, ValueError):
            return None

    def record(self, network):
        """Record a (possibly half-built) network's leftovers."""
        found = network.leftovers()
        for pid in found['pids']:
            self.add_pid(pid, save=False)
        for key in ('intfs', 'bridges', 'ovs_bridges'):
            self.data[key] = sorted(set(self.data[key]) | set(found[key]))
        self._save()

    def add_pid(self, pid, save=True):
        """Record one process (with its start time)."""
        entry = [pid, _start_time(pid)]
        if pid and entry not in self.data['pids']:
            self.data['pids'].append(entry)
            if save:
                self._save()

    def clear(self):
        """Kill recorded processes, delete recorded links; return a summary."""
        done = []
        for pid, started in self.data['pids']:
            if started is None or _start_time(pid) != started:
                continue
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            done.append('process %d' % pid)
        existing = _ovs_bridges()
        for br in self.data['ovs_bridges']:
            if br in existing:
                subprocess.run(['ovs-vsctl', '--timeout=10', '--if-exists',
                                'del-br', br], capture_output=True)
                done.append('OVS bridge %s' % br)
        links = _links()
        for name in self.data['bridges'] + self.data['intfs']:
            if name in links:
                subprocess.run(['ip', 'link', 'del', name],
                               capture_output=True)
                done.append('interface %s' % name)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        return done

    def _save(self):
        """Write the state file atomically."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump(self.data, f)
        os.replace(tmp, self.path)


def clean(state_path=STATE_PATH):
    """Remove what an earlier crashed run left; print and return what went."""
    done = []
    state = State.load(state_path)
    if state is not None:
        done += state.clear()
    for name in _links():
        if MININET_INTF.match(name):
            subprocess.run(['ip', 'link', 'del', name], capture_output=True)
            done.append('interface %s' % name)
    if done:
        print('cleaned leftovers of an earlier run: %s' % ', '.join(done),
              file=sys.stderr, flush=True)
    return done


def find():
    """Return what Mininet-like leftovers exist now (for checks and tests)."""
    shells = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % entry, 'rb') as f:
                cmd = f.read().split(b'\0')
        except OSError:
            continue
        if any(arg.startswith(b'mininet:') for arg in cmd):
            shells.append(int(entry))
    return {'intfs': sorted(n for n in _links() if MININET_INTF.match(n)),
            'ovs_bridges': _ovs_bridges(), 'mininet_shells': sorted(shells),
            'state_file': os.path.exists(STATE_PATH)}
