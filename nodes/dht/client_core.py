"""Client routing and the per-connection request state, used by `client_ops_core.ClientOps`.

Sans-I/O. `ClientCore` decides which servers a request goes to; `Channel` is the state of
one persistent connection to one index server: it numbers requests, enforces the window
(outstanding requests per connection; 1 = one request at a time, as in the seed), matches
replies to requests by id and reports the reply deadline. `ClientOps` runs the operations.

Register modes, as in the seed report:
- batched ("optimized"): the N names are grouped by the servers that store them (owner,
  plus the next R servers with `--replicas R`) and each server gets one message, so N
  files cost K messages for K servers (split only if a message would exceed the frame limit
  or the `server_core.MAX_NAMES` names a server takes in one message);
- unbatched: one message per file per storing server.

Writes go to all R + 1 servers of a key (write-all); a search asks the owner and, when the
owner's connection fails or times out, the next server of the preference list (read-one
with failover). A server that failed is marked down and tried last from then on, so one
dead server costs one timeout, not one per request.
"""

from collections import OrderedDict, deque

from . import codec
from .server_core import MAX_NAMES


class ClientCore:
    """Routing decisions of one client over a ring."""

    def __init__(self, ring, replicas=0, max_frame=codec.MAX_FRAME):
        if replicas < 0:
            raise ValueError('replicas must be >= 0')
        self.ring = ring
        self.replicas = min(replicas, len(ring.servers) - 1)
        self.max_frame = max_frame
        self.down = set()

    def storing(self, name):
        """Return the servers that store name, owner first."""
        return self.ring.replicas(name, self.replicas)

    def batches(self, names):
        """Group names by storing server: list of (server, tuple of names), one per server."""
        groups = OrderedDict()
        for name in names:
            for server in self.storing(name):
                groups.setdefault(server, []).append(name)
        out = []
        budget = self.max_frame // 2      # leave room for the address and headers
        for server, group in groups.items():
            part, size = [], 0
            for name in group:
                n = 2 + len(name.encode('utf-8'))
                if part and (size + n > budget or len(part) == MAX_NAMES):
                    out.append((server, tuple(part)))
                    part, size = [], 0
                part.append(name)
                size += n
            out.append((server, tuple(part)))
        return out

    def unbatched(self, names):
        """One operation per name: list of (name, servers that must acknowledge it)."""
        return [(name, self.storing(name)) for name in names]

    def candidates(self, name):
        """Servers to ask for name, in preference order, servers marked down last (a new
        list: the caller uses it up)."""
        pref = self.storing(name)      # Ring.preference gives a new list every time
        if not self.down:           # the usual case: no list built again
            return pref
        return _down_last(pref, self.down)

    def mark_down(self, server):
        """Remember that server failed; later lookups try it last."""
        self.down.add(server)

    def mark_up(self, server):
        """Remember that server answered again."""
        self.down.discard(server)


def _down_last(pref, down):
    """pref with the servers in down moved to its end, each part in its order. A function
    of its own: a comprehension inside candidates() would make candidates keep self in a
    closure cell, one made on every call of CPython 3.11 (every search asks it)."""
    return [s for s in pref if s not in down] + [s for s in pref if s in down]


_NONE = object()        # no such request (a deadline may be None)


class ChannelError(Exception):
    """The connection's byte stream broke the protocol."""


