"""The repronet command line on real Mininet runs: clean after a SIGKILL, compare two runs."""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from repronet.run import leftovers, namespaces
from tests import nobody

REPO = pathlib.Path(__file__).resolve().parents[1]

# A real experiment whose point never ends on its own: delayed links (so linkdelay daemons
# run), a tracked node process, and a process started in the background of a host shell,
# which nothing tracks by PID (it keeps h2's namespace, rules and veth alive).
CRASH_EXPERIMENT = '''
import sys
import time

from mininet.topo import Topo

from repronet.run.runner import Experiment


class Pair(Topo):
    def build(self):
        s1 = self.addSwitch('s1')
        for name in ('h1', 'h2'):
            self.addLink(self.addHost(name), s1, delay='1ms')


class Crash(Experiment):
    name = 'crash'

    def topology(self, params):
        return Pair()

    def run_point(self, ctx, point):
        ctx.start_node('h1', 'sleeper', ['sleep', '600'], suffix='.txt')
        ctx.host('h2').cmd('setsid sleep 601 </dev/null >/dev/null 2>&1 &')
        print('POINT-RUNNING', flush=True)
        time.sleep(600)


if __name__ == '__main__':
    sys.exit(Crash().main())
'''


def repronet(*args, user=None, timeout=300):
    """Run this checkout's `python -P -m repronet ARGS`."""
    repo = nobody.checkout() if user == 'nobody' else REPO
    env = dict(os.environ, PYTHONPATH=str(repo), PYTHONDONTWRITEBYTECODE='1')
    argv = [sys.executable, '-P', '-m', 'repronet'] + list(args)
    return subprocess.run((nobody.AS_NOBODY if user == 'nobody' else []) + argv,
                          capture_output=True,
                          text=True, cwd='/', env=env, timeout=timeout)


def processes():
    """Return {pid: (start time, parent, netns inode)} of every process."""
    out = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open('/proc/%d/stat' % pid) as f:
                fields = f.read().rsplit(')', 1)[1].split()
            ns = os.readlink('/proc/%d/ns/net' % pid)
        except (OSError, IndexError):
            continue
        if fields[0] != 'Z':
            out[pid] = (int(fields[19]), int(fields[1]), int(ns[5:-1]))
    return out


def descendants(root, table):
    """Return {pid: start time} of root and everything below it."""
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            found[pid] = table[pid][0]
        todo += [p for p, (_, parent, _) in table.items() if parent == pid]
    return found


def remaining(pids, namespaces, state):
    """Return what of the crashed run is still there (empty when clean)."""
    table = processes()
    left = ['process %d' % p for p, started in pids.items()
            if p in table and table[p][0] == started]
    left += ['process %d in namespace %d' % (p, info[2]) for p, info in table.items()
             if info[2] in namespaces]
    links = subprocess.run(['ip', '-o', 'link', 'show'], capture_output=True,
                           text=True).stdout
    links = {line.split(': ')[1].split('@')[0] for line in links.splitlines()}
    left += ['interface ' + n for n in state['intfs'] + state['bridges'] if n in links]
    bridges = subprocess.run(['ovs-vsctl', 'list-br'], capture_output=True,
                             text=True).stdout.split()
    left += ['OVS bridge ' + b for b in state['ovs_bridges'] if b in bridges]
    rules = subprocess.run(['iptables-save'], capture_output=True, text=True).stdout
    left += ['root iptables: ' + l for l in rules.splitlines() if 'REPRONET' in l]
    return left


def _cmdline(pid):
    """Return a process's argv, or [] once it is gone."""
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            return [a.decode(errors='replace') for a in f.read().split(b'\0') if a]
    except OSError:
        return []


@pytest.mark.root
@pytest.mark.timeout(240)
@pytest.mark.parametrize('switch', ['lxbr', 'ovs', 'osken'])
def test_clean_removes_what_a_sigkilled_run_left(tmp_path, switch):
    assert repronet('clean').returncode == 0       # start from a clean machine
    experiment = tmp_path / 'crash.py'
    experiment.write_text(CRASH_EXPERIMENT)
    run = subprocess.Popen([sys.executable, str(experiment), '--switch', switch,
                            '--out', str(tmp_path / 'run')],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO)))
    seen = []
    for line in run.stdout:
        seen.append(line)
        if 'POINT-RUNNING' in line:
            break
    assert 'POINT-RUNNING' in ''.join(seen), ''.join(seen)
    with open(leftovers.STATE_PATH) as f:
        state = json.load(f)
    pids = descendants(run.pid, processes())
    pids.update({pid: started for pid, started in state['pids'] if started})
    namespaces = {ns for ns, _, _ in state['namespaces']}
    assert len(namespaces) == 2
    assert state['ovs_bridges' if switch != 'lxbr' else 'bridges'] == ['s1']
    names = {open('/proc/%d/comm' % p).read().strip() for p in pids}
    assert {'sleep', 'linkdelay'} <= names, names
    if switch == 'osken':
        assert 'osken-manager' in names, names

    live = repronet('clean')         # the run is alive: clean must not touch it
    assert live.returncode == 1 and 'still alive' in live.stderr, live.stderr
    assert len(remaining(pids, namespaces, state)) > 4

    run.kill()                       # SIGKILL: no teardown at all
    run.wait()
    before = remaining(pids, namespaces, state)
    assert any('namespace' in item for item in before), before   # h2's background sleep
    assert ('OVS bridge s1' if switch != 'lxbr' else 'interface s1') in before, before
    # the background sleep keeps h2's namespace, and its delay rules, alive
    # (h2's own sleep: a host shell of the killed run may be exiting at this moment, and
    # nsenter into a process that is gone prints nothing)
    h2 = next(pid for pid in (int(item.split()[1]) for item in before if 'namespace' in item)
              if _cmdline(pid) == ['sleep', '601'])
    rules = subprocess.run(['nsenter', '--net=/proc/%d/ns/net' % h2, 'iptables-save',
                            '-t', 'raw'], capture_output=True, text=True).stdout
    assert 'NFQUEUE' in rules, rules

    out = repronet('clean')
    assert out.returncode == 0, out.stderr
    assert 'removed' in out.stdout, out.stdout
    assert ('OVS bridge s1' if switch != 'lxbr' else 'interface s1') in out.stdout
    assert 'in the namespace of host h2' in out.stdout, out.stdout
    assert re.search(r'^  process \d+ \(sleep\)$', out.stdout, re.M), out.stdout  # node
    deadline = time.monotonic() + 5
    while remaining(pids, namespaces, state) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert remaining(pids, namespaces, state) == []
    assert not os.path.exists(leftovers.STATE_PATH)
    again = repronet('clean')
    assert again.returncode == 0 and 'nothing to clean' in again.stdout, again.stdout


