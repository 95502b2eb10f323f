"""Engine.run's signalled stop and its own loop (repronet/sim/engine.py) against asking the
stop condition after every event.

A benchmark waits for its clients to end: its stop condition changes only when a node ends,
which calls ``Engine.signal()``, so ``run(stop=..., signalled=True)`` asks it only after
such an event, in a loop of its own (``_run_signalled``, also the loop of a run without a
stop condition). Two engines run the same random script of at, post, retime, cancel, step,
nodes that end (inside an event, or from outside as a kill), and runs with a stop condition
("k nodes have ended") and a horizon; one runs signalled, the other asks after every event.
Times come from a few values, so ties are common. Every callback, its time, what each run
returned, the clock, the counters, the heap's length and next_time() must agree, under
both engines (tuple heap and event heap)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from repronet.sim.engine import Engine, EventHeapEngine
from tests.test_sim_engine_post import _Poster
from tests.test_sim_engine_retime import OFFSETS, STEP

SCRIPT = st.lists(st.one_of(
    STEP,
    st.tuples(st.just('post'), OFFSETS),
    st.tuples(st.just('end'), OFFSETS),                 # a node ends at now + offset
    st.tuples(st.just('kill')),                         # a node ends now, outside run
    st.tuples(st.just('wait'), st.integers(0, 6), st.sampled_from([None, 0.0, 1.0, 2.5])),
    st.tuples(st.just('idle'), st.sampled_from([None, 0.0, 1.5])),
), max_size=120)


class _Waiter(_Poster):
    """A _Poster whose nodes end (signal) and whose runs wait for k of them to have ended,
    signalled or asking after every event."""

    def __init__(self, kind, signalled):
        _Poster.__init__(self, kind, True)
        self.signalled, self.ended, self.asked = signalled, 0, 0

    def end(self, tag):
        self.note(tag)
        self.ended += 1
        self.engine.signal()

    def apply(self, step):
        engine = self.engine
        if step[0] == 'end':
            self.tags += 1
            engine.post(engine.now + step[1], self.end, (('end', self.tags),))
        elif step[0] == 'kill':
            self.ended += 1
            engine.signal()
        elif step[0] == 'wait':
            k, horizon = self.ended + step[1], step[2]
            until = None if horizon is None else engine.now + horizon
            why = engine.run(until=until, stop=lambda: self.ended >= k,
                             signalled=self.signalled)
            self.seen.append(('run', why))
        elif step[0] == 'idle':             # no stop condition: the fast loop for both
            until = None if step[1] is None else engine.now + step[1]
            self.seen.append(('run', engine.run(until=until)))
        else:
            return _Poster.apply(self, step)
        return (engine.now, engine.events, engine.next_time(), engine.pending(),
                len(self.seen))


def _play(steps, kind, signalled):
    side = _Waiter(kind, signalled)
    trace = [side.apply(step) for step in steps]
    side.seen.append(('last', side.engine.run(stop=lambda: False, signalled=signalled)))
    return trace, side.seen, side.engine.events, side.engine.now, side.engine.pending()


@settings(max_examples=400, deadline=None)
@given(SCRIPT)
def test_a_signalled_stop_stops_after_the_same_event_as_asking_after_every_one(steps):
    for kind in (Engine, EventHeapEngine):
        assert _play(steps, kind, True) == _play(steps, kind, False), kind


def test_a_signalled_stop_is_asked_only_before_the_first_event_and_after_signals():
    for kind in (Engine, EventHeapEngine):
        engine, asked, seen = kind(), [], []
        for i in range(10):
            engine.post(float(i), seen.append, (i,))
        engine.post(4.5, engine.signal, ())

        def stop():
            asked.append(engine.now)
            return len(seen) >= 3
        assert engine.run(stop=stop, signalled=True) == 'stop', kind
        assert asked == [0.0, 4.5] and seen == [0, 1, 2, 3, 4] and engine.events == 6, kind
        assert engine.run(until=7.0) == 'until' and engine.now == 7.0 and seen[-1] == 7


def test_a_node_that_ends_signals_its_engine():
    from repronet.sim.process import SimProcess

    class _Backend:
        def __init__(self):
            self.engine, self.stacks, self.seed, self.cpu = Engine(), {'h': None}, 0, None

    class _Host:
        name = 'h'

    import pathlib
    import tempfile
    backend = _Backend()
    proc = SimProcess(backend, _Host(), 'n', [], pathlib.Path(tempfile.mkdtemp()))
    proc.exit(0)
    proc.exit(1)                        # once only
    assert backend.engine.signals == 1 and proc.returncode == 0
