"""File server for the transfer experiment (seed 002): GET sends a file, PUT receives one.

    python -m nodes.transfer.server --root DIR [--host 0.0.0.0] [--port 5001]
        [--max-connections 256] [--timeout 30] [--max-put-bytes 1073741824]
        [--congestion-control NAME]

The protocol and its checks are in ``nodes/transfer/core.py``; the sending loop (one
``send()`` per packet) in ``sending.py``. Every connection carries one transfer and gets
its own task, so many clients at once share the server as the seed's simultaneous
connections did. Whatever one client does wrong (a bad line, a name outside the served
folder, silence, a disconnect mid-file) ends that connection with ``ERR`` and an ``error``
record; the server goes on serving. A PUT is written under a temporary name beside its
target, checked (size, SHA-256), synced and renamed: a partial file never has the final
name.

A GET announces the file's SHA-256 before its bytes. Hashing a large file would add to
the time from request to first byte, so a ``NAME.sha256`` file beside it (64 hex digits,
written by whoever made the file) is used when it is not older than the file; otherwise
the server hashes the file once and keeps the digest for its size and mtime. A wrong
sidecar is caught by the client's own check.

Stdout: JSON lines (``ready``, ``sent``, ``received``, ``error``, ``summary`` on SIGTERM);
``t_*`` fields are ``time.monotonic()`` seconds, shared by every process on the machine.
``simulate(env, argv)`` runs the same server in the simulator (``sim_server``: GET only).
"""

import asyncio
import hashlib
import itertools
import os
import socket
import sys
import time

from nodes.dht.common import JsonLog, UsageParser, error, stop_event_on_signals
from nodes.transfer import core
from nodes.transfer.receiving import receive_into, unlink_quietly
from nodes.transfer.sending import Stalled, send_file, set_congestion_control, set_nodelay


class Refused(Exception):
    """A request the server answers with ERR (one sentence)."""


