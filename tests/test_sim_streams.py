"""Simulated TCP-like streams and datagrams (repronet/sim/streams.py, stack.py) against their model's
closed forms: a refused connect takes one round trip of a SYN and a reset; a transfer that
keeps the link busy ends at handshake + wire bytes / rate + delay; a lost SYN, SYN-ACK,
train or FIN costs its timeout and nothing is delivered twice or out of order; resets and
closes reach the peer one path delay later; two flows through one bottleneck share it.
Virtual time makes these exact (``approx`` absorbs floating-point rounding only)."""

import math
import random

import pytest
from mininet.topo import Topo

from repronet.sim import streams
from repronet.sim.engine import Engine
from repronet.sim.links import Network
from repronet.sim.stack import UDP_OVERHEAD, Stack
from repronet.sim.streams import MSS, TCP_OVERHEAD

MBIT = 1e6 / 8
SYN, RST = streams.SYN_BYTES, 54


class App:
    """A protocol that records what it hears (with the virtual time) and may act first."""

    def __init__(self, engine, on_made=None):
        self.engine, self.on_made = engine, on_made
        self.heard, self.chunks = [], []

    def connection_made(self, conn):
        self.heard.append(('made', self.engine.now))
        if self.on_made is not None:
            self.on_made(conn)

    def data_received(self, conn, data):
        self.heard.append(('data', self.engine.now))
        self.chunks.append(data)

    def connection_lost(self, conn, why):
        self.heard.append(('lost', self.engine.now, why))

    @property
    def data(self):
        return b''.join(self.chunks)

    def kinds(self):
        return [h[0] for h in self.heard]


def _hosts(link, seed=0, n=2):
    """Two hosts h1 - h2 on one link, or n > 2 hosts on switch s1, each link of the given
    keywords; return (net, [Stack of h1, h2, ...])."""
    topo = Topo()
    names = ['h%d' % i for i in range(1, n + 1)]
    for name in names:
        topo.addHost(name)
    if n == 2:
        topo.addLink('h1', 'h2', **link)
    else:
        topo.addSwitch('s1')
        for name in names:
            topo.addLink(name, 's1', **link)
    net = Network(Engine(), topo, seed)
    return net, [Stack(net, name, '10.0.0.%d' % i) for i, name in enumerate(names, 1)]


def _serve(stack, port=80):
    """Listen on port with an App per connection; return the list the Apps go into."""
    apps = []

    def accept(conn):
        apps.append(App(stack.engine))
        return apps[-1]
    stack.listen(port, accept)
    return apps


def _send_and_close(payload):
    """on_made action: write payload, then close."""
    return lambda conn: (conn.send(payload), conn.close())


def test_connect_without_listener_is_refused_after_one_round_trip():
    net, (a, b) = _hosts(dict(bw=100, delay='5ms'))
    app = App(a.engine)
    conn = a.connect(b.ip, 80, app)
    net.engine.run()
    want = (SYN + RST) / (100 * MBIT) + 2 * 0.005
    assert app.heard == [('lost', pytest.approx(want, abs=1e-12), 'connection refused')]
    assert conn.state == 'closed' and not a.conns


def test_an_unreachable_host_times_out_after_linux_syn_backoff():
    net, (a, b) = _hosts(dict(delay='1ms'))
    net.link_status('h2', 'h1', False)
    app = App(a.engine)
    a.connect(b.ip, 80, app)
    net.engine.run()
    assert app.heard == [('lost', 127.0, 'connection timed out')]       # 1+2+...+64 s
    assert net.ports[('h1', 'h2')].dropped == 7


@pytest.mark.parametrize('direction', [('h1', 'h2'), ('h2', 'h1')])
def test_a_lost_syn_or_syn_ack_is_repaired_by_the_syn_retry_after_one_second(direction):
    net, (a, b) = _hosts(dict(delay='5ms'))
    servers = _serve(b)
    net.ports[direction].up = False
    net.engine.at(0.5, setattr, net.ports[direction], 'up', True)
    app = App(a.engine, _send_and_close(b'hello'))
    a.connect(b.ip, 80, app)
    net.engine.run(until=1000.0)
    assert app.heard[0] == ('made', pytest.approx(1.0 + 0.01))
    assert len(servers) == 1 and servers[0].data == b'hello'
    assert servers[0].kinds() == ['made', 'data', 'lost']


