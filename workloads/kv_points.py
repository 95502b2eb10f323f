"""One kvload point on the emulated network: a fresh server, its clients or a benchmark.

``topologies/kvload.py`` declares the points; this module is how one runs, so the
experiment script stays a short list of its topology and sweep. Every point starts a
fresh server (ours, ``nodes.kv.server``, or Debian's ``redis-server``) with an empty
store and a new append-only file under ``--workdir``, so no point depends on an
earlier one, and removes that file afterwards (it is data, not a result). The file
goes in a new folder the point makes under ``--workdir`` (``tempfile.mkdtemp``), so a
careless ``--workdir`` never loses anything that was there before.

``load`` points
    One load-generator process (``workloads.kvload``) per client host, one logical
    client each, as the seed ran separate client programs. All connect, wait at the
    runner's barrier and are released together; each then does its SETs, GETs and
    DELs back to back. Only release .. last client exit is timed (``ctx.timed()``),
    so the CPU verdict covers the load, not process start-up. Afterwards
    ``redis-cli DBSIZE`` (a client nobody here wrote) must find the store empty.
``bench`` points
    ``redis-benchmark --csv`` from the first client host against the server: the
    reference load generator nobody here wrote, the same for both servers.
``fsync`` points
    ``redis-benchmark -t set`` with 50 connections against a server whose log uses
    the point's ``appendfsync`` policy: the price of each durability level.
``profile`` point
    ``redis-benchmark -c 50 -P 16`` against our server running under cProfile
    (``--profile logs/<name>.prof``): where its time goes when it is the bottleneck.
    The profiler slows the server, so this point's throughput is in no ratio.

In simulation (``--backend sim``) only ``load`` points of our server run (the topology
leaves the others out); ``redis-cli`` cannot run there, so the DBSIZE after the DELs is the
``keys`` of our server's ``summary`` line, read once the point has stopped it.

Log names follow :func:`names` (``analysis.kvload`` uses the same rule).
"""

import json
import os
import shutil
import sys

from repronet.emu.process import LogReady, TcpListening
from workloads.scratch import point_folder

PORT = 6379
SERVERS = ('ours', 'redis')
LAYOUTS = {'local': ('srv', 'c'), 'lan': ('lsrv', 'l')}    # server host, client prefix
BENCH = {'c1': (1, 1), 'c50': (50, 1), 'c50p16': (50, 16)}  # connections, pipeline
WAIT_SLACK_S = 60


def names(point):
    """Return {'server', 'clients': [...], 'bench'} log names of a point."""
    tag = 'p%03d' % point['point']
    n = point.get('clients', 0)
    return {'server': '%s-server-%s' % (tag, point['server']),
            'clients': ['%s-kvload-c%d' % (tag, i) for i in range(1, n + 1)],
            'bench': '%s-bench' % tag}


def hosts(layout, clients):
    """Return (server host, [client hosts]) of a layout."""
    server, prefix = LAYOUTS[layout]
    return server, ['%s%d' % (prefix, i) for i in range(1, clients + 1)]


def server_argv(kind, params, fsync, aof_dir, max_keys, profile=None):
    """Return (argv, ready check, log suffix) of a fresh server of kind ours|redis."""
    if kind == 'redis':
        return (['redis-server', '--port', PORT, '--bind', '0.0.0.0',
                 '--protected-mode', 'no', '--save', '', '--appendonly', 'yes',
                 '--appendfsync', fsync, '--dir', aof_dir, '--daemonize', 'no',
                 '--logfile', ''], TcpListening(PORT), '.log')
    return ([sys.executable, '-m', 'nodes.kv.server', '--host', '0.0.0.0',
             '--port', PORT, '--log', os.path.join(aof_dir, 'kv.aof'),
             '--appendfsync', fsync, '--cache', params.cache,
             '--cache-size', params.cache_size, '--storage', params.storage,
             '--max-keys', max_keys] + (['--profile', profile] if profile else []),
            LogReady(), '.jsonl')


