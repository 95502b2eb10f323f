"""Start, check, reseed and stop the linkdelay daemons and their iptables rules in host namespaces.

One ``repronet/emu/linkdelay/linkdelay`` daemon per receiving host that has at least one delayed
or lossy path to it; its config lists every host with a path to it (the daemon passes the
undelayed ones at once). A local host's daemon is one worker process per CPU, each on its own
queue and pinned to its CPU, sharing the rated links' clocks (``linkemu_workers`` says why
and how; every record still shows one daemon per host). Order matters because the queue fails
closed (no ``--queue-bypass``): every worker starts and binds its NFQUEUE (0, 1, ...) of its
host's namespace first (readiness: its ``{"event": "ready"}`` line), and only then does one
rule per host, in the chain ``REPRONET_LINKDELAY`` of the raw table, send the IPv4 packets
arriving on the host's interface to them (spread by the CPU that enqueued each). Stopping
removes the rules first, then sends SIGTERM to each worker's own PID, which prints its final
counters. Daemons run outside the host's CPU cgroup (``mnexec -da``
without ``-g``): they emulate the network, not the host's work.

Start-up is linear in the number of hosts and does the slow steps side by side: all daemons
are started before the first is waited for, and each host's chain and rule go in as one
``iptables-restore --noflush`` transaction, a bounded number of them at once.

The daemon's stdin is a pipe this process keeps open: its end tells the daemon the runner is
gone, and a line ``seed N`` reseeds its generators (:meth:`DaemonSet.reseed` waits for every
daemon's ``seeded`` answer, so a point's traffic never meets the previous seed).

Scheduling (issue 15: a LAN link's hold is tens of microseconds, as long as a wake-up behind
busy node processes): every daemon asks for SCHED_FIFO at RT_PRIORITY, bounded by the kernel's
RT throttle and by RT_BUDGET_MS of running without blocking (then it drops to SCHED_OTHER for
good; it sleeps briefly every quarter of that budget so that normal traffic never does this),
and busy-polls a spin window before each deadline, all daemons together at most SPIN_CPUS of the
machine (each gets its share per 100 ms window). The window is learned by each daemon from how
late its own timed sleeps wake, at most SPIN_US (linkdelay_sched.h says how). While it holds
packets a daemon reads its queue only when it wakes for a deadline or when the least hold has
passed since its last read (lazy reads: the holds count from the kernel's arrival stamps), so
a real-time daemon preempts the node processes once per batch of packets, not once per packet.
The packets due in one pass leave in one netlink send of up to VERDICT_BATCH verdicts
(linkdelay_release.c; several are due at once mostly when a daemon is catching up).
:meth:`DaemonSet.schedule` is what the manifest records (``mechanisms.link_daemons``); each
daemon's stats say what it actually ran under, and :meth:`DaemonSet.holds` (the manifest's
``link_holds``) what each learned and whether one left the real-time class.

The binary is built on demand with ``make -C repronet/emu/linkdelay`` when missing or older than
its sources.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import zlib

from repronet.emu import linkemu_holds, linkemu_workers
from repronet.emu.linkemu_workers import HostDaemon
from repronet.emu.process import cpu_seconds
from repronet.emu.linkemu_params import LinkEmulationError
from repronet.emu.linkemu_paths import daemon_config

SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'linkdelay')
BINARY = os.path.join(SOURCE_DIR, 'linkdelay')
# The daemon's C files without netfilter (the unit tests compile them with the check driver).
CORE_C = ('linkdelay_core.c', 'linkdelay_config.c', 'linkdelay_wire.c', 'linkdelay_sched.c')
CHECK_C = ('linkdelay_check.c', 'linkdelay_check_wire.c', 'linkdelay_check_sched.c') + CORE_C
DAEMON_C = ('linkdelay.c', 'linkdelay_release.c', 'linkdelay_report.c') + CORE_C
SOURCES = DAEMON_C + ('linkdelay_core.h', 'linkdelay_sched.h', 'linkdelay_daemon.h', 'Makefile')
CHAIN = 'REPRONET_LINKDELAY'
QUEUE = 0
READY_TIMEOUT = 5.0         # seconds, plus READY_PER_DAEMON for each daemon started
READY_PER_DAEMON = 0.05
PARALLEL = 16               # iptables-restore processes at once
POLL = 0.01
RT_PRIORITY = 10            # SCHED_FIFO, below the kernel's own RT threads (50)
RT_BUDGET_MS = 200          # RLIMIT_RTTIME: this long without blocking drops a daemon to OTHER
SPIN_US = 100               # the learned busy-poll window's cap, us
SPIN_CPUS = 0.5             # busy-polling of all daemons together, in CPUs
VERDICT_BATCH = 64          # release verdicts in one netlink send at most (1: one send each)
SPIN_PERMILLE_MAX = 250     # and of one daemon, per mille of a CPU
RT_THROTTLE = '/proc/sys/kernel/sched_rt_runtime_us'
LATE_SHARE = 0.1            # a run whose mean lateness exceeds this share of its smallest
                            # configured hold is marked (manifest link_holds.marked, reports)


def ensure_binary():
    """Build the daemon if missing or older than its sources; raise one clear sentence if not."""
    sources = [os.path.join(SOURCE_DIR, name) for name in SOURCES]
    if os.path.exists(BINARY) and \
            os.path.getmtime(BINARY) >= max(os.path.getmtime(p) for p in sources):
        return BINARY
    proc = subprocess.run(['make', '-C', SOURCE_DIR, 'linkdelay'], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0 or not os.path.exists(BINARY):
        last = (proc.stderr.strip().splitlines() or ['no output'])[-1]
        raise LinkEmulationError(
            f'the linkdelay daemon could not be built ({last}); install gcc, make and '
            f'libnetfilter-queue-dev (vagrant/provision.sh does) and run '
            f'`make -C repronet/emu/linkdelay`.')
    return BINARY


def host_id(host):
    """The daemon's --host-id: mixes the receiving host into every source's generator seed."""
    return zlib.crc32(host.encode())


def spin_permille(processes):
    """Each daemon process's busy-poll share: SPIN_CPUS split over all of them (every
    receiving host's workers), capped."""
    return min(SPIN_PERMILLE_MAX, int(1000 * SPIN_CPUS / max(1, processes)))


