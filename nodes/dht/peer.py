"""Peer file server: serves the files of a shared folder to other peers, many at once.

    python -m nodes.dht.peer --name p1 --listen IP:PORT --share DIR [--max-connections N]
        [--idle-timeout S] [--frame-timeout S] [--stall-timeout S]

`catalog.Catalog` lists the regular files directly inside DIR and their SHA-256, hashed at
start (and again for a file that changed) on worker threads: the event loop never waits for
a disk read, so a GET of a changed file does not hold up the others. Each connection runs
the `transfer.ServeConnection` core; a task per connection executes its actions in order:
frames with `transport.write`, bodies with `loop.sendfile` (zero-copy `sendfile(2)`).

The core decides, this driver moves bytes and time: it arms one timer per connection at the
core's `get_timer()` and closes when the core says so. Nothing in asyncio reports progress
during a `sendfile`, so when a timer fires the driver asks the kernel how many bytes the
downloader acknowledged (TCP_INFO) and tells the core if that moved: a slow reader keeps its
transfer, one that stopped reading is closed after `--stall-timeout`. (Where TCP_INFO says
nothing, every check counts as progress: only idle and frame timeouts then apply.)

Descriptors are budgeted (`listener.fd_limits`): `--max-connections` (default a quarter of
RLIMIT_NOFILE, at most 1000; more are closed at once, `refused_connections`) and an
open-file budget from the rest, past which a GET gets ERROR "busy, try later"; one file per
connection is kept for a connection that holds none (see `catalog.Catalog`).
Per-connection error lines on stderr are rate-limited.

`simulate(env, argv)` runs the same core and catalog in the simulator (`sim_peer`).

SIGTERM or SIGINT: close every connection (their unfinished GETs count as
`failed_shutdown`), log a `summary` record and exit 0. The handlers are installed before
the start-up scan: a signal during it stops the scan, prints one line on stderr and a
`summary` with "interrupted": true, and exits 1, as a client stopped before its operations.
"""

import asyncio
import os
import signal
import sys
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from . import sim_peer, transfer
from .catalog import Catalog
from .common import JsonLog, UsageParser, error, nodelay
from .listener import ErrorLines, Listener, fd_limits, reset, tcp_bytes_acked
from .ring import parse_addr

# client.py lists a share with Catalog
__all__ = ['Catalog', 'PeerServer', 'main', 'simulate']

