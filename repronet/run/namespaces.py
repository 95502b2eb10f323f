"""Processes by network namespace, for ``repronet.run.leftovers``.

A SIGKILLed run can leave processes nobody recorded by PID (a process an experiment started in
the background of a host shell, a node's child in its own session); each keeps its host's
network namespace, with the namespace's iptables rules and veth pair, alive.  The run records
each host's namespace as its ``/proc/PID/ns/net`` inode with the host's interface names, and
these helpers find the processes still in it.  Namespace inodes are reused once freed, so a
namespace counts as the run's only while it still holds one of those interfaces.

The capability probe's named namespaces (``rncap-*``, ``repronet.emu.capabilities``) are the
other kind found here: one is left when a probe is killed mid-way; and the read-cost
benchmark's (``rcost<PID>-s``/``-c``, ``benchmarks/dht_read_bench.py``), left with their
server and delay daemon when that benchmark is SIGKILLed.
"""

import os
import re
import signal
import subprocess
import time

NETNS_DIR = '/run/netns'
PROBE_PREFIX = 'rncap-'
PROBE_AGE = 300     # seconds: older rncap-* namespaces are no live probe's (it takes seconds)
BENCH_NAME = re.compile(r'rcost(\d+)-[sc]$')   # the PID of the benchmark that made it


def comm(pid):
    """Return the command name of pid ('?' if gone)."""
    try:
        with open('/proc/%d/comm' % pid) as f:
            return f.read().strip()
    except OSError:
        return '?'


def netns(pid):
    """Return the network namespace inode of pid, or None."""
    try:
        link = os.readlink('/proc/%d/ns/net' % pid)
    except OSError:
        return None
    return int(link[len('net:['):-1]) if link.startswith('net:[') else None


def host_namespaces(network):
    """Return [netns inode, interface names, host name] of each host of a
    built network."""
    out = []
    for host in getattr(getattr(network, 'net', None), 'hosts', None) or []:
        if getattr(host, 'isRemote', False):    # its PID is another server's
            continue
        ns = netns(host.pid) if getattr(host, 'pid', None) else None
        intfs = sorted(i.name for i in host.intfList() if i.name != 'lo')
        if ns is not None and intfs and ns != netns(1):
            out.append([ns, intfs, host.name])
    return out


def pids_by_netns():
    """Return {netns inode: [pids]} of every process but this one."""
    out = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit() and int(entry) != os.getpid():
            ns = netns(int(entry))
            if ns is not None:
                out.setdefault(ns, []).append(int(entry))
    return out


def net_devices(pid):
    """Return the interface names pid sees in its network namespace."""
    try:
        with open('/proc/%d/net/dev' % pid) as f:
            return {line.split(':')[0].strip() for line in f.readlines()[2:]}
    except OSError:
        return set()


def in_namespace(pids, intfs):
    """Return pids (all in one network namespace) if that namespace still holds
    one of intfs: a freed namespace inode can be reused by an unrelated one."""
    if pids and set(intfs) & net_devices(pids[0]):
        return pids
    return []


def wait_gone(pids, timeout=5.0):
    """Wait until the killed pids have exited (their namespaces go with them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(os.path.exists('/proc/%d' % p) and
                   proc_state(p) not in ('Z', None) for p in pids):
            return
        time.sleep(0.05)


def proc_state(pid):
    """Return the one-letter state of pid, or None once it is gone."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _named(match):
    """Sorted names of the named network namespaces (``ip netns``) that match."""
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if match(n))
    except OSError:
        return []


def _delete(name):
    """``ip netns del name``; True when it went."""
    return subprocess.run(['ip', 'netns', 'del', name], capture_output=True).returncode == 0


def probe_namespaces(min_age):
    """Delete the capability probe's named namespaces (``rncap-*``, see
    repronet.emu.capabilities) older than min_age seconds: a probe killed
    mid-way leaves one; a younger one may be another process's live probe."""
    done = []
    for name in _named(lambda n: n.startswith(PROBE_PREFIX)):
        try:    # the nsfs inode behind the mount is made when the ns is named
            age = time.time() - os.stat(os.path.join(NETNS_DIR, name)).st_mtime
        except OSError:
            continue
        if age >= min_age and _delete(name):
            done.append('namespace %s (a capability probe\'s, %.0f s old)'
                        % (name, age))
    return done


def bench_namespaces():
    """Delete the read-cost benchmark's namespaces whose benchmark process is gone, and
    SIGKILL what still runs in them (its index server, its delay daemon): a benchmark that
    is alive (its PID in the name exists) keeps its own."""
    done = []
    for name in _named(BENCH_NAME.match):
        if os.path.exists('/proc/%s' % BENCH_NAME.match(name).group(1)):
            continue
        listed = subprocess.run(['ip', 'netns', 'pids', name], capture_output=True, text=True)
        pids = [int(p) for p in listed.stdout.split() if p.isdigit()]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_gone(pids)
        if _delete(name):
            done.append('namespace %s (a killed read-cost benchmark\'s, %d processes)'
                        % (name, len(pids)))
    return done
