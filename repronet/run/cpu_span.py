"""A precise CPU reading of one span (a point's timed part), judged by the sampler's bar.

Why: the sampler (``repronet.run.cpu``) reads ``/proc/stat`` every 0.5 s, in 10 ms ticks,
and a point is judged only by the samples that lie wholly inside its timed part. dht8's
batched registers are timed for 20-300 ms, so no sample lies inside them, and they had no
verdict: the cross-check then compared the simulator with points whose 2 cores were full
(measured with schedstat and perf by ``benchmarks/dht8_cpu_split.py``). /proc/stat cannot
judge such a span: its per-CPU idle time is printed in 10 ms units, a quarter of the whole
capacity of 2 cores over 20 ms. (/proc/schedstat would give nanoseconds, but this kernel
has no ``CONFIG_SCHEDSTATS``.)

How: the root cpuacct cgroup's ``cpuacct.usage_percpu`` (cgroup v1): nanoseconds every
task ran on each CPU, kernel time included, is read with ``CLOCK_MONOTONIC`` in ns when the
span starts and when it ends. busy = sum of the CPUs' usage deltas / (CPUs x wall delta).
One reading covers the whole span, so as a sample of the sampler's rule it is either over
the bar (busy > ``cpu.THRESHOLD``, 0.65) or not, and its share of over samples (1 or 0) is
above ``cpu.MAX_OVER_FRACTION`` exactly when it is over: the verdict is ``busy >
threshold``, the same bar, not a looser one. Several spans of one point add up (usage and
wall time summed).

Limits (in the record's ``source`` and docs/cpu-saturation.md): a running task's usage is brought
up to date at each scheduler tick (4 ms at HZ=250) and context switch, so an end of a span
may miss up to a tick on a CPU that runs one task without switching; work in interrupts
taken while a CPU idles is not counted (no IRQ time accounting here; softirq work run in a
task's context or in ksoftirqd is), and neither is steal (the VM's task clock excludes it;
the sampler counts it as busy), so the reading errs low, never high. ``stat_busy`` and
``steal`` from /proc/stat's ticks over the same span are kept beside it as a check on long
spans. Where there is no cpuacct cgroup v1 (cgroup v2 only), ``read()`` returns None and
no span is recorded: the point keeps the sampler's verdict alone.
"""

import time

from repronet.run import cpu

USAGE = '/sys/fs/cgroup/cpuacct/cpuacct.usage_percpu'
SOURCE = 'cpuacct.usage_percpu (root cgroup, ns) over the timed part'


def parse_usage(text):
    """Return the per-CPU nanoseconds of a cpuacct.usage_percpu text."""
    values = [int(v) for v in text.split()]
    if not values or any(v < 0 for v in values):
        raise ValueError('cpuacct.usage_percpu holds no per-CPU usage: %r' % text[:80])
    return values


def read(path=USAGE, stat='/proc/stat'):
    """Return a reading {'ns', 'usage', 'stat'} now, or None without a cpuacct cgroup."""
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError:
        return None
    now = time.monotonic_ns()
    return {'ns': now, 'usage': parse_usage(text), 'stat': cpu.read_stat(stat)['cpu']}


def delta(before, after):
    """Return one span's {'wall_ns', 'usage_ns': [per CPU], 'stat': (total, idle, steal)}
    between two readings of read()."""
    if len(before['usage']) != len(after['usage']):
        raise ValueError('the two readings count different CPUs (%d, %d)'
                         % (len(before['usage']), len(after['usage'])))
    return {'wall_ns': after['ns'] - before['ns'],
            'usage_ns': [b - a for a, b in zip(before['usage'], after['usage'])],
            'stat': tuple(b - a for a, b in zip(before['stat'], after['stat']))}


def verdict(spans, threshold, cpus=None):
    """Return the point's CPU record from its spans (delta()s), or None without any.

    busy is the machine's busy share over all the spans (with ``cpus``, of those CPUs
    only: the ones the run's hosts had), cores each CPU's; bound is busy > threshold, the
    sampler's bar (``CpuMonitor.threshold``, by default ``cpu.THRESHOLD``): one reading is
    over the bar or not, as one sample of the sampler."""
    spans = [s for s in spans if s['wall_ns'] > 0]
    if not spans:
        return None
    wall = sum(s['wall_ns'] for s in spans)
    cores = [sum(col) for col in zip(*[s['usage_ns'] for s in spans])]
    judged = [cores[c] for c in cpus] if cpus else cores
    busy = sum(judged) / (len(judged) * wall)
    total, idle, steal = (sum(col) for col in zip(*[s['stat'] for s in spans]))
    return {'source': SOURCE, 'seconds': round(wall / 1e9, 6),
            'busy': round(busy, 4), 'cores': [round(c / wall, 4) for c in cores],
            'stat_busy': round(1 - idle / total, 4) if total > 0 else None,
            'steal': round(steal / total, 4) if total > 0 else None,
            'judged_cpus': list(cpus) if cpus else None,
            'threshold': threshold, 'bound': busy > threshold}
