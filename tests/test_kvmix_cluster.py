"""workloads.kvmix against a real Redis Cluster of three redis-server nodes on 127.0.0.1.

The cluster is built by hand (``tests.redis_proc.redis_cluster``: ADDSLOTSRANGE, MEET,
cluster_state:ok), so routing and redirects are checked against Redis itself, not
against this project's own cluster code.  What kvmix says it sent to each node
(``per_server``) is compared with what each node counted (INFO commandstats: executed
plus rejected calls, a MOVED being a rejected one) and with where the keys ended up.
"""

import collections
import time

import pytest

from nodes.kv.cluster import key_slot
from tests import kvmix_proc as kvmix
from tests.redis_proc import move_slot, needs_redis, node_id, redis_cluster, slot_ranges
from workloads.keyspace import Keyspace

pytestmark = needs_redis
KEYS, SEED = 3000, 21


@pytest.fixture
def cluster(tmp_path):
    """Three Redis Cluster nodes owning a third of the slots each."""
    nodes = redis_cluster(tmp_path, 3)
    try:
        yield nodes
    finally:
        for node in nodes:
            node.kill()


def _owner(slot, n=3):
    """Index of the node that owns slot in redis_cluster's initial layout."""
    return next(k for k, (start, end) in enumerate(slot_ranges(n)) if start <= slot <= end)


def _expected_keys(owners):
    """{node index: keys of the key space it owns} for owners(slot) -> node index."""
    counts = collections.Counter(owners(key_slot(b'key:%d' % i)) for i in range(KEYS))
    return [counts[k] for k in range(3)]


def _args(*more):
    return ['--keys', KEYS, '--seed', SEED] + [str(a) for a in more]


def test_requests_go_straight_to_the_owners(cluster):
    """Asked through the second node, kvmix learns all three owners; the preload puts each
    key on its owner; in the mix each node receives exactly what per_server says and no
    request is redirected."""
    addrs = [node.addr for node in cluster]
    status, records, err = kvmix.run('--servers', addrs[1], '--phase', 'preload',
                                     '--clients', 4, '--pipeline', 16, *_args())
    assert status == 0 and err == '', err
    ready = records[0]
    assert ready['mode'] == 'cluster' and sorted(ready['servers']) == sorted(addrs)
    assert ready['slots'] == {a: end - start + 1 for a, (start, end) in zip(addrs, slot_ranges(3))}
    s = kvmix.summary(records)
    assert s['moved'] == 0 and s['ops']['set']['ok'] == KEYS
    dbsize = [node.client().dbsize() for node in cluster]
    assert dbsize == _expected_keys(_owner)
    assert [s['per_server'][a]['set'] for a in addrs] == dbsize

    for node in cluster:
        node.client().config_resetstat()
    status, records, err = kvmix.run('--servers', addrs[2], '--clients', 6, '--requests', 300,
                                     *_args())
    assert status == 0 and err == '', err
    s = kvmix.summary(records)
    assert s['moved'] == 0 and s['requests'] == 1800
    assert s['ops']['get']['ok'] == s['ops']['get']['count'] > 0
    assert {a: kvmix.command_calls(node) for a, node in zip(addrs, cluster)} == s['per_server']
    ks = Keyspace(KEYS, seed=SEED)
    for i in range(0, KEYS, 97):
        value = cluster[_owner(key_slot(b'key:%d' % i))].client().get('key:%d' % i)
        assert ks.is_value(i, value)


def _start_at_barrier(cluster, *args):
    """kvmix started with --barrier; returns (process, ready line): its map is fixed now."""
    proc = kvmix.start('--servers', cluster[0].addr, '--barrier', *args)
    return proc, kvmix.wait_ready(proc)


