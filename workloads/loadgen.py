"""What the RESP load generators (``workloads.kvload``, ``workloads.kvmix``) share.

Their command lines fail the same way (one sentence on stderr, exit status 2, before
anything is built), stop the same way on SIGTERM/SIGINT (the summary is still written),
and write latencies in the same file format: little-endian uint32 in units of
``TICK_NS`` (100 ns), clamped at 2**32-1 (about 429 s), ``read_latencies`` reads them
back and ``latency_stats`` gives the nearest-rank percentiles the JSON lines carry.
"""

import asyncio
import contextlib
import math
import signal
import sys

import numpy as np

from nodes.dht.common import JsonLog, UsageParser, error  # noqa: F401 (UsageParser: kvload, kvmix)

TICK_NS = 100                 # latency unit: 100 ns
MAX_TICKS = 0xFFFFFFFF        # uint32; a longer latency (> 429 s) is clamped
LATENCY_DTYPE = np.dtype('<u4')
MAX_ERROR_KINDS = 32          # further kinds of error replies count under 'other'
SIGNALS = {signal.SIGTERM: 'SIGTERM', signal.SIGINT: 'SIGINT'}


def read_latencies(path, offset=0, count=None):
    """Latencies in microseconds (float64) of entries [offset, offset+count) of a latencies file."""
    data = np.fromfile(path, dtype=LATENCY_DTYPE, count=-1 if count is None else count,
                       offset=offset * LATENCY_DTYPE.itemsize)
    return data * (TICK_NS / 1000)


def latency_stats(us):
    """p50/p90/p99 (nearest rank), max and mean of latencies in microseconds."""
    if len(us) == 0:
        return {}
    ordered = np.sort(us)
    n = len(ordered)
    stats = {'p%d_us' % p: round(float(ordered[max(0, math.ceil(p * n / 100) - 1)]), 1)
             for p in (50, 90, 99)}
    stats['max_us'] = round(float(ordered[-1]), 1)
    stats['mean_us'] = round(float(ordered.mean()), 3)
    return stats


def run_cli(parse_args, main, argv=None):
    """A load generator's entry point: parse argv (sys.argv[1:] when None; exit 2 on bad
    arguments), run main(args, JsonLog()) on the chosen event loop; return its exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    with asyncio.Runner(loop_factory=args.loop_factory) as runner:
        return runner.run(main(args, JsonLog()))


def stop_on_signals(run):
    """An Event set by SIGTERM/SIGINT, which also records the signal's name in run.stopped_by."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig, name in SIGNALS.items():
        def handler(name=name):
            run.stopped_by = run.stopped_by or name
            stop.set()
        loop.add_signal_handler(sig, handler)
    return stop


async def unless_stopped(awaitable, stop):
    """Await awaitable unless stop is set first; return (finished, result)."""
    task = asyncio.ensure_future(awaitable)
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if task.done():
        return True, task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False, None


def cpu_fields(cpu):
    """A summary's cpu_s, run_cpu_s and connect_cpu_s from (at start, at go, now) process
    CPU seconds; None each in a simulated run (cpu None: the process is not the host)."""
    if cpu is None:
        return dict(cpu_s=None, run_cpu_s=None, connect_cpu_s=None)
    start, go, now = cpu
    return dict(cpu_s=round(now, 3), run_cpu_s=round(now - go, 3),
                connect_cpu_s=round(go - start, 3))


def count_error(errors, reply):
    """Count a RESP error reply in errors {kind: n} under its first word (ERR, WRONGTYPE,
    MOVED...); past MAX_ERROR_KINDS kinds, under 'other' (a server cannot grow the dict)."""
    kind = str(reply).split(' ', 1)[0] or 'ERR'
    if kind not in errors and len(errors) >= MAX_ERROR_KINDS:
        kind = 'other'
    errors[kind] = errors.get(kind, 0) + 1


class LatencyLog:
    """One operation's latencies, streamed: to a file (when given) and into a histogram.

    A run of any length holds at most what arrived since the last ``drain`` (the caller's
    uint32 ``array``); the summary's percentiles come from a log-linear histogram of
    ``HIST_BUCKETS`` counters: exact below 2048 ticks (204.8 us), within 1/1024 (0.1 %)
    above, reported as the bucket's lower edge.  The mean is exact.  The file holds every
    latency, for exact nearest-rank figures in analysis (``read_latencies``)."""

    SUB_BITS = 10
    HIST_BUCKETS = (32 - SUB_BITS) * (1 << SUB_BITS) + (1 << SUB_BITS)

    def __init__(self, file=None):
        self.file = file
        self.count = 0
        self.total_ticks = 0
        self.max_ticks = 0
        self.hist = np.zeros(self.HIST_BUCKETS, dtype=np.int64)

    def drain(self, held):
        """Take the latencies in held (an array('I') of ticks) and empty it."""
        if not held:
            return
        ticks = np.frombuffer(held, dtype=np.uint32).astype(np.int64)
        if self.file is not None:
            self.file.write(ticks.astype(LATENCY_DTYPE).tobytes())
        self.count += len(ticks)
        self.total_ticks += int(ticks.sum())
        self.max_ticks = max(self.max_ticks, int(ticks.max()))
        self.hist += np.bincount(self._bucket(ticks), minlength=self.HIST_BUCKETS)
        del held[:]

    @classmethod
    def _bucket(cls, ticks):
        """Histogram bucket of each tick count: the value itself below 2**(SUB_BITS+1),
        else (bits dropped) * 2**SUB_BITS + the top SUB_BITS+1 bits."""
        bits = np.frexp(ticks.astype(np.float64))[1]        # bit length, exact below 2**53
        shift = np.maximum(bits - (cls.SUB_BITS + 1), 0).astype(np.int64)
        return (shift << cls.SUB_BITS) + (ticks >> shift)

    @classmethod
    def _lower_edge(cls, bucket):
        """The smallest tick count in a bucket."""
        shift = max(0, (bucket >> cls.SUB_BITS) - 1)
        mantissa = bucket - (shift << cls.SUB_BITS)
        return mantissa << shift

    def stats(self):
        """count, mean_us, p50_us, p99_us, max_us (percentiles by nearest rank)."""
        if not self.count:
            return {'count': 0}
        cumulative = np.cumsum(self.hist)
        out = {'count': self.count,
               'mean_us': round(self.total_ticks / self.count * TICK_NS / 1000, 3)}
        for p in (50, 99):
            rank = max(1, math.ceil(p * self.count / 100))
            bucket = int(np.searchsorted(cumulative, rank))
            out['p%d_us' % p] = round(self._lower_edge(bucket) * TICK_NS / 1000, 1)
        out['max_us'] = round(self.max_ticks * TICK_NS / 1000, 1)
        return out
