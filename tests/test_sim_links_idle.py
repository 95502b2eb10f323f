"""Network.forward's short path for an idle port (repronet/sim/links.py) against the general
one, Port.enqueue.

A port is offered random trains through Network.forward (which takes the short path when it
may) as the first port of a two-port path, so that what it answers is the next hop that
forward posts; a port made alike is offered the same trains through Port.enqueue. Each draws
from its own generator seeded alike. Ports are shaped or not, with or without loss and
jitter, with small queues, sometimes taken down; trains come idle (after the port's last
one left), back to back or overlapping. Every answer (or the loss) and all of the port's
state (its queue, queued packets, busy time and counters) must be the same bit for bit, and
so must what each generator draws next."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from mininet.topo import Topo

from repronet.emu.linkemu_params import DirectionParams
from repronet.sim.engine import Engine
from repronet.sim.links import Network, Port

PARAMS = st.builds(
    DirectionParams,
    st.sampled_from([None, 1, 10, 100, 1000, 3.7]),        # bw, Mbit/s
    st.sampled_from([0.0, 0.05, 1.0, 20.0]),               # delay, ms
    st.sampled_from([0.0, 0.0, 0.01]),                     # jitter, ms
    st.sampled_from([0.0, 0.0, 0.0, 1.0, 30.0]),           # loss, percent
    st.sampled_from([None, None, 1, 5, 60]))               # max_queue_size
TRAINS = st.lists(st.tuples(
    st.sampled_from([0.0, 0.0, 1e-6, 1e-5, 1e-3, 0.5]),    # gap after the previous first
    st.sampled_from([0.0, 0.0, 1e-6, 1e-4]),               # last - first
    st.integers(1, 70000),                                 # bytes
    st.integers(1, 50),                                    # packets
    st.sampled_from([True] * 9 + [False])), max_size=60)   # port up


def _state(port):
    return (port.queue(), port.queued, port.busy_until, port.sent, port.dropped,
            port.overflow, port.bytes)


class _Posts(Engine):
    """An engine that keeps what forward posts (the next hop's times) instead of running it."""

    def post(self, when, fn, args):
        self.posted.append(args[2:6])       # first, last, nbytes, packets at the next port


class _Train:
    packets = 0

    def __init__(self, lost):
        self.lost = lost


def _forwarding(port, rng):
    """forward(first, last, nbytes, packets) -> what enqueue answers, through a Network
    whose path is [port, another]."""
    topo = Topo()
    topo.addLink(topo.addHost('h1'), topo.addHost('h2'))
    engine = _Posts()
    engine.posted = []
    net = Network(engine, topo)
    net.rng = rng
    path = [port, net.ports[('h1', 'h2')]]

    def forward(first, last, nbytes, packets):
        lost = []
        net.forward(path, 0, first, last, nbytes, packets, _Train(lost.append))
        if lost:
            return None
        first, last, nbytes, packets = engine.posted.pop()
        return first, last, packets, nbytes
    return forward


@settings(max_examples=400, deadline=None)
@given(PARAMS, TRAINS, st.integers(0, 2**32))
def test_the_idle_path_answers_as_the_general_path(params, trains, seed):
    short, general = Port('a', 'b', params), Port('a', 'b', params)
    rng_short, rng_general = random.Random(seed), random.Random(seed)
    forward = _forwarding(short, rng_short)
    first = 0.0
    for gap, spread, nbytes, packets, up in trains:
        first += gap
        short.up = general.up = up
        got = forward(first, first + spread, nbytes, packets)
        want = general.enqueue(first, first + spread, nbytes, packets, rng_general)
        assert got == want and _state(short) == _state(general)
    assert rng_short.random() == rng_general.random()


class _Counting(Port):
    """A Port that counts the trains the general path took."""

    __slots__ = ('general',)

    def enqueue(self, *args):
        self.general += 1
        return Port.enqueue(self, *args)


def test_the_short_path_is_taken_on_an_idle_port_and_not_on_a_busy_one():
    """Arrivals by the model's closed forms: 1,000 bytes at 8 Mbit/s take 1 ms, so a train
    2 ms later finds the port idle and one 0.5 ms later waits."""
    port = _Counting('a', 'b', DirectionParams(8, 1.0, 0.0, 0.0, None))
    port.general = 0
    forward = _forwarding(port, None)
    assert forward(0.0, 0.0, 1000, 2) == (0.0005 + 0.001, 0.001 + 0.001, 2, 1000)
    assert forward(0.002, 0.002, 1000, 1) == (0.003 + 0.001, 0.003 + 0.001, 1, 1000)
    assert port.queue() == [(0.003, 1)] and port.queued == 1 and port.general == 0
    assert forward(0.0025, 0.0025, 1000, 1) == (0.004 + 0.001, 0.004 + 0.001, 1, 1000)
    assert port.queue() == [(0.003, 1), (0.004, 1)] and port.queued == 2
    assert port.sent == 4 and port.bytes == 3000 and port.general == 1


CHANGES = [('loss', 0.5), ('loss', 1.0), ('jitter', 0.002), ('rate', None), ('limit', 3),
           ('up', False), ('rate', 1e5), ('limit', 60)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(CHANGES), TRAINS), min_size=1, max_size=5),
       st.integers(0, 2**32))
def test_a_port_changed_mid_run_leaves_the_short_path_as_enqueue_would(changes, seed):
    """Port.fits follows every attribute it is made of, not only up: a port set lossy,
    jittered, unshaped or with a smaller queue after it took trains (a fault step that
    changes a link) answers through forward as through enqueue. fits was computed only
    when up was set, so a port made lossy later still took the short path (no loss)."""
    params = DirectionParams(100, 1.0, 0.0, 0.0, None)
    short, general = Port('a', 'b', params), Port('a', 'b', params)
    rng_short, rng_general = random.Random(seed), random.Random(seed)
    forward = _forwarding(short, rng_short)
    first = 0.0
    for (name, value), trains in changes:
        setattr(short, name, value)
        setattr(general, name, value)
        for gap, spread, nbytes, packets, _ in trains:
            first += gap + 0.01         # mostly idle again: the short path's case
            got = forward(first, first + spread, nbytes, packets)
            want = general.enqueue(first, first + spread, nbytes, packets, rng_general)
            assert got == want and _state(short) == _state(general), (name, value)
    assert rng_short.random() == rng_general.random()
