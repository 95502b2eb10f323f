"""Reading the DHT protocol (`messages`): the incremental decoder and its direct readers.

Sans-I/O: `Decoder.feed(data)` takes bytes and gives messages, raw file chunks or
`ProtocolError`s; `str_to_end` and `_direct` read the frames of a search without a
`_Reader`. Users import these through `codec`, with the messages.
"""

import struct

from .messages import (ERR_MALFORMED, ERR_TOO_LARGE, ERR_UNKNOWN_TYPE, ERR_VERSION, MAX_FRAME,
                       PROTOCOL_VERSION, Ack, Chunk, DecodeError, Error, FileHeader, Found, Get,
                       NotFound, ProtocolError, Register, Search, Unregister, _HEAD,
                       _HEAD_AFTER_LEN, _U16, _U32, _U64)


class _Reader:
    """Cursor over one frame body."""

    __slots__ = ('buf', 'pos')

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n):
        """Return the next n bytes or raise DecodeError."""
        end = self.pos + n
        if end > len(self.buf):
            raise DecodeError('truncated body')
        out = self.buf[self.pos:end]
        self.pos = end
        return out

    def str(self):
        """Read one str field."""
        n = _U16.unpack(self.take(2))[0]
        try:
            return self.take(n).decode('utf-8')
        except UnicodeDecodeError:
            raise DecodeError('string is not UTF-8') from None

    def strlist(self):
        """Read one strlist field."""
        count = _U32.unpack(self.take(4))[0]
        if count * 2 > len(self.buf) - self.pos:
            raise DecodeError('list count larger than the frame')
        return tuple([self.str() for _ in range(count)])

    def u64(self):
        """Read one u64 field."""
        return _U64.unpack(self.take(8))[0]

    def u16(self):
        """Read one u16 field."""
        return _U16.unpack(self.take(2))[0]

    def end(self):
        """Check the body was consumed exactly."""
        if self.pos != len(self.buf):
            raise DecodeError('%d trailing bytes' % (len(self.buf) - self.pos))


def str_to_end(buf, start, end):
    """The str field that fills buf[start:end] exactly (its length field says so, no byte
    left over, UTF-8), else None. The name of a SEARCH and of a NOTFOUND, read here for
    `_direct` and for the index server's `search_frames.read`."""
    if end - start < 2 or start + 2 + _U16.unpack_from(buf, start)[0] != end:
        return None
    try:
        return buf[start + 2:end].decode('utf-8')
    except UnicodeDecodeError:
        return None


def _direct(mtype, req, body):
    """SEARCH, NOTFOUND and FOUND (a search and its answers: most frames the simulator
    decodes) read straight from a well-formed body, or None: then `_Reader` reads it and
    says what is wrong. Accepts exactly what the reader accepts (every field whole, the
    body used up) and builds the same message, without a reader and four calls per
    field."""
    if mtype != 0x82:
        name = str_to_end(body, 0, len(body))
        return None if name is None else (Search if mtype == 0x03 else NotFound)(req, name)
    found = found_fields(body, 0)
    return None if found is None else Found(req, *found)


def found_fields(buf, start):
    """(name, holders tuple) of the FOUND body that fills buf[start:] exactly (what
    `_Reader` accepts: every field whole, UTF-8, nothing left over), else None."""
    u16 = _U16.unpack_from
    try:
        pos = start + 2 + u16(buf, start)[0]
        name = buf[start + 2:pos].decode('utf-8')
        count = _U32.unpack_from(buf, pos)[0]
        pos += 4
        holders = []
        for _ in range(count):          # each needs 2 bytes: a bogus count fails soon
            at = pos + 2
            pos = at + u16(buf, pos)[0]
            holders.append(buf[at:pos].decode('utf-8'))    # short if past the end: then
    except (struct.error, UnicodeDecodeError):              # pos is too, and None below
        return None
    return (name, tuple(holders)) if pos == len(buf) else None


def lone_frame(data, max_frame):
    """(type, req) of data when it is exactly one whole frame of this protocol version that
    a decoder of max_frame between frames takes (its length field says the rest of data,
    within the bound) with a body of 2 bytes at least, else None. The test of both "one
    frame alone" short paths: a client's answer (`lone_answer`) and an index server's
    SEARCH (`ServerConnection._lone_search`)."""
    if len(data) < 12:
        return None
    length, version, mtype, req = _HEAD.unpack_from(data)
    if length + 4 != len(data) or length > max_frame or version != PROTOCOL_VERSION:
        return None
    return mtype, req


def lone_answer(data, max_frame):
    """(req, name, holders) of data when it is exactly one well-formed FOUND (holders: its
    tuple) or NOTFOUND (holders None) frame that a decoder of max_frame between frames
    reads so, else None: a client's answer to its one search out, read without the frame
    loop or a message object."""
    frame = lone_frame(data, max_frame)
    if frame is None:
        return None
    mtype, req = frame
    if mtype == 0x82:
        found = found_fields(data, 10)
        return None if found is None else (req, found[0], found[1])
    if mtype == 0x83:
        name = str_to_end(data, 10, len(data))
        return None if name is None else (req, name, None)
    return None


