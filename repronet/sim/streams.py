"""TCP-like streams over the simulated network: one end of a connection (``Conn``).

A host's sockets (listeners, connections, datagram ports) are ``repronet.sim.stack``.

The stream model, stated so users know what it leaves out (DESIGN.md repeats it):

* connect: a SYN (one 74-byte packet) and a SYN-ACK; a host that is down or has no listener
  answers with a reset (``connection refused``); a lost SYN is sent again after 1, 2, 4 ...
  seconds (Linux's initial timeout and backoff), six times at most, and so is the SYN when
  the SYN-ACK was lost (the server answers the repeated SYN with its SYN-ACK again). The
  client's application hears ``connection_made`` before any data the server wrote.
* data: each write is queued; the sender keeps at most a window of bytes unacknowledged and
  sends what is queued as trains of up to 64 KiB (``Network.send``), each packet carrying
  up to the connection's MSS (1,448 bytes unless the client clamps it, ``connect(mss=)``,
  as ``TCP_MAXSEG`` does) plus 66 bytes of Ethernet, IP and TCP headers (timestamps on). The
  receiver hands bytes to the application in order. An acknowledgement reaches the sender
  one propagation delay after the train arrived (no queueing, never lost, no bandwidth):
  the window is ACK-clocked. The window is the path's bandwidth-delay product (its slowest
  link's rate times the round trip) plus two 64 KiB trains (so a train being forwarded
  hop by hop does not leave the link idle), at most 4 MiB and at most what the
  smallest queue on the path holds: what a well-tuned congestion control settles at with
  one flow, so the flow fills the path and keeps about 90 packets queued at the bottleneck.
* clamped MSS: both ends use the client's; trains and window are whole segments, so one
  write of the MSS (Nagle off) is one packet paying 66 header bytes on every link.
* send buffer (for a sender that blocks as on a real socket): ``send_space()`` of twice the
  window (``tcp_sndbuf_expand``), ``when_writable(fn)`` once at most 2/3 full.
* loss: the packets a train lost are sent again when the duplicate ACKs of at least three
  that arrived reach the sender (fast retransmit), else (and a lost FIN) after the RTO
  (200 ms plus the path's round trip, doubled per loss of the same train, at most 60 s).
  The window never shrinks for a loss: a loss costs its repair's time, nothing more.
* left out: slow start and congestion control (a flow sends its window at once and never
  shrinks it, so several flows through one bottleneck share it by FIFO interleaving, not by
  AIMD, and enough of them overflow its queue), delayed and lost
  ACKs, Nagle (every node here sets TCP_NODELAY), receive-buffer flow control, and the
  kernel's per-packet CPU cost.
* close: ``close()`` delivers what was written, then the peer's application sees the
  connection end; ``abort()`` (and a process that is killed) sends a reset and drops what
  was in flight.
"""

import collections
import operator

from repronet.sim.stream_sizes import (  # noqa: F401 (streams.MSS etc. for their users)
    MSS, RETRIES, RTO_MAX, RTO_MIN, SNDBUF_WINDOWS, SYN_BYTES, SYN_RETRIES, SYN_TIMEOUT,
    TCP_OVERHEAD, TRAIN_BYTES, WINDOW, _packets, train_bytes, window)


RESET = 'connection reset by peer'     # what an end hears when the other aborted or was closed


class _Train(tuple):
    """One transmission of a data train, (conn, seq, data, losses, sent_at, packets), as
    Network.send_train calls it back: it arrived (the peer takes it), was lost (resent
    after the RTO) or partly lost (repaired). A tuple, built in C: a class's __init__ runs
    in a Python frame CPython 3.11 does not inline (870 instructions more a write)."""

    __slots__ = ()

    packets = property(operator.itemgetter(5), doc='Packets of the whole train.')

    def arrived(self, t):
        conn = self[0]
        conn.peer._arrive(conn, self[1], self[2])

    def lost(self, t):
        conn, seq, data, losses, sent_at, _ = self
        conn._retransmit_later(seq, data, losses, sent_at)

    def partial(self, t, missing):
        conn, seq, data, losses, sent_at, packets = self
        conn._repair(seq, data, losses, sent_at, t, packets - missing, missing)


