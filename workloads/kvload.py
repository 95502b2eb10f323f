"""kvload: a closed-loop RESP load generator; seed 001's put/get/delete timing for any RESP server.

Seed 001 times 100,000 puts, then gets, then deletes (keys ``k<i>``, values ``Value<i>``)
from 1 to 8 clients at once and reports each client's total ms per operation.  This tool
does the same over RESP, so one generator drives our store (``nodes/kv``) and
``redis-server`` alike, and its per-request overhead can be set beside ``redis-benchmark``.

- N logical clients in one process (asyncio; uvloop when importable, ``--loop``), each its
  own TCP connection, each a closed loop with ``--pipeline D`` requests in flight (1 is
  sequential, what the seed measured).  The client itself is ``workloads.kvload_client``.
- Each client runs the phases of ``--ops`` (default ``set,get,del``) back to back, not
  synchronised with the other clients (the seed's clients were separate programs).
  Client ``c`` (global id ``--client-base`` + local index) uses indices
  ``i in [c*R, (c+1)*R)``, so the keys of all clients, and of processes given disjoint
  ``--client-base`` ranges, are disjoint.  GET must return the value SET, DEL ``:1``.
- Start: connect every client, print ``{"event": "ready"}``; with ``--barrier`` wait for a
  ``go`` line on stdin (the runner starts one process per emulated client host and
  releases them together, ``repronet/emu/process.py``).

Output, JSON lines on stdout (the runner keeps stdout as the raw log):
``phase``, one per client per operation as it ends: client, op, requests, done, ok,
errors (per kind), wrong, start/end (wall clock of first send / last reply), total_ms,
p50_us, p90_us, p99_us, max_us, mean_us, and with ``--latencies`` lat_offset/lat_count;
a phase cut short also has ``failure``.  Then ``summary``: clients, pipeline, loop, host,
port, totals, ``ops_per_s`` (requests answered / first send to last reply of the run),
``cpu_s`` (process user+sys) and ``run_cpu_s`` (the same, from go to the end).

Latencies file (``--latencies PATH``): every request's latency (send to reply parsed,
``perf_counter_ns``) as little-endian uint32 in units of 100 ns (clamped at 2**32-1),
the requests of one client's one phase contiguous and in order; a phase line's
``lat_offset``/``lat_count`` count entries (4 bytes each), not bytes.  ``read_latencies``
reads a slice; ``latency_stats`` is what the phase lines' percentiles come from
(nearest rank).

Exit status: 0 only if every request got its correct reply; 1 otherwise (connection
refused, lost or timed out (``--timeout`` per request), wrong or error replies,
SIGTERM/SIGINT: the summary says what was done, stderr has one sentence); 2 for bad
arguments, checked before connecting.

    python -m workloads.kvload --port 6379 --clients 8 --requests 100000
    python -m workloads.kvload --port 6379 --pipeline 16 --ops get --latencies lat.u32
"""

import asyncio
import functools
import os
import sys
import time
import types

import numpy as np

from nodes.dht.common import error, wait_go
from workloads.kvload_client import KvClient, Workload
from workloads.loadgen import (LATENCY_DTYPE, TICK_NS, UsageParser, cpu_fields, latency_stats,
                               run_cli, stop_on_signals, unless_stopped)
from workloads.loadgen import read_latencies  # noqa: F401  (kvload's readers import it here)

OPS = ('set', 'get', 'del')
MAX_IN_FLIGHT_BYTES = 256 << 20     # clients x pipeline x value size
MAX_HELD_LATENCIES = 50_000_000     # clients x requests (4 bytes each, held per phase)


