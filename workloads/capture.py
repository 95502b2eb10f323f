"""Count what the DHT protocol puts on the wire: TCP segments, bytes and application messages.

The seed claims that batched registration needs K messages per peer (one per index server)
where unbatched registration needs N (one per file). Client-side counters can only say what
the client meant to send; this module checks it on the wire, as a capture on each index
server's interface.

* Capture: a scapy ``L2ListenSocket`` (an ``AF_PACKET`` socket) on one interface with a BPF
  filter ``tcp port PORT`` attached in the kernel, so only DHT index traffic reaches Python.
  The socket's receive buffer is made large and, on SIGTERM, drained before the summary, so
  a busy moment delays counting instead of losing packets; the kernel's own drop counter
  (``PACKET_STATISTICS``) is reported so a lossy capture is visible, never silent.
* Counting: :class:`WireCounter` takes raw Ethernet frames. IPv4/TCP headers are parsed with
  ``struct`` (cheap per packet); segments and frame bytes are counted per direction
  (``to_server``: destination port is the server's) and per client address.
* Messages: each direction of each flow is reassembled by TCP sequence number (out-of-order
  segments wait, retransmitted bytes are trimmed) and fed to the DHT codec's incremental
  ``Decoder`` (``nodes/dht/codec.py``), so frames split across segments or coalesced into
  one segment are counted exactly once. Message counts are kept by wire type name
  (REGISTER, SEARCH, ACK, ...) and per client; REGISTER/UNREGISTER also count the names
  they carry. A flow whose SYN was not seen is decoded from its first payload byte
  (``midstream_flows``); a hole that never fills is reported as ``gaps``.

``python -m workloads.capture --name cap-s1 --iface s1-eth0 --port 7000`` runs on a Mininet
host (in its namespace): JSON lines on stdout, ``{"event": "ready"}`` once the filter is
attached, ``{"event": "summary", ...}`` on SIGTERM. ``--pcap FILE`` counts a saved capture
instead (read with scapy), which is how the tests check the counting.
"""

import collections
import json
import signal
import socket
import struct
import sys
import time

from nodes.dht import codec
from nodes.dht.common import UsageParser

_ETH = struct.Struct('!6s6sH')
_TCP = struct.Struct('!HHIIBB')
_ETH_IPV4 = 0x0800
_ETH_VLAN = 0x8100
_SYN, _FIN, _RST = 0x02, 0x01, 0x04
_SOL_PACKET = 263
_SO_RCVBUFFORCE = 33                # Linux; the socket module lacks the name
_PACKET_STATISTICS = 6
_RCVBUF = 64 << 20
_DRAIN = 10.0                       # seconds of draining after SIGTERM, at most
_NAMES = {'FileHeader': 'FILE', 'Unregister': 'UNREGISTER'}


def message_name(msg):
    """Return the wire type name of a decoded message (REGISTER, ACK, ...)."""
    kind = type(msg).__name__
    return _NAMES.get(kind, kind.upper())


class _Stream:
    """One direction of one TCP flow: sequence-number reassembly into a Decoder."""

    __slots__ = ('next_seq', 'pending', 'decoder', 'midstream', 'messages',
                 'names', 'errors')

    def __init__(self):
        self.next_seq = None
        self.pending = {}
        self.decoder = codec.Decoder()
        self.midstream = False
        self.messages = collections.Counter()
        self.names = 0
        self.errors = 0

    def syn(self, seq):
        """Start the stream after a SYN with initial sequence number seq."""
        self.next_seq = (seq + 1) & 0xffffffff
        self.pending.clear()

    def data(self, seq, payload):
        """Take one segment's payload at sequence number seq."""
        if self.next_seq is None:
            self.next_seq = seq
            self.midstream = True
        offset = (seq - self.next_seq) & 0xffffffff
        if offset >= 0x80000000:                   # starts before next_seq
            overlap = (self.next_seq - seq) & 0xffffffff
            if overlap >= len(payload):
                return                             # a pure retransmission
            seq, payload = self.next_seq, payload[overlap:]
            offset = 0
        if offset:
            if len(payload) > len(self.pending.get(seq, b'')):
                self.pending[seq] = payload
            return
        self._feed(payload)
        while self.next_seq in self.pending:
            self._feed(self.pending.pop(self.next_seq))
        # Held segments now wholly or partly behind next_seq.
        for held in [s for s in self.pending
                     if (s - self.next_seq) & 0xffffffff >= 0x80000000]:
            self.data(held, self.pending.pop(held))

    def _feed(self, payload):
        """Decode in-order bytes and count what they carry."""
        self.next_seq = (self.next_seq + len(payload)) & 0xffffffff
        for item in self.decoder.feed(bytes(payload)):
            if isinstance(item, codec.Chunk):
                continue
            if isinstance(item, codec.ProtocolError):
                self.errors += 1
                continue
            self.messages[message_name(item)] += 1
            if isinstance(item, (codec.Register, codec.Unregister)):
                self.names += len(item.names)


