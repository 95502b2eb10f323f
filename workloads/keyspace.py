"""The keys of the seed 003 workload: which exist, how popular each is, its value, a correct reply.

Pure and seeded: everything here is a function of its arguments (``seed`` included), so
every load-generator process given the same flags builds the same keys, sizes and
popularity order, and client ``c`` draws the same operations in every run.  No I/O.

Keys.  Synthetic: ``key:<i>`` for i in [0, K).  From a data set (``workloads.enron``):
its keys in its order, values its bytes.

Popularity.  The seed drew keys uniformly; real key-value traffic is skewed, so keys
follow a Zipf law: the key of rank r (0-based) is drawn with probability proportional
to 1/(r+1)**s, s = 0.99 by default, YCSB's "zipfian" constant (Cooper et al., SoCC 2010);
s = 0 is uniform.  Ranks are given to keys by a seeded random permutation, so the hot keys
are scattered over the key space (and over the servers' hash slots) instead of being
key:0, key:1...  Draws are ``searchsorted`` on the precomputed cumulative table, in NumPy
blocks of ``BLOCK`` per client: a few hundred ns per draw instead of tens of us in Python.

Value sizes (synthetic).  Fixed per key, and e-mail-like by default since the seed stored
Enron messages: log-normal with median ``MEDIAN_VALUE`` = 1 KiB and sigma 1.0 (mean about
1.7 KiB, p90 about 3.7 KiB, p99 about 10 KiB), clipped to [64 B, 64 KiB].  Message and
file sizes are commonly modelled as log-normal (Downey, "The structural cause of file
size distributions", MASCOTS 2001): most mail bodies are a few lines, a long tail carries
forwarded threads and pasted documents.  The parameters are our assumption, not measured
on the corpus (it cannot be downloaded here); ``--value-size`` fixes one size instead.

Values identify their key and a version, so a GET can be checked without remembering
what was written: ``key:<i>|<version>|`` padded with ``x`` to the key's size (the preload
writes version ``0``, client c's n-th SET ``c<c>.<n>``).  A GET reply is correct when it
is *a* value of that key (any version): the key's size and prefix.  A data set's values
are constant: SET writes the key's own bytes and a GET must return exactly them.
"""

import array

import numpy as np

DEFAULT_ZIPF = 0.99
MEDIAN_VALUE = 1024
SIGMA = 1.0
MIN_VALUE = 64                  # room for the longest header: key:9999999|<32-byte version>|
MAX_VALUE = 64 << 10
MAX_VERSION = 32
MAX_KEYS = 10_000_000           # cumulative table, permutation and sizes: 20 bytes a key
BLOCK = 4096                    # draws per NumPy call
_SIZES, _RANKS, _DRAWS = 1, 2, 3   # independent random streams of one --seed


