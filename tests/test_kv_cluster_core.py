"""The KV core as a cluster member, in memory (nodes/kv/cluster_commands.py, core.py).

Three cores share one layout; a tiny client here follows -MOVED the way redis-cli -c does, so
every key must end on the one core the ring names. Replies are parsed with hiredis (the C
parser redis-py uses) and their wording is Redis 7.0's. A core without a layout must answer
as before, with Redis's errors for the cluster-only commands.
"""

import hashlib
import re

import hiredis
import pytest

from nodes.kv import aof, cluster_commands
from nodes.kv.cluster import SLOTS, Member, Ring, key_slot
from nodes.kv.connection import slice_bytes
from nodes.kv.core import KVConfig, KVCore
from tests.test_kv_core import ask, cmd

LAYOUT = [Member('s%d' % i, '127.0.0.1', 7000 + i) for i in (1, 2, 3)]
RING = Ring(LAYOUT)
MOVED = re.compile(rb'-MOVED (\d+) 127\.0\.0\.1:(\d+)\r\n\Z')


def node(name='s1', **cfg):
    """A cluster core (no log) and one connection."""
    core = KVCore(KVConfig(append_log=False, cluster=RING, node_id=name, **cfg))
    return core, core.connect(0.0)


def parse(reply):
    """A reply as hiredis reads it (errors come back as ReplyError objects)."""
    reader = hiredis.Reader()
    reader.feed(reply)
    value = reader.gets()
    assert value is not False and reader.gets() is False, reply
    return value


def test_keys_are_served_by_their_owner_and_redirected_elsewhere():
    cores = {m.port: node(m.name) for m in LAYOUT}
    keys = [b'key:%d' % i for i in range(300)] + [b'{user1}.a', b'{user1}.b', b'a{b', b'}{x}']
    entry = cores[7001][1]
    for key in keys:
        conn, hops = entry, 0
        while True:             # follow MOVED as redis-cli -c does
            reply = conn.receive(cmd('SET', key, b'v' + key), 1.0).replies
            m = MOVED.match(reply)
            if m is None:
                break
            assert int(m.group(1)) == key_slot(key)
            conn, hops = cores[int(m.group(2))][1], hops + 1
        assert reply == b'+OK\r\n' and hops <= 1
        owner = RING.owner(key_slot(key))[1]
        assert cores[owner.port][1] is conn
    counts = [cores[m.port][0].info()['keys'] for m in LAYOUT]
    assert counts == RING.key_counts(keys) and sum(counts) == len(keys)
    for key in keys:
        port = RING.owner(key_slot(key))[1].port
        for p, (_, conn) in cores.items():
            got = ask(conn, 'GET', key)
            assert got == (b'$%d\r\n%b\r\n' % (len(key) + 1, b'v' + key) if p == port
                           else b'-MOVED %d 127.0.0.1:%d\r\n' % (key_slot(key), port))


def own_and_foreign(name='s1'):
    """A key this node owns and one it does not."""
    index = RING.index_of(name)
    keys = [b'k%d' % i for i in range(100)]
    mine = next(k for k in keys if RING.owner_index(key_slot(k)) == index)
    other = next(k for k in keys if RING.owner_index(key_slot(k)) != index)
    return mine, other


def test_multi_key_commands_need_one_slot():
    core, c = node()
    mine, other = own_and_foreign()
    crossslot = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    assert ask(c, 'SET', mine, 'v') == b'+OK\r\n'
    assert ask(c, 'DEL', mine, other) == crossslot
    assert ask(c, 'EXISTS', mine, other) == crossslot
    assert ask(c, 'EXISTS', mine, mine, mine) == b':3\r\n'
    assert MOVED.match(ask(c, 'EXISTS', other, other))
    tag = next(b'{t%d}' % i for i in range(100)
               if RING.owner_index(key_slot(b't%d' % i)) == RING.index_of('s1'))
    for suffix in (b'a', b'b', b'c'):
        assert ask(c, 'SET', tag + suffix, suffix) == b'+OK\r\n'
    assert ask(c, 'DEL', tag + b'a', tag + b'b', tag + b'x') == b':2\r\n'
    slot = key_slot(tag)
    assert ask(c, 'CLUSTER', 'COUNTKEYSINSLOT', str(slot)) == b':1\r\n'
    assert core.info()['keys'] == 2


def test_arity_and_syntax_errors_come_before_or_after_the_redirect_as_in_redis():
    _, c = node()
    mine, other = own_and_foreign()
    assert ask(c, 'GET') == b"-ERR wrong number of arguments for 'get' command\r\n"
    assert MOVED.match(ask(c, 'SET', other, 'v', 'EX', '1'))
    assert ask(c, 'SET', mine, 'v', 'EX', '1') == b'-ERR syntax error\r\n'


