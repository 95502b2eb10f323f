#!/usr/bin/python3
"""DHT file-sharing index (seed 000): register, search and download on 8 index servers.

Topology: ``--servers`` index-server hosts s1..sN and ``--peers`` peer hosts p1..pM on one
switch, every link ``--bw`` Mbit/s with ``--delay`` one way (a LAN: defaults 100 Mbit/s and
0.05 ms, so about 0.2 ms RTT host to host). Index servers (``nodes.dht.server``) listen on
port 7000, peer file servers (``nodes.dht.peer``) on 8000; clients (``nodes.dht.client``)
run on the peer hosts. Files come from ``workloads.dht_files`` (kept in ``--workdir``,
outside the results folder, and reused across runs; recorded in the manifest).

Every point starts fresh index servers (an empty index), so points do not depend on each
other's order; a search or download point first registers the files it needs (batched,
untimed), then releases all of its clients at once through the runner's barrier, so the
timed part excludes process start and connection setup. Points:

* Part I: register (batched; batched with ``--replicas``; unbatched) for 1, 2, 4, ...
  ``--peers`` concurrent peers, ``--files`` files each; search the same number of names
  (each client those of the next peer); download them (sizes 1 KB-5 MB, ~4 KB average).
* ping checks (seed): 100 searches from one client to 4 servers; one 1 MB transfer.
* Part II: every ``--peers`` peer downloads one set of equal-sized files from the next
  peer (``--part2-sets`` of A 10K x 1 KB ... F 1 x 1 GB, counts divided by
  ``--part2-divisor``), and the largest set once with a single peer (link-bound goodput).
* Part III: centralized index (1 server) for register and search, against Part I's
  decentralized rows.
* capture: batched and unbatched register with a scapy capture (``workloads.capture``) on
  every server's interface, to count messages on the wire (K per peer against N).
* failover: searches with replication while one index server is SIGKILLed mid-run.

After the run the analysis (``analysis.dht8``) writes tables, figures and report.md, and
this script prints the seed targets with measured values and ratios.

    sudo /usr/bin/python3 topologies/dht8.py                 # default scale, minutes
    sudo /usr/bin/python3 topologies/dht8.py --scale smoke   # well under a minute
    sudo /usr/bin/python3 topologies/dht8.py --scale seed    # the seed's sizes
"""

import os
import shutil
import signal
import sys
import time

if __package__ in (None, ''):       # run as a script: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))

from mininet.topo import Topo  # noqa: E402

from repronet.emu.process import LogReady  # noqa: E402
from repronet.run.runner import Experiment  # noqa: E402
from repronet.run import sweep  # noqa: E402
from workloads import dht_files  # noqa: E402

INDEX_PORT = 7000
PEER_PORT = 8000
PARTS = ('I', 'ping', 'II', 'III', 'capture', 'failover')
PING_SEARCHES = 100
PING_SERVERS = 4
FAILOVER_AT = 0.4        # kill at this fraction of the expected search time


class Dht8Topo(Topo):
    """Index servers s1..sN and peers p1..pM on one switch, all links alike."""

    def build(self, servers=8, peers=8, bw=100.0, delay='0.05ms'):
        """Add the hosts, the switch and one link per host."""
        switch = self.addSwitch('sw1')
        link = {'bw': bw} if bw else {}
        if delay and delay.strip() not in ('0', '0ms', '0us'):
            link['delay'] = delay
        for i in range(1, servers + 1):
            self.addLink(self.addHost('s%d' % i), switch, **link)
        for i in range(1, peers + 1):
            self.addLink(self.addHost('p%d' % i), switch, **link)


def peer_counts(peers):
    """Return 1, 2, 4, ... up to peers (peers itself always last)."""
    counts, n = [], 1
    while n < peers:
        counts.append(n)
        n *= 2
    return counts + [peers]


def _combo(part, op, servers, peers=1, batch=True, replicas=0, fileset='part1'):
    """Return the parameter values of one point (the same keys for every point)."""
    return {'part': part, 'op': op, 'servers': servers, 'peers': peers,
            'batch': batch, 'replicas': replicas, 'fileset': fileset}


