#!/usr/bin/python3
"""A key-value store over 1 to 10 servers with caches and slow/fast hosts (seed 003).

The seed ran KV servers on three Raspberry Pis (a 700 MHz single-core Pi 1 and two
1.2 GHz quad-core Pi 3s) on a 100 Mbit/s LAN, with 1, 10 and 100 clients over 1, 2, 5
and 10 servers, 80 % GET / 20 % PUT on the Enron e-mail set and an LFU cache of 100
entries per server (scenarios 1-3), then FIFO, LRU and LFU at 10, 50 and 100 entries
with 10 clients on 2 servers (scenario 4). It saw irregular response times and blamed
an uneven spread of keys, with the slower servers holding more of them.

Here every server is on an emulated host of its own with a CPU limit (``repronet.emu``:
cgroup v2 ``cpu.max`` or v1 CFS quota): a "Pi 3" class (``--fast-cores``, default 0.25
of one core) and a "Pi 1" class (``--slow-cores``, default 0.0625: a quarter of it).
Two server sets share one switch: ``h1..h10`` all fast (``homogeneous``) and
``m1..m10`` with every third server slow (``mixed``: m1, m4, m7, m10, as one Pi 1 in
three). Load generators ``g1``, ``g2`` (no limit) run the point's logical clients
(``workloads.kvmix``: closed loop, one request in flight each, keys by Zipf
popularity, e-mail-sized values or the Enron corpus with ``--dataset enron:DIR``).
Every link is ``--bw`` Mbit/s (default 100, the seed's switch).

Keys are partitioned by consistent hashing with ``--vnodes`` virtual nodes per server
over Redis Cluster's 16384 hash slots; a client learns the layout with ``CLUSTER
SLOTS`` and a server asked for a key it does not own answers ``-MOVED``. Points
(``workloads.kvscale_points``), each with fresh servers:

- ``scale`` (scenarios 1-3): clients x servers x speed class, ours (LFU 100) and Redis
  Cluster given the same slot layout;
- ``cache`` (scenario 4): FIFO/LRU/LFU x 10/50/100 entries, 10 clients, 2 fast servers;
- ``skew``: ``--vnodes 1`` (one point per server, the seed's skew) at 2, 5 and 10
  servers of both classes, 10 clients, to set beside the ``scale`` points.

    sudo /usr/bin/python3 topologies/kvscale.py --scale smoke   # about 1.5 minutes
    sudo /usr/bin/python3 topologies/kvscale.py                 # about 18 minutes
    /usr/bin/python3 topologies/kvscale.py --backend sim --scale smoke   # no root

With ``--backend sim`` our servers, kvmix and the admin steps run in the simulator
(``repronet.sim``) on the same topology, points and analysis, for what does not depend on
CPU speed: cache hit rates, key spread, requests per server, latency over the network.
Redis needs real hosts, and the simulator does not model a host's CPU limit, so the
``mixed`` class (slow hosts) would equal the homogeneous one: both are left out (said once,
before anything runs).
"""

import os
import sys

if __package__ in (None, ''):       # run as a script: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))

from mininet.topo import Topo  # noqa: E402

from repronet.run.options import UsageError  # noqa: E402
from repronet.run.runner import Experiment  # noqa: E402
from repronet.run.sweep import derive_seed  # noqa: E402
from nodes.kv import cluster  # noqa: E402
from workloads import kvscale_points as kp  # noqa: E402
from workloads.scratch import default_workdir  # noqa: E402

POLICIES = ('fifo', 'lru', 'lfu')
WORKDIR = default_workdir('kvscale')     # a run not as root adds its uid
SIM_SKIPS = ('kvscale: --backend sim runs our servers on the homogeneous hosts only and '
             'skips Redis (it needs real hosts) and the mixed class (the simulator does not '
             'model a host\'s CPU limit, so slow hosts would not be slow)')


def int_list(text, flag, low, high):
    """Parse '1,2,5' into distinct sorted ints within [low, high] (one sentence if not)."""
    try:
        values = sorted({int(v) for v in text.split(',') if v.strip()})
    except ValueError:
        values = []
    if not values or values[0] < low or values[-1] > high:
        raise UsageError('--%s must list whole numbers from %d to %d, not %r' % (
            flag, low, high, text))
    return values


def names_list(text, flag, allowed):
    """Parse 'a,b' into distinct names among allowed (one sentence if not)."""
    values = [v for v in text.split(',') if v]
    if not values or len(set(values)) != len(values) or set(values) - set(allowed):
        raise UsageError('--%s must list distinct values among %s, not %r' % (
            flag, ','.join(allowed), text))
    return values


