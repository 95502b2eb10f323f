#!/usr/bin/python3
"""Key-value store under load (seed 001): ours against Redis, 1 to N clients.

The seed timed 100,000 puts, then gets, then deletes (keys ``k<i>``, values
``Value<i>``) from 1 to 8 clients at once, server and clients on one machine, and
reported each client's total milliseconds per operation. Here the server and each
client sit on their own emulated host, in two layouts that never share a link:

- ``local``: ``srv`` and ``c1..cN`` on switch ``sw1`` with plain links (no added
  delay or rate): the seed's one machine, with a network stack in between;
- ``lan``: ``lsrv`` and ``l1..lN`` on switch ``sw2``, every link ``--lan-bw`` Mbit/s
  and ``--lan-delay`` one way (default 1000 Mbit/s and 0.05 ms per link: about
  0.2 ms round trip, a switched LAN).

Points, each with a fresh server (``workloads.kv_points``): ``load`` points for
every server (ours, ``nodes.kv.server``; Debian's ``redis-server``), layout and
client count 1..``--clients``, each client running ``workloads.kvload``
sequentially (one request in flight, as the seed) or ``--pipeline`` deep;
``bench`` points running ``redis-benchmark`` (1 connection; 50; 50 with ``-P 16``)
against each server; ``fsync`` points giving each ``appendfsync`` policy's SET
throughput; one ``profile`` point runs our server under cProfile. Both servers log every write to an append-only file under
``--workdir`` with ``--appendfsync`` (default everysec, Redis's default).

    sudo /usr/bin/python3 topologies/kvload.py --scale smoke   # about a minute
    sudo /usr/bin/python3 topologies/kvload.py                 # 10K requests/client
    sudo /usr/bin/python3 topologies/kvload.py --scale seed    # the seed's 100K
    /usr/bin/python3 topologies/kvload.py --backend sim --scale smoke   # no root, seconds

With ``--backend sim`` our server (``nodes.kv.server``) and ``workloads.kvload`` run in the
simulator (``repronet.sim``) on the same topology, points and analysis: only the ``load``
points of our server, since Redis, ``redis-benchmark`` and cProfile need real hosts (said
once, before anything runs). The append-only file is written as in emulation, under
``--workdir``; a simulated fdatasync takes no time (``nodes/kv/sim_server.py``).
"""

import os
import sys

if __package__ in (None, ''):       # run as a script: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))

from mininet.topo import Topo  # noqa: E402

from repronet.emu.linkemu_params import LinkEmulationError, parse_time_ms  # noqa: E402
from repronet.run.options import UsageError  # noqa: E402
from repronet.run.runner import Experiment  # noqa: E402
from repronet.run.sweep import derive_seed  # noqa: E402
from workloads import kv_points  # noqa: E402
from workloads.scratch import default_workdir  # noqa: E402

FSYNC = ('always', 'everysec', 'no')
WORKDIR = default_workdir('kvload')     # a run not as root adds its uid
CACHES = ('lru', 'lfu', 'fifo', 'none')
# seconds of a point beyond its requests (starting the server and clients, the barrier):
# the emulated smoke run of 2026-11-27 (CI's root tests, tests/test_kvload_experiment.py)
# took 0.23-0.53 s a point for 300-5,000 requests, against the 3 s this was
START_S = 0.3
SIM_SKIPS = ('kvload: --backend sim runs our server\'s load points only and skips Redis, the '
             'redis-benchmark (bench, fsync) points and the profile point, which need real '
             'hosts')


class KvTopo(Topo):
    """Two islands: srv + c1..cN on plain links, lsrv + l1..lN on LAN links."""

    def build(self, clients=8, layouts=('local', 'lan'), lan_bw=1000.0,
              lan_delay='0.05ms'):
        """Add one switch, one server and N clients per layout."""
        for i, layout in enumerate(layouts, 1):
            switch = self.addSwitch('sw%d' % (1 if layout == 'local' else 2))
            link = {} if layout == 'local' else {'bw': lan_bw, 'delay': lan_delay}
            server, client_hosts = kv_points.hosts(layout, clients)
            for name in [server] + client_hosts:
                self.addLink(self.addHost(name), switch, **link)


