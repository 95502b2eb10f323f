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
untimed), then releases all of its clients at once through the runner's barrier; only the
release to the last client's exit is timed (``ctx.timed()``). Points:

* Part I: register (batched; batched with ``--replicas``; unbatched) for 1, 2, 4, ...
  ``--peers`` concurrent peers, ``--files`` files each; search the same number of names
  (each client those of the next peer, in an order drawn from the point's seed);
  download them (sizes 1 KB-5 MB, ~4 KB average).
* ping checks (seed): 100 searches from one client to 4 servers; one 1 MB transfer.
* Part II: every ``--peers`` peer downloads one set of equal-sized files from the next
  peer (``--part2-sets`` of A 10K x 1 KB ... F 1 x 1 GB, counts divided by
  ``--part2-divisor``), and the largest set once with a single peer (link-bound goodput).
* Part III: centralized index (1 server) for register and search, against Part I's
  decentralized rows.
* capture: batched and unbatched register with a scapy capture (``workloads.capture``) on
  every server's interface, to count messages on the wire (K per peer against N).
* failover: searches with replication while one index server fails mid-run, one point per
  ``fault``: ``kill`` (SIGKILL), ``hang`` (SIGSTOP: clients pay ``--timeout``) and ``cut``
  (its link down: clients pay ``--timeout``); the server is drawn from the point's seed.

How one point runs (nodes, names files, the timed part, the fault, the download heartbeat)
is ``workloads.dht8_points``; every random choice in it uses the point's own seed.
Parameters are checked before anything is built (``check``); ``estimate`` and ``disk``
give the expected length of each point and the bytes written under ``--workdir``.

After the run the analysis (``analysis.dht8``) writes tables, figures and report.md, and
this script prints the seed targets with measured values and ratios.

    sudo /usr/bin/python3 topologies/dht8.py                 # default scale, minutes
    sudo /usr/bin/python3 topologies/dht8.py --scale smoke   # well under a minute
    sudo /usr/bin/python3 topologies/dht8.py --scale seed    # the seed's sizes
"""

import functools
import itertools
import os
import shutil
import sys
import time

if __package__ in (None, ''):       # run as a script: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))

from mininet.topo import Topo  # noqa: E402

from repronet.run import memory_folders  # noqa: E402
from repronet.run.options import UsageError  # noqa: E402
from repronet.run.sweep import derive_seed  # noqa: E402
from repronet.run.runner import Experiment  # noqa: E402
from workloads import dht_files, dht8_plan  # noqa: E402
from workloads.dht8_plan import fileset_spec  # noqa: E402
from workloads.dht8_points import FAULTS, Point  # noqa: E402
from workloads.scratch import MEMORY_BASE, default_workdir  # noqa: E402

PARTS = ('I', 'ping', 'II', 'III', 'capture', 'failover')
PING_SERVERS = 4
WORKDIR = default_workdir('dht8')     # a run not as root adds its uid


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


def sweep(params):
    """Return the sweep as data: rows of (part, fixed values, {name: swept values}).

    A row stands for the cross product of its swept values (last name fastest), each
    point taking the row's fixed values over the defaults (all --servers, one peer,
    batched, no replicas, the Part I file set); rows run in this order."""
    s, r, m = params.servers, params.replicas, params.peers
    n = {'peers': peer_counts(m)}
    sets = ['part2' + x for x in params.part2_sets]
    rows = [('I', {'op': 'register'}, n),
            ('I', {'op': 'register', 'replicas': r}, n) if r else None,
            ('I', {'op': 'register', 'batch': False}, n),
            ('I', {'op': 'search'}, n),
            ('I', {'op': 'download'}, n),
            ('ping', {'op': 'search', 'servers': min(PING_SERVERS, s)}, {}),
            ('ping', {'op': 'download', 'fileset': 'ping'}, {}),
            ('II', {'op': 'download', 'peers': m}, {'fileset': sets}),
            ('II', {'op': 'download', 'fileset': sets[-1]}, {}) if m > 1 else None,
            ('III', {'op': 'register', 'servers': 1}, n),
            ('III', {'op': 'search', 'servers': 1}, n),
            ('capture', {'op': 'register', 'peers': m}, {'batch': [True, False]}),
            # a replica must survive the fault, so failover needs two servers
            ('failover', {'op': 'search', 'peers': m, 'replicas': max(r, 1)},
             {'fault': list(FAULTS)}) if s > 1 else None]
    return [row for row in rows if row is not None]


def combos(params):
    """Return the point values of one repetition, in run order (sweep() expanded)."""
    parts = params.parts.split(',')
    sim = getattr(params, 'backend', 'emu') == 'sim'
    out = []
    for part, fixed, swept in sweep(params):
        if part not in parts or part == 'capture' and sim:
            continue
        for values in itertools.product(*swept.values()):
            point = {'part': part, 'op': None, 'servers': params.servers, 'peers': 1,
                     'batch': True, 'replicas': 0, 'fileset': 'part1'}
            point.update(fixed)
            point.update(zip(swept, values))
            out.append(point)
    return out


class Dht8(Experiment):
    """DHT file-sharing index (seed 000): Parts I-III, ping checks, wire capture, failover."""

    name = 'dht8'
    analysis_module = 'analysis.dht8'
    backends = ('emu', 'sim')   # sim: the same cores in virtual time (repronet.sim)
    sim_interpreters = ('python3', 'pypy3')     # its simulation needs no numpy
    # auto: python3. Whole runs at --scale default, alternating, same bytes (wall s): on a
    # quiet machine (76c0283, 2026-11-27 19:19-19:27 UTC, load 1.0-1.1) python3 102.6 and
    # 119.5 against pypy3 109.8 and 120.1 (pypy3's user time 7-8 % lower, its system time
    # 14-24 % higher, peak memory 2.0 GB against 0.67); at load 6.5-12 (9f28b6b, 18:34-18:47)
    # pypy3 was 4-18 % faster, 4 of 4; stop 37's quieter pair 10 % slower. Not faster where
    # it is measured alone, three times the memory: docs/simulation.md, "PyPy's download
    # phase"; smoke and --parts I,III were slower or mixed
    pypy_pays_from_s = None
    # the delay daemons as one worker per CPU: the seed-scale lateness of Part II's small
    # files 10.3 and 8.7 us against 16.53 and 15.62 with one queue (docs/link-emulation.md,
    # "Step 12"); --link-queues one turns it off
    link_queues = 'cpu'
    # a simulated smoke run beyond its points (file sets, analysis): 6.9 s measured at
    # 2026-11-27 04:00 UTC (7.8 s whole, load average 3.6), 9.2 s in /tmp/ci33c.log
    # (tests/test_dht8_sim.py's fixture: three smoke runs, 29.9 s, the other worker busy)
    fixed_s = {'sim': 7.0}
    scales = {
        'smoke': {'servers': 4, 'peers': 2, 'files': 100, 'part2_sets': 'ABC',
                  'part2_divisor': 1000, 'repeat': 1, 'timeout': 1.0},
        'default': {'files': 2000, 'part2_sets': 'ABCDE', 'part2_divisor': 10,
                    'repeat': 2},
        'seed': {'files': 10000, 'part2_sets': 'ABCDEF', 'part2_divisor': 1,
                 'repeat': 3},
        'defaults': {'servers': 8, 'peers': 8, 'replicas': 1, 'window': 1,
                     'bw': 100.0, 'delay': '0.05ms', 'timeout': 5.0,
                     'parts': ','.join(PARTS), 'workdir': WORKDIR, 'downloads_in': 'auto'},
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
          help='client wait for a reply before failing over, seconds (default 5; smoke 1)')
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
          'folder (default %s; with --backend sim %s-sim)' % (WORKDIR, WORKDIR))
        a('--downloads-in', choices=dht8_plan.DOWNLOADS_IN, default=None,
          help='where the clients write downloaded files: memory (a folder on the %s '
          'tmpfs), workdir (--workdir/downloads), or auto: memory for a point whose '
          'downloads fit in a quarter of the memory available (default auto). Creating a '
          'file on a disk\'s file system holds the CPU the link daemons need' % MEMORY_BASE)

    timed_parts = True      # CPU verdict over release..last client exit only

    def check(self, params):
        """Reject parameters the experiment cannot run, with one sentence (UsageError)."""
        dht8_plan.check_flags(params, PARTS)
        if getattr(params, 'backend', 'emu') == 'sim' and 'capture' in params.parts:
            if params.parts == 'capture':
                raise UsageError('the capture part records real interfaces with scapy; '
                                 'run it with --backend emu')
            print('dht8: --backend sim skips the capture part (a scapy capture needs real '
                  'interfaces)', flush=True)
        dht8_plan.check_resources(params, combos(params))

    def estimate(self, params, point):
        """Return a rough length of one point in seconds (weights the ETA)."""
        spec = fileset_spec(point['fileset'], params)
        return dht8_plan.estimate_seconds(point, spec.count,
                                          dht_files.expected_bytes(spec), params)

    def eta_kind(self, point):
        """Downloads, batched and unbatched registers and searches err differently."""
        return '%s%s' % (point['op'], ' batched' if point['op'] == 'register' and
                         point.get('batch') else '')

    def disk(self, params):
        """Return [(path, bytes)]: the file sets and the largest download under --workdir."""
        return dht8_plan.disk_needs(params, combos(params))

    def topology(self, params):
        """Return the topology (parameters were checked by check())."""
        return Dht8Topo(params.servers, max(params.peers, 2), params.bw, params.delay)

    def points(self, params):
        """Return every point: combos() x --repeat, repetition outermost."""
        values = combos(params)
        points = []
        for repetition in range(params.repeat):
            for v in values:
                point = dict(v, point=len(points), repetition=repetition,
                             seed=derive_seed(params.seed, v, repetition))
                points.append(point)
        return points

    def setup(self, ctx):
        """Prepare per-run state (file sets are made lazily, per point; the runner holds
        --workdir's lock from before the network was built)."""
        self.run_dir = ctx.results.path
        ctx.results.update(hosts={h: ctx.host(h).IP()
                                   for h in self.topology(ctx.params).hosts()})
        self.sets = {}
        memory = dht8_plan.memory_downloads(ctx.params)
        if memory:      # what a killed run left in memory (this run's own folder)
            shutil.rmtree(memory, ignore_errors=True)
            if ctx.runs_programs():         # so `repronet clean` knows whose it is
                memory_folders.mark_machine(os.path.dirname(memory))
            else:
                memory_folders.mark(os.path.dirname(memory), ctx.params.workdir)

    def finish(self, ctx):
        """Remove the run's memory folder: a simulated run's is named after its --workdir
        (a --workdir used once would leave it behind), an emulated run's is dht8's one
        folder; a killed run's goes with `repronet clean` or the next emulated run's clean
        (repronet.run.memory_folders)."""
        memory = dht8_plan.memory_downloads(ctx.params)
        if memory:
            shutil.rmtree(os.path.dirname(memory), ignore_errors=True)

    def run_point(self, ctx, point):
        """Run one point (workloads.dht8_points); note failed operations."""
        result = Point(ctx, point, self.fileset(ctx, point['fileset']), functools.partial(
            dht8_plan.downloads_folder, ctx.params)).run()
        failed = result.get('failed_clients')
        if failed or result.get('downloads', 'ok') != 'ok':
            self.operations_failed(point, '%s %s: %s' % (
                point['part'], point['op'], failed or result['downloads']))
        return result

    def fileset(self, ctx, key):
        """Return the FileSet for a point's fileset key, generating it once."""
        if key not in self.sets:
            p = ctx.params
            spec = fileset_spec(key, p)
            started = time.monotonic()
            self.sets[key] = dht_files.generate(spec, p.workdir)
            print('dht8: file set %s ready in %.1f s (%d files, %.1f MB) under %s'
                  % (spec.set_id, time.monotonic() - started, spec.count,
                     self.sets[key].total_bytes / 1e6, p.workdir), flush=True)
            ctx.results.update(filesets={k: dht_files.describe(v)
                                         for k, v in sorted(self.sets.items())})
        return self.sets[key]

    def main(self, argv=None):
        """Run, then print the targets (measured vs seed) from the analysis."""
        self.run_dir = None
        status = super().main(argv)
        self.run_dir = self.run_dir or self.child_run_dir   # setup() ran in a pypy3 child
        if self.run_dir is None:
            return status
        from analysis import dht8 as analysis
        try:
            if status != 0 and not (self.run_dir / 'tables' / 'targets.csv').exists():
                try:
                    analysis.build(self.run_dir)    # a failed run still gets its tables
                except ValueError as e:             # inputs missing: tables still written
                    print('dht8: %s' % e, file=sys.stderr)
            print(analysis.targets_text(self.run_dir), flush=True)
        except (OSError, ValueError, KeyError) as e:
            print('dht8: no target summary: %s' % e, file=sys.stderr)
        return status


if __name__ == '__main__':
    sys.exit(Dht8().main())