def daemon_argv(binary, config, seed, host, receivers, gso, worker=0, clocks_fd=None):
    """The command line of the daemon of receiving host ``host`` (one of ``receivers``
    daemons, workers counted): its config file, queue, seed, host ID and scheduling flags (see
    the module docstring); gso when no path to it has loss or jitter (whole GSO packets may
    then be held as one: fewer verdicts). Worker k of a host's daemon (linkemu_workers) reads
    queue QUEUE + k and shares the link clocks of clocks_fd. Every daemon, the emulation's or
    a bench's, starts so."""
    return [binary, '--config', config, '--queue', str(QUEUE + worker), '--seed', str(seed),
            '--host-id', str(host_id(host)), '--control-stdin',
            '--rt-priority', str(RT_PRIORITY), '--rt-budget-ms', str(RT_BUDGET_MS),
            '--spin-us', str(SPIN_US), '--spin-permille', str(spin_permille(receivers)),
            '--verdict-batch', str(VERDICT_BATCH)] + (['--gso'] if gso else []) + \
        (['--clocks-fd', str(clocks_fd)] if clocks_fd is not None else [])


def rules_text(intfs, workers=1):
    """The raw-table transaction (``iptables-restore --noflush``) that sends what arrives on
    intfs to the daemon's queue (its workers' queues, spread by CPU)."""
    target = linkemu_workers.rule_target(workers)
    rules = [f'-A {CHAIN} -i {intf} -j NFQUEUE {target}' for intf in intfs]
    return '\n'.join(['*raw', f':{CHAIN} - [0:0]', f'-I PREROUTING 1 -j {CHAIN}']
                     + rules + ['COMMIT', ''])


