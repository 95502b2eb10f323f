"""The machine-wide lock, a run's --workdir lock, and the removal of what a crashed run left.

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

A SIGKILLed runner takes its host shells and delay daemons with it (their
pty or stdin closes), but not what it started in other sessions: node
processes, the controller, and anything an experiment started in the
background in a host (``host.cmd('... &')``).  One such process keeps its
host's network namespace alive, and with it the namespace's iptables rules
and the switch-side veth end.  So the state also records each host's network
namespace (its ``/proc/PID/ns/net`` inode) with the host's interface names;
``clear()`` kills every process still in such a namespace, after checking
that the namespace still holds one of those interfaces (namespace inodes are
reused once freed).  With the last process gone the kernel deletes the
namespace, its rules and its veth pairs.  iptables chains that repronet names
(``REPRONET_*``) are removed from the root namespace too, should a version put
them there, and so are the capability probe's named namespaces
(``rncap-*``) older than ``PROBE_AGE`` seconds (left by a probe killed
mid-way; a younger one may be a live probe, which runs without the lock), and
the read-cost benchmark's (``rcost<PID>-*``) once that PID is gone, with what
still runs in them. ``repronet.run.namespaces`` finds them all.  CPU-limited hosts run in cgroups
under a parent named ``repronet`` (``repronet.emu.cpulimit``); a SIGKILLed
run leaves them, so ``clean()`` removes every group under that parent (killing
what is still in it, deepest group first) and the parent, and no other group.
``repronet clean`` is this module's command line.
"""

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys

from repronet.run import memory_folders, namespaces
from repronet.run.pids import cmdlines, same_process, signal_group, start_time  # noqa: F401 (start_time: for callers)

LOCK_PATH = '/run/repronet.lock'
STATE_PATH = '/run/repronet/state.json'
CHAIN_PREFIX = 'REPRONET_'
MININET_INTF = re.compile(r'^[^@\s]+-eth\d+$')


def lock_holders(path):
    """Return the PIDs that hold a flock on path, from /proc/locks.

    A process blocked waiting for the lock has a line too, marked ``->``: it is not a holder
    (counting it named waiters in "another run holds it" and could take a waiting ancestor
    for the holder)."""
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
        if 'FLOCK' in fields and '->' not in fields and len(fields) >= 6:
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


class LockBusy(RuntimeError):
    """Another process (not an ancestor) holds the machine lock."""

    def __init__(self, path, holders):
        super().__init__('%s is held by pid %s' % (
            path, ', '.join(map(str, sorted(holders))) or '?'))
        self.holders = holders


def workdir_lock(workdir):
    """Hold <workdir>/.lock for this process's life (the open file it returns); UsageError in
    one sentence if another run holds it or it cannot be made.

    The runner takes it right after the machine lock, before the results folder and the
    network: emulated runs already queue on the machine lock, but a simulated run takes
    none, and two runs in one --workdir would generate the same file sets and write the
    same scratch folders."""
    from repronet.usage import UsageError
    path = os.path.join(workdir, '.lock')
    try:
        os.makedirs(workdir, exist_ok=True)
        f = open(path, 'a')
    except OSError as e:
        raise UsageError('cannot lock --workdir %s: %s' % (workdir, e.strerror)) from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        holders = ', '.join(map(str, sorted(lock_holders(path)))) or '?'
        raise UsageError('another run (pid %s) is using --workdir %s; give this one another '
                         '--workdir' % (holders, workdir)) from None
    return f


