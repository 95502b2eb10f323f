"""File-transfer client (seed 002): fetch a file (get) or send one (put), timed as the seed.

    python -m nodes.transfer.client get --server IP --port P --name NAME --out DIR
        [--save-as FILE] [--packet 1000] [--no-nodelay] [--segment] [--dropcache]
        [--read-size 65536] [--timeout 30] [--barrier]
    python -m nodes.transfer.client put --server IP --port P --file PATH --name NAME
        [--packet 1000] [--no-nodelay] [--segment] [--timeout 30] [--barrier]

``--packet`` is the sending side's write size (the server's, for get); ``--segment``
clamps this socket's MSS before it connects (``TCP_MAXSEG``), so the peer's segments
carry exactly one packet each: the seed's "packet size" on the wire, not only in the
program. With ``--barrier`` the client connects, prints ``ready`` and waits for ``go`` on
stdin before it sends its request (the runner's barrier), so simultaneous clients start
together and connection set-up is outside the timed part.

get writes to a temporary name in ``--out``, checks size and SHA-256 against the
server's ``OK`` line and renames: a partial file never has the final name. Stdout: JSON
lines (``received`` or ``sent``, or ``error`` and exit status 1); bad flags are one
sentence on stderr and exit status 2, before any connection. ``simulate(env, argv)`` runs
the same client in the simulator (``sim_client``: get only).
"""

import asyncio
import hashlib
import os
import socket
import sys
import time

from nodes.dht.common import JsonLog, UsageParser, wait_go
from nodes.transfer import core
from nodes.transfer.receiving import receive_into, unlink_quietly
from nodes.transfer.sending import Stalled, send_file, set_nodelay


class Failed(Exception):
    """The transfer failed; the message is one sentence."""


def timestamps_on():
    """True when this namespace's TCP adds timestamp options to every segment."""
    try:
        with open('/proc/sys/net/ipv4/tcp_timestamps') as f:
            return f.read().strip() != '0'
    except OSError:
        return True