_LINGER = 10.0          # seconds a closing connection may flush before it is aborted
_HASH_THREADS = 2
class _ServeProtocol(asyncio.Protocol):
    """One downloader connection."""

    def __init__(self, node):
        self.node = node
        self.core = transfer.ServeConnection(node.catalog, idle_timeout=node.idle_timeout,
                                             frame_timeout=node.frame_timeout,
                                             stall_timeout=node.stall_timeout, now=time.time())
        self.actions = deque()
        self.wake = asyncio.Event()         # actions arrived or the connection ended
        self.writable = asyncio.Event()     # the transport's buffer is empty
        self.writable.set()
        self.transport = None
        self.task = None
        self.timer = None
        self.timer_at = None
        self.acked = None
        self.lost = False

    def connection_made(self, transport):
        self.transport = transport
        if self.node.closing:           # accepted just as the peer shuts down
            transport.abort()
            return
        nodelay(transport)
        transport.set_write_buffer_limits(high=0)   # writable: nothing buffered (_send_file)
        self.acked = tcp_bytes_acked(transport)
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.node.tasks.add(self.task)
        self.task.add_done_callback(self.node.tasks.discard)
        self._arm()

    def data_received(self, data):
        self._take(self.core.receive(data, time.time()))

    def connection_lost(self, exc):
        self.lost = True
        self.wake.set()
        self.writable.set()
        self.node.protocols.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def pause_writing(self):
        self.writable.clear()

    def resume_writing(self):
        self.writable.set()
        self.core.progress(time.time())

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
        self._arm()

    def _arm(self):
        """Have _fire called at the core's next deadline (a timer set later is replaced)."""
        when = self.core.get_timer()
        if when is None or self.lost or (self.timer is not None and self.timer_at <= when):
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = when
        self.timer = asyncio.get_running_loop().call_later(max(0.0, when - time.time()),
                                                           self._fire)

    def _fire(self):
        self.timer = None
        now = time.time()
        acked, self.acked = self.acked, tcp_bytes_acked(self.transport)
        if self.core.output_paused and (acked is None or acked != self.acked):
            self.core.progress(now)         # the downloader took bytes (or who knows)
        for close in self.core.handle_timer(now):
            self.node.lines.write('%s: closing the connection from %s: %s' % (
                self.node.name, self.transport.get_extra_info('peername'), close.reason))
            self.stop()
            return
        self._arm()

    def stop(self):
        """End the task (a sendfile to a downloader not reading would never end), then reset
        the connection: nothing to flush to such a downloader. In that order: closing the
        transport under a running sendfile makes asyncio 3.11 fail in its connection_lost."""
        if self.task is None or self.task.done():
            reset(self.transport)
        else:
            self.task.add_done_callback(lambda _: reset(self.transport))
            self.task.cancel()

    async def _run(self):
        """Execute the core's actions in order, asking for the next batch when done."""
        try:
            while not self.lost:
                if not self.actions:
                    await self.writable.wait()
                    if self.lost:
                        break
                    self._take(self.core.resume_output(time.time()))
                    if not self.actions:
                        self.wake.clear()
                        await self.wake.wait()
                        continue
                action = self.actions.popleft()
                kind = type(action)
                if kind is transfer.SendFrame:
                    self.transport.write(action.data)
                    self.core.written(action, time.time())
                elif kind is transfer.HashFile:
                    self.actions.extendleft(reversed(await self._hash(action)))
                    self._arm()
                elif kind is transfer.SendFile:
                    if not await self._send_file(action):
                        break
                else:
                    self._close(action.reason)
                    break
        except (OSError, RuntimeError) as exc:
            if not self.node.closing:       # else the peer cut it: nothing to report
                self.node.lines.write('%s: send to %s failed: %s' % (
                    self.node.name, self.transport.get_extra_info('peername'), exc))
            self.transport.abort()
        finally:
            for action in self.actions:
                if type(action) in (transfer.SendFile, transfer.HashFile):
                    self.node.catalog.close(action.source)
            self.actions.clear()
            self.core.closed('shutdown' if self.node.closing else 'lost', time.time())
            for k, v in self.core.counters.items():
                self.node.totals[k] += v

    async def _hash(self, action):
        """The core's actions once the file of a HashFile is hashed on a worker thread."""
        done = self.node.digest(action.source)
        try:
            digest = await asyncio.shield(done)
        except asyncio.CancelledError:      # the thread may still read the file: close after
            done.add_done_callback(lambda _: self.node.catalog.close(action.source))
            raise
        return self.core.hashed(action, digest, time.time())

    async def _send_file(self, action):
        """Send one body from the file the header described; False if the connection ends."""
        try:
            # loop.sendfile first waits for the buffer to empty, in a wait that asyncio 3.11
            # cannot cancel cleanly (connection_lost then fails on it): wait here instead.
            await self.writable.wait()
            if self.lost:
                return False
            sent = await asyncio.get_running_loop().sendfile(
                self.transport, action.source, action.offset, action.count)
        finally:
            self.node.catalog.close(action.source)
        for close in self.core.file_sent(action, sent, time.time()):
            self._close(close.reason)
            return False
        return True

    def _close(self, reason):
        """Close as the core said: flush what is written, but not for longer than _LINGER."""
        self.node.lines.write('%s: closing the connection from %s: %s' % (
            self.node.name, self.transport.get_extra_info('peername'), reason))
        self.transport.close()
        asyncio.get_running_loop().call_later(_LINGER, reset, self.transport)


class PeerServer:
    """The asyncio side of one peer's file server."""

    def __init__(self, name, share, log=None, max_connections=None,
                 idle_timeout=transfer.IDLE_TIMEOUT, frame_timeout=transfer.FRAME_TIMEOUT,
                 stall_timeout=transfer.STALL_TIMEOUT):
        self.name = name
        self.max_connections, max_open = fd_limits(max_connections, transfer.WINDOW, 1)
        self.catalog = Catalog(share, max_open, kept=self.max_connections)
        self.log = log or JsonLog()
        self.idle_timeout = idle_timeout
        self.frame_timeout = frame_timeout
        self.stall_timeout = stall_timeout
        self.lines = ErrorLines()
        self.listener = Listener(self._connect, self._room, self.lines, name)
        self.connections = 0
        self.totals = dict.fromkeys(transfer.COUNTERS, 0)
        self.protocols = set()          # open connections, closed at shutdown
        self.tasks = set()              # their action tasks, until each has counted
        self.closing = False
        self.halt = threading.Event()   # stops hashing threads at shutdown
        self._pool = ThreadPoolExecutor(_HASH_THREADS, thread_name_prefix='hash')
        self._hashing = {}              # file version -> future digest (one hash per version)

    async def scan(self):
        """Hash every shared file on a worker thread; return how many have their digest."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, self.catalog.scan,
                                                                self.halt)

    def digest(self, source):
        """A future of the SHA-256 of source's version of its file, hashed on a worker thread
        (once, however many connections ask meanwhile); None if it could not be read."""
        done = self._hashing.get(source.key)
        if done is None:
            done = asyncio.wrap_future(self._pool.submit(self.catalog.digest, source, self.halt))
            self._hashing[source.key] = done
            done.add_done_callback(lambda f: self._hashed(source, f))
        return done

    def _hashed(self, source, done):
        self._hashing.pop(source.key, None)
        if not done.cancelled() and done.exception() is None and done.result() is not None:
            self.catalog.remember(source, done.result())

    def loop_error(self, loop, context):
        """The event loop's exception handler: one rate-limited line, not a traceback."""
        exc = context.get('exception')
        self.lines.write('%s: %s%s' % (self.name, context.get('message'),
                                       ': %r' % exc if exc is not None else ''))

    async def start(self, host, port):
        """Start listening; return the bound (host, port)."""
        return await self.listener.start(host, port)

    def _room(self):
        return not self.closing and len(self.protocols) < self.max_connections

    def _connect(self, sock):
        proto = _ServeProtocol(self)
        self.protocols.add(proto)
        self.connections += 1
        task = asyncio.get_running_loop().create_task(self._attach(proto, sock))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _attach(self, proto, sock):
        try:
            await asyncio.get_running_loop().connect_accepted_socket(lambda: proto, sock)
        except OSError:
            self.protocols.discard(proto)
            sock.close()

    async def close(self):
        """Stop listening and hashing, drop open connections, wait until all have counted."""
        self.closing = True
        self.halt.set()
        self.listener.close()
        for proto in list(self.protocols):
            if proto.transport is not None:
                proto.stop()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, *self._hashing.values(), return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.lines.flush()

    def summary(self):
        """Return the counters of this peer (see transfer.py for what each GET ends as)."""
        c = dict(self.totals)
        c.update(connections=self.connections, refused_connections=self.listener.refused,
                 accept_errors=self.listener.accept_errors,
                 error_lines_left_out=self.lines.left_out)
        return c


