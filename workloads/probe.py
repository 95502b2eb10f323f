"""UDP probe: round-trip time, jitter, one-way loss and reordering between two hosts.

``ping`` is not enough for link-emulation fidelity: without netem the delay is applied after
the kernel stamps an incoming packet, so ping's default (kernel receive timestamp,
SO_TIMESTAMP) misses the hold at the receiver of the reply; and ping reports neither
reordering nor which direction lost a packet. This probe times with the application's own
monotonic clock, like any real client.

``reflect``: binds a UDP port, echoes every probe datagram back unchanged, and counts per
stream what arrived one way (received, duplicates, reordered = arrived after a higher
sequence number). When a stream's end marker arrives it prints
``{"event": "stream", ...}``. Malformed datagrams are counted and reported, never fatal.

``send``: sends ``--count`` datagrams of ``--size`` bytes every ``--interval`` seconds, each
carrying (stream, sequence number, send time in ns); logs one ``{"event": "echo", "seq",
"rtt_us"}`` line per echo, waits ``--drain`` seconds for late echoes, then sends the end marker
(10 times, so a lossy path still delivers it) and prints ``{"event": "summary", ...}``.

A send the kernel refuses (EAGAIN: the socket buffer is full; ENOBUFS; an ICMP error such as
ECONNREFUSED reported on the connected socket) put nothing on the link, so it is not the
emulated loss the benchmark measures: the summary counts it in ``send_failed`` (and per errno
in ``send_failed_errors``), never in ``sent``, and the stream goes on. Any other send error
(e.g. EMSGSIZE) is a mistake in the setup and ends the probe with one line and status 1.

``simulate(env, argv)`` runs either mode in the simulator (``repronet.sim``) with the same
flags and the same log records: the per-datagram decisions (``Reflector``, ``Echoes``) are
shared with the socket loops, only the clock, timers and datagrams come from ``env``. A
simulated kernel refuses no send, so ``send_failed`` is 0 there. The simulator gives no
ephemeral UDP ports, so the sender binds ``SIM_SOURCE_PORT`` + its stream number and a
reflector given ``--port 0`` binds ``SIM_SOURCE_PORT``.

    python -m workloads.probe reflect --port 9000
    python -m workloads.probe send --dst 10.0.0.2 --port 9000 --count 20000 --interval 0.0002
"""

import errno
import json
import select
import socket
import struct
import sys
import time

from nodes.dht.common import UsageParser

DATA = b'RNP1'
END = b'RNPE'
HEADER = struct.Struct('!4sIIQ')   # magic, stream, seq (END: count sent), send time ns
END_COPIES = 10
END_GAP = 0.002                     # seconds between the end marker's copies
MAX_SIZE = 65507                    # largest UDP payload over IPv4
TRANSIENT = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS, errno.ECONNREFUSED,
                       errno.EHOSTUNREACH, errno.ENETUNREACH})
SIM_SOURCE_PORT = 32768             # first port of Linux's ephemeral range
SIM_PORTS = 28232                   # its size (32768..60999)


def emit(record):
    """Write one JSON line with the current wall time to stdout."""
    record.setdefault('t', round(time.time(), 6))
    sys.stdout.write(json.dumps(record, sort_keys=True) + '\n')
    sys.stdout.flush()


class StreamCount:
    """One-way arrival counters of one stream at the reflector."""

    def __init__(self):
        self.received = 0
        self.duplicates = 0
        self.reordered = 0
        self.max_seq = -1
        self.seen = set()
        self.reported = False

    def arrive(self, seq):
        """Count one arrival of sequence number seq."""
        if seq in self.seen:
            self.duplicates += 1
            return
        self.seen.add(seq)
        self.received += 1
        if seq < self.max_seq:
            self.reordered += 1
        else:
            self.max_seq = seq


class Reflector:
    """What the reflector does with each datagram, whoever moves the bytes."""

    def __init__(self):
        self.streams, self.malformed = {}, 0

    def datagram(self, data, source):
        """Return (echo it back?, record to log or None) for data from address source."""
        if len(data) < HEADER.size or data[:4] not in (DATA, END):
            self.malformed += 1
            if self.malformed in (1, 10, 100, 1000) or self.malformed % 10000 == 0:
                return False, {'event': 'error', 'error': 'malformed datagram',
                               'from': source, 'bytes': len(data),
                               'malformed': self.malformed}
            return False, None
        magic, stream, seq, _ = HEADER.unpack_from(data)
        counts = self.streams.setdefault(stream, StreamCount())
        if magic == DATA:
            counts.arrive(seq)
            return True, None
        if counts.reported:
            return False, None
        counts.reported = True
        counts.seen = set()
        return False, {'event': 'stream', 'stream': stream, 'sent': seq,
                       'received': counts.received, 'duplicates': counts.duplicates,
                       'reordered': counts.reordered, 'from': source}


