"""A small in-memory loop that drives the real client core against real server and peer
cores: no sockets, a virtual clock that jumps to the core's next deadline. Faults are
declared per address: `dead` (connect fails), `dies` (the connection breaks when a request
arrives, and the address is dead from then on), `hung` (accepts, never answers), and
`cut[addr] = n` (a peer closes after sending n file bytes). The discrete-event simulator
(a later issue) grows this into a real engine."""

import hashlib

from nodes.dht import codec
from nodes.dht.client_core import ClientCore
from nodes.dht.client_ops_core import (ClientOps, Close, Connect, FileData, Notice, OpDone,
                                       Send)
from nodes.dht.ring import Ring
from nodes.dht.server_core import ServerConnection, ServerCore
from nodes.dht.transfer import SendFile, SendFrame, ServeConnection


class Files:
    """A peer's catalog in memory: name -> bytes."""

    def __init__(self, files):
        self.files = files

    def stat(self, name):
        data = self.files.get(name)
        return None if data is None else (len(data), hashlib.sha256(data).digest())


class MemNet:
    """Index servers s1..sN at 10.0.0.i:7000 and peers by address, one client core."""

    def __init__(self, n=4, replicas=0, window=1, timeout=2.0, limit=1, peers=None):
        names = ['s%d' % i for i in range(1, n + 1)]
        self.addrs = {s: ('10.0.0.%d' % i, 7000) for i, s in enumerate(names, 1)}
        self.ring = Ring(names)
        self.servers = {'%s:%d' % self.addrs[s]: ServerCore(s, ring=self.ring, replicas=replicas)
                        for s in names}
        self.peers = {a: Files(f) for a, f in (peers or {}).items()}
        self.routing = ClientCore(self.ring, replicas)
        self.core = ClientOps(self.routing, self.addrs, window, timeout, limit)
        self.dead, self.dies, self.hung, self.cut = set(), set(), set(), {}
        self.ends = {}              # conn -> (address, server end)
        self.sent = {}              # address -> bytes the client sent there
        self.files = {}             # name -> bytearray written by FileData
        self.done = []              # op records in completion order
        self.notices = []
        self.now = 0.0

    def addr(self, server):
        return '%s:%d' % self.addrs[server]

    def run(self, ops=(), limit=None):
        """Submit ops and run until all ended; return their records in completion order."""
        first = len(self.done)
        self.core.submit(list(ops), self.now)
        while True:
            acts = self.core.actions()
            if not acts:
                when = self.core.get_timer()
                if self.core.finished() or when is None:
                    return self.done[first:]
                self.now = max(self.now, when)
                self.core.handle_timer(self.now)
                continue
            for act in acts:
                getattr(self, '_' + type(act).__name__.lower())(act)

    def _connect(self, act):
        if act.addr in self.dead:
            self.core.connection_lost(act.conn, 'connection refused', self.now)
            return
        if act.conn[0] == 'index':
            end = ServerConnection(self.servers[act.addr])
        else:
            end = [ServeConnection(self.peers[act.addr]), 0]
        self.ends[act.conn] = (act.addr, end)
        self.core.connected(act.conn, self.now)

    def _send(self, act):
        if act.conn not in self.ends:       # sent before the core learnt the link broke
            return
        addr, end = self.ends[act.conn]
        self.sent[addr] = self.sent.get(addr, 0) + len(act.data)
        if addr in self.hung:
            return
        if addr in self.dies:
            self.dead.add(addr)
            del self.ends[act.conn]
            self.core.connection_lost(act.conn, 'connection reset by peer', self.now)
            return
        if act.conn[0] == 'index':
            out, close = end.receive(act.data, self.now)
            self.core.receive(act.conn, out, self.now)
            return
        for a in end[0].receive(act.data, self.now):
            if type(a) is SendFrame:
                self.core.receive(act.conn, a.data, self.now)
            elif type(a) is SendFile:
                data = self.peers[addr].files[a.name][a.offset:a.offset + a.count]
                for i in range(0, len(data), 65536):
                    piece = data[i:i + 65536]
                    limit = self.cut.get(addr)
                    if limit is not None and end[1] + len(piece) > limit:
                        piece = piece[:limit - end[1]]
                        if piece:
                            self.core.receive(act.conn, piece, self.now)
                        del self.ends[act.conn]
                        self.core.connection_lost(act.conn, 'peer %s closed the connection'
                                                  ' mid-transfer' % addr, self.now)
                        return
                    end[1] += len(piece)
                    self.core.receive(act.conn, piece, self.now)
                    if act.conn not in self.ends:
                        return

    def _close(self, act):
        self.ends.pop(act.conn, None)

    def _filedata(self, act):
        buf = self.files.setdefault(act.name, bytearray())
        del buf[act.offset:]
        buf.extend(act.data)

    def _opdone(self, act):
        self.done.append(act.record)

    def _notice(self, act):
        self.notices.append(act.text)


def register_all(net, names, addr, batch=True):
    """Register names for addr (through the core); return the records."""
    if batch:
        ops = [('register', codec.Register, g, (s,), addr, True)
               for s, g in net.routing.batches(names)]
    else:
        ops = [('register', codec.Register, (n,), ss, addr, False)
               for n, ss in net.routing.unbatched(names)]
    return net.run(ops)
