"""The test bench of ``benchmarks/dht_read_cost.py``: two network namespaces of its own joined
by a veth pair (offloads off, as the emulation's hosts), HTB shaping and the emulation's delay
daemon on demand, the real index server in one of them, its CPU time (schedstat) and its
system calls counted by ``perf stat``. Everything it makes it removes (``Pair`` is a context
manager); it needs root.

The delay daemon is configured and started the way the emulation does it, through the
emulation's own functions (``linkemu_paths.daemon_config`` for its config file,
``linkemu_daemon.daemon_argv`` for its command line, ``rules_text``/``unrules_text`` for the
NFQUEUE rule, ``linkemu.htb_quantum`` for the HTB class), so a change there reaches the
bench too (``daemon_setup``; tests/test_dht_read_cost.py compares them).
"""

import glob
import json
import os
import pathlib
import select
import shutil
import signal
import subprocess
import sys
import tempfile

from repronet.emu.linkemu import htb_quantum
from repronet.emu.linkemu_daemon import BINARY as LINKDELAY, daemon_argv, rules_text, \
    unrules_text
from repronet.emu.linkemu_paths import PathSpec, daemon_config

REPO = pathlib.Path(__file__).resolve().parent.parent
SERVER_IP, CLIENT_IP, PORT = '10.213.0.1', '10.213.0.2', 7000
GSO_MAX_SEGS = 65535        # the kernel's default for a veth
EVENTS = ('syscalls:sys_enter_recvfrom', 'syscalls:sys_enter_epoll_wait')
HOLDS_US = (50, 50)         # dht8's two links of 0.05 ms between a peer and an index server
SEED = 1


def daemon_setup(config_path):
    """(config text, argv) of the delay daemon at the server: what the emulation would write
    and run for one receiver whose only source is the client, two hops of HOLDS_US away."""
    spec = PathSpec(src='client', dst='server', hops=tuple((h, 0) for h in HOLDS_US),
                    loss=0.0, links=('client->switch', 'switch->server'))
    text, _, simple, _ = daemon_config([spec], lambda src: [CLIENT_IP])
    return text, daemon_argv(LINKDELAY, str(config_path), SEED, 'server', 1, simple)


