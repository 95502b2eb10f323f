"""Partitioning of the KV node's keys over servers: Redis Cluster's hash slots, consistent hashing.

Two layers, so that Redis Cluster's clients (redis-cli -c, redis-py's RedisCluster) work and the
servers' shares stay even:

1. A key maps to one of 16384 hash slots exactly as in Redis Cluster (cluster spec, "Keys
   distribution model"): CRC16-XMODEM of the key mod 16384, or of its hash tag -- the bytes
   between the first ``{`` and the first ``}`` after it, when that part is non-empty -- so that
   related keys can be put in one slot. `binascii.crc_hqx(data, 0)` is that CRC, in C.
2. The slots map to servers by consistent hashing with virtual nodes (Karger et al., STOC 1997):
   each member gets ``vnodes * weight`` points on a 2**32 circle at blake2b(name, i); slot s
   sits at s * 2**18, evenly spaced, and belongs to the first point clockwise from it. With one
   point per server the arcs (and so the slot shares) differ several-fold -- the skew the seed's
   authors saw; with many points each share is a sum of many small arcs and evens out (relative
   spread about 1/sqrt(vnodes)). Adding or removing a member moves only the slots next to its
   points. Everything derives from the names, so every server and client given the same layout
   computes the same owners, in any order of the members.

`DEFAULT_VNODES` was picked from the measured slot-share imbalance (max/mean) with members
s1..sN (`ring_table`; ``python3 -m nodes.kv.cluster`` prints it):

    servers  vnodes=1     4     16     64    256   1024
        2       1.33   1.33   1.14   1.08   1.05   1.01
        5       2.59   1.54   1.23   1.20   1.08   1.02
       10       2.99   1.87   1.35   1.12   1.07   1.05

256 passes at s1..s10 by luck: over 150 random sets of 10 names the median was 1.096 and 42 %
were above 1.1; at 512, 10 % above (worst 1.16); at 1024, 1 in 150 (median 1.048, worst
1.104). Hence 1024. The price is fragmentation: 10 members x 1024 points cut the slots into
about 6800 runs, so CLUSTER SLOTS answers about 0.7 MB (computed once per server).

No I/O, no clock, no random source: pure functions of the layout.
"""

import bisect
import hashlib
import re
from binascii import crc_hqx
from dataclasses import dataclass

from nodes.dht.ring import parse_addr

SLOTS = 16384                   # Redis Cluster's hash slots
_SLOT_MASK = SLOTS - 1
_CIRCLE_BITS = 32
_SLOT_STEP = (1 << _CIRCLE_BITS) // SLOTS   # slot s sits at s * _SLOT_STEP on the circle
DEFAULT_VNODES = 1024
MAX_VNODES = 4096
MAX_WEIGHT = 64
MAX_POINTS = 1 << 20            # bounds the ring's build time and memory
MAX_MEMBERS = 1000              # Redis Cluster's own suggested upper size
_BRACE = ord('{')
_NAME = re.compile(r'[A-Za-z0-9_.-]{1,64}\Z')


def key_slot(key):
    """Redis Cluster's hash slot of a key (bytes): CRC16-XMODEM of it or of its {hash tag}."""
    if _BRACE in key:                       # `int in bytes`: a memchr, cheaper than find
        start = key.find(b'{')
        end = key.find(b'}', start + 1)
        if end > start + 1:
            key = key[start + 1:end]
    return crc_hqx(key, 0) & _SLOT_MASK


@dataclass(frozen=True)
class Member:
    """One server of the layout: its name, the address clients reach it at, and its weight."""
    name: str
    host: str
    port: int
    weight: int = 1

    @property
    def node_id(self):
        """The 40-hex node id Redis Cluster's replies carry, derived from the name."""
        return hashlib.sha1(self.name.encode()).hexdigest()

    @property
    def addr(self):
        """'host:port' as in a -MOVED reply."""
        return '%s:%d' % (self.host, self.port)


def _point(name, i):
    """The circle position of a member's i-th virtual node."""
    digest = hashlib.blake2b(b'%s\0%d' % (name.encode(), i), digest_size=4).digest()
    return int.from_bytes(digest, 'big')


