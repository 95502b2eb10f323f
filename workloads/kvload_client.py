"""One closed-loop RESP client of ``workloads.kvload``: an asyncio Protocol that drives itself.

Why a Protocol and callbacks rather than streams and one ``await`` per request: the
generator is compared with ``redis-benchmark`` (C), so the work between a reply and the
next request must be small.  Here a reply is parsed, checked, timed and the next
request written within one ``data_received`` call, with no future, task or coroutine
switch per request.  Replies are parsed by ``hiredis.Reader`` (the parser Redis's own
clients use); requests are RESP arrays of bulk strings, built with one ``%`` format.

Closed loop: a client keeps ``depth`` requests in flight (1: sequential, as the seed
measured); each reply lets one more request go.  Replies that arrive together are
answered with one ``write``.  RESP answers in order, so the reply being parsed belongs
to the oldest request in flight, whose send time is the head of a deque.

Keys: client ``c`` (its global id) uses indices ``i`` in ``[c*R, (c+1)*R)`` for key
``<key-prefix><i>`` and value ``<value-prefix><i>`` (padded with ``x`` to
``value_size`` bytes when asked), so the keys of different clients, and of different
load-generator processes given different ``--client-base``, never overlap.

Replies are judged, never raised: the expected reply (``OK`` for SET, the value SET
for GET, ``:1`` for DEL) is ``ok``; a RESP error counts under its first word
(``ERR``, ``WRONGTYPE``, ...) in ``errors``; anything else (a nil, another value)
is ``wrong``.  Latency is ``perf_counter_ns`` from the write that carried the request
to the parse of its reply, kept as uint32 in units of 100 ns.
"""

import array
import asyncio
import collections
import time

import hiredis

from nodes.dht.common import nodelay
from workloads.loadgen import MAX_TICKS, TICK_NS, count_error

_perf_ns = time.perf_counter_ns


class Workload:
    """What the requests and expected replies are (no I/O, no clock)."""

    def __init__(self, key_prefix=b'k', value_prefix=b'Value', value_size=0):
        self.key_prefix = key_prefix
        self.value_prefix = value_prefix
        self.value_size = value_size

    def key(self, i):
        """The key of index i."""
        return b'%b%d' % (self.key_prefix, i)

    def value(self, i):
        """The value SET at index i (padded to value_size when that is set)."""
        v = b'%b%d' % (self.value_prefix, i)
        return v.ljust(self.value_size, b'x') if self.value_size else v

    def builder(self, op):
        """Return a function index -> request bytes for op ('set', 'get' or 'del')."""
        key, value, kp = self.key, self.value, self.key_prefix
        if op == 'set':
            def build(i):
                k, v = key(i), value(i)
                return b'*3\r\n$3\r\nSET\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n' % (len(k), k, len(v), v)
            return build
        command = {'get': b'GET', 'del': b'DEL'}[op]
        template = b'*2\r\n$3\r\n' + command + b'\r\n$%d\r\n%b%d\r\n'
        return lambda i: template % (len(kp) + len(b'%d' % i), kp, i)

    def expected(self, op):
        """The reply that is correct for every request of op, or None when it depends on i."""
        return {'set': b'OK', 'get': None, 'del': 1}[op]


class Phase:
    """Counters, stamps and latencies of one client's one operation."""

    def __init__(self, op, requests):
        self.op = op
        self.requests = requests
        self.done = 0
        self.ok = 0
        self.wrong = 0
        self.errors = {}
        self.latencies = array.array('I')
        self.start = self.end = None            # wall clock (time.time) of first send / last reply
        self.start_ns = self.end_ns = None      # perf_counter_ns of the same moments
        self.failure = None

    def judge(self, reply):
        """Count a reply that is not the expected one."""
        if isinstance(reply, hiredis.ReplyError):
            count_error(self.errors, reply)
        else:
            self.wrong += 1


