"""Root test of the delay daemons' batched verdicts (linkdelay_release.c): the packets due
in one pass leave in one netlink send, every one of them arrives, in order.

h1 - s1 - h2, 0.05 ms on both links (every hold 100 us). Several packets are due in one pass
only when the daemon is behind (on time, each pass finds the next deadline alone), so the test
puts it behind on purpose: h2's daemon is stopped (SIGSTOP) while h1 sends a burst of BURST
UDP datagrams, then continued, and finds the whole burst queued and overdue. Asserted on h2's
daemon with batches of up to 64: it released every datagram in at most two sends per burst,
and the receiver got every datagram in the order sent; with --verdict-batch 1 (the daemon
before batching), one send per packet, the same datagrams. A daemon without batched verdicts
prints no verdict_sends and fails here.
"""

import os
import signal
import time

import pytest

pytestmark = pytest.mark.root

DELAY_MS = 0.05
BURSTS = 12
BURST = 32
PORT = 9099
SEND = ('import socket,sys\n'
        's=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n'
        'first=int(sys.argv[2])\n'
        'for i in range(first, first+%d): s.sendto(b"%%08d" %% i + bytes(100), (sys.argv[1], %d))\n'
        % (BURST, PORT))
RECEIVE = ('import socket\n'
           's=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n'
           's.setsockopt(socket.SOL_SOCKET,socket.SO_RCVBUF,1<<20)\n'
           's.bind(("0.0.0.0",%d)); s.settimeout(5)\n'
           'got=[]\n'
           'try:\n'
           '    while len(got) < %d: got.append(int(s.recv(2048)[:8]))\n'
           'except socket.timeout: pass\n'
           'print(len(got), got == sorted(got), flush=True)\n' % (PORT, BURSTS * BURST))


def run_bursts(tmp_path, batch, monkeypatch):
    """Send BURSTS bursts h1 -> h2 with h2's daemon stopped for each; return (h2's daemon
    row, the receiver's 'count in_order' line)."""
    from benchmarks.lan_latency import pair
    from repronet.emu import capabilities, linkemu_daemon, network
    monkeypatch.setattr(linkemu_daemon, 'VERDICT_BATCH', batch)
    net = network.Network(pair(DELAY_MS), 'lxbr', 'auto', capabilities.probe(), seed=1,
                          log_dir=tmp_path).start()
    try:
        h1, h2 = net.net.get('h1'), net.net.get('h2')
        workers = net.links._daemons.daemons['h2'].pids     # one per CPU (linkemu_workers)
        receiver = h2.popen(['/usr/bin/python3', '-c', RECEIVE])
        time.sleep(0.5)
        for b in range(BURSTS):
            for pid in workers:
                os.kill(pid, signal.SIGSTOP)
            try:
                h1.cmd('/usr/bin/python3 -c \'%s\' %s %d' % (SEND, h2.IP(), b * BURST))
                time.sleep(0.002)
            finally:
                for pid in workers:
                    os.kill(pid, signal.SIGCONT)
            time.sleep(0.02)
        out, _ = receiver.communicate(timeout=20)
    finally:
        net.stop()
    row = [r for r in net.links.daemon_holds()['daemons'] if r['host'] == 'h2'][0]
    return row, out.decode().split()


@pytest.mark.parametrize('batch', [64, 1])
def test_a_late_daemon_releases_a_burst_in_one_send(tmp_path, monkeypatch, batch):
    """h2's daemon, behind by a whole burst: one send per burst (one per packet with 1)."""
    row, (count, in_order) = run_bursts(tmp_path, batch, monkeypatch)
    print('batch %d: released %s in %s sends, late %.1f us; receiver %s in order %s' % (
        batch, row['released'], row['verdict_sends'], row['late_us_mean'], count, in_order))
    assert (int(count), in_order) == (BURSTS * BURST, 'True')
    assert row['verdict_batch'] == batch
    assert row['released'] >= BURSTS * BURST
    if batch == 1:
        assert row['verdict_sends'] == row['released']
    else:
        assert row['verdict_sends'] <= 2 * BURSTS + (row['released'] - BURSTS * BURST)
