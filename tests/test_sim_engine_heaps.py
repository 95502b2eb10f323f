"""EventHeapEngine (the engine under PyPy, repronet/sim/engine.py) against Engine.

Under PyPy the heap holds the Events themselves, compared by their own __lt__, rather than
(time, sequence, event) tuples; nothing else may change. Both run the same random scripts
of at, retime, cancel, step and run (ties in time are common, so the sequence order is
exercised), here under CPython as under PyPy: every callback, its time, the counters and
next_time() must agree, as must what each engine is for this interpreter."""

import platform

from hypothesis import given, settings

from repronet.sim.engine import Engine, EventHeapEngine, new_engine
from tests.test_sim_engine_retime import STEPS, _Side


@settings(max_examples=300, deadline=None)
@given(STEPS)
def test_the_event_heap_runs_everything_in_the_tuple_heaps_order(steps):
    tuples, events = _Side(True, Engine), _Side(True, EventHeapEngine)
    for step in steps:
        assert tuples.apply(step) == events.apply(step), step
    tuples.engine.run()
    events.engine.run()
    assert tuples.seen == events.seen and tuples.engine.events == events.engine.events


def test_a_heap_mostly_of_cancelled_events_is_rebuilt_and_moved_events_keep_order():
    for kind in (Engine, EventHeapEngine):
        engine, seen = kind(), []
        handles = [engine.at(100.0 + i, seen.append, i) for i in range(10000)]
        for h in handles[:9000]:
            h.cancel()
        assert engine.pending() == 1249          # rebuilt at 5,001, 2,500 and 1,250 cancelled
        timer = engine.at(1.0, seen.append, 'timer')
        assert engine.retime(timer, 200.0) is timer
        engine.at(150.0, seen.append, 'between')
        engine.run()
        assert seen == ['between', 'timer'] + list(range(9000, 10000)), kind


def test_pypy_gets_the_event_heap_and_cpython_the_tuple_heap():
    engine = new_engine(2.5)
    assert engine.now == 2.5
    assert type(engine) is (EventHeapEngine if platform.python_implementation() == 'PyPy'
                            else Engine)


def test_a_small_heap_is_rebuilt_too_once_most_of_it_is_cancelled():
    """A DHT search round leaves its connections' idle timers cancelled in the heap; with
    a floor of 4,096 a heap of a few dozen live events kept hundreds of dead ones, and
    every push and pop sifted through them. Order and counts stay the same."""
    for kind in (Engine, EventHeapEngine):
        engine, seen = kind(), []
        live = [engine.at(1.0 + i, seen.append, i) for i in range(30)]
        for round_ in range(20):            # each round: 40 timers armed, then cancelled
            for h in [engine.at(300.0 + round_, seen.append, 'idle') for _ in range(40)]:
                h.cancel()
        assert engine.pending() < 200, kind
        engine.run()
        assert seen == list(range(30)) and engine.events == 30 and live[0].alive is False
