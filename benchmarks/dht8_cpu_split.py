#!/usr/bin/python3
"""Who uses the 2 cores during dht8's batched REGISTER points: the CPU of every process of
the machine over each timed part, by kind (index servers, clients, link-delay daemons,
kernel threads, the runner, everything else), beside the capacity of the cores.

Why (issue 13): simulated Part I batched registers at 2-8 clients come out at 0.51-0.77 of
the emulated time, while the one-client points the cost was fitted on agree. The simulator
charges only the DHT nodes (a cost per callback and per byte, on ``--sim-cores`` shared
cores). If the emulation is CPU-bound there, its cores also run something the simulator
does not charge; this says what, with measured CPU time, not a model of it.

How: the real dht8 experiment (``topologies/dht8.py``, same flags, same runner, same machine
lock), its points cut down to the batched registers (plain and replicated; Part III's too
with ``--parts I,III``), each keeping the seed and order it has in the full run. Around
each point's timed part (the clients' release to the last client's exit) it reads every
task's ``/proc/PID/task/*/schedstat`` (nanoseconds run, nanoseconds waited on a run queue)
and ``/proc/stat``. A client exits inside the timed part, so its CPU there is its whole CPU
(``RUSAGE_CHILDREN`` of this process, which reaps it) less what it had used at the release.
The snapshots themselves run outside the timed part (before the release, after the last
exit); ``window`` is the time between them. The kernel here has no IRQ time accounting, so
softirq work (bridge, HTB, NFQUEUE) counts to the task it interrupted or to ``ksoftirqd``.

Writes ``logs/cpu_split.jsonl`` in the results folder (one record per point) and prints,
per configuration, the mean over repetitions in milliseconds of CPU. Nothing is asserted.

    sudo /usr/bin/python3 benchmarks/dht8_cpu_split.py --parts I --repeat 3 --out DIR
"""

import contextlib
import json
import os
import resource
import sys
import time

if __package__ in (None, ''):       # run as a script: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from repronet.run.options import UsageError  # noqa: E402
from topologies.dht8 import Dht8  # noqa: E402

KINDS = ('server', 'client', 'linkdelay', 'ksoftirqd', 'kworker', 'runner', 'other')
_TICK = os.sysconf('SC_CLK_TCK')


def classify(comm, cmdline):
    """The kind of a process from its comm and command line (one of KINDS)."""
    if comm == 'linkdelay':
        return 'linkdelay'
    if comm.startswith('ksoftirqd'):
        return 'ksoftirqd'
    if comm.startswith('kworker'):
        return 'kworker'
    if 'nodes.dht.server' in cmdline:
        return 'server'
    if 'nodes.dht.client' in cmdline:
        return 'client'
    if 'dht8_cpu_split' in cmdline:
        return 'runner'
    return 'other'


def _read(path):
    try:
        with open(path, 'rb') as f:
            return f.read()
    except OSError:             # the task ended meanwhile
        return None


def tasks():
    """{pid: (kind, ns run, ns waited on a run queue)} of every process now."""
    out = {}
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        pid = int(name)
        comm = _read('/proc/%d/comm' % pid)
        cmdline = _read('/proc/%d/cmdline' % pid)
        if comm is None or cmdline is None:
            continue
        run = wait = 0
        try:
            threads = os.listdir('/proc/%d/task' % pid)
        except OSError:
            continue
        for tid in threads:
            stat = _read('/proc/%d/task/%s/schedstat' % (pid, tid))
            if stat:
                fields = stat.split()
                run += int(fields[0])
                wait += int(fields[1])
        out[pid] = (classify(comm.decode(errors='replace').strip(),
                             cmdline.replace(b'\0', b' ').decode(errors='replace')),
                    run, wait)
    return out


def machine():
    """(busy, total) CPU seconds of the whole machine from /proc/stat's first line."""
    with open('/proc/stat') as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    total = sum(fields[:8])
    return (total - idle) / _TICK, total / _TICK