def parse_args(argv):
    """Parse and check the command line (exit 2 with one sentence on a bad one)."""
    p = UsageParser('kvload', description=__doc__.split('\n')[0])
    p.add_argument('--host', default='127.0.0.1')
    p.add_argument('--port', type=int, default=6379)
    p.add_argument('--clients', type=int, default=1, help='connections in this process')
    p.add_argument('--client-base', type=int, default=0, help='global id of the first client')
    p.add_argument('--requests', type=int, default=100_000, help='per client per operation')
    p.add_argument('--pipeline', type=int, default=1, help='requests in flight per client')
    p.add_argument('--ops', default='set,get,del', help='phases, in order')
    p.add_argument('--key-prefix', default='k')
    p.add_argument('--value-prefix', default='Value')
    p.add_argument('--value-size', type=int, default=0, help='pad values to N bytes (0: no)')
    p.add_argument('--latencies', help='write every latency here (uint32 LE, 100 ns units)')
    p.add_argument('--timeout', type=float, default=10.0, help='seconds per request')
    p.add_argument('--loop', choices=('auto', 'uvloop', 'asyncio'), default='auto')
    p.add_argument('--barrier', action='store_true', help='print ready, wait for "go" on stdin')
    args = p.parse_args(argv)
    p.bounded(args, 'port', 1, 65535)
    p.bounded(args, 'clients', 1, 1000)
    p.bounded(args, 'client_base', 0, 1_000_000)
    p.bounded(args, 'requests', 1, 10_000_000)
    p.bounded(args, 'pipeline', 1, 1024)
    p.bounded(args, 'value_size', 0, 1 << 20)
    if not 0 < args.timeout <= 300:     # keeps every latency below the uint32 clamp
        p.error('--timeout must be more than 0 and at most 300 seconds')
    args.ops = args.ops.split(',')
    if not args.ops or any(op not in OPS for op in args.ops) or len(set(args.ops)) < len(args.ops):
        p.error('--ops must list set, get and/or del, each at most once, separated by commas')
    if args.clients * args.requests > MAX_HELD_LATENCIES:
        p.error('--clients x --requests must be at most %d (latencies are held in memory)'
                % MAX_HELD_LATENCIES)
    if args.clients * args.pipeline * max(args.value_size, 64) > MAX_IN_FLIGHT_BYTES:
        p.error('--clients x --pipeline x --value-size must be at most %d bytes in flight'
                % MAX_IN_FLIGHT_BYTES)
    for name in ('key_prefix', 'value_prefix'):
        try:
            setattr(args, name, getattr(args, name).encode('ascii'))
        except UnicodeEncodeError:
            p.error('--%s must be ASCII' % name.replace('_', '-'))
    last = (args.client_base + args.clients) * args.requests - 1
    if args.value_size and len(args.value_prefix) + len(str(last)) > args.value_size:
        p.error('--value-size %d is shorter than the longest value, %s%d'
                % (args.value_size, args.value_prefix.decode(), last))
    args.loop_factory, args.loop = p.loop(args.loop)
    if args.latencies is not None:
        try:
            args.latencies_file = open(args.latencies, 'wb')
        except OSError as exc:
            p.error('cannot write --latencies %s: %s' % (args.latencies, exc.strerror or exc))
    return args


class _Run:
    """One load-generator process: its clients, log and latencies file."""

    def __init__(self, args, log):
        self.args = args
        self.log = log
        self.clients = []
        self.lat_file = getattr(args, 'latencies_file', None)
        self.lat_offset = 0
        self.stopped_by = None
        self._timer = None
        self._workload = Workload(args.key_prefix, args.value_prefix, args.value_size)

    async def connect(self):
        """Open every client's connection; return None or why one could not connect."""
        loop = asyncio.get_running_loop()
        a = self.args
        for n in range(a.clients):
            self.clients.append(KvClient(a.client_base + n, self._workload, a.ops, a.requests,
                                         a.pipeline, self.phase_ended, loop.create_future()))
        attempts = [loop.create_connection(functools.partial(lambda c: c, c), a.host, a.port)
                    for c in self.clients]
        try:
            results = await asyncio.wait_for(
                asyncio.gather(*attempts, return_exceptions=True), a.timeout)
        except asyncio.TimeoutError:
            return 'no connection within %g s' % a.timeout
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            return getattr(failed[0], 'strerror', None) or str(failed[0]) or repr(failed[0])
        return None

    def phase_ended(self, client, phase):
        """Write one phase's latencies and its JSON line; free its latencies."""
        fields = {}
        ticks = np.frombuffer(phase.latencies, dtype=np.uint32)
        if self.lat_file is not None:
            self.lat_file.write(ticks.astype(LATENCY_DTYPE).tobytes())
            fields.update(lat_offset=self.lat_offset, lat_count=len(ticks))
            self.lat_offset += len(ticks)
        fields.update(latency_stats(ticks * (TICK_NS / 1000)))
        if phase.failure is not None:
            fields['failure'] = phase.failure
        total_ms = None
        if phase.start_ns is not None and phase.end_ns is not None:
            total_ms = round((phase.end_ns - phase.start_ns) / 1e6, 3)
        self.log.write('phase', flush=True, client=client.cid, op=phase.op,
                       requests=phase.requests, done=phase.done, ok=phase.ok,
                       errors=phase.errors, wrong=phase.wrong, start=phase.start,
                       end=phase.end, total_ms=total_ms, **fields)
        phase.latencies = None

    def watch(self):
        """Check the clients' timeouts now and every so often."""
        self.overdue(time.perf_counter_ns())
        self._timer = asyncio.get_running_loop().call_later(self.every(), self.watch)

    def every(self):
        """Seconds between timeout checks."""
        return min(self.args.timeout / 4, 0.5)

    def overdue(self, now_ns):
        """Fail clients whose oldest request in flight has waited longer than --timeout."""
        limit = int(self.args.timeout * 1e9)
        for c in self.clients:
            if not c.done.done() and c.overdue(now_ns, limit):
                c.stop('no reply within %g s' % self.args.timeout)

    def unwatch(self):
        """Stop the timeout checks."""
        if self._timer is not None:
            self._timer.cancel()

    def ready_fields(self):
        """What the ready line says."""
        a = self.args
        return dict(clients=a.clients, client_base=a.client_base, host=a.host, port=a.port,
                    pipeline=a.pipeline, loop=a.loop)

    def end(self, problem, error, cpu=None):
        """Stop every client (problem: why, or None), log the phases cut short and the
        summary; cpu: (at start, at go, now) process CPU seconds, or None (simulated).
        Return the exit status, with one sentence through error() when it is 1."""
        args, log = self.args, self.log
        for c in self.clients:
            c.stop(problem or 'stopped')
            if c.phase is not None and c.phase.start is not None:
                self.phase_ended(c, c.phase)       # the phase under way when it stopped
        if self.lat_file is not None:
            self.lat_file.close()
        totals = self.totals()
        failed = [c for c in self.clients if c.failure is not None]
        log.write('summary', flush=True, clients=args.clients, client_base=args.client_base,
                  requests=args.requests, ops=args.ops, pipeline=args.pipeline, loop=args.loop,
                  host=args.host, port=args.port, value_size=args.value_size,
                  clients_failed=len(failed), **cpu_fields(cpu),
                  latencies=args.latencies, **totals)
        sentence = _why_failed(problem, failed, totals)
        if sentence:
            error('kvload: %s.' % sentence)
            return 1
        return 0

    def totals(self):
        """Summary counters over every client and phase."""
        phases = [ph for c in self.clients for ph in c.phases]
        errors = {}
        for ph in phases:
            for kind, n in ph.errors.items():
                errors[kind] = errors.get(kind, 0) + n
        done = sum(ph.done for ph in phases)
        started = [ph for ph in phases if ph.start_ns is not None and ph.end_ns is not None]
        span = (max(ph.end_ns for ph in started) - min(ph.start_ns for ph in started)) / 1e9 \
            if started else 0
        return dict(planned=self.args.clients * self.args.requests * len(self.args.ops),
                    done=done, ok=sum(ph.ok for ph in phases), wrong=sum(ph.wrong for ph in phases),
                    errors=errors, elapsed_s=round(span, 6),
                    ops_per_s=round(done / span, 1) if span > 0 else None)


