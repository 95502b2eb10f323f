"""Consistent hashing ring over index-server names (Karger et al., STOC 1997).

Each server is placed on a 64-bit ring at `vnodes` points, sha256(f"{server}#{i}"); a file
name hashes to sha256(name) and is owned by the first server point clockwise from it.
Virtual nodes even out the partition sizes, and adding or removing a server moves only
the keys next to its points, so servers can be counted freely.

Replication: the preference list of a key is its owner followed by the next distinct
servers clockwise (as in Dynamo's preference list); with `--replicas R` an entry lives on
the first R + 1 of them. Everything is derived from server names only, so every client and
server given the same `--servers` list (in any order) computes the same ring.
"""

import bisect
import hashlib
import ipaddress
import re

DEFAULT_VNODES = 100
MAX_VNODES = 65536          # ring points per server a command line may ask for
MAX_REPLICAS = 1000         # extra copies a command line may ask for (more servers than a run has)
MEMO = 65536                # preference lists a ring remembers (Ring.preference)


def key_hash(text):
    """Return the 64-bit ring position of a string."""
    return int.from_bytes(hashlib.sha256(text.encode('utf-8')).digest()[:8], 'big')


class Ring:
    """Consistent-hashing ring: owner and preference list of a key."""

    def __init__(self, servers, vnodes=DEFAULT_VNODES):
        servers = sorted(set(servers))
        if not servers:
            raise ValueError('a ring needs at least one server')
        if vnodes < 1:
            raise ValueError('vnodes must be at least 1')
        self.servers = tuple(servers)
        self.vnodes = vnodes
        points = sorted((key_hash('%s#%d' % (s, i)), s) for s in servers for i in range(vnodes))
        self._pos = [p for p, _ in points]
        self._srv = [s for _, s in points]
        self._memo = {}         # (key, n) -> preference list, at most MEMO of them

    def owner(self, key):
        """Return the server that owns key."""
        i = bisect.bisect_right(self._pos, key_hash(key))
        return self._srv[i % len(self._srv)]

    def preference(self, key, n):
        """Return the owner and the next distinct servers clockwise, n servers at most.

        Remembered for the last MEMO keys: in the simulator one shared ring answers every
        client, and a name is registered, then searched, by many (its SHA-256 through
        OpenSSL was a tenth of a search under PyPy)."""
        found = self._memo.get((key, n))
        if found is None:
            if len(self._memo) >= MEMO:
                self._memo.clear()
            found = self._memo[(key, n)] = tuple(self._preference(key, n))
        return list(found)

    def _preference(self, key, n):
        """preference() without the memory."""
        n = min(n, len(self.servers))
        i = bisect.bisect_right(self._pos, key_hash(key))
        out = []
        total = len(self._srv)
        for step in range(total):
            s = self._srv[(i + step) % total]
            if s not in out:
                out.append(s)
                if len(out) == n:
                    break
        return out

    def replicas(self, key, replicas):
        """Return the servers that store key with `replicas` extra copies (owner first)."""
        return self.preference(key, replicas + 1)


_SHARED = {}


def shared_ring(servers, vnodes=DEFAULT_VNODES):
    """The Ring of these server names and vnodes, built once per process.

    A real node builds one ring; the simulator runs thousands of nodes in one process,
    each of which would hash the same points again (1,000 servers x 100 vnodes each).
    A Ring never changes once built, so sharing it is safe; a few are kept."""
    key = (tuple(servers), vnodes)
    ring = _SHARED.get(key)
    if ring is None:
        if len(_SHARED) >= 8:
            _SHARED.clear()
        ring = _SHARED[key] = Ring(servers, vnodes)
    return ring


def parse_servers(text):
    """Parse 's1=IP:PORT,s2=IP:PORT' into an ordered dict name -> (host, port).

    The last few texts parsed are remembered (a copy is returned): in the simulator
    thousands of nodes get the same 1,000-server list, and checking every address again
    cost 20 ms per node."""
    found = _PARSED.get(text)
    if found is None:
        if len(_PARSED) >= 8:
            _PARSED.clear()
        found = _PARSED[text] = _parse_servers(text)
    return dict(found)


_PARSED = {}


def _parse_servers(text):
    """parse_servers without the memory."""
    out = {}
    for item in text.split(','):
        item = item.strip()
        if not item:
            continue
        name, sep, addr = item.partition('=')
        if not sep or not name:
            raise ValueError('server %r is not NAME=IP:PORT' % item)
        if name in out:
            raise ValueError('server name %r given twice' % name)
        out[name] = parse_addr(addr)
    if not out:
        raise ValueError('no servers given')
    return out


MAX_HOST = 253      # the longest DNS name (RFC 1035); an IP address is shorter
_LABEL = re.compile(r'[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z')


def parse_addr(text, port_zero=True):
    """Parse 'HOST:PORT' into (host, port); raise ValueError with one sentence if it is not.

    HOST is an IPv4 or IPv6 literal (an IPv6 one may be bracketed) or a DNS host name
    (RFC 1123: labels of letters, digits and inner hyphens, 253 bytes at most); PORT is
    1..65535, or 0 ("any", for a listening address) unless `port_zero` is False. An index
    server stores and returns holder addresses and clients connect to them, so anything
    else (a NUL, a second colon, a 60 KB host) is refused where it enters, not where a
    connect fails in some other way."""
    host, sep, port = text.rpartition(':')
    bracketed = host.startswith('[') and host.endswith(']')
    if bracketed:
        host = host[1:-1]
    if not sep or not (port.isascii() and port.isdigit() and len(port) <= 5) \
            or not (0 if port_zero else 1) <= int(port) <= 65535:
        raise ValueError('address %r is not HOST:PORT with a port of %d to 65535'
                         % (text[:60], 0 if port_zero else 1))
    if not (_is_ip(host) and (':' in host or not bracketed)
            or _is_hostname(host) and not bracketed):
        raise ValueError('address %r has a host that is neither an IP address nor a DNS'
                         ' host name' % text[:60])
    return host, int(port)


def _is_ip(host):
    """True for an IPv4 or IPv6 literal (no zone index)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return '%' not in host


def _is_hostname(host):
    """True for a DNS host name whose last label is not all digits (that would be a bad IP)."""
    if not host.isascii() or len(host) > MAX_HOST:
        return False
    labels = host.split('.')
    return all(_LABEL.match(label) for label in labels) and not labels[-1].isdigit()
