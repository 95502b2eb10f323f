"""The receiving side of the reliable-UDP protocol, without I/O (seed 004's blocks).

One transfer: META opens it (the session id in it is the only one accepted afterwards),
DATA is placed by block and index, an ACK answers every datagram flagged as the last of a
round and every POLL with the block's missing indices, and once every block is whole the
driver checks the file's SHA-256 and reports it with ``verified``; DONE goes back, and is
repeated to whatever the sender still sends (DONE may be lost) until ``linger`` seconds pass
without a datagram from it. No linger can make sure the last DONE arrives (the two generals'
problem): the sender may then give up although the file arrived whole.

Data is not kept: each new datagram becomes a ``Write(offset, data)`` event for the driver,
so memory is the set of received indices of each incomplete block, whatever the file size.
Datagrams of another session, out of range, of the wrong length or repeated are dropped and
counted by reason; none of them can make the core raise.
"""

import collections
import dataclasses

from nodes.rudp import wire

WAITING, RECEIVING, VERIFYING, LINGERING, DONE, FAILED = (
    'waiting', 'receiving', 'verifying', 'lingering', 'done', 'failed')


@dataclasses.dataclass(frozen=True)
class Opened:
    """META arrived: the driver opens a temporary file of `size` bytes."""
    name: str
    size: int
    sha256: bytes


@dataclasses.dataclass(frozen=True)
class Write:
    """Write data at offset in the temporary file."""
    offset: int
    data: bytes


@dataclasses.dataclass(frozen=True)
class Complete:
    """Every byte arrived: the driver checks the SHA-256 and calls verified()."""


