#!/usr/bin/python3
"""What the real index server spends per read() and per name of a REGISTER: the test of the
per-read hypothesis of issue 13 on the real process, not on the simulator's model.

Why: the simulator charges a callback and a byte (``--sim-cost``) and delivers a 42 KB
REGISTER as one callback (one 64 KiB train), but the emulated index server paid less per
name for Part III's one 2,000-name message than the fit on Part I's 250-name ones, and less
again with 2-8 clients. The hypothesis: the real server pays per read(); idle, it wakes and
reads per packet as a shaped link delivers them; busy, it takes many packets per read.

How (the bench itself is ``benchmarks/dht_read_bench.py``): two network namespaces of this
script's own joined by a veth pair, offloads off (as the emulation's hosts had them only with
the userspace datapath; since 2bae442 the emulation caps ``gso_max_size`` on shaped host
interfaces instead, which ``htb1`` approaches). The real ``python -m nodes.dht.server``
(asyncio) runs in one
with a one-server ring (Part III); a client process in the other opens ``--clients``
connections and, per round, sends one REGISTER of n unique names on each at once (threads),
then waits for every Ack. Three ways the bytes arrive:

* ``whole``: one write, no shaping (the frame arrives at once: one or two reads);
* ``htb``: one write through HTB at ``--bw`` Mbit/s both ways, dht8's links (the
  emulation's 0.05 ms holds of its delay daemons are left out): as this machine's kernel
  delivers a shaped flow;
* ``htb1``: ``htb`` with ``gso_max_segs 1`` on both ends. TCP on this kernel builds GSO
  packets of up to 64 KiB even with ``ethtool -K gso off``, segments them only after the
  qdisc, and HTB lets such a packet out whole once its tokens are not negative: ``htb``
  delivers a 42 KB message as one back-to-back burst after an idle spell (tcpdump), and
  ``htb1`` paces every segment at the rate, as a link would;
* ``emu``: ``htb`` plus the emulation's delay daemon (``repronet/emu/linkdelay``, as
  ``linkemu_daemon`` starts it: NFQUEUE at the server's ingress, two holds of 50 us, dht8's
  two links of 0.05 ms): the path an emulated dht8 index server is read through, less the
  bridge;
* ``paced``: one write per 1,448-byte segment, ``--gap`` microseconds apart (TCP_NODELAY),
  no shaping: what a link that delivers packet by packet would give an idle server.

Per condition (arrival x names x clients) a fresh server; after a warm-up round the
server's CPU time is read from ``/proc/PID/task/*/schedstat`` and its ``recvfrom`` and
``epoll_wait`` system calls are counted by ``perf stat`` on the syscall tracepoints (enabled
for the measured rounds only). The same bytes and names arrive in few or many reads, so the
CPU difference over the read difference is the cost of a read: a least-squares line CPU = a
+ r x reads + c x names over all conditions gives r (per read) and c (per name). With
``--dht-share DIR`` the same paths are also timed with dht8's own client program registering
DIR's names in one message (its op latency, as dht8's tables report it; not paced: the
program writes a message at once). Nothing is asserted; load averages are printed. It holds
the machine lock (``/run/repronet.lock``) as every Mininet run does, and SIGTERM or Ctrl-C
removes its namespaces; a SIGKILLed run leaves its two ``rcost<PID>-*`` namespaces with their
server and delay daemon, which ``repronet clean`` (and every run's start) removes once that
PID is gone.

    sudo /usr/bin/python3 benchmarks/dht_read_cost.py [--names 250,2000] [--clients 1,8]
        [--arrivals whole,htb,htb1,emu,paced] [--messages 30] [--bw 100] [--gap 200] [--repeat 2]
        [--dht-share /tmp/repronet-dht8/peers/part1-n2000-part1-s1-v1/p1]
"""

import argparse
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.dht_read_bench import (EVENTS, GSO_MAX_SEGS, LINKDELAY, PORT,  # noqa: E402
                                       SERVER_IP, Pair, SyscallCount, cpu_ns, start_server)
from nodes.dht import codec                                     # noqa: E402
from repronet.run import leftovers                              # noqa: E402
from repronet.run.signals import Interrupted, SignalGuard       # noqa: E402
from repronet.usage import UsageParser  # noqa: E402

HOLDER = '10.0.0.9:8000'
ARRIVALS = ('whole', 'htb', 'htb1', 'emu', 'paced')
MSS = 1448


