"""Index server process: asyncio driver around `server_core` (one hash partition).

    python -m nodes.dht.server --name s1 --listen IP:PORT --servers s1=IP:PORT,... --replicas R

The ring is built from the `--servers` names (a centralized run passes one server). Each
client connection gets a `ServerConnection`; replies are written as soon as the bytes that
complete a request arrive, with TCP_NODELAY. Bad frames get an ERROR reply and only the
offending connection may be closed (oversized frame); the server keeps serving the others.

The core decides, this driver only moves bytes and time: it writes the batches of replies
the core returns while the transport accepts them, tells the core when the transport pauses
and resumes writing, stops reading while the core has requests waiting, arms one timer per
connection at the core's `get_timer()` and closes when the core says so.

SIGTERM or SIGINT: stop listening, close every client connection (Python 3.12's
`Server.wait_closed` waits for them), log a `summary` record with the counters, exit 0.
"""

import argparse
import asyncio
import sys
import time

from . import codec
from .common import JsonLog, error, nodelay, run_main, serve_until_stopped
from .ring import DEFAULT_VNODES, Ring, parse_addr, parse_servers
from .server_core import IDLE_TIMEOUT, ServerConnection, ServerCore

_MAX_ERROR_LINES = 50


class _IndexProtocol(asyncio.Protocol):
    """One client connection."""

    def __init__(self, node):
        self.node = node
        self.conn = ServerConnection(node.core, node.max_frame, node.idle_timeout, time.time())
        self.transport = None
        self.timer = None

    def connection_made(self, transport):
        self.transport = transport
        if self.node.closing:           # accepted just as the server shuts down
            transport.abort()
            return
        nodelay(transport)
        self.node.counters['connections'] += 1
        self.node.protocols.add(self)
        self._arm()

    def connection_lost(self, exc):
        self.node.protocols.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def data_received(self, data):
        errors = self.node.core.counters['errors']
        self._write(*self.conn.receive(data, time.time()))
        if self.node.core.counters['errors'] != errors:
            self.node.report_bad(self.transport)

    def pause_writing(self):
        # The client is not reading its replies: the core answers nothing more until it does.
        self.conn.pause_output()

    def resume_writing(self):
        self._write(*self.conn.resume_output(time.time()))

    def eof_received(self):
        out = self.conn.eof()
        if out:
            self.transport.write(out)
            self.node.report_bad(self.transport)
        return not self.conn.finished       # else the transport closes itself

    def _write(self, out, close):
        """Write what the core answered, ask for more while the transport takes it."""
        while True:
            if out:
                self.transport.write(out)       # may call pause_writing at once
            if close:
                self.transport.close()
                return
            if not self.conn.waiting or self.conn.output_paused:
                break
            out, close = self.conn.more(time.time())
        if self.conn.waiting:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def _arm(self):
        when = self.conn.get_timer()
        if when is not None and not self.transport.is_closing():
            self.timer = asyncio.get_running_loop().call_later(max(0.0, when - time.time()),
                                                               self._fire)

    def _fire(self):
        self.timer = None
        _, close = self.conn.handle_timer(time.time())
        if close:
            self.transport.abort()          # idle: nothing to flush, maybe nobody reading
        else:
            self._arm()


class IndexServer:
    """The asyncio side of one index server."""

    def __init__(self, name, ring, replicas=0, max_frame=codec.MAX_FRAME, log=None,
                 idle_timeout=IDLE_TIMEOUT):
        self.core = ServerCore(name, ring=ring, replicas=replicas)
        self.max_frame = max_frame
        self.idle_timeout = idle_timeout
        self.log = log or JsonLog()
        self.counters = dict(connections=0)
        self.protocols = set()          # open client connections, closed at shutdown
        self.closing = False
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
        """Stop listening, drop every client connection, wait until the server is closed."""
        self.closing = True
        if self.server is not None:
            self.server.close()
            for proto in list(self.protocols):
                proto.transport.abort()
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
