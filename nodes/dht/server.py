"""Index server process: asyncio driver around `server_core` (one hash partition).

    python -m nodes.dht.server --name s1 --listen IP:PORT --servers s1=IP:PORT,... --replicas R

The ring is built from the `--servers` names (a centralized run passes one server). Each
client connection gets a `ServerConnection`; replies are written as soon as the bytes that
complete a request arrive, with TCP_NODELAY. Bad frames get an ERROR reply and only the
offending connection may be closed (oversized frame); the server keeps serving the others.
SIGTERM or SIGINT: stop listening, log a `summary` record with the counters, exit 0.
"""

import argparse
import asyncio
import sys
import time

from . import codec
from .common import JsonLog, error, nodelay, run_main, serve_until_stopped
from .ring import DEFAULT_VNODES, Ring, parse_addr, parse_servers
from .server_core import ServerConnection, ServerCore

_MAX_ERROR_LINES = 50


class _IndexProtocol(asyncio.Protocol):
    """One client connection."""

    def __init__(self, node):
        self.node = node
        self.conn = ServerConnection(node.core, node.max_frame)
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        nodelay(transport)
        self.node.counters['connections'] += 1

    def data_received(self, data):
        errors = self.node.core.counters['errors']
        out, close = self.conn.receive(data, time.time())
        if out:
            self.transport.write(out)
        if self.node.core.counters['errors'] != errors:
            self.node.report_bad(self.transport)
        if close:
            self.transport.close()

    def pause_writing(self):
        # The client is not reading its replies: stop reading its requests until it does.
        self.transport.pause_reading()

    def resume_writing(self):
        if not self.transport.is_closing():
            self.transport.resume_reading()

    def eof_received(self):
        out = self.conn.eof()
        if out:
            self.transport.write(out)
            self.node.report_bad(self.transport)
        return False


class IndexServer:
    """The asyncio side of one index server."""

    def __init__(self, name, ring, replicas=0, max_frame=codec.MAX_FRAME, log=None):
        self.core = ServerCore(name, ring=ring, replicas=replicas)
        self.max_frame = max_frame
        self.log = log or JsonLog()
        self.counters = dict(connections=0)
        self._error_lines = 0
        self.server = None

    def report_bad(self, transport):
        """Tell stderr about a client that sent a bad frame (rate-limited)."""
        self._error_lines += 1
        if self._error_lines <= _MAX_ERROR_LINES:
            error('%s: bad request from %s (answered with ERROR, still serving)'
                  % (self.core.name, transport.get_extra_info('peername')))

    async def start(self, host, port):
        """Start listening; return the bound (host, port)."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _IndexProtocol(self), host, port,
                                               reuse_address=True, backlog=1024)
        return self.server.sockets[0].getsockname()[:2]

    def summary(self):
        """Return the counters of this server."""
        c = dict(self.core.counters)
        c.update(self.counters)
        c['names'] = len(self.core.store)
        c['entries'] = self.core.store.entries
        return c

    async def close(self):
        """Stop listening and close the listening socket."""
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def parse_args(argv):
    """Parse the server command line."""
    p = argparse.ArgumentParser(prog='python -m nodes.dht.server',
                                description=__doc__.split('\n')[0])
    p.add_argument('--name', required=True, help='this server\'s name in --servers')
    p.add_argument('--listen', required=True, help='IP:PORT to listen on (port 0: any)')
    p.add_argument('--servers', required=True, help='every index server: s1=IP:PORT,s2=IP:PORT,...')
    p.add_argument('--replicas', type=int, default=0, help='extra copies of each entry (R)')
    p.add_argument('--vnodes', type=int, default=DEFAULT_VNODES, help='ring points per server')
    p.add_argument('--max-frame', type=int, default=codec.MAX_FRAME, help='largest frame accepted')
    args = p.parse_args(argv)
    try:
        args.servers = parse_servers(args.servers)
        args.listen = parse_addr(args.listen)
    except ValueError as exc:
        p.error(str(exc))
    if args.name not in args.servers:
        p.error('--name %s is not in --servers' % args.name)
    return args


async def _main(args):
    """Run until SIGTERM/SIGINT."""
    log = JsonLog()
    ring = Ring(args.servers, args.vnodes)
    node = IndexServer(args.name, ring, args.replicas, args.max_frame, log)
    await serve_until_stopped(node, args.listen, log, name=args.name,
                              servers=len(ring.servers), replicas=args.replicas,
                              protocol=codec.PROTOCOL_VERSION)


def main(argv=None):
    """Entry point."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return run_main('server', args.name, _main(args))


if __name__ == '__main__':
    sys.exit(main())