def _transfer(nbytes, seed=0, **link):
    """h1 connects to h2, writes nbytes and closes; return (net, client conn, server App,
    payload)."""
    net, (a, b) = _hosts(link, seed)
    servers = _serve(b)
    payload = random.Random(seed).randbytes(nbytes)
    conn = a.connect(b.ip, 80, App(a.engine, _send_and_close(payload)))
    net.engine.run(until=100_000.0)
    assert len(servers) == 1
    return net, conn, servers[0], payload


def test_one_megabyte_keeps_the_link_busy_and_ends_at_the_closed_form():
    """100 Mbit/s, 5 ms each way: the client is connected at t0 = RTT + the SYN and
    SYN-ACK's serialisation; from then the window (BDP + 64 KiB) keeps the link busy, so
    the last byte arrives at t0 + wire bytes / rate + delay. Wire bytes are N + 66 per
    packet; packets are ceil(N / 1448) plus at most one partial packet per train. The FIN
    goes when the last ACK is back (one delay later) and takes 66 bytes' time and a delay."""
    n, rate, d = 1_000_000, 100 * MBIT, 0.005
    net, conn, server, payload = _transfer(n, bw=100, delay='5ms')
    assert server.data == payload and conn.retransmits == 0
    assert server.kinds() == ['made'] + ['data'] * (len(server.heard) - 2) + ['lost']
    port = net.ports[('h1', 'h2')]
    packets = port.sent - 2                                     # less the SYN and the FIN
    trains = conn.next_seq - 1
    assert math.ceil(n / MSS) <= packets <= math.ceil(n / MSS) + trains
    assert port.bytes == SYN + n + packets * TCP_OVERHEAD + TCP_OVERHEAD
    t0 = 2 * SYN / rate + 2 * d
    last_byte = t0 + (n + packets * TCP_OVERHEAD) / rate + d
    assert server.heard[-2][1] == pytest.approx(last_byte, abs=1e-9)
    fin = last_byte + d + TCP_OVERHEAD / rate + d
    assert server.heard[-1] == ('lost', pytest.approx(fin, abs=1e-9), None)
    # the brief's rule of thumb, (bytes + headers) / rate + RTT + delay: off by the
    # partial packets and the SYNs only
    thumb = n * (1 + TCP_OVERHEAD / MSS) / rate + 3 * d
    assert abs(last_byte - thumb) <= ((trains + 1) * TCP_OVERHEAD + 2 * SYN) / rate


def test_the_window_is_bdp_plus_two_trains_capped_by_the_smallest_queue():
    net, _ = _hosts(dict(bw=100, delay='5ms'))
    assert streams.window(net, 'h1', 'h2') == int(100 * MBIT * 0.01) + 2 * 65536
    net, _ = _hosts(dict(bw=100, delay='5ms', max_queue_size=20))
    assert streams.window(net, 'h1', 'h2') == 18 * MSS
    net, _ = _hosts(dict(delay='5ms'))
    assert streams.window(net, 'h1', 'h2') == streams.WINDOW


@pytest.mark.parametrize('seed', range(6))
def test_under_five_percent_loss_every_byte_arrives_once_in_order(seed):
    net, conn, server, payload = _transfer(1_000_000, seed, bw=100, delay='5ms', loss=5.0)
    assert server.data == payload and conn.retransmits > 0
    assert server.kinds() == ['made'] + ['data'] * (len(server.heard) - 2) + ['lost']
    assert server.heard[-1][2] is None
    assert sum(p.dropped for p in net.ports.values()) > 0


