"""The simulation's event engine (repronet/sim/engine.py): events run in (time, scheduling
order), cancellation is lazy and harmless at any moment, and run() leaves the clock where
its docstring says. Everything is virtual time, so every check is exact."""

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from repronet.sim.engine import Engine


def _recorder(engine):
    """A callback that appends (now, tag) to a list; returns (callback, list)."""
    seen = []
    return (lambda tag: seen.append((engine.now, tag))), seen


def test_events_run_by_time_then_by_scheduling_order():
    engine = Engine()
    note, seen = _recorder(engine)
    engine.at(2.0, note, 'late')
    engine.at(1.0, note, 'tie-first')
    engine.after(1.0, note, 'tie-second')
    engine.at(0.5, note, 'early')
    engine.at(1.0, note, 'tie-third')
    assert engine.run() == 'idle'
    assert seen == [(0.5, 'early'), (1.0, 'tie-first'), (1.0, 'tie-second'),
                    (1.0, 'tie-third'), (2.0, 'late')]
    assert engine.events == 5 and engine.now == 2.0


def test_an_event_scheduled_for_now_runs_after_those_already_due_now():
    engine = Engine()
    note, seen = _recorder(engine)
    engine.at(1.0, lambda: engine.at(1.0, note, 'scheduled inside'))
    engine.at(1.0, note, 'scheduled before')
    engine.run()
    assert seen == [(1.0, 'scheduled before'), (1.0, 'scheduled inside')]


def test_at_in_the_past_and_negative_after_run_at_now():
    engine = Engine(start=5.0)
    note, seen = _recorder(engine)
    engine.at(3.0, note, 'past')
    engine.after(-1.0, note, 'negative')
    assert engine.next_time() == 5.0
    engine.run()
    assert seen == [(5.0, 'past'), (5.0, 'negative')]


def test_a_cancelled_event_never_runs_and_is_not_counted():
    engine = Engine()
    note, seen = _recorder(engine)
    doomed = engine.at(1.0, note, 'cancelled')
    engine.at(2.0, note, 'kept')
    doomed.cancel()
    assert engine.pending() == 2            # lazy: still in the heap
    engine.run()
    assert seen == [(2.0, 'kept')] and engine.events == 1 and engine.pending() == 0
    engine.at(3.0, note, 'cancelled too').cancel()
    engine.at(4.0, note, 'next')
    assert engine.next_time() == 4.0 and engine.pending() == 1


def test_cancel_while_running_or_after_running_is_harmless():
    engine = Engine()
    note, seen = _recorder(engine)
    box = {}
    box['self'] = engine.at(1.0, lambda: (box['self'].cancel(), note('ran')))
    later = engine.at(2.0, note, 'later')
    engine.run(until=1.5)
    box['self'].cancel()
    box['self'].cancel()
    engine.run()
    assert seen == [(1.0, 'ran'), (2.0, 'later')]
    later.cancel()                          # after it ran
    assert engine.run() == 'idle' and engine.events == 2


def test_run_until_is_inclusive_and_leaves_the_clock_at_until():
    engine = Engine()
    note, seen = _recorder(engine)
    engine.at(1.0, note, 'a')
    engine.at(2.0, note, 'at until')
    engine.at(3.0, note, 'after')
    assert engine.run(until=2.0) == 'until'
    assert seen == [(1.0, 'a'), (2.0, 'at until')] and engine.now == 2.0
    assert engine.run(until=2.5) == 'until' and engine.now == 2.5 and len(seen) == 2
    assert engine.run(until=10.0) == 'idle' and engine.now == 10.0 and len(seen) == 3


def test_run_until_in_the_past_does_not_move_the_clock_back():
    engine = Engine(start=4.0)
    engine.at(5.0, lambda: None)
    assert engine.run(until=1.0) == 'until' and engine.now == 4.0 and engine.events == 0


def test_run_stop_ends_after_the_event_that_made_it_true():
    engine = Engine()
    note, seen = _recorder(engine)
    for i in range(1, 6):
        engine.at(float(i), note, i)
    assert engine.run(until=100.0, stop=lambda: len(seen) == 3) == 'stop'
    assert [tag for _, tag in seen] == [1, 2, 3] and engine.now == 3.0 and engine.events == 3
    assert engine.run(stop=lambda: True) == 'stop' and engine.events == 3   # true already
    assert engine.run() == 'idle' and [tag for _, tag in seen] == [1, 2, 3, 4, 5]


