"""Start, check and stop the linkdelay daemons and their iptables rules in host namespaces.

One ``repronet/emu/linkdelay/linkdelay`` process per receiving host that has at least one delayed or
lossy path to it. Order matters because the queue fails closed (no ``--queue-bypass``): the
daemon starts and binds NFQUEUE 0 of the host's namespace first (readiness: its
``{"event": "ready"}`` line), and only then does the chain ``REPRONET_LINKDELAY`` in the raw
table send the sources' packets to it. Stopping removes the rules first, then sends SIGTERM to
the daemon's own PID, which prints its final counters. Daemons run outside the host's CPU
cgroup (``mnexec -da`` without ``-g``): they emulate the network, not the host's work.

The binary is built on demand with ``make -C repronet/emu/linkdelay`` when missing or older than its
source.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import zlib

from repronet.emu.process import stop_popen
from repronet.emu.linkemu_params import LinkEmulationError
from repronet.run.results import read_jsonl

SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'linkdelay')
BINARY = os.path.join(SOURCE_DIR, 'linkdelay')
CHAIN = 'REPRONET_LINKDELAY'
QUEUE = 0
READY_TIMEOUT = 5.0


def ensure_binary():
    """Build repronet/emu/linkdelay/linkdelay if missing or stale; raise one clear sentence if not."""
    source = os.path.join(SOURCE_DIR, 'linkdelay.c')
    if os.path.exists(BINARY) and os.path.getmtime(BINARY) >= os.path.getmtime(source):
        return BINARY
    proc = subprocess.run(['make', '-C', SOURCE_DIR], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0 or not os.path.exists(BINARY):
        last = (proc.stderr.strip().splitlines() or ['no output'])[-1]
        raise LinkEmulationError(
            f'the linkdelay daemon could not be built ({last}); install gcc, make and '
            f'libnetfilter-queue-dev (vagrant/provision.sh does) and run '
            f'`make -C repronet/emu/linkdelay`.')
    return BINARY


def host_seed(seed, host):
    """Per-host generator seed derived from the run seed and the host name."""
    return (int(seed) * 1000003 + zlib.crc32(host.encode())) % (2 ** 63) or 1


def _cpu_seconds(pid):
    """User+system CPU seconds of a live process, or None once it is gone."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


class _Daemon:
    """One running daemon: its host, process, files and source addresses."""

    def __init__(self, host, proc, log_path, err_path, addrs):
        self.host, self.proc, self.log_path, self.err_path = host, proc, log_path, err_path
        self.addrs = addrs
        self.cpu_s = 0.0
        self.final = None

    def events(self):
        """Parsed JSON lines the daemon wrote so far (a line still being written is skipped)."""
        return read_jsonl(self.log_path)