def _read(mtype, req, body):
    """Decode a body of the given type into a message through a `_Reader`: every type, and
    what is wrong with a body."""
    r = _Reader(body)
    if mtype == 0x01 or mtype == 0x02:
        msg = (Register if mtype == 0x01 else Unregister)(req, r.str(), r.strlist())
    elif mtype == 0x03:
        msg = Search(req, r.str())
    elif mtype == 0x04:
        msg = Get(req, r.str(), r.u64())
    elif mtype == 0x81:
        msg = Ack(req, r.u64())
    elif mtype == 0x82:
        msg = Found(req, r.str(), r.strlist())
    elif mtype == 0x83:
        msg = NotFound(req, r.str())
    elif mtype == 0x84:
        size, offset = r.u64(), r.u64()
        msg = FileHeader(req, size, offset, bytes(r.take(32)))
        if offset > size:
            raise DecodeError('offset beyond size')
    elif mtype == 0xFF:
        msg = Error(req, r.u16(), r.str())
    else:
        return None
    r.end()
    return msg


class Decoder:
    """Incremental decoder: feed bytes, get messages, Chunks and ProtocolErrors.

    A FOUND or NOTFOUND arriving alone (a client's answer when it has one search out) is
    read without the frame loop (`_lone_answer`; `lone_answers` False: the loop reads it)."""

    lone_answers = True

    def __init__(self, max_frame=MAX_FRAME):
        self.max_frame = max_frame
        self._buf = bytearray()
        self._raw_left = 0
        self.broken = False

    def between_frames(self):
        """True when the next byte fed would begin a frame (not a FILE's raw bytes)."""
        return not self._buf and not self._raw_left and not self.broken

    @property
    def pending(self):
        """Bytes buffered but not yet decoded (non-zero at EOF means truncation)."""
        return len(self._buf) + self._raw_left

    def feed(self, data):
        """Consume bytes and return the list of decoded items."""
        if self.lone_answers and not self._buf and not self._raw_left and not self.broken:
            msg = self._lone_answer(data)
            if msg is not None:
                return [msg]
        out = []
        if self.broken:
            return out
        if self._raw_left and not self._buf:
            # Fast path for file data: hand the caller's buffer through without copying.
            n = min(len(data), self._raw_left)
            self._raw_left -= n
            out.append(Chunk(data[:n] if n < len(data) else data, self._raw_left == 0))
            data = data[n:]
            if not data:
                return out
        if self._buf:
            self._buf += data
            pos = self._drain(self._buf, out)
            del self._buf[:len(self._buf) if pos is None else pos]
        else:               # nothing held: decode from data itself, keep only the rest
            pos = self._drain(data, out)
            if pos is not None and pos < len(data):
                self._buf += data[pos:]
        return out

    def _lone_answer(self, data):
        """The message of data when it is exactly one well-formed FOUND or NOTFOUND frame that
        _drain would read (`lone_answer`), else None. Nothing is held before or after it, so
        the decoder's state is what _drain leaves."""
        answer = lone_answer(data, self.max_frame)
        if answer is None:
            return None
        req, name, holders = answer
        return NotFound(req, name) if holders is None else Found(req, name, holders)

    def _drain(self, buf, out):
        """Decode whatever complete items buf holds; return how many bytes of it were
        consumed, or None when the stream broke (nothing more is decoded)."""
        pos = 0
        while True:
            if self._raw_left:
                n = min(len(buf) - pos, self._raw_left)
                if n == 0:
                    break
                self._raw_left -= n
                out.append(Chunk(bytes(buf[pos:pos + n]), self._raw_left == 0))
                pos += n
                continue
            if len(buf) - pos < 4:
                break
            length = _U32.unpack_from(buf, pos)[0]
            if length > self.max_frame or length < _HEAD_AFTER_LEN:
                self.broken = True
                out.append(ProtocolError(0, ERR_TOO_LARGE if length > self.max_frame
                                         else ERR_MALFORMED,
                                         'frame length %d outside [%d, %d]'
                                         % (length, _HEAD_AFTER_LEN, self.max_frame), True))
                return None
            if len(buf) - pos < 4 + length:
                break
            _, version, mtype, req = _HEAD.unpack_from(buf, pos)
            body = bytes(buf[pos + 4 + _HEAD_AFTER_LEN:pos + 4 + length])
            pos += 4 + length
            out.append(self._one(version, mtype, req, body))
            if isinstance(out[-1], FileHeader):
                self._raw_left = out[-1].size - out[-1].offset
                if self._raw_left == 0:
                    out.append(Chunk(b'', True))
        return pos

    def _one(self, version, mtype, req, body):
        """Decode one complete frame."""
        if version != PROTOCOL_VERSION:
            return ProtocolError(req, ERR_VERSION, 'unsupported protocol version %d (speak %d)'
                                 % (version, PROTOCOL_VERSION), False)
        try:
            msg = None
            if mtype == 0x03 or mtype == 0x82 or mtype == 0x83:
                msg = _direct(mtype, req, body)
            if msg is None:
                msg = _read(mtype, req, body)
        except (DecodeError, struct.error) as exc:
            return ProtocolError(req, ERR_MALFORMED, 'malformed type 0x%02x frame: %s'
                                 % (mtype, exc), False)
        if msg is None:
            return ProtocolError(req, ERR_UNKNOWN_TYPE, 'unknown message type 0x%02x' % mtype,
                                 False)
        return msg
