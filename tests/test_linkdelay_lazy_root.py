"""Root test of the delay daemons' lazy reads (linkdelay_sched.h): under a bulk TCP transfer
the receiving daemon reads its queue in batches, not once per arriving packet, and reading
later does not make packets late.

h1 - s1 - h2, 0.05 ms on both links (every hold 100 us), iperf3 UDP h1 -> h2 for 2 s at
200 Mbit/s in 1,000-byte datagrams: 25,000 packets a second, one every 40 us, so a packet
is nearly always held (TCP would do: GSO merges a bulk transfer's segments into a few
thousand large packets a second here, and the daemon then often holds none). Why it matters: a SCHED_FIFO daemon that each arrival wakes
preempts the node processes once per packet, and the transfer experiment at a gigabit got
0.40-0.51 of the rate that way (0.66-0.71 with lazy reads; docs/link-emulation.md).

Asserted on h2's daemon (the one holding the data): its least hold is the configured 100 us;
an arrival woke it for at most QUEUE_WAKE_SHARE of the packets it released (the daemon before
lazy reads has no such count and fails here; with every arrival waking it, the share would be
near 1; measured at 0.05 in two runs, 0.13 once a pass read only after the least hold, 0.35
with a pypy3 benchmark busy on the other core: when the sender waits for a CPU, gaps longer
than a hold empty the heap, and the next arrival then wakes the daemon, as it should);
packets read after their deadline add at most READ_LATE_US on average (they are read
when the daemon wakes for a deadline or when the least hold has passed since its last read,
so only a late wake-up makes a read late).
"""

import time

import pytest

pytestmark = pytest.mark.root

DELAY_MS = 0.05
SECONDS = 2
QUEUE_WAKE_SHARE = 0.5
READ_LATE_US = 20.0


def test_dense_packets_are_read_in_batches_and_on_time(tmp_path):
    """h2's daemon: queue wake-ups well under its releases, reads before deadlines."""
    from benchmarks.lan_latency import pair
    from repronet.emu import capabilities, network
    from repronet.emu.process import NodeProcess, TcpListening
    net = network.Network(pair(DELAY_MS), 'lxbr', 'auto', capabilities.probe(), seed=1,
                          log_dir=tmp_path).start()
    try:
        h1, h2 = net.net.get('h1'), net.net.get('h2')
        server = NodeProcess(h2, 'iperf3-s', ['iperf3', '-s', '-1', '-p', '5201'], tmp_path,
                             ready=TcpListening(5201)).start()
        server.wait_ready(20)
        client = NodeProcess(h1, 'iperf3-c', ['iperf3', '-c', h2.IP(), '-p', '5201', '-t',
                                              str(SECONDS), '-u', '-b', '200M', '-l', '1000'],
                             tmp_path).start()
        code = client.wait(timeout=SECONDS + 30)
        assert code == 0, 'iperf3 exit %s: see %s' % (code, client.err_path)
        server.stop()
    finally:
        net.stop()
    holds = net.links.daemon_holds()
    row = [r for r in holds['daemons'] if r['host'] == 'h2'][0]
    print('h2: released %s, queue wakes %s, lazy reads %s, read late %.2f us, mean late %.2f '
          'us' % (row['released'], row['queue_wakes'], row['lazy_reads'],
                  row['late_read_us_mean'], row['late_us_mean']))
    assert row['lazy_min_hold_us'] == 100 and row['lazy_off'] == 0
    assert row['released'] >= 0.9 * 25000 * SECONDS
    assert row['queue_wakes'] <= QUEUE_WAKE_SHARE * row['released']
    assert row['lazy_reads'] > 0
    assert row['late_read_us_mean'] <= READ_LATE_US
    assert holds['queue_wakes'] >= row['queue_wakes']