class KvLoad(Experiment):
    """Seed 001: SET, GET, DEL from 1..N clients, ours and Redis, two layouts."""

    name = 'kvload'
    analysis_module = 'analysis.kvload'
    targets_module = 'analysis.kvload_report'
    timed_parts = True
    backends = ('emu', 'sim')   # sim: our server and kvload in virtual time
    scales = {
        'smoke': {'clients': 2, 'requests': 300, 'bench_requests': 5000,
                  'fsync_requests': 1000, 'repeat': 1},
        'default': {'clients': 8, 'requests': 10000, 'bench_requests': 100000,
                    'fsync_requests': 20000, 'repeat': 1},
        'seed': {'clients': 8, 'requests': 100000, 'bench_requests': 100000,
                 'fsync_requests': 50000, 'repeat': 3},
        'defaults': {'pipeline': 1, 'layouts': 'local,lan', 'servers': 'ours,redis',
                     'lan_bw': 1000.0, 'lan_delay': '0.05ms', 'appendfsync': 'everysec',
                     'cache': 'lru', 'cache_size': 100, 'storage': 'memory',
                     'timeout': 10.0, 'workdir': WORKDIR},
    }
    limits = {'clients': (1, 16, 'a whole number'),
              'requests': (1, 1000000, 'a whole number'),
              'bench_requests': (100, 10000000, 'a whole number'),
              'fsync_requests': (100, 10000000, 'a whole number'),
              'pipeline': (1, 1024, 'a whole number'),
              'lan_bw': (1, 10000, 'Mbit/s'), 'cache_size': (0, 10000000, 'a whole number'),
              'timeout': (0.1, 600, 'seconds')}

    def add_arguments(self, parser):
        """Add the experiment's flags (defaults per --scale in the help)."""
        a = parser.add_argument
        a('--clients', type=int, metavar='N', default=None,
          help='sweep 1..N concurrent clients (default 8, as the seed; smoke 2)')
        a('--requests', type=int, metavar='R', default=None,
          help='SETs, then GETs, then DELs per client (smoke 300, default 10000, '
          'seed 100000)')
        a('--pipeline', type=int, metavar='D', default=None,
          help='requests in flight per client (default 1: sequential, as the seed)')
        a('--servers', metavar='LIST', default=None,
          help='servers to run among ours,redis (default both)')
        a('--layouts', metavar='LIST', default=None,
          help='layouts among local,lan (default both)')
        a('--lan-bw', type=float, metavar='MBIT', default=None,
          help='rate of every LAN-layout link (default 1000)')
        a('--lan-delay', metavar='DELAY', default=None,
          help='one-way delay of every LAN-layout link (default 0.05ms)')
        a('--appendfsync', choices=FSYNC, default=None,
          help='log policy of both servers in load and bench points (default everysec)')
        a('--cache', choices=CACHES, default=None, help='our server\'s cache (default lru)')
        a('--cache-size', type=int, metavar='N', default=None,
          help='our server\'s cache entries (default 100)')
        a('--storage', choices=('memory', 'log'), default=None,
          help='our server keeps values in memory or reads them back from its log '
          '(default memory, like Redis)')
        a('--bench-requests', type=int, metavar='N', default=None,
          help='redis-benchmark -n per bench point (smoke 5000, default 100000)')
        a('--fsync-requests', type=int, metavar='N', default=None,
          help='redis-benchmark -n per fsync point (smoke 1000, default 20000)')
        a('--timeout', type=float, metavar='S', default=None,
          help='a client\'s wait for one reply before it fails (default 10)')
        a('--workdir', metavar='DIR', default=None,
          help='where the servers\' append-only files go, outside the results folder '
          '(default %s, with --backend sim %s-sim; removed after each point)' % (WORKDIR, WORKDIR))

    def check(self, params):
        """Reject parameters the experiment cannot run, with one sentence."""
        for flag, allowed in (('servers', kv_points.SERVERS),
                              ('layouts', tuple(kv_points.LAYOUTS))):
            values = [v for v in getattr(params, flag).split(',') if v]
            wrong = [v for v in values if v not in allowed]
            if not values or wrong or len(set(values)) != len(values):
                raise UsageError('--%s must list distinct values among %s, not %r' % (
                    flag, ','.join(allowed), getattr(params, flag)))
            setattr(params, flag, ','.join(values))
        try:
            parse_time_ms(params.lan_delay, '--lan-delay', 'kvload', high=100.0)
        except LinkEmulationError as e:     # its own sentence, less the 'kvload: ' prefix
            raise UsageError(str(e).split(': ', 1)[-1]) from None
        if not os.path.isabs(params.workdir):
            raise UsageError('--workdir must be an absolute path, not %r' % params.workdir)
        if getattr(params, 'backend', 'emu') == 'sim':
            if 'ours' not in params.servers.split(','):
                raise UsageError('--backend sim runs our server only; give --servers ours '
                                 '(Redis needs real hosts)')
            layouts = params.layouts.split(',')
            if 'local' in layouts and not getattr(params, 'sim_costs', None):
                if layouts == ['local']:
                    raise UsageError('the local layout has no link rate or delay, so without '
                                     '--sim-cost its simulated requests take no time at all; '
                                     'give --layouts lan or a --sim-cost')
                params.layouts = ','.join(x for x in layouts if x != 'local')
                print('kvload: --backend sim without --sim-cost leaves out the local layout '
                      '(no link rate or delay: its requests would take no time)', flush=True)
            print(SIM_SKIPS, flush=True)

    def estimate(self, params, point):
        """Return a rough length of one point in seconds (weights the ETA): START_S plus the
        requests at the rates below."""
        if point['kind'] == 'load':
            return START_S + 3 * point['clients'] * params.requests / 8000.0
        if point['kind'] == 'bench':
            return START_S + 2 * params.bench_requests / 20000.0
        if point['kind'] == 'profile':
            return START_S + params.bench_requests / 20000.0
        return START_S + params.fsync_requests / 5000.0

    def topology(self, params):
        """Return the two-island topology."""
        return KvTopo(params.clients, params.layouts.split(','), params.lan_bw,
                      params.lan_delay)

    def points(self, params):
        """Return load points (server x layout x clients), then bench and fsync points,
        repetition outermost (simulated: our server's load points only)."""
        sim = getattr(params, 'backend', 'emu') == 'sim'
        servers = ['ours'] if sim else params.servers.split(',')
        values = [{'kind': 'load', 'server': s, 'layout': layout, 'clients': n}
                  for layout in params.layouts.split(',')
                  for n in range(1, params.clients + 1) for s in servers]
        if 'local' in params.layouts.split(',') and not sim:
            values += [{'kind': 'bench', 'server': s, 'bench': b}
                       for b in kv_points.BENCH for s in servers]
            values += [{'kind': 'fsync', 'server': s, 'appendfsync': f}
                       for f in FSYNC for s in servers]
            if 'ours' in servers:
                values.append({'kind': 'profile', 'server': 'ours', 'bench': 'c50p16'})
        points = []
        for repetition in range(params.repeat):
            for v in values:
                points.append(dict(v, point=len(points), repetition=repetition,
                                   seed=derive_seed(params.seed, v, repetition)))
        return points

    def setup(self, ctx):
        """Record the hosts' addresses."""
        p = ctx.params
        names = [h for layout in p.layouts.split(',')
                 for h in [kv_points.hosts(layout, p.clients)[0]]
                 + kv_points.hosts(layout, p.clients)[1]]
        ctx.results.update(hosts={h: ctx.host(h).IP() for h in sorted(names)})

    def run_point(self, ctx, point):
        """Run one point (workloads.kv_points); note what failed."""
        result = kv_points.Point(ctx, point).run()
        if result.get('loop'):              # the manifest names the event loop that ran
            loops = set(ctx.results.manifest.get('kv_server_loops', [])) | {result['loop']}
            if loops != set(ctx.results.manifest.get('kv_server_loops', [])):
                ctx.results.update(kv_server_loops=sorted(loops))
        problem = kv_points.failures(point, result)
        if problem:
            self.operations_failed(point, problem)
        return result


if __name__ == '__main__':
    sys.exit(KvLoad().main())