def condition(pair, arrival, names, clients, args):
    """One fresh server and one client run; the measured figures per message."""
    messages = args.messages
    pair.shape(args.bw if arrival in ('htb', 'htb1', 'emu') else None,
               1 if arrival == 'htb1' else GSO_MAX_SEGS)
    pair.hold(False)
    pair.hold(arrival == 'emu')
    server = start_server(pair.server_ns)
    folder = pathlib.Path(tempfile.mkdtemp(prefix='rcost-'))
    perf = client = None
    try:
        perf = SyscallCount(server.pid, folder)
        client = subprocess.Popen(
            ['ip', 'netns', 'exec', pair.client_ns, sys.executable, __file__, '--role',
             'client', '--names', str(names), '--clients', str(clients), '--messages',
             str(messages), '--gap', str(args.gap if arrival == 'paced' else 0)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if client.stdout.readline().strip() != 'warm':
            raise RuntimeError('the client did not finish its warm-up round')
        perf.command('enable')
        before = cpu_ns(server.pid)
        client.stdin.write('go\n')
        client.stdin.flush()
        result = json.loads(client.stdout.readline())
        after = cpu_ns(server.pid)
        perf.command('disable')
        client.wait(30)
        counts = perf.counts()
    finally:
        for proc in (client, perf and perf.proc):       # still running only on an error
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
        server.send_signal(signal.SIGTERM)
        server.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
    n = clients * messages
    held = pair.hold(False) if arrival == 'emu' else None
    reads = counts.get(EVENTS[0])
    return dict(arrival=arrival, names=names, clients=clients, messages=n,
                bytes=result['frame_bytes'], cpu_ms=(after - before) / 1e6 / n,
                reads=reads / n if reads is not None else float('nan'),
                wakeups=(counts.get(EVENTS[1]) or 0) / n, wall_s=result['seconds'],
                held=held and dict(packets=held['accepted'], late_us=held['late_us_mean']))


def dht_client(pair, arrival, share, args):
    """dht8's own client program (``python -m nodes.dht.client --op register --batch``) sends
    the share's names to a fresh server once; (its op latency, server CPU) in ms."""
    pair.shape(args.bw if arrival in ('htb', 'htb1', 'emu') else None,
               1 if arrival == 'htb1' else GSO_MAX_SEGS)
    pair.hold(False)
    pair.hold(arrival == 'emu')
    server = start_server(pair.server_ns)
    try:
        before = cpu_ns(server.pid)
        done = subprocess.run(
            ['ip', 'netns', 'exec', pair.client_ns, sys.executable, '-m', 'nodes.dht.client',
             '--name', 'rcost', '--servers', 's1=%s:%d' % (SERVER_IP, PORT), '--replicas', '0',
             '--op', 'register', '--batch', '--window', '1', '--timeout', '5', '--share', share,
             '--advertise', HOLDER], cwd=REPO, capture_output=True, text=True, timeout=60,
            env=dict(os.environ, PYTHONPATH=str(REPO)))
        after = cpu_ns(server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)
        pair.hold(False)
    ops = [r for r in map(json.loads, done.stdout.splitlines()) if r.get('event') == 'op']
    if not ops:
        raise RuntimeError('the dht client logged no op: %s' % done.stderr.strip()[-300:])
    return 1e3 * sum(o['latency'] for o in ops) / len(ops), (after - before) / 1e6, \
        sum(o.get('files', 1) for o in ops) / len(ops)


def client_main(args):
    """Client role (inside the client namespace): warm-up round, 'warm', wait for 'go',
    the measured rounds, one JSON line."""
    socks = []
    for _ in range(args.clients):
        s = socket.create_connection((SERVER_IP, PORT))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    frames = [[codec.encode(codec.Register(m + 1, HOLDER, tuple(
        'p%d-m%04d-%06d.bin' % (c % 10, m, i) for i in range(args.names))))
        for c in range(args.clients)] for m in range(args.messages + 1)]
    barrier = threading.Barrier(args.clients)

    def one(c, rounds):
        decoder, sock = codec.Decoder(), socks[c]
        for m in rounds:
            barrier.wait()
            frame = frames[m][c]
            if not args.gap:
                sock.sendall(frame)
            for i in range(0, len(frame) if args.gap else 0, MSS):
                sock.sendall(frame[i:i + MSS])
                time.sleep(args.gap / 1e6)
            got = []
            while not got:
                data = sock.recv(65536)
                if not data:
                    raise RuntimeError('the server closed the connection')
                got = [x for x in decoder.feed(data) if isinstance(x, codec.Ack)]

    def rounds(which):
        threads = [threading.Thread(target=one, args=(c, which)) for c in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    rounds([0])
    print('warm', flush=True)
    sys.stdin.readline()
    t0 = time.monotonic()
    rounds(range(1, args.messages + 1))
    print(json.dumps({'seconds': time.monotonic() - t0, 'frame_bytes': len(frames[1][0])}),
          flush=True)
    return 0


def fit(rows):
    """(a, per read, per name) in ms by least squares over rows."""
    import numpy as np
    x = np.array([[1.0, r['reads'], r['names']] for r in rows])
    y = np.array([r['cpu_ms'] for r in rows])
    return np.linalg.lstsq(x, y, rcond=None)[0]


def _ints(text):
    return [int(v) for v in text.split(',') if v.strip()]


def main(argv=None):
    p = UsageParser(tool='dht_read_cost.py', description=__doc__.split('\n')[0])
    p.add_argument('--names', default='250,2000', help='names per REGISTER (comma list)')
    p.add_argument('--clients', default='1,8', help='connections sending at once (list)')
    p.add_argument('--messages', type=int, default=30, help='measured rounds per condition')
    p.add_argument('--arrivals', default=','.join(ARRIVALS), help='how the bytes arrive '
                   '(comma list of %s)' % ', '.join(ARRIVALS))
    p.add_argument('--bw', type=float, default=100.0, help='htb arrivals: Mbit/s')
    p.add_argument('--gap', type=float, default=200.0, help='paced arrivals: microseconds '
                   'between segments')
    p.add_argument('--repeat', type=int, default=2, help='passes over all conditions')
    p.add_argument('--dht-share', metavar='DIR', help='also time dht8\'s own client '
                   'registering this folder\'s names in one message (e.g. a dht8 workdir\'s '
                   'peers/part1-n2000-part1-s1-v1/p1), --repeat times per arrival')
    p.add_argument('--role', choices=('main', 'client'), default='main', help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        args.names, args.clients = _ints(args.names), _ints(args.clients)
    except ValueError:
        p.error('--names and --clients take comma-separated whole numbers')
    if args.role == 'client':
        args.names, args.clients = args.names[0], args.clients[0]
        return client_main(args)
    if not all(1 <= n <= 20000 for n in args.names) or not all(1 <= c <= 10 for c in args.clients):
        p.error('--names must be 1 to 20000 and --clients 1 to 10 (names are unique per client)')
    if not 1 <= args.messages <= 10000 or not 1 <= args.repeat <= 100 or \
            not 1 <= args.bw <= 10000 or not 0 < args.gap <= 100000:
        p.error('--messages must be 1 to 10000, --repeat 1 to 100, --bw 1 to 10000 and '
                '--gap in (0, 100000] us')
    args.arrivals = [a for a in args.arrivals.split(',') if a]
    if not args.arrivals or set(args.arrivals) - set(ARRIVALS):
        p.error('--arrivals takes a comma list of %s' % ', '.join(ARRIVALS))
    if args.dht_share and not os.path.isdir(args.dht_share):
        p.error('--dht-share %s is not a folder' % args.dht_share)
    if os.geteuid() != 0:
        p.error('run as root: it makes two network namespaces and a shaped veth pair')
    missing = [t for t in ('ip', 'tc', 'ethtool', 'perf', 'iptables-restore')
               if shutil.which(t) is None]
    if missing:
        p.error('needs %s on PATH' % ', '.join(missing))
    if 'emu' in args.arrivals and not os.access(LINKDELAY, os.X_OK):
        p.error('--arrivals emu needs the delay daemon: make -C repronet/emu/linkdelay')
    print('load average %s (before)' % ' '.join('%.2f' % v for v in os.getloadavg()))
    try:
        with SignalGuard(), leftovers.machine_lock():
            rows = measure(args)
    except Interrupted as e:
        print('dht_read_cost: interrupted (%s); namespaces removed' % e, file=sys.stderr)
        return 128 + e.signum
    a, per_read, per_name = fit(rows)
    print('least squares over %d conditions: server CPU per message = %.1f us + %.1f us per '
          'read + %.2f us per name' % (len(rows), a * 1e3, per_read * 1e3, per_name * 1e3))
    print('load average %s (after)' % ' '.join('%.2f' % v for v in os.getloadavg()))
    return 0


def measure(args):
    """Every condition (and the dht client's, with --dht-share) on one bench: the rows."""
    rows = []
    with Pair() as pair:
        for rep in range(args.repeat):
            for arrival in args.arrivals:
                for names in args.names:
                    for clients in args.clients:
                        r = condition(pair, arrival, names, clients, args)
                        rows.append(r)
                        print('pass %d  %-5s %5d names (%6d B) x %d client(s): server CPU %7.3f'
                              ' ms/msg, %5.1f reads/msg, %5.1f epoll_wait/msg, %5.1f ms/round, load %.2f'
                              % (rep + 1, arrival, names,
                                 r['bytes'], clients, r['cpu_ms'], r['reads'], r['wakeups'],
                                 1e3 * r['wall_s'] / args.messages, os.getloadavg()[0]) + (
                                  '; daemon held %(packets)d packets, %(late_us).0f us late '
                                  'on average' % r['held'] if r['held'] else ''), flush=True)
        for arrival in [a for a in args.arrivals if a != 'paced'] if args.dht_share else ():
            for rep in range(args.repeat):
                latency, cpu, names = dht_client(pair, arrival, args.dht_share, args)
                print('dht client  %-5s %5d names in one REGISTER: op latency %6.2f ms, server '
                      'CPU over the run %6.2f ms, load %.2f' % (arrival, names, latency, cpu,
                                                               os.getloadavg()[0]), flush=True)
    return rows


if __name__ == '__main__':
    sys.exit(main())