async def _main(args, log):
    """Connect, wait at the barrier if asked, run every client, log; return the exit status."""
    run = _Run(args, log)
    stop = stop_on_signals(run)
    cpu0 = sum(os.times()[:2])
    finished, refused = await unless_stopped(run.connect(), stop)
    problem = None
    if finished and refused:
        problem = 'cannot connect to %s:%d: %s' % (args.host, args.port, refused)
    elif finished:
        if args.barrier:
            tagged = types.SimpleNamespace(write=functools.partial(log.write,
                                                                   **run.ready_fields()))
            try:
                finished, _ = await unless_stopped(wait_go(tagged), stop)
            except RuntimeError:
                problem = 'stdin closed before the "go" line of --barrier'
        else:
            log.write('ready', flush=True, **run.ready_fields())
    cpu_go = sum(os.times()[:2])
    if finished and problem is None:
        for c in run.clients:
            c.start()
        run.watch()
        finished, _ = await unless_stopped(
            asyncio.wait([c.done for c in run.clients]), stop)
        run.unwatch()
    if not finished:
        problem = 'interrupted by %s' % run.stopped_by
    return run.end(problem, error, (cpu0, cpu_go, sum(os.times()[:2])))



def _why_failed(problem, failed, totals):
    """One sentence on what went wrong, or None when every request got its correct reply."""
    done, planned = totals['done'], totals['planned']
    if problem is not None and (problem.startswith('cannot') or problem.startswith('stdin')):
        return problem
    if problem is not None:
        return '%s after %d of %d requests' % (problem, done, planned)
    if failed:
        c = failed[0]
        phase = next((ph for ph in c.phases if ph.failure is not None), None)
        where = ' during %s after %d of %d requests' % (
            phase.op, phase.done, phase.requests) if phase else ''
        others = ' (and %d other client%s)' % (len(failed) - 1, 's' * (len(failed) > 2)) \
            if len(failed) > 1 else ''
        return 'client %d stopped%s: %s%s' % (c.cid, where, c.failure, others)
    bad = done - totals['ok']
    if bad or done < planned:
        return '%d of %d replies were not the expected ones (wrong %d, errors %s)' % (
            bad, done, totals['wrong'], sum(totals['errors'].values()))
    return None


def main(argv=None):
    """Command-line entry point; returns the exit status."""
    return run_cli(parse_args, _main, argv)


def simulate(env, argv):
    """Run this load generator in the simulator (`repronet.sim`): the same clients and
    records in virtual time (`kvload_sim`)."""
    from workloads.kvload_sim import SimKvload
    SimKvload(env, parse_args(argv), _Run).start()


if __name__ == '__main__':
    sys.exit(main())
