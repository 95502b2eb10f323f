"""Engine.post (repronet/sim/engine.py) against what it stands for: at() without a handle.

The network files a train's next hop and its end with post(), a bare heap entry without an
Event; nothing else may change. Two engines run the same random script of at, post,
retime, cancel, step and run, one posting where the other calls at() (and forgets the
handle); times come from a few values, so ties (ordered by the shared sequence) are
common, and cancels rebuild the heap around the bare entries. Every callback, its time,
the counters and next_time() must agree, under both engines (tuple heap and event heap)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from repronet.sim.engine import Engine, EventHeapEngine
from tests.test_sim_engine_retime import OFFSETS, STEP, _Side

PAST = st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0])     # at(): never earlier than now
POSTS = st.lists(st.one_of(STEP, st.tuples(st.just('post'), PAST),
                           st.tuples(st.just('chain'), OFFSETS)), max_size=120)


class _Poster(_Side):
    """A _Side that also schedules handle-less callbacks: with post() or, for the
    reference, with at()."""

    def __init__(self, kind, posts):
        _Side.__init__(self, True, kind)
        self.posts, self.tags = posts, 0

    def later(self, when, fn, *args):
        if self.posts:
            self.engine.post(when, fn, args)
        else:
            self.engine.at(when, fn, *args)

    def chained(self, tag, offset):
        """A posted callback that posts the next (a train hop by hop)."""
        self.note(tag)
        if tag[1] < 3:
            self.later(self.engine.now + offset, self.chained, (tag[0], tag[1] + 1), offset)

    def apply(self, step):
        if step[0] in ('post', 'chain'):
            self.tags += 1
            tag = ('p%d' % self.tags, 0)
            fn = self.note if step[0] == 'post' else self.chained
            args = (tag,) if step[0] == 'post' else (tag, step[1])
            self.later(self.engine.now + step[1], fn, *args)
            return (self.engine.now, self.engine.events, self.engine.next_time(),
                    len(self.seen))
        return _Side.apply(self, step)


def _play(steps, kind, posts):
    side = _Poster(kind, posts)
    trace = [side.apply(step) for step in steps]
    side.engine.run()
    return trace, side.seen, side.engine.events, side.engine.pending()


@settings(max_examples=300, deadline=None)
@given(POSTS)
def test_post_runs_everything_in_the_order_at_would(steps):
    for kind in (Engine, EventHeapEngine):
        assert _play(steps, kind, True) == _play(steps, kind, False), kind


def test_posted_entries_survive_a_rebuild_and_run_in_order_with_events():
    for kind in (Engine, EventHeapEngine):
        engine, seen = kind(), []
        for i in range(100):
            engine.post(10.0 + i % 7, seen.append, (('post', i),))
        doomed = [engine.at(5.0, seen.append, 'never') for _ in range(500)]
        engine.at(12.0, seen.append, 'event')
        for h in doomed:
            h.cancel()
        assert engine.pending() < 300, kind        # rebuilt: the posted entries kept
        assert engine.run(until=11.0) == 'until' and engine.now == 11.0
        engine.post(0.0, seen.append, ('past',))    # never earlier than now: first at 11
        engine.post(11.0, seen.append, ('now',))
        assert engine.run(until=12.0) == 'until' and engine.now == 12.0
        engine.run()
        order = sorted(range(100), key=lambda i: (i % 7, i))
        expected = [('post', i) for i in order if i % 7 < 2] + ['past', 'now'] + \
            [('post', i) for i in order if i % 7 == 2] + ['event'] + \
            [('post', i) for i in order if i % 7 > 2]
        assert seen == expected and engine.events == 103, kind


def test_step_runs_posted_entries_too():
    for kind in (Engine, EventHeapEngine):
        engine, seen = kind(), []
        engine.post(2.0, seen.append, ('b',))
        engine.at(1.0, seen.append, 'a')
        assert engine.next_time() == 1.0
        assert engine.step() and engine.step() and not engine.step()
        assert seen == ['a', 'b'] and engine.now == 2.0 and engine.events == 2, kind
