"""The engine's queue (repronet/sim/engine.py) against the order it stands for: one plain
heap of (time, sequence) entries.

The engine files posted callbacks and Events in two heaps and takes the smaller top, moves
a retimed Event lazily (its old entry files it again when it comes up), drops cancelled
entries lazily and rebuilds a heap that is mostly cancelled ones. None of that may change
which callback runs when. Here a reference written the plain way (a retime is a cancel and
a new entry; a cancel marks a sequence) and each engine run the same random script of at,
post, trains posting hop after hop, retime, cancel (from outside and from inside events),
timers armed and cancelled in bulk (outside or inside an event), Events that post or file
an Event from inside themselves (at now too), step, run(until), run(stop) and next_time;
times come from a few values, so ties between posts and Events, and moved Events landing
on a pending time, are common. Every callback, its time, what
each run returned, the clock, the counter and next_time() must agree, with the engine's
rebuild threshold as it is and at 2 (rebuilds all the time)."""

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from repronet.sim import engine as engine_module
from repronet.sim.engine import Engine, EventHeapEngine

OFFSETS = st.sampled_from([-1.0, 0.0, 0.0, 0.5, 1.0, 1.0, 2.0])
HORIZONS = st.sampled_from([None, 0.0, 0.5, 1.5])
SCRIPT = st.lists(st.one_of(
    st.tuples(st.just('at'), OFFSETS),
    st.tuples(st.just('post'), OFFSETS),
    st.tuples(st.just('train'), OFFSETS, st.integers(1, 4)),
    st.tuples(st.just('move'), st.integers(0, 40), OFFSETS),
    st.tuples(st.just('cancel'), st.integers(0, 40)),
    st.tuples(st.just('inner'), st.integers(0, 40), st.one_of(st.none(), OFFSETS), OFFSETS),
    st.tuples(st.just('churn'), st.integers(1, 8), OFFSETS, st.booleans()),
    st.tuples(st.just('relay'), OFFSETS, OFFSETS, st.booleans()),
    st.tuples(st.just('step')),
    st.tuples(st.just('run'), HORIZONS),
    st.tuples(st.just('wait'), st.integers(0, 5), HORIZONS),
), max_size=150)


class _Reference:
    """The order an engine must keep, the plain way: one heap of (time, sequence, fn, args);
    a handle is a sequence, a cancel forgets it, a retime is a cancel and a new entry."""

    def __init__(self):
        self.now, self.events, self.heap, self.seq = 0.0, 0, [], 0
        self.pending = set()            # sequences not run nor cancelled
        self.calls = {}                 # at()'s sequence -> (fn, args), for retime

    def _push(self, when, fn, args):
        self.seq += 1
        heapq.heappush(self.heap, (max(when, self.now), self.seq, fn, args))
        self.pending.add(self.seq)
        return self.seq

    def at(self, when, fn, *args):
        seq = self._push(when, fn, args)
        self.calls[seq] = (fn, args)
        return seq

    def post(self, when, fn, args):
        self._push(when, fn, args)

    def alive(self, handle):
        return handle in self.pending

    def cancel(self, handle):
        self.pending.discard(handle)

    def retime(self, handle, when):
        self.cancel(handle)
        fn, args = self.calls[handle]
        return self.at(when, fn, *args)

    def next_time(self):
        live = [entry[0] for entry in self.heap if entry[1] in self.pending]
        return min(live) if live else None

    def step(self):
        while self.heap:
            when, seq, fn, args = heapq.heappop(self.heap)
            if seq in self.pending:
                self.pending.discard(seq)
                self.now, self.events = when, self.events + 1
                fn(*args)
                return True
        return False

    def run(self, until=None, stop=None):
        while True:
            if stop is not None and stop():
                return 'stop'
            when = self.next_time()
            if when is None or until is not None and when > until:
                if until is not None:
                    self.now = max(self.now, until)
                return 'idle' if when is None else 'until'
            self.step()