def combos(params):
    """Return the point values of one repetition, in run order."""
    s, r = params.servers, params.replicas
    counts = peer_counts(params.peers)
    parts = params.parts.split(',')
    out = []
    if 'I' in parts:
        variants = [(True, 0)] + ([(True, r)] if r else []) + [(False, 0)]
        for batch, replicas in variants:
            out += [_combo('I', 'register', s, n, batch, replicas) for n in counts]
        out += [_combo('I', 'search', s, n) for n in counts]
        out += [_combo('I', 'download', s, n) for n in counts]
    if 'ping' in parts:
        out.append(_combo('ping', 'search', min(PING_SERVERS, s)))
        out.append(_combo('ping', 'download', s, fileset='ping'))
    if 'II' in parts:
        sets = list(params.part2_sets)
        out += [_combo('II', 'download', s, params.peers, fileset='part2' + x)
                for x in sets]
        if params.peers > 1:
            out.append(_combo('II', 'download', s, 1, fileset='part2' + sets[-1]))
    if 'III' in parts:
        for op in ('register', 'search'):
            out += [_combo('III', op, 1, n) for n in counts]
    if 'capture' in parts:
        out += [_combo('capture', 'register', s, params.peers, batch)
                for batch in (True, False)]
    if 'failover' in parts and s > 1:       # a replica must survive the kill
        out.append(_combo('failover', 'search', s, params.peers,
                          replicas=max(r, 1)))
    return out


