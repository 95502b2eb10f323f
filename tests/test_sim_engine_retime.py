"""Engine.retime (repronet/sim/engine.py) against what it stands for: cancel() then at().

A client moves its reply timeout after every reply; retime moves the event instead of
leaving a cancelled one behind, and must not change the order of anything. Two engines run
the same random script, one moving events with retime, the other cancelling them and
scheduling new ones; times come from a few values, so ties (ordered by scheduling sequence)
are common. Every callback, its time, the counters and next_time() must agree."""

from hypothesis import given, settings
from hypothesis import strategies as st

from repronet.sim.engine import Engine

OFFSETS = st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 3.0])
STEP = st.one_of(
    st.tuples(st.just('at'), OFFSETS),
    st.tuples(st.just('move'), st.integers(0, 30), OFFSETS),
    st.tuples(st.just('cancel'), st.integers(0, 30)),
    st.tuples(st.just('step')),
    st.tuples(st.just('run'), OFFSETS),
)
STEPS = st.lists(STEP, max_size=80)


class _Side:
    """One engine, its handles and what its callbacks saw."""

    def __init__(self, moves, kind=Engine):
        self.engine, self.moves, self.handles, self.seen = kind(), moves, [], []

    def note(self, tag):
        self.seen.append((self.engine.now, tag))

    def apply(self, step):
        engine = self.engine
        if step[0] == 'at':
            tag = len(self.handles)
            self.handles.append(engine.at(engine.now + step[1], self.note, tag))
        elif step[0] in ('move', 'cancel') and self.handles:
            i = step[1] % len(self.handles)
            old = self.handles[i]
            if step[0] == 'cancel':
                old.cancel()
            elif old.alive:
                when = engine.now + step[2]
                self.handles[i] = engine.retime(old, when) if self.moves else \
                    _cancel_then_at(engine, old, when, self.note, i)
        elif step[0] == 'step':
            engine.step()
        elif step[0] == 'run':
            engine.run(until=engine.now + step[1])
        return (engine.now, engine.events, engine.next_time(), len(self.seen))


def _cancel_then_at(engine, old, when, fn, tag):
    old.cancel()
    return engine.at(when, fn, tag)


@settings(max_examples=300, deadline=None)
@given(STEPS)
def test_retime_runs_everything_in_the_order_cancel_then_at_would(steps):
    moved, replaced = _Side(True), _Side(False)
    for step in steps:
        assert moved.apply(step) == replaced.apply(step), step
    moved.engine.run()
    replaced.engine.run()
    assert moved.seen == replaced.seen
    assert moved.engine.events == replaced.engine.events


def test_a_timer_moved_later_adds_no_entry_and_runs_once_at_its_last_time():
    engine = Engine()
    seen = []
    timer = engine.at(1.0, seen.append, 'timer')
    for i in range(100):
        assert engine.retime(timer, 2.0 + i) is timer
    engine.at(50.0, seen.append, 'between')
    assert engine.pending() == 2
    engine.run()
    assert seen == ['between', 'timer'] and engine.now == 101.0 and engine.events == 2


def test_a_timer_moved_earlier_is_a_new_event_and_the_old_one_never_runs():
    engine = Engine()
    seen = []
    timer = engine.at(5.0, seen.append, 'late')
    moved = engine.retime(timer, 1.0)
    assert moved is not timer and not timer.alive and moved.alive
    engine.run()
    assert seen == ['late'] and engine.now == 1.0 and engine.events == 1
