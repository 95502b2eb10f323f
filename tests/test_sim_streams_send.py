"""Conn.send's short path (repronet/sim/streams.py) against queueing the write and pumping.

A write to an open connection with nothing queued, small enough for one train and the
window, is sent at once instead of going through the queue and _pump. Here the same random
scripts of writes, echoes and closes run twice over links of random rate, delay, loss and
queue size, connections with the default or a clamped MSS: once with Conn.send as it is,
once with the general path only (the send below, the code before the short path existed).
Everything the applications hear, with its virtual time, every connection's counters, the
ports' counters and the number of events must be the same."""

from hypothesis import given, settings
from hypothesis import strategies as st
from mininet.topo import Topo

from repronet.sim.engine import Engine
from repronet.sim.links import Network
from repronet.sim.stack import Stack
from repronet.sim.streams import Conn


def _queue_and_pump(self, data):
    """Conn.send without the short path: every write is queued, then pumped."""
    if self.state not in ('open', 'connecting') or not data:
        return
    self.out.append(bytes(data))
    self.queued += len(data)
    if self.state == 'open':
        self._pump()


class _Echo:
    """Records what it hears; echoes every chunk back, some of them twice, when told to."""

    def __init__(self, engine, heard, echo):
        self.engine, self.heard, self.echo = engine, heard, echo

    def connection_made(self, conn):
        self.heard.append(('made', self.engine.now))

    def data_received(self, conn, data):
        self.heard.append(('data', self.engine.now, len(data), hash(data)))
        for _ in range(self.echo):
            conn.send(data[:7000])

    def connection_lost(self, conn, why):
        self.heard.append(('lost', self.engine.now, why))


LINKS = st.fixed_dictionaries({
    'bw': st.sampled_from([None, 1, 10, 100, 1000]),
    'delay': st.sampled_from(['0ms', '0.05ms', '1ms', '5ms']),
    'loss': st.sampled_from([0, 0, 0, 2]),
    'max_queue_size': st.sampled_from([None, None, 30])})
ACTIONS = st.lists(st.tuples(
    st.sampled_from([0.0, 0.0, 1e-5, 1e-3, 0.02]),           # wait before the action
    st.integers(0, 5),                                       # which connection
    st.sampled_from(['write', 'write', 'write', 'bytearray', 'writable', 'close']),
    st.sampled_from([1, 100, 1448, 5000, 65536, 70000, 300000])), max_size=40)


def _play(link, mss, echo, actions, short):
    topo = Topo()
    names = ['h1', 'h2', 'h3']
    for name in names:
        topo.addHost(name)
    topo.addSwitch('s1')
    for name in names:
        topo.addLink(name, 's1', **link)
    engine = Engine()
    net = Network(engine, topo, 7)
    stacks = [Stack(net, name, '10.0.0.%d' % i) for i, name in enumerate(names, 1)]
    heard, accepted = [], []

    def accept(conn):
        accepted.append(conn)
        return _Echo(engine, heard, echo)
    for stack in stacks[1:]:
        stack.listen(80, accept)
    conns = [stacks[i % 2].connect(stacks[1 + (i % 2)].ip, 80, _Echo(engine, heard, 0),
                                   mss if i % 3 == 0 else None) for i in range(6)]

    def act(k, what, size):
        conn = conns[k]
        if what == 'close':
            conn.close()
        elif what == 'writable':        # write again once the buffer has room
            conn.when_writable(lambda: engine.at(engine.now, act, k, 'write', size))
        else:
            data = bytes((k + j) % 251 for j in range(size))
            conn.send(bytearray(data) if what == 'bytearray' else data)
    t = 0.0
    for wait, k, what, size in actions:
        t += wait
        engine.at(t, act, k, what, size)
    original = Conn.send
    if not short:
        Conn.send = _queue_and_pump
    try:
        engine.run(until=120.0)
    finally:
        Conn.send = original
    counters = [(c.state, c.bytes_sent, c.bytes_received, c.retransmits, c.inflight,
                 c.queued, c.next_seq, c.expect) for c in conns + accepted]
    ports = sorted((key, p.record()['packets'], p.dropped, p.overflow, p.bytes)
                   for key, p in net.ports.items())
    return heard, counters, ports, engine.events


@settings(max_examples=250, deadline=None)
@given(LINKS, st.sampled_from([536, 1000, 1448]), st.integers(0, 2), ACTIONS)
def test_the_short_path_sends_what_queue_and_pump_would(link, mss, echo, actions):
    assert _play(link, mss, echo, actions, True) == _play(link, mss, echo, actions, False)


def _pair(link):
    """An open connection h1 -> h2 over one link; (engine, the client's Conn, the
    server's chunks)."""
    topo = Topo()
    for name in ('h1', 'h2'):
        topo.addHost(name)
    topo.addLink('h1', 'h2', **link)
    engine = Engine()
    net = Network(engine, topo, 1)
    a, b = Stack(net, 'h1', '10.0.0.1'), Stack(net, 'h2', '10.0.0.2')
    chunks = []

    class Sink(_Echo):
        def data_received(self, conn, data):
            chunks.append(data)
    b.listen(80, lambda conn: Sink(engine, [], 0))
    conn = a.connect(b.ip, 80, _Echo(engine, [], 0))
    engine.run()
    return engine, conn, chunks


def test_a_write_behind_queued_data_waits_its_turn_when_acks_free_the_window():
    """The ACK of the first train frees the window at the very time of a small write that
    runs before the sender's wake-up: the write must still go after what was queued."""
    engine, conn, chunks = _pair(dict(delay='1ms'))
    conn.window = 3000
    t0 = engine.now
    engine.at(t0 + 0.001 + 0.001, conn.send, b'b' * 10)    # the ACK's time, filed first
    engine.at(t0, conn.send, b'a' * 5000)
    engine.run()
    assert b''.join(chunks) == b'a' * 5000 + b'b' * 10


def test_a_small_write_on_an_idle_connection_is_not_queued():
    """The short path is taken: the write is in flight at once, nothing waits in out."""
    engine, conn, _ = _pair(dict(bw=100, delay='1ms'))
    pumped = []
    conn._pump = lambda: pumped.append(True)
    conn.send(b'x' * 1000)
    assert conn.inflight == 1000 and not conn.out and conn.queued == 0 and not pumped
    conn.send(b'y' * 70000)                 # more than a train: queued and pumped
    assert pumped and conn.queued == 70000
