"""asyncio protocols of the client: one index-server connection, one holder-peer connection.

`IndexConn` feeds a `client_core.Channel` and resolves one future per request id, so any
number of requests (up to the window) can be in flight on one connection. `PeerConn` runs
one `transfer.Download` at a time, appends the verified-as-it-goes chunks to the caller's
temporary file and fails the transfer if nothing arrives for `timeout` seconds.
"""

import asyncio
import time

from .client_core import ChannelError
from .common import nodelay
from .transfer import DownloadError


class IndexConn(asyncio.Protocol):
    """One persistent connection to an index server, feeding a Channel."""

    def __init__(self, channel):
        self.channel = channel
        self.futures = {}
        self.transport = None
        self.lost = False

    def connection_made(self, transport):
        self.transport = transport
        nodelay(transport)

    def request(self, kind, *fields):
        """Send one request; return the future of its reply."""
        if self.lost:
            raise ConnectionError('connection to %s is closed' % self.channel.server)
        req, data = self.channel.send(kind, time.time(), *fields)
        fut = asyncio.get_running_loop().create_future()
        self.futures[req] = fut
        self.transport.write(data)
        return fut

    def data_received(self, data):
        try:
            replies = self.channel.receive(data, time.time())
        except ChannelError as exc:
            self.abort(exc)
            return
        for req, _, reply in replies:
            fut = self.futures.pop(req, None)
            if fut is not None and not fut.done():
                fut.set_result(reply)

    def abort(self, exc):
        """Give up on this connection: fail every waiting request with exc."""
        self.lost = True
        self.channel.fail()
        futures, self.futures = self.futures, {}
        for fut in futures.values():
            if not fut.done():
                fut.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc):
        if not self.lost:
            self.abort(ConnectionError('%s closed the connection%s' % (
                self.channel.server, ': %s' % exc if exc else '')))


class LocalWriteError(Exception):
    """Writing the downloaded bytes failed here; resuming elsewhere would leave a hole."""


class PeerConn(asyncio.Protocol):
    """One persistent connection to a holder peer; one download at a time."""

    def __init__(self, addr, timeout):
        self.addr = addr
        self.timeout = timeout
        self.transport = None
        self.download = self.file = self.future = None
        self.last_rx = 0.0
        self._req = 0
        self._watch = None

    def connection_made(self, transport):
        self.transport = transport
        nodelay(transport)

    def fetch(self, download, f):
        """Ask for the rest of the download's file; return a future done when it is."""
        f.seek(download.received)
        f.truncate()
        self._req += 1
        self.download, self.file = download, f
        self.future = asyncio.get_running_loop().create_future()
        self.last_rx = time.monotonic()
        self.transport.write(download.request(self._req))
        self._arm()
        return self.future

    def _arm(self):
        """Check for an idle transfer after `timeout` seconds."""
        if self.timeout:
            self._watch = asyncio.get_running_loop().call_later(self.timeout / 4, self._check)

    def _check(self):
        """Fail the transfer if nothing arrived for `timeout` seconds."""
        if self.future is None or self.future.done():
            return
        if time.monotonic() - self.last_rx >= self.timeout:
            self._fail(asyncio.TimeoutError('no data from %s for %.1f s'
                                            % (self.addr, self.timeout)))
            self.transport.abort()
        else:
            self._arm()

    def data_received(self, data):
        self.last_rx = time.monotonic()
        d = self.download
        if d is None:
            self.transport.abort()
            return
        try:
            chunks = d.receive(data)
            exc = None
        except DownloadError as e:
            chunks, exc = getattr(e, 'chunks', []), e
        try:
            for chunk in chunks:
                self.file.write(chunk)
        except OSError as e:        # e.g. disk full: fatal for this download, never resumed
            exc = LocalWriteError('cannot write %r: %s' % (d.name, e))
            d.done = False
        if d.done:
            self.download = None
            if self._watch:
                self._watch.cancel()
            self.future.set_result(d)
        elif exc is not None:
            self._fail(exc)
            self.transport.abort()

    def _fail(self, exc):
        """Fail the current transfer."""
        self.download = None
        if self._watch:
            self._watch.cancel()
        if self.future is not None and not self.future.done():
            self.future.set_exception(exc)

    def connection_lost(self, exc):
        self._fail(ConnectionError('peer %s closed the connection mid-transfer' % self.addr))
