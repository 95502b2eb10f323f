"""One RunContext for every backend: the shared part is written once (``repronet.run.context``)
and each backend fills in the whole of its part (``repronet.emu.context``,
``repronet.sim.context``, ``repronet.cluster.network``), so run_point sees the same calls.

The last test drives the shared part (names, the barrier, stopping) on the simulation
backend with real node programs (``workloads.probe``), no root needed.
"""

import inspect
import json
from types import SimpleNamespace as Params

import pytest
from mininet.topo import Topo

from repronet.cluster.network import ClusterContext
from repronet.emu import linkemu
from repronet.emu.context import EmuContext
from repronet.emu.process import LogReady
from repronet.run import backends
from repronet.run.context import RunContext
from repronet.sim.backend import SimBackend
from repronet.sim.context import SimContext

CONTEXTS = (EmuContext, SimContext, ClusterContext)
SHARED = ('start_node', 'release', 'stop_nodes', 'timed', 'heartbeat')
PROBE = ['/usr/bin/python3', '-m', 'workloads.probe']


def _backend_part():
    """The methods RunContext leaves to a backend (their body raises NotImplementedError)."""
    return sorted(name for name, fn in vars(RunContext).items()
                  if inspect.isfunction(fn) and 'raise NotImplementedError'
                  in inspect.getsource(fn))


def test_every_backend_fills_in_the_whole_backend_part():
    part = _backend_part()
    assert {'host', '_start', '_stop_all', 'clock', 'sleep', 'kill', 'link_status',
            'packets_sent'} <= set(part)
    for cls in CONTEXTS:
        missing = [name for name in part if getattr(cls, name) is getattr(RunContext, name)]
        assert not missing, '%s leaves %s to RunContext' % (cls.__name__, missing)


def test_the_shared_part_is_not_written_again_by_a_backend():
    for cls in CONTEXTS:
        again = [name for name in SHARED if getattr(cls, name) is not getattr(RunContext, name)]
        assert not again, '%s writes %s again' % (cls.__name__, again)


class _Pair(Topo):
    """a - s1 - b, 1 ms each way on each link."""

    def build(self):
        switch = self.addSwitch('s1')
        self.addLink(self.addHost('a'), switch, delay='1ms')
        self.addLink(self.addHost('b'), switch, delay='1ms')


def test_names_barrier_and_stop_on_the_simulation_backend(tmp_path):
    ctx = SimContext(SimBackend(_Pair(), seed=1, log_dir=tmp_path), params=None,
                     results_folder=None)
    reflectors = [ctx.start_node('b', 'reflect-%d' % port, PROBE + [
        'reflect', '--port', port], barrier=True) for port in (9000, 9001)]
    with pytest.raises(ValueError, match='already used'):
        ctx.start_node('b', 'reflect-9000', PROBE + ['reflect', '--port', 9002])
    ctx.release(reflectors)
    sender = ctx.start_node(ctx.host('a'), 'send', PROBE + [
        'send', '--dst', ctx.host('b').IP(), '--port', 9001, '--count', 3,
        '--interval', 0.01, '--drain', 0.1], ready=None)
    assert sender.wait(timeout=5) == 0
    echoes = [json.loads(line) for line in open(sender.log_path)]
    assert [r['rtt_us'] for r in echoes if r['event'] == 'echo'] == [4000.0] * 3
    assert ctx.nodes == reflectors + [sender]
    stopped = ctx.stop_nodes()
    assert list(stopped) == ['send', 'reflect-9001', 'reflect-9000']     # last started first
    assert stopped['send'] == 0 and all(n.returncode is not None for n in reflectors)


def test_what_only_real_hosts_have_is_nothing_in_simulation(tmp_path):
    """An experiment asks the backend (fidelity does): no sysctls, no cost, no link report,
    and only node programs with simulate() run there."""
    ctx = SimContext(SimBackend(_Pair(), seed=1, log_dir=tmp_path), params=None,
                     results_folder=None)
    assert ctx.sysctls(ctx.host('a'), ['net.ipv4.tcp_rmem']) is None
    assert ctx.cost_meter(['a', 'b']).measure() == {}
    assert ctx.link_report() is None
    sim, emu = Params(backend='sim'), Params(backend='emu')
    assert backends.runs(sim, PROBE + ['reflect']) and backends.runs(emu, PROBE)
    for argv in (['ping', '-c', 1], ['iperf3', '-s'], ['/usr/bin/python3', '-m', 'json.tool']):
        assert not backends.runs(sim, argv) and backends.runs(emu, argv), argv


def test_the_emulation_reports_its_planned_links_and_measures_the_machine():
    """Without root: a linkdelay plan that was never installed has paths but no daemons yet,
    and the cost meter reads /proc/stat as the CPU monitor does."""
    caps = Params(netem=False, htb=True, tbf=True, nfqueue=True, iptables_statistic=True)
    network = Params(net=None, caps=caps, links=linkemu.plan(_Pair(), caps))
    ctx = EmuContext(network, params=None, results_folder=None, state=None)
    report = ctx.link_report()
    assert report['mechanism'] == 'linkdelay' and report['daemons'] == {}
    assert [(p['dst'], p['delay_ms_max']) for p in report['paths']] == [('a', 2.0), ('b', 2.0)]
    cost = ctx.cost_meter(['a', 'b']).measure()
    assert cost['daemon_cpu_s'] == 0 and 0 <= cost['machine_busy'] <= 1
