#!/usr/bin/python3
"""What the real index server spends per message as a function of the message's size, of
whether it is the first message on its connection, and of how long the server sat idle
before it: the shape of the processing cost the simulator charges (issue 13, Part III).

The fitted ``--sim-cost`` charges a REGISTER a figure per byte, fitted on dht8's Part I,
whose one-client batched register sends eight messages of about 250 names, each the first
message a freshly started server gets. Part III sends one message of 2,000 names to one
server, and the fit overcharges it. This script takes the emulation apart on one point:
the real ``nodes.dht.server`` process (asyncio driver, codec, core), started fresh on
loopback, one TCP connection from this process, and for each message the server's own CPU
time (schedstat of its threads, read once the server is idle again), so the kernel's
loopback, the delay daemons and the bridge are left out. Per size n, per fresh server:

* ``first``: the first REGISTER of n names on a connection to a just-started server;
* ``second``: the next REGISTER of n other names on that connection;
* ``new conn``: a REGISTER of n more names on a second connection (its first message);
* ``idle I ms``: a REGISTER of n more names after the server sat idle I ms;
* ``search``: a SEARCH right after a REGISTER, and one after each idle pause.

Printed: the median over ``--repeat`` fresh servers, in microseconds, and per name from a
least-squares line over the sizes. Nothing is asserted; the load average is printed beside
the figures (compare figures taken together). Traffic goes to 127.0.0.1 only.

    /usr/bin/python3 benchmarks/dht_server_warmth.py [--repeat 5] [--sizes 1,250,500,2000]
        [--idle-ms 1,10,100]
"""

import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from benchmarks.dht_core_cost import names                     # noqa: E402
from benchmarks.dht_read_bench import cpu_ns                    # noqa: E402
from nodes.dht import codec                                     # noqa: E402
from repronet.usage import UsageParser  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
ADDR = '10.0.0.1:8000'
SETTLE_S = 0.003            # after the reply, before reading the server's CPU: it is idle


def start_server():
    """A fresh index server on 127.0.0.1 (any port), ready; (Popen, port)."""
    proc = subprocess.Popen(
        [sys.executable, '-m', 'nodes.dht.server', '--name', 's1', '--listen', '127.0.0.1:0',
         '--servers', 's1=127.0.0.1:1'], cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    rec = json.loads(proc.stdout.readline() or '{}')
    if rec.get('event') != 'ready':
        proc.kill()
        raise RuntimeError('the index server did not become ready: %r' % rec)
    return proc, int(rec['listen'].rsplit(':', 1)[1])


class Conn:
    """One client connection; request() sends a frame and waits for its one reply."""

    def __init__(self, port):
        self.sock = socket.create_connection(('127.0.0.1', port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = codec.Decoder()
        self.req = 0

    def request(self, kind, *fields):
        self.req += 1
        self.sock.sendall(codec.encode(kind(self.req, *fields)))
        while True:
            got = self.decoder.feed(self.sock.recv(65536))
            if got:
                return got[0]


def charged(pid, fn):
    """Microseconds of pid's CPU while fn() runs (fn waits for the reply), read once idle."""
    before = cpu_ns(pid)
    reply = fn()
    time.sleep(SETTLE_S)
    if not isinstance(reply, (codec.Ack, codec.Found)):  # a refusal would cost less
        raise RuntimeError('the server answered %r' % (reply,))
    return (cpu_ns(pid) - before) / 1e3


def one_server(n, idles, seed):
    """{label: microseconds} for one fresh server and messages of n names."""
    proc, port = start_server()
    batch = iter(range(seed * 100, seed * 100 + 100))
    out = {}
    try:
        time.sleep(0.05)                        # the server is idle, as after dht8's start
        a = Conn(port)
        time.sleep(0.01)
        out['first'] = charged(proc.pid, lambda: a.request(codec.Register, ADDR,
                                                           names(n, next(batch))))
        out['second'] = charged(proc.pid, lambda: a.request(codec.Register, ADDR,
                                                            names(n, next(batch))))
        out['search'] = charged(proc.pid, lambda: a.request(
            codec.Search, names(1, seed * 100)[0]))
        b = Conn(port)
        time.sleep(0.01)
        out['new conn'] = charged(proc.pid, lambda: b.request(codec.Register, ADDR,
                                                              names(n, next(batch))))
        for ms in idles:
            time.sleep(ms / 1e3)
            out['idle %g ms' % ms] = charged(proc.pid, lambda: a.request(
                codec.Register, ADDR, names(n, next(batch))))
            time.sleep(ms / 1e3)
            out['search, idle %g ms' % ms] = charged(proc.pid, lambda: a.request(
                codec.Search, names(1, seed * 100)[0]))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    return out


def slope(xs, ys):
    """(per unit, intercept) of a least-squares line through (xs, ys)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return b, my - b * mx


def _numbers(text, what):
    try:
        values = [float(v) for v in text.split(',') if v.strip()]
    except ValueError:
        values = []
    if not values or any(v < 0 for v in values):
        raise ValueError('%s takes non-negative numbers separated by commas, not %r'
                         % (what, text))
    return values


def main(argv=None):
    p = UsageParser(tool='dht_server_warmth.py', description=__doc__.split('\n')[0])
    p.add_argument('--repeat', type=int, default=5, help='fresh servers per size (median)')
    p.add_argument('--sizes', default='1,250,500,2000', help='names per REGISTER')
    p.add_argument('--idle-ms', default='1,10,100', help='idle pauses before a message')
    args = p.parse_args(argv)
    try:
        sizes = [int(v) for v in _numbers(args.sizes, '--sizes')]
        idles = _numbers(args.idle_ms, '--idle-ms')
    except ValueError as e:
        p.error(str(e))
    if not 1 <= args.repeat <= 100 or len(set(sizes)) < 2 or min(sizes) < 1:
        p.error('--repeat must be 1 to 100 and --sizes at least two different sizes >= 1')
    print('load average %s (before)' % ' '.join('%.2f' % v for v in os.getloadavg()))
    table = {}
    for n in sizes:
        runs = [one_server(n, idles, r) for r in range(args.repeat)]
        table[n] = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
    labels = list(table[sizes[0]])
    print('server CPU per message, us (median of %d fresh servers each):' % args.repeat)
    print('%-20s %s   per name, intercept' % ('', ' '.join('%9s' % ('n=%d' % n)
                                                          for n in sizes)))
    for label in labels:
        ys = [table[n][label] for n in sizes]
        b, a = slope(sizes, ys)
        print('%-20s %s   %6.2f us, %7.1f us' % (label, ' '.join('%9.1f' % y for y in ys),
                                                 b, a))
    print('load average %s (after)' % ' '.join('%.2f' % v for v in os.getloadavg()))
    return 0


if __name__ == '__main__':
    sys.exit(main())
