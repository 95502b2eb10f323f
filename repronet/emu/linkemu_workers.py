"""One receiving host's linkdelay daemon as one worker process per CPU, seen as one daemon.

Why (issue 15, docs/link-emulation.md "Step 12"): a daemon woken by a packet that arrived on
the other CPU waits for an inter-processor interrupt, which on this nested VM costs about as
much as a whole LAN hold (19 us per wake-up traced under CPU hogs: 90 % of the daemons'
waiting). So the host's rule spreads its packets over one queue per CPU by the CPU that
enqueued them (``--queue-balance 0:N-1 --queue-cpu-fanout``), and the worker bound to queue k
is pinned to CPU k: the packet's own CPU wakes it, with no interrupt across CPUs. A rated link
stays one wire: the workers share its clock through a memory file (``--clocks-fd``,
linkdelay_wire.c).

A host with loss or jitter on any path to it keeps one worker: a seed must drop (and jitter)
the same packets again when a point is rerun, which needs each source's draws made in the
order its packets arrived, by one generator; which worker gets a packet depends on the CPU
it arrived on, which no seed fixes (tests/test_linkemu_root.py's reseed test failed with two
workers: 644, 642 and 623 of 1,000 echoed, the two runs of one seed different).

Every reader of a daemon's lines (readiness, reseed answers, stats, the manifest's
``link_holds``) sees one line per event merged over the workers (:func:`merge`): counters
summed, maxima kept, means weighted by what they average over, the lateness histogram summed
and its quantile bounds recomputed from it. A host stays one daemon in every record.

Which experiments use workers: ``--link-queues cpu|one``, by default the experiment's own
(``Experiment.link_queues``): ``cpu`` for dht8, measured to help, ``one`` for the others, since
the transfer experiment at a gigabit lost rate and fairness with workers (one run each way:
R_x / rate 0.335 against 0.522, Jain's index 0.759 against 0.960); ``Network`` itself, for
code that builds one directly, and benchmarks/lan_latency.py default to ``cpu``, measured
less late under CPU hogs (1.5-3.0 us against 8.4-20.5 at 0.01 ms a link).

One worker, unpinned, as before, with loss or jitter (above), when the daemons have CPUs of
their own (``--link-cpus``), on a host on another server (the runner pins only local
processes, and cannot hand a memory file over ssh), with one CPU, or with ``--link-queues
one`` (an experiment's or lan_latency.py's option), which a user who must rule out the rare
reordering below chooses.

The one way this can reorder a flow that one daemon kept in order: a flow's packets can reach
both workers (TCP sends from the ACK's softirq too, on the CPU that released the ACK), and
they leave a rated link in the order the workers reserved its time, which can differ from
the order they arrived in (counted once in two 8 s gigabit transfers, docs/link-emulation.md
"Step 12").
"""

import os

from repronet.emu.linkemu_holds import late_bound_us, summed_hist, weighted_mean
from repronet.emu.process import stop_popen
from repronet.run.results import read_jsonl

QUEUES = ('cpu', 'one')     # --link-queues: one worker per CPU (the default), or one
WORKERS_MAX = 8             # on bigger machines worker k takes the CPUs c with c % 8 == k

SUMMED = ('arrivals', 'accepted', 'dropped', 'unknown', 'held_now', 'held_max', 'released',
          'stamped', 'unstamped', 'enobufs', 'verdict_errors', 'forced_sleeps',
          'wake_samples', 'lazy_reads', 'queue_wakes', 'verdict_sends', 'spin_ms',
          'spin_windows_exhausted', 'spin_yields_slow', 'spin_yield_slow_ms', 'serialised')
LARGEST = ('late_us_max', 'queued_us_max', 'serial_us_max', 'rt_demoted', 'lazy_off',
           'wake_overshoot_us_q', 'wake_overshoot_us_max', 'spin_us')
