"""Datagrams of the reliable-UDP protocol (seed 004): encoding and bounded decoding.

Every datagram starts with the same 14 bytes: magic ``RU``, version, type and the 64-bit
session id the sender drew for this transfer, so a datagram of another transfer (or of
another program) is told apart before anything else is read. Then, by type:

========  ====================================================================
META      size (8), block (2), payload (2), SHA-256 (32), name length (1), name
META_OK   (nothing): the receiver is ready
DATA      block number (4), index in block (2), flags (1), payload bytes
ACK       block number (4), count of datagrams in it (2), bitmap of the missing
POLL      block number (4): "which of this block's datagrams are missing?"
DONE      ok (1): every byte arrived and the SHA-256 matched (0: it did not)
ERROR     a one-sentence reason, UTF-8
========  ====================================================================

``decode`` never raises: a datagram that is too short, too long, of an unknown type or
version, or whose fields are out of range comes back as ``None`` with the reason, so the
cores count drops by reason and go on.
"""

import dataclasses
import struct

MAGIC = b'RU'
VERSION = 1
HEADER = struct.Struct('!2sBBQ')
META_FIELDS = struct.Struct('!QHH32sB')
DATA_FIELDS = struct.Struct('!IHB')
ACK_FIELDS = struct.Struct('!IH')
POLL_FIELDS = struct.Struct('!I')
MAX_DATAGRAM = 65507            # the largest UDP payload over IPv4
MAX_PAYLOAD = MAX_DATAGRAM - HEADER.size - DATA_FIELDS.size
MAX_BLOCK = 4096                # datagrams per block
MAX_ERROR = 400
FLAG_LAST = 1                   # DATA: the last datagram of a (re)transmission round
META, META_OK, DATA, ACK, POLL, DONE, ERROR = range(1, 8)
NAMES = {META: 'META', META_OK: 'META_OK', DATA: 'DATA', ACK: 'ACK', POLL: 'POLL',
         DONE: 'DONE', ERROR: 'ERROR'}


@dataclasses.dataclass(frozen=True)
class Datagram:
    """One decoded datagram; fields other than kind and session depend on the kind."""
    kind: int
    session: int
    size: int = 0
    block: int = 0              # META: datagrams per block; DATA/ACK/POLL: block number
    payload: int = 0            # META: payload bytes per datagram
    sha256: bytes = b''
    name: str = ''
    index: int = 0
    flags: int = 0
    data: bytes = b''
    count: int = 0
    missing: tuple = ()
    ok: bool = False
    reason: str = ''


def _head(kind, session):
    return HEADER.pack(MAGIC, VERSION, kind, session)


def meta(session, size, block, payload, sha256, name):
    """Encode META."""
    raw = name.encode('utf-8')
    return _head(META, session) + META_FIELDS.pack(size, block, payload, sha256,
                                                   len(raw)) + raw


def meta_ok(session):
    """Encode META_OK."""
    return _head(META_OK, session)


def data(session, block, index, payload, last=False):
    """Encode DATA."""
    return _head(DATA, session) + DATA_FIELDS.pack(block, index, FLAG_LAST if last else 0) \
        + bytes(payload)


def ack(session, block, count, missing):
    """Encode ACK: block `block` holds `count` datagrams; `missing` are their indices."""
    bitmap = bytearray((count + 7) // 8)
    for i in missing:
        bitmap[i >> 3] |= 1 << (i & 7)
    return _head(ACK, session) + ACK_FIELDS.pack(block, count) + bytes(bitmap)


def poll(session, block):
    """Encode POLL."""
    return _head(POLL, session) + POLL_FIELDS.pack(block)


def done(session, ok):
    """Encode DONE."""
    return _head(DONE, session) + bytes([1 if ok else 0])


def error(session, reason):
    """Encode ERROR with a reason cut to MAX_ERROR bytes."""
    return _head(ERROR, session) + reason.encode('utf-8')[:MAX_ERROR]


def decode(raw):
    """Return (Datagram, None) or (None, reason) for any bytes."""
    if len(raw) < HEADER.size:
        return None, 'short'
    if len(raw) > MAX_DATAGRAM:
        return None, 'oversized'
    magic, version, kind, session = HEADER.unpack_from(raw)
    if magic != MAGIC or version != VERSION:
        return None, 'foreign'
    body = memoryview(raw)[HEADER.size:]
    try:
        return _BODY[kind](session, body), None
    except KeyError:
        return None, 'unknown type'
    except (struct.error, ValueError, UnicodeDecodeError):
        return None, 'malformed'


def _meta(session, body):
    size, block, payload, sha, length = META_FIELDS.unpack_from(body)
    name = bytes(body[META_FIELDS.size:]).decode('utf-8')
    if len(name.encode('utf-8')) != length or not 1 <= block <= MAX_BLOCK \
            or not 1 <= payload <= MAX_PAYLOAD:
        raise ValueError('meta fields')
    return Datagram(META, session, size=size, block=block, payload=payload, sha256=sha,
                    name=name)


def _data(session, body):
    block, index, flags = DATA_FIELDS.unpack_from(body)
    if index >= MAX_BLOCK or flags & ~FLAG_LAST:
        raise ValueError('data fields')
    return Datagram(DATA, session, block=block, index=index, flags=flags,
                    data=bytes(body[DATA_FIELDS.size:]))


def _ack(session, body):
    block, count = ACK_FIELDS.unpack_from(body)
    bitmap = body[ACK_FIELDS.size:]
    if not 1 <= count <= MAX_BLOCK or len(bitmap) != (count + 7) // 8:
        raise ValueError('ack fields')
    missing = tuple(i for i in range(count) if bitmap[i >> 3] >> (i & 7) & 1)
    return Datagram(ACK, session, block=block, count=count, missing=missing)


def _done(session, body):
    if len(body) != 1 or body[0] > 1:
        raise ValueError('done fields')
    return Datagram(DONE, session, ok=bool(body[0]))


def _exact(kind, length):
    def parse(session, body):
        if len(body) != length:
            raise ValueError('length')
        return Datagram(kind, session) if kind != POLL else Datagram(
            POLL, session, block=POLL_FIELDS.unpack_from(body)[0])
    return parse


def _error(session, body):
    if len(body) > MAX_ERROR:
        raise ValueError('error length')
    return Datagram(ERROR, session, reason=bytes(body).decode('utf-8', 'replace'))


_BODY = {META: _meta, META_OK: _exact(META_OK, 0), DATA: _data, ACK: _ack,
         POLL: _exact(POLL, POLL_FIELDS.size), DONE: _done, ERROR: _error}
