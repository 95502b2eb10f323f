"""Bounded caches in front of the key directory: FIFO, LRU and LFU, each O(1) per operation.

Seed 003 compares the three policies at 10, 50 and 100 entries, so the eviction order is part of
the experiment and is specified exactly here (tests/test_kv_cache.py checks it by hand and against
naive reference models):

FIFO  evicts the entry inserted longest ago. Reads do not reorder; writing a key that is already
      cached replaces its value and keeps its place in the queue.
LRU   evicts the entry used longest ago. A read hit and a write of a cached key both count as a use
      (the entry becomes the most recent).
LFU   evicts the entry with the fewest uses; among equals, the one used longest ago.
      Insertion counts as the first use (frequency 1); a read hit or a write of a cached key
      adds one. Frequency buckets are ordered dicts (oldest use first) with a pointer to the
      lowest frequency, so every operation is O(1) (the constant-time LFU of Shah, Mitra and
      Matani, 2010).

Every policy: `get(key)` returns the value or None and counts a hit or a miss; `put(key, value)`
inserts or updates, evicting (and counting) one entry when a new key finds the cache full;
`delete(key)` and `clear()` remove without counting evictions. Values are never None.
`make(policy, size)` returns None for policy 'none' or size 0: the core then has no cache at all.
"""

from collections import OrderedDict

POLICIES = ('fifo', 'lru', 'lfu', 'none')


def make(policy, size):
    """A cache of `size` entries with `policy`, or None for 'none' / size 0."""
    if policy not in POLICIES:
        raise ValueError('cache policy must be one of %s, not %r' % ('|'.join(POLICIES), policy))
    if not isinstance(size, int) or size < 0:
        raise ValueError('cache size must be an integer >= 0, not %r' % (size,))
    if policy == 'none' or size == 0:
        return None
    return {'fifo': FIFOCache, 'lru': LRUCache, 'lfu': LFUCache}[policy](size)


class _Counted:
    """Capacity and the hit/miss/eviction counters shared by every policy."""

    __slots__ = ('capacity', 'hits', 'misses', 'evictions')
    policy = ''

    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError('cache capacity must be >= 1')
        self.capacity = capacity
        self.hits = self.misses = self.evictions = 0

    def reset_counters(self):
        """Zero hits, misses and evictions (CONFIG RESETSTAT)."""
        self.hits = self.misses = self.evictions = 0


class FIFOCache(_Counted):
    """First in, first out: insertion order only."""

    __slots__ = ('_d',)
    policy = 'fifo'

    def __init__(self, capacity):
        super().__init__(capacity)
        self._d = OrderedDict()

    def __len__(self):
        return len(self._d)

    def keys(self):
        """Cached keys, next to be evicted first."""
        return list(self._d)

    def get(self, key):
        """The cached value or None (a hit or a miss is counted)."""
        v = self._d.get(key)
        if v is None:
            self.misses += 1
        else:
            self.hits += 1
        return v

    def put(self, key, value):
        """Insert or update; a new key evicts the oldest insertion when full."""
        d = self._d
        if key not in d and len(d) >= self.capacity:
            d.popitem(last=False)
            self.evictions += 1
        d[key] = value

    def delete(self, key):
        """Drop `key` if cached."""
        self._d.pop(key, None)

    def clear(self):
        """Drop everything."""
        self._d.clear()


class LRUCache(FIFOCache):
    """Least recently used: reads and writes move an entry to the most recent end."""

    __slots__ = ()
    policy = 'lru'

    def get(self, key):
        """The cached value or None; a hit becomes the most recently used."""
        v = self._d.get(key)
        if v is None:
            self.misses += 1
        else:
            self.hits += 1
            self._d.move_to_end(key)
        return v

    def put(self, key, value):
        """Insert or update as the most recent; a new key evicts the least recent when full."""
        d = self._d
        if key in d:
            d.move_to_end(key)
        elif len(d) >= self.capacity:
            d.popitem(last=False)
            self.evictions += 1
        d[key] = value


class LFUCache(_Counted):
    """Least frequently used, ties broken by least recent use, in O(1)."""

    __slots__ = ('_entries', '_buckets', '_min')
    policy = 'lfu'

    def __init__(self, capacity):
        super().__init__(capacity)
        self._entries = {}      # key -> [value, frequency]
        self._buckets = {}      # frequency -> OrderedDict of keys, least recent use first
        self._min = 0           # lowest frequency present (valid whenever the cache is full)

    def __len__(self):
        return len(self._entries)

    def keys(self):
        """Cached keys, next to be evicted first."""
        return [k for f in sorted(self._buckets) for k in self._buckets[f]]

    def frequency(self, key):
        """Uses counted for a cached key (None if not cached)."""
        e = self._entries.get(key)
        return e[1] if e else None

    def get(self, key):
        """The cached value or None; a hit adds one use."""
        e = self._entries.get(key)
        if e is None:
            self.misses += 1
            return None
        self.hits += 1
        self._touch(key, e)
        return e[0]

    def put(self, key, value):
        """Insert (frequency 1) or update (one more use); a new key evicts when full."""
        e = self._entries.get(key)
        if e is not None:
            e[0] = value
            self._touch(key, e)
            return
        if len(self._entries) >= self.capacity:
            bucket = self._buckets[self._min]
            old, _ = bucket.popitem(last=False)
            if not bucket:
                del self._buckets[self._min]
            del self._entries[old]
            self.evictions += 1
        self._entries[key] = [value, 1]
        b = self._buckets.get(1)
        if b is None:
            b = self._buckets[1] = OrderedDict()
        b[key] = None
        self._min = 1

    def delete(self, key):
        """Drop `key` if cached (the next insertion resets the lowest-frequency pointer)."""
        e = self._entries.pop(key, None)
        if e is not None:
            bucket = self._buckets[e[1]]
            del bucket[key]
            if not bucket:
                del self._buckets[e[1]]

    def clear(self):
        """Drop everything."""
        self._entries.clear()
        self._buckets.clear()
        self._min = 0

    def _touch(self, key, e):
        """Move `key` from its frequency bucket to the next one, as its most recent use."""
        f = e[1]
        bucket = self._buckets[f]
        del bucket[key]
        if not bucket:
            del self._buckets[f]
            if self._min == f:
                self._min = f + 1
        e[1] = f + 1
        nxt = self._buckets.get(f + 1)
        if nxt is None:
            nxt = self._buckets[f + 1] = OrderedDict()
        nxt[key] = None
