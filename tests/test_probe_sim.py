"""workloads.probe's simulate(): the same flags and log records on the simulation backend.

Each test builds a small simulated network (``repronet.sim.backend.SimBackend``: a - s - b),
starts the reflector and the sender by the argv the experiment uses and reads their logs.
The link model has no cost on unshaped links besides the configured delay, so simulated RTTs
are exact and can be checked to the log's 0.1 us.
"""

import json

from mininet.topo import Topo

from repronet.sim.backend import SimBackend

PROBE = ['/usr/bin/python3', '-m', 'workloads.probe']


class _Pair(Topo):
    """a - s1 - b, both links alike."""

    def build(self, **link):
        switch = self.addSwitch('s1')
        self.addLink(self.addHost('a'), switch, **link)
        self.addLink(self.addHost('b'), switch, **link)


def _records(path):
    return [json.loads(line) for line in open(path)]


def _run(tmp_path, link, send_flags, seed=1, garbage=False):
    """Reflect on b, send from a; return (sender, reflector records, sender records)."""
    backend = SimBackend(_Pair(**link), seed=seed, log_dir=tmp_path)
    a, b = backend.hosts['a'], backend.hosts['b']
    reflector = backend.start_node(b, 'reflect', PROBE + ['reflect', '--port', 9000])
    reflector.wait_ready(1)
    if garbage:
        backend.stacks['a'].sendto(b'not a probe', (b.IP(), 9000), 4000)
    sender = backend.start_node(a, 'probe', PROBE + ['send', '--dst', b.IP(), '--port', 9000]
                                + send_flags)
    assert sender.wait(60) == 0, open(sender.err_path).read()
    backend.run_until(lambda: False, 1.0)       # the end marker's last copies arrive
    reflector.stop()
    return sender, _records(reflector.log_path), _records(sender.log_path)


def test_simulated_probe_times_echoes_exactly(tmp_path):
    """1.5 ms per link one way: every echo is 6 ms; counts, summary and timing as in the
    socket version, and malformed datagrams are reported, not echoed."""
    _, reflected, sent = _run(tmp_path, {'delay': '1500us'},
                              ['--count', 50, '--interval', 0.01, '--stream', 7], garbage=True)
    echoes = [r for r in sent if r['event'] == 'echo']
    assert [r['seq'] for r in echoes] == list(range(50))
    assert {r['rtt_us'] for r in echoes} == {6000.0}
    summary, = [r for r in sent if r['event'] == 'summary']
    assert summary == {'t': summary['t'], 'event': 'summary', 'stream': 7, 'sent': 50,
                       'echoed': 50, 'reordered_echoes': 0, 'send_failed': 0,
                       'send_failed_errors': {}, 'duration_s': summary['duration_s']}
    # the last probe leaves at 0.49 s, its echo is back 6 ms later; then 10 end markers
    assert summary['duration_s'] == round(0.49 + 0.006 + 10 * 0.002, 3)
    assert [r['event'] for r in reflected] == ['ready', 'error', 'stream']
    assert reflected[1]['error'] == 'malformed datagram' and reflected[1]['bytes'] == 11
    stream = reflected[2]
    assert (stream['stream'], stream['sent'], stream['received'], stream['reordered'],
            stream['duplicates']) == (7, 50, 50, 0, 0)
    assert stream['from'] == '10.0.0.1'


def test_simulated_probe_counts_one_way_loss(tmp_path):
    """With 10 % loss per link, the reflector counts what arrived one way, the sender what
    came back; both directions lose, so fewer echoes than one-way arrivals."""
    _, reflected, sent = _run(tmp_path, {'loss': 10},
                              ['--count', 2000, '--interval', 0.0001, '--drain', 0.5])
    stream, = [r for r in reflected if r['event'] == 'stream']
    summary, = [r for r in sent if r['event'] == 'summary']
    assert stream['sent'] == summary['sent'] == 2000
    # a -> b crosses two lossy links: 19 % expected, 1,620 arrivals (sd 18)
    assert 1500 < stream['received'] < 1740
    # back again: 34.4 % lost in all, 1,312 echoes (sd 21)
    assert 1200 < summary['echoed'] < stream['received']
    assert len([r for r in sent if r['event'] == 'echo']) == summary['echoed']


def test_simulated_probe_same_seed_same_log(tmp_path):
    """Loss and jitter come from the network's seeded generator: same seed, same logs."""
    link = {'loss': 5, 'delay': '2ms', 'jitter': '1ms'}
    flags = ['--count', 300, '--interval', 0.001]
    logs = []
    for run in ('one', 'two', 'other'):
        (tmp_path / run).mkdir()
        logs.append(open(_run(tmp_path / run, link, flags,
                              seed=3 if run != 'other' else 4)[0].log_path).read())
    assert logs[0] == logs[1] and logs[0] != logs[2]


def test_simulated_probe_bad_flags_exit_2(tmp_path):
    """A bad flag ends the simulated node as it ends the real one: status 2, one message."""
    backend = SimBackend(_Pair(), seed=1, log_dir=tmp_path)
    node = backend.start_node(backend.hosts['a'], 'bad',
                              PROBE + ['send', '--dst', '10.0.0.2', '--port', 9,
                                       '--size', 70000])
    assert node.returncode == 2
    assert '--size 0..65507' in open(node.err_path).read()


def test_simulated_probe_without_reflector_waits_drain_then_ends(tmp_path):
    """No reflector: nothing echoes, the sender waits --drain and still ends with a summary."""
    backend = SimBackend(_Pair(delay='1ms'), seed=1, log_dir=tmp_path)
    sender = backend.start_node(backend.hosts['a'], 'probe',
                                PROBE + ['send', '--dst', '10.0.0.2', '--port', 9000,
                                         '--count', 10, '--interval', 0.01, '--drain', 0.3])
    assert sender.wait(10) == 0
    summary = _records(sender.log_path)[-1]
    assert (summary['sent'], summary['echoed']) == (10, 0)
    assert summary['duration_s'] == round(0.09 + 0.3 + 0.02, 3)
