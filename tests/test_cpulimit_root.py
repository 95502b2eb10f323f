"""Per-host CPU limits on a real Mininet network, on whichever cgroup version this kernel has.

A busy loop on a host limited to 0.2 (and 0.5) of one core measures its own CPU time over
wall time, which must come out within 10 % of the limit; the loop runs once as a node process
(``host.popen``, which joins the group before exec) and once through the host's shell
(``host.cmd``, whose shell is in the group).  Also: an unlimited topology makes no group, the
groups go with ``Network.stop()``, and ``repronet clean`` removes the groups a SIGKILLed run
left (killing what is still in them) without touching a group that is not repronet's.
The same file runs unchanged on cgroup v2 (the VM) and v1 (this machine): the probe picks.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from repronet.emu import capabilities, cpulimit_cgroups
from repronet.run import leftovers
from tests.test_cli_root import REPO, repronet

pytestmark = pytest.mark.root

BUSY = '''
import json, sys, time
wall0, cpu0 = time.monotonic(), time.process_time()
while time.monotonic() - wall0 < float(sys.argv[1]):
    pass
wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
print(json.dumps({'fraction': cpu / wall, 'cgroup': open('/proc/self/cgroup').read()}))
'''

CRASH_EXPERIMENT = '''
import sys
import time

from mininet.topo import Topo

from repronet.run.runner import Experiment


class Pair(Topo):
    def build(self):
        s1 = self.addSwitch('s1')
        self.addLink(self.addHost('h1', cores=0.2), s1)
        self.addLink(self.addHost('h2'), s1)


class Crash(Experiment):
    name = 'crash'

    def topology(self, params):
        return Pair()

    def run_point(self, ctx, point):
        ctx.host('h1').cmd('setsid sleep 602 </dev/null >/dev/null 2>&1 &')
        print('POINT-RUNNING', flush=True)
        time.sleep(600)


if __name__ == '__main__':
    sys.exit(Crash().main())
'''


@pytest.fixture
def caps():
    """This machine's capabilities; skip where CPU limits cannot work. Cleans around."""
    found = capabilities.probe()
    if not found.cgroup_cpu:
        pytest.skip(capabilities.explain('cgroup_cpu', found))
    leftovers.clean(say=False)
    yield found
    leftovers.clean(say=False)


def _topo(**h1):
    """h1 (with params h1) and h2 (unlimited) on one switch."""
    from mininet.topo import Topo

    class Pair(Topo):
        def build(self):
            s1 = self.addSwitch('s1')
            self.addLink(self.addHost('h1', **h1), s1)
            self.addLink(self.addHost('h2'), s1)
    return Pair()


def _cgroups_of(pid):
    """The /proc/PID/cgroup text of a process."""
    with open('/proc/%d/cgroup' % pid) as f:
        return f.read()