class Dht8(Experiment):
    """DHT file-sharing index (seed 000): Parts I-III, ping checks, wire capture, failover."""

    name = 'dht8'
    scales = {
        'smoke': {'servers': 4, 'peers': 2, 'files': 100, 'part2_sets': 'ABC',
                  'part2_divisor': 1000, 'repeat': 1},
        'default': {'files': 2000, 'part2_sets': 'ABCDE', 'part2_divisor': 10,
                    'repeat': 2},
        'seed': {'files': 10000, 'part2_sets': 'ABCDEF', 'part2_divisor': 1,
                 'repeat': 3},
        'defaults': {'servers': 8, 'peers': 8, 'replicas': 1, 'window': 1,
                     'bw': 100.0, 'delay': '0.05ms', 'timeout': 5.0,
                     'parts': ','.join(PARTS), 'workdir': '/tmp/repronet-dht8'},
    }

    def add_arguments(self, parser):
        """Add the experiment's flags (defaults per --scale in the help)."""
        a = parser.add_argument
        a('--servers', type=int, metavar='N', default=None,
          help='index servers (default 8; smoke 4)')
        a('--peers', type=int, metavar='M', default=None,
          help='peers; Part I sweeps 1, 2, 4, ... M concurrent (default 8; smoke 2)')
        a('--replicas', type=int, metavar='R', default=None,
          help='extra copies per index entry in the replicated points (default 1)')
        a('--window', type=int, metavar='W', default=None,
          help='requests in flight per client connection (default 1, as the seed)')
        a('--timeout', type=float, metavar='S', default=None,
          help='client wait for a reply before failing over, seconds (default 5)')
        a('--bw', type=float, metavar='MBIT', default=None,
          help='every link\'s rate in Mbit/s (default 100: a LAN)')
        a('--delay', metavar='DELAY', default=None,
          help='every link\'s one-way delay (default 0.05ms: ~0.2 ms RTT; 0 for none)')
        a('--files', type=int, metavar='N', default=None,
          help='Part I files per peer (smoke 100, default 2000, seed 10000)')
        a('--part2-sets', metavar='LETTERS', default=None,
          help='Part II sets among ABCDEF (A 10K x 1 KB, B 7K x 10 KB, C 1K x 100 KB, '
          'D 100 x 10 MB, E 5 x 100 MB, F 1 x 1 GB; smoke ABC, default ABCDE, seed ABCDEF)')
        a('--part2-divisor', type=int, metavar='D', default=None,
          help='divide Part II file counts by D (smoke 1000, default 10, seed 1)')
        a('--parts', metavar='LIST', default=None,
          help='comma-separated parts to run among %s (default all)' % ','.join(PARTS))
        a('--workdir', metavar='DIR', default=None,
          help='where file sets are generated and reused, outside the results '
          'folder (default /tmp/repronet-dht8)')

    def topology(self, params):
        """Check the parameters and return the topology."""
        _check(params)
        return Dht8Topo(params.servers, max(params.peers, 2), params.bw, params.delay)

    def points(self, params):
        """Return every point: combos() x --repeat, repetition outermost."""
        values = combos(params)
        points = []
        for repetition in range(params.repeat):
            for v in values:
                point = dict(v, point=len(points), repetition=repetition,
                             seed=sweep.derive_seed(params.seed, v, repetition))
                points.append(point)
        return points

    def setup(self, ctx):
        """Prepare per-run state (file sets are made lazily, per point)."""
        self.run_dir = ctx.results.path
        ctx.results.update(hosts={h.name: h.IP() for h in ctx.net.hosts})
        self.sets = {}
        self.search_elapsed = {}
        self.failures = []

    def run_point(self, ctx, point):
        """Run one point; return what the analysis needs to find its logs."""
        return _Point(self, ctx, point).run()

    def finish(self, ctx):
        """Fail the run (after all points ran) if any operation failed."""
        if self.failures:
            raise RuntimeError('operations failed in %d point(s): %s' % (
                len(self.failures), '; '.join(self.failures[:5])))

    def fileset(self, ctx, key):
        """Return the FileSet for a point's fileset key, generating it once."""
        if key not in self.sets:
            p = ctx.params
            if key == 'part1':
                spec = dht_files.FileSetSpec('part1', p.files, 'part1', p.seed)
            elif key == 'ping':
                spec = dht_files.FileSetSpec('ping', 1, dht_files.MB, p.seed)
            else:
                spec = dht_files.part2_spec(key[-1], p.seed, p.part2_divisor)
            started = time.monotonic()
            self.sets[key] = dht_files.generate(spec, p.workdir)
            print('dht8: file set %s ready in %.1f s (%d files, %.1f MB) under %s'
                  % (spec.set_id, time.monotonic() - started, spec.count,
                     self.sets[key].total_bytes / 1e6, p.workdir), flush=True)
            ctx.results.update(filesets={k: dht_files.describe(v)
                                         for k, v in sorted(self.sets.items())})
        return self.sets[key]

    def analyse(self, run_dir):
        """Build tables, figures and report.md (analysis.dht8)."""
        from analysis import dht8
        dht8.build(run_dir)

    def main(self, argv=None):
        """Run, then print the targets (measured vs seed) from the analysis."""
        self.run_dir = None
        status = super().main(argv)
        if self.run_dir is None:
            return status
        from analysis import dht8 as analysis
        try:
            if status != 0 and not (self.run_dir / 'tables' / 'targets.csv').exists():
                analysis.build(self.run_dir)    # a failed run still gets its tables
            print(analysis.targets_text(self.run_dir), flush=True)
        except (OSError, ValueError, KeyError) as e:
            print('dht8: no target summary: %s' % e, file=sys.stderr)
        return status


def node_names(point):
    """Return {'clients', 'servers', 'captures', 'sources'} of a point (log names)."""
    tag = 'p%03d' % point['point']
    n = point['peers']
    clients = ['p%d' % i for i in range(1, n + 1)]
    if point['op'] == 'register':
        sources = {c: c for c in clients}
    else:
        m = max(n, 2)
        sources = {c: 'p%d' % (i % m + 1) for i, c in enumerate(clients, 1)}
    servers = ['s%d' % i for i in range(1, point['servers'] + 1)]
    return {'clients': {c: '%s-client-%s' % (tag, c) for c in clients},
            'servers': {s: '%s-server-%s' % (tag, s) for s in servers},
            'captures': {s: '%s-capture-%s' % (tag, s) for s in servers}
            if point['part'] == 'capture' else {},
            'sources': sources}