def test_a_stale_map_is_corrected_by_moved(cluster):
    """Slots moved after kvmix read the map: the old owner answers MOVED, kvmix re-sends to
    the new owner and routes that slot there from then on; every key lands where Redis
    says it belongs and every GET of a moved key still checks out."""
    addrs = [node.addr for node in cluster]
    slot = key_slot(b'key:0')
    source = _owner(slot)
    target = (source + 1) % 3
    proc, _ = _start_at_barrier(cluster, '--phase', 'preload', '--clients', 4,
                                '--pipeline', 8, *_args())
    move_slot(cluster, slot, source, target)            # empty: nothing loaded yet
    status, records, err = kvmix.finish(proc, 'go\n')
    assert status == 0 and err == '', err
    s = kvmix.summary(records)
    moved_keys = sum(1 for i in range(KEYS) if key_slot(b'key:%d' % i) == slot)
    assert 1 <= s['moved'] <= moved_keys
    owners = (lambda sl: target if sl == slot else _owner(sl))
    dbsize = [node.client().dbsize() for node in cluster]
    assert dbsize == _expected_keys(owners)
    assert cluster[target].client().get('key:0') is not None
    sent = [s['per_server'][a]['set'] for a in addrs]
    assert sent == [n + (s['moved'] if k == source else 0) for k, n in enumerate(dbsize)]
    assert kvmix.command_calls(cluster[source], ('rejected_calls',))['set'] == s['moved']

    # The mix, GETs only, with the slot of the hottest key moved (keys and all) meanwhile.
    ks = Keyspace(KEYS, seed=SEED)
    hot = int(ks.by_rank[0])
    slot = key_slot(b'key:%d' % hot)
    source = next(k for k, node in enumerate(cluster)
                  if node.client().execute_command('CLUSTER', 'COUNTKEYSINSLOT', slot))
    target = (source + 2) % 3
    proc, _ = _start_at_barrier(cluster, '--clients', 3, '--requests', 400,
                                '--get-ratio', 1, *_args())
    move_slot(cluster, slot, source, target)
    status, records, err = kvmix.finish(proc, 'go\n')
    assert status == 0 and err == '', err
    s = kvmix.summary(records)
    assert s['moved'] >= 1 and s['ops']['get']['ok'] == 1200
    assert cluster[target].client().get('key:%d' % hot) is not None


def test_a_redirect_loop_is_bounded_and_an_error(cluster):
    """Two nodes that each say the other owns a slot: after a few MOVED replies the request
    counts as a MOVED error, the run goes on and ends with exit 1 and one sentence."""
    slot = key_slot(b'key:0')
    a = _owner(slot)
    b = (a + 1) % 3
    cluster[a].client().execute_command('CLUSTER', 'SETSLOT', slot, 'NODE', node_id(cluster[b]))
    cluster[b].client().execute_command('CLUSTER', 'SETSLOT', slot, 'NODE', node_id(cluster[a]))
    status, records, err = kvmix.run('--servers', cluster[(a + 2) % 3].addr, '--keys', 1,
                                     '--requests', 5, '--get-ratio', 1)
    assert status == 1
    s = kvmix.summary(records)
    assert s['ops']['get']['errors'] == {'MOVED': 5} and s['ops']['get']['count'] == 5
    assert s['moved'] == 5 * 5                          # MAX_REDIRECTS followed per request
    assert 'MOVED' in kvmix.one_sentence(err)


def test_a_node_dying_mid_run_fails_every_client_with_one_sentence(cluster):
    """SIGKILL of one node during a timed mix: exit 1, the sentence names that node."""
    kvmix.run('--servers', cluster[0].addr, '--phase', 'preload', '--pipeline', 16, *_args())
    proc = kvmix.start('--servers', cluster[0].addr, '--clients', 4, '--duration', 120,
                       *_args())
    kvmix.wait_ready(proc)
    deadline = time.monotonic() + 30
    while kvmix.command_calls(cluster[2])['get'] < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    cluster[2].kill()
    status, records, err = kvmix.finish(proc, timeout=60)
    assert status == 1
    sentence = kvmix.one_sentence(err)
    assert cluster[2].addr in sentence and 'and 3 other clients' in sentence, sentence
    assert kvmix.summary(records)['clients_failed'] == 4