def _busy(host, via, seconds, tmp_path):
    """Run the busy loop on host through popen or the shell; return its JSON report."""
    script = tmp_path / 'busy.py'
    script.write_text(BUSY)
    if via == 'popen':
        proc = host.popen([sys.executable, str(script), str(seconds)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    else:
        out = host.cmd(sys.executable, str(script), str(seconds))
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.timeout(120)
@pytest.mark.parametrize('cores, via', [(0.2, 'popen'), (0.5, 'popen'), (0.2, 'cmd')])
def test_a_limited_host_gets_its_share_of_one_core(caps, tmp_path, cores, via):
    from repronet.emu import network
    net = network.Network(_topo(cores=cores), 'lxbr', 'auto', caps).start()
    try:
        record = net.mechanisms()['cpu_limits']
        group = record['groups']['h1']['path']
        h1, h2 = net.net.get('h1'), net.net.get('h2')
        assert record['mechanism'] == caps.cgroup_cpu_mechanism
        assert record['hosts'] == {'h1': cores} and record['period_us'] == 10000
        assert net.mechanisms()['hosts'] == 'CPULimitedHost'
        assert h1.pid in cpulimit_cgroups.Group(
            record['mechanism'], os.path.dirname(os.path.dirname(group)), 'h1').pids()
        assert '/repronet/' not in _cgroups_of(h2.pid)
        report = _busy(h1, via, 3, tmp_path)
        print('h1 at cores=%g via %s: %.4f of one core' % (cores, via, report['fraction']))
        assert '/repronet/h1' in report['cgroup']
        assert 0.9 * cores <= report['fraction'] <= 1.1 * cores
    finally:
        net.stop()
    assert not os.path.exists(group)
    assert not os.path.exists(os.path.dirname(group))      # the repronet parent too


@pytest.mark.timeout(120)
def test_an_unlimited_topology_makes_no_group(caps):
    from repronet.emu import network
    net = network.Network(_topo(), 'lxbr', 'auto', caps).start()
    try:
        assert net.mechanisms()['cpu_limits'] is None
        assert net.mechanisms()['hosts'] == 'Host'
        assert '/repronet' not in _cgroups_of(net.net.get('h1').pid)
        for root in cpulimit_cgroups.find().values():
            assert not os.path.exists(os.path.join(root, 'repronet'))
    finally:
        net.stop()


def _wait_for(proc, text):
    """Read proc's stdout until a line holds text; return what was read."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            break
    return ''.join(seen)


@pytest.mark.timeout(240)
def test_clean_removes_the_groups_of_a_sigkilled_run(caps, tmp_path):
    experiment = tmp_path / 'crash.py'
    experiment.write_text(CRASH_EXPERIMENT)
    run = subprocess.Popen([sys.executable, str(experiment), '--switch', 'lxbr',
                            '--out', str(tmp_path / 'run')],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO)))
    strays = []
    others = None
    try:
        seen = _wait_for(run, 'POINT-RUNNING')
        assert 'POINT-RUNNING' in seen, seen
        with open(tmp_path / 'run' / 'manifest.json') as f:
            record = json.load(f)['mechanisms']['cpu_limits']
        assert record['hosts'] == {'h1': 0.2}, record
        group = record['groups']['h1']['path']
        parent, root = os.path.dirname(group), os.path.dirname(os.path.dirname(group))
        assert cpulimit_cgroups.Group(record['mechanism'], root, 'h1').pids()

        run.kill()                      # SIGKILL: no teardown at all
        run.wait()
        assert os.path.isdir(group)
        # a process in the stale group but in no recorded namespace (only the group finds it)
        strays.append(subprocess.Popen(['sleep', '603']))
        cpulimit_cgroups.Group(record['mechanism'], root, 'h1').add(strays[0].pid)
        # a group that is not repronet's, with a process in it: clean must leave both alone
        others = cpulimit_cgroups.Group(record['mechanism'], root, 'rntest-others-%d'
                                        % os.getpid(), parent=None)
        os.mkdir(others.path)
        strays.append(subprocess.Popen(['sleep', '604']))
        others.add(strays[1].pid)

        out = repronet('clean')
        assert out.returncode == 0, out.stderr
        assert '  cgroup %s (%s)' % (group, record['mechanism']) in out.stdout, out.stdout
        assert '  process %d in cgroup %s' % (strays[0].pid, group) in out.stdout, out.stdout
        assert strays[0].wait(timeout=10) == -signal.SIGKILL
        assert not os.path.exists(group) and not os.path.exists(parent)
        assert strays[1].poll() is None and others.pids() == [strays[1].pid]
        again = repronet('clean')
        assert again.returncode == 0 and 'nothing to clean' in again.stdout, again.stdout
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for proc in strays:
            proc.kill()
            proc.wait()
        if others is not None and os.path.isdir(others.path):
            deadline = time.monotonic() + 5
            while others.pids() and time.monotonic() < deadline:
                time.sleep(0.05)
            os.rmdir(others.path)