@pytest.mark.root
@pytest.mark.timeout(300)
def test_two_smoke_runs_compared_and_analysed_without_root(tmp_path):
    first = repronet('run', 'smoke', '--scale', 'smoke', '--out', str(tmp_path / 'a'))
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    second = subprocess.run([sys.executable, str(REPO / 'topologies' / 'smoke.py'),
                             '--scale', 'smoke', '--out', str(tmp_path / 'b')],
                            capture_output=True, text=True, timeout=240)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    out = repronet('compare', str(tmp_path / 'a'), str(tmp_path / 'b'))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert 'spread: sample standard deviation over repetitions' in text
    assert '== goodput.csv' in text and '== ping.csv' in text
    row = next(l for l in text.splitlines() if l.startswith('configured_mbps=20.0')
               and ' goodput_mbps ' in l).split()
    mean_a, n_a, mean_b, n_b, ratio = (float(row[2]), int(row[4]), float(row[5]),
                                       int(row[7]), float(row[8]))
    assert n_a == n_b == 2      # --scale smoke repeats twice
    assert 15 < mean_a < 20 and 15 < mean_b < 20 and 0.8 < ratio < 1.25

    # analysis needs no root: rebuild a copy as 'nobody', byte-identical tables
    copy = pathlib.Path(tempfile.mkdtemp(prefix='repronet-cli-')) / 'a'
    try:
        shutil.copytree(tmp_path / 'a', copy)
        os.chmod(copy.parent, 0o755)
        subprocess.run(['chown', '-R', '65534:65534', str(copy)], check=True)
        tables = {p.name: p.read_bytes() for p in (copy / 'tables').glob('*.csv')}
        for p in (copy / 'tables').glob('*.csv'):
            p.unlink()
        rebuilt = repronet('analyse', str(copy), user='nobody')
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert {p.name: p.read_bytes() for p in (copy / 'tables').glob('*.csv')} == tables
    finally:
        shutil.rmtree(copy.parent)


@pytest.mark.root
def test_clean_removes_old_capability_probe_namespaces():
    old, young = 'rncap-clitest%d' % os.getpid(), 'rncap-cliyoung%d' % os.getpid()
    subprocess.run(['ip', 'netns', 'add', old], check=True)
    try:
        time.sleep(2.5)
        subprocess.run(['ip', 'netns', 'add', young], check=True)
        done = namespaces.probe_namespaces(min_age=2)
        assert any(item.startswith('namespace %s ' % old) for item in done), done
        assert not os.path.exists('/run/netns/' + old)
        assert os.path.exists('/run/netns/' + young)    # may be a live probe: kept
    finally:
        for name in (old, young):
            subprocess.run(['ip', 'netns', 'del', name], capture_output=True)


@pytest.mark.root
def test_clean_removes_a_killed_read_cost_benchmarks_namespaces_and_processes():
    """A name whose benchmark PID is gone goes, with the process inside it; one named after a
    live process (this test's) stays."""
    dead = 4194304 + 1      # above pid_max's ceiling: never a live process
    stale, live = 'rcost%d-s' % dead, 'rcost%d-c' % os.getpid()
    for name in (stale, live):
        subprocess.run(['ip', 'netns', 'add', name], check=True)
    inside = subprocess.Popen(['ip', 'netns', 'exec', stale, 'sleep', '300'])
    try:
        for _ in range(100):        # until the sleep has entered the namespace
            if subprocess.run(['ip', 'netns', 'pids', stale], capture_output=True,
                              text=True).stdout.split():
                break
            time.sleep(0.05)
        done = namespaces.bench_namespaces()
        assert done == ["namespace %s (a killed read-cost benchmark's, 1 processes)" % stale]
        assert inside.wait(5) == -9
        assert not os.path.exists('/run/netns/' + stale)
        assert os.path.exists('/run/netns/' + live)
    finally:
        inside.kill()
        for name in (stale, live):
            subprocess.run(['ip', 'netns', 'del', name], capture_output=True)
