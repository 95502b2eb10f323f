"""A clamped MSS and the send buffer in the simulated streams (repronet/sim/streams.py),
against closed forms: with the client's MSS clamped to p bytes, every segment carries p
bytes and pays 66 header bytes on the link, so a transfer that keeps the link busy ends at
handshake + (N + ceil(N / p) x 66) / rate + delay, exactly; the default MSS keeps its
64 KiB trains; a writer that honours ``send_space`` / ``when_writable`` never holds more
than two windows in the buffer and finishes writing when the rest fits."""

import math

import pytest

from repronet.sim import streams
from repronet.sim.streams import MSS, TCP_OVERHEAD
from tests.test_sim_streams import MBIT, SYN, App, _hosts, _serve


def _clamped(n, mss, rate_mbit=100, delay='0.5ms'):
    """h1 connects to h2 with mss, writes n bytes and closes; return (net, conn, server)."""
    net, (a, b) = _hosts(dict(bw=rate_mbit, delay=delay))
    servers = _serve(b)
    payload = bytes(range(256)) * (n // 256) + bytes(n % 256)
    conn = a.connect(b.ip, 80, App(a.engine, lambda c: (c.send(payload), c.close())),
                     mss=mss)
    net.engine.run(until=1000.0)
    assert servers[0].data == payload
    return net, conn, servers[0]


@pytest.mark.parametrize('mss', [100, 536, 1000])
def test_a_clamped_mss_puts_one_segment_of_it_per_packet_and_ends_at_the_closed_form(mss):
    n, rate, d = 1_000_000, 100 * MBIT, 0.0005
    net, conn, server = _clamped(n, mss)
    assert conn.mss == conn.peer.mss == mss
    assert conn.window % mss == 0 and streams.train_bytes(mss) % mss == 0
    port = net.ports[('h1', 'h2')]
    packets = port.sent - 2                             # less the SYN and the FIN
    assert packets == math.ceil(n / mss)                # whole segments: no partial ones
    t0 = 2 * SYN / rate + 2 * d
    last_byte = t0 + (n + packets * TCP_OVERHEAD) / rate + d
    assert server.heard[-2][1] == pytest.approx(last_byte, abs=1e-9)


def test_goodput_falls_with_the_segment_as_payload_over_payload_plus_headers():
    n, rate = 2_000_000, 100 * MBIT
    ends = {mss: _clamped(n, mss)[2].heard[-2][1] for mss in (100, MSS)}
    # the time on the wire scales with (mss + 66) / mss
    wire = {mss: ends[mss] - (2 * SYN / rate + 0.0015) for mss in ends}
    assert wire[100] / wire[MSS] == pytest.approx((166 / 100) / (1514 / 1448), rel=1e-3)


def test_the_default_mss_keeps_64_kib_trains_and_the_queue_cap_counts_segments():
    net, _ = _hosts(dict(bw=100, delay='5ms'))
    assert streams.train_bytes(MSS) == 65536
    assert streams.window(net, 'h1', 'h2') == streams.window(net, 'h1', 'h2', MSS) == \
        int(100 * MBIT * 0.01) + 2 * 65536
    assert streams.window(net, 'h1', 'h2', 1000) == (int(100 * MBIT * 0.01) + 2 * 65000) \
        // 1000 * 1000
    # 100-byte segments: the 1,000-packet queue holds less than the path's BDP (125 kB)
    assert streams.window(net, 'h1', 'h2', 100) == 998 * 100


def test_a_client_may_not_ask_for_more_than_the_path_mss():
    net, (a, b) = _hosts(dict(bw=100, delay='1ms'))
    _serve(b)
    assert a.connect(b.ip, 80, App(a.engine), mss=9000).mss == MSS


class Writer:
    """Writes n bytes as the send buffer takes them; records each write's time and the
    most the buffer held."""

    def __init__(self, engine, n):
        self.engine, self.left, self.times, self.most = engine, n, [], 0
        self.conn = None

    def connection_made(self, conn):
        self.conn = conn
        self.write()

    def write(self):
        take = min(self.left, self.conn.send_space())
        if take:
            self.conn.send(bytes(take))
            self.left -= take
            self.times.append(self.engine.now)
        self.most = max(self.most, self.conn.queued + self.conn.inflight)
        if self.left:
            self.conn.when_writable(lambda: self.engine.at(self.engine.now, self.write))
        else:
            self.conn.close()

    def data_received(self, conn, data):
        pass

    def connection_lost(self, conn, why):
        pass


def test_a_writer_on_the_send_buffer_holds_at_most_two_windows_and_ends_when_the_rest_fits():
    n, rate, d = 4_000_000, 100 * MBIT, 0.005
    net, (a, b) = _hosts(dict(bw=100, delay='5ms'))
    servers = _serve(b)
    w = Writer(a.engine, n)
    conn = a.connect(b.ip, 80, w)
    net.engine.run(until=1000.0)
    buffer = streams.SNDBUF_WINDOWS * conn.window
    assert len(servers[0].data) == n and w.most == buffer
    assert len(w.times) > 3                         # it had to wait, more than once
    # the last write comes once the buffer has room for the rest: after the first
    # n - buffer bytes have been acknowledged (their wire time, a round trip) and before
    # a third of the buffer more has been
    t0 = 2 * SYN / rate + 2 * d
    early = t0 + (n - buffer) * (1 + TCP_OVERHEAD / MSS) / rate + 2 * d
    assert early <= w.times[-1] <= early + (buffer / 3 + 65536) * 1.05 / rate
