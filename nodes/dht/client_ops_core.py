"""The DHT client's operations as a sans-I/O core: the driver moves bytes and time, nothing else.

Why a core: the same client logic must run over asyncio sockets (`client.py`) and, later,
inside a discrete-event simulator with a virtual clock and in-memory links. So this module
owns every decision the client makes -- search with replica failover, the write-to-all
fan-out (an operation is acknowledged only when every storing server stored it), the
request window (W requests in flight per index-server connection), per-request and idle
timeouts, download resume from the next holder, and how many operations run at once --
and imports nothing that does I/O or reads a clock.

Interface (the one every protocol core of the project speaks):
- in: `receive(conn, data, now)`, `connected(conn, now)`, `connection_lost(conn, reason,
  now)`, `handle_timer(now)`, `abort(op_id, reason, now)` (the driver could not write);
- out: `actions()` returns and clears the list of `Connect` / `Send` / `Close` actions and
  `OpDone` / `FileData` / `Notice` events, in order; `get_timer()` is the next deadline.
A connection id is `('index', server)` or `('peer', holder address, serial)`.

Invariants: an operation is queued (`todo`), running (`active`, at most `limit`) or ended
(one record, with the core's `now`); an index request is either queued on its server or
sent (`ops`, at most the window, only while that connection is open); a peer connection
is busy with one download or idle for the next one to the same holder.
"""

from collections import deque

from repronet.logline import rounded_6, rounded_7

from . import codec
from .client_actions import Close, Connect, FileData, Notice, OpDone, Send
from .client_core import ChannelError, ServerLinks
from .server_core import valid_name
from .download_core import Download, DownloadError


class _Op:
    """One operation in flight; `kind` is search, download or the write op name. A search or
    download gets its candidates and failures when it starts, a write its waiting servers,
    errors and extra record fields: none is built for an operation that has no use for it."""

    __slots__ = ('id', 'kind', 'name', 't0', 'server', 'download', 'peer', 'waiting',
                 'candidates', 'failures', 'errors', 'extra')

    def __init__(self, op_id, kind, name, now):
        self.id, self.kind, self.name, self.t0 = op_id, kind, name, now
        self.server = self.download = self.peer = None


