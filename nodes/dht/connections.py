"""asyncio driver of the client core: it moves bytes and time, and opens sockets when asked.

Every decision (which server, failover, window, timeouts, resume) is in
`client_ops_core.ClientOps`. This driver feeds it socket bytes and the clock
(`time.time()`, so the op records' `t` stays wall-clock time as before), performs its
`Connect` / `Send` / `Close` actions, arms one timer at `get_timer()`, and writes
`FileData` to a temporary file per download, renamed only when the core says the download
ended with a good digest. On cancellation (SIGTERM) `close()` removes the temporary files.
"""

import asyncio
import os
import time

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


class Driver:
    """Runs one ClientOps core on the running asyncio loop."""

    def __init__(self, core, downloads=None):
        self.core = core
        self.downloads = downloads
        self.loop = asyncio.get_running_loop()
        self.protos = {}        # conn -> _Proto (open) or Task (connecting)
        self.files = {}         # op id -> (file object, temporary path)
        self.changed = asyncio.Event()
        self._timer = None
        self._seq = 0
        self.closed = False     # after close(), late bytes must not reopen a temporary file

    def now(self):
        return time.time()

    def feed(self, conn, data):
        if self.closed:
            return
        self.core.receive(conn, data, self.now())
        self.pump()

    def lost(self, proto, exc):
        if not self.closed and self.protos.get(proto.conn) is proto:
            del self.protos[proto.conn]
            what = ('peer %s closed the connection mid-transfer' if proto.conn[0] == 'peer'
                    else '%s closed the connection') % proto.conn[1]
            self.core.connection_lost(proto.conn, what + (': %s' % exc if exc else ''),
                                      self.now())
            self.pump()

    def pump(self):
        """Carry out what the core asked for, then re-arm the timer."""
        while True:
            acts = self.core.actions()
            if not acts:
                break
            for act in acts:
                getattr(self, '_' + type(act).__name__.lower())(act)
        if self._timer is not None:
            self._timer.cancel()
        when = self.core.get_timer()
        self._timer = None if when is None else self.loop.call_later(
            max(0.0, when - self.now()), self._fire)
        self.changed.set()

    def _fire(self):
        self._timer = None
        self.core.handle_timer(self.now())
        self.pump()

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
                self.core.connection_lost(conn, str(exc) or type(exc).__name__, self.now())
                self.pump()
            return
        if self.protos.get(conn) is not asyncio.current_task():     # the core gave up
            proto.transport.abort()
            return
        self.protos[conn] = proto
        self.core.connected(conn, self.now())
        self.pump()

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

    def _notice(self, act):
        error(act.text)

    def _filedata(self, act):
        entry = self.files.get(act.op_id)
        try:
            if entry is None:
                self._seq += 1
                tmp = os.path.join(self.downloads, '.%s.part.%d.%d'
                                   % (act.name, os.getpid(), self._seq))
                entry = self.files[act.op_id] = (open(tmp, 'wb'), tmp)
            f = entry[0]
            if f.tell() != act.offset:       # resume from a new holder, or a restart
                f.seek(act.offset)
                f.truncate()
            f.write(act.data)
        except OSError as exc:       # e.g. disk full: fatal for this download, never resumed
            self.core.abort(act.op_id, 'cannot write %r: %s' % (act.name, exc), self.now())

    def _opdone(self, act):
        rec = act.record
        entry = self.files.pop(act.op_id, None)
        if rec['op'] != 'download':
            return
        if entry is None and rec['ok']:        # an empty file: nothing arrived to write
            self._seq += 1
            entry = (None, os.path.join(self.downloads, '.%s.part.%d.%d'
                                        % (rec['name'], os.getpid(), self._seq)))
            open(entry[1], 'wb').close()
        if entry is None:
            return
        f, tmp = entry
        try:
            if f is not None:
                f.close()
            if rec['ok']:
                size = os.stat(tmp).st_size
                if size != rec['bytes']:
                    raise OSError('wrote %d bytes, expected %d' % (size, rec['bytes']))
                os.replace(tmp, os.path.join(self.downloads, rec['name']))
                return
        except OSError as exc:
            rec.update(ok=False, error='%r: %s' % (rec['name'], exc))
        _unlink(tmp)

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
        removed = 0
        for f, tmp in self.files.values():
            f.close()
            removed += _unlink(tmp)
        self.files.clear()
        return removed


def _unlink(path):
    """Remove path if it exists; return 1 if it did."""
    try:
        os.unlink(path)
        return 1
    except OSError:
        return 0


__all__ = ['Driver', 'Connect', 'Send', 'Close', 'FileData', 'OpDone', 'Notice']
