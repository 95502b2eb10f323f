"""Root tests of link emulation on a real Mininet network (whatever mechanism this kernel needs).

h1 - s1 - h2 on Linux bridges; the UDP probe (workloads/probe.py) measures with the
application clock. The delay check uses the benchmark's target (3 % + 0.2 ms of the RTT) on the
median, which shared-machine noise hardly moves; the loss check uses the 99.9 % binomial
interval so that the test itself fails by chance once in a thousand runs, not once in a hundred.
"""

import json
import os
import statistics
import sys
import time

import pytest

pytestmark = pytest.mark.root


def _topo(**link):
    """h1 - s1 - h2 with the given keywords on h1-s1."""
    from mininet.topo import Topo

    class Pair(Topo):
        def build(self):
            s1 = self.addSwitch('s1')
            self.addLink(self.addHost('h1'), s1, **link)
            self.addLink(self.addHost('h2'), s1)
    return Pair()


def _probe(net, log_dir, count, interval, src='h1', dst='h2'):
    """Run reflector on dst and sender on src; return (echo RTTs in ms, one-way stream record)."""
    from repronet.emu.process import LogReady, NodeProcess
    h1, h2 = net.get(src), net.get(dst)
    probe = [sys.executable, '-m', 'workloads.probe']
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(__file__)))
    reflector = NodeProcess(h2, 'reflect', probe + ['reflect', '--port', 9000], log_dir,
                            ready=LogReady(), env=env).start()
    try:
        reflector.wait_ready(10)
        sender = NodeProcess(h1, 'send', probe + ['send', '--dst', h2.IP(), '--port', 9000,
                                                  '--count', count, '--interval', interval,
                                                  '--drain', 1.0], log_dir, env=env).start()
        assert sender.wait(timeout=60) == 0
        done = LogReady('stream')
        for _ in range(250):
            if done.check(reflector):
                break
            time.sleep(0.02)
    finally:
        reflector.stop()
    with open(sender.log_path) as f:
        rtts = [json.loads(line)['rtt_us'] / 1000.0 for line in f if '"echo"' in line]
    with open(reflector.log_path) as f:
        stream = [json.loads(line) for line in f if '"stream"' in line]
    return rtts, stream[0]


def _network(topo):
    """Start a Network (lxbr) for topo; the caller stops it."""
    from repronet.emu import capabilities, network
    return network.Network(topo, 'lxbr', 'auto', capabilities.probe()).start()


def test_delay_20ms_one_way_gives_40ms_rtt(tmp_path):
    """20 ms on h1-s1 (both directions) gives a median RTT of 40 ms within 3 % + 0.2 ms."""
    net = _network(_topo(delay='20ms'))
    try:
        rtts, stream = _probe(net.net, tmp_path, 300, 0.005)
        records = net.mechanisms()['links']
    finally:
        net.stop()
        net.links.stop()        # idempotent: a second stop is harmless
    median = statistics.median(rtts)
    print('median RTT %.3f ms over %d probes' % (median, len(rtts)))
    assert len(rtts) == 300 and stream['reordered'] == 0
    assert abs(median - 40.0) <= 0.03 * 40.0 + 0.2
    delayed = [r for r in records if r['delay_ms'] == 20.0]
    assert len(delayed) == 2 and all(r['mechanism'] in ('netem', 'linkdelay') for r in delayed)


def test_loss_10_percent_inside_its_interval(tmp_path):
    """10 % loss on h1->s1 drops a binomially plausible share of 5,000 one-way probes."""
    from analysis.fidelity import binom_quantiles
    net = _network(_topo(loss=10.0))
    try:
        _, stream = _probe(net.net, tmp_path, 5000, 0.0002)
    finally:
        net.stop()
    lost = stream['sent'] - stream['received']
    lo, hi = binom_quantiles(5000, 0.1, 0.0005, 0.9995)
    print('lost %d of %d, 99.9%% interval %d..%d' % (lost, stream['sent'], lo, hi))
    assert stream['sent'] == 5000 and lo <= lost <= hi


def test_impossible_link_fails_loudly_before_start():
    """A link asking for negative delays (jitter > delay) stops the run before anything starts."""
    from repronet.emu import capabilities, network
    from repronet.emu.linkemu import LinkEmulationError
    with pytest.raises(LinkEmulationError, match='jitter 5 ms is larger than delay 1 ms'):
        network.Network(_topo(delay='1ms', jitter='5ms'), 'lxbr', 'auto', capabilities.probe())


def test_loop_with_delay_fails_loudly_without_netem():
    """Without sch_netem a delayed topology with a loop is refused (one path per pair needed)."""
    from mininet.topo import Topo
    from repronet.emu import capabilities, network
    from repronet.emu.linkemu import LinkEmulationError
    caps = capabilities.probe()
    if caps.netem:
        pytest.skip('this kernel has sch_netem, which delays per link and handles loops')

    class Triangle(Topo):
        def build(self):
            s = [self.addSwitch('s%d' % i) for i in (1, 2, 3)]
            self.addLink(self.addHost('h1'), s[0], delay='5ms')
            for i in range(3):
                self.addLink(s[i], s[(i + 1) % 3])
    with pytest.raises(LinkEmulationError, match='loop'):
        network.Network(Triangle(), 'lxbr', 'auto', caps)