def _check(params):
    """Reject parameters the experiment cannot run, with one clear sentence."""
    if params.servers < 1 or params.peers < 1:
        raise SystemExit('dht8: --servers and --peers must be at least 1')
    if params.replicas < 0 or params.replicas >= params.servers:
        raise SystemExit('dht8: --replicas %d needs at least %d servers (--replicas 0..%d '
                         'with --servers %d)' % (params.replicas, params.replicas + 1,
                                                 params.servers - 1, params.servers))
    if params.files < 1 or params.part2_divisor < 1 or params.window < 1:
        raise SystemExit('dht8: --files, --part2-divisor and --window must be >= 1')
    bad = set(params.part2_sets) - set(dht_files.PART2_SETS)
    if bad or not params.part2_sets:
        raise SystemExit('dht8: --part2-sets takes letters among ABCDEF, not %r'
                         % params.part2_sets)
    params.part2_sets = ''.join(sorted(set(params.part2_sets)))
    unknown = set(params.parts.split(',')) - set(PARTS)
    if unknown:
        raise SystemExit('dht8: unknown --parts %s (choose among %s)'
                         % (','.join(sorted(unknown)), ','.join(PARTS)))


class _Point:
    """One point's nodes and steps (kept apart from the Experiment for clarity)."""

    def __init__(self, exp, ctx, point):
        self.exp, self.ctx, self.point = exp, ctx, point
        self.params = ctx.params
        self.tag = 'p%03d' % point['point']
        self.op = point['op']
        self.fileset = exp.fileset(ctx, point['fileset'])
        names = node_names(point)
        self.clients = list(names['clients'])
        self.source = names['sources']
        self.servers = list(names['servers'])
        self.server_arg = ','.join('%s=%s:%d' % (s, ctx.host(s).IP(), INDEX_PORT)
                                   for s in self.servers)
        self.nodes = []

    def start_all(self, specs, ready=True):
        """Start [(host, name, argv)] at once, then wait until each is ready."""
        nodes = [self.ctx.start_node(h, name, argv, wait=False,
                                     ready=LogReady() if ready else None)
                 for h, name, argv in specs]
        self.nodes += nodes
        for node in nodes:
            node.wait_ready(60)
        return nodes

    def client_argv(self, peer, op, batch, barrier, names=None, downloads=None):
        """Return a client's command line."""
        argv = [sys.executable, '-m', 'nodes.dht.client', '--name', '%s-%s-%s' % (
            self.tag, op, peer), '--servers', self.server_arg, '--replicas',
            self.point['replicas'], '--op', op, '--batch' if batch else '--no-batch',
            '--window', self.params.window, '--timeout', self.params.timeout]
        if op == 'register':
            share = dht_files.peer_share(self.fileset, peer, self.params.workdir)
            argv += ['--share', share, '--advertise', '%s:%d' % (
                self.ctx.host(peer).IP(), PEER_PORT)]
        if names is not None:
            argv += ['--names', names]
        if downloads is not None:
            argv += ['--downloads', downloads]
        if barrier:
            argv.append('--barrier')
        return argv

    def names_file(self, client):
        """Return the names file of what client searches/downloads."""
        source = self.source[client]
        names = [n for n, _, _ in dht_files.peer_files(self.fileset, source)]
        if self.point['part'] == 'ping' and self.op == 'search':
            names = names[:PING_SEARCHES]
        path = os.path.join(self.params.workdir, 'names', self.fileset.spec.set_id)
        os.makedirs(path, exist_ok=True)
        return dht_files.write_names(os.path.join(path, '%s-%d.txt' % (
            source, len(names))), names)

    def run(self):
        """Servers, setup, peers, captures, clients; then stop and check."""
        try:
            return self._run()
        finally:
            self.ctx.stop_nodes([n for n in self.nodes if n.returncode is None])

    def _run(self):
        """The steps of run(); nodes are stopped by run()."""
        ctx, point = self.ctx, self.point
        servers = self.start_all([(s, '%s-server-%s' % (self.tag, s), [
            sys.executable, '-m', 'nodes.dht.server', '--name', s, '--listen',
            '%s:%d' % (ctx.host(s).IP(), INDEX_PORT), '--servers', self.server_arg,
            '--replicas', point['replicas']]) for s in self.servers])
        sources = sorted(set(self.source.values()))
        if self.op != 'register':
            self._setup_register(sources)
        if self.op == 'download':
            self.start_all([(p, '%s-peer-%s' % (self.tag, p), [
                sys.executable, '-m', 'nodes.dht.peer', '--name', p, '--listen',
                '%s:%d' % (ctx.host(p).IP(), PEER_PORT), '--share',
                dht_files.peer_share(self.fileset, p, self.params.workdir)])
                for p in sources])
        captures = []
        if point['part'] == 'capture':
            captures = self.start_all([(s, '%s-capture-%s' % (self.tag, s), [
                sys.executable, '-m', 'workloads.capture', '--name', s, '--iface',
                ctx.host(s).defaultIntf().name, '--port', INDEX_PORT])
                for s in self.servers])
        downloads = {}
        specs = []
        for c in self.clients:
            names = downloads_dir = None
            if self.op != 'register':
                names = self.names_file(c)
            if self.op == 'download':
                downloads_dir = downloads[c] = os.path.join(
                    self.params.workdir, 'downloads', '%s-%s' % (self.tag, c))
                shutil.rmtree(downloads_dir, ignore_errors=True)
                os.makedirs(downloads_dir)
            specs.append((c, '%s-client-%s' % (self.tag, c), self.client_argv(
                c, self.op, point['batch'], True, names, downloads_dir)))
        clients = [ctx.start_node(h, name, argv, barrier=True, ready=LogReady())
                   for h, name, argv in specs]
        self.nodes += clients
        ctx.release(clients, timeout=120)
        released = time.time()
        kill = None
        if point['part'] == 'failover':
            kill = self._kill_one(servers, released)
        limit = 120 + self._expected_seconds() * 20
        for node in clients:
            node.wait(timeout=max(limit - (time.time() - released), 1))
        finished = time.time()
        for node in captures:
            node.stop(grace=60)
        # Node names follow from the point (see node_names); the result keeps the rest.
        result = {'released': round(released, 6), 'finished': round(finished, 6)}
        failed = [n.name for n in clients if n.returncode != 0]
        if failed:
            result['failed_clients'] = failed
        if kill:
            result['kill'] = kill
        if self.op == 'download':
            result['downloads'] = self._check_downloads(downloads)
        if self.op == 'search' and point['part'] == 'I':
            self.exp.search_elapsed[point['peers']] = finished - released
        if failed or result.get('downloads', 'ok') != 'ok':
            self.exp.failures.append('%s (%s %s): %s' % (
                self.tag, point['part'], self.op, failed or result['downloads']))
        return result

    def _setup_register(self, sources):
        """Register the source peers' files (batched, untimed) and wait for it."""
        specs = [(p, '%s-setup-%s' % (self.tag, p), self.client_argv(
            p, 'register', True, False)) for p in sources]
        nodes = self.start_all(specs, ready=False)
        for node in nodes:
            if node.wait(timeout=600) != 0:
                raise RuntimeError('setup registration %s failed; see %s'
                                   % (node.name, node.err_path))

    def _expected_seconds(self):
        """Return a generous guess of the timed part's length (for timeouts)."""
        files = len(self.fileset.files)
        return files * 0.005 + self.fileset.total_bytes / 1e6

    def _kill_one(self, servers, released):
        """SIGKILL the last index server mid-run; return when and whom."""
        victim = servers[-1]
        guess = self.exp.search_elapsed.get(self.point['peers'])
        if guess is None:
            guess = len(self.fileset.files) * 0.0005
        time.sleep(max(FAILOVER_AT * guess - (time.time() - released), 0.02))
        killed = time.time()
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        return {'server': victim.name, 't': round(killed, 6),
                'after_release': round(killed - released, 6)}

    def _check_downloads(self, downloads):
        """Check that every expected file arrived with its size; remove them."""
        problems = []
        for client, path in downloads.items():
            want = {n: size for n, size, _ in dht_files.peer_files(
                self.fileset, self.source[client])}
            got = {e.name: e.stat().st_size for e in os.scandir(path)
                   if not e.name.startswith('.')}
            if got != want:
                missing = len(set(want) - set(got))
                wrong = sum(1 for n in got if n in want and got[n] != want[n])
                problems.append('%s: %d missing, %d wrong size' % (client, missing, wrong))
            shutil.rmtree(path, ignore_errors=True)
        return '; '.join(problems) or 'ok'


if __name__ == '__main__':
    sys.exit(Dht8().main())
