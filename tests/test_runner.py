"""Runner machinery: machine lock, leftover state, signals, failing runs."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from repronet.emu import capabilities

from repronet.run import leftovers, runner
from repronet.run.results import read_manifest
from repronet.run.signals import Interrupted, SignalGuard

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK_SNIPPET = ('import sys; from repronet.run import leftovers\n'
                'with leftovers.machine_lock(sys.argv[1]):\n'
                '    print("inside", flush=True)\n')


def _run_locker(lock, **kwargs):
    return subprocess.run([sys.executable, '-c', LOCK_SNIPPET, str(lock)],
                          cwd=REPO, capture_output=True, text=True,
                          timeout=30, **kwargs)


def test_lock_free_is_taken_silently(tmp_path):
    out = _run_locker(tmp_path / 'lock')
    assert out.returncode == 0 and out.stdout == 'inside\n'


def test_lock_held_by_another_process_is_waited_for(tmp_path):
    lock = tmp_path / 'lock'
    holder = subprocess.Popen(['flock', str(lock), 'sleep', '1.5'])
    try:
        deadline = time.monotonic() + 10
        while not leftovers.lock_holders(str(lock)):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        started = time.monotonic()
        out = _run_locker(lock)
        assert out.returncode == 0
        assert out.stdout.startswith('waiting for %s' % lock)
        assert out.stdout.endswith('inside\n')
        assert time.monotonic() - started > 0.5
    finally:
        holder.wait(timeout=10)


def test_a_process_waiting_for_the_lock_is_not_a_holder(tmp_path):
    lock = tmp_path / 'lock'
    holder = subprocess.Popen(['flock', str(lock), 'sleep', '3'])
    waiter = None
    try:
        deadline = time.monotonic() + 10
        while not leftovers.lock_holders(str(lock)):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        waiter = subprocess.Popen(['flock', str(lock), 'true'])
        ino = ':%d ' % os.stat(lock).st_ino
        while not any('->' in line and ino in line
                      for line in open('/proc/locks').read().splitlines()):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert leftovers.lock_holders(str(lock)) == {holder.pid}
    finally:
        holder.wait(timeout=10)
        if waiter is not None:
            waiter.wait(timeout=10)


def test_lock_held_by_an_ancestor_is_used(tmp_path):
    lock = tmp_path / 'lock'
    out = subprocess.run(['flock', str(lock), sys.executable, '-c',
                          LOCK_SNIPPET, str(lock)], cwd=REPO,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert out.stdout.startswith('using %s held by parent process' % lock)
    assert out.stdout.endswith('inside\n')


def test_state_kills_recorded_processes_only_if_same_start_time(tmp_path):
    path = str(tmp_path / 'state.json')
    victim = subprocess.Popen(['sleep', '60'], start_new_session=True)
    bystander = subprocess.Popen(['sleep', '60'], start_new_session=True)
    try:
        state = leftovers.State(path)
        state.add_pid(victim.pid)
        # A recorded PID whose start time differs is a reused PID: spared.
        state.data['pids'].append([bystander.pid, 1])
        state.save()
        loaded = leftovers.State.load(path)
        assert [victim.pid, leftovers.start_time(victim.pid)] in \
            loaded.data['pids']
        done = loaded.clear()
        assert done == ['process %d' % victim.pid]
        assert victim.wait(timeout=5) == -signal.SIGKILL
        assert bystander.poll() is None
        assert not os.path.exists(path)
        assert leftovers.State.load(path) is None
    finally:
        for p in (victim, bystander):
            p.kill()
            p.wait()


def test_signals_become_interrupted_or_wait_while_held():
    before = signal.getsignal(signal.SIGINT)
    with SignalGuard() as guard:
        with pytest.raises(Interrupted) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        assert info.value.signum == signal.SIGTERM
        steps = []
        with pytest.raises(Interrupted) as info:
            with guard.held():          # e.g. Popen, then recording the PID
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                steps.append('the held block finished')
        assert steps == ['the held block finished']
        assert info.value.signum == signal.SIGINT and guard.pending is None
        guard.hold()                    # teardown: kept, never raised
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        assert guard.pending == signal.SIGTERM
        assert guard.release() == signal.SIGTERM and guard.pending is None
        with pytest.raises(Interrupted):    # after teardown, e.g. in the analysis
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert signal.getsignal(signal.SIGINT) is before


FAILING = '''
import sys
from mininet.topo import Topo
from repronet.run.runner import Experiment

class Tiny(Topo):
    def build(self):
        s1 = self.addSwitch('s1')
        self.addLink(self.addHost('h1'), s1)
        self.addLink(self.addHost('h2', cpu=0.3), s1)

class Failing(Experiment):
    """Fails in its second point after starting a node."""
    name = 'failing'
    def topology(self, params):
        return Tiny()
    def points(self, params):
        return [{'point': 0}, {'point': 1}]
    def run_point(self, ctx, point):
        ctx.start_node('h1', 'sleeper-p%d' % point['point'],
                       ['sleep', '60'])
        if point['point'] == 1:
            raise RuntimeError('deliberate failure')
        return {'ok': True}

sys.exit(Failing().main())
'''


@pytest.mark.root
def test_failing_experiment_tears_down_and_says_failed(tmp_path):
    caps = capabilities.probe()
    if not caps.cgroup_cpu:  # e.g. Debian's stock kernel boots cgroup v2 only
        pytest.skip(capabilities.explain('cgroup_cpu', caps))
    script = tmp_path / 'failing.py'
    script.write_text(textwrap.dedent(FAILING))
    out = tmp_path / 'run'
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run(['/usr/bin/python3', str(script), '--out', str(out),
                           '--switch', 'ovs'], env=env, capture_output=True,
                          text=True, timeout=100)
    assert proc.returncode == runner.EXIT_FAILED, proc.stderr
    manifest = read_manifest(out)
    assert manifest['status'] == 'failed'
    assert 'deliberate failure' in manifest['error']
    assert manifest['mechanisms']['hosts'] == 'CPULimitedHost'
    assert manifest['ended_at']
    nodes = {n['name']: n for n in manifest['nodes']}
    assert set(nodes) == {'sleeper-p0', 'sleeper-p1'}
    for node in nodes.values():
        assert node['returncode'] == -signal.SIGTERM
        assert not os.path.exists('/proc/%d' % node['pid'])
    records = [json.loads(x) for x in open(out / 'logs' / 'points.jsonl')]
    assert [r['point']['point'] for r in records] == [0]
    assert leftovers.find() == {'intfs': [], 'ovs_bridges': [],
                                'mininet_shells': [], 'state_file': False}


def test_datapath_choice_and_one_sentence_refusals():
    import dataclasses
    from repronet.emu import capabilities, network
    caps = dataclasses.replace(capabilities.probe(), ovs_kernel=False,
                               ovs_user=True)
    assert network.choose_datapath('lxbr', 'kernel', caps) is None
    assert network.choose_datapath('ovs', 'auto', caps) == 'user'
    assert network.choose_datapath('osken', 'user', caps) == 'user'
    with pytest.raises(network.NetworkError, match='kernel datapath'):
        network.choose_datapath('ovs', 'kernel', caps)
    kernel = dataclasses.replace(caps, ovs_kernel=True)
    assert network.choose_datapath('ovs', 'auto', kernel) == 'kernel'
    none = dataclasses.replace(caps, ovs_user=False)
    with pytest.raises(network.NetworkError) as info:
        network.choose_datapath('ovs', 'auto', none)
    assert str(info.value).count('.') >= 1 and '\n' not in str(info.value)
