#!/usr/bin/python3
"""How far the simulation backend scales with the DHT: events per second, and a DHT of
1,000 index servers and 10,000 peers doing the Part I operations (issue 13).

It prints measured figures; nothing is asserted. Everything runs in this one process on
``repronet.sim`` with the real node programs (``nodes.dht.server``, ``client``, ``peer``
through their ``simulate()``) on one switch, links as dht8's (100 Mbit/s, 0.05 ms):

* ``--servers`` index servers start, then every one of ``--peers`` peers registers its
  ``--files`` files (batched), ``--wave`` clients at a time; then every peer searches the
  next peer's names; then one peer in ``--download-every`` downloads the next peer's files
  from that peer's file server (file servers start only for those). Clients connect to an
  index server when they first need it (``--connect lazy``): a client of 1,000 servers talks
  to a few of them, and holding 10 million idle connections is not the question here.
* ``--grow`` repeats register and search with ``--grow-peers`` peers over 1, 10, 100 and
  1,000 servers: time per search and messages per operation against the number of servers.

An event is one callback the engine runs (``Engine.events``): a train entering the next
port of its path or reaching its end, a timer, a charged callback; a cancelled event is not
counted, nor is anything a callback does inside it (one event may decode a frame, run a core
and log a line). Events per second are over the phase's wall time, which includes starting
its clients (their flags, files and names), and over this process's CPU time, which another
program on the machine does not inflate.

Printed: wall time, peak memory (ru_maxrss), events and events per second of the engine,
virtual seconds and the speed-up over real time, and per operation the mean time per
operation and messages per operation from the clients' own summaries; the load average
(``uptime``) before and after, since another program on the machine slows the wall clock.

``--interpreters python3,pypy3`` runs the whole benchmark once under each, one process
after the other (PyPy's JIT, ``repronet.run.sim_interpreter``), and ends with a table of
events per wall and per CPU second of the engine alone and of the (last) search phase;
``--search-rounds N`` searches N times in a row, since the JIT compiles as it goes (the
table gives the first round, cold, and the last, warm).

    /usr/bin/python3 benchmarks/sim_scale.py                      # 1,000 x 10,000
    /usr/bin/python3 benchmarks/sim_scale.py --servers 8 --peers 8 --files 2000   # dht8-like
    /usr/bin/python3 benchmarks/sim_scale.py --servers 8 --peers 8 --interpreters python3,pypy3
"""

import argparse
import json
import os
import pathlib
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mininet.topo import Topo  # noqa: E402

from repronet.run import sim_interpreter  # noqa: E402
from repronet.sim.backend import SimBackend  # noqa: E402
from repronet.usage import UsageParser  # noqa: E402
from workloads import dht_files  # noqa: E402

INDEX_PORT, PEER_PORT = 7000, 8000
FIGURES = {}        # phase -> events per wall and per CPU second (for --interpreters)


def topology(servers, peers):
    """Index servers s1..sN and peers p1..pM on one switch, dht8's links."""
    topo = Topo()
    sw = topo.addSwitch('sw1')
    for name in ['s%d' % i for i in range(1, servers + 1)] + \
            ['p%d' % i for i in range(1, peers + 1)]:
        topo.addLink(topo.addHost(name), sw, bw=100, delay='0.05ms')
    return topo