WEIGHTED = {'late_us_mean': 'released', 'verdict_us_mean': 'released',
            'late_read_us_mean': 'released', 'late_chain_us_mean': 'released',
            'late_wake_us_mean': 'released', 'queued_us_mean': 'stamped',
            'serial_us_mean': 'serialised'}
BOUNDS = (('p50', 0.5), ('p90', 0.9), ('p99', 0.99), ('p999', 0.999))


def worker_cpus(local, reserved, draws=False, fanout=True):
    """The CPU set of each worker of one host's daemon: [None] (one worker, unpinned) unless
    fanout is asked (``--link-queues cpu``), it runs on this machine (local), no CPUs are
    reserved for the daemons, no path to it draws loss or jitter (draws) and there are two
    CPUs or more; else one set per worker, worker k taking the CPUs c with c % n == k."""
    count = os.cpu_count() or 1
    if not fanout or not local or reserved or draws or count < 2:
        return [None]
    n = min(count, WORKERS_MAX)
    return [{c for c in range(count) if c % n == k} for k in range(n)]


def rule_target(workers):
    """The NFQUEUE target of a host's rule for that many workers (queues 0..workers-1)."""
    if workers == 1:
        return '--queue-num 0'
    return f'--queue-balance 0:{workers - 1} --queue-cpu-fanout'