class Keyspace:
    """K keys, their popularity order, value sizes or data-set values; see the module doc."""

    def __init__(self, n, zipf=DEFAULT_ZIPF, seed=0, value_size=0, pairs=None):
        if not 1 <= n <= MAX_KEYS:
            raise ValueError('a key space has 1 to %d keys, not %d' % (MAX_KEYS, n))
        if not 0 <= zipf <= 10:
            raise ValueError('the Zipf exponent must be between 0 and 10')
        if value_size and not MIN_VALUE <= value_size <= 512 << 20:
            raise ValueError('a fixed value size must be between %d and %d bytes'
                             % (MIN_VALUE, 512 << 20))
        self.n = n
        self.zipf = zipf
        self.seed = seed
        self.value_size = value_size
        if pairs is not None:
            self._keys = [k for k, _ in pairs]
            self._values = [v for _, v in pairs]
            if len(self._keys) != n:
                raise ValueError('%d keys asked for, %d given' % (n, len(self._keys)))
            self.sizes = array.array('I', [len(v) for v in self._values])
        else:
            self._keys = self._values = None
            self.sizes = array.array('I', _value_sizes(n, seed, value_size).tobytes())
        rng = np.random.default_rng([seed, _RANKS])
        self.by_rank = rng.permutation(n).astype(np.uint32)     # rank -> key index
        weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** zipf
        self.cdf = np.cumsum(weights)
        self.cdf /= self.cdf[-1]

    @classmethod
    def from_pairs(cls, pairs, zipf=DEFAULT_ZIPF, seed=0):
        """A key space of a data set's (key, value) pairs, in their order."""
        pairs = list(pairs)
        return cls(len(pairs), zipf, seed, pairs=pairs)

    @property
    def synthetic(self):
        """True when keys are key:<i> with versioned values, False for a data set."""
        return self._keys is None

    def key(self, i):
        """The key of index i (bytes)."""
        return b'key:%d' % i if self._keys is None else self._keys[i]

    def value(self, i, version=b'0'):
        """The value a SET of key i writes: key and version padded to its size, or the data's."""
        if self._values is not None:
            return self._values[i]
        if len(version) > MAX_VERSION:
            raise ValueError('a version has at most %d bytes' % MAX_VERSION)
        return (b'key:%d|%b|' % (i, version)).ljust(self.sizes[i], b'x')

    def is_value(self, i, reply):
        """True if reply (bytes) is a value of key i, of any version."""
        if self._values is not None:
            return reply == self._values[i]
        return len(reply) == self.sizes[i] and reply.startswith(b'key:%d|' % i)

    def max_value_bytes(self):
        """The largest value of any key."""
        return max(self.sizes)

    def rank_probability(self, rank):
        """The probability that one draw is the key of this popularity rank (0 = hottest)."""
        return float(self.cdf[rank] - (self.cdf[rank - 1] if rank else 0.0))

    def preload_indices(self, client, clients):
        """Key indices a client (of `clients` loading together) SETs: i = client mod clients."""
        return range(client, self.n, clients)

    def sampler(self, client, get_ratio=0.8):
        """The operation and key sequence of one client (its global id) in the mix."""
        return Sampler(self, client, get_ratio)

    def describe(self):
        """What a run's ready line records about the key space."""
        sizes = np.frombuffer(self.sizes, dtype=np.uint32)
        return {'keys': self.n, 'zipf': self.zipf, 'synthetic': self.synthetic,
                'value_bytes_median': float(np.median(sizes)),
                'value_bytes_mean': round(float(sizes.mean()), 1),
                'value_bytes_max': int(sizes.max()),
                'hottest_key_share': round(self.rank_probability(0), 6)}


def _value_sizes(n, seed, fixed):
    """uint32 value sizes of n synthetic keys: fixed, or log-normal as the module doc says."""
    if fixed:
        return np.full(n, fixed, dtype=np.uint32)
    rng = np.random.default_rng([seed, _SIZES])
    sizes = rng.lognormal(np.log(MEDIAN_VALUE), SIGMA, n)
    return np.clip(np.rint(sizes), MIN_VALUE, MAX_VALUE).astype(np.uint32)


class Sampler:
    """One client's draws: (is_get, key index) pairs, the same for the same seed and client.

    ``block()`` returns the next ``BLOCK`` draws as two Python lists (what the client's
    hot loop indexes); ``take(n)`` is for tests and small tools."""

    def __init__(self, keyspace, client, get_ratio=0.8):
        if not 0 <= get_ratio <= 1:
            raise ValueError('the GET ratio must be between 0 and 1')
        self._ks = keyspace
        # Two streams, so the sequence does not depend on how it is cut into blocks.
        self._key_rng = np.random.default_rng([keyspace.seed, _DRAWS, client, 0])
        self._op_rng = np.random.default_rng([keyspace.seed, _DRAWS, client, 1])
        self._get_ratio = get_ratio

    def block(self, n=BLOCK):
        """The next n draws: (list of bool is_get, list of int key index)."""
        ks = self._ks
        ranks = np.searchsorted(ks.cdf, self._key_rng.random(n), side='right')
        np.minimum(ranks, ks.n - 1, out=ranks)      # cdf[-1] may round below a draw
        gets = self._op_rng.random(n) < self._get_ratio
        return gets.tolist(), ks.by_rank[ranks].tolist()

    def take(self, n):
        """The next n draws as a list of ('get'|'set', key index)."""
        gets, keys = self.block(n)
        return [('get' if g else 'set', k) for g, k in zip(gets, keys)]
