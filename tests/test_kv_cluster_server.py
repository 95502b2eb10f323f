"""Three KV servers on loopback as one cluster, driven by Redis Cluster clients nobody here wrote.

Every server gets the same ``--cluster`` layout and its own ``--node-id``. redis-cli -c writes
keys through one entry server and follows the -MOVED redirects; redis-py's RedisCluster reads
CLUSTER SLOTS and COMMAND and sends each key to its owner; ``redis-cli --cluster check`` and
``redis-benchmark --cluster`` inspect and load the cluster. Where each key ended up is read
back per server (DBSIZE) and compared with the ring's own count. Bad command lines are refused
with one sentence before anything starts.
"""

import shutil
import subprocess

import pytest
from redis.cluster import ClusterNode, RedisCluster

from nodes.kv.cluster import SLOTS, Ring, key_slot, parse_layout
from tests.kv_proc import KVProc, run_server
from tests.ports import free_port
from tests.test_kv_server import cli

needs_tools = pytest.mark.skipif(
    not (shutil.which('redis-cli') and shutil.which('redis-benchmark')),
    reason='needs Debian redis-tools (redis-cli, redis-benchmark)')


class Trio:
    """Three cluster members s1..s3 on free loopback ports, each a KVProc."""

    def __init__(self, *extra):
        self.ports = [free_port() for _ in range(3)]
        self.spec = ','.join('s%d=127.0.0.1:%d' % (i + 1, p) for i, p in enumerate(self.ports))
        self.ring = Ring(parse_layout(self.spec))
        self.procs = []
        for i, port in enumerate(self.ports):
            self.procs.append(KVProc('--cluster', self.spec, '--node-id', 's%d' % (i + 1),
                                     '--port', port, *extra))

    def dbsizes(self):
        """Keys held by each server, s1..s3."""
        return [int(cli(port, 'DBSIZE')) for port in self.ports]

    def stop(self):
        """Stop every server; return their summary records."""
        return [proc.stop()[0] for proc in self.procs]

    def kill(self):
        for proc in self.procs:
            proc.kill()


@pytest.fixture
def trio():
    servers = Trio()
    try:
        yield servers
    finally:
        servers.kill()


def test_ready_lines_name_the_node_and_its_slots(trio):
    ready = [proc.ready for proc in trio.procs]
    assert [r['node'] for r in ready] == ['s1', 's2', 's3']
    assert [r['port'] for r in ready] == trio.ports
    assert [r['slots'] for r in ready] == trio.ring.slot_counts()
    assert sum(r['slots'] for r in ready) == SLOTS
    assert [r['slot_share'] for r in ready] == trio.ring.shares()
    assert {r['vnodes'] for r in ready} == {1024}


@needs_tools
def test_redis_cli_follows_moved_and_each_key_lands_on_its_owner(trio):
    keys = ['key:%d' % i for i in range(200)]
    sets = ''.join('SET %s value-of-%s\n' % (k, k) for k in keys)
    out = subprocess.run(['redis-cli', '-c', '-p', str(trio.ports[0])], input=sets,
                         capture_output=True, text=True, timeout=60)
    replies = [line for line in out.stdout.splitlines() if not line.startswith('-> Redirected')]
    assert replies == ['OK'] * 200, out.stderr
    assert 'Redirected to slot' in out.stdout
    sizes = trio.dbsizes()
    assert sum(sizes) == 200 and sizes == trio.ring.key_counts([k.encode() for k in keys])
    assert min(sizes) > 0
    gets = ''.join('GET %s\n' % k for k in keys)
    out = subprocess.run(['redis-cli', '-c', '-p', str(trio.ports[1])], input=gets,
                         capture_output=True, text=True, timeout=60)
    values = [line for line in out.stdout.splitlines() if not line.startswith('-> Redirected')]
    assert values == ['value-of-%s' % k for k in keys]
    # without -c, redis-cli prints the redirect (its non-tty form: no '(error)')
    other = next(k for k in keys if trio.ring.owner_index(key_slot(k.encode())) != 0)
    raw = subprocess.run(['redis-cli', '-p', str(trio.ports[0]), 'GET', other],
                         capture_output=True, text=True, timeout=30).stdout
    assert raw.split() == ['MOVED', str(key_slot(other.encode())), '127.0.0.1:%d'
                           % trio.ring.owner(key_slot(other.encode()))[1].port]


