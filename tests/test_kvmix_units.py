"""The pure parts of the seed 003 workload: key space, Zipf draws, values, slot map, latency log.

No sockets here: ``tests/test_kvmix.py`` and ``tests/test_kvmix_cluster.py`` run the load
generator against real servers.
"""

import array
import collections
import io

import numpy as np
import pytest

from nodes.kv.cluster import key_slot
from workloads.keyspace import MAX_VALUE, MEDIAN_VALUE, MIN_VALUE, Keyspace
from workloads.kvmix_client import RouteError, SlotMap
from workloads.loadgen import LatencyLog, latency_stats


def test_same_seed_and_client_give_the_same_operations_and_keys():
    """Determinism: a fresh key space with the same seed draws the same sequence per client,
    however it is cut into blocks; another client or another seed draws another one."""
    a, b = Keyspace(5000, seed=7), Keyspace(5000, seed=7)
    first = a.sampler(3).take(2000)
    s = b.sampler(3)
    assert s.take(1) + s.take(999) + s.take(1000) == first
    assert a.sampler(4).take(2000) != first
    assert Keyspace(5000, seed=8).sampler(3).take(2000) != first
    assert list(a.sizes) == list(b.sizes) and (a.by_rank == b.by_rank).all()
    assert list(Keyspace(5000, seed=8).sizes) != list(a.sizes)


def test_get_ratio_and_zipf_popularity():
    """About 80 % GETs; key draws follow 1/(r+1)**s over the seeded rank order."""
    ks = Keyspace(1000, zipf=0.99, seed=1)
    draws = ks.sampler(0, get_ratio=0.8).take(200_000)
    gets = sum(op == 'get' for op, _ in draws)
    assert 0.79 < gets / len(draws) < 0.81
    counts = collections.Counter(k for _, k in draws)
    for rank in (0, 1, 9, 99):
        expected = ks.rank_probability(rank) * len(draws)
        assert abs(counts[int(ks.by_rank[rank])] - expected) < 5 * expected ** 0.5 + 5
    weights = 1 / np.arange(1, 1001) ** 0.99
    assert ks.rank_probability(0) == pytest.approx(weights[0] / weights.sum())
    # hot keys are scattered, not key:0, key:1, ...
    assert sorted(int(k) for k in ks.by_rank[:10]) != list(range(10))
    assert {op for op, _ in ks.sampler(0, get_ratio=0).take(100)} == {'set'}
    assert {op for op, _ in ks.sampler(0, get_ratio=1).take(100)} == {'get'}


def test_zipf_zero_is_uniform():
    """s = 0: every key equally likely."""
    ks = Keyspace(10, zipf=0, seed=2)
    counts = collections.Counter(k for _, k in ks.sampler(0).take(50_000))
    assert set(counts) == set(range(10))
    assert max(counts.values()) < 1.1 * min(counts.values())


def test_value_sizes_are_email_like_and_fixed_per_key():
    """Log-normal around 1 KiB, clipped to [64 B, 64 KiB]; --value-size fixes one size."""
    sizes = np.array(Keyspace(50_000, seed=3).sizes)
    assert sizes.min() >= MIN_VALUE and sizes.max() <= MAX_VALUE
    assert 0.9 * MEDIAN_VALUE < np.median(sizes) < 1.1 * MEDIAN_VALUE
    assert 1.5 * MEDIAN_VALUE < sizes.mean() < 1.9 * MEDIAN_VALUE
    assert set(Keyspace(100, value_size=300).sizes) == {300}


def test_values_name_their_key_and_version_and_gets_are_checked():
    """A value is key:<i>|<version>| padded to the key's size; any version of the key is
    right, another key's value, a short value or a foreign one is not."""
    ks = Keyspace(100, seed=4)
    v0, v9 = ks.value(42), ks.value(42, b'c3.9')
    assert v0.startswith(b'key:42|0|') and v9.startswith(b'key:42|c3.9|')
    assert len(v0) == len(v9) == ks.sizes[42]
    assert ks.is_value(42, v0) and ks.is_value(42, v9)
    assert not ks.is_value(4, v0)                 # key:4 is a prefix of key:42, but not key:4|
    assert not ks.is_value(42, v0[:-1]) and not ks.is_value(42, b'x' * len(v0))
    with pytest.raises(ValueError):
        ks.value(1, b'v' * 33)


