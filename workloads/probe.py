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

    python -m workloads.probe reflect --port 9000
    python -m workloads.probe send --dst 10.0.0.2 --port 9000 --count 20000 --interval 0.0002
"""

import argparse
import errno
import json
import select
import socket
import struct
import sys
import time

DATA = b'RNP1'
END = b'RNPE'
HEADER = struct.Struct('!4sIIQ')   # magic, stream, seq (END: count sent), send time ns
END_COPIES = 10
MAX_SIZE = 65507                    # largest UDP payload over IPv4
TRANSIENT = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS, errno.ECONNREFUSED,
                       errno.EHOSTUNREACH, errno.ENETUNREACH})


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


def reflect(args):
    """Echo probes forever; report each stream's one-way counts at its end marker."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((args.bind, args.port))
    streams, malformed = {}, 0
    emit({'event': 'ready', 'port': sock.getsockname()[1]})
    while True:
        data, peer = sock.recvfrom(65535)
        if len(data) < HEADER.size or data[:4] not in (DATA, END):
            malformed += 1
            if malformed in (1, 10, 100, 1000) or malformed % 10000 == 0:
                emit({'event': 'error', 'error': 'malformed datagram', 'from': peer[0],
                      'bytes': len(data), 'malformed': malformed})
            continue
        magic, stream, seq, _ = HEADER.unpack_from(data)
        counts = streams.setdefault(stream, StreamCount())
        if magic == DATA:
            counts.arrive(seq)
            sock.sendto(data, peer)
        elif not counts.reported:
            counts.reported = True
            emit({'event': 'stream', 'stream': stream, 'sent': seq,
                  'received': counts.received, 'duplicates': counts.duplicates,
                  'reordered': counts.reordered, 'from': peer[0]})
            counts.seen = set()


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
    echoed, reordered, highest, failed = set(), 0, -1, {}
    interval_ns = int(args.interval * 1e9)
    start = time.monotonic_ns()
    attempts = sent = 0
    out = []

    def drain():
        nonlocal reordered, highest
        while True:
            try:
                data = sock.recv(65535)
            except OSError as e:        # nothing left, or an ICMP error of an earlier send
                if e.errno in TRANSIENT:
                    return
                raise
            now = time.monotonic_ns()
            if len(data) < HEADER.size:
                continue
            magic, stream, seq, t_sent = HEADER.unpack_from(data)
            if magic != DATA or stream != args.stream or seq in echoed:
                continue
            echoed.add(seq)
            if seq < highest:
                reordered += 1
            highest = max(highest, seq)
            out.append('{"event": "echo", "seq": %d, "rtt_us": %.1f}\n'
                       % (seq, (now - t_sent) / 1000.0))

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
    while time.monotonic() < deadline and len(echoed) < sent:
        select.select([sock], [], [], 0.05)
        drain()
    sys.stdout.write(''.join(out))
    for _ in range(END_COPIES):
        try_send(sock, HEADER.pack(END, args.stream, sent, 0), {})
        time.sleep(0.002)
    emit({'event': 'summary', 'stream': args.stream, 'sent': sent, 'echoed': len(echoed),
          'reordered_echoes': reordered, 'send_failed': attempts - sent,
          'send_failed_errors': failed,
          'duration_s': round((time.monotonic_ns() - start) / 1e9, 3)})


def build_parser():
    """Return the command-line parser of both modes."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
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


def main(argv=None):
    """Run one mode; bad arguments exit with status 2 and a message."""
    args = build_parser().parse_args(argv)
    if args.mode == 'send' and (args.count < 1 or args.interval < 0 or
                                not 0 <= args.size <= MAX_SIZE):
        build_parser().error('--count must be >= 1, --interval >= 0 and --size 0..%d'
                             % MAX_SIZE)
    try:
        (reflect if args.mode == 'reflect' else send)(args)
    except KeyboardInterrupt:
        return 0
    except OSError as e:
        print('workloads.probe %s: %s' % (args.mode, e), file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