class FileServer:
    """Serves one folder; counts what it did for the summary."""

    def __init__(self, args, log):
        self.args, self.log = args, log
        self.root = os.path.realpath(args.root)
        self.ids = itertools.count(1)
        self.active = 0
        self.counts = {'sent': 0, 'received': 0, 'errors': 0, 'connections': 0}
        self.digests = {}           # (dev, ino, size, mtime_ns) -> sha256

    def path(self, name):
        """Return the real path of a checked name inside the root, or Refused."""
        path = os.path.realpath(os.path.join(self.root, core.check_name(name)))
        if not path.startswith(self.root + os.sep):
            raise Refused('name escapes the served folder: %r' % name)
        return path

    def sha256(self, path, st):
        """Return a file's SHA-256: its sidecar, the remembered digest, or a fresh hash."""
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key in self.digests:
            return self.digests[key]
        try:
            side = os.stat(path + '.sha256')
            if side.st_mtime_ns >= st.st_mtime_ns:
                with open(path + '.sha256') as f:
                    text = f.read(100).split()[0]
                if len(text) == 64:
                    self.digests[key] = text
                    return text
        except (OSError, IndexError):
            pass
        digest = hashlib.sha256()
        with open(path, 'rb') as f:
            for block in iter(lambda: f.read(1 << 20), b''):
                digest.update(block)
        self.digests[key] = digest.hexdigest()
        return self.digests[key]

    async def serve(self, lsock):
        """Accept connections until cancelled; each gets its own task."""
        loop = asyncio.get_running_loop()
        tasks = set()
        while True:
            conn, peer = await loop.sock_accept(lsock)
            conn.setblocking(False)
            cid = next(self.ids)
            self.counts['connections'] += 1
            task = asyncio.ensure_future(self.handle(conn, cid, '%s:%d' % peer[:2]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def handle(self, conn, cid, peer):
        """Run one connection's transfer; every failure is an ERR and an error record."""
        loop = asyncio.get_running_loop()
        fields = {'conn': cid, 'peer': peer, 'name': None}
        progress = {'bytes': 0}
        self.active += 1
        try:
            if self.active > self.args.max_connections:
                raise Refused('too many connections (at most %d)' % self.args.max_connections)
            fields['t_accept'] = time.monotonic()
            reader = core.LineReader()
            got = None
            while got is None:
                data = await self._recv(loop, conn, 'the request line')
                if not data:
                    raise Refused('the client closed before its request line ended')
                got = reader.feed(data)
            line, rest = got
            fields['t_request'] = time.monotonic()
            req = core.parse_request(line, self.args.max_put_bytes)
            fields['name'] = req.name
            path = self.path(req.name)
            if req.op == 'GET':
                await self.get(conn, req, path, fields, progress)
            else:
                await self.put(loop, conn, req, path, rest, fields, progress)
        except (Refused, core.ProtocolError, Stalled) as e:
            record = getattr(e, 'record', None) or {}
            self._error(fields, str(e), record.get('bytes', progress['bytes']))
            await self._refuse(loop, conn, e)
        except OSError as e:
            record = getattr(e, 'record', None) or {}
            self._error(fields, _sentence(e), record.get('bytes', progress['bytes']))
        finally:
            self.active -= 1
            conn.close()

    async def _refuse(self, loop, conn, exc):
        """Send ERR, then read and drop what the client still sends (a refused PUT's data)
        until it closes, for at most --timeout: closing with unread data would reset the
        connection and could destroy the ERR line before the client reads it."""
        try:
            conn.setblocking(True)
            conn.settimeout(self.args.timeout)
            conn.sendall(core.err_line(exc))
            conn.shutdown(socket.SHUT_WR)
            conn.setblocking(False)
            end = time.monotonic() + self.args.timeout
            while time.monotonic() < end:
                data = await asyncio.wait_for(loop.sock_recv(conn, 1 << 16),
                                              max(end - time.monotonic(), 0.001))
                if not data:
                    return
        except (OSError, asyncio.TimeoutError):
            pass

    async def _recv(self, loop, conn, what):
        """One read with the idle timeout; Refused when the client stays silent."""
        try:
            return await asyncio.wait_for(loop.sock_recv(conn, 1 << 16), self.args.timeout)
        except asyncio.TimeoutError:
            raise Refused('no data from the client for %g s while waiting for %s'
                          % (self.args.timeout, what)) from None

    async def get(self, conn, req, path, fields, progress):
        """Send one file: OK line, then its bytes in packet-sized writes."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise Refused('no such file: %r' % req.name) from None
        if not os.path.isfile(path):
            raise Refused('not a regular file: %r' % req.name)
        digest = self.sha256(path, st)
        set_nodelay(conn, req.nodelay)
        fields['congestion_control'] = set_congestion_control(conn, self.args.congestion_control)
        conn.setblocking(True)
        conn.settimeout(self.args.timeout)
        conn.sendall(core.ok_line(st.st_size, digest))
        conn.setblocking(False)
        record = await send_file(conn, path, req.packet, self.args.timeout,
                                 req.dropcache, size=st.st_size)
        self.counts['sent'] += 1
        self.log.write('sent', flush=True, **dict(fields, nodelay=req.nodelay,
                                                  dropcache=req.dropcache, **record))

    async def put(self, loop, conn, req, path, rest, fields, progress):
        """Receive one file under a temporary name; rename it once it checks out."""
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            raise Refused('no such folder for %r' % req.name)
        temp = os.path.join(folder, '.%s.part-%d' % (os.path.basename(path), fields['conn']))
        receiver = core.Receiver(req.size, req.sha256)
        try:
            with open(temp, 'wb') as f:
                await receive_into(loop, conn, receiver, f, rest, self.args.timeout,
                                   progress)
                f.flush()
                os.fsync(f.fileno())
            result = receiver.finish()
            os.replace(temp, path)
        except BaseException:
            unlink_quietly(temp)
            raise
        conn.setblocking(True)
        conn.settimeout(self.args.timeout)
        conn.sendall(core.ok_line(req.size, req.sha256))
        self.counts['received'] += 1
        self.log.write('received', flush=True, **dict(fields, **result))

    def _error(self, fields, sentence, nbytes):
        """Log one connection's failure."""
        self.counts['errors'] += 1
        self.log.write('error', flush=True, conn=fields['conn'], peer=fields['peer'],
                       name=fields['name'], error=sentence, bytes=nbytes)


def _sentence(exc):
    """One sentence for a socket or stall failure."""
    if isinstance(exc, Stalled):
        return str(exc)
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return 'the client went away mid-transfer (%s)' % (exc.strerror or exc)
    return 'transfer failed: %s' % (exc.strerror or exc)


def parse_args(argv):
    """Parse and check the flags; one sentence and exit 2 when one is wrong."""
    p = UsageParser('transfer.server', package='nodes',
                    description='Serve files over TCP (GET and PUT).')
    p.add_argument('--root', required=True, help='the served folder')
    p.add_argument('--host', default='0.0.0.0')
    p.add_argument('--port', type=int, default=5001)
    p.add_argument('--max-connections', type=int, default=256)
    p.add_argument('--timeout', type=float, default=30.0,
                   help='seconds a connection may stay idle (default 30)')
    p.add_argument('--max-put-bytes', type=int, default=1 << 30)
    p.add_argument('--congestion-control', metavar='NAME',
                   help='TCP congestion control of every sending socket (e.g. cubic, reno, '
                   'bbr; default: the namespace default)')
    args = p.parse_args(argv)
    if args.congestion_control is not None:
        with open('/proc/sys/net/ipv4/tcp_available_congestion_control') as f:
            have = f.read().split()
        if args.congestion_control not in have:
            p.error('--congestion-control %r is not one this kernel has (%s)' % (
                args.congestion_control, ' '.join(have)))
    if not os.path.isdir(args.root):
        p.error('--root %r is not a folder' % args.root)
    p.bounded(args, 'port', 0, 65535)
    p.bounded(args, 'max_connections', 1, 100000)
    p.bounded(args, 'timeout', 0.001, 86400)
    p.bounded(args, 'max_put_bytes', 0, 1 << 40)
    return args


async def main_async(args, log):
    """Listen, serve until SIGTERM/SIGINT, then log the summary."""
    loop = asyncio.get_running_loop()
    stop = stop_event_on_signals(loop)
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((args.host, args.port))
    lsock.listen(1024)
    lsock.setblocking(False)
    server = FileServer(args, log)
    log.write('ready', flush=True, port=lsock.getsockname()[1], root=server.root)
    serving = asyncio.ensure_future(server.serve(lsock))
    await stop.wait()
    serving.cancel()
    lsock.close()
    log.write('summary', flush=True, **server.counts)


def main(argv=None):
    """Run the server; exit 2 on bad flags, 1 when it cannot listen."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        asyncio.run(main_async(args, JsonLog()))
    except OSError as e:
        error('transfer server: cannot listen on %s:%d: %s' % (
            args.host, args.port, e.strerror or e))
        return 1
    return 0


def simulate(env, argv):
    """Run this server in the simulator (`repronet.sim`): the same checks, files and
    records over a simulated stream, in virtual time (`sim_server`)."""
    from nodes.transfer.sim_server import SimFileServer
    args = parse_args(argv)
    SimFileServer(env, args, FileServer(args, env.log), Refused).start()


if __name__ == '__main__':
    sys.exit(main())
