"""One kvscale point on the emulated network: N servers, a preload, then the 80/20 mix.

``topologies/kvscale.py`` declares the points; this module is how one runs. Every point
starts fresh servers with empty stores (no point depends on an earlier one) on the
server hosts of its speed class, and removes their data afterwards (it is data, not a
result); each server's files go in a folder of its own made under ``--workdir`` with
``tempfile.mkdtemp``, so a careless ``--workdir`` never loses what was there.

The steps, all on emulated hosts:

1. servers: ours (``nodes.kv.server --cluster ... --vnodes V``, the cache and size of
   the point, ``--storage log`` so a cache miss reads the value back from the log as
   the seed's disk-backed servers did) or Redis (``redis-server --cluster-enabled
   yes``), one per host ``<set><i>``;
2. Redis only: ``workloads.kvcluster_admin setup`` gives each Redis node the slot
   ranges of *the same ring* ours uses (``CLUSTER ADDSLOTSRANGE``) and joins them
   (``CLUSTER MEET``), so both systems partition the keys identically and differ only
   in the server;
3. ``workloads.kvmix --phase preload`` from ``g1`` SETs every key once;
4. ``kvcluster_admin resetstat``: the cache counters start from zero for the mix;
5. ``workloads.kvmix --phase mix`` from ``g1..gG`` (the point's logical clients split
   evenly), released together at the barrier, for ``--duration`` seconds; only this
   step is timed (``ctx.timed()``), so the CPU verdict covers the load alone;
6. ``kvcluster_admin info``: every server's key count, cache hits, misses and
   evictions, as the servers themselves report them (INFO, DBSIZE).

In simulation (``--backend sim``) the same steps run there (``resetstat`` and ``info``
through ``kvcluster_admin.simulate``); the mix's stamps are ``ctx.clock()`` (virtual
seconds) and the servers' CPU seconds are not measured (a simulated server has no process).

Log names follow :func:`names` (``analysis.kvscale`` uses the same rule).
"""

import json
import os
import shutil
import sys

from nodes.kv import cluster
from repronet.emu.process import LogReady, TcpListening, cpu_seconds
from workloads.scratch import point_folder

PORT = 6379
SERVERS = ('ours', 'redis')
CLASSES = ('homogeneous', 'mixed')
SET_PREFIX = {'homogeneous': 'h', 'mixed': 'm'}     # server host names: h1.., m1..
LOADGENS = 2                 # load-generator hosts g1..gG (logical clients split over them)
WAIT_SLACK_S = 60


def server_hosts(klass, n):
    """Return the host names of the first n servers of a speed class."""
    return ['%s%d' % (SET_PREFIX[klass], i) for i in range(1, n + 1)]


def is_slow(klass, i):
    """True for server i (1-based) of a class that is in the slow ("Pi 1") group.

    The seed had one Pi 1 among three Pis: in the mixed class every third server,
    starting with the first, is slow (m1, m4, m7, m10), so one server is all slow and
    two servers are one slow, one fast."""
    return klass == 'mixed' and i % 3 == 1


def loadgens(clients):
    """Return [(host, client_base, count)]: the point's logical clients split evenly."""
    g = min(LOADGENS, clients)
    base, out = 0, []
    for k in range(g):
        count = clients // g + (1 if k < clients % g else 0)
        out.append(('g%d' % (k + 1), base, count))
        base += count
    return out


def names(point):
    """Return the log names of a point: servers, admin steps, preload, mix processes."""
    tag = 'p%03d' % point['point']
    return {'servers': ['%s-%s-%s' % (tag, point['server'], h)
                        for h in server_hosts(point['class'], point['servers'])],
            'setup': '%s-setup' % tag, 'resetstat': '%s-resetstat' % tag,
            'info': '%s-info' % tag, 'preload': '%s-preload' % tag,
            'mix': ['%s-mix-%s' % (tag, h) for h, _, _ in loadgens(point['clients'])]}


