"""Receive files over reliable UDP (seed 004): the receiving node's command line.

    python -m nodes.rudp.recv --port P --out DIR [--host 0.0.0.0] [--timeout 10]
        [--linger 1] [--max-bytes N] [--once]

Each transfer is written to a temporary name in ``--out`` at the offsets the core gives,
then read back and hashed; only a file whose SHA-256 equals the announced one is renamed
to its final name (a partial or wrong file never has it). With ``--once`` the receiver
exits after one transfer (0 when it arrived whole, 1 otherwise); without it, it serves
one transfer after another until SIGTERM. Stdout: JSON lines, ``ready``, then ``done`` or
``error`` per transfer; bad flags are one sentence on stderr and exit status 2.
"""

import asyncio
import hashlib
import os
import socket
import sys
import time

from nodes.dht.common import JsonLog, UsageParser, stop_event_on_signals
from nodes.rudp.driver import CoreProtocol
from nodes.rudp.receiver_core import Complete, Opened, Receiver, Write
from nodes.rudp.sim_driver import SimReceive


class FileSink:
    """The file side of one transfer: temporary file, writes by offset, verdict, rename."""

    def __init__(self, out, core):
        self.out, self.core = out, core
        self.fd = self.temp = self.final = self.meta = None

    def __call__(self, now):
        for ev in self.core.pop_events():
            if isinstance(ev, Opened):
                self.meta = ev
                name = os.path.basename(ev.name) or 'unnamed'
                self.final = os.path.join(self.out, name)
                self.temp = os.path.join(self.out, '.%s.part-%d' % (name, os.getpid()))
                self.fd = os.open(self.temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                os.ftruncate(self.fd, ev.size)
            elif isinstance(ev, Write):
                os.pwrite(self.fd, ev.data, ev.offset)
            elif isinstance(ev, Complete):
                self.core.verified(self._digest() == self.meta.sha256, now)
                if self.core.ok:
                    os.fsync(self.fd)
                    os.replace(self.temp, self.final)
                    self.temp = None

    def _digest(self):
        digest = hashlib.sha256()
        os.lseek(self.fd, 0, os.SEEK_SET)
        for block in iter(lambda: os.read(self.fd, 1 << 20), b''):
            digest.update(block)
        return digest.digest()

    def close(self):
        """Close the file; a temporary file left by a failed transfer is removed."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.temp is not None:
            try:
                os.unlink(self.temp)
            except FileNotFoundError:
                pass


def parse_args(argv):
    """Parse and check the flags (one sentence and exit 2 when one is wrong)."""
    p = UsageParser('rudp.recv', package='nodes', description=__doc__.split('\n')[0])
    p.add_argument('--host', default='0.0.0.0')
    p.add_argument('--port', type=int, required=True)
    p.add_argument('--out', required=True, help='folder for the received files')
    p.add_argument('--timeout', type=float, default=10.0,
                   help='give up a transfer after this many seconds without a datagram')
    p.add_argument('--linger', type=float, default=1.0,
                   help='seconds to repeat DONE to a sender that did not hear it')
    p.add_argument('--max-bytes', type=int, default=1 << 40)
    p.add_argument('--reorder-wait', type=float, default=0.0, metavar='S',
                   help='wait this long after a round\'s last datagram before reporting '
                   'the block\'s missing ones (datagrams a jittery link reordered are '
                   'then not resent; default 0: at once, as the seed)')
    p.add_argument('--once', action='store_true', help='exit after one transfer')
    args = p.parse_args(argv)
    p.bounded(args, 'port', 0, 65535)
    p.bounded(args, 'timeout', 0.01, 86400)
    p.bounded(args, 'linger', 0, 3600)
    p.bounded(args, 'max_bytes', 0, 1 << 50)
    p.bounded(args, 'reorder_wait', 0, 10)
    if not os.path.isdir(args.out):
        p.error('--out %r is not a folder' % args.out)
    return args


def report(core, sink, log):
    """Log one transfer's end (done or error); return True when it arrived whole."""
    summary = core.summary()
    summary.update(path=sink.final if core.ok else None)
    log.write('done' if core.state == 'done' else 'error', flush=True, **summary)
    return core.state == 'done'


async def one(args, log, sock, stop):
    """Receive one transfer on sock; return True when it arrived whole."""
    loop = asyncio.get_running_loop()
    core = Receiver(time.monotonic(), timeout=args.timeout, linger=args.linger,
                    max_size=args.max_bytes, reorder_wait=args.reorder_wait)
    sink = FileSink(args.out, core)
    transport, proto = await loop.create_datagram_endpoint(
        lambda: CoreProtocol(core, after=sink), sock=sock)
    try:
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([proto.ended, stopped], return_when=asyncio.FIRST_COMPLETED)
        if not proto.ended.done():
            core._fail('stopped by a signal')
        return report(core, sink, log)
    finally:
        sink.close()
        transport.abort()


async def run(args, log):
    """Serve transfers; return the exit status."""
    stop = stop_event_on_signals(asyncio.get_running_loop())
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]
    log.write('ready', flush=True, port=port)
    while True:
        ok = await one(args, log, sock, stop)
        if args.once or stop.is_set():
            return 0 if ok else 1
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, port))


def main(argv=None):
    """Run the receiver."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return asyncio.run(run(args, JsonLog()))
    except OSError as e:
        sys.stderr.write('rudp.recv: cannot listen on %s:%d: %s\n' % (
            args.host, args.port, e.strerror or e))
        return 1


def simulate(env, argv):
    """Run this receiver in the simulator (`repronet.sim`): the same core and file handling,
    records in virtual time (`sim_driver.SimReceive`)."""
    SimReceive(env, parse_args(argv), FileSink, report).start()


if __name__ == '__main__':
    sys.exit(main())
