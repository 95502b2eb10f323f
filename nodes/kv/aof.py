"""The append-only log: record encoding and recovery of the key directory from a log file.

The log is the persistent storage (Bitcask-like, Sheehy and Smith 2010): every write command
appends one record, and at start-up the key directory is rebuilt by scanning the log from byte 0.
Record::

    MAGIC (1 byte, 0xA5) | crc32(payload) (4, big-endian) | len(payload) (4, big-endian) | payload
    payload = op (b'S' set, b'D' del, b'F' flushall) | len(key) (4, big-endian) | key | value

A flushall record carries no key length (its payload is the op byte alone). The checksum covers the
payload; the header's length field is protected by the payload checksum and by `max_payload`, which
stops a corrupt length from making recovery buffer the rest of the file.

`recover(chunks, storage)` keeps every record before the first bad one (truncated, bad magic, bad
checksum, malformed payload) and applies nothing after it, since a log written strictly in order
cannot hold a good record after a torn one; it reports the problem in one sentence. In 'memory'
storage the key directory maps key -> value; in 'log' storage key -> (value offset, value length)
in the file, so recovery holds one record plus one chunk whatever the values' size.
"""

import struct
import zlib
from dataclasses import dataclass

MAGIC = 0xA5
HEADER = struct.Struct('>BII')          # magic, crc32(payload), len(payload)
_KLEN = struct.Struct('>I')
_SET_HEAD = struct.Struct('>cI')        # op, len(key)
DEFAULT_MAX_PAYLOAD = 5 + 512 + (1 << 20)   # the core's default key and value limits
STORAGES = ('memory', 'log')


class LogReadError(Exception):
    """Reading a value back from the log failed or came back short."""


def encode_set(key, value):
    """The record of SET key value."""
    payload = b'S' + _KLEN.pack(len(key)) + key + value
    return HEADER.pack(MAGIC, zlib.crc32(payload), len(payload)) + payload


def encode_del(key):
    """The record of deleting one key."""
    payload = b'D' + _KLEN.pack(len(key)) + key
    return HEADER.pack(MAGIC, zlib.crc32(payload), len(payload)) + payload


def encode_flushall():
    """The record of FLUSHALL."""
    return HEADER.pack(MAGIC, zlib.crc32(b'F'), 1) + b'F'


def value_offset_in_record(key):
    """Offset of the value inside a set record of `key` (add the record's own offset)."""
    return HEADER.size + 5 + len(key)


def append_set(buf, key, value):
    """Append the record of SET key value to bytearray `buf` without building it twice."""
    head = _SET_HEAD.pack(b'S', len(key))
    crc = zlib.crc32(value, zlib.crc32(key, zlib.crc32(head)))
    buf += HEADER.pack(MAGIC, crc, 5 + len(key) + len(value))
    buf += head
    buf += key
    buf += value


@dataclass
class Recovery:
    """What a scan of the log found; `problem` is None or one sentence."""
    keydir: dict
    valid_bytes: int
    total_bytes: int
    records: int
    problem: object = None
    storage: str = 'memory'


def recover(chunks, storage='memory', max_payload=DEFAULT_MAX_PAYLOAD):
    """Rebuild the key directory from the log's bytes (an iterable of chunks from offset 0)."""
    if storage not in STORAGES:
        raise ValueError('storage must be memory or log, not %r' % (storage,))
    keydir = {}
    buf = bytearray()
    base = 0            # file offset of buf[0]
    total = records = 0
    problem = None
    for chunk in chunks:
        total += len(chunk)
        if problem is not None:
            continue                        # only counting the bytes after a bad record
        buf += chunk
        pos = 0
        while len(buf) - pos >= HEADER.size:
            at = base + pos
            magic, crc, plen = HEADER.unpack_from(buf, pos)
            if magic != MAGIC:
                problem = 'record at byte %d has a bad magic byte (0x%02x)' % (at, magic)
                break
            if plen < 1 or plen > max_payload:
                problem = ('record at byte %d declares a %d-byte payload, outside 1..%d (a '
                           'corrupt length, or a log written with larger limits)'
                           % (at, plen, max_payload))
                break
            end = pos + HEADER.size + plen
            if end > len(buf):
                break
            payload = bytes(memoryview(buf)[pos + HEADER.size:end])
            if zlib.crc32(payload) != crc:
                problem = 'record at byte %d fails its checksum' % at
                break
            problem = _apply(keydir, payload, at + HEADER.size, storage)
            if problem is not None:
                problem = 'record at byte %d is malformed (%s)' % (at, problem)
                break
            records += 1
            pos = end
        if pos:
            del buf[:pos]
            base += pos
    if problem is None and buf:
        if len(buf) < HEADER.size:
            what = '%d bytes of a %d-byte header' % (len(buf), HEADER.size)
        else:
            plen = HEADER.unpack_from(buf)[2]
            what = '%d bytes of a %d-byte record' % (len(buf), HEADER.size + plen)
        problem = 'log ends with a truncated record at byte %d (%s)' % (base, what)
    return Recovery(keydir, base, total, records, problem, storage)


def _apply(keydir, payload, payload_at, storage):
    """Apply one checked payload; returns None or what is wrong with it."""
    op = payload[0]
    if op == 0x46:                                  # F
        if len(payload) != 1:
            return 'flushall record with %d extra bytes' % (len(payload) - 1)
        keydir.clear()
        return None
    if len(payload) < 5 or op not in (0x53, 0x44):
        return 'unknown op or short payload'
    klen = _KLEN.unpack_from(payload, 1)[0]
    if 5 + klen > len(payload):
        return 'key length %d beyond the payload' % klen
    key = payload[5:5 + klen]
    if op == 0x44:                                  # D
        if len(payload) != 5 + klen:
            return 'del record with a value'
        keydir.pop(key, None)
    elif storage == 'memory':
        keydir[key] = payload[5 + klen:]
    else:
        keydir[key] = (payload_at + 5 + klen, len(payload) - 5 - klen)
    return None