def children_cpu():
    """CPU seconds of this process's reaped children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def split(before, after, reaped_s):
    """{kind: ms run}, {kind: ms waited} between two tasks() snapshots; reaped_s is the CPU
    seconds of the children reaped between them (the clients)."""
    run = dict.fromkeys(KINDS, 0.0)
    wait = dict.fromkeys(KINDS, 0.0)
    for pid, (kind, r0, w0) in before.items():
        if pid in after and after[pid][0] == kind:
            run[kind] += (after[pid][1] - r0) / 1e6
            wait[kind] += (after[pid][2] - w0) / 1e6
        elif kind == 'client':          # reaped: its whole CPU is in reaped_s
            run[kind] -= r0 / 1e6
    run['client'] += reaped_s * 1e3
    return run, wait


class _Timed:
    """The point's context with timed() measuring the CPU around the timed part."""

    def __init__(self, ctx, records):
        self._ctx, self._records = ctx, records

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    @contextlib.contextmanager
    def timed(self):
        """Snapshot, the real timed part, snapshot; append the split to records."""
        before, mach0, kids0 = tasks(), machine(), children_cpu()
        t0 = time.monotonic()
        with self._ctx.timed():
            yield
        t1 = time.monotonic()
        after, mach1, kids1 = tasks(), machine(), children_cpu()
        run, wait = split(before, after, kids1 - kids0)
        names = {n.pid: n.name for n in self._ctx.nodes if n.pid in before}
        self._records.append({
            'pids': {str(pid): names.get(pid, kind) for pid, (kind, _, _) in before.items()
                     if kind in ('server', 'client', 'linkdelay')},
            'realtime_minus_monotonic': round(time.time() - time.monotonic(), 6),
            'window_ms': round((t1 - t0) * 1e3, 3),
            'machine_busy_ms': round((mach1[0] - mach0[0]) * 1e3, 1),
            'machine_total_ms': round((mach1[1] - mach0[1]) * 1e3, 1),
            'run_ms': {k: round(v, 3) for k, v in run.items()},
            'wait_ms': {k: round(v, 3) for k, v in wait.items()}})


class Dht8CpuSplit(Dht8):
    """dht8 cut down to its batched REGISTER points, with the CPU split of each."""

    def points(self, params):
        """The batched register points of the full run, with their seeds, renumbered."""
        keep = [p for p in super().points(params) if p['op'] == 'register' and p['batch']]
        return [dict(p, point=i) for i, p in enumerate(keep)]

    def check(self, params):
        """dht8's checks, and at least one batched register point among --parts."""
        super().check(params)
        if not set(params.parts.split(',')) & {'I', 'III'}:
            raise UsageError('--parts must include I or III (the batched registers)')

    def run_point(self, ctx, point):
        """Run the point through a context that measures its timed part."""
        records = []
        result = super().run_point(_Timed(ctx, records), point)
        if records:
            rec = dict(records[0], point=point['point'], part=point['part'],
                       replicas=point['replicas'], servers=point['servers'],
                       clients=point['peers'], repetition=point['repetition'],
                       elapsed_s=round(result['finished'] - result['released'], 6))
            with open(os.path.join(str(ctx.results.path), 'logs', 'cpu_split.jsonl'),
                      'a') as f:
                f.write(json.dumps(rec, sort_keys=True) + '\n')
        return result

    def main(self, argv=None):
        """Run, then print the split per configuration."""
        status = super().main(argv)
        if self.run_dir is not None:
            print(summary(os.path.join(str(self.run_dir), 'logs', 'cpu_split.jsonl')))
        return status


def summary(path):
    """Text table: per configuration the mean over repetitions of each figure (ms)."""
    try:
        with open(path) as f:
            recs = [json.loads(line) for line in f]
    except OSError as e:
        return 'dht8_cpu_split: no records (%s)' % e
    groups = {}
    for r in recs:
        groups.setdefault((r['part'], r['replicas'], r['servers'], r['clients']), []).append(r)
    head = ['part', 'repl', 'srv', 'cli', 'n', 'window', '2 cores', 'machine'] + \
        ['%s' % k for k in KINDS] + ['srv wait']
    lines = ['CPU ms per timed part (mean over n repetitions); "2 cores" is twice the '
             'window, "machine" /proc/stat busy (10 ms ticks), "srv wait" the servers\' '
             'time runnable but not running', ' '.join('%9s' % h for h in head)]

    def mean(rows, get):
        return sum(get(r) for r in rows) / len(rows)
    for key in sorted(groups):
        rows = groups[key]
        vals = [mean(rows, lambda r: r['window_ms']), 2 * mean(rows, lambda r: r['window_ms']),
                mean(rows, lambda r: r['machine_busy_ms'])]
        vals += [mean(rows, lambda r, k=k: r['run_ms'][k]) for k in KINDS]
        vals.append(mean(rows, lambda r: r['wait_ms']['server']))
        lines.append(' '.join(['%9s' % v for v in key] + ['%9d' % len(rows)] +
                              ['%9.1f' % v for v in vals]))
    return '\n'.join(lines)


if __name__ == '__main__':
    sys.exit(Dht8CpuSplit().main())
