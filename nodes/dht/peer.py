"""Peer file server: serves the files of a shared folder to other peers, many at once.

    python -m nodes.dht.peer --name p1 --listen IP:PORT --share DIR

The catalog lists the regular files directly inside DIR and their SHA-256, computed once
at start (and again for a file that changed). Each connection runs the
`transfer.ServeConnection` core; a task per connection executes its actions in order:
frames with `transport.write`, file bodies with `loop.sendfile` (zero-copy `sendfile(2)`),
so one peer streams many downloads concurrently without copying data through Python.

A shared name is opened exactly once per GET, relative to the folder opened at start
(`dir_fd`, so renaming or swapping DIR itself changes nothing), with O_NOFOLLOW (a symlink
is refused, never followed out of the folder) and O_NONBLOCK (a FIFO cannot block the
event loop; it is refused once `fstat` shows it is not a regular file). Digest, header and
body all come from that one descriptor, so swapping the name afterwards cannot change what
is sent. A body cut short because the file shrank closes the connection (the downloader
resumes elsewhere) and counts as `failed`, not `sent`.
SIGTERM or SIGINT: close every connection, log a `summary` record and exit 0.
"""

import argparse
import asyncio
import hashlib
import os
import stat
import sys
from collections import deque

from . import transfer
from .common import JsonLog, error, nodelay, run_main, serve_until_stopped
from .ring import parse_addr
from .server_core import valid_name

_HASH_BLOCK = 1024 * 1024
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def sha256_fd(fd):
    """Return the SHA-256 digest of an open file, read from its start."""
    h = hashlib.sha256()
    offset = 0
    while True:
        block = os.pread(fd, _HASH_BLOCK, offset)
        if not block:
            return h.digest()
        h.update(block)
        offset += len(block)


class Catalog:
    """The shared folder: name -> (size, sha256), refreshed when a file changes."""

    def __init__(self, share):
        self.share = os.path.abspath(share)
        self._dir = os.open(self.share, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._cache = {}

    def names(self):
        """Return the sorted names of the regular files in the folder."""
        with os.scandir(self._dir) as it:
            return sorted(e.name for e in it if e.is_file(follow_symlinks=False)
                          and not e.name.startswith('.'))

    def scan(self):
        """Hash every file now (so the first download does not pay for it)."""
        for name in self.names():
            self.stat(name)
        return len(self._cache)

    def open(self, name):
        """Return (size, sha256, open file) of a shared regular file, or None."""
        if valid_name(name) or name.startswith('.'):
            return None
        try:
            fd = os.open(name, _OPEN_FLAGS, dir_fd=self._dir)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):       # a FIFO, a device, a directory
                os.close(fd)
                return None
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            hit = self._cache.get(name)
            if hit is None or hit[0] != key:
                hit = (key, sha256_fd(fd))
                self._cache[name] = hit
        except OSError:
            os.close(fd)
            return None
        return st.st_size, hit[1], open(fd, 'rb', buffering=0)

    def close(self, source):
        """Close a file returned by open()."""
        source.close()

    def stat(self, name):
        """Return (size, sha256) of a shared file, or None if it is not shared."""
        opened = self.open(name)
        if opened is None:
            return None
        self.close(opened[2])
        return opened[:2]


