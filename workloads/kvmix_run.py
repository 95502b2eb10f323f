"""One ``workloads.kvmix`` process at run time: find the servers, connect, run, add up.

Split from the command line (``workloads.kvmix``) so that each stays short.  ``Shared``
is the state its clients share (the slot map, the latency arrays, the ``stopping`` flag)
and what is the same whatever runs them (timeouts, the end, the summary); ``Run`` adds
the asyncio side (the event loop, connecting, the barrier) and the steps, each of which
returns None or one sentence on what stopped it; ``Run.guarded`` turns SIGTERM/SIGINT
during any step into such a sentence. The simulator's driver (``kvmix_sim``) is the other
user of ``Shared``.

Discovery asks the entry points in order for ``CLUSTER SLOTS``, each over a short-lived
connection of its own, and uses the first answer: a table is a cluster map, an error
reply a single server.  Unreachable entry points are skipped; none reachable is a
failure naming each one's reason.
"""

import array
import asyncio
import functools
import time
import types

import hiredis

from nodes.dht.common import wait_go
from nodes.dht.ring import parse_addr
from workloads.kvmix_client import OPS, RouteError, SlotMap
from workloads.loadgen import LatencyLog, cpu_fields, stop_on_signals, unless_stopped

CLUSTER_SLOTS = b'*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n'
MAX_DISCOVERY_REPLY = 16 << 20
DRAIN_AT = 1 << 20          # latencies held per operation before they go to file and histogram


class Shared:
    """What the clients of one process share, whatever drives them (no I/O, no clock)."""

    def __init__(self, args, log):
        self.args = args
        self.log = log
        self.slots = None
        self.mode = None
        self.stopping = False
        self.clients = []
        self.latencies = [array.array('I'), array.array('I')]   # set, get (ticks)
        self.lat_logs = [LatencyLog(f) for f in args.latency_files]
        self.stopped_by = None
        self._timer = None
        self._stopped = False

    def ready_fields(self, **fields):
        """What the ready line says."""
        a = self.args
        fields.update(phase=a.phase, mode=self.mode, servers=self.slots.addrs,
                      slots=self.slots.slot_counts(), clients=a.clients,
                      client_base=a.client_base, pipeline=a.pipeline, loop=a.loop,
                      seed=a.seed, get_ratio=a.get_ratio, **a.keyspace.describe())
        return fields

    def check(self, now_ns):
        """Fail clients with an overdue request; drain latencies; seconds to the next check."""
        limit = int(self.args.timeout * 1e9)
        for c in self.clients:
            if not c.done.done() and c.overdue(now_ns, limit):
                c.fail('no reply within %g s' % self.args.timeout)
        for held, lat_log in zip(self.latencies, self.lat_logs):
            if len(held) >= DRAIN_AT:
                lat_log.drain(held)
        return min(self.args.timeout / 4, 0.25)

    def stop(self, problem):
        """End every client (problem: why, or None) and take the last latencies (once)."""
        if self._stopped:
            return
        self._stopped = self.stopping = True
        if self._timer is not None:
            self._timer.cancel()
        for c in self.clients:
            c.fail(problem or 'stopped')
        for held, lat_log in zip(self.latencies, self.lat_logs):
            lat_log.drain(held)
            if lat_log.file is not None:
                lat_log.file.close()

    def finish(self, problem, error, cpu=None):
        """Stop the clients, log the summary; cpu: (at start, at go, now) process CPU
        seconds, or None (simulated). Return the exit status, with one sentence through
        error() when it is 1."""
        a = self.args
        self.stop(problem)
        summary = self.summary()
        self.log.write('summary', flush=True, phase=a.phase, clients=a.clients,
                       client_base=a.client_base, pipeline=a.pipeline, loop=a.loop,
                       seed=a.seed, **cpu_fields(cpu), latencies=a.latencies, **summary)
        sentence = self.why_failed(problem, summary)
        if sentence:
            error('kvmix: %s.' % sentence)
            return 1
        return 0

    def summary(self):
        """The summary line's counters (clients stopped first with stop())."""
        ops, per_server, moved = {}, {}, 0
        for op, name in enumerate(OPS):
            errors = {}
            for c in self.clients:
                for kind, n in c.tally.errors[op].items():
                    errors[kind] = errors.get(kind, 0) + n
            ops[name] = dict(ok=sum(c.tally.ok[op] for c in self.clients),
                             miss=sum(c.tally.miss[op] for c in self.clients),
                             wrong=sum(c.tally.wrong[op] for c in self.clients),
                             errors=errors, **self.lat_logs[op].stats())
        for c in self.clients:
            moved += c.tally.moved
            for addr, (sets, gets) in c.tally.sent.items():
                counts = per_server.setdefault(addr, {'get': 0, 'set': 0})
                counts['get'] += gets
                counts['set'] += sets
        spans = [(c.start_ns, c.end_ns) for c in self.clients
                 if c.start_ns is not None and c.end_ns is not None]
        span = (max(e for _, e in spans) - min(s for s, _ in spans)) / 1e9 if spans else 0
        done = sum(o['count'] for o in ops.values())
        return dict(mode=self.mode, servers=self.slots.addrs if self.slots else [],
                    ops=ops, requests=done, moved=moved, per_server=per_server,
                    clients_failed=sum(1 for c in self.clients if c.failure is not None),
                    duration_s=round(span, 6),
                    ops_per_s=round(done / span, 1) if span > 0 else None)

    def why_failed(self, problem, summary):
        """One sentence on what went wrong, or None when every reply was correct."""
        if problem is not None:
            return problem if problem.startswith(('cannot', 'stdin', 'no server', 'interrupted')) \
                or summary['requests'] == 0 \
                else '%s after %d requests' % (problem, summary['requests'])
        failed = [c for c in self.clients if c.failure is not None]
        if failed:
            others = ' (and %d other client%s)' % (len(failed) - 1, 's' * (len(failed) > 2)) \
                if len(failed) > 1 else ''
            return 'client %d stopped after %d requests: %s%s' % (
                failed[0].cid, sum(failed[0].tally.done(op) for op in (0, 1)),
                failed[0].failure, others)
        bad = {name: o['wrong'] + sum(o['errors'].values()) for name, o in summary['ops'].items()}
        if any(bad.values()):
            return '%d GET and %d SET replies of %d were wrong or errors (%s)' % (
                bad['get'], bad['set'], summary['requests'], ', '.join(
                    '%s %s' % (name, o['errors'] or 'wrong %d' % o['wrong'])
                    for name, o in summary['ops'].items() if bad[name]))
        return None