def write_ring_shares(path, counts, vnodes, port=PORT):
    """Write logs/ring.jsonl: the ring's slot shares per server count and vnodes.

    The ring depends on member names only (:func:`member_names`), so the shares are
    computed here once, for analysis to set beside the keys the servers report."""
    with open(path, 'w') as f:
        for v in sorted({1, 4, 16, 64, 256, 1024, vnodes}):
            for n in counts:
                members = [cluster.Member(name, '0.0.0.0', port)
                           for name in member_names(n)]
                shares = cluster.Ring(members, v).shares()
                f.write(json.dumps({
                    'event': 'ring', 'servers': n, 'vnodes': v,
                    'slot_imbalance': round(cluster.imbalance(shares), 6),
                    'min_share': round(min(shares), 6), 'max_share': round(max(shares), 6),
                    'used_by_run': v == vnodes}, sort_keys=True) + '\n')


def member_names(n):
    """Return the cluster member names s1..sn.

    Members are named by position, not by host, so the homogeneous and the mixed set
    (hosts h<i> and m<i>) have the same ring and hold the same keys on server i: the
    classes differ in speed alone."""
    return ['s%d' % i for i in range(1, n + 1)]


def cluster_spec(ctx, hosts):
    """Return the --cluster spec s<i>=IP:PORT,... of the point's server hosts."""
    return ','.join('%s=%s:%d' % (name, ctx.host(h).IP(), PORT)
                    for name, h in zip(member_names(len(hosts)), hosts))


def server_argv(point, params, name, spec, data_dir, ip):
    """Return (argv, ready check, log suffix) of one fresh server.

    A Redis node learns its own address only when another node meets it, so a
    one-node cluster would list its slots at address ''; --cluster-announce-ip says it."""
    if point['server'] == 'redis':
        return (['redis-server', '--port', PORT, '--bind', '0.0.0.0',
                 '--protected-mode', 'no', '--save', '', '--appendonly', 'yes',
                 '--appendfsync', params.appendfsync, '--dir', data_dir,
                 '--cluster-enabled', 'yes', '--cluster-announce-ip', ip,
                 '--cluster-config-file',
                 os.path.join(data_dir, 'nodes.conf'), '--daemonize', 'no',
                 '--logfile', ''], TcpListening(PORT), '.log')
    return ([sys.executable, '-m', 'nodes.kv.server', '--host', '0.0.0.0', '--port', PORT,
             '--log', os.path.join(data_dir, 'kv.aof'), '--appendfsync', params.appendfsync,
             '--cache', point['cache'], '--cache-size', point['cache_size'],
             '--storage', params.storage, '--max-keys', params.keys * 2 + 1000,
             '--cluster', spec, '--node-id', name, '--vnodes', point['vnodes']],
            LogReady(), '.jsonl')


def keyspace_args(params):
    """Return the kvmix flags that define the keys and values (same for every step)."""
    args = ['--keys', params.keys, '--zipf', params.zipf, '--dataset', params.dataset,
            '--timeout', params.timeout]
    if params.value_size:
        args += ['--value-size', params.value_size]
    return args