class Conn:
    """One end of a simulated TCP connection."""

    def __init__(self, stack, protocol, remote, mss=MSS):
        self.stack, self.protocol, self.remote = stack, protocol, remote
        self.engine = stack.engine
        self.mss, self.train = mss, train_bytes(mss)     # payload per packet, per train
        self.peer = None            # the other end, once the SYN reached a listener
        self.state = 'connecting'   # connecting | open | closing | closed
        self.out = collections.deque()
        self.queued = 0             # bytes written, not yet sent
        self.inflight = 0           # bytes sent, not yet acknowledged
        self.acks = collections.deque()     # (time an ACK reaches this end, bytes)
        self.wake = None            # the event that takes in ACKs when nothing else will
        self.back = 0.0             # one-way delay from this end to the other (its ACKs)
        self.window = WINDOW
        self.close_pending = False
        self.writer = None          # when_writable's fn, until the buffer has room
        self.next_seq = 0           # next train to send
        self.expect = 0             # next train to deliver (receiving side)
        self.early = {}             # seq -> data arrived out of order
        self.path = None            # the route to the peer's host, once a train asked
        self.bytes_sent = self.bytes_received = self.retransmits = 0

    # -- the application's side ---------------------------------------------------------
    def send(self, data):
        """Queue bytes for the peer (ignored once closing or closed).

        A write to an open connection with nothing queued that fits in one train and in
        the window (after taking in the ACKs that arrived) is sent at once: what _pump
        would do with it, without queueing it, looping and checking for a wake-up it
        cannot need. That is every write of a DHT request and reply; the short path was
        a tenth of a train's cost. Once the connection knows its path, it also does what
        _transmit does for a new train without _transmit's checks (an open connection
        has its peer; a first sending has no losses and sends the whole train) and starts
        it at the first port itself (``Network.forward``): two Python calls less per
        write (tests/test_sim_streams_send.py compares it with the queue-and-pump path
        on random writes)."""
        state = self.state
        if not data or state != 'open' and state != 'connecting':
            return
        if data.__class__ is not bytes:
            data = bytes(data)
        if state == 'open' and not self.out and self.writer is None:
            acks, now = self.acks, self.engine.now          # _pump's intake of ACKs
            while acks and acks[0][0] <= now:
                self.inflight -= acks.popleft()[1]
            n = len(data)
            if n <= self.train and n <= self.window - self.inflight:
                self.inflight += n
                seq, self.next_seq = self.next_seq, self.next_seq + 1
                path = self.path
                if not path:                # not known yet (or no route): _transmit's
                    self._transmit(seq, data, 0)
                    return
                packets = -(-n // self.mss)
                self.bytes_sent += n
                self.stack.net.forward(path, 0, now, now, n + packets * TCP_OVERHEAD,
                                       packets, _Train((self, seq, data, 0, now, packets)))
                return
        self.out.append(data)
        self.queued += len(data)
        if state == 'open':
            self._pump()

    def send_space(self):
        """Bytes the send buffer (SNDBUF_WINDOWS windows, queued and unacknowledged) still
        takes; taken-in ACKs only (see _pump)."""
        return max(0, SNDBUF_WINDOWS * self.window - self.queued - self.inflight)

    def when_writable(self, fn):
        """Call fn() once the send buffer is at most two thirds full (now, if it is): fn
        runs inside the stack, so it should only schedule the writing (env.call_soon)."""
        self.writer = fn
        self._check_writable()

    def _check_writable(self):
        fn = self.writer
        if fn is not None and self.state in ('open', 'connecting') and \
                3 * (self.queued + self.inflight) <= 2 * SNDBUF_WINDOWS * self.window:
            self.writer = None
            fn()

    def close(self):
        """Send what is queued, then end the connection (the peer sees it end)."""
        if self.state in ('closing', 'closed'):
            return
        if self.state == 'connecting':
            self.close_pending = True       # once connected: send what is queued, then end
            return
        self.state = 'closing'
        self._maybe_fin()

    def abort(self, why=RESET):
        """End the connection now (this end's protocol hears nothing more); the peer
        hears ``why`` one path delay later."""
        if self.state == 'closed':
            return
        self.state = 'closed'
        self.protocol = self.writer = None
        self.stack.conns.discard(self)
        self.out.clear()
        peer = self.peer
        if peer is not None and peer.state != 'closed':
            self._tell_lost(peer, why)

    # -- handshake ----------------------------------------------------------------------
    def _syn(self, attempt):
        """Send the SYN (again); after SYN_RETRIES, give up."""
        if self.state != 'connecting':
            return
        if attempt > SYN_RETRIES:
            self._lost('connection timed out')
            return
        net, ip, port = self.stack.net, self.remote[0], self.remote[1]
        dst = net.stack_by_ip.get(ip)
        self.stack.engine.after(SYN_TIMEOUT * 2 ** attempt, self._syn_timeout, attempt)
        if dst is None or not self.stack.up:
            return
        net.send(self.stack.host, dst.host, SYN_BYTES, 1,
                 lambda t: self._syn_arrived(dst, port))

    def _syn_timeout(self, attempt):
        if self.state == 'connecting':      # no SYN-ACK yet: the SYN or the SYN-ACK was lost
            self._syn(attempt + 1)

    def _syn_arrived(self, dst, port):
        if self.state != 'connecting':
            return
        if self.peer is not None:           # a repeated SYN: the SYN-ACK was lost, send it again
            self.stack.net.send(dst.host, self.stack.host, SYN_BYTES, 1, self._established)
            return
        accept = dst.listeners.get(port) if dst.up else None
        if accept is None:
            self.stack.net.send(dst.host, self.stack.host, 54, 1,
                                lambda t: self._lost('connection refused'))
            return
        server = Conn(dst, None, (self.stack.ip, self.stack._ephemeral), self.mss)
        server.peer, server.state, self.peer = self, 'open', server
        server.window = window(self.stack.net, dst.host, self.stack.host, server.mss)
        server.back = self.stack.net.one_way(dst.host, self.stack.host) or 0.0
        dst.conns.add(server)
        server.protocol = accept(server)
        server.protocol.connection_made(server)
        self.stack.net.send(dst.host, self.stack.host, SYN_BYTES, 1, self._established)

    def _established(self, t):
        if self.state != 'connecting':
            return
        self.state = 'open'
        self.window = window(self.stack.net, self.stack.host, self.peer.stack.host, self.mss)
        self.back = self.stack.net.one_way(self.stack.host, self.peer.stack.host) or 0.0
        self.protocol.connection_made(self)
        self._arrive_in_order()
        self._pump()
        if self.close_pending:
            self.close()

    # -- data ---------------------------------------------------------------------------
    def _pump(self):
        """Take in the ACKs that have arrived, send queued bytes while the window has
        room; if still waiting for ACKs (window full, or closing), wake at the next one."""
        acks, now = self.acks, self.engine.now
        while acks and acks[0][0] <= now:
            self.inflight -= acks.popleft()[1]
        out, window, state = self.out, self.window, self.state
        sending = state == 'open' or state == 'closing'     # _transmit changes neither
        while out and self.inflight < window and sending:
            room = window - self.inflight
            if room > self.train:
                room = self.train
            if len(out) == 1 and len(out[0]) <= room:       # one write, as it is
                data = out.popleft()
                size = len(data)
            else:
                data, size = self._take(room)
            self.queued -= size
            self.inflight += size
            seq, self.next_seq = self.next_seq, self.next_seq + 1
            self._transmit(seq, data, 0)
        if state == 'closing':
            self._maybe_fin()
        if self.writer is not None:
            self._check_writable()
        if acks and self.wake is None and (out and self.state == 'open' or
                                           self.state == 'closing'):
            self.wake = self.engine.at(acks[0][0], self._woken)

    def _take(self, room):
        """(bytes, their length): the next train of at most room bytes of what is queued."""
        parts, size = [], 0
        while self.out and size < room:
            chunk = self.out[0]
            take = min(len(chunk), room - size)
            parts.append(chunk[:take])
            if take == len(chunk):
                self.out.popleft()
            else:
                self.out[0] = chunk[take:]
            size += take
        return b''.join(parts), size

    def _woken(self):
        self.wake = None
        self._pump()

    def _transmit(self, seq, data, losses, packets=None):
        """Send train seq (again after losses drops); packets: only that many of it (a
        repair of the packets a partial arrival missed)."""
        if self.state == 'closed' or self.peer is None:
            return
        if losses > RETRIES:
            self._lost('connection timed out')
            return
        n, mss = len(data), self.mss
        whole = _packets(n, mss)
        packets = whole if packets is None else packets
        size = n if packets == whole else min(n, packets * mss)
        self.bytes_sent += size
        net, path = self.stack.net, self.path
        if path is None:            # routes never change: the network keeps them all
            path = self.path = net.route(self.stack.host, self.peer.stack.host)
        net.send_path(path, size + packets * TCP_OVERHEAD,
                      _Train((self, seq, data, losses, self.engine.now, packets)))

    def _repair(self, seq, data, losses, sent_at, t, arrived, missing):
        """Some packets of train seq arrived at time t: resend the missing ones, after one
        round trip when at least three arrived (duplicate ACKs: fast retransmit), else
        after the retransmission timeout."""
        self.retransmits += 1
        if arrived >= 3:
            back = self.stack.net.one_way(self.peer.stack.host, self.stack.host) or 0.0
            self.stack.engine.at(t + back, self._transmit, seq, data, losses + 1, missing)
        else:
            self._retransmit_later(seq, data, losses, sent_at, count=False,
                                   send=lambda s, d, n: self._transmit(s, d, n, missing))

    def _retransmit_later(self, seq, data, losses, sent_at, send=None, count=True):
        """Call send (default: _transmit) for train seq one RTO after it was sent."""
        net = self.stack.net
        rtt = 2 * (net.one_way(self.stack.host, self.peer.stack.host) or 0.0)
        rto = min(RTO_MAX, (RTO_MIN + rtt) * 2 ** losses)
        self.retransmits += count
        self.stack.engine.at(sent_at + rto, send or self._transmit, seq, data, losses + 1)

    def _arrive(self, sender, seq, data):
        """A train from sender arrived at this end: deliver in order, acknowledge. At an
        end that is closed the data is answered with a reset."""
        if self.state == 'closed':
            if sender.state != 'closed':
                self._tell_lost(sender)
            return
        # The ACK reaches the sender one path delay from now; the sender takes it in when
        # it next sends or is woken for it (no event per ACK: most never matter).
        n = len(data)
        sender.acks.append((self.engine.now + self.back, n))
        if sender.wake is None and (sender.out or sender.state == 'closing'):
            sender._pump()
        protocol = self.protocol
        if seq == self.expect and not self.early and protocol is not None \
                and self.state != 'connecting':     # in order, nothing waiting: hand it on
            self.expect += 1
            self.bytes_received += n
            protocol.data_received(self, data)
            return
        if seq < self.expect or seq in self.early:
            return
        self.early[seq] = data
        self._arrive_in_order()

    def _tell_lost(self, other, why=RESET):
        """The other end loses the connection (``why``) one path delay from now: this end
        was aborted, or data reached it closed (a reset). Its own method, not a lambda in
        _arrive or abort: a lambda over a local makes a closure cell on every call."""
        self._control(other, lambda t: other._lost(why))

    def _arrive_in_order(self):
        """Hand the application every train that is next in order (None is the FIN); not
        before connection_made (a server may write before its SYN-ACK has arrived)."""
        while self.expect in self.early and self.protocol is not None \
                and self.state != 'connecting':
            chunk = self.early.pop(self.expect)
            self.expect += 1
            if chunk is None:
                self._deliver('fin', None)
                return
            self.bytes_received += len(chunk)
            self._deliver('data', chunk)

    def _deliver(self, kind, data):
        if self.protocol is None:
            return
        if kind == 'data':
            self.protocol.data_received(self, data)
        else:
            self._lost(data)

    def _maybe_fin(self):
        """Once closing with nothing queued, send the FIN as the stream's last train."""
        if self.state != 'closing' or self.out or self.inflight or self.peer is None:
            return
        self.state = 'closed'
        self.stack.conns.discard(self)
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        self._fin(seq, None, 0)

    def _fin(self, seq, _, losses):
        """Send the FIN, train seq (again after losses drops, unless the peer has ended)."""
        peer, sent_at = self.peer, self.stack.engine.now
        if peer.state == 'closed':
            return
        self.stack.net.send(self.stack.host, peer.stack.host, TCP_OVERHEAD, 1,
                            lambda t: peer._arrive_fin(seq),
                            lambda t: self._retransmit_later(seq, None, losses, sent_at,
                                                             self._fin))

    def _arrive_fin(self, seq):
        if self.state == 'closed':
            return
        self.early[seq] = None
        self._arrive_in_order()

    def _control(self, other, fn):
        """Deliver a control signal (ACK, reset) to the other end after the path delay."""
        net = self.stack.net
        delay = net.one_way(self.stack.host, other.stack.host)
        if delay is not None:
            self.stack.engine.after(delay, fn, None)

    def _lost(self, why):
        """The connection ended (why None: the peer closed it); tell the protocol once."""
        protocol, self.protocol = self.protocol, None
        self.state = 'closed'
        self.stack.conns.discard(self)
        if protocol is not None:
            protocol.connection_lost(self, why)
