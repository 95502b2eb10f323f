"""Port.enqueue's short path for an idle port (repronet/sim/links.py) against the general
one, Port._enqueue.

Two ports made alike are offered the same random trains, one through enqueue (which takes
the short path when it may), the other through _enqueue only, each drawing from its own
generator seeded alike. Ports are shaped or not, with or without loss and jitter, with
small queues, sometimes taken down; trains come idle (after the port's last one left),
back to back or overlapping. Every answer and all of the port's state (its backlog,
queued packets, busy time and counters) must be the same bit for bit, and so must what
each generator draws next."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from repronet.emu.linkemu_params import DirectionParams
from repronet.sim.links import Port

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


@settings(max_examples=400, deadline=None)
@given(PARAMS, TRAINS, st.integers(0, 2**32))
def test_the_idle_path_answers_as_the_general_path(params, trains, seed):
    short, general = Port('a', 'b', params), Port('a', 'b', params)
    rng_short, rng_general = random.Random(seed), random.Random(seed)
    first = 0.0
    for gap, spread, nbytes, packets, up in trains:
        first += gap
        short.up = general.up = up
        got = short.enqueue(first, first + spread, nbytes, packets, rng_short)
        want = general._enqueue(first, first + spread, nbytes, packets, rng_general)
        assert got == want and _state(short) == _state(general)
    assert rng_short.random() == rng_general.random()


class _Counting(Port):
    """A Port that counts the trains the general path took."""

    __slots__ = ('general',)

    def _enqueue(self, *args):
        self.general += 1
        return Port._enqueue(self, *args)


def test_the_short_path_is_taken_on_an_idle_port_and_not_on_a_busy_one():
    """Arrivals by the model's closed forms: 1,000 bytes at 8 Mbit/s take 1 ms, so a train
    2 ms later finds the port idle and one 0.5 ms later waits."""
    port = _Counting('a', 'b', DirectionParams(8, 1.0, 0.0, 0.0, None))
    port.general = 0
    assert port.enqueue(0.0, 0.0, 1000, 2, None) == (0.0005 + 0.001, 0.001 + 0.001, 2, 1000)
    assert port.enqueue(0.002, 0.002, 1000, 1, None) == (0.003 + 0.001, 0.003 + 0.001, 1, 1000)
    assert port.queue() == [(0.003, 1)] and port.queued == 1 and port.general == 0
    assert port.enqueue(0.0025, 0.0025, 1000, 1, None) == (0.004 + 0.001, 0.004 + 0.001, 1, 1000)
    assert port.queue() == [(0.003, 1), (0.004, 1)] and port.queued == 2
    assert port.sent == 4 and port.bytes == 3000 and port.general == 1