class ClientOps:
    """Every operation of one client, over a ring of index servers and holder peers.

    `direct` False turns off the short paths of a search (`_request`'s and a lone answer's
    in `receive`), which `tests/test_dht_client_paths.py` compares with the general ones."""

    direct = True

    def __init__(self, routing, addrs, window=1, timeout=5.0, limit=1):
        self.routing = routing                  # client_core.ClientCore
        self.timeout = timeout
        self.servers = ServerLinks(addrs, window, timeout)
        self.limit = max(1, limit)
        self.todo = deque()                     # operations not started yet
        self.active = {}                        # op id -> _Op
        self._timed = {}                        # ServerLink -> None: those with a deadline
        self.peers = {}                         # conn -> dict(state, addr, op, deadline)
        self.idle = {}                          # holder addr -> [conn]
        self.records = []
        self.results = {}                       # op id (1, 2, ... in submit order) -> ok
        self.messages_sent = 0
        self._out = []
        self._ids = 0
        self._serial = 0

    # -- what the driver calls ------------------------------------------------------------
    def actions(self):
        """Return and forget the actions and events produced so far."""
        out, self._out = self._out, []
        return out

    def connect_all(self, now):
        """Open a connection to every index server (before the timed part)."""
        for srv in self.servers.every():
            self._open(srv, now)

    def connecting(self):
        """True while some index-server connection is still being opened."""
        return any(s.state == 'connecting' for s in self.servers.values())

    def submit(self, ops, now):
        """Queue operations: ('search', name), ('download', name), or
        (op, kind, names, servers, addr, batched): a write of names to every one of servers,
        acknowledged only when all of them stored it (`batched` adds `files` to its record)."""
        self.todo.extend(ops)
        self._start(now)

    def finished(self):
        """True when every submitted operation has ended."""
        return not self.todo and not self.active

    def receive(self, conn, data, now):
        """Bytes arrived on conn."""
        if conn[0] == 'index':
            srv = self.servers[conn[1]]
            answer = srv.channel.lone_answer(data) if self.direct else None
            if answer is not None:
                op = srv.ops.pop(answer[0], None)
                if op is not None:
                    self._answered(op, conn[1], answer, now)
            else:
                try:
                    replies = srv.channel.receive(data, now)
                except ChannelError as exc:
                    self._server_failed(srv, str(exc), now)
                    return
                for req, reply in replies:
                    op = srv.ops.pop(req, None)
                    if op is not None:
                        self._reply(op, conn[1], reply, now)
            if srv.queue:
                self._pump(srv, now)
            self._untimed(srv)
        else:
            self._peer_data(conn, data, now)
        self._start(now)

    def connected(self, conn, now):
        """The connection the core asked for is open."""
        if conn[0] == 'index':
            srv = self.servers[conn[1]]
            if srv.state == 'connecting':
                srv.state, srv.deadline = 'open', None
                self._pump(srv, now)
                self._untimed(srv)
        else:
            p = self.peers.get(conn)
            if p is not None and p['state'] == 'connecting':
                p['state'] = 'open'
                self._get(conn, now)

    def connection_lost(self, conn, reason, now):
        """conn failed to open, broke or was closed by the other side."""
        if conn[0] == 'index':
            srv = self.servers[conn[1]]
            if srv.state != 'closed':
                self._server_failed(srv, reason, now, close=False)
        elif conn in self.peers:
            self._peer_failed(conn, reason, now, close=False)
        self._start(now)

    def get_timer(self):
        """The earliest deadline at which handle_timer must be called, or None.

        Only the index-server links in `_timed` can have a deadline (the connect deadline, or
        a reply's while requests are out), so a client of 8 or 1,000 servers asks the one or
        two it is waiting for, not every link. Asked after every reply: it builds no lists."""
        best = None
        for s in self._timed:
            t = s.deadline
            if t is not None and (best is None or t < best):
                best = t
            t = s.channel.next_deadline()
            if t is not None and (best is None or t < best):
                best = t
        for p in self.peers.values():
            t = p['deadline']
            if t is not None and (best is None or t < best):
                best = t
        return best

    def handle_timer(self, now):
        """Fail the connections whose reply, connect or transfer is late."""
        for srv in [s for s in self.servers.values() if s.state != 'closed']:
            if srv.deadline is not None and now >= srv.deadline:
                self._server_failed(srv, 'no connection to %s in %.1f s'
                                    % (srv.conn[1], self.timeout), now)
            elif srv.channel.expired(now):
                self._server_failed(srv, 'no reply from %s in %.1f s'
                                    % (srv.conn[1], self.timeout), now)
        for conn, p in list(self.peers.items()):
            if p['deadline'] is not None and now >= p['deadline']:
                self._peer_failed(conn, 'no data from %s for %.1f s'
                                  % (p['addr'], self.timeout), now)
        self._start(now)

    def abort(self, op_id, reason, now):
        """The driver cannot store the download (e.g. disk full): fail it, never resume."""
        op = self.active.get(op_id)
        if op is not None and op.peer is not None:
            self._drop_peer(op.peer)
            self._end(op, False, now, op.download.received, error=reason)
            self._start(now)

    # -- operations -----------------------------------------------------------------------
    def _start(self, now):
        """Start queued operations while fewer than `limit` run."""
        while self.todo and len(self.active) < self.limit:
            spec = self.todo.popleft()
            self._ids = op_id = self._ids + 1
            if len(spec) == 2:
                kind, name = spec
                op = self.active[op_id] = _Op(op_id, kind, name, now)
                bad = valid_name(name) if kind == 'download' else None
                if bad:                  # never write outside the downloads folder
                    self._end(op, False, now, error=bad)
                    continue
                op.candidates, op.failures = self.routing.candidates(name), []
                self._search_next(op, now)
            else:
                opname, kind, names, servers, addr, batched = spec
                op = self.active[op_id] = _Op(op_id, opname, names[0], now)
                op.extra = {'files': len(names)} if batched else {}
                op.server, op.waiting, op.errors = servers[0], set(servers), []
                for s in servers:
                    self._request(s, op, kind, (addr, tuple(names)), now)

    def _search_next(self, op, now):
        """Ask the next candidate server, or end the search when none is left."""
        if not op.candidates:
            err = 'no index server answered for %r (%s)' % (op.name, '; '.join(op.failures))
            op.server = None
            self._end(op, False, now, error=err, **({} if op.kind == 'download' else
                                                    {'holders': 0}))
            return
        op.server = op.candidates.pop(0)     # asked alone: no waiting set (a write's)
        self._request(op.server, op, codec.Search, (op.name,), now)

    def _reply(self, op, server, reply, now):
        """A reply (or a failure, reply None + text) for op from server."""
        if isinstance(reply, str):
            failure, reply = reply, None
        if op.kind in ('search', 'download') and op.download is None:
            if reply is None:
                op.failures.append('%s: %s' % (server, failure))
                self.routing.mark_down(server)
                self._search_next(op, now)
                return
            self.routing.mark_up(server)
            if isinstance(reply, codec.Found):
                holders = reply.holders
                if op.kind == 'search':
                    self._end(op, True, now, holders=len(holders))
                else:
                    self._fetch(op, holders, now)
                return
            err = 'not found' if isinstance(reply, codec.NotFound) else \
                'server %s: error %s' % (server, getattr(reply, 'text', reply))
            self._end(op, False, now, error=err, **({'holders': 0} if op.kind == 'search'
                                                    else {}))
            return
        op.waiting.discard(server)          # a write: every server of op.waiting answers
        if type(reply) is not codec.Ack:
            op.errors.append('%s: %s' % (server, failure if reply is None else reply.text))
        if not op.waiting:
            errs = {'error': '; '.join(op.errors)} if op.errors else {}
            self._end(op, not op.errors, now, **op.extra, **errs)

    def _answered(self, op, server, answer, now):
        """_reply of a FOUND or NOTFOUND read alone (`Channel.lone_answer`: answer is (req,
        name, holders or None)). A search ends here, as _reply ends it, without the message
        object; any other operation gets the message through _reply."""
        req, name, holders = answer
        if op.kind != 'search':
            self._reply(op, server, codec.NotFound(req, name) if holders is None
                        else codec.Found(req, name, holders), now)
            return
        if self.routing.down:
            self.routing.mark_up(server)
        if holders is None:
            self._end(op, False, now, error='not found', holders=0)
        else:
            self._end(op, True, now, holders=len(holders))

    def _end(self, op, ok, now, nbytes=0, **extra):
        """Record op (with the core's now) and free its slot."""
        self.active.pop(op.id, None)
        rec = {'t': rounded_6(now), 'event': 'op', 'op': op.kind, 'name': op.name, 'ok': ok,
               'latency': rounded_7(now - op.t0), 'server': op.server, 'bytes': nbytes,
               **extra}
        self.records.append(rec)
        self.results[op.id] = ok
        self._out.append(OpDone(op.id, rec))

    # -- index-server connections ---------------------------------------------------------
    def _open(self, srv, now):
        if srv.state == 'closed':
            srv.state, srv.deadline = 'connecting', now + self.timeout
            self._timed[srv] = None
            self._out.append(Connect(srv.conn, srv.addr))

    def _untimed(self, srv):
        """Take srv out of `_timed` once it has no deadline (nothing out, not connecting)."""
        if srv.deadline is None and not srv.channel.outstanding:
            self._timed.pop(srv, None)

    def _request(self, server, op, kind, fields, now):
        """Send op's request to server now if its connection is open with nothing queued and
        room in the window (every search of a client with one request out at a time: no
        queueing, opening or pumping for it), else queue it and open or pump."""
        srv = self.servers[server]
        if srv.state == 'open' and not srv.queue and srv.channel.can_send() and self.direct:
            self._send(srv, op, kind, fields, now)
            return
        srv.queue.append((op, kind, fields))
        self._open(srv, now)
        self._pump(srv, now)

    def _pump(self, srv, now):
        """Send queued requests while the window has room."""
        while srv.state == 'open' and srv.queue and srv.channel.can_send():
            op, kind, fields = srv.queue.popleft()
            self._send(srv, op, kind, fields, now)

    def _send(self, srv, op, kind, fields, now):
        """Send op's request kind(fields) on srv, open with room in its window."""
        req, data = srv.channel.send(kind, now, fields)
        srv.ops[req] = op
        self._timed[srv] = None
        self.messages_sent += 1
        self._out.append(Send(srv.conn, data))

    def _server_failed(self, srv, reason, now, close=True):
        """Give up on a connection: every request on it, sent or queued, fails with reason."""
        if close:
            self._out.append(Close(srv.conn))
        if srv.state == 'connecting':
            self._out.append(Notice('cannot connect to index server %s: %s'
                                    % (srv.conn[1], reason)))
        if srv.state == 'connecting' or srv.ops or srv.queue:
            self.routing.mark_down(srv.conn[1])     # an idle close is no failure
        srv.state, srv.deadline = 'closed', None
        srv.channel.fail()
        self._timed.pop(srv, None)
        lost = list(srv.ops.values()) + [op for op, _, _ in srv.queue]
        srv.ops.clear()
        srv.queue.clear()
        for op in lost:
            if op.id in self.active:
                self._reply(op, srv.conn[1], reason, now)

    # -- holder peers ---------------------------------------------------------------------
    def _fetch(self, op, holders, now):
        """Start (or resume) the download of op from its current holder."""
        if op.download is None:
            op.download = Download(op.name, holders)
        addr = op.download.holder
        free = self.idle.get(addr)
        if free:
            conn = free.pop()
            self.peers[conn]['op'] = op
            op.peer = conn
            self._get(conn, now)
            return
        self._serial += 1
        conn = ('peer', addr, self._serial)
        self.peers[conn] = {'state': 'connecting', 'addr': addr, 'op': op,
                            'deadline': now + self.timeout}
        op.peer = conn
        self._out.append(Connect(conn, addr))

    def _get(self, conn, now):
        p = self.peers[conn]
        op = p['op']
        self._serial += 1
        p['deadline'] = now + self.timeout
        self.messages_sent += 1
        self._out.append(Send(conn, op.download.request(self._serial)))

    def _peer_data(self, conn, data, now):
        p = self.peers.get(conn)
        if p is None or p['op'] is None:
            self._drop_peer(conn)
            return
        op, d = p['op'], p['op'].download
        p['deadline'] = now + self.timeout
        offset = d.received
        try:
            chunks, exc = d.receive(data), None
        except DownloadError as e:
            chunks, exc = getattr(e, 'chunks', []), e
        if chunks:
            self._out.append(FileData(op.id, op.name, offset, b''.join(chunks)))
        if d.done:
            p['op'], p['deadline'] = None, None
            self.idle.setdefault(p['addr'], []).append(conn)
            self._end(op, True, now, d.size, holder=d.holder,
                      **({'resumes': d.resumes} if d.resumes else {}))
        elif exc is not None:
            self._peer_failed(conn, str(exc), now)

    def _peer_failed(self, conn, reason, now, close=True):
        """A holder failed: resume from the next holder, or fail the download."""
        p = self._drop_peer(conn, close)
        op = p and p['op']
        if op is None or op.id not in self.active:
            return
        if op.download.holder_failed(reason) is None:
            self._end(op, False, now, op.download.received, error=op.download.error())
        else:
            self._fetch(op, (), now)

    def _drop_peer(self, conn, close=True):
        p = self.peers.pop(conn, None)
        if p is not None:
            if close:
                self._out.append(Close(conn))
            if conn in self.idle.get(p['addr'], ()):
                self.idle[p['addr']].remove(conn)
        return p

