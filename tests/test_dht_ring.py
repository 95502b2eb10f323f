"""Unit tests of the consistent-hashing ring: ownership, balance, replica choice."""

import collections

import pytest

from nodes.dht.ring import Ring, parse_addr, parse_servers

SERVERS = ['s%d' % i for i in range(1, 9)]
KEYS = ['file-%05d.dat' % i for i in range(10000)]


def test_owner_is_deterministic_and_order_free():
    a, b = Ring(SERVERS), Ring(list(reversed(SERVERS)))
    assert all(a.owner(k) == b.owner(k) for k in KEYS[:500])


def test_balance_with_virtual_nodes():
    ring = Ring(SERVERS)
    counts = collections.Counter(ring.owner(k) for k in KEYS)
    assert set(counts) == set(SERVERS)
    mean = len(KEYS) / len(SERVERS)
    assert max(counts.values()) < 1.4 * mean and min(counts.values()) > 0.6 * mean


def test_one_vnode_is_less_balanced_than_many():
    def spread(vnodes):
        ring = Ring(SERVERS, vnodes)
        c = collections.Counter(ring.owner(k) for k in KEYS)
        return max(c.values()) - min(c.get(s, 0) for s in SERVERS)
    assert spread(100) < spread(1)


def test_removing_a_server_moves_only_its_keys():
    full, less = Ring(SERVERS), Ring(SERVERS[:-1])
    for k in KEYS[:2000]:
        if full.owner(k) != 's8':
            assert less.owner(k) == full.owner(k)
        else:
            # The key goes to the next server clockwise: the first replica in the full ring.
            assert less.owner(k) == full.replicas(k, 1)[1]


def test_replicas_are_owner_then_distinct_servers():
    ring = Ring(SERVERS)
    for k in KEYS[:500]:
        pref = ring.replicas(k, 2)
        assert pref[0] == ring.owner(k) and len(set(pref)) == 3
        assert ring.replicas(k, 1) == pref[:2]
    assert sorted(ring.replicas('x', 20)) == sorted(SERVERS)


def test_single_server_owns_everything():
    ring = Ring(['only'])
    assert {ring.owner(k) for k in KEYS[:100]} == {'only'}
    assert ring.replicas('a', 3) == ['only']


def test_parse_servers_and_addr():
    assert parse_servers('s1=10.0.0.1:5000, s2=10.0.0.2:5001') == {
        's1': ('10.0.0.1', 5000), 's2': ('10.0.0.2', 5001)}
    for bad in ('s1', 's1=host', 's1=h:1,s1=h:2', '=h:1', 's1=h:99999', ''):
        with pytest.raises(ValueError):
            parse_servers(bad)
    assert parse_addr('::1:80') == ('::1', 80)
    with pytest.raises(ValueError):
        Ring([])


def test_a_remembered_preference_is_the_computed_one_and_the_memory_is_bounded(monkeypatch):
    """The memo (Ring.preference) must answer what the ring computes, for every n, after
    being cleared, and hand out lists a caller may change without changing it."""
    from nodes.dht import ring as ring_module
    monkeypatch.setattr(ring_module, 'MEMO', 50)
    ring = Ring(SERVERS)
    for rep in range(3):
        for k in KEYS[:120]:
            for n in (1, 3, 9):
                got = ring.preference(k, n)
                assert got == ring._preference(k, n) and len(got) == min(n, len(SERVERS))
                got.append('changed by the caller')
        assert len(ring._memo) <= 50
    assert ring.preference(KEYS[0], 3) == ring._preference(KEYS[0], 3)
