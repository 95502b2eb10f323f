"""Index-server core: the hash partition a server owns, behind a small storage interface.

Sans-I/O. `ServerConnection.receive(data, now)` takes the bytes one client connection sent
and returns `(reply_bytes, close)`. Partial frames are kept between calls, so a request may
arrive in any number of pieces and several requests may arrive at once (pipelining: replies
come back in request order, each carrying its request id).

Replication policy (documented choice, see the package docstring): the *client* writes
every entry to all R + 1 servers of the key's preference list and counts the register as
done only when all of them acknowledged, so an acknowledged entry survives the loss of any
R of those servers; searches read one copy and fall back along the preference list.
Servers therefore never talk to each other, and a server stores whatever it is sent;
entries for keys outside its preference range are still stored (the client's ring decides)
but counted as `misrouted` so a ring mismatch shows up in the summary.

Bounded memory and bounded work per call, whatever clients send:
- the index: at most `max_entries` (name, holder) entries per server and `MAX_HOLDERS`
  holders per name; a REGISTER that would pass either is refused whole with an ERROR and
  changes nothing. A REGISTER or UNREGISTER frame naming more than `MAX_NAMES` files is
  refused before its names are decoded, so one frame costs a bounded time however short
  its names are (the client splits its batches at the same bound);
- a reply always fits a frame: names are file names (`MAX_NAME` bytes), holders are
  addresses with a host of at most `ring.MAX_HOST` bytes, so no reply exceeds `MAX_REPLY`;
- a connection decodes and answers at most `BATCH` requests and `OUTPUT_BUDGET` reply
  bytes per call, and nothing while its driver's output is paused (`pause_output` /
  `resume_output`). The bytes of the requests not yet answered stay undecoded; while any
  wait (`waiting`) the driver stops reading and calls `more()` again on a later turn of
  its loop, so one flooding client holds a bounded number of bytes and cannot keep the
  server from the others. `buffered` says how many bytes a connection holds, for a bound
  over all connections;
- timers, as in every core of the project (`get_timer()`, `handle_timer(now)`; the driver
  only closes): a connection with no traffic for `idle_timeout` seconds is closed, and so
  is one whose frame is not complete `frame_timeout` seconds after it began (a client
  trickling a byte now and then is not idle, but it is not making progress either).

Storage interface (`store.MemoryStore` is the one implementation): `add(name, addr)`,
`remove(name, addr)`, `holders(name)`, `count(name)`, `has(name, addr)`, `len()` (names)
and `entries` (name, holder pairs); all return plain values.
"""

import struct
from collections import deque

from . import codec, search_frames
from .ring import MAX_HOST, parse_addr
from .store import MemoryStore

MAX_NAME = 255              # bytes: the longest file name Linux allows (NAME_MAX)
MAX_HOLDERS = 1024          # holders one name keeps on one server
MAX_NAMES = 100_000         # names in one REGISTER or UNREGISTER frame
MAX_ENTRIES = 2_000_000     # default (name, holder) entries one server keeps
# The largest reply: FOUND for a longest name with MAX_HOLDERS longest 'host:65535' holders
# (frame header, str name, strlist count, one str per holder). NOTFOUND echoes at most a
# MAX_STR name and ERROR text is cut to 2000 characters, both smaller.
MAX_REPLY = 4 + 6 + (2 + MAX_NAME) + 4 + MAX_HOLDERS * (2 + MAX_HOST + len(':65535'))
OUTPUT_BUDGET = 64 * 1024   # reply bytes one call answers before it waits to be asked again
BATCH = 256                 # requests one call decodes and answers, at most
IDLE_TIMEOUT = 300.0        # seconds; generous: a client reopens a closed one in its timed part
FRAME_TIMEOUT = 30.0        # seconds from a frame's first byte to its last

_U16 = struct.Struct('>H')
_U32 = struct.Struct('>I')
_HEAD = 4 + 6               # frame length, then version, type, req (codec's frame header)
_SEARCH = codec.Search.TYPE


def valid_name(name):
    """Return an error text if name cannot be a shared file name, else None."""
    if not name or name in ('.', '..') or '/' in name or '\0' in name:
        return 'invalid file name %r' % name[:100]
    if len(name.encode('utf-8', 'surrogatepass')) > MAX_NAME:
        return 'invalid file name %r...: longer than %d bytes' % (name[:40], MAX_NAME)
    return None