def test_count_of_keys_per_slot_follows_set_del_flush_and_recovery():
    core, c = node(max_keys=2)
    mine, _ = own_and_foreign()
    slot = key_slot(mine)
    count = [b'CLUSTER', b'COUNTKEYSINSLOT', b'%d' % slot]
    for _ in range(2):                  # a second SET of the same key adds nothing
        ask(c, 'SET', mine, 'v')
    assert ask(c, *count) == b':1\r\n'
    ask(c, 'DEL', mine)
    assert ask(c, *count) == b':0\r\n'
    ask(c, 'SET', mine, 'v')
    ask(c, 'FLUSHALL')
    assert ask(c, *count) == b':0\r\n'
    log = bytearray()
    aof.append_set(log, mine, b'v')
    aof.append_set(log, b'elsewhere', b'v')     # owned or not, a recovered key is counted
    rec = aof.recover([bytes(log)], 'memory', 1 << 20)
    again = KVCore(KVConfig(cluster=RING, node_id='s1'), recovery=rec)
    c2 = again.connect(0.0)
    assert ask(c2, *count) == b':1\r\n'
    assert ask(c2, 'CLUSTER', 'COUNTKEYSINSLOT', str(key_slot(b'elsewhere'))) == b':1\r\n'


@pytest.mark.parametrize('args, reply', [
    (('CLUSTER', 'KEYSLOT', 'foo'), b':12182\r\n'),
    (('CLUSTER', 'KEYSLOT', '{}'), b':15257\r\n'),
    (('cluster', 'keyslot', '{user1000}.following'), b':3443\r\n'),
    (('CLUSTER', 'MYID'), b'$40\r\n%s\r\n' % hashlib.sha1(b's1').hexdigest().encode()),
    (('CLUSTER', 'COUNTKEYSINSLOT', '16384'), b'-ERR Invalid slot\r\n'),
    (('CLUSTER', 'COUNTKEYSINSLOT', '-1'), b'-ERR Invalid slot\r\n'),
    (('CLUSTER', 'COUNTKEYSINSLOT', 'x'), b'-ERR value is not an integer or out of range\r\n'),
    (('CLUSTER', 'COUNTKEYSINSLOT', '9' * 5000),
     b'-ERR value is not an integer or out of range\r\n'),
    (('CLUSTER', 'KEYSLOT'), b"-ERR wrong number of arguments for 'cluster|keyslot' command\r\n"),
    (('CLUSTER', 'INFO', 'x'), b"-ERR wrong number of arguments for 'cluster|info' command\r\n"),
    (('CLUSTER',), b"-ERR wrong number of arguments for 'cluster' command\r\n"),
    (('CLUSTER', 'FOO'), b"-ERR unknown subcommand 'FOO'. Try CLUSTER HELP.\r\n"),
    (('CLUSTER', 'MEET', '127.0.0.1', '7009'),
     b'-ERR CLUSTER MEET is not supported: the layout of this cluster is fixed by --cluster '
     b'at start-up\r\n'),
    (('READONLY',), b'+OK\r\n'),
    (('READWRITE',), b'+OK\r\n'),
])
def test_cluster_subcommands_with_redis_wording(args, reply):
    _, c = node()
    assert ask(c, *args) == reply


def test_cluster_slots_nodes_shards_info_describe_the_ring():
    _, c = node('s2')
    slots = parse(ask(c, 'CLUSTER', 'SLOTS'))
    owners = [None] * SLOTS
    for first, last, (host, port, node_id, meta) in slots:
        assert host == b'127.0.0.1' and meta == []
        member = next(m for m in LAYOUT if m.port == port)
        assert node_id == member.node_id.encode()
        owners[first:last + 1] = [member.name] * (last - first + 1)
    assert owners == [RING.owner(s)[1].name for s in range(SLOTS)]
    lines = parse(ask(c, 'CLUSTER', 'NODES')).decode().splitlines()
    assert len(lines) == 3
    for line, member in zip(lines, LAYOUT):
        fields = line.split()
        assert fields[:8] == [member.node_id, '127.0.0.1:%d@%d' % (member.port, member.port + 10000),
                              'myself,master' if member.name == 's2' else 'master', '-', '0',
                              '0', str(LAYOUT.index(member) + 1), 'connected']
        owned = sum(int(r.split('-')[-1]) - int(r.split('-')[0]) + 1 for r in fields[8:])
        assert owned == RING.slot_counts()[LAYOUT.index(member)]
    shards = parse(ask(c, 'CLUSTER', 'SHARDS'))
    assert [s[0] for s in shards] == [b'slots'] * 3 and [s[2] for s in shards] == [b'nodes'] * 3
    assert [sum(b - a + 1 for a, b in zip(s[1][::2], s[1][1::2])) for s in shards] == \
        RING.slot_counts()
    assert shards[1][3][0][:2] == [b'id', LAYOUT[1].node_id.encode()]
    info = dict(line.split(':') for line in parse(ask(c, 'CLUSTER', 'INFO')).decode().split())
    assert info['cluster_state'] == 'ok' and info['cluster_slots_assigned'] == '16384'
    assert info['cluster_known_nodes'] == '3' and info['cluster_size'] == '3'
    assert info['cluster_my_epoch'] == '2'