def unrules_text():
    """The transaction that removes what rules_text() added."""
    return '\n'.join(['*raw', f'-D PREROUTING -j {CHAIN}', f'-F {CHAIN}', f'-X {CHAIN}',
                      'COMMIT', ''])


def _cpu_of(proc):
    """CPU seconds of a daemon so far: read here, or on its server for a daemon on another
    server (repronet.cluster.nodes.RemotePopen, whose pid is its local ssh client's)."""
    return proc.cpu_seconds() if hasattr(proc, 'cpu_seconds') else cpu_seconds(proc.pid)


def _restore_all(daemons, text_of, what):
    """Run ``iptables-restore --noflush`` in each daemon's host with its text, PARALLEL at once.

    Returns [(daemon, error)] of the hosts where it failed.
    """
    failed, running, pending = [], [], list(daemons)
    while pending or running:
        while pending and len(running) < PARALLEL:
            d = pending.pop(0)
            proc = d.host.popen(['iptables-restore', '--noflush', '-w'], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:        # a few hundred bytes: the pipe takes them without blocking
                proc.stdin.write(text_of(d))
                proc.stdin.close()
            except OSError:
                pass    # it exited at once (e.g. the namespace is gone); its output says why
            running.append((d, proc))
        d, proc = running.pop(0)
        out = proc.stdout.read()
        if proc.wait() != 0:
            failed.append((d, f'{what} failed: {out.strip() or "exit %d" % proc.returncode}'))
    return failed


class DaemonSet:
    """The daemons and rules of one LinkEmulation."""

    def __init__(self, paths, seed, log_dir=None, cpus=None, queues='cpu'):
        self.paths = paths      # linkemu_paths.PathTable
        self.seed = seed
        self.queues = queues    # linkemu_workers.QUEUES: a worker per CPU, or one
        self.cpus = cpus        # linkcpus.LinkCpus: the CPUs set apart for the daemons, or None
        self.log_dir = log_dir
        self.daemons = {}
        self._scratch = None  # our own temporary folder when no log_dir was given

    def start(self, net):
        """Start a daemon per receiving host, wait for all, then add all rules; raise on failure."""
        binary = ensure_binary()
        if self.log_dir is None and self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix='repronet-linkdelay-')
        folder = self.log_dir or self._scratch
        os.makedirs(folder, exist_ok=True)
        receivers = self.paths.receivers()
        reserved = self.cpus is not None and self.cpus.active
        configs = {dst: daemon_config(self.paths.to(dst), lambda src: [
            i.IP() for i in net[src].intfList() if i.IP()]) for dst in receivers}
        # no loss or jitter on any path to it ("simple"): else one worker, see linkemu_workers
        plans = {dst: linkemu_workers.worker_cpus(not hasattr(net[dst], 'put_file'), reserved,
                                                  draws=not configs[dst][2],
                                                  fanout=self.queues == 'cpu')
                 for dst in receivers}
        total = sum(len(cpus) for cpus in plans.values())
        for dst in receivers:
            self._start_one(net, binary, folder, dst, configs[dst], plans[dst], total)
        self._wait_ready()
        failed = _restore_all(self.daemons.values(), self._rules, 'adding the rule')
        for d in self.daemons.values():
            d.rules = True
        for d, _ in failed:
            d.rules = False     # a failed iptables-restore transaction changed nothing
        if failed:
            d, why = failed[0]
            raise LinkEmulationError(
                f'host {d.host.name}: {why}; linkdelay needs iptables with the NFQUEUE '
                f'target in the host namespace.')

    def _start_one(self, net, binary, folder, dst, configured, workers, total):
        """Write the config of dst (configured: daemon_config's answer) and start its daemon's
        workers, one per CPU set in workers (linkemu_workers; total: every host's together),
        not waiting for them."""
        text, sources, simple, holds = configured
        host = net[dst]
        intfs = [i.name for i in host.intfList() if i.name != 'lo']
        config = os.path.join(folder, f'linkdelay-{dst}.conf')
        with open(config, 'w') as f:
            f.write(text)
        if hasattr(host, 'put_file'):   # a host on another server reads its own copy
            config = host.put_file(config)
        daemon = self.daemons[dst] = HostDaemon(host, intfs)
        if len(workers) > 1 and any(line.startswith('link ') for line in text.splitlines()):
            daemon.clocks_fd = linkemu_workers.open_clocks(dst)
        for k, cpus in enumerate(workers):
            argv = daemon_argv(binary, config, self.seed, dst, total, simple, k,
                               daemon.clocks_fd)
            name = dst if not k else f'{dst}.{k}'
            log_path = os.path.join(folder, f'linkdelay-{name}.jsonl')
            err_path = os.path.join(folder, f'linkdelay-{name}.err')
            with open(log_path, 'w') as out, open(err_path, 'w') as err:
                # stdin stays an open pipe: if this process dies, the daemon sees EOF and exits.
                proc = host.popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err,
                                  mncmd=['mnexec', '-da', str(host.pid)],
                                  **({'pass_fds': (daemon.clocks_fd,)}
                                     if daemon.clocks_fd is not None else {}))
            daemon.add(proc, log_path, err_path, cpus)
            if self.cpus is not None and not hasattr(host, 'put_file'):   # local daemons only
                self.cpus.place(dst, proc.pid)
        daemon.sources = sources
        daemon.hold_us_min = min((h for h in holds if h > 0), default=None)
        daemon.hold_us_max = max(holds, default=None) or None

    def _wait_ready(self):
        """Return once every daemon printed ready; raise with its stderr if one exits or stalls."""
        pending = dict(self.daemons)
        deadline = time.monotonic() + READY_TIMEOUT + READY_PER_DAEMON * len(pending)
        while pending:
            for name, d in list(pending.items()):
                if d.events('ready'):
                    del pending[name]
                elif d.exited() or time.monotonic() > deadline:
                    raise LinkEmulationError(
                        f'the linkdelay daemon on {name} did not become ready '
                        f'({d.stderr()}); check that this kernel has NFQUEUE '
                        f'(python -m repronet.emu.capabilities).')
            if pending:
                time.sleep(POLL)

    def schedule(self):
        """How the daemons were scheduled, for the manifest: asked for, and what each got."""
        got, quantile, cpus = {}, None, {}
        for name, d in self.daemons.items():
            ready = d.events('ready')
            got[name] = ready[0].get('policy') if ready else None
            quantile = ready[0].get('spin_quantile', quantile) if ready else quantile
            cpus[name] = d.cpus
        workers = sum(len(d.procs) for d in self.daemons.values())
        try:
            with open(RT_THROTTLE) as f:
                throttle = int(f.read())
        except (OSError, ValueError):
            throttle = None
        return {'policy': 'fifo' if RT_PRIORITY else 'other', 'rt_priority': RT_PRIORITY,
                'rt_budget_ms': RT_BUDGET_MS, 'rt_runtime_us': throttle,
                'spin_us_cap': SPIN_US, 'spin_window': 'learned', 'spin_quantile': quantile,
                'spin_permille': spin_permille(workers),
                'spin_cpus': SPIN_CPUS, 'queue_reads': 'lazy', 'verdict_batch': VERDICT_BATCH,
                'policy_got': got, 'queues': 'cpu-fanout' if workers > len(self.daemons)
                else 'one', 'worker_cpus': cpus}

    def holds(self):
        """After stop: the daemons' lateness next to their configured holds, for the manifest
        (``repronet.emu.linkemu_holds`` says what it holds)."""
        return linkemu_holds.record(
            [{'host': name, 'hold_us_min': d.hold_us_min, 'hold_us_max': d.hold_us_max,
              'cpu_s': round(d.cpu_s, 3),
              'server': getattr(d.host, 'server', None) or 'localhost'}
             for name, d in sorted(self.daemons.items())],
            [self.daemons[name].final or {} for name in sorted(self.daemons)], LATE_SHARE,
            [d.seeded + ([d.final] if d.final else [])
             for _, d in sorted(self.daemons.items())])

    @staticmethod
    def _rules(daemon):
        """The raw-table transaction that sends the host's incoming IPv4 packets to its daemon."""
        return rules_text(daemon.intfs, len(daemon.procs))

    @staticmethod
    def _unrules(daemon):
        """The transaction that removes what _rules added."""
        return unrules_text()

    def pids(self):
        """PIDs of every daemon started (running or not)."""
        return [pid for d in self.daemons.values() for pid in d.pids]

    def reseed(self, seed, timeout=5.0):
        """Reseed every running daemon; return once all answered, else raise one sentence."""
        self.seed = seed
        live = {n: d for n, d in self.daemons.items() if d.final is None}
        before = {n: len(d.events('seeded')) for n, d in live.items()}
        for name, d in live.items():
            try:
                d.write(f'seed {int(seed)}\n')
            except OSError as e:
                raise LinkEmulationError(
                    f'the linkdelay daemon on {name} cannot be reseeded ({e}); it has '
                    f'stopped: {d.stderr()}.')
        deadline = time.monotonic() + timeout
        while live:
            for name, d in list(live.items()):
                seeded = d.events('seeded')
                if len(seeded) > before[name] and seeded[-1].get('seed') == int(seed):
                    del live[name]
                elif d.exited() or time.monotonic() > deadline:
                    raise LinkEmulationError(
                        f'the linkdelay daemon on {name} did not confirm seed {seed} within '
                        f'{timeout:g} s ({d.stderr()}).')
            if live:
                time.sleep(POLL)

    def cpu_seconds(self):
        """Per receiving host: user+system CPU seconds its daemon has used so far."""
        for d in self.daemons.values():
            cpu = d.cpu_seconds(_cpu_of) if d.final is None else None
            if cpu is not None:
                d.cpu_s = cpu
        return {name: d.cpu_s for name, d in self.daemons.items()}

    def stats(self, timeout=2.0):
        """Per receiving host: pid, CPU seconds and the daemon's counters.

        ``stale`` is False when the counters are the daemon's answer to this call (or its
        final ones, once stopped), and True when it did not answer within ``timeout``: then
        ``counters`` are its last earlier ones (None if it never printed any).
        """
        cpu = self.cpu_seconds()
        before = {}
        for name, d in self.daemons.items():
            if d.final is None and not d.exited():
                before[name] = len(d.events('stats'))
                d.signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        out = {}
        for name, d in self.daemons.items():
            counters, stale = d.final, d.final is None
            if name in before:
                while True:
                    stats = d.events('stats')
                    stale = len(stats) <= before[name]
                    if not stale or time.monotonic() > deadline:
                        break
                    time.sleep(POLL)
                counters = stats[-1] if stats else None
            elif d.final is None:       # died on its own: its last words, if any
                stats = d.events('stats')
                counters = stats[-1] if stats else None
            out[name] = {'pid': d.pids[0], 'pids': d.pids, 'cpu_s': cpu[name],
                         'sources': d.sources,
                         'counters': counters, 'stale': stale}
        return out

    def stop(self):
        """Remove the rules, then SIGTERM every own daemon PID and keep its final counters."""
        live = [d for d in self.daemons.values() if d.final is None]
        try:
            _restore_all([d for d in live if d.rules], self._unrules, 'removing the rule')
        except Exception:   # a host's namespace may already be gone with the network
            pass
        for d in live:
            cpu = d.cpu_seconds(_cpu_of)
            if cpu is not None:
                d.cpu_s = cpu
            d.signal(signal.SIGTERM)
        for d in live:
            d.stop(grace=3)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
