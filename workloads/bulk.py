"""Bulk TCP transfer in the simulator: the goodput iperf3 measures in emulation.

iperf3 is a real program and cannot run on the simulation backend (``repronet.sim``), so the
fidelity experiment's simulated goodput points use this node program instead; the emulation
keeps iperf3. It measures what iperf3's TCP test reports as ``sum_received``: the bytes the
receiver got over the receiver's seconds, while the sender writes as fast as the connection
takes data for ``--duration`` seconds.

``server``: listens on ``--port`` for one transfer (one connection, as the experiment
makes), counts the bytes that arrive and, when the sender's FIN arrives (every byte
delivered), logs ``{"event": "done", "bytes", "seconds", "first_byte_s"}`` (seconds from the
connection's arrival to the FIN) and exits 0, like ``iperf3 -s -1``.

``client``: connects to ``--dst``:``--port`` and for ``--duration`` seconds from the
connection's start keeps bytes queued on it, topped up every ``TICK`` seconds to twice what
the stack took in the last tick (at least one 64 KiB write), so the simulated stack never
waits for the application and the queue stays a few ticks long at any rate; then it closes
the connection (what was queued is still delivered: a tail of a few ticks plus the window,
counted in the server's bytes and seconds alike). When stopped it logs ``{"event":
"summary", "bytes", "duration_s", "retransmits"}``. A refused or reset connection is one
line on stderr and exit 1.

It runs only through ``simulate(env, argv)``; as a real process it refuses with one sentence
(exit 2): on real hosts, iperf3 measures the same thing.

    (simulation) python -m workloads.bulk server --port 5201
    (simulation) python -m workloads.bulk client --dst 10.0.0.2 --port 5201 --duration 5
"""

import sys

from nodes.dht.common import UsageParser

CHUNK = bytes(65536)        # one object written again and again: no copy per write
TICK = 0.001                # seconds between top-ups


def build_parser():
    """Return the command-line parser of both modes."""
    parser = UsageParser('bulk', description=__doc__.split('\n\n')[0])
    sub = parser.add_subparsers(dest='mode', required=True)
    s = sub.add_parser('server', help='receive one transfer and log its goodput')
    s.add_argument('--port', type=int, required=True)
    c = sub.add_parser('client', help='send for --duration seconds')
    c.add_argument('--dst', required=True)
    c.add_argument('--port', type=int, required=True)
    c.add_argument('--duration', type=float, default=10.0, help='seconds of sending')
    return parser


def parse(argv):
    """Parse and check argv; bad arguments exit with status 2 and a message."""
    args = build_parser().parse_args(argv)
    if args.mode == 'client' and not args.duration > 0:
        build_parser().error('--duration must be more than 0 seconds')
    return args


class _Receiver:
    """The server's one transfer: bytes, and when they came."""

    def __init__(self, env):
        self.env = env
        self.started = self.first = None
        self.bytes = 0

    def connection_made(self, conn):
        self.started = self.env.now()

    def data_received(self, conn, data):
        if self.first is None:
            self.first = self.env.now()
        self.bytes += len(data)

    def connection_lost(self, conn, why):
        env = self.env
        if why is not None:
            env.error('workloads.bulk server: the transfer ended early: %s' % why)
            env.exit(1)
            return
        env.log.write('done', flush=True, bytes=self.bytes,
                      seconds=round(env.now() - self.started, 9),
                      first_byte_s=None if self.first is None
                      else round(self.first - self.started, 9))
        env.exit(0)


class _Sender:
    """The client's connection: keep it fed for the duration, then close it."""

    def __init__(self, env, duration):
        self.env, self.duration = env, duration
        self.conn = self.started = None
        self.bytes = self.mark = 0              # written; taken by the stack at the last tick

    def connection_made(self, conn):
        self.conn, self.started = conn, self.env.now()
        self.feed()

    def feed(self):
        """Top the connection's queue up to BACKLOG; close it once the duration is over."""
        if self.conn is None:
            return
        if self.env.now() >= self.started + self.duration:
            self.conn.close()
            return
        queued = self.conn.queued               # bytes written that the stack has not sent
        taken, self.mark = self.bytes - queued - self.mark, self.bytes - queued
        more = max(len(CHUNK), 2 * taken) - queued
        while more > 0:
            piece = CHUNK if more >= len(CHUNK) else CHUNK[:more]
            self.conn.send(piece)
            self.bytes += len(piece)
            more -= len(piece)
        self.env.call_at(min(self.env.now() + TICK, self.started + self.duration), self.feed)

    def data_received(self, conn, data):
        pass                                    # the server sends nothing

    def connection_lost(self, conn, why):
        self.conn = None
        if why is not None:
            self.env.error('workloads.bulk client: %s' % why)
            self.env.exit(1)

    def stopped(self):
        """SIGTERM: log what was sent and end."""
        conn = self.conn
        self.env.log.write('summary', flush=True, bytes=self.bytes,
                           duration_s=self.duration,
                           retransmits=getattr(conn, 'retransmits', None))
        self.env.exit(0)


def simulate(env, argv):
    """Run server or client on the simulated host's stack, in virtual time."""
    args = parse(argv)
    if args.mode == 'server':
        receiver = _Receiver(env)
        env.listen(args.port, lambda conn: receiver)
        env.ready(port=args.port)
        return
    sender = _Sender(env, args.duration)
    env.on_stop(sender.stopped)
    env.connect(args.dst, args.port, sender)


def main(argv=None):
    """Refuse to run as a real process (one sentence, exit 2)."""
    parse(argv)
    print('workloads.bulk runs only in simulation (--backend sim); on real hosts iperf3 '
          'measures TCP goodput', file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main())