class Bench:
    """One simulated DHT: servers up, then waves of clients, with the figures they logged."""

    def __init__(self, servers, peers, files, workdir, seed=1):
        self.servers, self.peers, self.workdir = servers, peers, pathlib.Path(workdir)
        self.logs = self.workdir / 'logs'
        self.logs.mkdir(parents=True, exist_ok=True)
        self.sim = SimBackend(topology(servers, peers), seed, self.logs)
        self.fileset = dht_files.generate(dht_files.FileSetSpec(
            'bench', files, 'part1', seed), str(self.workdir))
        self.server_arg = ','.join('s%d=%s:%d' % (i, self.sim.hosts['s%d' % i].IP(),
                                                  INDEX_PORT)
                                   for i in range(1, servers + 1))
        self.count = 0

    def start(self, host, name, module, *flags):
        """Start a node program through its simulate(); return the node."""
        argv = [sys.executable, '-m', module] + [str(f) for f in flags]
        return self.sim.start_node(self.sim.hosts[host], name, argv)

    def start_servers(self):
        nodes = [self.start('s%d' % i, 'server-s%d' % i, 'nodes.dht.server', '--name',
                            's%d' % i, '--listen', '%s:%d' % (
                                self.sim.hosts['s%d' % i].IP(), INDEX_PORT),
                            '--servers', self.server_arg, '--max-entries', 10 ** 7)
                 for i in range(1, self.servers + 1)]
        self.sim.run_until(lambda: all(n.is_ready for n in nodes), 60)
        return nodes

    def wave(self, op, peers, wave):
        """Run op for each peer, wave clients at a time; return their summaries."""
        summaries = []
        for first in range(0, len(peers), wave):
            nodes = [self._client(op, p) for p in peers[first:first + wave]]
            self.sim.run_until(_all_ended(nodes), 3600, on_exit=True)
            for node in nodes:
                if node.returncode != 0:
                    raise RuntimeError('%s ended with %s; see %s' % (
                        node.name, node.returncode, node.err_path))
                summaries.append(_summary(node.log_path))
                node.log_path.unlink()
                node.err_path.unlink()
        return summaries

    def _client(self, op, peer):
        self.count += 1
        i = int(peer[1:])
        source = 'p%d' % (i % self.peers + 1) if op != 'register' else peer
        flags = ['--name', '%s-%s' % (op, peer), '--servers', self.server_arg, '--op', op,
                 '--connect', 'lazy', '--timeout', 30]
        if op == 'register':
            flags += ['--share', dht_files.peer_share(self.fileset, peer, str(self.workdir)),
                      '--advertise', '%s:%d' % (self.sim.hosts[peer].IP(), PEER_PORT)]
        else:
            names = self.workdir / 'names' / ('%s.txt' % peer)
            names.parent.mkdir(exist_ok=True)
            dht_files.write_names(str(names), [n for n, _, _ in dht_files.peer_files(
                self.fileset, source)])
            flags += ['--names', names]
        if op == 'download':
            flags += ['--downloads', self.workdir / 'downloads' / peer]
        return self.start(peer, 'c%d-%s-%s' % (self.count, op, peer), 'nodes.dht.client',
                          *flags)

    def start_peers(self, peers):
        nodes = [self.start(p, 'peer-%s' % p, 'nodes.dht.peer', '--name', p, '--listen',
                            '%s:%d' % (self.sim.hosts[p].IP(), PEER_PORT), '--share',
                            dht_files.peer_share(self.fileset, p, str(self.workdir)))
                 for p in peers]
        self.sim.run_until(lambda: all(n.is_ready for n in nodes), 60)
        return nodes


def _all_ended(nodes):
    """A stop condition, true once every node has ended. It remembers how many have ended
    in order (all() from the start each time made the benchmark's own check a few per
    cent of its time), and wave() has it asked only after an event in which a node ended
    (``run_until``'s on_exit): asked after every event, it was still 3 % of a search."""
    done = [0]

    def ended():
        i = done[0]
        while i < len(nodes) and nodes[i].returncode is not None:
            i += 1
        done[0] = i
        return i == len(nodes)
    return ended


def _summary(path):
    """The summary record of a client's log. Only lines that can be it are parsed: the
    phase's timing includes this, and it is not the simulation's work."""
    with open(path) as f:
        for line in f:
            if '"summary"' in line:
                rec = json.loads(line)
                if rec.get('event') == 'summary':
                    return rec
    raise RuntimeError('%s has no summary' % path)


def per_op(summaries):
    """(mean ms per operation, messages per operation, operations, failed)."""
    count = sum(s['count'] for s in summaries)
    ms = [1000 * s['elapsed'] / s['ok'] for s in summaries if s['ok']]
    messages = sum(s.get('messages_sent', 0) for s in summaries)
    return (sum(ms) / len(ms) if ms else float('nan'), messages / count if count else 0.0,
            count, sum(s['failed'] for s in summaries))


