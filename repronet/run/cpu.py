"""Machine CPU sampler: flags runs where the CPU, not the emulated network, was the limit.

An emulated network is only as faithful as the CPU that runs it: every host, switch, link
daemon and node process shares the machine's cores, and a saturated CPU shows up as extra
delay and lost throughput that the topology never asked for. Mininet-HiFi (Handigol et al.,
"Reproducible Network Experiments Using Container-Based Emulation", CoNEXT 2012) therefore
monitored the machine and trusted a run only while the CPU kept spare capacity; we use the
same bar, **at least 35 % idle**:

* a sample is *over* when the whole machine was busy for more than ``threshold`` = 0.65 of
  the interval (less than 35 % idle);
* a run is ``saturated`` when more than ``max_over_fraction`` = 5 % of its samples are over
  (one short burst, such as process start-up, does not condemn a run).

Busy time comes from ``/proc/stat``: busy = total - idle - iowait over one interval, per
core and for the machine (``steal`` counts as busy: the VM's CPU was taken away). With
``cpus`` (CPUs set apart for the link daemons, ``repronet.emu.linkcpus``) "the machine" is
those CPUs: the verdict is about the hosts' CPUs, and ``judged_cpus`` in the summary says so. A core
pinned at 100 % while the machine average stays low (a single-threaded bottleneck such as
a delay daemon) is reported separately as ``core_over_fraction`` (samples with any core
above ``core_threshold`` = 0.95); it does not set ``saturated``, it is a hint.

Building and tearing down a network, and drawing figures afterwards, load the CPU in
short bursts that say nothing about the measurement. The runner therefore names phases:
``set_phase('measure')`` while points run, ``set_phase(None)`` otherwise. Every sample
records the phase that held for its whole interval (``None`` if the phase changed within
it), and the verdict is taken over the ``measure`` samples when there are any, else over
all samples (``judged`` in the summary says which).

Each ``measure`` phase is also read precisely at its start and end
(``repronet.run.cpu_span``: nanoseconds from the root cpuacct cgroup), because a timed part
shorter than the interval holds no sample; ``take_span()`` returns the point's reading and
verdict (by the same bar) for ``points.jsonl``.

``CpuMonitor`` samples in a daemon thread; it is a context manager, or use
``start()``/``stop()``. Samples are kept in memory and, if ``path`` is given, appended as
JSON lines ``{"t", "busy", "steal", "cores", "core_steal", "phase"}`` (``t`` is wall-clock
seconds). Steal is the time the hypervisor gave this VM's CPU to someone else: on a shared
cloud VM it comes in bursts (seen here: a third of a 0.5 s sample) that stall every process
and daemon on that CPU at once, so the summary keeps its worst sample, not only its mean.
"""

import json
import threading
import time

from repronet.run import cpu_span

THRESHOLD = 0.65            # busy fraction above which a sample is over (35 % idle bar)
MAX_OVER_FRACTION = 0.05    # fraction of over samples above which a run is saturated
CORE_THRESHOLD = 0.95       # busy fraction of one core counted as pinned
MEASURE = 'measure'         # the phase the verdict is about


def read_stat(path='/proc/stat'):
    """Return {'cpu': (total, idle, steal), 'cpu0': ...} from /proc/stat jiffies."""
    counters = {}
    with open(path) as handle:
        for line in handle:
            if not line.startswith('cpu'):
                break
            name, *fields = line.split()
            values = [int(v) for v in fields[:8]] + [0] * (8 - len(fields[:8]))
            # user nice system idle iowait irq softirq steal; guest is inside user/nice.
            total = sum(values)
            counters[name] = (total, values[3] + values[4], values[7])
    return counters


def _column_max(samples, key):
    """Per core, the largest value of samples' list ``key`` (None where no sample has one;
    samples written before the key existed have none)."""
    columns = [[v for v in col if v is not None]
               for col in zip(*[s.get(key) or [None] * len(s['cores']) for s in samples])]
    return [max(c) if c else None for c in columns]


def _sum(counters, names):
    """The (total, idle, steal) of the named cores added up."""
    return tuple(sum(col) for col in zip(*[counters[n] for n in names]))


def _busy(before, after):
    """(busy fraction, steal fraction) between two (total, idle, steal) readings."""
    total = after[0] - before[0]
    if total <= 0:
        return 0.0, 0.0
    idle = after[1] - before[1]
    return (min(1.0, max(0.0, 1.0 - idle / total)),
            min(1.0, max(0.0, (after[2] - before[2]) / total)))