# merge's rules, one per key (RULES below): each gets the workers' values of its key, in
# the workers' order, and their whole lines.
def _numbers(values):
    return [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _summed(values, lines):
    return sum(_numbers(values))


def _largest(values, lines):
    numbers = _numbers(values)
    return max(numbers) if numbers else values[0]


def _weighted_by(weight_key):
    """The rule of a mean over what weight_key counts: weighted by each worker's count,
    rounded as the daemon prints it (3 places), 0.0 when no worker counted any."""
    def rule(values, lines):
        mean = weighted_mean(zip((line.get(weight_key) for line in lines), values))
        return round(mean, 3) if mean is not None else 0.0
    return rule


def _earliest(values, lines):
    after = [v for v in values if v is not None]
    return min(after) if after else None


def _worst_moment(values, lines):
    """When the worst release was: that of the worker with the largest late_us_max among
    those that released any (None when none did)."""
    worst = max((line for line in lines if line.get('released')),
                key=lambda line: line.get('late_us_max') or 0, default=None)
    return worst.get('late_us_max_at') if worst else None


def _bounds(values, lines):
    """The quantile bounds recomputed from the summed histogram (0 when it is empty); the
    workers' own bounds (same or list) when none printed a histogram."""
    hist = summed_hist(line.get('late_hist_log2_us') for line in lines)
    if hist is None:
        return _same_or_list(values, lines)
    return {name: late_bound_us(hist, q) if sum(hist) else 0 for name, q in BOUNDS}


def _by_key(key):
    """The rule of a list of links (key 'id') or sources ('src'): see _by_id."""
    def rule(values, lines):
        if all(isinstance(v, list) for v in values):
            return _by_id(values, key)
        return _same_or_list(values, lines)
    return rule


def _same_or_list(values, lines):
    return values[0] if all(v == values[0] for v in values) else values


RULES = {**{key: _summed for key in SUMMED}, **{key: _largest for key in LARGEST},
         **{key: _weighted_by(weight) for key, weight in WEIGHTED.items()},
         'rt_demoted_after_s': _earliest, 'late_us_max_at': _worst_moment,
         'late_hist_log2_us': lambda values, lines: summed_hist(values),
         'late_us_bounds': _bounds, 'links': _by_key('id'), 'sources': _by_key('src')}


def merge(lines):
    """One line from the same event's line of each worker (see the module docstring); a
    single worker's line comes back as it is. Each key is merged by its rule in ``RULES``;
    a key without one keeps its value when every worker printed the same, else the list of
    the workers' values."""
    if len(lines) == 1:
        return lines[0]
    out = {key: RULES.get(key, _same_or_list)([line.get(key) for line in lines], lines)
           for key in lines[0]}
    out['workers'] = len(lines)
    return out


def _by_id(lists, key):
    """The workers' entries (links by id, sources by address) with the same key as one, their
    counts summed."""
    merged = {}
    for entries in lists:
        for entry in entries or []:
            got = merged.get(entry[key])
            if got is None:
                merged[entry[key]] = dict(entry)
                continue
            for field, value in entry.items():
                if field not in (key, 'rate_bps') and isinstance(value, (int, float)):
                    got[field] = round(got.get(field, 0) + value, 3)
    return list(merged.values())


class HostDaemon:
    """One receiving host's daemon: its worker processes (one, or one per CPU), their files,
    the interfaces its rule matches; read and driven as one daemon."""

    def __init__(self, host, intfs):
        self.host, self.intfs = host, intfs
        self.procs, self.log_paths, self.err_paths, self.cpus = [], [], [], []
        self.clocks_fd = None       # the memory file of the workers' shared link clocks
        self.sources = 0
        self.hold_us_min = None     # the smallest and largest non-zero hold its config asks
        self.hold_us_max = None     # for (jitter aside)
        self.cpu_s = 0.0
        self.final = None
        self.seeded = []            # its seeded lines (counters at each reseed), once stopped
        self.rules = False

    def add(self, proc, log_path, err_path, cpus):
        """One more worker, pinned to cpus (None: left where the scheduler puts it)."""
        self.procs.append(proc)
        self.log_paths.append(log_path)
        self.err_paths.append(err_path)
        if cpus is not None:
            try:
                os.sched_setaffinity(proc.pid, cpus)
            except OSError:
                cpus = None     # gone already, or a CPU this process may not use: unpinned
        self.cpus.append(sorted(cpus) if cpus is not None else None)

    @property
    def pids(self):
        return [p.pid for p in self.procs]

    def events(self, kind):
        """This daemon's JSON lines of one event kind so far, merged over its workers (as many
        as every worker has printed; a line being written is skipped)."""
        per = [[e for e in read_jsonl(path) if e.get('event') == kind]
               for path in self.log_paths]
        return [merge(list(lines)) for lines in zip(*per)]

    def stderr(self):
        """What the workers said on stderr, or 'no message'."""
        said = []
        for path in self.err_paths:
            try:
                with open(path) as f:
                    text = f.read().strip()
            except OSError:
                text = ''
            if text and text not in said:
                said.append(text)
        return '; '.join(said) or 'no message'

    def exited(self):
        """Has any worker exited?"""
        return any(p.poll() is not None for p in self.procs)

    def signal(self, sig):
        """Send sig to every worker still running (its own PID, never a name)."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(sig)

    def write(self, line):
        """Send one control line to every worker (OSError when one is gone)."""
        for p in self.procs:
            p.stdin.write(line.encode())
            p.stdin.flush()

    def cpu_seconds(self, cpu_of):
        """The workers' CPU seconds together (cpu_of reads one process's), or None when no
        worker could be read."""
        got = [cpu_of(p) for p in self.procs]
        got = [c for c in got if c is not None]
        return sum(got) if got else None

    def stop(self, grace):
        """Stop every worker (stop_popen: SIGTERM unless it has exited, SIGKILL after grace
        seconds), keep the final counters."""
        for p in self.procs:
            stop_popen(p, grace=grace)
            if p.stdin:
                try:
                    p.stdin.close()
                except OSError:
                    pass
        if self.clocks_fd is not None:
            os.close(self.clocks_fd)
            self.clocks_fd = None
        stats = self.events('stats')
        self.final = stats[-1] if stats else {}
        self.seeded = self.events('seeded')     # read before a scratch folder goes


def open_clocks(host):
    """A memory file for the shared link clocks of host's workers (no path: nothing to leak)."""
    return os.memfd_create(f'repronet-linkdelay-{host}', os.MFD_CLOEXEC)
