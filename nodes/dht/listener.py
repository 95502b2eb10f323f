"""Accepting connections within a descriptor budget, and error lines that cannot flood stderr.

A process that serves files holds one descriptor per connection plus the files it sends,
so both are budgeted against RLIMIT_NOFILE (`fd_limits`): at most `max_connections`
connections, and the open files the rest leaves after `FD_RESERVE`. Kept within that, the
process never meets EMFILE, neither in accept(2) nor in open(2).

`Listener` accepts connections itself instead of `loop.create_server`: asyncio's accept
loop, when accept(2) fails for lack of descriptors, keeps trying once per backlog slot in
the same turn and logs a traceback for each, so a process out of descriptors writes
megabytes of stderr a second. Here a connection beyond `max_connections` is accepted and
closed at once (counted in `refused`), and an accept that fails pauses accepting for
`ACCEPT_PAUSE` seconds with one rate-limited line.

`ErrorLines`: lines about single connections, at most one per second; the rest counted.
"""

import asyncio
import resource
import socket
import struct
import time

from .common import error

FD_RESERVE = 32         # descriptors besides connections and files: stdio, epoll, listener...
ACCEPT_PAUSE = 1.0      # seconds without accepting after accept(2) ran out of something
_ACCEPT_BATCH = 64      # connections accepted per wake-up of the listening socket
_BACKLOG = 1024


def fd_limits(max_connections=None, min_files=1, per_connection=0):
    """(connections, open files) that fit RLIMIT_NOFILE with FD_RESERVE to spare; by default
    a quarter of the limit (at most 1000) for connections. ValueError if fewer than
    min_files + per_connection * connections are left for files."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    conns = min(1000, soft // 4) if max_connections is None else max_connections
    files = soft - conns - FD_RESERVE
    need = min_files + per_connection * max(conns, 0)
    if conns < 1 or files < need:
        raise ValueError('%d connections leave %d of RLIMIT_NOFILE %d for open files, fewer'
                         ' than %d' % (conns, files, soft, need))
    return conns, files


class ErrorLines:
    """stderr lines about single connections, at most one per `every` seconds; the others are
    counted, so a flood of failing connections cannot become a flood of log lines."""

    def __init__(self, every=1.0):
        self.every = every
        self.left_out = 0
        self._held = 0
        self._next = 0.0

    def write(self, text):
        """Print text unless a line went out less than `every` seconds ago."""
        now = time.monotonic()
        if now < self._next:
            self._held += 1
            self.left_out += 1
            return
        if self._held:
            text += ' (and %d similar lines left out before this one)' % self._held
        self._held = 0
        self._next = now + self.every
        error(text)

    def flush(self):
        """Say how many lines were left out since the last one printed."""
        if self._held:
            error('%d more error lines left out' % self._held)
            self._held = 0


class Listener:
    """A listening TCP socket that hands each accepted connection to `connect(sock)` while
    `room()` is true, and closes it at once otherwise."""

    def __init__(self, connect, room, lines, name):
        self.connect, self.room, self.lines, self.name = connect, room, lines, name
        self.refused = 0            # connections closed at once: no room
        self.accept_errors = 0      # accept(2) failures (each pauses accepting)
        self.sock = None
        self._paused = None

    async def start(self, host, port):
        """Listen on host:port (port 0: any); return the bound (host, port)."""
        loop = asyncio.get_running_loop()
        family, kind, proto, _, addr = (await loop.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE))[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(_BACKLOG)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.sock = sock
        loop.add_reader(sock.fileno(), self._accept)
        return sock.getsockname()[:2]

    def close(self):
        """Stop accepting and close the listening socket."""
        if self.sock is not None:
            if self._paused is not None:
                self._paused.cancel()
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None

    def _accept(self):
        loop = asyncio.get_running_loop()
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:          # out of descriptors or memory: wait, do not spin
                self.accept_errors += 1
                self.lines.write('%s: cannot accept connections for %g s: %s'
                                 % (self.name, ACCEPT_PAUSE, exc))
                loop.remove_reader(self.sock.fileno())
                self._paused = loop.call_later(ACCEPT_PAUSE, self._resume)
                return
            if not self.room():
                conn.close()
                self.refused += 1
                continue
            conn.setblocking(False)
            self.connect(conn)

    def _resume(self):
        self._paused = None
        if self.sock is not None:
            asyncio.get_running_loop().add_reader(self.sock.fileno(), self._accept)


_BYTES_ACKED = struct.Struct('=Q')      # struct tcp_info: u64 tcpi_bytes_acked at byte 120
_BYTES_ACKED_AT = 120
_LINGER_RESET = struct.pack('ii', 1, 0)    # SO_LINGER on, 0 s: close(2) sends a reset


def reset(transport):
    """Abort with a TCP reset: a plain close would leave the kernel holding the unsent bytes
    (and the downloader's connection open) until a downloader that stopped reading reads."""
    sock = transport.get_extra_info('socket')
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        except OSError:
            pass
    transport.abort()


def tcp_bytes_acked(transport):
    """Bytes of this connection the other side acknowledged (Linux TCP_INFO), or None."""
    sock = transport.get_extra_info('socket')
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except (AttributeError, OSError):
        return None
    if len(info) < _BYTES_ACKED_AT + _BYTES_ACKED.size:
        return None
    return _BYTES_ACKED.unpack_from(info, _BYTES_ACKED_AT)[0]
