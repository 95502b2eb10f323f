"""Index server process: asyncio driver around `server_core` (one hash partition).

    python -m nodes.dht.server --name s1 --listen IP:PORT --servers s1=IP:PORT,... --replicas R
        [--max-entries N] [--max-connections N]

The ring is built from the `--servers` names (a centralized run passes one server). Each
client connection gets a `ServerConnection`; replies are written as soon as the bytes that
complete a request arrive, with TCP_NODELAY. Bad frames get an ERROR reply and only the
offending connection may be closed (oversized frame); the server keeps serving the others.

The core decides, this driver only moves bytes and time: it writes the batch of replies
the core returns, and while requests wait it stops reading and asks for the next batch on
the loop's next turn (`call_soon`), never in a loop of its own, so every connection and a
shutdown signal get their turn however much one client pipelines. It tells the core when
the transport pauses and resumes writing, arms one timer per connection at the core's
`get_timer()` and closes when the core says so.

Bounds the core cannot see: at most `max_connections` clients at once (default well under
the open-file limit; one more is accepted and closed at once, counted), and at most
`max_buffered` bytes held undecoded over all connections (past it, the connection holding
the most is closed, counted). When accept() still fails for lack of descriptors, asyncio
stops accepting for a second each time; the server counts those failures and says so on
stderr once, instead of a traceback per attempt.

SIGTERM or SIGINT: stop listening, close every client connection (Python 3.12's
`Server.wait_closed` waits for them), log a `summary` record with the counters, exit 0.
"""

import argparse
import asyncio
import errno
import resource
import sys
import time

from . import codec
from .common import JsonLog, error, nodelay, run_main, serve_until_stopped
from .ring import DEFAULT_VNODES, Ring, parse_addr, parse_servers
from .server_core import FRAME_TIMEOUT, IDLE_TIMEOUT, MAX_ENTRIES, ServerConnection, ServerCore

_MAX_ERROR_LINES = 50
MAX_BUFFERED = 256 * 1024 * 1024    # undecoded bytes over all connections (32 largest frames)
_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def default_max_connections():
    """Half the open-file limit, at most 1000: the rest stays for what else the process opens
    and for connections accepted only to be closed."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1000 if soft == resource.RLIM_INFINITY else max(1, min(1000, soft // 2))


class _IndexProtocol(asyncio.Protocol):
    """One client connection."""

    def __init__(self, node):
        self.node = node
        self.conn = ServerConnection(node.core, node.max_frame, node.idle_timeout, time.time(),
                                     node.frame_timeout)
        self.transport = None
        self.timer = None           # (wall-clock time it fires, handle)
        self.soon = None            # the next batch, on the loop's next turn
        self.held = 0               # this connection's share of node.buffered

    def connection_made(self, transport):
        self.transport = transport
        if self.node.closing or not self.node.admit():
            transport.abort()       # shutting down, or as many clients as it serves
            return
        nodelay(transport)
        self.node.protocols.add(self)
        self._arm()

    def connection_lost(self, exc):
        self.node.protocols.discard(self)
        self.node.buffered -= self.held
        self.held = 0
        for handle in (self.timer and self.timer[1], self.soon):
            if handle is not None:
                handle.cancel()
        self.timer = self.soon = None

    def data_received(self, data):
        self._run(self.conn.receive, data)

    def pause_writing(self):
        # The client is not reading its replies: the core answers nothing more until it does.
        self.conn.pause_output()

    def resume_writing(self):
        self._run(self.conn.resume_output)

    def eof_received(self):
        out = self.conn.eof()
        if out:
            self.transport.write(out)
            self.node.report_bad(self.transport)
        return not self.conn.finished       # else the transport closes itself

    def _more(self):
        self.soon = None
        if not self.transport.is_closing():
            self._run(self.conn.more)

    def _run(self, call, *args):
        """Call the core, write the batch it answers, then read or wait for the next turn."""
        errors = self.node.core.counters['errors']
        out, close = call(*args, time.time())
        if self.node.core.counters['errors'] != errors:
            self.node.report_bad(self.transport)
        if out:
            self.transport.write(out)       # may call pause_writing at once
        if close:
            self.transport.close()
            return
        if self.conn.waiting:
            self.transport.pause_reading()
            if self.soon is None and not self.conn.output_paused:
                self.soon = asyncio.get_running_loop().call_soon(self._more)
        else:
            self.transport.resume_reading()
        self.node.hold(self, self.conn.buffered)
        self._arm()

    def _arm(self):
        """Have the timer fire by the core's next deadline (a later one re-arms on firing)."""
        when = self.conn.get_timer()
        if when is None or self.transport.is_closing() \
                or self.timer is not None and self.timer[0] <= when:
            return
        if self.timer is not None:
            self.timer[1].cancel()
        self.timer = (when, asyncio.get_running_loop().call_later(max(0.0, when - time.time()),
                                                                  self._fire))

    def _fire(self):
        self.timer = None
        _, close = self.conn.handle_timer(time.time())
        if close:
            self.transport.abort()          # nothing to flush, maybe nobody reading
        else:
            self._arm()