def reflect(args):
    """Echo probes forever; report each stream's one-way counts at its end marker."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((args.bind, args.port))
    reflector = Reflector()
    emit({'event': 'ready', 'port': sock.getsockname()[1]})
    while True:
        data, peer = sock.recvfrom(65535)
        echo, record = reflector.datagram(data, peer[0])
        if echo:
            sock.sendto(data, peer)
        if record is not None:
            emit(record)


class Echoes:
    """The sender's view of the echoes of its stream: which came back, and in what order."""

    def __init__(self, stream):
        self.stream = stream
        self.echoed, self.reordered, self.highest = set(), 0, -1

    def take(self, data, now_ns):
        """Return (seq, rtt in us) for a first echo of this stream, else None."""
        if len(data) < HEADER.size:
            return None
        magic, stream, seq, t_sent = HEADER.unpack_from(data)
        if magic != DATA or stream != self.stream or seq in self.echoed:
            return None
        self.echoed.add(seq)
        if seq < self.highest:
            self.reordered += 1
        self.highest = max(self.highest, seq)
        return seq, (now_ns - t_sent) / 1000.0

    def summary(self, sent, attempts, failed, seconds):
        """The summary record's fields (the event and the time are the caller's)."""
        return {'stream': self.stream, 'sent': sent, 'echoed': len(self.echoed),
                'reordered_echoes': self.reordered, 'send_failed': attempts - sent,
                'send_failed_errors': failed, 'duration_s': round(seconds, 3)}


def try_send(sock, data, failed):
    """Send one datagram; True if the kernel took it, else count its errno in failed."""
    try:
        sock.send(data)
        return True
    except OSError as e:
        if e.errno not in TRANSIENT:
            raise
        name = errno.errorcode.get(e.errno, str(e.errno))
        failed[name] = failed.get(name, 0) + 1
        return False


def send(args):
    """Send the probe stream, log every echo, then the end marker and a summary."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.connect((args.dst, args.port))
    sock.setblocking(False)
    pad = b'\0' * max(0, args.size - HEADER.size)
    echoes, failed = Echoes(args.stream), {}
    interval_ns = int(args.interval * 1e9)
    start = time.monotonic_ns()
    attempts = sent = 0
    out = []

    def drain():
        while True:
            try:
                data = sock.recv(65535)
            except OSError as e:        # nothing left, or an ICMP error of an earlier send
                if e.errno in TRANSIENT:
                    return
                raise
            got = echoes.take(data, time.monotonic_ns())
            if got is not None:
                out.append('{"event": "echo", "seq": %d, "rtt_us": %.1f}\n' % got)

    while attempts < args.count:
        now = time.monotonic_ns()
        due = start + attempts * interval_ns
        if now >= due:
            packet = HEADER.pack(DATA, args.stream, attempts, time.monotonic_ns()) + pad
            sent += try_send(sock, packet, failed)
            attempts += 1
            continue
        select.select([sock], [], [], (due - now) / 1e9)
        drain()
    deadline = time.monotonic() + args.drain
    while time.monotonic() < deadline and len(echoes.echoed) < sent:
        select.select([sock], [], [], 0.05)
        drain()
    sys.stdout.write(''.join(out))
    for _ in range(END_COPIES):
        try_send(sock, HEADER.pack(END, args.stream, sent, 0), {})
        time.sleep(END_GAP)
    emit({'event': 'summary', **echoes.summary(
        sent, attempts, failed, (time.monotonic_ns() - start) / 1e9)})


def build_parser():
    """Return the command-line parser of both modes."""
    parser = UsageParser('probe', description=__doc__.split('\n\n')[0])
    sub = parser.add_subparsers(dest='mode', required=True)
    r = sub.add_parser('reflect', help='echo probes and count one-way arrivals')
    r.add_argument('--port', type=int, required=True, help='UDP port (0: any free port)')
    r.add_argument('--bind', default='0.0.0.0')
    s = sub.add_parser('send', help='send a probe stream and time the echoes')
    s.add_argument('--dst', required=True)
    s.add_argument('--port', type=int, required=True)
    s.add_argument('--count', type=int, default=1000)
    s.add_argument('--interval', type=float, default=0.01, help='seconds between probes')
    s.add_argument('--size', type=int, default=64,
                   help='UDP payload bytes (%d..%d)' % (HEADER.size, MAX_SIZE))
    s.add_argument('--stream', type=int, default=1)
    s.add_argument('--drain', type=float, default=2.0, help='seconds to wait for late echoes')
    return parser


def parse(argv):
    """Parse and check argv; bad arguments exit with status 2 and a message."""
    parser = build_parser()
    args = parser.parse_args(argv)
    parser.bounded(args, 'port', 0 if args.mode == 'reflect' else 1, 65535)
    if args.mode == 'send':
        if args.count < 1 or args.interval < 0 or not 0 <= args.size <= MAX_SIZE:
            parser.error('--count must be >= 1, --interval >= 0 and --size 0..%d' % MAX_SIZE)
        parser.bounded(args, 'stream', 0, 0xFFFFFFFF)      # HEADER's stream field
        parser.bounded(args, 'drain', 0, 3600)
    return args


def main(argv=None):
    """Run one mode; bad arguments exit with status 2 and a message."""
    args = parse(argv)
    try:
        (reflect if args.mode == 'reflect' else send)(args)
    except KeyboardInterrupt:
        return 0
    except OSError as e:
        print('workloads.probe %s: %s' % (args.mode, e), file=sys.stderr)
        return 1
    return 0


# -- the same two modes in the simulator (repronet.sim: env is the node's SimProcess) ------
def simulate(env, argv):
    """Run reflect or send on the simulated host's stack, in virtual time."""
    args = parse(argv)
    (_simulate_reflect if args.mode == 'reflect' else _simulate_send)(env, args)


