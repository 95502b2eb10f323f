"""Cache policies of the KV node (nodes/kv/cache.py): eviction order exactly as specified.

Small cases are written out by hand; Hypothesis then runs random operation sequences against naive
reference models (a list scanned in full on every eviction: obviously right, O(n)) and compares
every returned value, every counter and the cached key set after each step.
"""

import pytest
from hypothesis import given, settings, strategies as st

from nodes.kv import cache

SETTINGS = settings(max_examples=400, deadline=None)


def test_none_and_size_zero_mean_no_cache_and_bad_arguments_are_refused():
    assert cache.make('none', 100) is None and cache.make('lru', 0) is None
    with pytest.raises(ValueError, match='policy'):
        cache.make('mru', 10)
    with pytest.raises(ValueError, match='size'):
        cache.make('lru', -1)


def test_fifo_evicts_in_insertion_order_whatever_is_read_or_rewritten():
    c = cache.make('fifo', 3)
    for k in 'abc':
        c.put(k, k.upper())
    assert c.get('a') == 'A'                # a read does not reorder
    c.put('a', 'A2')                        # neither does a rewrite
    c.put('d', 'D')
    assert c.keys() == ['b', 'c', 'd'] and c.get('a') is None
    c.put('e', 'E')
    assert c.keys() == ['c', 'd', 'e']
    assert (c.hits, c.misses, c.evictions) == (1, 1, 2)


def test_lru_evicts_the_least_recently_read_or_written():
    c = cache.make('lru', 3)
    for k in 'abc':
        c.put(k, k)
    c.get('a')                              # order now b, c, a
    c.put('b', 'b2')                        # a write is a use: c, a, b
    c.put('d', 'd')                         # evicts c
    assert c.keys() == ['a', 'b', 'd']
    c.get('zz')
    c.put('e', 'e')                         # evicts a
    assert c.keys() == ['b', 'd', 'e']
    assert (c.hits, c.misses, c.evictions) == (1, 1, 2)


def test_lfu_evicts_the_least_used_and_among_equals_the_least_recent():
    c = cache.make('lfu', 3)
    for k in 'abc':
        c.put(k, k)                         # all frequency 1, a oldest
    c.get('a')
    c.get('a')                              # a: 3
    c.get('b')                              # b: 2
    c.put('d', 'd')                         # evicts c (1)
    assert sorted(c.keys()) == ['a', 'b', 'd'] and c.frequency('d') == 1
    c.get('d')                              # d: 2, used after b
    c.put('e', 'e')                         # b and d at 2: b, used longer ago, goes
    assert c.keys() == ['e', 'd', 'a']      # e (1), d (2), a (3): next victim first
    assert c.get('b') is None and c.frequency('d') == 2 and c.frequency('a') == 3
    c.put('f', 'f')                         # e is the only frequency-1 entry
    assert sorted(c.keys()) == ['a', 'd', 'f'] and c.evictions == 3


def test_lfu_delete_then_refill_evicts_correctly():
    c = cache.make('lfu', 2)
    c.put('a', 1)
    c.get('a')
    c.put('b', 2)
    c.delete('b')                           # the frequency-1 bucket empties
    c.get('a')                              # a: 3
    c.put('c', 3)
    c.put('d', 4)                           # full: c (1) goes, not a
    assert sorted(c.keys()) == ['a', 'd']
    c.clear()
    assert len(c) == 0 and c.get('a') is None


class NaiveModel:
    """Reference: a list of [key, value, frequency, inserted, last_use], scanned in full."""

    def __init__(self, policy, capacity):
        self.policy, self.capacity = policy, capacity
        self.rows = []
        self.tick = 0
        self.hits = self.misses = self.evictions = 0

    def _row(self, key):
        return next((r for r in self.rows if r[0] == key), None)

    def _use(self, row):
        self.tick += 1
        row[2] += 1
        row[4] = self.tick

    def get(self, key):
        row = self._row(key)
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        self._use(row)
        return row[1]

    def put(self, key, value):
        row = self._row(key)
        if row is not None:
            row[1] = value
            self._use(row)
            return
        if len(self.rows) >= self.capacity:
            rank = {'fifo': lambda r: r[3], 'lru': lambda r: r[4],
                    'lfu': lambda r: (r[2], r[4])}[self.policy]
            self.rows.remove(min(self.rows, key=rank))
            self.evictions += 1
        self.tick += 1
        self.rows.append([key, value, 1, self.tick, self.tick])

    def delete(self, key):
        self.rows = [r for r in self.rows if r[0] != key]

    def clear(self):
        self.rows = []


ops = st.lists(st.tuples(st.sampled_from(['get', 'put', 'put', 'delete', 'clear']),
                         st.integers(0, 7), st.integers(0, 99)), max_size=80)


@SETTINGS
@given(st.sampled_from(['fifo', 'lru', 'lfu']), st.integers(1, 5), ops)
def test_every_policy_matches_its_reference_model(policy, capacity, sequence):
    real, model = cache.make(policy, capacity), NaiveModel(policy, capacity)
    for op, key, value in sequence:
        if op == 'get':
            assert real.get(key) == model.get(key)
        elif op == 'put':
            real.put(key, value)
            model.put(key, value)
        elif op == 'delete':
            real.delete(key)
            model.delete(key)
        else:
            real.clear()
            model.clear()
        assert sorted(real.keys()) == sorted(r[0] for r in model.rows)
        assert (real.hits, real.misses, real.evictions) == \
            (model.hits, model.misses, model.evictions)


@pytest.mark.parametrize('policy', ['fifo', 'lru', 'lfu'])
def test_keys_lists_the_next_victim_first(policy):
    c = cache.make(policy, 4)
    for k in range(4):
        c.put(k, k)
    c.get(0)
    c.get(2)
    victim = c.keys()[0]
    c.put(99, 99)
    assert victim not in c.keys() and len(c) == 4
