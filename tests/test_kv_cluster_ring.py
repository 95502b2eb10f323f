"""Partitioning of the KV cluster (nodes/kv/cluster.py): hash slots, the ring, the layout spec.

The slot function is checked here by its defining properties and published values; against
redis-server itself in test_kv_cluster_redis.py. The ring is checked for what consistent
hashing promises: every slot has one owner, the same layout gives the same owners in any
order, removing or adding a member moves only that member's slots, weights scale the share,
and many virtual nodes even out the skew that one point per server has.
"""

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.kv import cluster
from nodes.kv.cluster import DEFAULT_VNODES, SLOTS, Member, Ring, imbalance, key_slot

NAMES = st.text('abcdefghijklmnopqrstuvwxyz0123456789-', min_size=1, max_size=12)


def members(names, weights=None):
    """Members on loopback with distinct ports."""
    weights = weights or [1] * len(names)
    return [Member(n, '127.0.0.1', 7000 + i, w) for i, (n, w) in enumerate(zip(names, weights))]


def servers(n):
    """s1..sn, the ordinary names of the issue's table."""
    return members(['s%d' % i for i in range(1, n + 1)])


@pytest.mark.parametrize('key, slot', [
    (b'123456789', 0x31C3 % SLOTS),     # the CRC16-XMODEM check value
    (b'foo', 12182),                    # CLUSTER KEYSLOT foo on Redis 7.0
    (b'', 0),
    (b'{user1000}.following', key_slot(b'user1000')),
    (b'{user1000}.followers', key_slot(b'user1000')),
    (b'foo{}{bar}', key_slot(b'foo{}{bar}')),   # empty first tag: the whole key
    (b'foo{{bar}}zap', key_slot(b'{bar')),
    (b'foo{bar}{zap}', key_slot(b'bar')),
    (b'{', key_slot(b'{')),
])
def test_key_slot_follows_the_cluster_specs_examples(key, slot):
    assert key_slot(key) == slot


@given(st.binary(max_size=20).filter(lambda b: b'{' not in b), st.binary(min_size=1, max_size=20)
       .filter(lambda b: b'}' not in b), st.binary(max_size=20))
def test_a_non_empty_tag_decides_the_slot(prefix, tag, suffix):
    assert key_slot(prefix + b'{' + tag + b'}' + suffix) == key_slot(tag)


@given(st.binary(max_size=40))
def test_slot_is_in_range_and_untagged_keys_hash_whole(key):
    slot = key_slot(key)
    assert 0 <= slot < SLOTS
    if b'{' not in key:
        assert slot == _crc16_xmodem(key) % SLOTS
        # an empty tag '{}' counts as no tag: the whole key is hashed
        assert key_slot(b'{}' + key) == _crc16_xmodem(b'{}' + key) % SLOTS