class ServerCore:
    """Answers REGISTER, UNREGISTER and SEARCH against a store."""

    def __init__(self, name, store=None, ring=None, replicas=0, max_entries=MAX_ENTRIES):
        if max_entries < 1:
            raise ValueError('max_entries must be at least 1')
        self.name = name
        self.store = store if store is not None else MemoryStore()
        self.ring = ring
        self.replicas = replicas
        self.max_entries = max_entries
        self.counters = dict(register=0, unregister=0, search=0, found=0, not_found=0,
                             errors=0, refused=0, misrouted=0, entries_added=0,
                             entries_removed=0, idle_closed=0, slow_closed=0)
        self.search_frame = search_frames.Answers(self, MAX_HOLDERS).reply

    def _check_owner(self, name):
        """Count keys this server is not a replica of under the configured ring."""
        if self.ring is not None and self.name not in self.ring.replicas(name, self.replicas):
            self.counters['misrouted'] += 1

    def _refused(self, names, addr):
        """Why registering names at addr would pass a bound (then nothing is stored), or None."""
        store, new = self.store, set()
        for name in names:
            if not store.has(name, addr):
                if store.count(name) >= MAX_HOLDERS:
                    return ('%r already has %d holders, the most an index server keeps;'
                            ' nothing registered' % (name[:100], MAX_HOLDERS))
                new.add(name)
        if store.entries + len(new) > self.max_entries:
            return ('this index server holds %d entries and keeps at most %d; %d more refused,'
                    ' nothing registered' % (store.entries, self.max_entries, len(new)))
        return None

    def handle(self, msg, now):
        """Return the reply to one decoded request."""
        c = self.counters
        t = type(msg)
        if t is codec.Search:
            c['search'] += 1
            holders = self.store.holders(msg.name)[:MAX_HOLDERS]
            if holders:
                c['found'] += 1
                return codec.Found(msg.req, msg.name, holders)
            c['not_found'] += 1
            return codec.NotFound(msg.req, msg.name)
        if t is codec.Register or t is codec.Unregister:
            for name in msg.names:
                bad = valid_name(name)
                if bad:
                    c['errors'] += 1
                    return codec.Error(msg.req, codec.ERR_MALFORMED, bad)
            try:
                parse_addr(msg.addr, port_zero=False)
            except ValueError as exc:
                c['errors'] += 1
                return codec.Error(msg.req, codec.ERR_MALFORMED, str(exc))
            changed = 0
            if t is codec.Register:
                c['register'] += 1
                refused = self._refused(msg.names, msg.addr)
                if refused:
                    c['refused'] += 1
                    return codec.Error(msg.req, codec.ERR_TOO_LARGE, refused)
                for name in msg.names:
                    self._check_owner(name)
                    changed += self.store.add(name, msg.addr)
                c['entries_added'] += changed
            else:
                c['unregister'] += 1
                for name in msg.names:
                    changed += self.store.remove(name, msg.addr)
                c['entries_removed'] += changed
            return codec.Ack(msg.req, changed)
        c['errors'] += 1
        return codec.Error(msg.req, codec.ERR_UNEXPECTED,
                           'an index server does not answer %s' % t.__name__)