def test_dataset_key_space_sends_and_expects_the_data():
    """From (key, value) pairs: the keys as given, values verbatim and exact."""
    pairs = [(b'<a@x>', b'hello'), (b'<b@x>', b'\x00\xff binary'), (b'<c@x>', b'')]
    ks = Keyspace.from_pairs(pairs, seed=5)
    assert not ks.synthetic and ks.n == 3
    assert [ks.key(i) for i in range(3)] == [k for k, _ in pairs]
    assert ks.value(1, b'c1.1') == b'\x00\xff binary'
    assert ks.is_value(1, b'\x00\xff binary') and not ks.is_value(1, b'hello')
    assert ks.is_value(2, b'') and ks.max_value_bytes() == 9
    assert {k for _, k in ks.sampler(0).take(1000)} == {0, 1, 2}


def test_preload_splits_keys_across_clients_and_processes():
    """Clients 0..T-1 (of any processes) SET every key exactly once."""
    ks = Keyspace(1001)
    seen = [i for c in range(7) for i in ks.preload_indices(c, 7)]
    assert sorted(seen) == list(range(1001))


def test_bad_key_spaces_are_value_errors():
    for kwargs in ({'n': 0}, {'n': 10, 'zipf': -1}, {'n': 10, 'value_size': 10}):
        with pytest.raises(ValueError):
            Keyspace(**kwargs)
    with pytest.raises(ValueError):
        Keyspace(10).sampler(0, get_ratio=1.5)


def _slots_reply(ranges):
    """A CLUSTER SLOTS reply as hiredis parses it."""
    return [[start, end, [host, port, b'id%d' % port]] for start, end, host, port in ranges]


def test_slot_map_from_cluster_slots_and_moved():
    """Ranges become owners; an empty host is the one asked; MOVED re-points one slot."""
    reply = _slots_reply([(0, 8191, b'127.0.0.1', 7000), (8192, 16383, b'', 7001)])
    slots = SlotMap.from_cluster_slots(reply, '10.0.0.9')
    assert slots.addrs == ['127.0.0.1:7000', '10.0.0.9:7001']
    assert slots.slot_counts() == {'127.0.0.1:7000': 8192, '10.0.0.9:7001': 8192}
    slot = key_slot(b'key:1')
    index = slots.redirect('MOVED %d 127.0.0.1:7002' % slot, '127.0.0.1')
    assert slots.addrs[index] == '127.0.0.1:7002' and slots.owners[slot] == index
    assert slots.moved == 1 and sum(slots.slot_counts().values()) == 16384
    assert slots.addrs[slots.redirect('MOVED 5 :7000', '127.0.0.1')] == '127.0.0.1:7000'
    assert SlotMap.single('h:1').slot_counts() == {'h:1': 16384}


@pytest.mark.parametrize('reply', [
    [],
    _slots_reply([(0, 100, b'127.0.0.1', 7000)]),
    _slots_reply([(0, 16384, b'127.0.0.1', 7000)]),
    [[0, 16383]],
    _slots_reply([(0, 16383, b'bad host!', 7000)]),
    b'not a list',
])
def test_bad_cluster_slots_replies_are_route_errors(reply):
    with pytest.raises(RouteError):
        SlotMap.from_cluster_slots(reply, '127.0.0.1')


@pytest.mark.parametrize('text', ['MOVED', 'MOVED x 1.2.3.4:5', 'MOVED 99999 1.2.3.4:5',
                                  'MOVED 5 1.2.3.4:99999', 'MOVED 5 a b'])
def test_malformed_redirects_are_route_errors(text):
    with pytest.raises(RouteError):
        SlotMap.single('127.0.0.1:1').redirect(text, '127.0.0.1')


def test_latency_log_streams_to_file_and_histogram():
    """Every latency reaches the file in order; the mean is exact, percentiles within 0.1 %
    (exact below 2048 ticks); the held array is emptied."""
    rng = np.random.default_rng(6)
    ticks = np.concatenate([rng.integers(0, 2048, 5000),
                            rng.lognormal(9, 2, 20000).astype(np.int64)]).clip(0, 2**32 - 1)
    file = io.BytesIO()
    log = LatencyLog(file)
    for part in np.array_split(ticks, 7):
        held = array.array('I', part.astype(np.uint32).tobytes())
        log.drain(held)
        assert len(held) == 0
    assert (np.frombuffer(file.getvalue(), dtype='<u4') == ticks).all()
    exact = latency_stats(ticks * 0.1)
    stats = log.stats()
    assert stats['count'] == len(ticks) and stats['mean_us'] == exact['mean_us']
    assert stats['max_us'] == exact['max_us']
    for p in ('p50_us', 'p99_us'):
        assert exact[p] * (1 - 1 / 1024) - 0.1 <= stats[p] <= exact[p]
    small = LatencyLog()
    small.drain(array.array('I', [5, 1, 3, 2047, 4]))
    assert small.stats() == {'count': 5, 'mean_us': 41.2, 'p50_us': 0.4, 'p99_us': 204.7,
                             'max_us': 204.7}
    assert LatencyLog().stats() == {'count': 0}
