"""Send one file over reliable UDP (seed 004): the sending node's command line.

    python -m nodes.rudp.send --dst IP --port P --file PATH [--block 32] [--payload 1472]
        [--window 1] [--rate MBIT] [--timeout 10] [--barrier]

``--block`` is the seed's block size B (datagrams repaired before the next block);
``--window W`` keeps W blocks in flight and ``--rate`` paces datagrams (both beyond the
seed). The file is mapped, hashed (outside the timed part) and handed to
``nodes.rudp.sender_core``. Stdout: JSON lines, ``ready`` (with --barrier, then wait for
``go``), then ``done`` with the sender's figures (exit 0) or ``error`` (exit 1); bad flags
are one sentence on stderr and exit status 2, before any socket.
"""

import asyncio
import hashlib
import mmap
import os
import socket
import sys
import time

from nodes.dht.common import JsonLog, UsageParser, stop_event_on_signals, wait_go
from nodes.rudp import wire
from nodes.rudp.driver import CoreProtocol
from nodes.rudp.sender_core import Sender
from nodes.rudp.sim_driver import SimSend


def parse_args(argv):
    """Parse and check the flags (one sentence and exit 2 when one is wrong)."""
    p = UsageParser('rudp.send', package='nodes', description=__doc__.split('\n')[0])
    p.add_argument('--dst', required=True, help='the receiver\'s IPv4 address')
    p.add_argument('--port', type=int, required=True)
    p.add_argument('--file', required=True)
    p.add_argument('--name', help='name the receiver gives the file (default: its basename)')
    p.add_argument('--block', type=int, default=32, help='datagrams per block (B)')
    p.add_argument('--payload', type=int, default=1472, help='file bytes per datagram')
    p.add_argument('--window', type=int, default=1, help='blocks in flight (1: the seed)')
    p.add_argument('--rate', type=float, help='pace datagrams at this many Mbit/s')
    p.add_argument('--timeout', type=float, default=10.0,
                   help='give up after this many seconds without progress')
    p.add_argument('--barrier', action='store_true')
    args = p.parse_args(argv)
    p.bounded(args, 'port', 1, 65535)
    p.bounded(args, 'block', 1, wire.MAX_BLOCK)
    p.bounded(args, 'payload', 1, wire.MAX_PAYLOAD)
    p.bounded(args, 'window', 1, 1 << 16)
    p.bounded(args, 'timeout', 0.01, 86400)
    if args.rate is not None:
        p.bounded(args, 'rate', 0.001, 1e6)
    try:
        socket.inet_aton(args.dst)
    except OSError:
        p.error('--dst must be an IPv4 address, not %r' % args.dst)
    if not os.path.isfile(args.file):
        p.error('--file %r is not a file' % args.file)
    args.name = args.name or os.path.basename(args.file)
    if not 1 <= len(args.name.encode('utf-8')) <= 255 or '/' in args.name:
        p.error('--name must be 1 to 255 bytes without "/", not %r' % args.name)
    return args


def load(path):
    """Map and hash the file: return (data, SHA-256 digest, close)."""
    with open(path, 'rb') as f:
        size = os.fstat(f.fileno()).st_size
        data = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) if size else b''
    return data, hashlib.sha256(data).digest(), (data.close if size else lambda: None)


def report(sender, args, digest, log):
    """Log the transfer's end (done or error); return the exit status."""
    summary = sender.summary()
    summary.update(file=args.file, sha256=digest.hex(), rate=args.rate)
    if sender.state == 'done':
        log.write('done', flush=True, **summary)
        return 0
    log.write('error', flush=True, **summary)
    return 1


async def run(args, log):
    """Send the file; return the exit status."""
    data, digest, close = load(args.file)
    loop = asyncio.get_running_loop()
    stop = stop_event_on_signals(loop)
    session = int.from_bytes(os.urandom(8), 'big')
    sender = Sender(session, memoryview(data), digest, args.name, time.monotonic(),
                    block=args.block, payload=args.payload, window=args.window,
                    rate_mbps=args.rate, timeout=args.timeout)
    transport, proto = await loop.create_datagram_endpoint(
        lambda: CoreProtocol(sender, peer=(args.dst, args.port)), family=socket.AF_INET)
    try:
        if args.barrier:
            await wait_go(log)
        t0 = time.monotonic()
        sender.started = t0
        sender.start(t0)
        proto.pump()
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([proto.ended, stopped], return_when=asyncio.FIRST_COMPLETED)
        if not proto.ended.done():
            sender._fail('stopped by a signal')
        return report(sender, args, digest, log)
    finally:
        transport.close()
        del sender.data
        close()


def main(argv=None):
    """Run one transfer."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return asyncio.run(run(args, JsonLog()))


def simulate(env, argv):
    """Run this sender in the simulator (`repronet.sim`): the same core, records in virtual
    time (`sim_driver.SimSend`)."""
    SimSend(env, parse_args(argv), load, report).start()


if __name__ == '__main__':
    sys.exit(main())