class _ServeProtocol(asyncio.Protocol):
    """One downloader connection."""

    def __init__(self, node):
        self.node = node
        self.core = transfer.ServeConnection(node.catalog)
        self.actions = deque()
        self.wake = asyncio.Event()         # actions arrived or the connection ended
        self.writable = asyncio.Event()     # the transport's buffer is below its high mark
        self.writable.set()
        self.transport = None
        self.task = None
        self.lost = False

    def connection_made(self, transport):
        self.transport = transport
        if self.node.closing:           # accepted just as the peer shuts down
            self.node.protocols.discard(self)
            transport.abort()
            return
        nodelay(transport)
        self.node.connections += 1
        self.task = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data):
        self._take(self.core.receive(data, 0.0))

    def connection_lost(self, exc):
        self.lost = True
        self.wake.set()
        self.writable.set()

    def pause_writing(self):
        self.writable.clear()

    def resume_writing(self):
        self.writable.set()

    def _take(self, actions):
        """Queue a batch of the core's actions; read on only if no request waits in the core."""
        if actions:
            self.core.pause_output()
            self.actions.extend(actions)
            self.wake.set()
        if self.core.waiting:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    async def _run(self):
        """Execute the core's actions in order, asking for the next batch when done."""
        try:
            while not self.lost:
                if not self.actions:
                    await self.writable.wait()
                    if self.lost:
                        break
                    self._take(self.core.resume_output(0.0))
                    if not self.actions:
                        self.wake.clear()
                        await self.wake.wait()
                        continue
                action = self.actions.popleft()
                if type(action) is transfer.SendFrame:
                    self.transport.write(action.data)
                elif type(action) is transfer.SendFile:
                    if not await self._send_file(action):
                        break
                else:
                    self.transport.close()
                    break
        except (OSError, RuntimeError) as exc:
            self.node.failed_sends += 1
            error('%s: send to %s failed: %s' % (self.node.name,
                                                 self.transport.get_extra_info('peername'), exc))
            self.transport.abort()
        finally:
            for action in self.actions:
                if type(action) is transfer.SendFile:
                    self.node.catalog.close(action.source)
            self.actions.clear()
            self.node.protocols.discard(self)
            for k, v in self.core.counters.items():
                self.node.totals[k] = self.node.totals.get(k, 0) + v

    async def _send_file(self, action):
        """Send one body from the file the header described; False if the connection ends."""
        try:
            sent = await asyncio.get_running_loop().sendfile(
                self.transport, action.source, action.offset, action.count)
        finally:
            self.node.catalog.close(action.source)
        for close in self.core.file_sent(action, sent):
            error('%s: %s; closing the connection to %s' % (
                self.node.name, close.reason, self.transport.get_extra_info('peername')))
            self.transport.close()
            return False
        return True


class PeerServer:
    """The asyncio side of one peer's file server."""

    def __init__(self, name, share, log=None):
        self.name = name
        self.catalog = Catalog(share)
        self.log = log or JsonLog()
        self.connections = 0
        self.failed_sends = 0
        self.totals = {}
        self.server = None
        self.protocols = set()          # open connections, closed at shutdown
        self.closing = False

    async def start(self, host, port):
        """Start listening; return the bound (host, port)."""
        loop = asyncio.get_running_loop()

        def factory():
            proto = _ServeProtocol(self)
            self.protocols.add(proto)
            return proto
        self.server = await loop.create_server(factory, host, port, reuse_address=True,
                                               backlog=1024)
        return self.server.sockets[0].getsockname()[:2]

    async def close(self):
        """Stop listening, drop open connections, wait for their tasks and the server."""
        self.closing = True
        if self.server is None:
            return
        self.server.close()
        for proto in list(self.protocols):
            if proto.transport is not None:
                proto.transport.abort()
            if proto.task is not None:
                proto.task.cancel()     # a sendfile to a client that stopped reading never ends
        tasks = [p.task for p in self.protocols if p.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self.server.wait_closed()

    def summary(self):
        """Return the counters of this peer."""
        c = dict(self.totals)
        c.update(connections=self.connections, failed_sends=self.failed_sends)
        return c


def parse_args(argv):
    """Parse the peer command line."""
    p = argparse.ArgumentParser(prog='python -m nodes.dht.peer',
                                description=__doc__.split('\n')[0])
    p.add_argument('--name', required=True)
    p.add_argument('--listen', required=True, help='IP:PORT of this peer\'s file server')
    p.add_argument('--share', required=True, help='folder whose files this peer serves')
    args = p.parse_args(argv)
    try:
        args.listen = parse_addr(args.listen)
    except ValueError as exc:
        p.error(str(exc))
    if not os.path.isdir(args.share):
        p.error('--share %s is not a directory' % args.share)
    return args


async def _main(args):
    """Run until SIGTERM/SIGINT."""
    log = JsonLog()
    node = PeerServer(args.name, args.share, log)
    files = node.catalog.scan()
    await serve_until_stopped(node, args.listen, log, name=args.name, files=files)


def main(argv=None):
    """Entry point."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return run_main('peer', args.name, _main(args))


if __name__ == '__main__':
    sys.exit(main())
