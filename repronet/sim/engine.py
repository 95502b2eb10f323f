"""The discrete-event engine of the simulation backend: one virtual clock, one event heap.

Why its own engine rather than a library: the protocol cores already take ``now`` as an
argument and return their next deadline, so all a simulator needs is a heap of callbacks
ordered by (time, sequence). The sequence number breaks ties in the order events were
scheduled, so two runs with the same seed execute the same events in the same order and
write byte-identical logs (FoundationDB's and TigerBeetle's deterministic simulation rest on
the same rule). Nothing here reads the wall clock or a random source.

The queue is a heap of distinct times, each with the list of its events in the order they
were scheduled: the same order as (time, sequence), but the heap compares floats, not
tuples. Most events have a time of their own; those that share one (everything scheduled
"now") are run from their list without touching the heap. Under PyPy, whose heapq is
Python, tuple comparisons were a tenth of the simulation's time.

Cancellation is lazy: a cancelled event stays queued and is skipped when reached, which
keeps ``cancel()`` O(1) (timers are re-armed far more often than they fire). When more than
half of a large queue is cancelled events, it is rebuilt without them: a re-armed timeout far
in the future would otherwise keep its node (and everything the node holds) alive to the end.
"""

import heapq


class Event:
    """A scheduled callback; ``cancel()`` before it runs and it never will."""

    __slots__ = ('when', 'fn', 'args', 'alive', 'engine')

    def __init__(self, when, fn, args, engine=None):
        self.when, self.fn, self.args, self.alive = when, fn, args, True
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
        self._times = []            # heap of the times that have a list in _lists
        self._lists = {}            # time -> its events, in scheduling order
        self._cur = []              # the list being run (its time: _cur_time) ...
        self._pos = 0               # ... from this index on
        self._cur_time = None
        self._queued = 0            # events queued, cancelled ones included
        self._dead = 0              # cancelled events still queued

    def at(self, when, fn, *args):
        """Run fn(*args) at virtual time when (never earlier than now); return its Event."""
        if when < self.now:
            when = self.now
        event = Event(when, fn, args, self)
        self._queued += 1
        if when == self._cur_time:      # now (the current list's time is never later):
            self._cur.append(event)     # after those already due
        else:
            events = self._lists.get(when)
            if events is None:
                self._lists[when] = [event]
                heapq.heappush(self._times, when)
            else:
                events.append(event)
        return event

    def _cancelled(self):
        """Count a cancelled event; rebuild a large queue that is mostly cancelled ones."""
        self._dead += 1
        if self._dead > 4096 and 2 * self._dead > self._queued:
            self._cur[:] = [e for e in self._cur[self._pos:] if e.alive]    # in place: run()
            self._pos = 0                                                   # holds the list
            for when in list(self._lists):
                alive = [e for e in self._lists[when] if e.alive]
                if alive:
                    self._lists[when] = alive
                else:
                    del self._lists[when]
            self._times[:] = list(self._lists)
            heapq.heapify(self._times)
            self._queued = len(self._cur) + sum(map(len, self._lists.values()))
            self._dead = 0

    def after(self, delay, fn, *args):
        """Run fn(*args) delay seconds from now; return its Event."""
        return self.at(self.now + max(0.0, delay), fn, *args)

    def _peek(self):
        """The next live event, left where it is (None if there is none); cancelled ones
        before it are dropped."""
        cur, pos = self._cur, self._pos
        while pos < len(cur):
            if cur[pos].alive:
                self._pos = pos
                return cur[pos]
            pos += 1
            self._gone(1)
        self._pos = pos
        times, lists = self._times, self._lists
        while times:
            events = lists[times[0]]
            dead = 0
            while dead < len(events) and not events[dead].alive:
                dead += 1
            if dead:
                del events[:dead]
                self._gone(dead)
            if events:
                return events[0]
            del lists[heapq.heappop(times)]
        return None

    def _gone(self, n):
        """n cancelled events left the queue."""
        self._queued -= n
        self._dead = max(0, self._dead - n)

    def _pop(self, until=None):
        """Take the next live event due by until (None: any time): (event, its time), or
        None. Its time's list becomes the current one only now, so nothing is ever
        scheduled into a list later than an event still in the heap."""
        event = self._peek()
        if event is None:
            return None
        if self._pos < len(self._cur):
            when = self._cur_time
            if until is not None and when > until:
                return None
            self._pos += 1
        else:
            when = self._times[0]
            if until is not None and when > until:
                return None
            heapq.heappop(self._times)
            self._cur, self._pos, self._cur_time = self._lists.pop(when), 1, when
        self._queued -= 1
        return event, when

    def next_time(self):
        """The time of the next live event, or None when nothing is scheduled."""
        if self._peek() is None:
            return None
        return self._cur_time if self._pos < len(self._cur) else self._times[0]

    def step(self):
        """Run the next live event; return False when there is none."""
        taken = self._pop()
        if taken is None:
            return False
        event, self.now = taken
        event.alive = False
        self.events += 1
        event.fn(*event.args)
        return True

    def run(self, until=None, stop=None):
        """Run events up to virtual time until (inclusive), or until stop() is true after
        an event, or until none is left. Returns 'stop', 'until' or 'idle'; with until the
        clock ends at until unless stop ended it first."""
        pop = self._pop
        while True:
            if stop is not None and stop():
                return 'stop'
            taken = pop(until)
            if taken is None:
                if until is None:
                    return 'idle'
                self.now = max(self.now, until)
                return 'until' if self._peek() is not None else 'idle'
            event, self.now = taken
            event.alive = False
            self.events += 1
            event.fn(*event.args)

    def pending(self):
        """How many events are scheduled (cancelled ones not yet reached included)."""
        return self._queued