class Point:
    """One point's server and clients; run() returns what points.jsonl keeps."""

    def __init__(self, ctx, point):
        self.ctx, self.point, self.params = ctx, point, ctx.params
        self.names = names(point)
        self.aof_dir = None
        self.nodes = []
        self.loop = None                # the event loop our server reported (uvloop|asyncio)

    def run(self):
        """Run the point; nodes are stopped and the log removed on every path."""
        # a new folder of our own: nothing that was there before is ever removed
        self.aof_dir = point_folder(self.ctx, 'kvload-p%03d' % self.point['point'])
        try:
            result = getattr(self, '_' + self.point['kind'])()
            if self.loop is not None:
                result['loop'] = self.loop
            return result
        finally:
            self.ctx.stop_nodes([n for n in self.nodes if n.returncode is None])
            shutil.rmtree(self.aof_dir, ignore_errors=True)

    def _server(self, layout, fsync, max_keys, profile=None):
        """Start the point's server on the layout's server host; return (node, ip)."""
        host, _ = hosts(layout, 0)
        argv, ready, suffix = server_argv(self.point['server'], self.params, fsync,
                                          self.aof_dir, max_keys, profile)
        node = self.ctx.start_node(host, self.names['server'], argv, ready=ready,
                                   suffix=suffix, timeout=60)
        self.nodes.append(node)
        if isinstance(ready, LogReady) and ready.record:    # ours: its ready line
            self.loop = ready.record.get('loop')
        return node, self.ctx.host(host).IP()

    def _load(self):
        """Clients released together; each SET, GET, DEL of its own keys."""
        ctx, p, point = self.ctx, self.params, self.point
        n = point['clients']
        server, ip = self._server(point['layout'], p.appendfsync,
                                  max(n * p.requests * 2, 1000))
        _, client_hosts = hosts(point['layout'], n)
        clients = []
        for i, (host, name) in enumerate(zip(client_hosts, self.names['clients'])):
            argv = [sys.executable, '-m', 'workloads.kvload', '--host', ip,
                    '--port', PORT, '--clients', 1, '--client-base', i,
                    '--requests', p.requests, '--pipeline', p.pipeline,
                    '--barrier', '--timeout', p.timeout,
                    '--latencies', ctx.results.log_path(name, '.lat')]
            clients.append(ctx.start_node(host, name, argv, barrier=True,
                                          ready=LogReady()))
        self.nodes += clients
        with ctx.timed():
            ctx.release(clients, timeout=120)
            limit = WAIT_SLACK_S + 3 * n * p.requests / 1000.0
            for node in clients:
                node.wait(timeout=limit)
        failed = ['c%d' % i for i, node in enumerate(clients, 1)
                  if node.returncode != 0]
        alive = server.poll() is None
        if ctx.runs_programs():
            dbsize = self._dbsize(client_hosts[0], ip)     # redis-cli, a tool of its own
        else:
            dbsize = self._summary_keys(server)
        return {'failed_clients': failed, 'dbsize_after': dbsize, 'server_alive': alive}

    def _summary_keys(self, server):
        """Stop our server; return the keys its summary line reports, or None."""
        self.ctx.stop_nodes([server])
        with open(server.log_path) as f:
            records = [json.loads(line) for line in f]
        return next((r.get('keys') for r in records if r.get('event') == 'summary'), None)

    def _dbsize(self, host, ip):
        """Return the server's DBSIZE as redis-cli sees it, or None on failure."""
        node = self.ctx.start_node(host, self.names['bench'] + '-dbsize', [
            'redis-cli', '-h', ip, '-p', PORT, 'DBSIZE'], suffix='.txt', wait=False)
        self.nodes.append(node)
        node.wait(timeout=30)
        try:
            with open(node.log_path) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def _benchmark(self, tests, requests, connections, pipeline, fsync, profile=None):
        """Run redis-benchmark --csv from the first local client host."""
        server, ip = self._server('local', fsync, max(requests * 2, 1000), profile)
        _, (host,) = hosts('local', 1)
        argv = ['redis-benchmark', '-h', ip, '-p', PORT, '-t', tests, '-n', requests,
                '-c', connections, '-P', pipeline, '--csv']
        with self.ctx.timed():
            node = self.ctx.start_node(host, self.names['bench'], argv,
                                       suffix='.csv', wait=False)
            self.nodes.append(node)
            node.wait(timeout=WAIT_SLACK_S + requests / 500.0)
        return {'benchmark_status': node.returncode,
                'server_alive': server.poll() is None}

    def _bench(self):
        """redis-benchmark -t set,get with the point's connections and pipeline."""
        connections, pipeline = BENCH[self.point['bench']]
        return self._benchmark('set,get', self.params.bench_requests, connections,
                               pipeline, self.params.appendfsync)

    def _fsync(self):
        """redis-benchmark -t set, 50 connections, the point's appendfsync policy."""
        return self._benchmark('set', self.params.fsync_requests, 50, 1,
                               self.point['appendfsync'])

    def _profile(self):
        """redis-benchmark -c 50 -P 16 against our server under cProfile; the stats
        are written when the server stops (end of the point)."""
        path = str(self.ctx.results.log_path(self.names['server'], '.prof'))
        result = self._benchmark('set,get', self.params.bench_requests, 50, 16,
                                 self.params.appendfsync, profile=path)
        self.ctx.stop_nodes([n for n in self.nodes if n.returncode is None])
        result['profile_written'] = os.path.exists(path)
        return result


def failures(point, result):
    """Return a one-line description of what failed in a point, or None."""
    problems = []
    if result.get('failed_clients'):
        problems.append('clients %s failed' % ','.join(result['failed_clients']))
    if point['kind'] == 'load' and result.get('dbsize_after') != 0:
        problems.append('DBSIZE after the DELs was %s, not 0' % result.get('dbsize_after'))
    if result.get('benchmark_status') not in (None, 0):
        problems.append('redis-benchmark exited %s' % result['benchmark_status'])
    if result.get('profile_written') is False:
        problems.append('the server wrote no profile')
    if result.get('server_alive') is False:
        problems.append('the server had exited')
    return '; '.join(problems) or None
