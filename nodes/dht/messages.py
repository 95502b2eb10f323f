"""Wire protocol of the DHT file-sharing system: the frame, the messages, their encoding.

Sans-I/O: `encode(msg)` gives bytes; `decoding.Decoder.feed(data)` takes bytes and gives
messages, raw file chunks or `ProtocolError`s. Nothing here touches a socket or a clock.
Users import both through `codec`.

Frame (all integers big-endian)::

    u32 length    number of bytes after this field (version + type + req + body)
    u8  version   PROTOCOL_VERSION (1)
    u8  type      see the table below
    u32 req       request id chosen by the requester, echoed in the reply (pipelining)
    ...           body

Body field types: ``str`` = u16 length + UTF-8; ``strlist`` = u32 count + that many ``str``;
``u64``; ``bytes32`` (a SHA-256 digest). A body must be consumed exactly (no trailing bytes).

====  ==========  ===========================  ============================================
type  name        body                         meaning
====  ==========  ===========================  ============================================
0x01  REGISTER    str addr, strlist names      peer at addr (IP:PORT) holds these files
0x02  UNREGISTER  str addr, strlist names      peer at addr no longer holds these files
0x03  SEARCH      str name                     who holds file `name`?
0x04  GET         str name, u64 offset         (to a peer) send file `name` from `offset`
0x81  ACK         u64 count                    REGISTER/UNREGISTER done; count entries changed
0x82  FOUND       str name, strlist holders    holders of `name` (addresses), never empty
0x83  NOTFOUND    str name                     the index has no holder of `name`
0x84  FILE        u64 size, u64 offset,        reply to GET; followed on the stream by exactly
                  bytes32 sha256               size - offset raw bytes (not framed)
0xFF  ERROR       u16 code, str text           request failed; see ERR_* codes
====  ==========  ===========================  ============================================

Errors: a frame whose length exceeds the decoder's `max_frame` is fatal for the connection
(the stream cannot be trusted to resynchronise), so the receiver replies ERROR and closes.
A frame with a wrong version, unknown type or malformed body has a trustworthy length, so it
is skipped: the receiver replies ERROR with the frame's req id and keeps reading.
"""

import struct
from dataclasses import dataclass

PROTOCOL_VERSION = 1
MAX_FRAME = 8 * 1024 * 1024
MAX_STR = 0xFFFF

ERR_MALFORMED = 1
ERR_VERSION = 2
ERR_UNKNOWN_TYPE = 3
ERR_TOO_LARGE = 4
ERR_NO_SUCH_FILE = 5
ERR_UNEXPECTED = 6
ERR_INTERNAL = 7

_HEAD = struct.Struct('>IBBI')      # length, version, type, req
_HEAD_AFTER_LEN = 1 + 1 + 4
_SEARCH_HEAD = struct.Struct('>IBBIH')   # a SEARCH's header and its name's length
_U16 = struct.Struct('>H')
_U32 = struct.Struct('>I')
_U64 = struct.Struct('>Q')


@dataclass(frozen=True)
class Register:
    req: int
    addr: str
    names: tuple
    TYPE = 0x01


@dataclass(frozen=True)
class Unregister:
    req: int
    addr: str
    names: tuple
    TYPE = 0x02


@dataclass(frozen=True)
class Search:
    req: int
    name: str
    TYPE = 0x03


@dataclass(frozen=True)
class Get:
    req: int
    name: str
    offset: int
    TYPE = 0x04


@dataclass(frozen=True)
class Ack:
    req: int
    count: int
    TYPE = 0x81


@dataclass(frozen=True)
class Found:
    req: int
    name: str
    holders: tuple
    TYPE = 0x82


@dataclass(frozen=True)
class NotFound:
    req: int
    name: str
    TYPE = 0x83


@dataclass(frozen=True)
class FileHeader:
    req: int
    size: int
    offset: int
    sha256: bytes
    TYPE = 0x84


@dataclass(frozen=True)
class Error:
    req: int
    code: int
    text: str
    TYPE = 0xFF


@dataclass(frozen=True)
class Chunk:
    """Raw file bytes that follow a FILE header (not a frame of its own)."""
    data: bytes
    last: bool


@dataclass(frozen=True)
class ProtocolError:
    """A frame the decoder rejected; `fatal` means the connection must be closed."""
    req: int
    code: int
    text: str
    fatal: bool


class DecodeError(ValueError):
    """Raised inside body parsing; turned into a ProtocolError by the decoder."""


def _str(s):
    """Encode one str field."""
    b = s.encode('utf-8')
    if len(b) > MAX_STR:
        raise ValueError('string field longer than %d bytes' % MAX_STR)
    return _U16.pack(len(b)) + b


def _strlist(items):
    """Encode one strlist field."""
    return _U32.pack(len(items)) + b''.join([_str(s) for s in items])


strlist_field = _strlist        # for search_frames, which writes FOUND from its parts


def _body(msg):
    """Encode the body of a message."""
    t = type(msg)
    if t is Register or t is Unregister:
        return _str(msg.addr) + _strlist(msg.names)
    if t is Search:
        return _str(msg.name)
    if t is Get:
        return _str(msg.name) + _U64.pack(msg.offset)
    if t is Ack:
        return _U64.pack(msg.count)
    if t is Found:
        return _str(msg.name) + _strlist(msg.holders)
    if t is NotFound:
        return _str(msg.name)
    if t is FileHeader:
        if len(msg.sha256) != 32:
            raise ValueError('sha256 must be 32 bytes')
        return _U64.pack(msg.size) + _U64.pack(msg.offset) + msg.sha256
    if t is Error:
        return _U16.pack(msg.code) + _str(msg.text[:2000])
    raise TypeError('not a protocol message: %r' % (msg,))


def encode(msg, version=PROTOCOL_VERSION):
    """Return the frame bytes of one message."""
    body = _body(msg)
    return _HEAD.pack(_HEAD_AFTER_LEN + len(body), version, msg.TYPE, msg.req) + body


def encode_search(req, name, version=PROTOCOL_VERSION):
    """encode(Search(req, name)) without the message object: a client sends one per search,
    and building a frozen dataclass costs more than encoding it. The header and the name's
    length are packed at once (what `_str` checks, checked here)."""
    b = name.encode('utf-8')
    n = len(b)
    if n > MAX_STR:
        raise ValueError('string field longer than %d bytes' % MAX_STR)
    return _SEARCH_HEAD.pack(_HEAD_AFTER_LEN + 2 + n, version, 0x03, req, n) + b


def frame_size(msg):
    """Return the encoded size of a message in bytes."""
    return len(encode(msg))
