"""The discrete-event engine of the simulation backend: one virtual clock, one event heap.

Why its own engine rather than a library: the protocol cores already take ``now`` as an
argument and return their next deadline, so all a simulator needs is a heap of callbacks
ordered by (time, sequence). The sequence number breaks ties in the order events were
scheduled, so two runs with the same seed execute the same events in the same order and
write byte-identical logs (FoundationDB's and TigerBeetle's deterministic simulation rest on
the same rule). Nothing here reads the wall clock or a random source.

Cancellation is lazy: a cancelled event stays in the heap and is skipped when popped, which
keeps ``cancel()`` O(1) (timers are re-armed far more often than they fire). When more than
half of the heap (and more than ``REBUILD_DEAD`` entries) is cancelled events, it is rebuilt
without them: a re-armed timeout far in the future would otherwise keep its node (and
everything the node holds) alive to the end, and every push and pop would sift through
them (a DHT search round leaves the 300 s idle timers of its 64 connections behind, so the
heap of a few dozen live events grew by that much per round). A rebuild costs the heap's
length and comes after at least half that many cancels: constant per cancel.
A timer moved later (``retime``) keeps its entry, which files it again when it comes up.

Most events are never cancelled: a train entering its next port or reaching its end
(``Network``: 16,256 of the 16,328 events of a warm DHT search round). ``post`` files
them as a bare ``(time, sequence, fn, args)`` entry, without an Event to hand back:
making an Event (a Python ``__init__``) and packing ``*args`` was a tenth of such an
event's cost. The sequence is the same counter, so the order is the one ``at`` would give.

Two heaps, one order: posted entries have a heap of their own (``_posts``), Events'
``(time, sequence, event)`` entries another (``_heap``), and the next event is the smaller
of the two tops by (time, sequence), so the order is that of one heap of both. Why: in a
DHT search round the Events' heap holds some 400 entries (the clients' reply timeouts and
the connections' idle timers, most far ahead, and cancelled ones) and the posted trains in
flight about seven; in one heap, every train's push and pop sifted its (time, sequence,
...) tuple through the timers' levels, ten tuple comparisons an event, where the trains'
heap alone takes four, and the timers' heap is touched only when a timer is armed or comes
up. (Posts rarely share a pending time, 3 % in that round, so a heap of distinct times with
a list per time would push almost as often.)
"""

import heapq
import platform

REBUILD_DEAD = 64           # cancelled entries at least, before a rebuild


class Event:
    """A scheduled callback; ``cancel()`` before it runs and it never will.

    ``when`` and ``seq`` are when it is due; ``filed`` is the time of its entry in the
    heap, earlier than ``when`` after ``Engine.retime`` moved it later."""

    __slots__ = ('when', 'seq', 'filed', 'fn', 'args', 'alive', 'engine')

    def __init__(self, when, seq, fn, args, engine=None):
        self.when = self.filed = when
        self.seq, self.fn, self.args, self.alive = seq, fn, args, True
        self.engine = engine

    def cancel(self):
        """Do not run this event (harmless after it ran or was cancelled)."""
        if self.alive:
            self.alive = False
            self.fn = self.args = None          # what it referred to may be freed now
            if self.engine is not None:
                self.engine._cancelled()