def test_a_lost_train_is_sent_again_after_an_rto_that_doubles():
    """RTO = 200 ms + RTT = 0.21 s, doubled per loss of the same train: sent at 0.01, lost
    again at 0.22 and 0.64 while the link is down, delivered from 1.48 (+ 5 ms)."""
    net, (a, b) = _hosts(dict(delay='5ms'))
    servers = _serve(b)
    port = net.ports[('h1', 'h2')]
    net.engine.at(0.009, setattr, port, 'up', False)     # after the SYN, before the data
    net.engine.at(0.7, setattr, port, 'up', True)
    conn = a.connect(b.ip, 80, App(a.engine, lambda conn: conn.send(b'x' * 5000)))
    net.engine.run()
    rto = streams.RTO_MIN + 0.01
    assert servers[0].heard[1] == ('data', pytest.approx(0.01 + 7 * rto + 0.005))
    assert conn.retransmits == 3 and port.dropped == 3 * 4 and servers[0].data == b'x' * 5000


def test_a_lost_fin_is_sent_again_after_the_retransmission_timeout():
    net, (a, b) = _hosts(dict(delay='5ms'))
    servers = _serve(b)
    port = net.ports[('h1', 'h2')]
    conn = a.connect(b.ip, 80, App(a.engine, _send_and_close(b'bye')))
    net.engine.run(stop=lambda: servers and servers[0].chunks)
    port.up = False                     # the ACK is on its way; the FIN will follow it
    net.engine.at(net.engine.now + 0.1, setattr, port, 'up', True)
    fin_sent = net.engine.now + 0.005
    net.engine.run()
    rto = streams.RTO_MIN + 0.01
    assert servers[0].heard[-1] == ('lost', pytest.approx(fin_sent + rto + 0.005), None)
    assert port.dropped == 1 and conn.state == 'closed'


def test_abort_resets_the_peer_one_path_delay_later_and_drops_the_rest():
    net, (a, b) = _hosts(dict(bw=10, delay='5ms'))
    servers = _serve(b)
    client = App(a.engine, lambda conn: conn.send(bytes(1_000_000)))
    conn = a.connect(b.ip, 80, client)
    net.engine.run(until=0.1)
    conn.abort()
    conn.send(b'too late')
    net.engine.run()
    server = servers[0]
    assert server.heard[-1] == ('lost', pytest.approx(0.1 + 0.005), 'connection reset by peer')
    assert 0 < len(server.data) < 1_000_000 and server.data == bytes(len(server.data))
    assert client.kinds() == ['made'] and conn.state == 'closed' and not a.conns


def test_the_server_may_speak_first_and_its_window_holds_from_the_start():
    """A server that writes in connection_made: the client hears connection_made before
    the data, and the server's first window fits the path's smallest queue (no overflow)."""
    net, (a, b) = _hosts(dict(bw=10, delay='5ms', max_queue_size=50))
    payload = random.Random(4).randbytes(300_000)
    b.listen(80, lambda conn: App(b.engine, _send_and_close(payload)))
    client = App(a.engine)
    a.connect(b.ip, 80, client)
    net.engine.run()
    assert client.data == payload and client.kinds()[:2] == ['made', 'data']
    assert client.heard[-1][2] is None
    assert sum(p.overflow for p in net.ports.values()) == 0


def test_stack_shutdown_resets_every_connection_and_refuses_new_ones():
    net, stacks = _hosts(dict(delay='1ms'), n=4)
    servers = _serve(stacks[0])
    clients = [App(s.engine) for s in stacks[1:]]
    for stack, app in zip(stacks[1:], clients):
        stack.connect(stacks[0].ip, 80, app)
    net.engine.run(until=1.0)
    stacks[0].shutdown()
    late = App(stacks[1].engine)
    stacks[1].connect(stacks[0].ip, 80, late)
    net.engine.run()
    assert [c.heard[-1] for c in clients] == \
        [('lost', pytest.approx(1.002), 'connection reset by peer')] * 3
    assert all(s.kinds() == ['made'] for s in servers) and not stacks[0].conns
    assert late.heard[-1][2] == 'connection refused'


