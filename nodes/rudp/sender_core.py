"""The sending side of the reliable-UDP protocol, without I/O (seed 004's blocks).

The seed (ADEN) sends a file in blocks of B datagrams and repairs each block before the
next: the receiver says which datagrams of the block are missing, the sender resends only
those (selective repeat), and so on until the block is whole. That is ``window=1``, the
default. With ``window=W`` up to W blocks are in flight at once, and with ``rate_mbps``
datagrams leave no faster than that rate (pacing), so throughput stops depending on the
round trip and a burst does not overrun the bottleneck's queue.

Rounds and timers. The last datagram of every (re)transmission round of a block carries
FLAG_LAST; the receiver answers it with an ACK naming what is missing. If that ACK (or the
flagged datagram) is lost, the block's timer fires after the retransmission timeout and
the sender asks with POLL. The timeout follows RFC 6298 (SRTT, RTTVAR, RTO = SRTT +
4 RTTVAR, at least ``min_rto``), sampled only from rounds sent once (Karn's rule), doubled
on every expiry. No progress for ``timeout`` seconds (META_OK, an ACK that shows a block
less incomplete, DONE) ends the transfer with an error: the receiver fell silent, or it
answers but nothing resent reaches it (say, a path that drops only large datagrams).

Why the doubling stops. Giving up is decided by time, not by a count of retries, so the
sender must keep asking until the end of that window: a wait between two probes (POLL or
META) is at most ``timeout / PROBES_PER_TIMEOUT`` (never less than the RTO), so the sender
gives up only after that many probes in a row went unanswered or changed nothing. An ACK
that shows progress starts that block's timer again from the connection's RTO (like TCP,
which resets its retry count once the peer acknowledges new data). Without the cap, one
block's doubled wait grew past the silence timeout at 28 % loss each way (25.6 s against
30 s), and the sender failed without having asked for the last 10.8 s of it.

The core is given the file's bytes as a buffer (the driver maps the file) and ``now``; it
returns datagrams and the next timer. It reads no clock, socket or random source: the
session id comes in from the driver.
"""

import collections

from nodes.rudp import wire

OPEN, SENDING, FINISHING, DONE, FAILED = 'open', 'sending', 'finishing', 'done', 'failed'
PROBES_PER_TIMEOUT = 8      # at least this many probes fall in every silence window


class _Block:
    """A block in flight: what is still missing, and its round's timer."""
    __slots__ = ('missing', 'deadline', 'round_end', 'rounds', 'rto', 'queued')

    def __init__(self, count):
        self.missing = set(range(count))
        self.queued = 0             # its datagrams (or poll) waiting in the send queue
        self.deadline = None        # ACK expected by then (set once the round is out)
        self.round_end = None
        self.rounds = 0
        self.rto = None