class KvScaleTopo(Topo):
    """Server sets h1..hN (fast) and m1..mN (every third slow), load hosts g1, g2."""

    def build(self, servers=10, fast=0.25, slow=0.0625, bw=100.0, classes=kp.CLASSES):
        """One switch; every link bw Mbit/s; servers CPU-limited by class."""
        switch = self.addSwitch('sw1')
        for klass in classes:
            for i, name in enumerate(kp.server_hosts(klass, servers), 1):
                cores = slow if kp.is_slow(klass, i) else fast
                self.addLink(self.addHost(name, cores=cores), switch, bw=bw)
        for k in range(1, kp.LOADGENS + 1):
            self.addLink(self.addHost('g%d' % k), switch, bw=bw)


class KvScale(Experiment):
    """Seed 003: response time and hit rate over 1..10 servers, ours and Redis."""

    name = 'kvscale'
    analysis_module = 'analysis.kvscale'
    targets_module = 'analysis.kvscale_report'
    timed_parts = True
    backends = ('emu', 'sim')   # sim: our servers and kvmix in virtual time, no CPU classes
    # the simulator plays every request of the mix: a simulated smoke run's points took
    # 12.6 s for 32 s of emulated estimates (2026-11-27 04:00 UTC, load average 3.6)
    point_wall = {'sim': 0.35}
    scales = {
        'smoke': {'server_counts': '1,2', 'client_counts': '10', 'cache_sizes': '10',
                  'skew_servers': '2', 'keys': 2000, 'duration': 3.0, 'repeat': 1},
        'default': {'server_counts': '1,2,5,10', 'client_counts': '1,10,100',
                    'cache_sizes': '10,50,100', 'skew_servers': '2,5,10', 'keys': 20000,
                    'duration': 10.0, 'repeat': 1},
        'seed': {'server_counts': '1,2,5,10', 'client_counts': '1,10,100',
                 'cache_sizes': '10,50,100', 'skew_servers': '2,5,10', 'keys': 100000,
                 'duration': 30.0, 'repeat': 3},
        'defaults': {'classes': 'homogeneous,mixed', 'servers': 'ours,redis',
                     'policies': 'fifo,lru,lfu', 'vnodes': cluster.DEFAULT_VNODES, 'fast_cores': 0.25,
                     'slow_cores': 0.0625, 'bw': 100.0, 'zipf': 0.99, 'value_size': 0,
                     'dataset': 'synthetic', 'storage': 'log', 'appendfsync': 'everysec',
                     'timeout': 10.0, 'workdir': WORKDIR},
    }
    limits = {'keys': (10, 10000000, 'a whole number'), 'duration': (0.5, 3600, 'seconds'),
              'vnodes': (1, 4096, 'a whole number'), 'fast_cores': (0.01, 64, 'cores'),
              'slow_cores': (0.01, 64, 'cores'), 'bw': (1, 10000, 'Mbit/s'),
              'zipf': (0, 5, 'an exponent'), 'value_size': (0, 1 << 20, 'bytes'),
              'timeout': (0.1, 600, 'seconds')}

    def add_arguments(self, parser):
        """Add the experiment's flags (defaults per --scale in the help)."""
        a = parser.add_argument
        a('--server-counts', metavar='LIST', help='servers per point (default 1,2,5,10)')
        a('--client-counts', metavar='LIST', help='logical clients (default 1,10,100)')
        a('--classes', metavar='LIST', help='server speed classes among homogeneous,mixed')
        a('--servers', metavar='LIST', help='stores among ours,redis (default both)')
        a('--policies', metavar='LIST', help='cache policies of the cache points')
        a('--cache-sizes', metavar='LIST', help='cache entries of the cache points '
          '(default 10,50,100)')
        a('--skew-servers', metavar='LIST', help='server counts of the --vnodes 1 points '
          '(default 2,5,10; empty: none)')
        a('--vnodes', type=int, metavar='V', help='virtual nodes per server (default %d)' % cluster.DEFAULT_VNODES)
        a('--keys', type=int, metavar='K', help='distinct keys, preloaded (default 20000)')
        a('--duration', type=float, metavar='S', help='seconds of 80/20 mix per point')
        a('--fast-cores', type=float, metavar='C', help='CPU of a "Pi 3" server in cores')
        a('--slow-cores', type=float, metavar='C', help='CPU of a "Pi 1" server in cores')
        a('--bw', type=float, metavar='MBIT', help='rate of every link (default 100)')
        a('--zipf', type=float, metavar='S', help='Zipf exponent of key popularity')
        a('--value-size', type=int, metavar='B', help='fixed value size (default 0: '
          'e-mail-like sizes)')
        a('--dataset', metavar='SPEC', help='synthetic or enron:/path/to/maildir')
        a('--storage', choices=('memory', 'log'), help='our servers keep values in memory '
          'or read cache misses back from their log (default log, as the seed\'s)')
        a('--appendfsync', choices=('always', 'everysec', 'no'), help='log policy of both')
        a('--timeout', type=float, metavar='S', help='a client\'s wait for one reply')
        a('--workdir', metavar='DIR', help='where server data goes, outside the results '
          'folder (default %s, with --backend sim %s-sim; removed after each point)' % (WORKDIR, WORKDIR))

    def check(self, params):
        """Reject parameters the experiment cannot run, with one sentence."""
        params.server_counts = int_list(params.server_counts, 'server-counts', 1, 10)
        params.client_counts = int_list(params.client_counts, 'client-counts', 1, 1000)
        params.cache_sizes = int_list(params.cache_sizes, 'cache-sizes', 1, 1000000)
        params.skew_servers = (int_list(params.skew_servers, 'skew-servers', 2, 10)
                               if params.skew_servers.strip() else [])
        params.classes = names_list(params.classes, 'classes', kp.CLASSES)
        params.servers = names_list(params.servers, 'servers', kp.SERVERS)
        params.policies = names_list(params.policies, 'policies', POLICIES)
        if params.slow_cores > params.fast_cores:
            raise UsageError('--slow-cores (%g) must not exceed --fast-cores (%g)' % (
                params.slow_cores, params.fast_cores))
        if not (params.dataset == 'synthetic' or params.dataset.startswith('enron:')):
            raise UsageError('--dataset must be synthetic or enron:/path/to/maildir, not %r'
                             % params.dataset)
        if params.dataset.startswith('enron:') and not os.path.isdir(params.dataset[6:]):
            raise UsageError('--dataset %s: no such folder' % params.dataset[6:])
        if not os.path.isabs(params.workdir):
            raise UsageError('--workdir must be an absolute path, not %r' % params.workdir)
        if getattr(params, 'backend', 'emu') == 'sim':
            if 'ours' not in params.servers or 'homogeneous' not in params.classes:
                raise UsageError('--backend sim runs our servers on homogeneous hosts only; '
                                 'give --servers ours and --classes homogeneous')
            params.servers, params.classes = ['ours'], ['homogeneous']
            print(SIM_SKIPS, flush=True)

    def estimate(self, params, point):
        """Return a rough length of one point in seconds (weights the ETA): fitted to the
        default run in docs/experiments.md (start-up, preload at about 5,000 keys/s, the mix)."""
        return (1.7 + params.duration + 0.15 * point['servers'] + params.keys / 5000.0
                + (1.0 if point['server'] == 'redis' else 0.0))

    def topology(self, params):
        """Return the server sets and load hosts."""
        largest = max(params.server_counts + params.skew_servers + [2])
        return KvScaleTopo(largest, params.fast_cores, params.slow_cores, params.bw,
                           params.classes)

    def points(self, params):
        """Return scale, cache and skew points, repetition outermost."""
        lfu = {'cache': 'lfu', 'cache_size': 100, 'vnodes': params.vnodes}
        values = [dict(lfu, kind='scale', server=s, servers=n, clients=c, **{'class': k})
                  for k in params.classes for c in params.client_counts
                  for n in params.server_counts for s in params.servers]
        if 'ours' in params.servers:
            values += [{'kind': 'cache', 'server': 'ours', 'servers': 2, 'clients': 10,
                        'class': 'homogeneous', 'cache': policy, 'cache_size': size,
                        'vnodes': params.vnodes}
                       for size in params.cache_sizes for policy in params.policies]
            values += [dict(lfu, kind='skew', server='ours', servers=n, clients=10,
                            vnodes=1, **{'class': k})
                       for k in params.classes for n in params.skew_servers]
        points = []
        for repetition in range(params.repeat):
            for v in values:
                points.append(dict(v, point=len(points), repetition=repetition,
                                   seed=derive_seed(params.seed, v, repetition)))
        return points

    def setup(self, ctx):
        """Record addresses, each server's CPU class and the ring's slot shares."""
        p = ctx.params
        largest = max(p.server_counts + p.skew_servers)
        classes = {k: {name: ('slow' if kp.is_slow(k, i) else 'fast')
                       for i, name in enumerate(kp.member_names(largest), 1)}
                   for k in p.classes}
        names = [h for k in p.classes for h in kp.server_hosts(k, largest)]
        names += ['g%d' % k for k in range(1, kp.LOADGENS + 1)]
        ctx.results.update(hosts={h: ctx.host(h).IP() for h in names},
                           server_classes=classes,
                           class_cores={'fast': p.fast_cores, 'slow': p.slow_cores})
        kp.write_ring_shares(ctx.results.log_path('ring'),
                             sorted(set(p.server_counts + p.skew_servers)), p.vnodes)

    def run_point(self, ctx, point):
        """Run one point (workloads.kvscale_points); note what failed."""
        result = kp.Point(ctx, point).run()
        problem = kp.failures(point, result)
        if problem:
            self.operations_failed(point, problem)
        return result


if __name__ == '__main__':
    sys.exit(KvScale().main())
