"""Peer file server: serves the files of a shared folder to other peers, many at once.

    python -m nodes.dht.peer --name p1 --listen IP:PORT --share DIR

The catalog lists the regular files directly inside DIR and their SHA-256, computed once
at start (and again for a file whose size or mtime changed). Each connection runs the
`transfer.ServeConnection` core; a task per connection executes its actions in order:
frames with `transport.write`, file bodies with `loop.sendfile` (zero-copy `sendfile(2)`),
so one peer streams many downloads concurrently without copying data through Python.
SIGTERM or SIGINT: log a `summary` record and exit 0.
"""

import argparse
import asyncio
import hashlib
import os
import stat
import sys

from . import transfer
from .common import JsonLog, error, nodelay, run_main, serve_until_stopped
from .ring import parse_addr
from .server_core import valid_name

_HASH_BLOCK = 1024 * 1024
_MAX_QUEUED = 64


def sha256_file(path):
    """Return the SHA-256 digest of a file."""
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        while True:
            block = f.read(_HASH_BLOCK)
            if not block:
                return h.digest()
            h.update(block)


class Catalog:
    """The shared folder: name -> (size, sha256), refreshed when a file changes."""

    def __init__(self, share):
        self.share = os.path.abspath(share)
        self._cache = {}

    def names(self):
        """Return the sorted names of the regular files in the folder."""
        with os.scandir(self.share) as it:
            return sorted(e.name for e in it if e.is_file(follow_symlinks=False)
                          and not e.name.startswith('.'))

    def scan(self):
        """Hash every file now (so the first download does not pay for it)."""
        for name in self.names():
            self.stat(name)
        return len(self._cache)

    def path(self, name):
        """Return the path of a shared file."""
        return os.path.join(self.share, name)

    def stat(self, name):
        """Return (size, sha256) of a shared file, or None if it is not shared."""
        if valid_name(name) or name.startswith('.'):
            return None
        try:
            st = os.stat(self.path(name), follow_symlinks=False)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):       # no symlinks out of the folder, no devices
            return None
        key = (st.st_size, st.st_mtime_ns)
        hit = self._cache.get(name)
        if hit is None or hit[0] != key:
            hit = (key, sha256_file(self.path(name)))
            self._cache[name] = hit
        return st.st_size, hit[1]


class _ServeProtocol(asyncio.Protocol):
    """One downloader connection."""

    def __init__(self, node):
        self.node = node
        self.core = transfer.ServeConnection(node.catalog)
        self.actions = asyncio.Queue()
        self.transport = None
        self.task = None
        self.paused = False

    def connection_made(self, transport):
        self.transport = transport
        nodelay(transport)
        self.node.connections += 1
        self.task = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data):
        for action in self.core.receive(data, 0.0):
            self.actions.put_nowait(action)
        if self.actions.qsize() > _MAX_QUEUED and not self.paused:
            # A client that pipelines GETs faster than we send waits in its TCP window.
            self.paused = True
            self.transport.pause_reading()

    def connection_lost(self, exc):
        self.actions.put_nowait(None)

    async def _run(self):
        """Execute the core's actions in order."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                action = await self.actions.get()
                if self.paused and self.actions.qsize() < _MAX_QUEUED // 4:
                    self.paused = False
                    self.transport.resume_reading()
                if action is None or self.transport.is_closing():
                    break
                if type(action) is transfer.SendFrame:
                    self.transport.write(action.data)
                elif type(action) is transfer.SendFile:
                    with open(self.node.catalog.path(action.name), 'rb') as f:
                        await loop.sendfile(self.transport, f, action.offset, action.count)
                else:
                    self.transport.close()
                    break
        except (OSError, RuntimeError) as exc:
            self.node.failed_sends += 1
            error('%s: send to %s failed: %s' % (self.node.name,
                                                 self.transport.get_extra_info('peername'), exc))
            self.transport.abort()
        finally:
            self.node._protocols.discard(self)
            for k, v in self.core.counters.items():
                self.node.totals[k] = self.node.totals.get(k, 0) + v


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
        self._protocols = set()

    async def start(self, host, port):
        """Start listening; return the bound (host, port)."""
        loop = asyncio.get_running_loop()

        def factory():
            proto = _ServeProtocol(self)
            self._protocols.add(proto)
            return proto
        self.server = await loop.create_server(factory, host, port, reuse_address=True,
                                               backlog=1024)
        return self.server.sockets[0].getsockname()[:2]

    async def close(self):
        """Stop listening, close open connections, wait for their tasks."""
        if self.server is not None:
            self.server.close()
        for proto in self._protocols:
            if proto.transport is not None:
                proto.transport.abort()
        tasks = [p.task for p in self._protocols if p.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

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