class KvClient(asyncio.Protocol):
    """A closed-loop client over one TCP connection; runs its phases back to back.

    ``done`` (a future) resolves when every phase has ended or the client failed
    (``failure`` then says why); ``on_phase(client, phase)`` is called as each phase ends.
    """

    def __init__(self, cid, workload, ops, requests, depth, on_phase, done,
                 clock_ns=_perf_ns, wall=time.time):
        self.cid = cid
        self.first = cid * requests
        self.phases = [Phase(op, requests) for op in ops]
        self.depth = depth
        self.failure = None
        self.done = done
        self._workload = workload
        self._on_phase = on_phase
        self._reader = hiredis.Reader()
        self._sent = collections.deque()
        self._transport = None
        self._index = -1
        self._phase = None
        self._next = 0
        self._build = None
        self._expected = None
        self._clock_ns = clock_ns       # latencies (the simulator passes virtual time)
        self._wall = wall               # a phase's start and end stamps

    @property
    def phase(self):
        """The phase under way (None before start and after the last one)."""
        return self._phase

    def connection_made(self, transport):
        self._transport = transport
        nodelay(transport)

    def start(self):
        """Send the first requests of the first phase."""
        self._begin(0)

    def _begin(self, index):
        """Start phase index (or finish when there is none left)."""
        self._index = index
        if index == len(self.phases):
            self._phase = None
            self._finish(None)
            return
        phase = self._phase = self.phases[index]
        self._build = self._workload.builder(phase.op)
        self._expected = self._workload.expected(phase.op)
        self._next = 0
        phase.start = self._wall()
        self._send(min(self.depth, phase.requests))
        phase.start_ns = self._sent[0]

    def _send(self, n):
        """Write the next n requests of the phase in one write."""
        build, i = self._build, self.first + self._next
        data = build(i) if n == 1 else b''.join([build(j) for j in range(i, i + n)])
        self._next += n
        now = self._clock_ns()
        if n == 1:
            self._sent.append(now)
        else:
            self._sent.extend([now] * n)
        self._transport.write(data)

    def data_received(self, data):
        reader, sent, phase = self._reader, self._sent, self._phase
        if phase is None:
            self._fail('the server sent %d bytes nobody asked for' % len(data))
            return
        reader.feed(data)
        latencies, expected, value = phase.latencies, self._expected, self._workload.value
        answered = 0
        try:
            reply = reader.gets()
            while reply is not False:
                now = self._clock_ns()
                if not sent:
                    self._fail('the server sent a reply nobody asked for')
                    return
                ticks = (now - sent.popleft()) // TICK_NS
                latencies.append(ticks if ticks <= MAX_TICKS else MAX_TICKS)
                if reply == (expected if expected is not None
                             else value(self.first + phase.done)):
                    phase.ok += 1
                else:
                    phase.judge(reply)
                phase.done += 1
                answered += 1
                if phase.done == phase.requests:
                    phase.end_ns, phase.end = now, self._wall()
                    self._on_phase(self, phase)
                    self._begin(self._index + 1)
                    return
                reply = reader.gets()
        except hiredis.ProtocolError as exc:
            self._fail('the server sent malformed RESP (%s)' % exc)
            return
        more = min(answered, phase.requests - self._next)
        if more > 0:
            self._send(more)

    def eof_received(self):
        return False            # close our side too; connection_lost says the rest

    def connection_lost(self, exc):
        self._transport = None
        if exc is None:
            self._fail('the server closed the connection')
        else:
            self._fail('the connection was lost (%s)' % (exc.strerror or exc))

    def overdue(self, now_ns, limit_ns):
        """True if the oldest request in flight has waited longer than limit_ns."""
        return bool(self._sent) and now_ns - self._sent[0] > limit_ns

    def stop(self, reason):
        """End the client now, recording reason unless it has already ended."""
        self._fail(reason)

    def _fail(self, reason):
        """Record why the client stopped early and close its connection."""
        if self.done.done():
            return
        if self._phase is not None:
            self._phase.failure = reason
            self._phase.end_ns, self._phase.end = self._clock_ns(), self._wall()
        self._finish(reason)

    def _finish(self, reason):
        """Close the connection and resolve done."""
        self.failure = reason
        self._sent.clear()
        if self._transport is not None:
            self._transport.close()
        if not self.done.done():
            self.done.set_result(reason)