def _crc16_xmodem(data):
    """CRC16-XMODEM bit by bit (polynomial 0x1021, init 0), the spec's definition."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def check_ranges(ring):
    """ranges() covers 0..16383 once, in order, with runs that differ from their neighbours."""
    ranges = ring.ranges()
    assert ranges[0][0] == 0 and ranges[-1][1] == SLOTS - 1
    for (_, last, owner), (first, _, next_owner) in zip(ranges, ranges[1:]):
        assert first == last + 1 and owner != next_owner
    for first, last, owner in ranges:
        assert first <= last
        assert all(ring.owner_index(s) == owner for s in (first, last, (first + last) // 2))
    assert sum(last - first + 1 for first, last, _ in ranges) == SLOTS


def test_every_slot_has_one_owner_and_ranges_cover_all_slots():
    ring = Ring(servers(3))
    assert len(ring.owners()) == SLOTS and set(ring.owners()) == {0, 1, 2}
    check_ranges(ring)
    counts = ring.slot_counts()
    assert sum(counts) == SLOTS and min(counts) > 0
    assert sum(ring.shares()) == pytest.approx(1.0)
    index, member = ring.owner(key_slot(b'foo'))
    assert ring.members[index] is member and ring.index_of(member.name) == index


@settings(max_examples=25, deadline=None)
@given(st.lists(NAMES, min_size=1, max_size=6, unique=True), st.integers(1, 64), st.randoms())
def test_owners_depend_on_names_only_not_on_order(names, vnodes, rnd):
    ring = Ring(members(names), vnodes)
    shuffled = list(names)
    rnd.shuffle(shuffled)
    again = Ring(members(shuffled), vnodes)
    assert [ring.owner(s)[1].name for s in range(SLOTS)] == \
        [again.owner(s)[1].name for s in range(SLOTS)]
    check_ranges(ring)


@settings(max_examples=25, deadline=None)
@given(st.lists(NAMES, min_size=2, max_size=6, unique=True), st.integers(1, 64), st.data())
def test_removing_or_adding_a_member_moves_only_its_slots(names, vnodes, data):
    gone = data.draw(st.sampled_from(names))
    full = Ring(members(names), vnodes)
    less = Ring(members([n for n in names if n != gone]), vnodes)
    for slot in range(SLOTS):
        before = full.owner(slot)[1].name
        after = less.owner(slot)[1].name
        # removing moves only gone's slots; read backwards, adding takes slots only for itself
        assert after == before or before == gone


def test_weights_scale_the_share():
    ring = Ring(members(['a', 'b', 'c'], [1, 2, 1]))
    share = dict(zip('abc', ring.shares()))
    assert 1.8 < share['b'] / share['a'] < 2.2 and 1.8 < share['b'] / share['c'] < 2.2


def test_one_point_per_server_is_skewed_and_the_default_vnodes_is_not():
    one = imbalance(Ring(servers(10), 1).slot_counts())
    default = imbalance(Ring(servers(10)).slot_counts())
    assert one > 2.0            # 2.99 measured: the seed's uneven servers
    assert default <= 1.1       # the target at 10 servers
    assert DEFAULT_VNODES == 1024
    table = cluster.ring_table(servers=(10,), vnodes=(1, 16, 256, 1024))
    assert table[10, 1] > table[10, 16] > table[10, 256] > table[10, 1024]


@settings(max_examples=10, deadline=None)
@given(st.lists(NAMES, min_size=10, max_size=10, unique=True))
def test_default_vnodes_stays_near_even_for_any_ten_names(names):
    # 150 random name sets measured: median 1.048, worst 1.104; 1.2 leaves room for chance.
    assert imbalance(Ring(members(names)).slot_counts()) < 1.2


def test_key_counts_follow_the_owners():
    ring = Ring(servers(3))
    keys = [b'key:%d' % i for i in range(3000)] + [b'{tag}%d' % i for i in range(100)]
    counts = ring.key_counts(keys)
    assert sum(counts) == len(keys)
    assert counts[ring.owner_index(key_slot(b'tag'))] >= 100
    assert imbalance(ring.key_counts([b'key:%d' % i for i in range(30000)])) < 1.1


def test_imbalance():
    assert imbalance([5, 5, 5]) == 1.0
    assert imbalance([0, 10]) == 2.0
    assert imbalance([0.25, 0.75]) == 1.5
    for bad in ([], [0, 0]):
        with pytest.raises(ValueError):
            imbalance(bad)


def test_member_ids_and_addresses():
    m = Member('s1', '127.0.0.1', 7001)
    assert m.node_id == hashlib.sha1(b's1').hexdigest() and len(m.node_id) == 40
    assert m.addr == '127.0.0.1:7001'


@pytest.mark.parametrize('kwargs, words', [
    (dict(members=[]), 'at least one member'),
    (dict(members=servers(2), vnodes=0), 'vnodes must be'),
    (dict(members=servers(2), vnodes=4097), 'vnodes must be'),
    (dict(members=members(['a', 'a'])), 'appears twice'),
    (dict(members=members(list('abcde'), [64] * 5), vnodes=4096), 'points, above the limit'),
])
def test_ring_refuses_impossible_layouts(kwargs, words):
    with pytest.raises(ValueError, match=words):
        Ring(**kwargs)


def test_parse_layout():
    got = cluster.parse_layout(' s1=127.0.0.1:7000*3, s2=localhost:7001,s3=[::1]:7002')
    assert got == (Member('s1', '127.0.0.1', 7000, 3), Member('s2', 'localhost', 7001),
                   Member('s3', '::1', 7002))
    assert got[2].addr == '::1:7002'        # unbracketed, as Redis writes -MOVED


@pytest.mark.parametrize('spec, words', [
    ('', 'empty'),
    ('   ', 'empty'),
    ('s1', 'is not NAME=HOST:PORT'),
    ('=127.0.0.1:7000', 'the name must be'),
    ('s 1=127.0.0.1:7000', 'the name must be'),
    ('s1=', 'is not HOST:PORT'),
    ('s1=127.0.0.1', 'is not HOST:PORT'),
    ('s1=127.0.0.1:0', 'port of 1 to 65535'),
    ('s1=127.0.0.1:70000', 'port of 1 to 65535'),
    ('s1=127.0.0.1:x', 'is not HOST:PORT'),
    ('s1=bad host:7000', 'neither an IP address nor a DNS host name'),
    ('s1=127.0.0.1:7000*0', 'weight must be an integer from 1 to 64'),
    ('s1=127.0.0.1:7000*x', 'weight must be an integer from 1 to 64'),
    ('s1=127.0.0.1:7000*65', 'weight must be an integer from 1 to 64'),
    ('s1=127.0.0.1:7000*', 'weight must be an integer from 1 to 64'),
    ('s1=127.0.0.1:7000,', 'empty entry'),
    ('s1=127.0.0.1:7000,,s2=127.0.0.1:7001', 'empty entry'),
    ('s1=127.0.0.1:7000,s1=127.0.0.1:7001', "names 's1' twice"),
    ('s1=127.0.0.1:7000,s2=127.0.0.1:7000', 'the same address'),
])
def test_parse_layout_says_what_is_wrong_in_one_sentence(spec, words):
    with pytest.raises(ValueError, match=words) as err:
        cluster.parse_layout(spec)
    assert '\n' not in str(err.value)
