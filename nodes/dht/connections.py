"""asyncio driver of the client core: it moves bytes and time, and opens sockets when asked.

Every decision (which server, failover, window, timeouts, resume) is in
`client_ops_core.ClientOps`; what any driver of it does (the action loop, the download
files) is in `client_driving.ClientDriving`. This driver feeds it socket bytes and the clock
(`time.time()`, so the op records' `t` stays wall-clock time as before), performs its
`Connect` / `Send` / `Close` actions, arms one timer at `get_timer()`, and writes
`FileData` to a temporary file per download, renamed only when the core says the download
ended with a good digest. On cancellation (SIGTERM) `close()` removes the temporary files.
"""

import asyncio
import os
import time

from .client_driving import ClientDriving, lost_reason
from .client_ops_core import Close, Connect, FileData, Notice, OpDone, Send
from .common import error, nodelay
from .ring import parse_addr


class _Proto(asyncio.Protocol):
    """One TCP connection of the core: bytes in, lost connection reported."""

    def __init__(self, driver, conn):
        self.driver, self.conn, self.transport = driver, conn, None

    def connection_made(self, transport):
        self.transport = transport
        nodelay(transport)

    def data_received(self, data):
        self.driver.feed(self.conn, data)

    def connection_lost(self, exc):
        self.driver.lost(self, exc)


class Driver(ClientDriving):
    """Runs one ClientOps core on the running asyncio loop."""

    def __init__(self, core, downloads=None):
        super().__init__(core, downloads, os.getpid(), error)
        self.loop = asyncio.get_running_loop()
        self.protos = {}        # conn -> _Proto (open) or Task (connecting)
        self.changed = asyncio.Event()
        self._timer = None

    def now(self):
        return time.time()

    def lost(self, proto, exc):
        if not self.closed and self.protos.get(proto.conn) is proto:
            del self.protos[proto.conn]
            self.failed(proto.conn, lost_reason(proto.conn, exc))

    def arm(self, when):
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None if when is None else self.loop.call_later(
            max(0.0, when - self.now()), self._fire)
        self.changed.set()

    def _fire(self):
        self._timer = None
        self.fire()

    def _connect(self, act):
        self.protos[act.conn] = self.loop.create_task(self._open(act.conn, act.addr))

    async def _open(self, conn, addr):
        try:
            # A holder address comes from an index server's reply: a bad one (ValueError,
            # UnicodeError from the name encoding) fails that holder now, like a refused
            # connect, instead of ending this task and leaving the core to time out.
            host, port = parse_addr(addr, port_zero=False)
            _, proto = await self.loop.create_connection(lambda: _Proto(self, conn), host, port)
        except (OSError, ValueError) as exc:
            if self.protos.pop(conn, None) is not None:
                self.failed(conn, str(exc) or type(exc).__name__)
            return
        if self.protos.get(conn) is not asyncio.current_task():     # the core gave up
            proto.transport.abort()
            return
        self.protos[conn] = proto
        self.opened(conn)

    def _send(self, act):
        p = self.protos.get(act.conn)
        if isinstance(p, _Proto):   # else the link broke and the core hears of it next
            p.transport.write(act.data)

    def _close(self, act):
        p = self.protos.pop(act.conn, None)
        if isinstance(p, asyncio.Task):
            p.cancel()
        elif p is not None:
            p.transport.abort()

    async def run(self):
        """Run until every submitted operation has ended."""
        self.pump()
        while not self.core.finished():
            self.changed.clear()
            await self.changed.wait()

    async def connect_all(self):
        """Open every index-server connection (before the timed part)."""
        self.core.connect_all(self.now())
        self.pump()
        while self.core.connecting():
            self.changed.clear()
            await self.changed.wait()

    def close(self):
        """Close every connection and remove unfinished temporary files; return how many."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        for conn in list(self.protos):
            self._close(Close(conn))
        return self.discard()


__all__ = ['Driver', 'Connect', 'Send', 'Close', 'FileData', 'OpDone', 'Notice']