class Run(Shared):
    """Shared, on an asyncio loop: connecting, the barrier, signals, and the steps."""

    def __init__(self, args, log):
        super().__init__(args, log)
        self.loop = asyncio.get_running_loop()
        self._stop = stop_on_signals(self)

    clock_ns = staticmethod(time.perf_counter_ns)

    def new_done(self):
        return self.loop.create_future()

    def open(self, conn, addr, failed):
        """Connect conn (a ServerConn) in the background; failed(reason) if that fails."""
        host, port = parse_addr(addr)
        conn.opening = self.loop.create_task(
            self.loop.create_connection(lambda: conn, host, port))
        conn.opening.add_done_callback(
            lambda t: t.cancelled() or t.exception() is None or failed(
                _reason(t.exception())))

    async def guarded(self, step):
        """Run a step unless a signal comes first; return its problem or the signal's."""
        finished, problem = await unless_stopped(step, self._stop)
        return problem if finished else 'interrupted by %s' % self.stopped_by

    async def connect(self):
        """Open every client's connection to every known server; None or why not."""
        conns = [c.conn(i) for c in self.clients for i in range(len(self.slots.addrs))]
        tasks = [conn.opening for conn in conns]
        done, _ = await asyncio.wait(tasks, timeout=self.args.timeout)
        for conn, task in zip(conns, tasks):
            if task not in done:
                return 'cannot connect to %s: no connection within %g s' % (
                    conn.addr, self.args.timeout)
            if task.exception() is not None:
                exc = task.exception()
                return 'cannot connect to %s: %s' % (
                    conn.addr, getattr(exc, 'strerror', None) or exc)
        return None

    async def ready(self, **fields):
        """Print the ready line (and wait for go with --barrier); None or why not."""
        fields = self.ready_fields(**fields)
        if not self.args.barrier:
            self.log.write('ready', flush=True, **fields)
            return None
        try:
            await wait_go(types.SimpleNamespace(write=functools.partial(self.log.write,
                                                                        **fields)))
        except RuntimeError:
            return 'stdin closed before the "go" line of --barrier'
        return None

    def watch(self):
        """Every quarter second: fail clients with an overdue request; drain latencies."""
        self._timer = self.loop.call_later(self.check(time.perf_counter_ns()), self.watch)



def _reason(exc):
    """A short reason for a failed connect."""
    return getattr(exc, 'strerror', None) or str(exc) or type(exc).__name__


async def run_clients(run, duration):
    """Start every client, stop new requests after duration (if any), wait; None or why not."""
    for c in run.clients:
        c.start()
    run.watch()
    if duration is not None:
        run.loop.call_later(duration, setattr, run, 'stopping', True)
    await asyncio.wait([c.done for c in run.clients])
    return None


async def discover(run, entries, timeout):
    """Set run.slots and run.mode from the first entry point that answers; None or why not."""
    reasons = []
    for entry in entries:
        host, port = parse_addr(entry)
        try:
            reply = await asyncio.wait_for(_ask_cluster_slots(host, port), timeout)
        except (OSError, asyncio.TimeoutError, hiredis.ProtocolError, EOFError) as exc:
            reasons.append('%s: %s' % (entry, getattr(exc, 'strerror', None) or
                                       str(exc) or 'no reply within %g s' % timeout))
            continue
        if isinstance(reply, hiredis.ReplyError):
            run.slots, run.mode = SlotMap.single(entry), 'single'
            return None
        try:
            run.slots, run.mode = SlotMap.from_cluster_slots(reply, host), 'cluster'
        except RouteError as exc:
            return 'cannot route by %s: %s' % (entry, exc)
        return None
    return 'no server of --servers answered (%s)' % '; '.join(reasons)


async def _ask_cluster_slots(host, port):
    """The parsed reply of one CLUSTER SLOTS over a connection of its own."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(CLUSTER_SLOTS)
        parser, received = hiredis.Reader(), 0
        while True:
            data = await reader.read(65536)
            if not data:
                raise EOFError('closed the connection')
            received += len(data)
            if received > MAX_DISCOVERY_REPLY:
                raise EOFError('sent more than %d bytes' % MAX_DISCOVERY_REPLY)
            parser.feed(data)
            reply = parser.gets()
            if reply is not False:
                return reply
    finally:
        writer.close()