def _echoed(net, log_dir, count=1000):
    """Sequence numbers whose echo came back (both directions survived) in one probe stream."""
    os.makedirs(log_dir)
    _, stream = _probe(net, log_dir, count, 0.001)
    with open(os.path.join(log_dir, 'send.jsonl')) as f:
        seqs = sorted(json.loads(line)['seq'] for line in f if '"echo"' in line)
    assert stream['sent'] == count
    return seqs


def test_reseed_repeats_the_drop_pattern(tmp_path):
    """Seeds are per point: reseeding with the same seed drops the same packets again."""
    from repronet.emu import capabilities
    if capabilities.probe().netem:
        pytest.skip('netem draws from the kernel generator; only linkdelay can be reseeded')
    net = _network(_topo(loss=20.0))
    try:
        runs = []
        for i, seed in enumerate((5, 6, 5)):
            net.links.reseed(seed)
            runs.append(_echoed(net.net, str(tmp_path / str(i))))
    finally:
        net.stop()
    print('echoed %s of 1000' % [len(r) for r in runs])
    assert runs[0] == runs[2] and runs[0] != runs[1]
    assert 500 < len(runs[0]) < 780    # 0.8^2 = 64 % survive both ways


def test_each_reseed_starts_a_points_share_of_the_releases(tmp_path):
    """A real daemon answers each reseed with its counters, so the manifest's link_holds
    splits the releases by point: 1 ms on h1-s1 holds every packet at both ends (the request
    at h2, the echo at h1), so 200 probes under seed 5 and 300 under seed 6 are 400 and 600
    releases, and a few more for the probe's own start and end messages (10 each time when
    written)."""
    from repronet.emu import capabilities
    if capabilities.probe().netem:
        pytest.skip('netem has no daemons')
    net = _network(_topo(delay='1ms'))
    try:
        for seed, count in ((5, 200), (6, 300)):
            net.links.reseed(seed)
            os.makedirs(str(tmp_path / str(seed)))
            _probe(net.net, str(tmp_path / str(seed)), count, 0.001)
    finally:
        net.stop()
    record = net.links.daemon_holds()
    print(record['points'])
    assert [p['seed'] for p in record['points']] == [5, 6]
    first, second = (p['released'] for p in record['points'])
    assert 400 <= first <= 430 and 600 <= second <= 630 and second - first == 200
    assert sum(p['released'] for p in record['points']) <= record['released']
    assert all(p['late_us_mean'] is not None and p['late_hist_log2_us'] for p in
               record['points'])


def test_stats_of_a_silent_daemon_are_marked_stale(tmp_path):
    """A daemon that does not answer SIGUSR1 gets stale=True, not its old counters as new."""
    import signal
    from repronet.emu import capabilities
    if capabilities.probe().netem:
        pytest.skip('netem has no daemons')
    net = _network(_topo(delay='1ms'))
    try:
        first = net.links.daemon_stats()
        assert first and not any(r['stale'] for r in first.values())
        pid = first['h2']['pid']
        os.kill(pid, signal.SIGSTOP)
        try:
            silent = net.links.daemon_stats()
        finally:
            os.kill(pid, signal.SIGCONT)
        assert silent['h2']['stale'] is True and not silent['h1']['stale']
        assert silent['h2']['counters'] == first['h2']['counters']
    finally:
        net.stop()


def test_tree_has_one_rule_per_receiver_and_composes_paths(tmp_path):
    """12 hosts on two leaves, 5 ms per link: one NFQUEUE rule per host, RTT 4 or 8 links."""
    from mininet.topo import Topo
    from repronet.emu import capabilities
    if capabilities.probe().netem:
        pytest.skip('netem delays per link, without rules')

    class Tree(Topo):
        def build(self):
            core = self.addSwitch('s1')
            for i in range(12):
                if i % 6 == 0:
                    leaf = self.addSwitch('s%d' % (i // 6 + 2))
                    self.addLink(leaf, core, delay='5ms')
                self.addLink(self.addHost('h%d' % (i + 1)), leaf, delay='5ms')
    net = _network(Tree())
    try:
        rules = {h.name: h.cmd('iptables -w -t raw -S').count('NFQUEUE') for h in net.net.hosts}
        (tmp_path / 'near').mkdir()
        (tmp_path / 'far').mkdir()
        near, _ = _probe(net.net, tmp_path / 'near', 50, 0.01, 'h1', 'h2')
        far, _ = _probe(net.net, tmp_path / 'far', 50, 0.01, 'h1', 'h12')
    finally:
        net.stop()
    assert rules == {'h%d' % (i + 1): 1 for i in range(12)}
    print('median RTT near %.2f ms, far %.2f ms' % (statistics.median(near),
                                                    statistics.median(far)))
    assert abs(statistics.median(near) - 20.0) <= 0.03 * 20.0 + 0.2
    assert abs(statistics.median(far) - 40.0) <= 0.03 * 40.0 + 0.2