class DaemonSet:
    """The daemons and rules of one LinkEmulation."""

    def __init__(self, paths, seed, log_dir=None):
        self.paths = paths
        self.seed = seed
        self.log_dir = log_dir
        self.daemons = {}
        self._scratch = None  # our own temporary folder when no log_dir was given

    def start(self, net):
        """Start one daemon per receiving host, then its rules; raise if any is not ready."""
        binary = ensure_binary()
        if self.log_dir is None and self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix='repronet-linkdelay-')
        folder = self.log_dir or self._scratch
        os.makedirs(folder, exist_ok=True)
        by_dst = {}
        for spec in self.paths.values():
            if spec.active:
                by_dst.setdefault(spec.dst, []).append(spec)
        for dst in sorted(by_dst):
            self._start_one(net, binary, folder, dst, by_dst[dst])

    def _start_one(self, net, binary, folder, dst, specs):
        """Write the config of dst, start its daemon, wait for ready, add the rules."""
        lines, addrs, simple = [], [], True
        for spec in sorted(specs, key=lambda s: s.src):
            hops = ' '.join(f'{d} {j}' for d, j in spec.hops)
            simple = simple and spec.loss == 0 and all(j == 0 for _, j in spec.hops)
            for intf in net[spec.src].intfList():
                ip = intf.IP()
                if ip:
                    lines.append(f'{ip} {spec.loss:.9f} {len(spec.hops)} {hops}  # {spec.src}')
                    addrs.append(ip)
        if not addrs:
            return
        config = os.path.join(folder, f'linkdelay-{dst}.conf')
        with open(config, 'w') as f:
            f.write('# SRC_IPV4 LOSS NHOPS DELAY_US JITTER_US ... (written by topologies/'
                    'linkemu_daemon.py)\n')
            f.write(''.join(line.split('  #')[0] + '\n' for line in lines))
        argv = [binary, '--config', config, '--queue', str(QUEUE),
                '--seed', str(host_seed(self.seed, dst)), '--exit-on-eof']
        if simple:
            # No loss, no jitter: whole GSO packets can be held as one (fewer verdicts).
            argv.append('--gso')
        log_path = os.path.join(folder, f'linkdelay-{dst}.jsonl')
        err_path = os.path.join(folder, f'linkdelay-{dst}.err')
        host = net[dst]
        with open(log_path, 'w') as out, open(err_path, 'w') as err:
            # stdin stays an open pipe: if this process dies, the daemon sees EOF and exits.
            proc = host.popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err,
                              mncmd=['mnexec', '-da', str(host.pid)])
        daemon = _Daemon(host, proc, log_path, err_path, addrs)
        self.daemons[dst] = daemon
        self._wait_ready(daemon)
        self._add_rules(daemon)

    @staticmethod
    def _wait_ready(daemon):
        """Return once the daemon printed ready; raise with its stderr if it exits or stalls."""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if any(e.get('event') == 'ready' for e in daemon.events()):
                return
            if daemon.proc.poll() is not None:
                break
            time.sleep(0.01)
        with open(daemon.err_path) as f:
            why = f.read().strip() or 'no message'
        raise LinkEmulationError(
            f'the linkdelay daemon on {daemon.host.name} did not become ready ({why}); '
            f'check that this kernel has NFQUEUE (python -m repronet.emu.capabilities).')

    @staticmethod
    def _add_rules(daemon):
        """Send packets from the daemon's sources to its queue; verify the rules are there."""
        host = daemon.host
        cmds = [f'iptables -w -t raw -N {CHAIN}']
        cmds += [f'iptables -w -t raw -A {CHAIN} -s {ip}/32 -j NFQUEUE --queue-num {QUEUE}'
                 for ip in daemon.addrs]
        cmds.append(f'iptables -w -t raw -I PREROUTING -j {CHAIN}')
        for cmd in cmds:
            out = host.cmd(cmd + ' 2>&1; echo rc=$?').strip()
            if not out.endswith('rc=0'):
                raise LinkEmulationError(
                    f'host {host.name}: `{cmd}` failed ({out}); linkdelay needs iptables with '
                    f'the NFQUEUE target in the host namespace.')
        listed = host.cmd(f'iptables -w -t raw -S {CHAIN}')
        if listed.count('NFQUEUE') != len(daemon.addrs):
            raise LinkEmulationError(f'host {host.name}: linkdelay rules did not stick: {listed}')

    def cpu_seconds(self):
        """Per receiving host: user+system CPU seconds its daemon has used so far."""
        for d in self.daemons.values():
            cpu = _cpu_seconds(d.proc.pid) if d.final is None else None
            if cpu is not None:
                d.cpu_s = cpu
        return {name: d.cpu_s for name, d in self.daemons.items()}

    def stats(self, timeout=2.0):
        """Per receiving host: pid, CPU seconds and the daemon's current counters."""
        cpu = self.cpu_seconds()
        before = {}
        for name, d in self.daemons.items():
            if d.final is None and d.proc.poll() is None:
                before[name] = sum(1 for e in d.events() if e.get('event') == 'stats')
                d.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        out = {}
        for name, d in self.daemons.items():
            counters = d.final
            if name in before:
                while True:
                    stats = [e for e in d.events() if e.get('event') == 'stats']
                    if len(stats) > before[name] or time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
                counters = stats[-1] if stats else None
            out[name] = {'pid': d.proc.pid, 'cpu_s': cpu[name], 'sources': d.addrs,
                         'counters': counters}
        return out

    def stop(self):
        """Remove the rules, then SIGTERM each own daemon PID and keep its final counters."""
        for d in self.daemons.values():
            if d.final is not None:
                continue
            try:
                d.host.cmd(f'iptables -w -t raw -D PREROUTING -j {CHAIN} 2>/dev/null; '
                           f'iptables -w -t raw -F {CHAIN} 2>/dev/null; '
                           f'iptables -w -t raw -X {CHAIN} 2>/dev/null')
            except Exception:  # the host's shell may already be gone with the network
                pass
            cpu = _cpu_seconds(d.proc.pid)
            if cpu is not None:
                d.cpu_s = cpu
            stop_popen(d.proc, grace=3)
            if d.proc.stdin:
                d.proc.stdin.close()
            stats = [e for e in d.events() if e.get('event') == 'stats']
            d.final = stats[-1] if stats else {}
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
