"""Root test of a host's delay daemon as one worker per CPU (repronet/emu/linkemu_workers.py).

h1 - s1 - h2, 0.05 ms and 100 Mbit/s on both links (rated: the workers share the links'
clocks). Asserted: each host's daemon is one worker per CPU, worker k pinned to CPU k and
reading queue k; the host's rule spreads packets by CPU (``--queue-cpu-fanout``); the workers
mapped the shared clocks; packets cross (ping) and the stats read as one daemon per host
whose releases are the workers' together; the manifest's schedule says ``cpu-fanout``. With
loss on the links, one worker per host (a seed must repeat its drops). Fails on the old code:
one daemon process per host and ``--queue-num 0``.
"""

import os

import pytest

from repronet.run.results import read_jsonl

pytestmark = pytest.mark.root


@pytest.mark.skipif(os.cpu_count() < 2 or len(os.sched_getaffinity(0)) < 2,
                    reason='needs two CPUs')
def test_each_host_has_a_pinned_worker_per_cpu_sharing_the_clocks(tmp_path):
    from benchmarks.lan_latency import pair
    from repronet.emu import capabilities, network
    net = network.Network(pair(0.05, bw=100), 'lxbr', 'auto', capabilities.probe(), seed=1,
                          log_dir=tmp_path).start()
    cpus = os.cpu_count()
    try:
        daemons = net.links._daemons.daemons
        h1, h2 = net.net['h1'], net.net['h2']
        assert ' 0% packet loss' in h1.cmd('ping -c 20 -i 0.05 -W 2 %s' % h2.IP())
        for name in ('h1', 'h2'):
            d = daemons[name]
            assert len(d.pids) == min(cpus, 8)
            assert [sorted(os.sched_getaffinity(pid)) for pid in d.pids][:2] == [[0], [1]] \
                or cpus > 8
            ready = [read_jsonl(path)[0] for path in d.log_paths]
            assert [r['queue'] for r in ready] == list(range(len(d.pids)))
            assert all(r['clocks_shared'] == 1 for r in ready)
            assert '--queue-cpu-fanout' in net.net[name].cmd('iptables -t raw -S')
        stats = net.links.daemon_stats()['h2']['counters']
        per_worker = [read_jsonl(p)[-1] for p in daemons['h2'].log_paths]
        assert stats['workers'] == len(per_worker)
        assert stats['released'] == sum(w['released'] for w in per_worker) >= 20
        schedule = net.mechanisms()['link_daemons']
        assert schedule['queues'] == 'cpu-fanout'
        assert schedule['worker_cpus']['h2'][:2] == [[0], [1]]
    finally:
        net.stop()
    holds = net.links.daemon_holds()
    assert [r['host'] for r in holds['daemons']] == ['h1', 'h2']


def test_a_host_with_loss_keeps_one_worker(tmp_path):
    from mininet.topo import Topo
    from repronet.emu import capabilities, network

    class Lossy(Topo):
        def build(self):
            s1 = self.addSwitch('s1')
            for h in ('h1', 'h2'):
                self.addLink(self.addHost(h), s1, delay='0.05ms', loss=1)
    net = network.Network(Lossy(), 'lxbr', 'auto', capabilities.probe(), seed=1,
                          log_dir=tmp_path).start()
    try:
        assert [len(d.pids) for d in net.links._daemons.daemons.values()] == [1, 1]
        assert '--queue-num 0' in net.net['h2'].cmd('iptables -t raw -S')
    finally:
        net.stop()


def test_link_queues_one_keeps_one_process_per_host(tmp_path):
    from benchmarks.lan_latency import pair
    from repronet.emu import capabilities, network
    net = network.Network(pair(0.05), 'lxbr', 'auto', capabilities.probe(), seed=1,
                          log_dir=tmp_path, link_queues='one').start()
    try:
        assert [len(d.pids) for d in net.links._daemons.daemons.values()] == [1, 1]
        assert net.mechanisms()['link_daemons']['queues'] == 'one'
    finally:
        net.stop()