class Receiver:
    """One transfer from one sender."""

    def __init__(self, now, timeout=10.0, linger=1.0, max_size=1 << 40, reorder_wait=0.0):
        self.timeout, self.linger, self.max_size = timeout, linger, max_size
        self.reorder_wait = reorder_wait    # see _data: datagrams overtaken by the last one
        self.pending = {}                   # block -> when to report what is still missing
        self.state = WAITING
        self.session = None
        self.events = []
        self.out = []
        self.last_heard = now
        self.started = None
        self.finished = None
        self.linger_until = None
        self.error = None
        self.ok = None
        self.stats = collections.Counter()

    def receive(self, raw, now):
        """Take one datagram; events and answers wait in pop_events()/datagrams_to_send()."""
        if self.state in (DONE, FAILED):
            return
        msg, why = wire.decode(raw)
        if msg is None:
            self.stats['dropped_' + why] += 1
            return
        if self.state == WAITING and msg.kind == wire.META:
            self._open(msg, now)
            return
        if msg.session != self.session:
            self.stats['dropped_stray'] += 1
            return
        self.last_heard = now
        if self.state == LINGERING:     # the sender still asks: DONE was lost (RFC 793's
            self.linger_until = now + self.linger       # TIME-WAIT restarts the same way)
        if msg.kind == wire.META:
            self.out.append(wire.meta_ok(self.session))         # META_OK was lost
        elif msg.kind == wire.DATA:
            self._data(msg, now)
        elif msg.kind == wire.POLL:
            self._poll(msg.block)
        elif msg.kind == wire.ERROR:
            self._fail('the sender stopped: %s' % msg.reason)
        else:
            self.stats['dropped_unexpected'] += 1

    def _open(self, msg, now):
        if msg.size > self.max_size:
            self.out.append(wire.error(msg.session, 'a file of %d bytes is over this '
                                       'receiver\'s limit of %d' % (msg.size, self.max_size)))
            self.stats['refused'] += 1
            return
        self.session, self.size, self.sha256 = msg.session, msg.size, msg.sha256
        self.block, self.payload = msg.block, msg.payload
        self.blocks = -(-msg.size // (msg.block * msg.payload))
        self.whole = bytearray(self.blocks)         # 1 once a block is complete
        self.got = {}                               # incomplete block -> received indices
        self.left = self.blocks
        self.state, self.started, self.last_heard = RECEIVING, now, now
        self.events.append(Opened(msg.name, msg.size, msg.sha256))
        self.out.append(wire.meta_ok(self.session))
        if not self.blocks:
            self._complete(now)

    def count(self, b):
        """Datagrams in block b."""
        left = self.size - b * self.block * self.payload
        return min(self.block, -(-left // self.payload))

    def _data(self, msg, now):
        b, i = msg.block, msg.index
        if b >= self.blocks or i >= self.count(b):
            self.stats['dropped_out_of_range'] += 1
            return
        offset = (b * self.block + i) * self.payload
        if len(msg.data) != min(self.payload, self.size - offset):
            self.stats['dropped_wrong_length'] += 1
            return
        if self.whole[b] or i in self.got.get(b, ()):
            self.stats['duplicates'] += 1
        else:
            self.stats['datagrams'] += 1
            self.events.append(Write(offset, msg.data))
            got = self.got.setdefault(b, set())
            got.add(i)
            if len(got) == self.count(b):
                del self.got[b]
                self.whole[b] = 1
                self.left -= 1
                self.pending.pop(b, None)
                self.out.append(wire.ack(self.session, b, self.count(b), ()))
                if not self.left:
                    self._complete(now)
                return
        if msg.flags & wire.FLAG_LAST:
            # With jitter, the round's last datagram can overtake others of its block; to
            # report them missing at once would make the sender resend what is on its way.
            # Wait up to reorder_wait (0: answer at once, as the seed's protocol does).
            if self.reorder_wait > 0:
                self.pending.setdefault(b, now + self.reorder_wait)
            else:
                self._poll(b)

    def _poll(self, b):
        """Answer which datagrams of block b are missing (DONE for the end-of-file poll)."""
        if b == self.blocks:
            if self.state == LINGERING:
                self.out.append(wire.done(self.session, self.ok))
            return
        if b > self.blocks:
            self.stats['dropped_out_of_range'] += 1
            return
        count = self.count(b)
        got = self.got.get(b, ())
        missing = () if self.whole[b] else tuple(i for i in range(count) if i not in got)
        self.out.append(wire.ack(self.session, b, count, missing))
        self.stats['acks'] += 1

    def _complete(self, now):
        self.state, self.finished = VERIFYING, now
        self.events.append(Complete())

    def verified(self, ok, now):
        """The driver's verdict on the whole file's SHA-256; DONE goes to the sender."""
        if self.state != VERIFYING:
            return
        self.ok = ok
        self.out.append(wire.done(self.session, ok))
        self.state, self.linger_until = LINGERING, now + self.linger
        if not ok:
            self.error = 'the received file\'s SHA-256 differs from the announced one'

    def _fail(self, reason):
        self.state, self.error = FAILED, reason

    def handle_timer(self, now):
        """Report blocks whose reorder wait ended; end the linger, or fail after the
        silence timeout."""
        for b, due in sorted(self.pending.items()):
            if due <= now:
                del self.pending[b]
                self._poll(b)
        if self.state == LINGERING and now >= self.linger_until:
            self.state = DONE if self.ok else FAILED
        elif self.state in (WAITING, RECEIVING) and self.started is not None and \
                now >= self.last_heard + self.timeout:
            self._fail('no datagram from the sender for %g s after %d of %d blocks' % (
                self.timeout, self.blocks - self.left, self.blocks))

    def get_timer(self):
        """When handle_timer is next needed (None while waiting for a first META)."""
        if self.state == LINGERING:
            return self.linger_until
        if self.state == RECEIVING:
            return min([self.last_heard + self.timeout] + list(self.pending.values()))
        return None

    def pop_events(self):
        """Return and forget the events so far."""
        events, self.events = self.events, []
        return events

    def datagrams_to_send(self, now):
        """Return and forget the answers so far."""
        out, self.out = self.out, []
        return out

    def summary(self):
        """The transfer's figures for the log."""
        seconds = self.finished - self.started if self.finished and self.started else None
        return dict(self.stats, state=self.state, bytes=getattr(self, 'size', 0),
                    seconds=seconds, error=self.error,
                    goodput_mbps=self.size * 8 / seconds / 1e6 if seconds else None)