class ServerConnection:
    """One client connection to an index server: bytes in, reply bytes out, a batch at a time.

    The bytes received are split into frames here (by their length field) and handed to
    the codec's decoder a batch at a time, which is what lets a REGISTER be refused from its
    name count alone and a frame be timed from its first byte. A well-formed SEARCH is
    answered from its bytes (`search_frames`; `fast_search` False: decoded like the rest)."""

    fast_search = True

    def __init__(self, core, max_frame=codec.MAX_FRAME, idle_timeout=IDLE_TIMEOUT, now=0.0,
                 frame_timeout=FRAME_TIMEOUT):
        self.core = core
        self.decoder = codec.Decoder(max_frame)
        self.idle_timeout = idle_timeout
        self.frame_timeout = frame_timeout
        self.output_paused = False
        self._raw = bytearray()     # bytes received and not decoded yet
        self._unfinished = False    # they begin a frame still arriving (nothing to decode)
        self._begun = None          # since when _raw has held undecoded bytes
        self._inbox = deque()       # requests not answered yet (see _reply)
        self._held = False          # requests waited after the last call: no reading since
        self._eof = False
        self._told = False          # the truncation error went out
        self._last = now            # last sign of life: bytes in, or output drained

    @property
    def waiting(self):
        """True while received requests wait for an answer: the driver must stop reading
        and call more() again later."""
        return bool(self._inbox) or bool(self._raw) and not self._unfinished

    @property
    def buffered(self):
        """Bytes received and not decoded yet: an unfinished frame, or at most one read."""
        return len(self._raw)

    def receive(self, data, now):
        """Feed bytes; return (reply bytes of the next batch, whether to close)."""
        if not (self._raw or self._inbox or self.output_paused or self._eof) \
                and self.fast_search:
            reply = self._lone_search(data)
            if reply is not None:       # what _answer leaves after answering it
                self._last, self._unfinished, self._begun, self._held = now, True, None, False
                return reply, False
        if data and not self.decoder.broken:
            self._last = now
            self._raw += data
            self._unfinished = False
            if self._begun is None:
                self._begun = now
        return self._answer(now)

    def _lone_search(self, data):
        """The reply to data, as _reply answers what search_frames.read gives, when data is
        one whole well-formed SEARCH frame that _decode would hand to search_frames (the
        decoder between frames, `codec.lone_frame`: the length within its bound), else None
        (nothing answered or counted). Why: a client with one search out at a time (the
        simulator's) sends exactly that, and answering it here skips the buffer, the inbox
        and the batch loop; the state afterwards is the one they leave
        (`tests/test_dht_search_frames.py`)."""
        if not self.decoder.between_frames():
            return None
        frame = codec.lone_frame(data, self.decoder.max_frame)
        if frame is None or frame[0] != _SEARCH:
            return None
        name = codec.str_to_end(data, _HEAD, len(data))
        if name is None:
            return None
        return self.core.search_frame(frame[1], name, bytes(data[_HEAD:]))

    def more(self, now):
        """Return the next batch of replies (the driver's loop came round again)."""
        return self._answer(now)

    def pause_output(self):
        """The driver cannot write more for now: answer nothing until resume_output."""
        self.output_paused = True

    def resume_output(self, now):
        """The driver's output drained; return the next batch."""
        self.output_paused = False
        self._last = now
        return self._answer(now)

    def eof(self):
        """The client sends nothing more. Return the error for a frame it left unfinished when
        no request waits (then the driver closes); else more() answers the waiting ones and
        says close after the last."""
        self._eof = True
        if self.waiting:
            return b''
        return self._truncated()

    @property
    def finished(self):
        """True once the client closed its side and every request it sent was answered."""
        return self._eof and not self.waiting

    def get_timer(self):
        """When handle_timer must be called next (the idle or the frame deadline), or None.
        Asked after every answer, when mostly no frame is begun: then the idle deadline."""
        if self._begun is None:         # no frame deadline (see _deadlines)
            return None if self.idle_timeout is None else self._last + self.idle_timeout
        idle, frame = self._deadlines()
        if idle is None or frame is not None and frame < idle:
            return frame
        return idle

    def handle_timer(self, now):
        """Return (b'', True) if the connection was idle too long or its frame is overdue,
        else (b'', False)."""
        idle, frame = self._deadlines()
        if frame is not None and now >= frame:
            self.core.counters['slow_closed'] += 1
        elif idle is not None and now >= idle:
            self.core.counters['idle_closed'] += 1
        else:
            return b'', False
        self._inbox.clear()
        return b'', True

    def _deadlines(self):
        """(idle deadline, frame deadline); the frame is not timed while the driver is not
        reading (requests wait), since then it cannot progress."""
        idle = None if self.idle_timeout is None else self._last + self.idle_timeout
        frame = (None if self._begun is None or self.frame_timeout is None or self.waiting
                 else self._begun + self.frame_timeout)
        return idle, frame

    def _decode(self, limit, now):
        """Decode up to limit whole frames into the inbox; a REGISTER or UNREGISTER naming
        more than MAX_NAMES files becomes an ERROR without its names being decoded."""
        buf, pos, start, n = self._raw, 0, 0, 0
        while n < limit:
            if len(buf) - pos < 4:
                self._unfinished = True
                break
            length = _U32.unpack_from(buf, pos)[0]
            if not _HEAD - 4 <= length <= self.decoder.max_frame:
                pos = len(buf)      # the decoder rejects the length (fatal): give it all
                break
            if len(buf) - pos < 4 + length:
                self._unfinished = True
                break
            count = _names(buf, pos, length)
            search = self.fast_search and search_frames.read(buf, pos, length)
            if search:          # answered from its bytes if the decoder is between frames
                if start < pos:
                    self._inbox.extend(self.decoder.feed(buf[start:pos]))
                    start = pos
                if self.decoder.between_frames():
                    self._inbox.append(search)
                    start = pos + 4 + length
            elif count > MAX_NAMES:
                self._inbox.extend(self.decoder.feed(buf[start:pos]))
                self._inbox.append(codec.ProtocolError(
                    _U32.unpack_from(buf, pos + 6)[0], codec.ERR_TOO_LARGE,
                    'a message names %d files, more than the %d an index server takes at'
                    ' once; split it' % (count, MAX_NAMES), False))
                start = pos + 4 + length
            pos += 4 + length
            n += 1
        if start < pos:
            self._inbox.extend(self.decoder.feed(buf[start:pos]))
        del buf[:pos]
        if not buf:
            self._begun = None
        elif pos:
            self._begun = now       # a frame ended: the next one's time starts

    def _answer(self, now):
        """Answer up to BATCH requests and OUTPUT_BUDGET bytes (at least one), unless paused."""
        out, size, close, n = [], 0, False, 0
        while not self.output_paused and size < OUTPUT_BUDGET and n < BATCH:
            if not self._inbox:
                self._decode(BATCH - n, now)
                if not self._inbox:
                    break
            data, close = self._reply(self._inbox.popleft(), now)
            out.append(data)
            size += len(data)
            n += 1
            if close:
                self._inbox.clear()
                self._raw.clear()
                break
        if self._held and not self.waiting and self._begun is not None:
            self._begun = now       # reading resumes: the unfinished frame can progress again
        self._held = self.waiting
        if self._eof and not self.waiting and not close:
            out.append(self._truncated())
            close = True
        return b''.join(out), close

    def _truncated(self):
        """The ERROR for a frame cut short by the client's close (once), or b''."""
        if self._told or not (self._raw or self.decoder.pending) or self.decoder.broken:
            return b''
        self._told = True
        self.core.counters['errors'] += 1
        return codec.encode(codec.Error(0, codec.ERR_MALFORMED,
                                        'connection closed inside a frame (truncated)'))

    def _reply(self, item, now):
        """(reply bytes, close) for one inbox item: what the decoder gives (a request, a
        ProtocolError, a Chunk), or a SEARCH frame `search_frames.read` took apart, kept as
        its (req, name, name field) tuple. The decoder gives no tuples, so the exact type
        test tells the two apart at the price of one comparison (a class of its own would
        cost an object per search)."""
        if type(item) is tuple:
            return self.core.search_frame(*item), False
        if isinstance(item, codec.ProtocolError):
            self.core.counters['errors'] += 1
            return codec.encode(codec.Error(item.req, item.code, item.text)), item.fatal
        if isinstance(item, codec.Chunk):
            self.core.counters['errors'] += 1
            return codec.encode(codec.Error(0, codec.ERR_UNEXPECTED,
                                            'file data sent to an index server')), True
        return codec.encode(self.core.handle(item, now)), False


def _names(buf, pos, length):
    """How many names the REGISTER or UNREGISTER frame at pos announces (0 for another
    frame, or one too short to say: the decoder reports that)."""
    if buf[pos + 4] != codec.PROTOCOL_VERSION \
            or buf[pos + 5] not in (codec.Register.TYPE, codec.Unregister.TYPE) \
            or length < _HEAD - 4 + 2:
        return 0
    at = pos + _HEAD + 2 + _U16.unpack_from(buf, pos + _HEAD)[0]
    return _U32.unpack_from(buf, at)[0] if at + 4 <= pos + 4 + length else 0
