"""Peer-to-peer file transfer core: GET name from offset, FILE header, raw bytes, SHA-256.

Sans-I/O. The serving side (`ServeConnection`) turns GET frames into actions for its
driver: send a frame, hash a file, send `count` bytes of a file from `offset` (with
`loop.sendfile`: file data never passes through Python), or close. Its catalog offers
`stat(name) -> (size, sha256) or None`, or, reading a disk, `open(name, first) -> (size,
sha256 or None, source) or None` (first: this connection holds no other file) and
`close(source)`: the file is opened once and header and body come from that source, so a
symlink or FIFO swapped in for the name later changes nothing. A digest of None (not known
for this version of the file) becomes `HashFile`: the driver hashes exactly `size` bytes
off its event loop (a file growing meanwhile still matches its header) and calls
`hashed()`. `open` raises `Unavailable` for a file it cannot open now (no descriptor, no
memory): that is ERROR "busy, try later" (ERR_INTERNAL), never "no such file", which a
client reads as "this holder lacks the file". The core closes each source it does not
hand on; the driver closes the others.

The driver reports what it did -- `written(frame)`, `file_sent(action, count)` (short: the
file shrank, the stream can no longer match its header, so the connection closes),
`progress(now)` (the downloader took bytes), `closed(reason)` -- so every GET ends in
exactly one of:
    sent        header and whole body written;
    failed      not all written, counted once more under its reason: failed_shrank,
                failed_lost (reset or closed by the downloader), failed_timeout (a timer
                below closed it), failed_closed (a fatal bad frame did), failed_shutdown;
    not_found   ERROR no such file;
    refused     ERROR otherwise: offset beyond the size, or busy (also counted in `busy`).
Once the connection has ended, gets == sent + failed + not_found + refused. `served`
counts headers written, `bytes` the bytes of ended bodies, `errors` bad frames that were
not a GET.

Pipelined GETs are answered `WINDOW` at a time, and not at all while the driver has output
pending (`pause_output` / `resume_output`): the rest wait decoded and `waiting` tells the
driver to stop reading, so a client that pipelines thousands of GETs holds at most
`WINDOW` open files on this connection.

Timers (`get_timer()` / `handle_timer(now)`; the driver only closes): no bytes in and no
output progress for `idle_timeout`; a request frame incomplete `frame_timeout` after its
first bytes (counted only while the driver reads); output pending without progress for
`stall_timeout` (a downloader that stopped reading would keep `WINDOW` files open). None
runs while a file is hashed: that wait is the peer's, not the downloader's.

The fetching side is ``download_core.Download``.
"""

from collections import deque
from dataclasses import dataclass, field

from . import codec

WINDOW = 16             # GETs answered per batch (each may hold an open file until it is sent)
IDLE_TIMEOUT = 300.0    # seconds; as the index server's: a client reopens a closed one
FRAME_TIMEOUT = 30.0    # a GET frame is a few hundred bytes: it arrives whole well before
STALL_TIMEOUT = 60.0    # a downloader reading nothing for this long has stopped
FAILURES = ('shrank', 'lost', 'timeout', 'closed', 'shutdown')
COUNTERS = ('gets', 'served', 'sent', 'failed', 'not_found', 'refused', 'busy', 'errors',
            'bytes', 'idle_closed', 'frame_timeouts', 'stalled',
            *('failed_' + r for r in FAILURES))


class Unavailable(Exception):
    """A catalog cannot open a shared file now (no descriptor, no memory): try later."""


@dataclass(frozen=True)
class SendFrame:
    data: bytes


@dataclass(frozen=True)
class SendFile:
    name: str
    offset: int
    count: int
    source: object = field(default=None, compare=False, repr=False)   # the catalog's open file


@dataclass(frozen=True)
class HashFile:
    """Compute the SHA-256 of the first `size` bytes of source, then call hashed()."""
    name: str
    size: int
    source: object = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Close:
    reason: str


class _Answer:
    """A GET answered with a FILE header (or about to be, once hashed), until it ends."""
    __slots__ = ('get', 'size', 'source', 'hashing', 'head', 'body')

    def __init__(self, get, size, source):
        self.get, self.size, self.source = get, size, source
        self.hashing = self.head = self.body = None