def _empty_client():
    """Return the per-client counter record."""
    return {'segments_to': 0, 'bytes_to': 0, 'segments_from': 0,
            'bytes_from': 0, 'messages_to': collections.Counter(),
            'messages_from': collections.Counter(), 'names_to': 0}


class WireCounter:
    """Counts segments, bytes and DHT messages for traffic to and from one server port."""

    def __init__(self, port, decode=True):
        self.port = int(port)
        self.decode = decode        # False: file data, not DHT messages (sizes only)
        self.payload_sizes = collections.Counter()      # from the server, data only
        self.retransmits = 0
        self._seen = {}             # flow -> highest sequence end sent by the server
        self.directions = {d: {'segments': 0, 'bytes': 0, 'payload': 0}
                           for d in ('to_server', 'from_server')}
        self.clients = collections.defaultdict(_empty_client)
        self.streams = {}
        self.flows = set()
        self.ignored = 0
        self.first = None
        self.last = None

    def frame(self, data, ts=None):
        """Count one captured Ethernet frame (bytes)."""
        parsed = _parse(data)
        if parsed is None:
            self.ignored += 1
            return
        src, dst, sport, dport, seq, flags, payload = parsed
        if dport == self.port:
            direction, client, key = 'to_server', src, (src, sport, 'to')
            flow = (src, sport)
        elif sport == self.port:
            direction, client, key = 'from_server', dst, (dst, dport, 'from')
            flow = (dst, dport)
        else:
            self.ignored += 1
            return
        if ts is not None:
            self.first = ts if self.first is None else min(self.first, ts)
            self.last = ts if self.last is None else max(self.last, ts)
        self.flows.add(flow)
        d = self.directions[direction]
        d['segments'] += 1
        d['bytes'] += len(data)
        d['payload'] += len(payload)
        c = self.clients[client]
        suffix = 'to' if direction == 'to_server' else 'from'
        c['segments_' + suffix] += 1
        c['bytes_' + suffix] += len(data)
        if payload and direction == 'from_server':
            self._sent(flow, seq, len(payload))
        if not self.decode:
            return
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = _Stream()
        if flags & _SYN:
            stream.syn(seq)
        if payload:
            stream.data(seq, payload)

    def _sent(self, flow, seq, length):
        """Count a data segment's payload size; one that ends at or before what the
        flow already sent is a retransmission (wrap-around safe)."""
        self.payload_sizes[length] += 1
        end = (seq + length) & 0xffffffff
        top = self._seen.get(flow)
        behind = top is not None and (end == top or (end - top) & 0xffffffff >= 0x80000000)
        if behind:
            self.retransmits += 1
        else:
            self._seen[flow] = end

    def summary(self):
        """Return the JSON-ready totals."""
        clients = {}
        for addr in sorted(self.clients):
            c = dict(self.clients[addr])
            c['messages_to'] = collections.Counter()
            c['messages_from'] = collections.Counter()
            clients[addr] = c
        messages = collections.Counter()
        errors = gaps = midstream = 0
        for (addr, _port, way), s in sorted(self.streams.items()):
            c = clients[addr]
            c['messages_' + way].update(s.messages)
            if way == 'to':
                c['names_to'] += s.names
                messages.update(s.messages)
            errors += s.errors
            gaps += bool(s.pending)
            midstream += s.midstream
        for c in clients.values():
            c['messages_to'] = dict(sorted(c['messages_to'].items()))
            c['messages_from'] = dict(sorted(c['messages_from'].items()))
        return {'port': self.port, 'directions': self.directions,
                'segments': sum(self.payload_sizes.values()),
                'payload_sizes': {str(k): v for k, v in sorted(self.payload_sizes.items())},
                'bytes': self.directions['from_server']['payload'],
                'retransmits': self.retransmits,
                'clients': clients, 'messages_to_server': dict(sorted(messages.items())),
                'flows': len(self.flows), 'midstream_flows': midstream,
                'gaps': gaps, 'decode_errors': errors, 'ignored': self.ignored,
                'first': self.first, 'last': self.last}


