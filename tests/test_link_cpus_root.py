"""Root test of ``link_cpus`` (``--link-cpus``, issue 15) on a real network.

h1 - s1 - h2 with 0.05 ms links, so both hosts get a linkdelay daemon. With one CPU set
apart: every daemon runs only there, the hosts' shells and a process started on a host run
only on the others, the manifest records where each daemon went, packets still cross (ping),
and after stop() this process has its CPUs back. Fails on a broken version: with
``DaemonSet`` not calling ``place`` the daemons keep the hosts' CPUs (first assertion), and
with ``Network.stop`` not calling ``release`` the last one fails.
"""

import os

import pytest

pytestmark = pytest.mark.root


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason='needs two CPUs to split')
def test_daemons_run_on_their_cpus_and_hosts_on_the_others(tmp_path):
    from benchmarks.lan_latency import pair
    from repronet.emu import capabilities, network
    before = os.sched_getaffinity(0)
    net = network.Network(pair(0.05), 'lxbr', 'auto', capabilities.probe(), seed=1,
                          log_dir=tmp_path, links='linkdelay', link_cpus=1)
    daemons, rest = net.link_cpus.daemons, net.link_cpus.rest
    try:
        net.start()
        pids = net.links.daemon_pids()
        assert len(pids) == 2
        assert all(sorted(os.sched_getaffinity(pid)) == daemons for pid in pids)
        h1, h2 = net.net['h1'], net.net['h2']
        assert sorted(os.sched_getaffinity(h1.pid)) == rest
        probe = h1.popen(['sleep', '10'])
        try:
            assert sorted(os.sched_getaffinity(probe.pid)) == rest
        finally:
            probe.kill()
            probe.wait()
        assert ' 0% packet loss' in h1.cmd('ping -c 3 -i 0.2 -W 2 %s' % h2.IP())
        record = net.mechanisms()['link_cpus']
        assert record['reserved'] == 1 and sorted(record['placed']) == ['h1', 'h2']
        assert os.sched_getaffinity(0) == set(rest)
    finally:
        net.stop()
    assert os.sched_getaffinity(0) == before