async def connect(args, log):
    """Open the connection (MSS clamped first with --segment); return (socket, mss)."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    mss = None
    if args.segment:
        mss = core.mss_for_payload(args.packet, timestamps_on())
        if mss is None:
            log.write('segment', flush=True, applied=False, why='a %d-byte payload needs an '
                      'MSS Linux cannot set (%d to %d)' % (args.packet, core.TCP_MIN_MSS,
                                                           core.TCP_MAX_MSS))
        else:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
    try:
        await asyncio.wait_for(loop.sock_connect(sock, (args.server, args.port)),
                               args.timeout)
    except asyncio.TimeoutError:
        sock.close()
        raise Failed('no connection to %s:%d within %g s' % (
            args.server, args.port, args.timeout)) from None
    except OSError as e:
        sock.close()
        raise Failed('cannot connect to %s:%d: %s' % (
            args.server, args.port, e.strerror or e)) from None
    return sock, mss


async def read_reply(loop, sock, timeout):
    """Return (size, sha256, bytes after the line, time the line ended)."""
    reader = core.LineReader()
    while True:
        try:
            data = await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), timeout)
        except asyncio.TimeoutError:
            raise Failed('no reply from the server for %g s' % timeout) from None
        if not data:
            raise Failed('the server closed the connection before replying')
        got = reader.feed(data)
        if got is not None:
            size, digest = core.parse_reply(got[0])
            return size, digest, got[1], time.monotonic()


async def get(args, log, sock, fields):
    """Request the file, receive it under a temporary name, check it, rename it."""
    loop = asyncio.get_running_loop()
    req = core.Request('GET', args.name, packet=args.packet, nodelay=not args.no_nodelay,
                       dropcache=args.dropcache)
    fields['t_request'] = time.monotonic()
    await loop.sock_sendall(sock, core.encode_request(req))
    size, digest, rest, fields['t_reply'] = await read_reply(loop, sock, args.timeout)
    final = os.path.join(args.out, args.save_as)
    temp = os.path.join(args.out, '.%s.part-%d' % (args.save_as, os.getpid()))
    receiver = core.Receiver(size, digest)
    progress = {'bytes': 0}
    fields['progress'] = progress
    try:
        with open(temp, 'wb') as f:
            await receive_into(loop, sock, receiver, f, rest, args.timeout, progress,
                               args.read_size)
        result = receiver.finish()
        os.replace(temp, final)
    except BaseException:
        unlink_quietly(temp)
        raise
    result.update(path=final, total_s=round(result['t_last_read'] - fields['t_request'], 6)
                  if result['t_last_read'] is not None else 0.0,
                  total_mbps=core.rate_mbps(size, fields['t_request'], result['t_last_read']))
    return 'received', result


async def put(args, log, sock, fields):
    """Send the file in packet-sized writes; wait for the server's OK."""
    loop = asyncio.get_running_loop()
    digest = hashlib.sha256()
    with open(args.file, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    size = os.path.getsize(args.file)
    req = core.Request('PUT', args.name, size=size, sha256=digest.hexdigest(),
                       packet=args.packet, nodelay=not args.no_nodelay)
    set_nodelay(sock, not args.no_nodelay)
    fields['t_request'] = time.monotonic()
    await loop.sock_sendall(sock, core.encode_request(req))
    record = await send_file(sock, args.file, args.packet, args.timeout, size=size)
    got, _, _, fields['t_reply'] = await read_reply(loop, sock, args.timeout)
    record.update(confirmed=got == size, sha256=req.sha256)
    return 'sent', record


async def run(args, log):
    """Connect, wait at the barrier, transfer; return the exit status."""
    fields = {'name': args.name, 'packet': args.packet, 'nodelay': not args.no_nodelay}
    sock = None
    try:
        sock, fields['mss'] = await connect(args, log)
        fields['t_connect'] = time.monotonic()
        if args.barrier:
            await wait_go(log)
        event, result = await (get if args.command == 'get' else put)(args, log, sock, fields)
    except (Failed, core.RemoteError, core.ProtocolError, Stalled, OSError,
            RuntimeError) as e:
        progress = fields.get('progress') or {}
        record = getattr(e, 'record', None) or {}
        log.write('error', flush=True, name=args.name,
                  error=_sentence(e), bytes=record.get('bytes', progress.get('bytes', 0)))
        return 1
    finally:
        if sock is not None:
            sock.close()
    fields.pop('progress', None)
    if args.command == 'get':
        fields['read_size'] = args.read_size
    log.write(event, flush=True, **dict(fields, **result))
    return 0


def _sentence(exc):
    """One sentence for whatever stopped the transfer."""
    if isinstance(exc, core.RemoteError):
        return 'the server refused: %s' % exc
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return 'the server went away mid-transfer (%s)' % exc.strerror
    if isinstance(exc, OSError):
        return 'transfer failed: %s' % (exc.strerror or exc)
    return str(exc)


def parse_args(argv):
    """Parse and check the flags; one sentence and exit 2 when one is wrong."""
    p = UsageParser('transfer.client', package='nodes',
                    description='Fetch (get) or send (put) one file over TCP.')
    p.add_argument('command', choices=('get', 'put'))
    p.add_argument('--server', required=True)
    p.add_argument('--port', type=int, default=5001)
    p.add_argument('--name', required=True, help='the file\'s name on the server')
    p.add_argument('--out', help='get: folder for the received file')
    p.add_argument('--save-as', help='get: file name in --out (default: the name\'s last part)')
    p.add_argument('--file', help='put: the file to send')
    p.add_argument('--packet', type=int, default=core.DEFAULT_PACKET)
    p.add_argument('--no-nodelay', action='store_true', help='leave Nagle on')
    p.add_argument('--segment', action='store_true', help='clamp the MSS to one packet')
    p.add_argument('--dropcache', action='store_true',
                   help='get: the server evicts the file from the page cache first')
    p.add_argument('--read-size', type=int, default=64 << 10)
    p.add_argument('--timeout', type=float, default=30.0)
    p.add_argument('--barrier', action='store_true')
    args = p.parse_args(argv)
    p.bounded(args, 'port', 1, 65535)
    p.bounded(args, 'packet', 1, core.MAX_PACKET)
    p.bounded(args, 'read_size', 1, 64 << 20)
    p.bounded(args, 'timeout', 0.001, 86400)
    try:
        core.check_name(args.name)
        socket.inet_aton(args.server)
    except (core.ProtocolError, OSError) as e:
        p.error('--name %r: %s' % (args.name, e) if isinstance(e, core.ProtocolError)
                else '--server must be an IPv4 address, not %r' % args.server)
    if args.command == 'get':
        if not args.out or not os.path.isdir(args.out):
            p.error('get needs --out, an existing folder (not %r)' % args.out)
        args.save_as = args.save_as or args.name.rsplit('/', 1)[-1]
        if '/' in args.save_as or args.save_as in ('.', '..'):
            p.error('--save-as must be a file name, not %r' % args.save_as)
    elif not args.file or not os.path.isfile(args.file):
        p.error('put needs --file, an existing file (not %r)' % args.file)
    return args


def main(argv=None):
    """Run one transfer; exit 0 on success, 1 on failure, 2 on bad flags."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return asyncio.run(run(args, JsonLog()))


def simulate(env, argv):
    """Run this client in the simulator (`repronet.sim`): the same GET, checks and records
    over a simulated stream, in virtual time (`sim_client`)."""
    from nodes.transfer.sim_client import SimClient
    SimClient(env, parse_args(argv)).start()


if __name__ == '__main__':
    sys.exit(main())