def parse_args(argv):
    """Parse the peer command line."""
    p = UsageParser('dht.peer', package='nodes',
                    description=__doc__.split('\n')[0])
    p.add_argument('--name', required=True)
    p.add_argument('--listen', required=True, help='IP:PORT of this peer\'s file server')
    p.add_argument('--share', required=True, help='folder whose files this peer serves')
    p.add_argument('--max-connections', type=int, default=None,
                   help='connections served at once (default: RLIMIT_NOFILE / 4, at most 1000)')
    p.add_argument('--idle-timeout', type=float, default=transfer.IDLE_TIMEOUT,
                   help='close a connection with no traffic for this long (s)')
    p.add_argument('--frame-timeout', type=float, default=transfer.FRAME_TIMEOUT,
                   help='close a connection whose request frame stays incomplete this long (s)')
    p.add_argument('--stall-timeout', type=float, default=transfer.STALL_TIMEOUT,
                   help='close a connection whose downloader takes no output this long (s)')
    args = p.parse_args(argv)
    try:
        args.listen = parse_addr(args.listen)
        fd_limits(args.max_connections, transfer.WINDOW, 1)
    except ValueError as exc:
        p.error(str(exc))
    if min(args.idle_timeout, args.frame_timeout, args.stall_timeout) <= 0:
        p.error('--idle-timeout, --frame-timeout and --stall-timeout must be positive')
    if not os.path.isdir(args.share):
        p.error('--share %s is not a directory' % args.share)
    return args


async def _main(args, log):
    """Scan, serve until SIGTERM/SIGINT; return the exit status."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    node = PeerServer(args.name, args.share, log, args.max_connections, args.idle_timeout,
                      args.frame_timeout, args.stall_timeout)
    loop.set_exception_handler(node.loop_error)
    scan = asyncio.ensure_future(node.scan())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait((scan, stopped), return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        node.halt.set()
        files = await scan
        await node.close()
        error('%s: stopped during the start-up scan, with %d files hashed' % (args.name, files))
        log.write('summary', flush=True, name=args.name, interrupted=True, **node.summary())
        return 1
    host, port = await node.start(*args.listen)
    log.write('ready', flush=True, listen='%s:%d' % (host, port), name=args.name,
              files=scan.result(), max_connections=node.max_connections,
              max_open_files=node.catalog.max_open)
    await stopped
    await node.close()
    log.write('summary', flush=True, name=args.name, **node.summary())
    return 0


def main(argv=None):
    """Entry point; an OSError (address in use, unreadable folder) is one line and status 1."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return asyncio.run(_main(args, JsonLog()))
    except OSError as exc:
        error('peer %s: %s' % (args.name, exc))
        return 1


def simulate(env, argv):
    """Run this peer in the simulator (`repronet.sim`): the same core and catalog, records
    in virtual time (`sim_peer.SimPeer`)."""
    args = parse_args(argv)
    max_connections, max_open = fd_limits(args.max_connections, transfer.WINDOW, 1)
    sim_peer.SimPeer(env, args, max_connections, max_open).start()


if __name__ == '__main__':
    sys.exit(main())
