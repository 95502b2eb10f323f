"""One simulated host's sockets: listeners, connections and datagram ports (``Stack``).

Connections are ``repronet.sim.streams.Conn`` (the stream model is stated there). A
datagram (``sendto``) is one train of ceil(len / 1472) packets plus 42 header bytes each:
delivered once, or lost, possibly reordered by jitter.
"""

import collections

from repronet.sim.streams import MSS, Conn, _packets

UDP_PAYLOAD = 1472
UDP_OVERHEAD = 42           # Ethernet 14 + IPv4 20 + UDP 8


class Stack:
    """One host's sockets: listeners, connections, datagram ports."""

    def __init__(self, network, host, ip):
        self.net, self.engine = network, network.engine
        self.host, self.ip = host, ip
        self.listeners = {}         # port -> accept(conn) returning a protocol
        self.udp = {}               # port -> datagram_received(data, (ip, port))
        self.conns = set()
        self.up = True
        self.counters = collections.Counter()
        self._ephemeral = 32768
        network.stack_by_ip[ip] = self

    def listen(self, port, accept):
        """accept(conn) is called per new connection and returns its protocol (an object
        with connection_made(conn), data_received(conn, data), connection_lost(conn, why))."""
        if port in self.listeners:
            raise OSError('%s:%d: address already in use' % (self.ip, port))
        self.listeners[port] = accept

    def unlisten(self, port):
        """Stop accepting on port (open connections stay)."""
        self.listeners.pop(port, None)

    def connect(self, ip, port, protocol, mss=None):
        """Open a connection to ip:port; protocol hears connection_made or connection_lost.
        mss: the most payload per segment this client asks for (TCP_MAXSEG), at most MSS."""
        self._ephemeral += 1
        conn = Conn(self, protocol, (ip, port), MSS if mss is None else max(1, min(MSS, mss)))
        self.conns.add(conn)
        conn._syn(0)
        return conn

    def bind_udp(self, port, received):
        """received(data, (ip, port)) for each datagram arriving on port; OSError if the
        port is taken (as bind() would say), never a silent takeover."""
        if port in self.udp:
            raise OSError('%s:%d: address already in use (UDP)' % (self.ip, port))
        self.udp[port] = received

    def sendto(self, data, addr, sport=0):
        """Send one datagram from this host's port sport to addr (ip, port)."""
        dst = self.net.stack_by_ip.get(addr[0])
        if dst is None or not self.up:
            return
        n = len(data)
        packets = _packets(n, UDP_PAYLOAD)
        self.counters['datagrams_sent'] += 1
        self.net.send(self.host, dst.host, n + packets * UDP_OVERHEAD, packets,
                      lambda t: dst._datagram(bytes(data), (self.ip, sport), addr[1]))

    def _datagram(self, data, source, port):
        """A datagram arrived: hand it to the bound port, if any and if up."""
        received = self.udp.get(port)
        if received is not None and self.up:
            received(data, source)

    def shutdown(self):
        """The host's processes died: reset every connection, close every port."""
        self.listeners.clear()
        self.udp.clear()
        for conn in list(self.conns):
            conn.abort()