class ServeConnection:
    """One connection to a peer's file server: GET frames in, actions out."""

    def __init__(self, catalog, max_frame=64 * 1024, idle_timeout=IDLE_TIMEOUT,
                 frame_timeout=FRAME_TIMEOUT, stall_timeout=STALL_TIMEOUT, now=0.0):
        self.catalog = catalog
        self.decoder = codec.Decoder(max_frame)
        self.idle_timeout = idle_timeout
        self.frame_timeout = frame_timeout
        self.stall_timeout = stall_timeout
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.output_paused = False
        self._inbox = deque()           # decoded requests not answered yet
        self._answers = deque()         # _Answer, in the order the driver carries them out
        self._heard = now               # last bytes in
        self._moved = now               # last output progress (or new output)
        self._frame_since = None        # when the partial frame in the decoder started
        self._ended = None              # the failure reason once the core said Close

    @property
    def waiting(self):
        """True while decoded requests wait for an answer: the driver must stop reading."""
        return bool(self._inbox)

    def receive(self, data, now):
        """Feed bytes; return a list of SendFrame / HashFile / SendFile / Close actions."""
        if data:
            self._heard = now
            items = self.decoder.feed(data)
            self.counters['gets'] += sum(type(i) is codec.Get for i in items)
            self._inbox.extend(items)
            if not self.decoder.pending:
                self._frame_since = None
            elif items or self._frame_since is None:
                self._frame_since = now     # the unfinished frame began in this data
        return self._answer(now)

    def pause_output(self):
        """The driver still has actions to carry out: answer nothing until resume_output."""
        self.output_paused = True

    def resume_output(self, now):
        """The driver is done with what it had; return the next batch of actions."""
        self.output_paused = False
        self._moved = now
        if self._frame_since is not None:
            self._frame_since = now         # the driver was not reading meanwhile
        return self._answer(now)

    def progress(self, now):
        """The downloader took some of the output (the driver saw its bytes acknowledged)."""
        self._moved = now

    def written(self, action, now):
        """The driver handed a SendFrame to its transport."""
        a = self._answers[0] if self._answers else None
        if a is not None and a.head is action:
            self.counters['served'] += 1
            if a.body is None:
                self._answers.popleft()
                self.counters['sent'] += 1

    def hashed(self, action, digest, now):
        """The driver hashed a HashFile (digest None: it could not); return what follows."""
        a = self._answers[0] if self._answers else None
        if a is None or a.hashing is not action:
            return []
        self._moved = now
        a.hashing = None
        if digest is None:
            self._answers.popleft()
            self._release(a.source)
            return [self._refuse(a.get, codec.ERR_INTERNAL, 'busy: could not hash %r now;'
                                 ' try later' % a.get.name[:200], busy=True)]
        return self._head(a, digest)

    def file_sent(self, action, count, now):
        """The driver sent count bytes of a SendFile; return [Close] if that was too few."""
        self.counters['bytes'] += count
        if self._answers and self._answers[0].body is action:
            self._answers.popleft()
        self._moved = now
        if count == action.count:
            self.counters['sent'] += 1
            return []
        self._fail('shrank')
        self._ended = 'closed'
        return [Close('%r shrank while being sent: %d of %d bytes from offset %d'
                      % (action.name[:200], count, action.count, action.offset))]

    def closed(self, reason, now):
        """The connection ended: every GET not yet ended fails, for the core's own reason if
        it closed the connection, else for reason ('lost' or 'shutdown')."""
        reason = self._ended or reason
        for _ in self._answers:
            self._fail(reason)
        for item in self._inbox:
            if type(item) is codec.Get:
                self._fail(reason)
        self._answers.clear()
        self._inbox.clear()
        self._ended = reason

    def get_timer(self):
        """When handle_timer must be called next, or None."""
        times = [when for when, _, _ in self._deadlines()]
        return min(times) if times else None

    def handle_timer(self, now):
        """Return [Close] if a deadline passed (the driver then closes), else []."""
        for when, counter, reason in self._deadlines():
            if now >= when:
                self.counters[counter] += 1
                self._ended = 'timeout'
                return [Close(reason)]
        return []

    def _deadlines(self):
        """(when, counter, reason) of each running timer, the most specific first."""
        if self._ended is not None or (self._answers and self._answers[0].hashing):
            return []
        out = []
        if self.output_paused and self.stall_timeout is not None:
            out.append((self._moved + self.stall_timeout, 'stalled',
                        'the downloader took no output for %g s' % self.stall_timeout))
        if self._frame_since is not None and not self._inbox and not self.output_paused \
                and self.frame_timeout is not None:
            out.append((self._frame_since + self.frame_timeout, 'frame_timeouts',
                        'a request frame stayed incomplete for %g s' % self.frame_timeout))
        if self.idle_timeout is not None:
            out.append((max(self._heard, self._moved) + self.idle_timeout, 'idle_closed',
                        'idle for %g s' % self.idle_timeout))
        return out

    def _fail(self, reason):
        self.counters['failed'] += 1
        self.counters['failed_' + reason] += 1

    def _answer(self, now):
        """Actions for up to WINDOW waiting requests, unless paused or closing."""
        out = []
        n = 0
        waited = bool(self._inbox)
        while self._inbox and not self.output_paused and n < WINDOW and not self._ended:
            item = self._inbox.popleft()
            n += 1
            if isinstance(item, codec.ProtocolError):
                self.counters['errors'] += 1
                out.append(SendFrame(codec.encode(codec.Error(item.req, item.code, item.text))))
                if item.fatal:
                    out.append(Close(item.text))
                    self._ended = 'closed'
            elif isinstance(item, codec.Get):
                out.extend(self._get(item))
            else:
                self.counters['errors'] += 1
                text = 'a peer answers only GET, not %s' % type(item).__name__
                out.append(SendFrame(codec.encode(codec.Error(getattr(item, 'req', 0),
                                                              codec.ERR_UNEXPECTED, text))))
                if isinstance(item, codec.Chunk):
                    out.append(Close(text))
                    self._ended = 'closed'
        if waited and not self._inbox and self._frame_since is not None:
            self._frame_since = now             # reading resumes only now
        if out:
            self._moved = now
        return out

    def _open(self, name):
        """(size, sha256 or None, source or None) of a shared file, or None."""
        if hasattr(self.catalog, 'open'):
            return self.catalog.open(name, not self._answers)
        st = self.catalog.stat(name)
        return None if st is None else (st[0], st[1], None)

    def _release(self, source):
        if source is not None:
            self.catalog.close(source)

    def _refuse(self, get, code, text, busy=False):
        self.counters['refused'] += 1
        self.counters['busy'] += busy
        return SendFrame(codec.encode(codec.Error(get.req, code, text)))

    def _get(self, msg):
        """Actions answering one GET."""
        try:
            opened = self._open(msg.name)
        except Unavailable as exc:
            return [self._refuse(msg, codec.ERR_INTERNAL, 'busy: %s; try later' % exc, True)]
        if opened is None:
            self.counters['not_found'] += 1
            return [SendFrame(codec.encode(codec.Error(msg.req, codec.ERR_NO_SUCH_FILE,
                                                       'no such file: %r' % msg.name[:200])))]
        size, digest, source = opened
        if msg.offset > size:
            self._release(source)
            return [self._refuse(msg, codec.ERR_MALFORMED,
                                 'offset %d beyond size %d' % (msg.offset, size))]
        a = _Answer(msg, size, source)
        self._answers.append(a)
        if digest is None:
            a.hashing = HashFile(msg.name, size, source)
            return [a.hashing]
        return self._head(a, digest)

    def _head(self, a, digest):
        """The FILE header of an answer, and its body unless there is none to send."""
        get = a.get
        a.head = SendFrame(codec.encode(codec.FileHeader(get.req, a.size, get.offset, digest)))
        if a.size == get.offset:
            self._release(a.source)
            return [a.head]
        a.body = SendFile(get.name, get.offset, a.size - get.offset, a.source)
        return [a.head, a.body]
