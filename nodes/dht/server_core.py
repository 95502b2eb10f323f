"""Index-server core: the hash partition a server owns, behind a small storage interface.

Sans-I/O. `ServerConnection.receive(data, now)` takes the bytes one client connection sent
and returns `(reply_bytes, close)`. The decoder keeps partial frames between calls, so a
request may arrive in any number of pieces and several requests may arrive at once
(pipelining: replies come back in request order, each carrying its request id).

Replication policy (documented choice, see the package docstring): the *client* writes
every entry to all R + 1 servers of the key's preference list and counts the register as
done only when all of them acknowledged, so an acknowledged entry survives the loss of any
R of those servers; searches read one copy and fall back along the preference list.
Servers therefore never talk to each other, and a server stores whatever it is sent;
entries for keys outside its preference range are still stored (the client's ring decides)
but counted as `misrouted` so a ring mismatch shows up in the summary.

Storage interface (`MemoryStore` is the one implementation): `add(name, addr)`,
`remove(name, addr)`, `holders(name)` and `len()`; all return plain values.
"""

from . import codec
from .ring import parse_addr


class MemoryStore:
    """In-memory index: file name -> insertion-ordered set of holder addresses."""

    def __init__(self):
        self._index = {}
        self.entries = 0

    def add(self, name, addr):
        """Record that addr holds name; return True if it was new."""
        holders = self._index.setdefault(name, {})
        if addr in holders:
            return False
        holders[addr] = None
        self.entries += 1
        return True

    def remove(self, name, addr):
        """Forget that addr holds name; return True if it was there."""
        holders = self._index.get(name)
        if not holders or addr not in holders:
            return False
        del holders[addr]
        self.entries -= 1
        if not holders:
            del self._index[name]
        return True

    def holders(self, name):
        """Return the holders of name, oldest first (empty tuple if none)."""
        return tuple(self._index.get(name, ()))

    def __len__(self):
        return len(self._index)


def valid_name(name):
    """Return an error text if name cannot be a shared file name, else None."""
    if not name or name in ('.', '..') or '/' in name or '\0' in name:
        return 'invalid file name %r' % name[:100]
    return None


class ServerCore:
    """Answers REGISTER, UNREGISTER and SEARCH against a store."""

    def __init__(self, name, store=None, ring=None, replicas=0):
        self.name = name
        self.store = store if store is not None else MemoryStore()
        self.ring = ring
        self.replicas = replicas
        self.counters = dict(register=0, unregister=0, search=0, found=0, not_found=0,
                             errors=0, misrouted=0, entries_added=0, entries_removed=0)

    def _check_owner(self, name):
        """Count keys this server is not a replica of under the configured ring."""
        if self.ring is not None and self.name not in self.ring.replicas(name, self.replicas):
            self.counters['misrouted'] += 1

    def handle(self, msg, now):
        """Return the reply to one decoded request."""
        c = self.counters
        t = type(msg)
        if t is codec.Search:
            c['search'] += 1
            holders = self.store.holders(msg.name)
            if holders:
                c['found'] += 1
                return codec.Found(msg.req, msg.name, holders)
            c['not_found'] += 1
            return codec.NotFound(msg.req, msg.name)
        if t is codec.Register or t is codec.Unregister:
            for name in msg.names:
                bad = valid_name(name)
                if bad:
                    c['errors'] += 1
                    return codec.Error(msg.req, codec.ERR_MALFORMED, bad)
            try:
                parse_addr(msg.addr)
            except ValueError as exc:
                c['errors'] += 1
                return codec.Error(msg.req, codec.ERR_MALFORMED, str(exc))
            changed = 0
            if t is codec.Register:
                c['register'] += 1
                for name in msg.names:
                    self._check_owner(name)
                    changed += self.store.add(name, msg.addr)
                c['entries_added'] += changed
            else:
                c['unregister'] += 1
                for name in msg.names:
                    changed += self.store.remove(name, msg.addr)
                c['entries_removed'] += changed
            return codec.Ack(msg.req, changed)
        c['errors'] += 1
        return codec.Error(msg.req, codec.ERR_UNEXPECTED,
                           'an index server does not answer %s' % t.__name__)


class ServerConnection:
    """One client connection to an index server: bytes in, reply bytes out."""

    def __init__(self, core, max_frame=codec.MAX_FRAME):
        self.core = core
        self.decoder = codec.Decoder(max_frame)

    def receive(self, data, now):
        """Feed bytes; return (reply bytes, whether to close the connection)."""
        out = []
        close = False
        for item in self.decoder.feed(data):
            if isinstance(item, codec.ProtocolError):
                self.core.counters['errors'] += 1
                out.append(codec.encode(codec.Error(item.req, item.code, item.text)))
                close = close or item.fatal
            elif isinstance(item, codec.Chunk):
                self.core.counters['errors'] += 1
                out.append(codec.encode(codec.Error(0, codec.ERR_UNEXPECTED,
                                                    'file data sent to an index server')))
                close = True
                break
            else:
                out.append(codec.encode(self.core.handle(item, now)))
        return b''.join(out), close

    def eof(self):
        """Return an error reply if the client closed mid-frame, else b''."""
        if self.decoder.pending and not self.decoder.broken:
            self.core.counters['errors'] += 1
            return codec.encode(codec.Error(0, codec.ERR_MALFORMED,
                                            'connection closed inside a frame (truncated)'))
        return b''
