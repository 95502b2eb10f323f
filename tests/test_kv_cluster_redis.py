"""Our cluster against Redis Cluster itself: the slot of a key, and the form of every reply.

redis-server ``--cluster-enabled yes`` is the reference nobody here wrote. Its ``CLUSTER
KEYSLOT`` must agree with `nodes.kv.cluster.key_slot` on a few hundred keys chosen to hit
the corners of the hash-tag rule (empty tags, a ``{`` with no ``}``, several tags, binary
bytes). Then a two-node Redis Cluster and two of our servers answer the same requests; the
replies must have the same structure and wording once ids, ports and slot numbers, which
differ by design, are masked.
"""

import random
import re

import hiredis
import pytest
import redis

from nodes.kv.cluster import Ring, key_slot, parse_layout
from tests.kv_proc import Client, KVProc, command
from tests.ports import free_port
from tests.redis_proc import RedisProc, needs_redis, redis_cluster

pytestmark = needs_redis


def tricky_keys(n=400, seed=10):
    """Keys for the hash-tag rule: random bytes around '{' and '}' and fixed corner cases."""
    rnd = random.Random(seed)
    alphabet = b'{}{}ab\x00\xff '
    keys = [b'', b'{', b'}', b'{}', b'}{', b'{{}}', b'{a}', b'a{b', b'a}b{c', b'{}{a}',
            b'{a}{b}', b'{{a}}', b'x{\xff\x00}y', b'foo{}{bar}', b'foo{{bar}}zap']
    while len(keys) < n:
        length = rnd.randrange(0, 24)
        keys.append(bytes(rnd.choice(alphabet) if rnd.random() < 0.5 else rnd.randrange(256)
                          for _ in range(length)))
    return keys


def test_key_slot_agrees_with_redis_cluster_keyslot(tmp_path):
    node = RedisProc(tmp_path, cluster_enabled=True)
    try:
        client = node.client()
        keys = tricky_keys()
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.execute_command('CLUSTER', 'KEYSLOT', key)
        theirs = pipe.execute()
    finally:
        node.kill()
    ours = [key_slot(key) for key in keys]
    wrong = [(k, o, t) for k, o, t in zip(keys, ours, theirs) if o != t]
    assert not wrong and len(keys) == 400


def masked(reply):
    """Raw reply bytes with node ids, ip:port@bus and numbers masked (they differ by design)."""
    reply = re.sub(rb'[0-9a-f]{40}', b'ID', reply)
    reply = re.sub(rb'127\.0\.0\.1:\d+(@\d+)?', b'ADDR', reply)
    reply = re.sub(rb'\$\d+\r\n', b'$N\r\n', reply)
    return re.sub(rb'\d+', b'N', reply)


def shape(value):
    """The structure of a parsed reply: element types, with the names in maps kept."""
    if isinstance(value, list):
        return [shape(v) for v in value]
    if isinstance(value, bytes) and not value[:1].isdigit() and not re.fullmatch(
            rb'[0-9a-f]{40}|[\d.]*', value):
        return value
    return type(value).__name__


def raw(port, *args):
    """The raw bytes of one reply."""
    c = Client(port)
    try:
        c.send(command(*args))
        data = b''
        reader = hiredis.Reader(replyError=lambda e: e)
        while True:
            chunk = c.sock.recv(1 << 20)
            assert chunk, 'connection closed'
            data += chunk
            reader.feed(chunk)
            if reader.gets() is not False:
                return data
    finally:
        c.close()


@pytest.fixture(scope='module')
def both(tmp_path_factory):
    """(Redis Cluster node ports, our node ports, our ring), two nodes each."""
    real = redis_cluster(tmp_path_factory.mktemp('redis'), n=2)
    ports = [free_port(), free_port()]
    spec = 'a=127.0.0.1:%d,b=127.0.0.1:%d' % tuple(ports)
    ours = [KVProc('--cluster', spec, '--node-id', name, '--port', port)
            for name, port in zip('ab', ports)]
    try:
        yield [n.port for n in real], ports, Ring(parse_layout(spec))
    finally:
        for proc in ours:
            proc.kill()
        for n in real:
            n.kill()


