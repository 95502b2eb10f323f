"""redis-server children for localhost tests: one plain server, or a Redis Cluster of several.

Each server listens on 127.0.0.1 and a port that was free a moment ago (retried if another
process takes it first), keeps nothing on disk but what its folder holds, and is killed by
its PID.  ``redis_cluster`` joins N ``--cluster-enabled yes`` servers into one Redis
Cluster the way an operator would by hand: each node is given a contiguous slot range
with ``CLUSTER ADDSLOTSRANGE``, the first meets the others (``CLUSTER MEET``), and every
node is polled until it reports ``cluster_state:ok`` and knows all N owners; so tests of
cluster clients run against Redis itself, independent of this project's cluster code.
"""

import os
import shutil
import socket
import subprocess
import time

import pytest

from tests.ports import accepts, free_port

REDIS = shutil.which('redis-server')
needs_redis = pytest.mark.skipif(REDIS is None, reason='redis-server not installed '
                                 '(Debian package redis-server)')
CLUSTER_BUS_OFFSET = 10000      # Redis Cluster's bus listens on port + 10000
SLOTS = 16384


def _bus_free(port):
    """True if the cluster bus port of port can be bound on loopback right now."""
    if port + CLUSTER_BUS_OFFSET > 65535:
        return False
    with socket.socket() as sock:
        try:
            sock.bind(('127.0.0.1', port + CLUSTER_BUS_OFFSET))
        except OSError:
            return False
    return True


class RedisProc:
    """One redis-server child on 127.0.0.1 (cluster_enabled: a Redis Cluster node)."""

    def __init__(self, folder, cluster_enabled=False):
        os.makedirs(folder, exist_ok=True)
        for _ in range(5):          # another process may take the port between probe and bind
            self.port = free_port()
            if cluster_enabled and not _bus_free(self.port):
                continue
            argv = [REDIS, '--port', str(self.port), '--bind', '127.0.0.1', '--save', '',
                    '--appendonly', 'no', '--daemonize', 'no', '--dir', str(folder)]
            if cluster_enabled:
                argv += ['--cluster-enabled', 'yes', '--cluster-config-file',
                         os.path.join(str(folder), 'nodes-%d.conf' % self.port)]
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 20
            while self.proc.poll() is None and time.monotonic() < deadline:
                if accepts(self.port):
                    return
                time.sleep(0.02)
            self.kill()
        pytest.fail('redis-server did not start on a free port')

    @property
    def addr(self):
        """'127.0.0.1:port'."""
        return '127.0.0.1:%d' % self.port

    def client(self):
        """A redis-py connection to this server."""
        import redis
        return redis.Redis(host='127.0.0.1', port=self.port, socket_timeout=10)

    def kill(self):
        """SIGKILL the server (by its PID) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture(name='server')
def redis_server(tmp_path):
    """A fresh redis-server for one test (import it into a test module to use it)."""
    srv = RedisProc(tmp_path)
    try:
        yield srv
    finally:
        srv.kill()


def slot_ranges(n):
    """n contiguous slot ranges [(start, end)] covering all 16384 slots."""
    bounds = [SLOTS * k // n for k in range(n + 1)]
    return [(bounds[k], bounds[k + 1] - 1) for k in range(n)]


def redis_cluster(folder, n=3, timeout=60):
    """n RedisProc cluster nodes joined into one cluster, node k owning slot_ranges(n)[k]."""
    nodes = []
    try:
        for k in range(n):
            nodes.append(RedisProc(os.path.join(str(folder), 'node%d' % k), True))
        for node, (start, end) in zip(nodes, slot_ranges(n)):
            node.client().execute_command('CLUSTER', 'ADDSLOTSRANGE', start, end)
        for node in nodes[1:]:
            nodes[0].client().execute_command('CLUSTER', 'MEET', '127.0.0.1', node.port)
        deadline = time.monotonic() + timeout
        while not all(_settled(node, n) for node in nodes):
            if time.monotonic() > deadline:
                pytest.fail('the Redis Cluster did not reach cluster_state:ok in %d s' % timeout)
            time.sleep(0.1)
        return nodes
    except BaseException:
        for node in nodes:
            node.kill()
        raise


def _settled(node, n):
    """True when node reports cluster_state:ok and n slot owners."""
    client = node.client()
    info = client.execute_command('CLUSTER', 'INFO')
    info = info.decode() if isinstance(info, bytes) else info
    if 'cluster_state:ok' not in info:
        return False
    return len(client.execute_command('CLUSTER', 'SLOTS')) == n


def node_id(node):
    """A cluster node's own id."""
    return node.client().execute_command('CLUSTER', 'MYID').decode()


def move_slot(nodes, slot, source, target):
    """Move a slot and its keys from nodes[source] to nodes[target] the way the cluster
    tutorial does by hand: IMPORTING on the target, MIGRATING on the source, MIGRATE of
    every key in the slot, then SETSLOT NODE on target, source and every other node."""
    src, dst = nodes[source], nodes[target]
    dst.client().execute_command('CLUSTER', 'SETSLOT', slot, 'IMPORTING', node_id(src))
    src.client().execute_command('CLUSTER', 'SETSLOT', slot, 'MIGRATING', node_id(dst))
    while True:
        keys = src.client().execute_command('CLUSTER', 'GETKEYSINSLOT', slot, 100)
        if not keys:
            break
        src.client().execute_command('MIGRATE', '127.0.0.1', dst.port, '', 0, 10000,
                                     'KEYS', *keys)
    for node in [dst, src] + [m for m in nodes if m not in (src, dst)]:
        node.client().execute_command('CLUSTER', 'SETSLOT', slot, 'NODE', node_id(dst))