def test_redis_py_cluster_client_sets_gets_and_deletes(trio):
    rc = RedisCluster(startup_nodes=[ClusterNode('127.0.0.1', trio.ports[2])],
                      socket_timeout=10)
    try:
        keys = [b'k%d' % i for i in range(300)] + [b'user{1000', b'}{', b'{}x', b'\xff\x00{\xfe}',
                                                   b'{tag}a', b'{tag}b']
        for key in keys:
            assert rc.set(key, b'v' + key)
        assert [rc.get(key) for key in keys] == [b'v' + key for key in keys]
        assert trio.dbsizes() == trio.ring.key_counts(keys)
        assert rc.dbsize(target_nodes=RedisCluster.PRIMARIES) == len(keys)
        assert rc.exists(*keys[:100]) == 100            # split per slot by redis-py
        assert rc.delete(*keys[:150]) == 150
        assert rc.exists(*keys) == len(keys) - 150
        assert rc.get(keys[0]) is None and rc.get(keys[-1]) == b'v' + keys[-1]
        assert rc.cluster_keyslot('foo') == 12182
        assert sum(trio.dbsizes()) == len(keys) - 150
        assert len(rc.get_primaries()) == 3
    finally:
        rc.close()
    summaries = trio.stop()
    assert all(s['commands'] > 0 for s in summaries)


@needs_tools
def test_redis_cli_cluster_check_and_redis_benchmark_cluster(trio):
    check = subprocess.run(['redis-cli', '--cluster', 'check', '127.0.0.1:%d' % trio.ports[0]],
                           capture_output=True, text=True, timeout=60)
    assert '[OK] All nodes agree about slots configuration.' in check.stdout, check.stdout[-2000:]
    assert '[OK] All 16384 slots covered.' in check.stdout
    bench = subprocess.run(['redis-benchmark', '--cluster', '-p', str(trio.ports[0]), '-t',
                            'set,get', '-n', '3000', '-c', '6', '-q', '--csv'],
                           capture_output=True, text=True, timeout=120)
    assert bench.returncode == 0, bench.stderr
    print(bench.stdout)
    assert 'Cluster has 3 master nodes' in bench.stdout
    sizes = trio.dbsizes()
    assert all(size > 0 for size in sizes)     # every server took SETs for its own slots


def test_a_server_alone_in_a_layout_owns_every_slot_and_keeps_its_log(tmp_path):
    port = free_port()
    log = tmp_path / 'kv.aof'
    spec = 'solo=127.0.0.1:%d' % port
    with KVProc('--cluster', spec, '--node-id', 'solo', '--port', port, '--log', log) as proc:
        assert proc.ready['slots'] == SLOTS and proc.ready['slot_share'] == 1.0
        assert cli(port, 'SET', '{a}1', 'x') == 'OK'
        assert cli(port, 'SET', '{a}2', 'y') == 'OK'
        proc.stop()
    with KVProc('--cluster', spec, '--node-id', 'solo', '--port', port, '--log', log) as proc:
        assert cli(port, 'CLUSTER', 'COUNTKEYSINSLOT', str(key_slot(b'a'))) == '2'
        assert cli(port, 'GET', '{a}2') == 'y'


@pytest.mark.parametrize('args, words', [
    (['--cluster', 's1=127.0.0.1:7001'], '--cluster needs --node-id NAME'),
    (['--node-id', 's1'], '--node-id needs --cluster'),
    (['--vnodes', '16'], '--vnodes needs --cluster'),
    (['--cluster', 's1=127.0.0.1:7001', '--node-id', 's9'],
     '--node-id s9 is not in --cluster (its members are s1)'),
    (['--cluster', 's1=127.0.0.1', '--node-id', 's1'], 'is not HOST:PORT'),
    (['--cluster', 's1=127.0.0.1:7001,', '--node-id', 's1'], 'empty entry'),
    (['--cluster', 's1=127.0.0.1:7001*x', '--node-id', 's1'], 'weight must be an integer'),
    (['--cluster', 's1=127.0.0.1:7001,s1=127.0.0.1:7002', '--node-id', 's1'], 'twice'),
    (['--cluster', '', '--node-id', 's1'], 'the cluster layout is empty'),
    (['--cluster', 's1=127.0.0.1:7001', '--node-id', 's1', '--vnodes', '0'], 'is below 1'),
    (['--cluster', 's1=127.0.0.1:7001', '--node-id', 's1', '--vnodes', '4097'], 'above 4096'),
    (['--cluster', 's1=127.0.0.1:7001', '--node-id', 's1', '--port', '7002'],
     "--port 7002 differs from s1's port 7001 in --cluster"),
    (['--cluster', 's1=127.0.0.1:7001,s2=127.0.0.1:7002', '--node-id', 's1',
      '--max-pending-bytes', '2048'], 'below the largest CLUSTER reply'),
])
def test_bad_cluster_arguments_are_one_sentence_before_start(args, words):
    r = run_server(*args)
    assert r.returncode == 2 and r.stdout == ''
    last = r.stderr.strip().splitlines()[-1]
    assert words in last and 'Traceback' not in r.stderr, r.stderr
