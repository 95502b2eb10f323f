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
(``Network``: three in four events of a DHT search). ``post`` files those as a bare
``(time, sequence, None, fn, args)`` entry, without an Event to hand back: making an Event
(a Python ``__init__``) and packing ``*args`` was a tenth of such an event's cost. The
sequence is the same counter, so the order is the one ``at`` would give. An Event's entry
is ``(time, sequence, event, None, None)``: one shape, which the run loop unpacks at once.
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
        self._heap = []
        self._seq = 0
        self._dead = 0              # cancelled events still in the heap
        self.signals = 0            # signal()s so far (run's signalled stop)

    def at(self, when, fn, *args):
        """Run fn(*args) at virtual time when (never earlier than now); return its Event."""
        if when < self.now:
            when = self.now
        seq = self._seq = self._seq + 1
        event = Event(when, seq, fn, args, self)
        heapq.heappush(self._heap, (when, seq, event, None, None))
        return event

    def post(self, when, fn, args):
        """Run fn(*args) at virtual time when (never earlier than now), like at(), for a
        callback nobody cancels: it returns no Event, and args is the tuple itself."""
        if when < self.now:
            when = self.now
        seq = self._seq = self._seq + 1
        heapq.heappush(self._heap, (when, seq, None, fn, args))

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
        heapq.heappush(self._heap, (when, seq, event, None, None))
        return event

    @staticmethod
    def _live(entry):
        return entry[2] is None or entry[2].alive

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

    def _top(self):
        """The entry of the next live event, or None; drops cancelled entries and files
        moved events again on the way."""
        heap, pop = self._heap, heapq.heappop
        while heap:
            entry = heap[0]
            event = entry[2]
            if event is None:           # post()'s: live until it runs
                return entry
            if not event.alive:
                pop(heap)
                self._dead = max(0, self._dead - 1)
            elif entry[1] != event.seq:
                pop(heap)
                event.filed = event.when
                heapq.heappush(heap, (event.when, event.seq, event, None, None))
            else:
                return entry
        return None

    def next_time(self):
        """The time of the next live event, or None when nothing is scheduled."""
        entry = self._top()
        return None if entry is None else entry[0]

    def step(self):
        """Run the next live event; return False when there is none."""
        if self._top() is None:
            return False
        entry = heapq.heappop(self._heap)
        self.now = entry[0]
        self.events += 1
        self._run(entry)
        return True

    @staticmethod
    def _run(entry):
        """Run a popped entry's callback: post()'s bare one, or an Event (no longer alive)."""
        event = entry[2]
        if event is None:
            entry[3](*entry[4])
        else:
            event.alive = False
            event.fn(*event.args)

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
        It pops first and looks after (a cancelled or moved entry is handled as ``_top``
        does, an entry past until goes back), unpacks the entry once, and asks nothing
        per event but whether signal() was called; _run_asking reads the top entry
        before popping it and calls stop() after every event. Same events, in the same
        order, with the same clock and counters (tests/test_sim_engine_signal.py)."""
        heap, pop, push = self._heap, heapq.heappop, heapq.heappush
        limit = float('inf') if until is None else until
        seen = self.signals
        while True:                     # not "while heap": CPython 3.11 specialises a
            if not heap:                # loop's code on its JUMP_BACKWARD, which that
                break                   # loop lacks (it ran three times slower)
            when, seq, event, fn, args = pop(heap)
            if event is not None:       # at()'s Event: cancelled or moved (as _top)
                if not event.alive:
                    self._dead = max(0, self._dead - 1)
                    continue
                if seq != event.seq:
                    event.filed = event.when
                    push(heap, (event.when, event.seq, event, None, None))
                    continue
            if when > limit:
                push(heap, (when, seq, event, fn, args))
                break
            if event is not None:
                event.alive = False
                fn, args = event.fn, event.args
            self.now = when
            self.events += 1
            fn(*args)
            if self.signals != seen:
                seen = self.signals
                if stop is not None and stop():
                    return 'stop'
        if until is not None:
            self.now = max(self.now, until)
        return 'idle' if not heap else 'until'

    def _run_asking(self, until, stop):
        """run() asking stop() after every event (a condition that signal() does not
        announce: what topologies and the runner's waits ask)."""
        heap, pop = self._heap, heapq.heappop
        while True:
            if stop():
                return 'stop'
            entry = self._top()
            if entry is None:
                if until is not None:
                    self.now = max(self.now, until)
                return 'idle'
            when = entry[0]
            if until is not None and when > until:
                self.now = max(self.now, until)
                return 'until'
            pop(heap)
            self.now = when
            self.events += 1
            self._run(entry)

    def pending(self):
        """How many events are scheduled (cancelled ones not yet popped included)."""
        return len(self._heap)


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
            if not event.alive:
                pop(heap)
                self._dead = max(0, self._dead - 1)
            elif event.fseq != event.seq:
                pop(heap)
                event.filed, event.fseq = event.when, event.seq
                heapq.heappush(heap, event)
            else:
                return event
        return None

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