class Engine:
    """Runs callbacks in (time, scheduling order); ``now`` is the virtual time in seconds."""

    def __init__(self, start=0.0):
        self.now = float(start)
        self.events = 0             # callbacks run so far (the benchmark's events)
        self._heap = []             # Events' (time, sequence, event) entries
        self._posts = []            # post()'s (time, sequence, fn, args) entries
        self._seq = 0
        self._dead = 0              # cancelled events still in the heap
        self.signals = 0            # signal()s so far (run's signalled stop)

    def at(self, when, fn, *args):
        """Run fn(*args) at virtual time when (never earlier than now); return its Event."""
        if when < self.now:
            when = self.now
        seq = self._seq = self._seq + 1
        event = Event(when, seq, fn, args, self)
        heapq.heappush(self._heap, (when, seq, event))
        return event

    def post(self, when, fn, args):
        """Run fn(*args) at virtual time when (never earlier than now), like at(), for a
        callback nobody cancels: it returns no Event, and args is the tuple itself."""
        if when < self.now:
            when = self.now
        seq = self._seq = self._seq + 1
        heapq.heappush(self._posts, (when, seq, fn, args))

    def retime(self, event, when):
        """Run a pending event at when instead; return the Event that stands for it now.

        The same as ``event.cancel()`` then ``at(when, fn, *args)``, in the same order
        against every other event (it takes the next sequence number), but a move to a
        later time pushes nothing: the event's entry comes up first and files it again at
        its new time. A client moves its reply timeout after every reply; cancelling left
        an entry behind each time, and the heap of those made every push and pop deeper."""
        if when < self.now:
            when = self.now
        seq = self._seq = self._seq + 1
        if when >= event.filed:
            event.when, event.seq = when, seq
            return event
        fn, args = event.fn, event.args
        event.cancel()
        return self._file(when, seq, fn, args)

    def _file(self, when, seq, fn, args):
        """A new event filed in the heap (retime's move to an earlier time)."""
        event = Event(when, seq, fn, args, self)
        heapq.heappush(self._heap, (when, seq, event))
        return event

    @staticmethod
    def _live(entry):
        return entry[2].alive

    def _cancelled(self):
        """Count a cancelled event; rebuild a large heap that is mostly cancelled ones."""
        self._dead += 1
        if self._dead > REBUILD_DEAD and 2 * self._dead > len(self._heap):
            live = self._live
            self._heap[:] = [entry for entry in self._heap if live(entry)]   # in place:
            heapq.heapify(self._heap)              # run() holds the list
            self._dead = 0

    def after(self, delay, fn, *args):
        """Run fn(*args) delay seconds from now; return its Event."""
        return self.at(self.now + max(0.0, delay), fn, *args)

    def _next(self):
        """The heap (``_posts`` or ``_heap``) whose top entry is the next live event, or
        None; drops cancelled entries and files moved events again on the way."""
        heap, posts, pop = self._heap, self._posts, heapq.heappop
        while heap:
            entry = heap[0]
            if posts and posts[0] < entry:
                return posts
            event = entry[2]
            if event.alive and entry[1] == event.seq:
                return heap
            pop(heap)
            self._settle(event)
        return posts if posts else None

    def _settle(self, event):
        """An Event whose entry came up but is not due (``_next``, run's loops): cancelled,
        it is dropped (one cancelled entry fewer in the heap); moved later (``retime``), it
        is filed again at its time, under its sequence."""
        if not event.alive:
            self._dead = max(0, self._dead - 1)
        else:
            self._refile(event)

    def _refile(self, event):
        event.filed = event.when
        heapq.heappush(self._heap, (event.when, event.seq, event))

    def _pop_run(self, heap):
        """Take the top entry of heap (``_next``'s) and run its callback: post()'s bare one,
        or an Event's (no longer alive)."""
        entry = heapq.heappop(heap)
        self.now = entry[0]
        self.events += 1
        if heap is self._posts:
            entry[2](*entry[3])
        else:
            event = entry[2]
            event.alive = False
            event.fn(*event.args)

    def next_time(self):
        """The time of the next live event, or None when nothing is scheduled."""
        heap = self._next()
        return None if heap is None else heap[0][0]

    def step(self):
        """Run the next live event; return False when there is none."""
        heap = self._next()
        if heap is None:
            return False
        self._pop_run(heap)
        return True

    def signal(self):
        """Something a stop condition may read changed (a node ended): ``run(stop=...,
        signalled=True)`` asks its stop condition after an event that called this."""
        self.signals += 1

    def run(self, until=None, stop=None, signalled=False):
        """Run events up to virtual time until (inclusive), or until stop() is true after
        an event, or until none is left. Returns 'stop', 'until' or 'idle'; with until the
        clock ends at until unless stop ended it first.

        stop() is asked before the first event and after every event; with signalled, only
        after the events that called ``signal()`` (and before the first): for a condition
        that nothing else changes, such as the benchmark's "every client has ended", that
        stops after the same event, without a call per event."""
        if stop is not None and not signalled:
            return self._run_asking(until, stop)
        if stop is not None and stop():
            return 'stop'
        return self._run_signalled(until, stop)

    def _run_signalled(self, until, stop):
        """run() without a stop condition, or with one asked only after a signal().

        Why its own loop: it is the loop of every simulated event of a benchmark's phase.
        It pops first and looks after (a cancelled or moved entry goes to ``_settle``,
        as ``_next``'s does; an entry past until goes back), unpacks the entry once, and asks nothing
        per event but whether signal() was called; _run_asking asks ``_next`` for the
        next entry before popping it and calls stop() after every event. Same events, in
        the same order, with the same clock and counters (tests/test_sim_engine_signal.py)."""
        heap, posts, pop, push = self._heap, self._posts, heapq.heappop, heapq.heappush
        limit = float('inf') if until is None else until
        seen = self.signals
        # "while True" and a break, not "while heap": CPython 3.11 specialises a loop's
        # code on its JUMP_BACKWARD, which "while cond:" lacks (it ran three times slower)
        while True:
            # a posted entry is next? (_next's test, posts[0] < entry) Their times first
            # (one float comparison); the (time, sequence) tuples only when the post's
            # time is not the earlier
            if posts and (not heap or posts[0][0] < heap[0][0] or posts[0] < heap[0]):
                when, seq, fn, args = pop(posts)
                if when > limit:
                    push(posts, (when, seq, fn, args))
                    break
            elif heap:                  # an Event: cancelled or moved (_settle), or due
                when, seq, event = pop(heap)
                if not event.alive or seq != event.seq:
                    self._settle(event)
                    continue
                if when > limit:
                    push(heap, (when, seq, event))
                    break
                event.alive = False
                fn, args = event.fn, event.args
            else:
                break
            self.now = when
            self.events += 1
            fn(*args)
            if self.signals != seen:
                seen = self.signals
                if stop is not None and stop():
                    return 'stop'
        if until is not None:
            self.now = max(self.now, until)
        return 'idle' if not heap and not posts else 'until'

    def _run_asking(self, until, stop):
        """run() asking stop() after every event (a condition that signal() does not
        announce: what topologies and the runner's waits ask)."""
        while True:
            if stop():
                return 'stop'
            heap = self._next()
            if heap is None:
                if until is not None:
                    self.now = max(self.now, until)
                return 'idle'
            if until is not None and heap[0][0] > until:
                self.now = max(self.now, until)
                return 'until'
            self._pop_run(heap)

    def pending(self):
        """How many events are scheduled (cancelled ones not yet popped included)."""
        return len(self._heap) + len(self._posts)