class CpuMonitor:
    """Sample machine and per-core CPU utilization every `interval` seconds."""

    def __init__(self, interval=0.5, path=None, threshold=THRESHOLD,
                 max_over_fraction=MAX_OVER_FRACTION, core_threshold=CORE_THRESHOLD,
                 cpus=None):
        if interval <= 0:
            raise ValueError('interval must be positive, got %r' % (interval,))
        if not 0 < threshold <= 1:
            raise ValueError('threshold is a busy fraction in (0, 1], got %r' % (threshold,))
        self.interval = interval
        self.path = path
        self.threshold = threshold
        self.max_over_fraction = max_over_fraction
        self.core_threshold = core_threshold
        self.cpus = sorted(cpus) if cpus else None   # judge by these CPUs only (None: all)
        self.samples = []
        self.core_names = []
        self._lock = threading.Lock()
        self._phase = None
        self._phase_changed = False
        self._stop = threading.Event()
        self._thread = None
        self._handle = None
        self._span_start = None     # cpu_span reading at the current measure phase's start
        self._spans = []            # cpu_span deltas of the measure phases since take_span()

    def start(self):
        """Start sampling in a background thread."""
        if self._thread is not None:
            raise RuntimeError('CpuMonitor already started')
        first = read_stat()
        self.core_names = sorted((n for n in first if n != 'cpu'), key=lambda n: int(n[3:]))
        missing = [c for c in self.cpus or () if f'cpu{c}' not in first]
        if missing:
            raise ValueError('/proc/stat has no CPU %s to judge the run by' % missing)
        if self.path is not None:
            self._handle = open(self.path, 'a')
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(first,),
                                        name='repronet-cpu', daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stop sampling, wait for the thread and close the log file."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def set_phase(self, phase):
        """Name what the machine is doing from now on ('measure', or None); read the CPU
        precisely when a measure phase starts and ends."""
        reading = cpu_span.read() if (phase == MEASURE) != (self._phase == MEASURE) else None
        with self._lock:
            if phase != self._phase:
                if phase == MEASURE:
                    self._span_start = reading
                elif self._phase == MEASURE and self._span_start and reading:
                    self._spans.append(cpu_span.delta(self._span_start, reading))
                self._phase = phase
                self._phase_changed = True

    def take_span(self):
        """Return the precise CPU record of the measure phases since the last call (None
        without any, or without a cpuacct cgroup), and start afresh."""
        with self._lock:
            spans, self._spans = self._spans, []
        return cpu_span.verdict(spans, self.threshold, self.cpus)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _loop(self, before):
        """Take one sample per interval until stopped."""
        while not self._stop.wait(self.interval):
            after = read_stat()
            if self.cpus:
                names = [f'cpu{c}' for c in self.cpus]
                busy, steal = _busy(_sum(before, names), _sum(after, names))
            else:
                busy, steal = _busy(before['cpu'], after['cpu'])
            each = [_busy(before[n], after[n]) if n in before and n in after else None
                    for n in self.core_names]
            sample = {'t': round(time.time(), 3), 'busy': round(busy, 4),
                      'steal': round(steal, 4),
                      'cores': [round(e[0], 4) if e else None for e in each],
                      'core_steal': [round(e[1], 4) if e else None for e in each]}
            with self._lock:
                sample['phase'] = None if self._phase_changed else self._phase
                self._phase_changed = False
                self.samples.append(sample)
            if self._handle is not None:
                self._handle.write(json.dumps(sample) + '\n')
                self._handle.flush()
            before = after

    def sample_at(self, t):
        """The sample whose interval holds the Unix time t (None when none does)."""
        with self._lock:
            samples = list(self.samples)
        return next((s for s in samples if s['t'] - self.interval < t <= s['t']), None)

    def summary(self):
        """Mean/max utilization and the saturation verdict over the samples so far."""
        with self._lock:
            samples = list(self.samples)
        measured = [s for s in samples if s.get('phase') == MEASURE]
        result = {'samples_total': len(samples), 'judged': MEASURE if measured else 'all'}
        samples = measured or samples
        result.update({
            'samples': len(samples), 'interval': self.interval, 'cores': self.core_names,
            'judged_cpus': self.cpus,
            'threshold': self.threshold, 'max_over_fraction': self.max_over_fraction,
            'core_threshold': self.core_threshold, 'mean': None, 'max': None,
            'core_mean': [], 'core_max': [], 'over_fraction': None,
            'core_over_fraction': None, 'steal_mean': None, 'steal_max': None,
            'core_steal_max': [], 'saturated': False})
        if not samples:
            return result
        busy = [s['busy'] for s in samples]
        core_values = [[v for v in col if v is not None]
                       for col in zip(*[s['cores'] for s in samples])]
        result.update(
            mean=round(sum(busy) / len(busy), 4),
            max=max(busy),
            core_mean=[round(sum(c) / len(c), 4) if c else None for c in core_values],
            core_max=_column_max(samples, 'cores'),
            over_fraction=round(sum(b > self.threshold for b in busy) / len(busy), 4),
            core_over_fraction=round(sum(
                any(v is not None and v > self.core_threshold for v in s['cores'])
                for s in samples) / len(samples), 4),
            steal_mean=round(sum(s['steal'] for s in samples) / len(samples), 4),
            steal_max=max(s['steal'] for s in samples),
            core_steal_max=_column_max(samples, 'core_steal'))
        result['saturated'] = result['over_fraction'] > self.max_over_fraction
        return result