def test_step_and_next_time():
    engine = Engine()
    note, seen = _recorder(engine)
    assert engine.next_time() is None and engine.step() is False
    engine.at(2.0, note, 'b').cancel()
    engine.at(3.0, note, 'c')
    assert engine.step() is True and seen == [(3.0, 'c')] and engine.now == 3.0
    engine.at(4.0, note, 'd').cancel()
    engine.at(5.0, note, 'e')
    assert engine.next_time() == 5.0
    assert engine.step() is True and engine.step() is False
    assert seen == [(3.0, 'c'), (5.0, 'e')] and engine.events == 2


def test_arguments_are_passed_and_the_counter_counts_callbacks():
    engine = Engine()
    got = []
    for i in range(1000):
        engine.after(i * 0.001, lambda a, b: got.append(a + b), i, 1)
    engine.run()
    assert got == list(range(1, 1001)) and engine.events == 1000


def test_a_heap_mostly_of_cancelled_events_is_rebuilt_without_them():
    """Re-armed timeouts far in the future must not pile up (each would keep its node alive):
    once more than half of a large heap is cancelled it is rebuilt, order unchanged, even
    when the cancelling happens inside a running event."""
    engine = Engine()
    ran = []
    keep = [engine.at(1000.0 + i, ran.append, i) for i in range(10)]
    doomed = [engine.at(500.0, ran.append, 'never') for _ in range(9000)]

    def cancel_all():
        for event in doomed:
            event.cancel()
    engine.at(1.0, cancel_all)
    engine.run(until=2.0)
    assert engine.pending() < 1000
    assert doomed[0].fn is None and doomed[0].args is None       # references dropped
    engine.run()
    assert ran == list(range(10)) and all(not e.alive for e in keep)


def test_an_event_scheduled_after_a_look_ahead_still_runs_in_time_order():
    """next_time() and run(until) look at later events without taking them; what is
    scheduled afterwards for an earlier time runs first."""
    engine = Engine()
    note, seen = _recorder(engine)
    engine.at(10.0, note, 'late')
    assert engine.next_time() == 10.0
    engine.at(5.0, note, 'scheduled after the look')
    assert engine.run(until=2.0) == 'until'
    engine.at(3.0, note, 'scheduled after until')
    engine.run()
    assert seen == [(3.0, 'scheduled after until'), (5.0, 'scheduled after the look'),
                    (10.0, 'late')]


class _Reference:
    """The order the engine must keep, written the plain way: a heap of (time, sequence)."""

    def __init__(self):
        self.now, self.heap, self.seq, self.cancelled = 0.0, [], 0, set()

    def at(self, when, fn, *args):
        self.seq += 1
        heapq.heappush(self.heap, (max(when, self.now), self.seq, fn, args))
        return self.seq

    def cancel(self, handle):
        self.cancelled.add(handle)

    def run(self):
        while self.heap:
            self.now, seq, fn, args = heapq.heappop(self.heap)
            if seq not in self.cancelled:
                fn(*args)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.5]),
                          st.integers(0, 3), st.integers(0, 40)), min_size=1, max_size=40))
def test_any_mix_of_scheduling_and_cancelling_runs_in_time_then_sequence_order(script):
    """Events that schedule others (at now, later, in the past) and cancel earlier ones run
    in the same order in the engine as in a plain (time, sequence) heap."""
    def play(engine, cancel):
        seen, handles = [], []

        def fire(i):
            seen.append((engine.now, i))
            delay, children, victim = script[i % len(script)]
            if victim < len(handles):
                cancel(handles[victim])
            for c in range(children):
                if len(handles) < 300:
                    handles.append(engine.at(engine.now + delay * c - 0.5, fire, len(handles)))
        for i, (delay, _, _) in enumerate(script):
            handles.append(engine.at(delay * i, fire, i))
        engine.run()
        return seen
    reference = _Reference()
    assert play(Engine(), lambda e: e.cancel()) == play(reference, reference.cancel)