class Sender:
    """One file to one receiver; see the module docstring for the protocol."""

    def __init__(self, session, data, sha256, name, now, block=32, payload=1472, window=1,
                 rate_mbps=None, timeout=10.0, rto=0.2, min_rto=0.005):
        if not 1 <= block <= wire.MAX_BLOCK or not 1 <= payload <= wire.MAX_PAYLOAD:
            raise ValueError('block must be 1..%d and payload 1..%d' % (
                wire.MAX_BLOCK, wire.MAX_PAYLOAD))
        self.session, self.data, self.size = session, data, len(data)
        self.sha256, self.name = sha256, name
        self.block, self.payload, self.window = block, payload, max(1, window)
        self.rate = rate_mbps * 1e6 / 8 if rate_mbps else None     # bytes per second
        self.timeout, self.min_rto = timeout, min_rto
        self.rto, self.srtt, self.rttvar = rto, None, None
        per_block = block * payload
        self.blocks = -(-self.size // per_block)
        self.state = OPEN
        self.queue = collections.deque()        # (bytes, block or None, last round datagram)
        self.next_send = now                    # pacing: earliest time of the next datagram
        self.open = {}
        self.next_block = 0
        self.last_heard = self.last_progress = now
        self.meta_deadline = None
        self.meta_wait = None                   # the wait for META_OK or DONE, doubled
        self.error = None
        self.stats = collections.Counter()
        self.started = now
        self.finished = None

    def start(self, now):
        """Queue META: the receiver answers META_OK before any data is sent."""
        self.queue.append((wire.meta(self.session, self.size, self.block, self.payload,
                                     self.sha256, self.name), None, False))
        self.stats['meta_sent'] += 1
        self.meta_wait = self.rto
        self.meta_deadline = now + self.meta_wait

    def count(self, b):
        """Datagrams in block b (the last block may be short)."""
        left = self.size - b * self.block * self.payload
        return min(self.block, -(-left // self.payload))

    def _datagram(self, b, i, last):
        off = (b * self.block + i) * self.payload
        return wire.data(self.session, b, i, self.data[off:off + self.payload], last)

    def _round(self, b, indices):
        """Queue one round of block b: the given indices, the last one flagged."""
        indices = sorted(indices)
        for k, i in enumerate(indices):
            self.queue.append((self._datagram(b, i, k == len(indices) - 1), b,
                               k == len(indices) - 1))
        blk = self.open[b]
        blk.queued += len(indices)
        blk.rounds += 1
        blk.deadline = None

    def _fill(self, now):
        """Open new blocks while the window has room; after the last block, wait for DONE
        (and ask for it with POLL if it does not come)."""
        while self.state == SENDING and len(self.open) < self.window \
                and self.next_block < self.blocks:
            b = self.next_block
            self.next_block += 1
            self.open[b] = _Block(self.count(b))
            self._round(b, self.open[b].missing)
        if self.state == SENDING and not self.open and self.next_block >= self.blocks:
            self.state = FINISHING
            self.meta_wait = max(self.rto, 0.05)
            self.meta_deadline = now + self.meta_wait

    def _poll(self, b):
        """Queue a POLL; for an open block, its leaving starts the block's timer again."""
        blk = self.open.get(b)
        self.queue.append((wire.poll(self.session, b), b if blk else None, True))
        if blk:
            blk.queued += 1
        self.stats['polls'] += 1

    def _fail(self, reason):
        self.state, self.error = FAILED, reason
        self.queue.clear()

    def receive(self, raw, now):
        """Take one datagram from the network."""
        if self.state in (DONE, FAILED):
            return
        msg, why = wire.decode(raw)
        if msg is None or msg.session != self.session:
            self.stats['dropped_' + (why or 'stray')] += 1
            return
        self.last_heard = now
        if msg.kind == wire.META_OK and self.state == OPEN:
            self.last_progress = now
            self.state = SENDING
            self.meta_deadline = None
            self._fill(now)
        elif msg.kind == wire.ACK and self.state in (SENDING, FINISHING):
            self._ack(msg, now)
        elif msg.kind == wire.DONE and self.state in (SENDING, FINISHING):
            if msg.ok:
                self.state, self.finished = DONE, now
            else:
                self._fail('the receiver\'s SHA-256 of the file differs from the sent one')
        elif msg.kind == wire.ERROR:
            self._fail('the receiver stopped: %s' % msg.reason)
        else:
            self.stats['dropped_unexpected'] += 1

    def _ack(self, msg, now):
        blk = self.open.get(msg.block)
        if blk is None or msg.count != self.count(msg.block) or \
                any(i >= msg.count for i in msg.missing):
            self.stats['stale_acks'] += 1
            return
        if blk.rounds == 1 and blk.round_end is not None:       # Karn: unambiguous only
            self._sample(now - blk.round_end)
        missing = set(msg.missing) & blk.missing
        if len(missing) < len(blk.missing):
            self.last_progress = now
            blk.rto = None          # data got through: the next wait is the current RTO
        if not missing:
            del self.open[msg.block]
            self.stats['blocks'] += 1
            self._fill(now)
            return
        blk.missing = missing
        if blk.queued:
            return                  # a round or poll is still leaving: its answer will come
        self.stats['retransmitted'] += len(missing)
        self._round(msg.block, missing)

    def _sample(self, rtt):
        """RFC 6298 update from one round-trip sample."""
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = max(self.min_rto, self.srtt + 4 * self.rttvar)

    def handle_timer(self, now):
        """Resend what a lost answer left waiting; give up after the silence timeout."""
        if self.state in (DONE, FAILED):
            return
        if now >= self.last_progress + self.timeout:   # the same sum as get_timer()
            self._fail(('no progress for %g s: the receiver answers, but nothing resent '
                        'reaches it' if self.last_heard > self.last_progress else
                        'no answer from the receiver for %g s') % self.timeout)
            return
        if self.meta_deadline is not None and now >= self.meta_deadline:
            if self.state == OPEN:          # META or META_OK lost
                self.queue.append((wire.meta(self.session, self.size, self.block,
                                             self.payload, self.sha256, self.name), None,
                                   False))
                self.stats['meta_sent'] += 1
            else:                           # DONE not here yet (lost, or still hashing)
                self._poll(self.blocks)
            self.stats['timeouts'] += 1
            self.meta_wait = self._backoff(self.meta_wait or self.rto)
            self.meta_deadline = now + self.meta_wait
        for b, blk in self.open.items():
            if blk.deadline is not None and now >= blk.deadline:
                self._poll(b)
                blk.rto = self._backoff(blk.rto or self.rto)
                blk.deadline = None
                blk.rounds += 1         # a poll makes the next sample ambiguous

    def _backoff(self, wait):
        """The wait after one that expired: doubled, at most a PROBES_PER_TIMEOUT-th of
        the silence timeout (but never under the RTO); see the module docstring."""
        return min(2 * max(wait, self.min_rto),
                   max(self.rto, self.timeout / PROBES_PER_TIMEOUT))

    def datagrams_to_send(self, now):
        """Return the datagrams due by now (all of them without pacing)."""
        out = []
        while self.queue and (self.rate is None or self.next_send <= now + 1e-9):
            raw, b, last = self.queue.popleft()
            out.append(raw)
            self.stats['datagrams'] += 1
            if self.rate is not None:
                self.next_send = max(self.next_send, now) + len(raw) / self.rate
            blk = self.open.get(b)
            if blk is not None:
                blk.queued -= 1
                if last:
                    blk.round_end = now
                    blk.deadline = now + (blk.rto or self.rto)
        return out

    def get_timer(self):
        """Return when handle_timer (or the pacing of the queue) next needs the core."""
        if self.state in (DONE, FAILED):
            return None
        times = [self.last_progress + self.timeout]
        if self.meta_deadline is not None:
            times.append(self.meta_deadline)
        times += [blk.deadline for blk in self.open.values() if blk.deadline is not None]
        if self.queue and self.rate is not None:
            times.append(self.next_send)
        return min(times)

    def summary(self):
        """Return the transfer's figures for the log."""
        seconds = (self.finished - self.started) if self.finished is not None else None
        return dict(self.stats, state=self.state, bytes=self.size, blocks_total=self.blocks,
                    block=self.block, payload=self.payload, window=self.window,
                    seconds=seconds, srtt=self.srtt, rto=self.rto,
                    goodput_mbps=self.size * 8 / seconds / 1e6 if seconds else None,
                    error=self.error)