def part_one(args, workdir):
    """Register, search, download at --servers x --peers; print the figures."""
    wall0, cpu0 = time.monotonic(), time.process_time()
    bench = Bench(args.servers, args.peers, args.files, workdir, args.seed)
    made = time.monotonic() - wall0
    print('%d index servers, %d peers, %d files each; file set and topology made in %.1f s'
          % (args.servers, args.peers, args.files, made), flush=True)
    servers = bench.start_servers()
    peers = ['p%d' % i for i in range(1, args.peers + 1)]
    steps = [('register', peers)] + [('search', peers)] * args.search_rounds + [
             ('download', peers[::args.download_every])]
    for op, who in steps:
        if op == 'download':
            bench.start_peers(sorted({'p%d' % (int(p[1:]) % args.peers + 1) for p in who},
                                     key=lambda p: int(p[1:])))
        e0, v0 = bench.sim.engine.events, bench.sim.engine.now
        w0, c0 = time.monotonic(), time.process_time()
        ms, msgs, count, failed = per_op(bench.wave(op, who, args.wave))
        wall, cpu = time.monotonic() - w0, time.process_time() - c0
        events = bench.sim.engine.events - e0
        FIGURES[op] = {'wall': events / wall if wall else 0, 'cpu': events / cpu if cpu else 0}
        FIGURES.setdefault(op + ' first', FIGURES[op])     # cold: before the JIT warmed up
        print('  %-8s %7d clients %9d ops (%d failed): %.4f ms/op, %.3f messages/op; '
              '%.1f s wall (%.1f s CPU), %.2f s virtual, %d events, %.0f events/s '
              '(%.0f per CPU second)' % (
                  op, len(who), count, failed, ms, msgs, wall, cpu, bench.sim.engine.now - v0,
                  events, events / wall if wall else 0, events / cpu if cpu else 0),
              flush=True)
    for node in servers:
        node.stop()
    wall = time.monotonic() - wall0
    cpu = time.process_time() - cpu0
    print('total: %.1f s wall (%.1f s CPU), %.2f s virtual (speed-up over real time %.3g), '
          '%d events, %.0f events/s (%.0f per CPU second), peak memory %.0f MB' % (
              wall, cpu, bench.sim.engine.now, bench.sim.engine.now / wall,
              bench.sim.engine.events, bench.sim.engine.events / wall,
              bench.sim.engine.events / cpu if cpu else 0, peak_mb()), flush=True)
    FIGURES['total'] = {'wall': wall, 'cpu': cpu, 'peak_mb': peak_mb()}


def grow(args, workdir):
    """Search time and messages per operation over 1..1,000 servers."""
    print('growth with the number of index servers (%d peers, %d files each):'
          % (args.grow_peers, args.files), flush=True)
    for n in (1, 10, 100, 1000):
        sub = pathlib.Path(workdir) / ('grow-%d' % n)
        bench = Bench(n, args.grow_peers, args.files, sub, args.seed)
        servers = bench.start_servers()
        peers = ['p%d' % i for i in range(1, args.grow_peers + 1)]
        w0 = time.monotonic()
        line = []
        for op in ('register', 'search'):
            ms, msgs, _, failed = per_op(bench.wave(op, peers, args.wave))
            line.append('%s %.4f ms/op %.3f msg/op%s' % (op, ms, msgs,
                                                         ' (%d failed)' % failed
                                                         if failed else ''))
        for node in servers:
            node.stop()
        print('  %4d servers: %s; %.1f s wall' % (n, '; '.join(line),
                                                  time.monotonic() - w0), flush=True)


def engine_rate(datagrams=100000):
    """Events per second of the engine and the network model alone: two hosts bounce a
    64-byte datagram back and forth (no protocol core, no log)."""
    sim = SimBackend(topology(1, 1), 1)
    a, b = sim.stacks['s1'], sim.stacks['p1']
    left = [datagrams]

    def bounce(stack, other):
        def received(data, src):
            left[0] -= 1
            if left[0] > 0:
                stack.sendto(data, (other.ip, 9), 9)
        return received
    a.bind_udp(9, bounce(a, b))
    b.bind_udp(9, bounce(b, a))
    w0, c0 = time.monotonic(), time.process_time()
    a.sendto(b'x' * 64, (b.ip, 9), 9)
    sim.engine.run()
    wall, cpu = time.monotonic() - w0, time.process_time() - c0
    FIGURES['engine'] = {'wall': sim.engine.events / wall, 'cpu': sim.engine.events / cpu}
    print('engine and network alone: %d datagrams, %d events in %.2f s (%.2f s CPU): %.0f '
          'events/s (%.0f per CPU second)' % (datagrams, sim.engine.events, wall, cpu,
                                               sim.engine.events / wall,
                                               sim.engine.events / cpu), flush=True)


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load():
    """The load averages, as uptime prints them."""
    with open('/proc/loadavg') as f:
        return 'load average: %s' % ', '.join(f.read().split()[:3])