class IndexServer:
    """The asyncio side of one index server."""

    def __init__(self, name, ring, replicas=0, max_frame=codec.MAX_FRAME, log=None,
                 idle_timeout=IDLE_TIMEOUT, frame_timeout=FRAME_TIMEOUT,
                 max_entries=MAX_ENTRIES, max_connections=None, max_buffered=MAX_BUFFERED):
        self.core = ServerCore(name, ring=ring, replicas=replicas, max_entries=max_entries)
        self.max_frame = max_frame
        self.idle_timeout = idle_timeout
        self.frame_timeout = frame_timeout
        self.max_connections = max_connections or default_max_connections()
        self.max_buffered = max_buffered
        self.log = log or JsonLog()
        self.counters = dict(connections=0, refused_connections=0, overload_closed=0,
                             accept_errors=0)
        self.protocols = set()          # open client connections, closed at shutdown
        self.buffered = 0               # undecoded bytes over all of them
        self.closing = False
        self._error_lines = 0
        self._loop_handler = None
        self.server = None

    def report_bad(self, transport):
        """Tell stderr about a client that sent a bad frame (rate-limited)."""
        self._error_lines += 1
        if self._error_lines <= _MAX_ERROR_LINES:
            error('%s: bad request from %s (answered with ERROR, still serving)'
                  % (self.core.name, transport.get_extra_info('peername')))

    def admit(self):
        """Count a new connection; False (count it refused) if max_connections are open."""
        if len(self.protocols) < self.max_connections:
            self.counters['connections'] += 1
            return True
        self.counters['refused_connections'] += 1
        if self.counters['refused_connections'] == 1:
            error('%s: %d clients connected, the most it serves; closing new connections at'
                  ' once (counted in refused_connections)' % (self.core.name,
                                                              self.max_connections))
        return False

    def hold(self, proto, nbytes):
        """Record the bytes proto holds undecoded; past max_buffered over all connections,
        close the one holding the most."""
        self.buffered += nbytes - proto.held
        proto.held = nbytes
        if self.buffered > self.max_buffered:
            largest = max(self.protocols, key=lambda p: p.held)
            self.counters['overload_closed'] += 1
            self.buffered -= largest.held
            largest.held = 0
            largest.transport.abort()

    def _loop_error(self, loop, context):
        """Count accept() failing for lack of descriptors (asyncio retries a second later)
        instead of a traceback per attempt; pass anything else on."""
        exc = context.get('exception')
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_FILES \
                and 'accept' in context.get('message', ''):
            self.counters['accept_errors'] += 1
            if self.counters['accept_errors'] == 1:
                error('%s: cannot accept connections: %s (counted in accept_errors; retried'
                      ' every second)' % (self.core.name, exc))
        elif self._loop_handler is not None:
            self._loop_handler(loop, context)
        else:
            loop.default_exception_handler(context)

    async def start(self, host, port):
        """Start listening; return the bound (host, port)."""
        loop = asyncio.get_running_loop()
        self._loop_handler = loop.get_exception_handler()
        loop.set_exception_handler(self._loop_error)
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
    p.add_argument('--max-entries', type=int, default=MAX_ENTRIES, metavar='N',
                   help='(name, holder) entries this server keeps; a REGISTER past them is'
                   ' refused (default %(default)d)')
    p.add_argument('--max-connections', type=int, default=None, metavar='N',
                   help='clients served at once; more are closed at once (default: half the'
                   ' open-file limit, at most 1000)')
    args = p.parse_args(argv)
    for flag in ('max_entries', 'max_connections'):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            p.error('--%s must be at least 1' % flag.replace('_', '-'))
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
    node = IndexServer(args.name, ring, args.replicas, args.max_frame, log,
                       max_entries=args.max_entries, max_connections=args.max_connections)
    await serve_until_stopped(node, args.listen, log, name=args.name,
                              servers=len(ring.servers), replicas=args.replicas,
                              protocol=codec.PROTOCOL_VERSION)


def main(argv=None):
    """Entry point."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return run_main('server', args.name, _main(args))


if __name__ == '__main__':
    sys.exit(main())