@pytest.mark.parametrize('size, packets', [(0, 1), (1472, 1), (1473, 2), (5000, 4)])
def test_a_datagram_is_one_train_of_ceil_n_over_1472_packets(size, packets):
    net, (a, b) = _hosts(dict(bw=10, delay='1ms'))
    got = []
    b.bind_udp(9000, lambda data, src: got.append((net.engine.now, data, src)))
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    a.sendto(data, (b.ip, 9000), sport=4000)
    a.sendto(data, (b.ip, 9001))                        # nobody bound there
    net.engine.run()
    wire = size + packets * UDP_OVERHEAD
    assert net.ports[('h1', 'h2')].sent == 2 * packets
    assert net.ports[('h1', 'h2')].bytes == 2 * wire
    arrival = 0.001 + wire / (10 * MBIT)
    assert got == [(pytest.approx(arrival, abs=1e-12), data, (a.ip, 4000))]
    assert a.counters['datagrams_sent'] == 2


def test_datagrams_are_delivered_or_lost_whole():
    n, p = 4000, 0.9 ** 3                               # 3 packets, 10 % loss each
    net, (a, b) = _hosts(dict(delay='1ms', params1={'loss': 10.0}), seed=9)
    got = []
    b.bind_udp(53, lambda data, src: got.append(data))
    for i in range(n):
        a.sendto(i.to_bytes(4, 'big') * 1000, (b.ip, 53))
    net.engine.run()
    assert all(len(d) == 4000 and d == d[:4] * 1000 for d in got)
    assert len(set(got)) == len(got)
    assert abs(len(got) - n * p) <= 4 * math.sqrt(n * p * (1 - p))
    dropped = net.ports[('h1', 'h2')].dropped       # packets: Binomial(3 n, 0.1)
    assert dropped >= n - len(got)
    assert abs(dropped - 0.3 * n) <= 4 * math.sqrt(3 * n * 0.1 * 0.9)


def _bottleneck(flows, size):
    """flows senders on 100 Mbit/s access links into s1, and s1 -> h0 at 10 Mbit/s; each
    sends size bytes to h0 and closes; return the times h0's Apps heard the ends."""
    topo = Topo()
    topo.addSwitch('s1')
    topo.addHost('h0')
    topo.addLink('h0', 's1', bw=10, delay='1ms')
    for i in range(1, flows + 1):
        topo.addHost('h%d' % i)
        topo.addLink('h%d' % i, 's1', bw=100, delay='1ms')
    net = Network(Engine(), topo, 0)
    sink = Stack(net, 'h0', '10.0.0.100')
    servers = _serve(sink)
    for i in range(1, flows + 1):
        Stack(net, 'h%d' % i, '10.0.0.%d' % i).connect(
            sink.ip, 80, App(net.engine, _send_and_close(bytes(size))))
    net.engine.run()
    assert [len(s.data) for s in servers] == [size] * flows
    return [s.heard[-1][1] for s in servers], streams.window(net, 'h1', 'h0')


def test_two_flows_through_one_bottleneck_share_it_about_evenly():
    """Both flows keep the 10 Mbit/s link busy, so together they take twice one flow's
    time; the one that ends first is at most one window (on the wire) ahead of the other.
    The handshake and the path delays (a few RTTs) are the rest of the tolerance."""
    size, rate, rtt = 2_000_000, 10 * MBIT, 0.004
    (alone,), _ = _bottleneck(1, size)
    both, win = _bottleneck(2, size)
    slack = win * (1 + TCP_OVERHEAD / MSS) / rate + 3 * rtt
    assert all(abs(t - 2 * alone) <= slack for t in both)
    assert slack < 0.1 * alone


def test_a_udp_port_that_is_taken_is_refused_not_taken_over():
    net, (a, b) = _hosts(dict(delay='1ms'))
    got = []
    b.bind_udp(53, lambda data, src: got.append(data))
    with pytest.raises(OSError, match='already in use'):
        b.bind_udp(53, lambda data, src: None)
    a.sendto(b'x', (b.ip, 53))
    net.engine.run()
    assert got == [b'x']