class _FiledEvent(Event):
    """An Event that is its own heap entry: ordered by the time and sequence it was filed
    under, as Engine's (time, sequence, ...) tuples are."""

    __slots__ = ('fseq',)

    def __init__(self, when, seq, fn, args, engine=None):
        Event.__init__(self, when, seq, fn, args, engine)
        self.fseq = seq

    def __lt__(self, other):
        return self.filed < other.filed or self.filed == other.filed and self.fseq < other.fseq


class EventHeapEngine(Engine):
    """Engine with the Events themselves in the heap, for PyPy (``new_engine``).

    Why: PyPy's heapq is Python code, and a comparison of two tuples there is a call into
    the runtime, several per push and pop (a tenth of a warm search phase under vmprof);
    an Event's own ``__lt__`` on two floats and two ints the JIT compiles inline. Under
    CPython, whose heapq is C, the tuples are faster. The order is Engine's exactly: every
    entry's (time, sequence) is distinct, so the heap pops them in the same sorted order
    whatever compares them (``tests/test_sim_engine_heaps.py`` runs both on random
    scripts)."""

    def at(self, when, fn, *args):
        if when < self.now:
            when = self.now
        seq = self._seq = self._seq + 1
        event = _FiledEvent(when, seq, fn, args, self)
        heapq.heappush(self._heap, event)
        return event

    def _file(self, when, seq, fn, args):
        event = _FiledEvent(when, seq, fn, args, self)
        heapq.heappush(self._heap, event)
        return event

    def post(self, when, fn, args):
        if when < self.now:
            when = self.now
        seq = self._seq = self._seq + 1
        heapq.heappush(self._heap, _FiledEvent(when, seq, fn, args))

    @staticmethod
    def _live(event):
        return event.alive

    def _top(self):
        heap, pop = self._heap, heapq.heappop
        while heap:
            event = heap[0]
            if event.alive and event.fseq == event.seq:
                return event
            pop(heap)
            self._settle(event)
        return None

    def _refile(self, event):
        event.filed, event.fseq = event.when, event.seq
        heapq.heappush(self._heap, event)

    def next_time(self):
        event = self._top()
        return None if event is None else event.filed

    def step(self):
        if self._top() is None:
            return False
        event = heapq.heappop(self._heap)
        event.alive = False
        self.now = event.filed
        self.events += 1
        event.fn(*event.args)
        return True

    def run(self, until=None, stop=None, signalled=False):
        heap, pop = self._heap, heapq.heappop
        every = stop is not None and not signalled
        seen = None                 # so that stop is asked before the first event
        while True:
            if stop is not None and (every or self.signals != seen):
                seen = self.signals
                if stop():
                    return 'stop'
            if heap:
                event = heap[0]
                if not event.alive or event.fseq != event.seq:
                    event = self._top()
            else:
                event = None
            if event is None:
                if until is not None:
                    self.now = max(self.now, until)
                return 'idle'
            when = event.filed
            if until is not None and when > until:
                self.now = max(self.now, until)
                return 'until'
            pop(heap)
            event.alive = False
            self.now = when
            self.events += 1
            event.fn(*event.args)


def new_engine(start=0.0):
    """The engine for this interpreter: EventHeapEngine under PyPy, else Engine."""
    return (EventHeapEngine if platform.python_implementation() == 'PyPy' else Engine)(start)