@contextlib.contextmanager
def machine_lock(path=LOCK_PATH, wait=True):
    """Hold the machine-wide lock; say so when waiting for another run.

    With wait=False, raise LockBusy instead of waiting (``repronet clean``
    must not touch the network of a live run)."""
    held_by_parent = lock_holders(path) & _ancestors()
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
            if not wait:
                raise LockBusy(path, lock_holders(path))
            holders = ', '.join(map(str, sorted(lock_holders(path)))) or '?'
            print('waiting for %s: another run holds it (pid %s)'
                  % (path, holders), flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


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
        self.data = data or {'runner': os.getpid(),
                             'runner_started': start_time(os.getpid()),
                             'pids': [], 'intfs': [], 'bridges': [],
                             'ovs_bridges': [], 'namespaces': []}

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
        known = {entry[0] for entry in self.data.setdefault('namespaces', [])}
        for entry in namespaces.host_namespaces(network):
            if entry[0] not in known:
                self.data['namespaces'].append(entry)
        self.save()

    def runner_alive(self):
        """Return the recorded runner's PID if that very process still runs."""
        pid, started = self.data.get('runner'), self.data.get('runner_started')
        if same_process(pid, started) and pid != os.getpid():
            return pid
        return None

    def add_pid(self, pid, save=True):
        """Record one process (with its start time)."""
        entry = [pid, start_time(pid)]
        if pid and entry not in self.data['pids']:
            self.data['pids'].append(entry)
            if save:
                self.save()

    def clear(self):
        """Kill recorded processes, delete recorded links; return a summary."""
        done = []
        killed = []
        for pid, started in self.data['pids']:
            if not same_process(pid, started):
                continue
            signal_group(pid, signal.SIGKILL)
            killed.append(pid)
            done.append('process %d' % pid)
        by_ns = namespaces.pids_by_netns() if self.data.get('namespaces') else {}
        for ns, intfs, host in self.data.get('namespaces', []):
            for pid in namespaces.in_namespace(by_ns.get(ns, []), intfs):
                name = namespaces.comm(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                killed.append(pid)
                done.append('process %d (%s) in the namespace of host %s'
                            % (pid, name, host))
        namespaces.wait_gone(killed)
        done += _drop_root_chains()
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

    def save(self):
        """Write the state file atomically."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump(self.data, f)
        os.replace(tmp, self.path)


















def _drop_root_chains():
    """Remove iptables chains named REPRONET_* from the root namespace."""
    done = []
    for table in ('raw', 'filter', 'mangle', 'nat'):
        try:
            out = subprocess.run(['iptables-save', '-t', table],
                                 capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return done
        chains = [line[1:].split()[0] for line in out.stdout.splitlines()
                  if line.startswith(':' + CHAIN_PREFIX)]
        for line in out.stdout.splitlines():
            fields = line.split()
            if (line.startswith('-A ') and '-j' in fields
                    and fields[fields.index('-j') + 1] in chains):
                subprocess.run(['iptables', '-w', '-t', table, '-D']
                               + fields[1:], capture_output=True)
        for chain in chains:
            subprocess.run(['iptables', '-w', '-t', table, '-F', chain],
                           capture_output=True)
            subprocess.run(['iptables', '-w', '-t', table, '-X', chain],
                           capture_output=True)
            done.append('iptables chain %s (table %s)' % (chain, table))
    return done




def _stale_cgroups():
    """Remove the CPU-limit cgroups of a crashed run; say on stderr what
    could not be removed (a run then fails when it makes that group)."""
    from repronet.emu import cpulimit_cgroups
    done, failed = cpulimit_cgroups.remove_stale()
    for problem in failed:
        print('repronet clean: %s' % problem, file=sys.stderr, flush=True)
    return done


def clean(state_path=STATE_PATH, say=True, probe_age=namespaces.PROBE_AGE):
    """Remove what an earlier crashed run left; print (if say) and return
    what went. The caller holds the machine lock (no emulated run is alive)."""
    done = namespaces.probe_namespaces(probe_age) + namespaces.bench_namespaces()
    state = State.load(state_path)
    live = state.runner_alive() if state is not None else None
    if live:    # its network is in use, not left behind
        print('not cleaning %s: run %d that wrote it is still alive'
              % (state_path, live), file=sys.stderr, flush=True)
    elif state is not None:
        done += state.clear()
    if not live:
        done += _stale_cgroups()
    # a simulated run's, by its --workdir lock; an emulated run's unless its runner lives
    # (clean() runs under the machine lock: the runner's, `repronet clean`'s)
    done += memory_folders.remove_stale(machine_locked=not live)
    for name in _links():
        if MININET_INTF.match(name):
            subprocess.run(['ip', 'link', 'del', name], capture_output=True)
            done.append('interface %s' % name)
    if done and say:
        print('cleaned leftovers of an earlier run: %s' % ', '.join(done),
              file=sys.stderr, flush=True)
    return done


def find():
    """Return what Mininet-like leftovers exist now (for checks and tests)."""
    shells = [pid for pid, argv in cmdlines().items()
              if any(arg.startswith('mininet:') for arg in argv)]
    return {'intfs': sorted(n for n in _links() if MININET_INTF.match(n)),
            'ovs_bridges': _ovs_bridges(), 'mininet_shells': sorted(shells),
            'state_file': os.path.exists(STATE_PATH)}