class Ring:
    """Owner of each hash slot: consistent hashing with virtual nodes over the 16384 slots."""

    def __init__(self, members, vnodes=DEFAULT_VNODES):
        members = tuple(members)
        if not members:
            raise ValueError('a cluster needs at least one member')
        if len(members) > MAX_MEMBERS:
            raise ValueError('a cluster has at most %d members, not %d'
                             % (MAX_MEMBERS, len(members)))
        if not isinstance(vnodes, int) or not 1 <= vnodes <= MAX_VNODES:
            raise ValueError('vnodes must be an integer from 1 to %d, not %r'
                             % (MAX_VNODES, vnodes))
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise ValueError('a member name appears twice in the cluster')
        total = vnodes * sum(m.weight for m in members)
        if total > MAX_POINTS:
            raise ValueError('vnodes x total weight is %d points, above the limit of %d'
                             % (total, MAX_POINTS))
        self.members = members
        self.vnodes = vnodes
        # Ties (two points at one position) go to the smaller name: order-independent.
        points = sorted((_point(m.name, i), m.name, index)
                        for index, m in enumerate(members) for i in range(vnodes * m.weight))
        positions = [p for p, _, _ in points]
        first = points[0][2]
        owners = bytearray(SLOTS) if len(members) <= 256 else [0] * SLOTS
        for slot in range(SLOTS):
            i = bisect.bisect_left(positions, slot * _SLOT_STEP)
            owners[slot] = points[i][2] if i < len(points) else first
        self._owners = bytes(owners) if isinstance(owners, bytearray) else tuple(owners)
        self._index = {m.name: index for index, m in enumerate(members)}

    def index_of(self, name):
        """The index of the member called name (KeyError if none)."""
        return self._index[name]

    def owner_index(self, slot):
        """The index (in `members`) of the member owning a slot."""
        return self._owners[slot]

    def owner(self, slot):
        """(index, member) owning a slot."""
        index = self._owners[slot]
        return index, self.members[index]

    def owners(self):
        """The owner index of every slot, slot 0 first (bytes up to 256 members, else a tuple)."""
        return self._owners

    def ranges(self):
        """Contiguous runs of slots with one owner: [(first, last, index)], covering 0..16383."""
        out = []
        start = 0
        owners = self._owners
        for slot in range(1, SLOTS + 1):
            if slot == SLOTS or owners[slot] != owners[start]:
                out.append((start, slot - 1, owners[start]))
                start = slot
        return out

    def slot_counts(self):
        """Slots owned per member, in member order."""
        counts = [0] * len(self.members)
        for index in self._owners:
            counts[index] += 1
        return counts

    def shares(self):
        """Fraction of the slots owned per member, in member order."""
        return [n / SLOTS for n in self.slot_counts()]

    def key_counts(self, keys):
        """How many of `keys` (bytes) each member owns, in member order."""
        counts = [0] * len(self.members)
        owners = self._owners
        for key in keys:
            counts[owners[key_slot(key)]] += 1
        return counts


def imbalance(counts):
    """max/mean of per-member counts (1.0 is perfectly even); ValueError if all are 0."""
    counts = list(counts)
    if not counts or sum(counts) <= 0:
        raise ValueError('imbalance needs counts with a positive total')
    return max(counts) * len(counts) / sum(counts)


def parse_layout(spec):
    """Parse 'NAME=HOST:PORT[*WEIGHT],...' into a tuple of Members; ValueError, one sentence."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError('the cluster layout is empty; give NAME=HOST:PORT[*WEIGHT],...')
    members, seen_addrs = [], {}
    for entry in spec.split(','):
        entry = entry.strip()
        if not entry:
            raise ValueError('the cluster layout %r has an empty entry (two commas or a '
                             'trailing comma)' % spec[:80])
        name, sep, rest = entry.partition('=')
        if not sep:
            raise ValueError('cluster entry %r is not NAME=HOST:PORT[*WEIGHT]' % entry[:80])
        if not _NAME.match(name):
            raise ValueError('cluster entry %r: the name must be 1 to 64 letters, digits, '
                             "'_', '.' or '-'" % entry[:80])
        addr, star, weight = rest.partition('*')
        if star:
            if not (weight.isascii() and weight.isdigit()) or not 1 <= int(weight) <= MAX_WEIGHT:
                raise ValueError('cluster entry %r: the weight must be an integer from 1 to %d'
                                 % (entry[:80], MAX_WEIGHT))
        try:
            host, port = parse_addr(addr, port_zero=False)
        except ValueError as e:
            raise ValueError('cluster entry %r: %s' % (entry[:80], e)) from None
        if any(m.name == name for m in members):
            raise ValueError('the cluster layout names %r twice' % name)
        if (host, port) in seen_addrs:
            raise ValueError('cluster members %r and %r have the same address %s:%d'
                             % (seen_addrs[host, port], name, host, port))
        seen_addrs[host, port] = name
        members.append(Member(name, host, port, int(weight) if star else 1))
        if len(members) > MAX_MEMBERS:
            raise ValueError('a cluster has at most %d members' % MAX_MEMBERS)
    return tuple(members)


def ring_table(servers=range(1, 11), vnodes=(1, 4, 16, 64, 256, 1024)):
    """{(n, v): slot-share imbalance} for members s1..sn, to pick DEFAULT_VNODES from data."""
    out = {}
    for n in servers:
        members = [Member('s%d' % i, '127.0.0.1', 7000 + i) for i in range(1, n + 1)]
        for v in vnodes:
            out[n, v] = imbalance(Ring(members, v).slot_counts())
    return out


if __name__ == '__main__':
    _VN = (1, 4, 16, 64, 256, 1024)
    _TABLE = ring_table(vnodes=_VN)
    print('servers ' + ''.join('%8s' % ('v=%d' % v) for v in _VN))
    for _n in range(1, 11):
        print('%7d ' % _n + ''.join('%8.2f' % _TABLE[_n, v] for v in _VN))