def interpreter():
    return '%s %s (Python %s)' % (platform.python_implementation(), sys.executable,
                                  platform.python_version())


def each_interpreter(names, argv):
    """Run this benchmark (argv without --interpreters) under each interpreter in turn;
    print a table of the events per second each reached."""
    table = []
    for name in names:
        exe = sys.executable if name == 'python3' and platform.python_implementation() == \
            'CPython' else shutil.which(name)
        with tempfile.NamedTemporaryFile(suffix='.json') as out:
            print('== %s' % name, flush=True)
            code = subprocess.call([exe, __file__, '--figures', out.name] + argv,
                                   env=sim_interpreter.child_env())
            if code != 0:
                print('%s: the benchmark under %s ended with %d' % (__file__, name, code),
                      file=sys.stderr)
                return code
            table.append((name, json.load(open(out.name))))
    print('events per second (wall / CPU), %s:' % load())
    for name, f in table:
        print('  %-8s engine alone %8.0f / %8.0f   search phase: first %8.0f / %8.0f, last '
              '%8.0f / %8.0f   total %.1f s wall, peak %.0f MB' % (
                  name, f['engine']['wall'], f['engine']['cpu'], f['search first']['wall'],
                  f['search first']['cpu'], f['search']['wall'], f['search']['cpu'],
                  f['total']['wall'], f['total']['peak_mb']))
    return 0


def main(argv=None):
    p = UsageParser(tool='sim_scale.py', prog='benchmarks/sim_scale.py',
                    description=__doc__.split('\n')[0])
    p.add_argument('--servers', type=int, default=1000)
    p.add_argument('--peers', type=int, default=10000)
    p.add_argument('--files', type=int, default=10, help='files per peer (default 10)')
    p.add_argument('--wave', type=int, default=500, help='clients at once (default 500)')
    p.add_argument('--download-every', type=int, default=10,
                   help='one peer in N downloads (default 10)')
    p.add_argument('--grow', action='store_true', help='also: 1, 10, 100, 1000 servers')
    p.add_argument('--grow-peers', type=int, default=100)
    p.add_argument('--search-rounds', type=int, default=1,
                   help='search phases in a row (default 1); under PyPy the later ones show '
                   'the rate once the JIT has compiled the paths (the table takes the last)')
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--workdir', default=None, help='scratch folder (default: a temporary '
                   'one, removed at the end)')
    p.add_argument('--interpreters', default=None, metavar='python3,pypy3',
                   help='run the benchmark under each of these in turn and compare them')
    p.add_argument('--figures', default=None, help=argparse.SUPPRESS)   # child's results
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(argv)
    for name in ('servers', 'peers', 'files', 'wave', 'download_every', 'grow_peers',
                 'search_rounds'):
        if getattr(args, name) < 1:
            p.error('--%s must be at least 1' % name.replace('_', '-'))
    if args.servers + args.peers > 60000:
        p.error('--servers + --peers must be at most 60,000 (one address per host)')
    if args.interpreters is not None:
        names = args.interpreters.split(',')
        bad = [n for n in names if n not in ('python3', 'pypy3') or not (
            n == 'python3' or shutil.which(n))]
        if bad:
            p.error('--interpreters lists python3 and pypy3 (installed); not %s'
                    % ','.join(bad))
        rest = [a for i, a in enumerate(argv) if a != '--interpreters' and not (
            i and argv[i - 1] == '--interpreters') and not a.startswith('--interpreters=')]
        return each_interpreter(names, rest)
    print('%s; %s' % (interpreter(), load()), flush=True)
    workdir = args.workdir or tempfile.mkdtemp(prefix='repronet-simscale-')
    try:
        engine_rate()
        part_one(args, workdir)
        if args.grow:
            grow(args, workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print('after: %s' % load(), flush=True)
    if args.figures:
        with open(args.figures, 'w') as f:
            json.dump(FIGURES, f)
    return 0


if __name__ == '__main__':
    sys.exit(main())
