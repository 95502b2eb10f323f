"""What every driver of an index server does the same way, whatever moves its bytes.

Two drivers run `server_core`: the asyncio one (`server.py`, real sockets, wall clock) and
the simulated one (`sim_drivers.py`, `repronet.sim` streams, virtual time). What they must
agree on is not I/O but policy, so it lives here once and each driver only supplies the
handful of operations its transport has:

* `IndexBook`: the server's own bounds and counters (clients at once, undecoded bytes over
  all connections, rate-limited lines about bad clients) and its `summary()`;
* `IndexLink`: one client connection -- write the batch of replies the core returns, stop
  reading while requests wait and ask `more()` on the loop's next turn (never in a loop of
  its own, so every connection and a stop get their turn), one timer at the core's
  `get_timer()`, close when the core says so.

No asyncio, socket or clock here: a driver passes `now` and the `error` writer in.
"""

import resource

from . import codec
from .server_core import (FRAME_TIMEOUT, IDLE_TIMEOUT, MAX_ENTRIES, ServerConnection,
                          ServerCore)

MAX_ERROR_LINES = 50
MAX_BUFFERED = 256 * 1024 * 1024    # undecoded bytes over all connections (32 largest frames)


def default_max_connections():
    """Half the open-file limit, at most 1000: the rest stays for what else the process opens
    and for connections accepted only to be closed."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1000 if soft == resource.RLIM_INFINITY else max(1, min(1000, soft // 2))


def ready_fields(name, ring, replicas):
    """The fields of an index server's `ready` record besides `listen`."""
    return dict(name=name, servers=len(ring.servers), replicas=replicas,
                protocol=codec.PROTOCOL_VERSION)


class IndexBook:
    """One index server's core, bounds and counters (the driver adds listening)."""

    def __init__(self, name, ring, replicas=0, max_frame=codec.MAX_FRAME, error=None,
                 idle_timeout=IDLE_TIMEOUT, frame_timeout=FRAME_TIMEOUT,
                 max_entries=MAX_ENTRIES, max_connections=None, max_buffered=MAX_BUFFERED):
        self.core = ServerCore(name, ring=ring, replicas=replicas, max_entries=max_entries)
        self.max_frame = max_frame
        self.idle_timeout = idle_timeout
        self.frame_timeout = frame_timeout
        self.max_connections = max_connections or default_max_connections()
        self.max_buffered = max_buffered
        self.error = error
        self.counters = dict(connections=0, refused_connections=0, overload_closed=0,
                             accept_errors=0)
        # Open client connections (IndexLink -> None), closed at stop; a dict, not a set, so
        # they are visited in the order they came (a simulated run must repeat itself).
        self.protocols = {}
        self.buffered = 0               # undecoded bytes over all of them
        self.closing = False
        self._error_lines = 0

    def report_bad(self, link):
        """Tell stderr about a client that sent a bad frame (rate-limited)."""
        self._error_lines += 1
        if self._error_lines <= MAX_ERROR_LINES:
            self.error('%s: bad request from %s (answered with ERROR, still serving)'
                       % (self.core.name, link.peername()))

    def admit(self):
        """Count a new connection; False (count it refused) if max_connections are open."""
        if len(self.protocols) < self.max_connections:
            self.counters['connections'] += 1
            return True
        self.counters['refused_connections'] += 1
        if self.counters['refused_connections'] == 1:
            self.error('%s: %d clients connected, the most it serves; closing new connections'
                       ' at once (counted in refused_connections)' % (self.core.name,
                                                                       self.max_connections))
        return False

    def hold(self, link, nbytes):
        """Record the bytes link holds undecoded; past max_buffered over all connections,
        close the one holding the most."""
        self.buffered += nbytes - link.held
        link.held = nbytes
        if self.buffered > self.max_buffered:
            largest = max(self.protocols, key=lambda p: p.held)
            self.counters['overload_closed'] += 1
            self.buffered -= largest.held
            largest.held = 0
            largest.abort()

    def summary(self):
        """Return the counters of this server."""
        c = dict(self.core.counters)
        c.update(self.counters)
        c['names'] = len(self.core.store)
        c['entries'] = self.core.store.entries
        return c


class IndexLink:
    """One client connection of an index server; a driver subclasses it with its transport's
    operations: now(), write(data), close(), abort(), closing(), pause_reading(),
    resume_reading(), call_soon(fn) and call_at(when, fn) (handles with cancel()),
    peername()."""

    def __init__(self, book, now):
        self.book = book
        self.conn = ServerConnection(book.core, book.max_frame, book.idle_timeout, now,
                                     book.frame_timeout)
        self.timer = None           # (time it fires, handle)
        self.soon = None            # the next batch, on the loop's next turn
        self.held = 0               # this connection's share of book.buffered

    def opened(self):
        """The connection is up: serve it, or close it at once (stopping, or as many clients
        as the server serves); return whether it is served."""
        if self.book.closing or not self.book.admit():
            self.abort()
            return False
        self.book.protocols[self] = None
        self._arm()
        return True

    def ended(self):
        """The connection is gone: forget its bytes and timers."""
        self.book.protocols.pop(self, None)
        self.book.buffered -= self.held
        self.held = 0
        for handle in (self.timer and self.timer[1], self.soon):
            if handle is not None:
                handle.cancel()
        self.timer = self.soon = None

    def received(self, data):
        """Bytes from the client."""
        self._run(self.conn.receive, data)

    def drained(self):
        """The output the core was told to hold (pause_output) has drained."""
        self._run(self.conn.resume_output)

    def eof(self):
        """The client sends nothing more; return True to keep the connection open for the
        replies still owed."""
        out = self.conn.eof()
        if out:
            self.write(out)
            self.book.report_bad(self)
        return not self.conn.finished

    def _more(self):
        self.soon = None
        if not self.closing():
            self._run(self.conn.more)

    def _run(self, call, data=None):
        """Call the core (call(now), or call(data, now) with bytes received), write the batch
        it answers, then read or wait for the next turn. (Not call(*args, now): under
        CPython 3.11 a call with a star costs about 900 instructions more, on every request
        a server answers.)"""
        core = self.book.core
        errors = core.counters['errors']
        out, close = call(self.now()) if data is None else call(data, self.now())
        if core.counters['errors'] != errors:
            self.book.report_bad(self)
        if out:
            self.write(out)         # may pause the core's output at once
        if close:
            self.close()
            return
        if self.conn.waiting:
            self.pause_reading()
            if self.soon is None and not self.conn.output_paused:
                self.soon = self.call_soon(self._more)
        else:
            self.resume_reading()
        self.book.hold(self, self.conn.buffered)
        self._arm()

    def _arm(self):
        """Have the timer fire by the core's next deadline (a later one re-arms on firing)."""
        when = self.conn.get_timer()
        if when is None or self.timer is not None and self.timer[0] <= when or self.closing():
            return          # (closing() asked last: mostly the timer is early enough)
        if self.timer is not None:
            self.timer[1].cancel()
        self.timer = (when, self.call_at(when, self._fire))

    def _fire(self):
        self.timer = None
        _, close = self.conn.handle_timer(self.now())
        if close:
            self.abort()            # nothing to flush, maybe nobody reading
        else:
            self._arm()