def _ns(seconds):
    """Virtual seconds as the integer nanoseconds a probe carries."""
    return int(round(seconds * 1e9))


def _simulate_reflect(env, args):
    """Echo probes from the bound port; log what the socket loop logs."""
    port = args.port or SIM_SOURCE_PORT
    reflector = Reflector()

    def received(data, source):
        echo, record = reflector.datagram(data, source[0])
        if echo:
            env.sendto(data, source, port)
        if record is not None:
            env.log.write(record.pop('event'), flush=True, **record)
    env.bind_udp(port, received)
    env.ready(port=port)


def _simulate_send(env, args):
    """Send the stream on timers, log echoes as they come, then end marker and summary."""
    sport = SIM_SOURCE_PORT + args.stream % SIM_PORTS
    dst = (args.dst, args.port)
    pad = b'\0' * max(0, args.size - HEADER.size)
    echoes, start = Echoes(args.stream), env.now()
    # drain: the timer that ends the wait for echoes; over: echoes after it are not read
    state = {'sent': 0, 'drain': None, 'over': False}

    def received(data, source):
        got = None if state['over'] else echoes.take(data, _ns(env.now()))
        if got is None:
            return
        env.log.write('echo', seq=got[0], rtt_us=round(got[1], 1))
        if state['drain'] is not None and len(echoes.echoed) >= state['sent']:
            state['drain'].cancel()
            finish()

    def probe(seq):
        env.sendto(HEADER.pack(DATA, args.stream, seq, _ns(env.now())) + pad, dst, sport)
        state['sent'] += 1
        if seq + 1 < args.count:
            env.call_at(start + (seq + 1) * args.interval, probe, seq + 1)
        elif len(echoes.echoed) >= state['sent']:
            finish()
        else:
            state['drain'] = env.call_at(env.now() + args.drain, finish)

    def finish():
        state['drain'], state['over'] = None, True
        marker = HEADER.pack(END, args.stream, state['sent'], 0)
        for k in range(END_COPIES):
            env.call_at(env.now() + k * END_GAP, env.sendto, marker, dst, sport)
        env.call_at(env.now() + END_COPIES * END_GAP, summary)

    def summary():
        env.log.write('summary', **echoes.summary(state['sent'], state['sent'], {},
                                                   env.now() - start))
        env.exit(0)
    env.bind_udp(sport, received)
    env.call_at(start, probe, 0)


if __name__ == '__main__':
    sys.exit(main())