class Channel:
    """Request/reply state of one connection to one index server."""

    def __init__(self, server, window=1, timeout=None, max_frame=codec.MAX_FRAME):
        self.server = server
        self.window = max(1, window)
        self.timeout = timeout
        self.decoder = codec.Decoder(max_frame)
        self.outstanding = OrderedDict()    # req -> reply deadline (None: no timeout)
        self._next_req = 1

    def can_send(self):
        """Return True if the window has room for another request."""
        return len(self.outstanding) < self.window

    def send(self, kind, now, fields):
        """Build request kind(req, *fields) (fields: a tuple); return (req, frame bytes). A
        SEARCH (one per search of every client) is encoded from its one field, the name
        (`codec.encode_search`), without a `codec.Search` object: the channel keeps only
        each request's deadline. (fields as one tuple, not *fields: a call with a star
        costs CPython 3.11 about 1,000 instructions more, twice a search.)"""
        req = self._next_req
        self._next_req = (req + 1) & 0xFFFFFFFF or 1
        if kind is codec.Search:
            (name,) = fields
            data = codec.encode_search(req, name)
        else:
            data = codec.encode(kind(req, *fields))
        self.outstanding[req] = now + self.timeout if self.timeout else None
        return req, data

    def receive(self, data, now):
        """Feed reply bytes; return list of (req, reply); raise ChannelError."""
        out = []
        for item in self.decoder.feed(data):
            if isinstance(item, codec.ProtocolError):
                if item.fatal or item.req not in self.outstanding:
                    raise ChannelError('bad reply from %s: %s' % (self.server, item.text))
                reply = codec.Error(item.req, item.code, item.text)
            elif isinstance(item, codec.Chunk):
                raise ChannelError('unexpected file data from %s' % self.server)
            else:
                reply = item
            if self.outstanding.pop(reply.req, _NONE) is _NONE:
                if reply.req == 0 and isinstance(reply, codec.Error):
                    raise ChannelError('server %s: %s' % (self.server, reply.text))
                raise ChannelError('reply to unknown request %d from %s'
                                   % (reply.req, self.server))
            out.append((reply.req, reply))
        return out

    def lone_answer(self, data):
        """(req, name, holders) when data is one well-formed FOUND (holders: a tuple) or
        NOTFOUND (None) alone, answering an outstanding request, with nothing held before
        it: the one reply receive() would return, read without the decoder's loop or a
        message object (`codec.lone_answer`), and the request is no longer outstanding.
        Else None, and nothing changed: receive() reads data."""
        dec = self.decoder
        if not dec.lone_answers or not dec.between_frames():
            return None
        answer = codec.lone_answer(data, dec.max_frame)
        if answer is None or self.outstanding.pop(answer[0], _NONE) is _NONE:
            return None
        return answer

    def next_deadline(self):
        """Return the earliest reply deadline, or None."""
        if not self.outstanding:        # most of a client's connections, after every reply
            return None
        for deadline in self.outstanding.values():
            return deadline       # requests are sent in order with the same timeout
        return None

    def expired(self, now):
        """Return True if the oldest outstanding request is past its deadline."""
        deadline = self.next_deadline()
        return deadline is not None and now >= deadline

    def fail(self):
        """Connection lost: return and forget the ids of the outstanding requests."""
        lost = list(self.outstanding)
        self.outstanding.clear()
        return lost


class ServerLink:
    """One index server's connection as ClientOps keeps it: state, request queue,
    request id -> operation."""

    def __init__(self, name, addr, window, timeout):
        self.conn = ('index', name)
        self.addr = addr
        self.channel = Channel(name, window, timeout)
        self.state = 'closed'           # closed | connecting | open
        self.deadline = None            # connect deadline
        self.queue = deque()            # (op, kind, fields) waiting for the window
        self.ops = {}                   # req -> op


class ServerLinks(dict):
    """Index-server connections by name, each made when first asked for: a client of
    1,000 servers (the simulator's scale runs) talks to a few, and holds only those.
    values() are the ones made so far; every() makes them all."""

    def __init__(self, addrs, window, timeout):
        super().__init__()
        self.addrs, self.window, self.timeout = addrs, window, timeout

    def __missing__(self, name):
        if name not in self.addrs:
            raise KeyError(name)
        srv = self[name] = ServerLink(name, '%s:%d' % tuple(self.addrs[name]), self.window,
                                      self.timeout)
        return srv

    def every(self):
        return [self[name] for name in self.addrs]