class _Script:
    """One queue (an engine or the reference), its handles and what its callbacks saw."""

    def __init__(self, queue):
        self.q, self.handles, self.seen, self.tags = queue, [], [], 0

    def alive(self, handle):
        return self.q.alive(handle) if isinstance(self.q, _Reference) else handle.alive

    def cancel(self, handle):
        if isinstance(self.q, _Reference):
            self.q.cancel(handle)
        else:
            handle.cancel()

    def note(self, tag):
        self.seen.append((self.q.now, tag))

    def hop(self, tag, offset, left):
        """A train: a posted callback that posts the next hop."""
        self.note(tag)
        if left:
            self.q.post(self.q.now + offset, self.hop, (tag + '>', offset, left - 1))

    def poke(self, tag, i, offset):
        """An event that cancels or moves an earlier one (a reply moving its timeout)."""
        self.note(tag)
        self.touch(i, offset)

    def relay(self, tag, offset, event):
        """An Event (a reply's handler) that posts a callback, or files an Event, from inside
        itself, at now or later, while other Events and posts may be due at the same time."""
        self.note(tag)
        if event:
            self.handles.append(self.q.at(self.q.now + offset, self.note, tag + '?'))
        else:
            self.q.post(self.q.now + offset, self.note, (tag + '!',))

    def churn(self, tag, n, offset):
        """Timers armed and cancelled at once (idle timers): what makes a heap rebuild."""
        for _ in range(n):
            self.cancel(self.q.at(self.q.now + offset, self.note, tag))

    def touch(self, i, offset):
        if self.handles:
            i %= len(self.handles)
            if not self.alive(self.handles[i]):
                return
            if offset is None:
                self.cancel(self.handles[i])
            else:
                self.handles[i] = self.q.retime(self.handles[i], self.q.now + offset)

    def apply(self, step):
        q, kind = self.q, step[0]
        self.tags += 1
        tag = '%s%d' % (kind, self.tags)
        if kind == 'at':
            self.handles.append(q.at(q.now + step[1], self.note, tag))
        elif kind == 'post':
            q.post(q.now + step[1], self.note, (tag,))
        elif kind == 'train':
            q.post(q.now + step[1], self.hop, (tag, step[1] + 0.5, step[2]))
        elif kind == 'move':
            self.touch(step[1], step[2])
        elif kind == 'cancel':
            self.touch(step[1], None)
        elif kind == 'inner':
            self.handles.append(q.at(q.now + step[3], self.poke, tag, step[1], step[2]))
        elif kind == 'relay':
            self.handles.append(q.at(q.now + step[1], self.relay, tag, step[2], step[3]))
        elif kind == 'churn' and step[3]:
            q.post(q.now + step[2], self.churn, (tag, step[1], step[2]))
        elif kind == 'churn':
            self.churn(tag, step[1], step[2])
        elif kind == 'step':
            self.seen.append(('step', q.step()))
        elif kind == 'run':
            until = None if step[1] is None else q.now + step[1]
            self.seen.append(('run', q.run(until=until)))
        elif kind == 'wait':
            k = len(self.seen) + step[1]
            until = None if step[2] is None else q.now + step[2]
            self.seen.append(('wait', q.run(until=until, stop=lambda: len(self.seen) >= k)))
        return q.now, q.events, q.next_time(), len(self.seen)


def _play(steps, queue):
    script = _Script(queue)
    trace = [script.apply(step) for step in steps]
    script.seen.append(('last', queue.run()))
    return trace, script.seen, queue.events, queue.now


@settings(max_examples=400, deadline=None)
@given(SCRIPT)
def test_the_queue_runs_everything_in_one_plain_heaps_order(steps):
    expected = _play(steps, _Reference())
    rebuild = engine_module.REBUILD_DEAD
    try:
        for threshold in (rebuild, 2):
            engine_module.REBUILD_DEAD = threshold
            for kind in (Engine, EventHeapEngine):
                assert _play(steps, kind()) == expected, (kind, threshold)
    finally:
        engine_module.REBUILD_DEAD = rebuild


def test_a_post_and_an_event_at_one_time_run_in_the_order_they_were_filed():
    """The two heaps' tops tie in time: the sequence decides, a moved Event's new one."""
    for kind in (Engine, EventHeapEngine):
        engine, seen = kind(), []
        timer = engine.at(1.0, seen.append, 'timer')
        engine.post(2.0, seen.append, ('post before the move',))
        timer = engine.retime(timer, 2.0)               # lazy: its entry stays at 1.0
        engine.post(2.0, seen.append, ('post after the move',))
        engine.at(2.0, seen.append, 'event after the move')
        engine.post(1.0, seen.append, ('post at 1',))
        assert engine.next_time() == 1.0 and engine.pending() == 5
        assert engine.run(until=1.5) == 'until' and seen == ['post at 1']
        engine.run()
        assert seen == ['post at 1', 'post before the move', 'timer', 'post after the move',
                        'event after the move'], kind