def _run(argv, stdin=None):
    """Run a setup command (stdin: text it reads); RuntimeError with its stderr if it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, input=stdin)
    if done.returncode != 0:
        raise RuntimeError('%s failed: %s' % (' '.join(argv), done.stderr.strip()))


class Pair:
    """Two namespaces of this process joined by a veth pair; removed on exit."""

    def __init__(self):
        tag = os.getpid()
        self.server_ns, self.client_ns = 'rcost%d-s' % tag, 'rcost%d-c' % tag
        self.ends = {self.server_ns: 'rc%ds' % tag, self.client_ns: 'rc%dc' % tag}
        self.made = []
        self.daemon = None

    def __enter__(self):
        for ns in self.ends:
            _run(['ip', 'netns', 'add', ns])
            self.made.append(ns)
        s, c = self.ends[self.server_ns], self.ends[self.client_ns]
        _run(['ip', 'link', 'add', s, 'netns', self.server_ns, 'type', 'veth',
              'peer', 'name', c, 'netns', self.client_ns])
        for ns, ip in ((self.server_ns, SERVER_IP), (self.client_ns, CLIENT_IP)):
            end = self.ends[ns]
            _run(['ip', '-n', ns, 'addr', 'add', ip + '/24', 'dev', end])
            _run(['ip', '-n', ns, 'link', 'set', end, 'up'])
            _run(['ip', '-n', ns, 'link', 'set', 'lo', 'up'])
            _run(['ip', 'netns', 'exec', ns, 'ethtool', '-K', end, 'tx', 'off', 'tso', 'off',
                  'gso', 'off'])
        return self

    def shape(self, bw, segs=GSO_MAX_SEGS):
        """HTB at bw Mbit/s on both ends (None: no qdisc of ours); segs: the most segments
        one TCP packet may carry into the qdisc (ip link's gso_max_segs)."""
        for ns, end in self.ends.items():
            subprocess.run(['ip', 'netns', 'exec', ns, 'tc', 'qdisc', 'del', 'dev', end, 'root'],
                           capture_output=True)
            _run(['ip', '-n', ns, 'link', 'set', 'dev', end, 'gso_max_segs', str(segs)])
            if bw:
                _run(['ip', 'netns', 'exec', ns, 'tc', 'qdisc', 'add', 'dev', end, 'root',
                      'handle', '5:', 'htb', 'default', '1'])
                _run(['ip', 'netns', 'exec', ns, 'tc', 'class', 'add', 'dev', end, 'parent',
                      '5:', 'classid', '5:1', 'htb', 'rate', '%gMbit' % bw, 'burst', '15k',
                      'quantum', str(htb_quantum(bw))])     # burst: Mininet's TCIntf

    def hold(self, on):
        """Start (on) or stop the delay daemon holding what reaches the server for 2 x 50 us."""
        if on and self.daemon is None:
            self.conf_dir = tempfile.mkdtemp(prefix='rcost-')
            conf = pathlib.Path(self.conf_dir) / 'linkdelay.conf'
            text, argv = daemon_setup(conf)
            conf.write_text(text)
            self.daemon = subprocess.Popen(
                ['ip', 'netns', 'exec', self.server_ns] + argv, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            if '"ready"' not in self.daemon.stdout.readline():
                raise RuntimeError('the delay daemon did not start (%s)' % LINKDELAY)
            _run(['ip', 'netns', 'exec', self.server_ns, 'iptables-restore', '--noflush', '-w'],
                 rules_text([self.ends[self.server_ns]]))
        elif not on and self.daemon is not None:
            _run(['ip', 'netns', 'exec', self.server_ns, 'iptables-restore', '--noflush', '-w'],
                 unrules_text())
            self.daemon.terminate()
            stats = [json.loads(line) for line in self.daemon.stdout if '"stats"' in line]
            self.daemon.wait(10)
            self.daemon = None
            shutil.rmtree(self.conf_dir, ignore_errors=True)
            return stats[-1] if stats else None
        return None

    def __exit__(self, *exc):
        if self.daemon is not None:
            self.daemon.kill()
            self.daemon.wait(10)
            shutil.rmtree(self.conf_dir, ignore_errors=True)
        for ns in reversed(self.made):
            subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)


def cpu_ns(pid):
    """Nanoseconds pid's threads have run (schedstat's first field)."""
    total = 0
    for path in glob.glob('/proc/%d/task/*/schedstat' % pid):
        with open(path) as f:
            total += int(f.read().split()[0])
    return total


class SyscallCount:
    """perf stat on pid's syscall tracepoints, enabled and disabled on request."""

    def __init__(self, pid, folder):
        self.ctl, self.ack = folder / 'ctl', folder / 'ack'
        self.out = folder / 'perf.csv'
        for fifo in (self.ctl, self.ack):
            os.mkfifo(fifo)
        self.proc = subprocess.Popen(
            ['perf', 'stat', '-x,', '-o', str(self.out), '-D', '-1', '--control',
             'fifo:%s,%s' % (self.ctl, self.ack), '-e', ','.join(EVENTS), '-p', str(pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # O_RDWR: opening a FIFO so never blocks, even if perf failed to start
        self.ctl_fd = os.open(self.ctl, os.O_RDWR)
        self.ack_fd = os.open(self.ack, os.O_RDWR)

    def command(self, word):
        """Send enable/disable and wait for perf's ack (RuntimeError after 10 s)."""
        os.write(self.ctl_fd, word.encode() + b'\n')
        if not select.select([self.ack_fd], [], [], 10)[0]:
            raise RuntimeError('perf stat did not acknowledge %r (see: perf stat -e %s)'
                               % (word, EVENTS[0]))
        os.read(self.ack_fd, 64)

    def counts(self):
        """Stop perf; {event: count}."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(10)
        os.close(self.ctl_fd)
        os.close(self.ack_fd)
        out = {}
        for line in self.out.read_text().splitlines():
            parts = line.split(',')
            if len(parts) > 2 and parts[2] in EVENTS:
                out[parts[2]] = int(parts[0]) if parts[0].isdigit() else None
        return out


def start_server(ns):
    """The real index server in ns, ready; its Popen."""
    proc = subprocess.Popen(
        ['ip', 'netns', 'exec', ns, sys.executable, '-m', 'nodes.dht.server', '--name', 's1',
         '--listen', '%s:%d' % (SERVER_IP, PORT), '--servers', 's1=%s:%d' % (SERVER_IP, PORT)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    line = proc.stdout.readline()
    if '"ready"' not in line:
        proc.kill()
        raise RuntimeError('the index server did not become ready: %r' % line)
    return proc