class Point:
    """One point's servers, preload and mix; run() returns what points.jsonl keeps."""

    def __init__(self, ctx, point):
        self.ctx, self.point, self.params = ctx, point, ctx.params
        self.names = names(point)
        self.hosts = server_hosts(point['class'], point['servers'])
        self.data = None
        self.nodes = []
        self.result = {}

    def run(self):
        """Run the point; nodes are stopped and the data removed on every path."""
        self.data = point_folder(self.ctx, 'kvscale-p%03d' % self.point['point'])
        try:
            self._run()
            return self.result
        finally:
            self.ctx.stop_nodes([n for n in self.nodes if n.returncode is None])
            shutil.rmtree(self.data, ignore_errors=True)

    def _run(self):
        """The steps of the module docstring, each failure recorded and fatal."""
        ctx, p, point = self.ctx, self.params, self.point
        spec = cluster_spec(ctx, self.hosts)
        self.result['members'] = dict(m.split('=') for m in spec.split(','))
        servers = self._start_servers(spec)
        if point['server'] == 'redis' and not self._admin('setup', spec):
            return
        entry = ','.join('%s:%d' % (ctx.host(h).IP(), PORT) for h in self.hosts)
        preload = self._start('g1', self.names['preload'], [
            '-m', 'workloads.kvmix', '--servers', entry, '--phase', 'preload',
            '--clients', 8, '--pipeline', 32, '--seed', point['seed']] + keyspace_args(p))
        preload.wait(timeout=WAIT_SLACK_S + p.keys / 200.0)
        self.result['preload_status'] = preload.returncode
        if preload.returncode != 0 or not self._admin('resetstat', spec):
            return
        mixers = []
        for (host, base, count), name in zip(loadgens(point['clients']), self.names['mix']):
            mixers.append(self._start(host, name, [
                '-m', 'workloads.kvmix', '--servers', entry, '--phase', 'mix',
                '--clients', count, '--client-base', base, '--duration', p.duration,
                '--seed', point['seed'], '--barrier',
                '--latencies', str(ctx.results.log_path(name, ''))] + keyspace_args(p),
                barrier=True))
        members = member_names(len(servers))
        with ctx.timed():
            ctx.release(mixers, timeout=120)
            self.result['mix_start'] = round(ctx.clock(), 6)
            before = [self._cpu(s) for s in servers]
            for node in mixers:
                node.wait(timeout=WAIT_SLACK_S + 2 * p.duration)
            after = [self._cpu(s) for s in servers]
            self.result['mix_end'] = round(ctx.clock(), 6)
        # each server's own CPU seconds over the mix: how much of its limit it used
        self.result['server_cpu_s'] = {
            m: round(a - b, 3) for m, a, b in zip(members, after, before)
            if a is not None and b is not None}
        self.result['failed_loadgens'] = [h for (h, _, _), node in
                                          zip(loadgens(point['clients']), mixers)
                                          if node.returncode != 0]
        self._admin('info', spec)
        self.result['servers_alive'] = sum(1 for s in servers if s.poll() is None)

    def _cpu(self, server):
        """A server's CPU seconds so far, or None (gone, or simulated: no process)."""
        return None if server.pid is None else cpu_seconds(server.pid)

    def _start_servers(self, spec):
        """Start every server of the point at once, then wait until each is ready."""
        started = []
        for host, name, member in zip(self.hosts, self.names['servers'],
                                      member_names(len(self.hosts))):
            data_dir = os.path.join(self.data, host)
            os.makedirs(data_dir, mode=0o755)
            argv, ready, suffix = server_argv(self.point, self.params, member, spec,
                                              data_dir, self.ctx.host(host).IP())
            node = self.ctx.start_node(host, name, argv, ready=ready, suffix=suffix,
                                       wait=False)
            self.nodes.append(node)
            started.append(node)
        for node in started:        # a slow-class Python server needs a few seconds
            node.wait_ready(90)
        return started

    def _start(self, host, name, args, barrier=False):
        """Start a Python workload process on a host (a tracked node)."""
        node = self.ctx.start_node(host, name, [sys.executable] + args, barrier=barrier,
                                   ready=LogReady() if barrier else None, wait=False)
        self.nodes.append(node)
        return node

    def _admin(self, action, spec):
        """Run one kvcluster_admin step from g1; record and return its success."""
        node = self._start('g1', self.names[action], [
            '-m', 'workloads.kvcluster_admin', action, '--cluster', spec,
            '--vnodes', self.point['vnodes']])
        node.wait(timeout=WAIT_SLACK_S + 10 * self.point['servers'])
        self.result['%s_status' % action] = node.returncode
        return node.returncode == 0


def failures(point, result):
    """Return a one-line description of what failed in a point, or None."""
    problems = ['%s exited %s' % (step, result[step + '_status'])
                for step in ('setup', 'preload', 'resetstat', 'info')
                if result.get(step + '_status') not in (None, 0)]
    if result.get('failed_loadgens'):
        problems.append('load generators on %s failed' % ','.join(result['failed_loadgens']))
    if 'failed_loadgens' not in result and not problems:
        problems.append('the mix never ran')
    if result.get('servers_alive', point['servers']) != point['servers']:
        problems.append('%d of %d servers had exited' % (
            point['servers'] - result['servers_alive'], point['servers']))
    return '; '.join(problems) or None
