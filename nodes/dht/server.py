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
`get_timer()` and closes when the core says so. That policy and the bounds below are
`index_serving`'s, shared with the simulated driver (`simulate`, `sim_drivers`).

Bounds the core cannot see: at most `max_connections` clients at once (default well under
the open-file limit; one more is accepted and closed at once, counted), and at most
`max_buffered` bytes held undecoded over all connections (past it, the connection holding
the most is closed, counted). When accept() still fails for lack of descriptors, asyncio
stops accepting for a second each time; the server counts those failures and says so on
stderr once, instead of a traceback per attempt.

SIGTERM or SIGINT: stop listening, close every client connection (Python 3.12's
`Server.wait_closed` waits for them), log a `summary` record with the counters, exit 0.
"""

import asyncio
import sys
import time

from . import codec, sim_drivers
from .common import (JsonLog, UsageParser, error, nodelay, run_main,
                     serve_until_stopped)
from .index_serving import (MAX_BUFFERED, IndexBook, IndexLink, default_max_connections,
                            ready_fields)
from .listener import ErrorLines, Listener
from .ring import (DEFAULT_VNODES, MAX_REPLICAS, MAX_VNODES, Ring, parse_addr,
                   parse_servers)
from .server_core import FRAME_TIMEOUT, IDLE_TIMEOUT, MAX_ENTRIES

__all__ = ['IndexServer', 'MAX_BUFFERED', 'default_max_connections', 'main', 'parse_args',
           'simulate']


class _IndexProtocol(IndexLink, asyncio.Protocol):
    """One client connection: `IndexLink` over an asyncio transport."""

    def __init__(self, node):
        IndexLink.__init__(self, node, time.time())
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        if self.opened():
            nodelay(transport)

    def connection_lost(self, exc):
        self.ended()

    def data_received(self, data):
        self.received(data)

    def pause_writing(self):
        # The client is not reading its replies: the core answers nothing more until it does.
        self.conn.pause_output()

    def resume_writing(self):
        self.drained()

    def eof_received(self):
        return self.eof()           # False: the transport closes itself

    # -- the transport's operations, as IndexLink names them ------------------------------
    def now(self):
        return time.time()

    def write(self, data):
        self.transport.write(data)

    def close(self):
        self.transport.close()

    def abort(self):
        self.transport.abort()

    def closing(self):
        return self.transport.is_closing()

    def pause_reading(self):
        self.transport.pause_reading()

    def resume_reading(self):
        self.transport.resume_reading()

    def call_soon(self, fn):
        return asyncio.get_running_loop().call_soon(fn)

    def call_at(self, when, fn):
        return asyncio.get_running_loop().call_later(max(0.0, when - time.time()), fn)

    def peername(self):
        return self.transport.get_extra_info('peername')


class IndexServer(IndexBook):
    """The asyncio side of one index server."""

    def __init__(self, name, ring, replicas=0, max_frame=codec.MAX_FRAME, log=None,
                 idle_timeout=IDLE_TIMEOUT, frame_timeout=FRAME_TIMEOUT,
                 max_entries=MAX_ENTRIES, max_connections=None, max_buffered=MAX_BUFFERED):
        super().__init__(name, ring, replicas, max_frame, error, idle_timeout, frame_timeout,
                         max_entries, max_connections, max_buffered)
        self.log = log or JsonLog()
        self.listener = None
        self._starting = set()          # connect_accepted_socket tasks not yet done

    def summary(self):
        c = super().summary()
        if self.listener is not None:
            c['accept_errors'] = self.listener.accept_errors
        return c

    async def start(self, host, port):
        """Start listening; return the bound (host, port).

        The peer's `Listener`, not `loop.create_server`: out of descriptors, asyncio's accept
        loop schedules one retry per backlog slot (up to 1,024 a second) and, once the server
        has closed, every pending retry printed a traceback (thousands of stderr lines)."""
        self.listener = Listener(self._accepted, lambda: True, ErrorLines(), self.core.name)
        return await self.listener.start(host, port)

    def _accepted(self, sock):
        """Wrap one accepted socket in an `_IndexProtocol` (the book decides whether to serve)."""
        loop = asyncio.get_running_loop()
        task = loop.create_task(loop.connect_accepted_socket(lambda: _IndexProtocol(self), sock))
        self._starting.add(task)
        task.add_done_callback(self._started)

    def _started(self, task):
        self._starting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.error('%s: an accepted connection could not start: %s'
                       % (self.core.name, task.exception()))

    async def close(self):
        """Stop listening, drop every client connection."""
        self.closing = True
        if self.listener is not None:
            self.listener.close()
        for task in list(self._starting):
            task.cancel()
        for proto in list(self.protocols):
            proto.transport.abort()
        await asyncio.sleep(0)          # let the aborted transports call connection_lost


def parse_args(argv):
    """Parse the server command line."""
    p = UsageParser('dht.server', package='nodes',
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
    p.bounded(args, 'replicas', 0, MAX_REPLICAS)
    p.bounded(args, 'vnodes', 1, MAX_VNODES)
    p.bounded(args, 'max_frame', 16, 0xFFFFFFFF)    # a frame header; the 32-bit length field
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
    await serve_until_stopped(node, args.listen, log,
                              **ready_fields(args.name, ring, args.replicas))


def main(argv=None):
    """Entry point."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return run_main('server', args.name, _main(args))


def simulate(env, argv):
    """Run this server in the simulator (`repronet.sim`): the same core, records in virtual
    time (`sim_drivers.SimIndexServer`)."""
    sim_drivers.SimIndexServer(env, parse_args(argv)).start()


if __name__ == '__main__':
    sys.exit(main())