def foreign_key(port_index, owner_of):
    """A key that the node at port_index does not own."""
    return next(b'k%d' % i for i in range(1000) if owner_of(key_slot(b'k%d' % i)) != port_index)


@pytest.mark.parametrize('args', [
    ('CLUSTER', 'MYID'), ('CLUSTER', 'KEYSLOT', '{user}x'),
    ('CLUSTER', 'COUNTKEYSINSLOT', '5'), ('CLUSTER', 'COUNTKEYSINSLOT', '16384'),
    ('CLUSTER', 'COUNTKEYSINSLOT', 'x'), ('CLUSTER', 'KEYSLOT'), ('CLUSTER', 'FOO'),
    ('CLUSTER',), ('READONLY',), ('READWRITE',), ('DEL', 'a', 'b'), ('EXISTS', 'a', 'b', 'c'),
])
def test_replies_match_redis_cluster_once_masked(both, args):
    real, ours, _ = both
    assert masked(raw(ours[0], *args)) == masked(raw(real[0], *args))


def test_cluster_info_matches_redis_cluster_without_bus_traffic(both):
    real, ours, _ = both
    # Redis lists the bus messages of each type it has exchanged; ours has no bus, and a
    # Redis node that has exchanged none (alone) lists none either
    theirs = re.sub(rb'cluster_stats_messages_[a-z]+_(sent|received):\d+\r\n', b'',
                    raw(real[0], 'CLUSTER', 'INFO'))
    assert masked(raw(ours[0], 'CLUSTER', 'INFO')) == masked(theirs)


def test_moved_matches_redis_cluster_once_masked(both):
    real, ours, ring = both
    # the real cluster's node 0 owns slots 0..8191 (tests/redis_proc.slot_ranges)
    key_real = foreign_key(0, lambda slot: 0 if slot < 8192 else 1)
    key_ours = foreign_key(0, ring.owner_index)
    for args in (('GET', '%s'), ('SET', '%s', 'v'), ('DEL', '%s')):
        theirs = raw(real[0], *[a.replace('%s', key_real.decode()) for a in args])
        mine = raw(ours[0], *[a.replace('%s', key_ours.decode()) for a in args])
        assert masked(mine) == masked(theirs) == b'-MOVED N ADDR\r\n'


def test_slots_shards_nodes_have_redis_clusters_structure(both):
    real, ours, _ = both
    parse = redis.Redis(port=real[0]).execute_command
    mine = redis.Redis(port=ours[0]).execute_command
    theirs_slots, my_slots = parse('CLUSTER', 'SLOTS'), mine('CLUSTER', 'SLOTS')
    assert {repr(shape(e)) for e in my_slots} == {repr(shape(e)) for e in theirs_slots}
    for shards in (mine('CLUSTER', 'SHARDS'), parse('CLUSTER', 'SHARDS')):
        assert len(shards) == 2
        for shard in shards:
            assert shard[0::2] == [b'slots', b'nodes'] and len(shard) == 4
            assert len(shard[1]) % 2 == 0 and set(map(type, shard[1])) == {int}
            assert [shape(n) for n in shard[3]] == [[
                b'id', 'bytes', b'port', 'int', b'ip', 'bytes', b'endpoint', 'bytes', b'role',
                b'master', b'replication-offset', 'int', b'health', b'online']]
    line = re.compile(r'ID ADDR (myself,)?master - N N N connected( N(-N)?)+\Z')
    for text in (mine('CLUSTER', 'NODES'), parse('CLUSTER', 'NODES')):
        lines = masked(text).decode().splitlines()
        assert len(lines) == 2 and all(line.match(x) for x in lines), lines
        assert sum('myself' in x for x in lines) == 1