def _parse(data):
    """Return (src, dst, sport, dport, seq, flags, payload) of an IPv4/TCP frame, or None."""
    if len(data) < 14:
        return None
    etype = _ETH.unpack_from(data)[2]
    off = 14
    if etype == _ETH_VLAN and len(data) >= 18:
        etype = struct.unpack_from('!H', data, 16)[0]
        off = 18
    if etype != _ETH_IPV4 or len(data) < off + 20:
        return None
    ihl = (data[off] & 0x0f) * 4
    total = struct.unpack_from('!H', data, off + 2)[0]
    if data[off] >> 4 != 4 or data[off + 9] != 6 or ihl < 20:
        return None
    src = socket.inet_ntoa(data[off + 12:off + 16])
    dst = socket.inet_ntoa(data[off + 16:off + 20])
    tcp = off + ihl
    if len(data) < tcp + 20:
        return None
    sport, dport, seq, _ack, doff, flags = _TCP.unpack_from(data, tcp)
    start = tcp + (doff >> 4) * 4
    end = min(off + total, len(data)) if total else len(data)
    return src, dst, sport, dport, seq, flags, memoryview(data)[start:end]


def _emit(record):
    """Print one JSON log line with the current time."""
    record = dict(t=round(time.time(), 6), **record)
    sys.stdout.write(json.dumps(record, sort_keys=True) + '\n')
    sys.stdout.flush()


def _kernel_stats(sock):
    """Return (packets, drops) from PACKET_STATISTICS (reading resets them)."""
    try:
        raw = sock.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, 8)
        return struct.unpack('II', raw)
    except OSError:
        return (0, 0)


def live(args):
    """Capture on an interface until SIGTERM, then drain and print the summary."""
    import select
    import scapy.layers.l2  # noqa: F401  (registers link types for the socket)
    from scapy.arch.linux import L2ListenSocket
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(time.monotonic()))
    signal.signal(signal.SIGINT, lambda *_: stop.append(time.monotonic()))
    listener = L2ListenSocket(iface=args.iface, filter='tcp port %d' % args.port)
    raw = listener.ins
    try:    # root may exceed net.core.rmem_max
        raw.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, _RCVBUF)
    except OSError:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
    counter = WireCounter(args.port, decode=args.decode == 'dht')
    _kernel_stats(raw)    # reset: counts from before the filter was attached
    kernel = [0, 0]
    _emit({'event': 'ready', 'name': args.name, 'iface': args.iface,
           'port': args.port})
    try:
        while True:
            try:
                readable = select.select([raw], [], [], 0.2)[0]
            except InterruptedError:
                readable = []
            if readable and not (stop and time.monotonic() > stop[0] + _DRAIN):
                _cls, data, ts = listener.recv_raw(1 << 18)
                if data is not None:
                    counter.frame(data, ts)
                continue
            # Idle: fold kernel counters; after a stop, an idle socket is drained.
            packets, drops = _kernel_stats(raw)
            kernel[0] += packets
            kernel[1] += drops
            if stop:
                break
    finally:
        listener.close()
    summary = counter.summary()
    summary.update(event='summary', name=args.name, iface=args.iface,
                   kernel_packets=kernel[0], kernel_drops=kernel[1])
    _emit(summary)


def offline(args):
    """Count a saved pcap file and print the summary."""
    from scapy.error import Scapy_Exception
    from scapy.utils import RawPcapReader
    counter = WireCounter(args.port, decode=args.decode == 'dht')
    try:
        reader = RawPcapReader(args.pcap)
    except Scapy_Exception as e:        # not a pcap file: a usage error like a missing one
        raise ValueError('--pcap %s: %s' % (args.pcap, e)) from None
    for data, meta in reader:
        ts = getattr(meta, 'sec', 0) + getattr(meta, 'usec', 0) / 1e6
        counter.frame(data, ts)
    summary = counter.summary()
    summary.update(event='summary', name=args.name, pcap=args.pcap)
    _emit(summary)


def main(argv=None):
    """Parse the command line and run a live or offline count."""
    parser = UsageParser(
        'capture',
        description='Count TCP segments, bytes and DHT messages to/from one '
        'server port, live on an interface or from a pcap file.')
    parser.add_argument('--name', default='capture', help='name in the log')
    parser.add_argument('--port', type=int, required=True,
                        help='the server port to count')
    parser.add_argument('--decode', choices=('dht', 'none'), default='dht',
                        help='decode DHT messages (default), or count segments and '
                        'payload sizes only (file transfers)')
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument('--iface', help='interface to capture on (live)')
    source.add_argument('--pcap', help='pcap file to count instead')
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536:
        parser.error('--port must be 1..65535, not %d' % args.port)
    try:
        if args.pcap:
            offline(args)
        else:
            live(args)
    except (OSError, ValueError) as e:
        print('capture: %s' % e, file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