def test_command_tells_a_cluster_client_where_the_keys_are():
    _, c = node()
    table = {e[0]: e for e in parse(ask(c, 'COMMAND'))}
    assert table[b'get'][1:6] == [2, [b'readonly', b'fast'], 1, 1, 1]
    assert table[b'set'][3:6] == [1, 1, 1] and table[b'del'][3:6] == [1, -1, 1]
    assert table[b'exists'][3:6] == [1, -1, 1] and table[b'ping'][3:6] == [0, 0, 0]
    assert b'cluster' in table and len(table[b'get']) == 10
    assert parse(ask(c, 'COMMAND', 'COUNT')) == len(table)
    assert parse(ask(c, 'COMMAND', 'INFO', 'GET', 'nosuch')) == [table[b'get'], None]
    assert ask(c, 'COMMAND', 'DOCS') == b'*0\r\n'


def test_info_says_whether_cluster_mode_is_on():
    _, c = node()
    text = ask(c, 'INFO').decode()
    assert '# Cluster\r\ncluster_enabled:1\r\n' in text and 'redis_mode:cluster' in text
    alone = KVCore(KVConfig()).connect(0.0)
    text = ask(alone, 'INFO').decode()
    assert '# Cluster\r\ncluster_enabled:0\r\n' in text and 'redis_mode:standalone' in text
    assert ask(alone, 'INFO', 'cluster') == b'$30\r\n# Cluster\r\ncluster_enabled:0\r\n\r\n'


@pytest.mark.parametrize('args, reply', [
    (('CLUSTER', 'INFO'), b'-ERR This instance has cluster support disabled\r\n'),
    (('CLUSTER', 'SLOTS'), b'-ERR This instance has cluster support disabled\r\n'),
    (('READONLY',), b'-ERR This instance has cluster support disabled\r\n'),
    (('READWRITE',), b'-ERR This instance has cluster support disabled\r\n'),
    (('CLUSTER', 'FOO'), b"-ERR unknown subcommand 'FOO'. Try CLUSTER HELP.\r\n"),
    (('COMMAND',), b'*0\r\n'),
])
def test_a_standalone_core_answers_cluster_commands_as_redis_does(args, reply):
    c = KVCore(KVConfig()).connect(0.0)
    assert ask(c, *args) == reply


def test_standalone_core_serves_every_key():
    core = KVCore(KVConfig())
    c = core.connect(0.0)
    mine, other = own_and_foreign()
    assert ask(c, 'SET', other, 'v') == b'+OK\r\n' and ask(c, 'DEL', mine, other) == b':1\r\n'
    assert core.info().keys() == KVCore(KVConfig()).info().keys() and 'node' not in core.info()


def test_info_and_config_errors():
    core, _ = node('s3')
    assert core.cluster_info() == {'node': 's3', 'slots': RING.slot_counts()[2],
                                   'slot_share': RING.slot_counts()[2] / SLOTS, 'vnodes': 1024}
    with pytest.raises(ValueError, match='not in the cluster layout'):
        KVConfig(cluster=RING, node_id='s9')
    with pytest.raises(ValueError, match='go together'):
        KVConfig(cluster=RING)
    with pytest.raises(ValueError, match='go together'):
        KVConfig(node_id='s1')


def test_large_cluster_replies_shrink_the_input_slices():
    ten = Ring([Member('s%d' % i, '127.0.0.1', 7000 + i) for i in range(1, 11)])
    core = KVCore(KVConfig(append_log=False, cluster=ten, node_id='s1'))
    largest = core.largest_reply()
    c = core.connect(0.0)
    assert largest == len(ask(c, 'CLUSTER', 'SLOTS')) > 100_000
    assert KVCore(KVConfig()).largest_reply() == 0
    # 5-byte requests each answered by `largest` bytes still fit the pending budget
    step = slice_bytes(64 << 20, 100, largest)
    assert step // 5 * largest <= 64 << 20 < slice_bytes(64 << 20, 100) // 5 * largest
    assert cluster_commands.ClusterNode(ten, 's1').largest_reply() == largest


def test_select_of_a_huge_number_is_an_error_reply_not_an_exception():
    c = KVCore(KVConfig()).connect(0.0)     # int() of > 4300 digits raises ValueError
    assert ask(c, 'SELECT', '1' * 5000) == b'-ERR value is not an integer or out of range\r\n'
