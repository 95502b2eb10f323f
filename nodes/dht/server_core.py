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

Bounded memory, whatever clients send:
- a reply always fits a frame: names are file names (`MAX_NAME` bytes), holders are
  addresses with a host of at most `ring.MAX_HOST` bytes, and a name keeps at most
  `MAX_HOLDERS` holders (a REGISTER that would add one more is refused with an ERROR and
  changes nothing), so no reply exceeds `MAX_REPLY`;
- a connection answers pipelined requests a batch at a time (`OUTPUT_BUDGET` reply bytes
  per call, at least one request) and not at all while its driver's output is paused
  (`pause_output` / `resume_output`); the requests still to answer wait decoded, and while
  any wait (`waiting`) the driver stops reading, so the bytes a connection holds stay near
  one read plus one batch however many requests a client pipelines;
- a connection with no traffic for `idle_timeout` seconds is closed: `get_timer()` and
  `handle_timer(now)` as in every core of the project (the driver only closes).

Storage interface (`MemoryStore` is the one implementation): `add(name, addr)`,
`remove(name, addr)`, `holders(name)`, `count(name)`, `has(name, addr)` and `len()`; all
return plain values.
"""

from collections import deque

from . import codec
from .ring import MAX_HOST, parse_addr

MAX_NAME = 255              # bytes: the longest file name Linux allows (NAME_MAX)
MAX_HOLDERS = 1024          # holders one name keeps on one server
# The largest reply: FOUND for a longest name with MAX_HOLDERS longest 'host:65535' holders
# (frame header, str name, strlist count, one str per holder). NOTFOUND echoes at most a
# MAX_STR name and ERROR text is cut to 2000 characters, both smaller.
MAX_REPLY = 4 + 6 + (2 + MAX_NAME) + 4 + MAX_HOLDERS * (2 + MAX_HOST + len(':65535'))
OUTPUT_BUDGET = 64 * 1024   # reply bytes one call answers before it waits to be asked again
IDLE_TIMEOUT = 300.0        # seconds; generous: a client reopens a closed one in its timed part


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

    def count(self, name):
        """Return how many holders name has."""
        return len(self._index.get(name, ()))

    def has(self, name, addr):
        """Return True if addr holds name."""
        return addr in self._index.get(name, ())

    def __len__(self):
        return len(self._index)


def valid_name(name):
    """Return an error text if name cannot be a shared file name, else None."""
    if not name or name in ('.', '..') or '/' in name or '\0' in name:
        return 'invalid file name %r' % name[:100]
    if len(name.encode('utf-8', 'surrogatepass')) > MAX_NAME:
        return 'invalid file name %r...: longer than %d bytes' % (name[:40], MAX_NAME)
    return None


class ServerCore:
    """Answers REGISTER, UNREGISTER and SEARCH against a store."""

    def __init__(self, name, store=None, ring=None, replicas=0):
        self.name = name
        self.store = store if store is not None else MemoryStore()
        self.ring = ring
        self.replicas = replicas
        self.counters = dict(register=0, unregister=0, search=0, found=0, not_found=0,
                             errors=0, refused=0, misrouted=0, entries_added=0,
                             entries_removed=0, idle_closed=0)

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
            holders = self.store.holders(msg.name)[:MAX_HOLDERS]
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
                full = [n for n in msg.names if self.store.count(n) >= MAX_HOLDERS
                        and not self.store.has(n, msg.addr)]
                if full:
                    c['refused'] += 1
                    return codec.Error(msg.req, codec.ERR_TOO_LARGE,
                                       '%r already has %d holders, the most an index server'
                                       ' keeps; nothing registered' % (full[0][:100], MAX_HOLDERS))
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
    """One client connection to an index server: bytes in, reply bytes out, a batch at a time."""

    def __init__(self, core, max_frame=codec.MAX_FRAME, idle_timeout=IDLE_TIMEOUT, now=0.0):
        self.core = core
        self.decoder = codec.Decoder(max_frame)
        self.idle_timeout = idle_timeout
        self.output_paused = False
        self._inbox = deque()       # decoded requests not answered yet
        self._eof = False
        self._told = False          # the truncation error went out
        self._last = now            # last sign of life: bytes in, or output drained

    @property
    def waiting(self):
        """True while decoded requests wait for an answer: the driver must stop reading."""
        return bool(self._inbox)

    def receive(self, data, now):
        """Feed bytes; return (reply bytes of the next batch, whether to close)."""
        if data:
            self._last = now
            self._inbox.extend(self.decoder.feed(data))
        return self._answer(now)

    def more(self, now):
        """Return the next batch of replies (the driver's output has room again)."""
        return self._answer(now)

    def pause_output(self):
        """The driver cannot write more for now: answer nothing until resume_output."""
        self.output_paused = True

    def resume_output(self, now):
        """The driver's output drained; return the next batch."""
        self.output_paused = False
        self._last = now
        return self._answer(now)

    def eof(self):
        """The client sends nothing more. Return the error for a frame it left unfinished when
        no request waits (then the driver closes); else more() answers the waiting ones and
        says close after the last."""
        self._eof = True
        if self._inbox:
            return b''
        return self._truncated()

    @property
    def finished(self):
        """True once the client closed its side and every request it sent was answered."""
        return self._eof and not self._inbox

    def get_timer(self):
        """When handle_timer must be called next (the idle deadline), or None."""
        return None if self.idle_timeout is None else self._last + self.idle_timeout

    def handle_timer(self, now):
        """Return (b'', True) if the connection was idle too long, else (b'', False)."""
        deadline = self.get_timer()
        if deadline is None or now < deadline:
            return b'', False
        self.core.counters['idle_closed'] += 1
        self._inbox.clear()
        return b'', True

    def _answer(self, now):
        """Answer waiting requests up to OUTPUT_BUDGET bytes (at least one), unless paused."""
        out, size, close = [], 0, False
        while self._inbox and not self.output_paused and size < OUTPUT_BUDGET:
            data, close = self._reply(self._inbox.popleft(), now)
            out.append(data)
            size += len(data)
            if close:
                self._inbox.clear()
        if self._eof and not self._inbox and not close:
            out.append(self._truncated())
            close = True
        return b''.join(out), close

    def _truncated(self):
        """The ERROR for a frame cut short by the client's close (once), or b''."""
        if self._told or not self.decoder.pending or self.decoder.broken:
            return b''
        self._told = True
        self.core.counters['errors'] += 1
        return codec.encode(codec.Error(0, codec.ERR_MALFORMED,
                                        'connection closed inside a frame (truncated)'))

    def _reply(self, item, now):
        """(reply bytes, close) for one decoded item."""
        if isinstance(item, codec.ProtocolError):
            self.core.counters['errors'] += 1
            return codec.encode(codec.Error(item.req, item.code, item.text)), item.fatal
        if isinstance(item, codec.Chunk):
            self.core.counters['errors'] += 1
            return codec.encode(codec.Error(0, codec.ERR_UNEXPECTED,
                                            'file data sent to an index server')), True
        return codec.encode(self.core.handle(item, now)), False
