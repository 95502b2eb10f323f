"""Unit tests of the DHT wire protocol: round trips and every kind of bad input."""

import struct

import pytest

from nodes.dht import codec

DIGEST = bytes(range(32))
MESSAGES = [
    codec.Register(1, '10.0.0.1:9000', ('a.txt', 'b.bin', 'ünïcode')),
    codec.Unregister(2, '10.0.0.1:9000', ()),
    codec.Search(3, 'a.txt'),
    codec.Get(4, 'a.txt', 12345678901),
    codec.Ack(5, 7),
    codec.Found(6, 'a.txt', ('10.0.0.1:9000', '10.0.0.2:9000')),
    codec.NotFound(7, 'zzz'),
    codec.FileHeader(8, 10, 10, DIGEST),
    codec.Error(0xFFFFFFFF, codec.ERR_MALFORMED, 'bad'),
]


def frame(mtype, req, body, version=codec.PROTOCOL_VERSION):
    """Build a raw frame by hand."""
    return struct.pack('>IBBI', 6 + len(body), version, mtype, req) + body


@pytest.mark.parametrize('msg', MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(msg):
    out = codec.Decoder().feed(codec.encode(msg))
    if isinstance(msg, codec.FileHeader) and msg.size == msg.offset:
        assert out == [msg, codec.Chunk(b'', True)]     # an empty body still ends
    else:
        assert out == [msg]


def test_byte_by_byte_and_many_at_once():
    data = b''.join(codec.encode(m) for m in MESSAGES)
    dec = codec.Decoder()
    got = []
    for i in range(len(data)):
        got.extend(dec.feed(data[i:i + 1]))
    # The FILE header with size == offset announces an empty body: one empty last Chunk.
    expect = MESSAGES[:8] + [codec.Chunk(b'', True)] + MESSAGES[8:]
    assert got == expect
    assert codec.Decoder().feed(data) == expect
    assert dec.pending == 0


def test_file_header_then_raw_bytes_then_frames():
    body = b'x' * 1000
    data = codec.encode(codec.FileHeader(1, 1000, 0, DIGEST)) + body + codec.encode(codec.Ack(2, 0))
    dec = codec.Decoder()
    items = []
    for i in range(0, len(data), 77):
        items.extend(dec.feed(data[i:i + 77]))
    chunks = [i for i in items if isinstance(i, codec.Chunk)]
    assert b''.join(c.data for c in chunks) == body
    assert [c.last for c in chunks].count(True) == 1 and chunks[-1].last
    assert items[0] == codec.FileHeader(1, 1000, 0, DIGEST) and items[-1] == codec.Ack(2, 0)


def test_truncated_frame_stays_pending():
    data = codec.encode(codec.Search(1, 'abc'))
    dec = codec.Decoder()
    assert dec.feed(data[:-1]) == []
    assert dec.pending == len(data) - 1


def test_oversized_frame_is_fatal():
    dec = codec.Decoder(max_frame=100)
    out = dec.feed(struct.pack('>I', 101) + b'\x01' * 10)
    assert len(out) == 1 and out[0].code == codec.ERR_TOO_LARGE and out[0].fatal
    assert dec.broken and dec.feed(codec.encode(codec.Search(1, 'a'))) == []


def test_length_too_small_is_fatal():
    out = codec.Decoder().feed(struct.pack('>I', 2) + b'\x01\x03')
    assert out[0].fatal and out[0].code == codec.ERR_MALFORMED


@pytest.mark.parametrize('raw, code', [
    (frame(0x03, 9, b'\x00\x01a', version=2), codec.ERR_VERSION),
    (frame(0x42, 9, b''), codec.ERR_UNKNOWN_TYPE),
    (frame(0x03, 9, b'\x00\x05ab'), codec.ERR_MALFORMED),            # string runs past the end
    (frame(0x03, 9, b'\x00\x01ab'), codec.ERR_MALFORMED),            # trailing byte
    (frame(0x03, 9, b'\x00\x02\xff\xfe'), codec.ERR_MALFORMED),      # not UTF-8
    (frame(0x01, 9, b'\x00\x01a' + b'\xff\xff\xff\xff'), codec.ERR_MALFORMED),  # huge count
    (frame(0x84, 9, struct.pack('>QQ', 1, 2) + DIGEST), codec.ERR_MALFORMED),  # offset > size
], ids=['version', 'unknown-type', 'short-string', 'trailing', 'utf8', 'count', 'offset'])
def test_bad_frames_are_skipped_not_fatal(raw, code):
    dec = codec.Decoder()
    out = dec.feed(raw + codec.encode(codec.Search(10, 'ok')))
    assert len(out) == 2
    assert isinstance(out[0], codec.ProtocolError) and out[0].code == code
    assert out[0].req == 9 and not out[0].fatal
    assert out[1] == codec.Search(10, 'ok')


def test_encode_rejects_bad_values():
    with pytest.raises(ValueError):
        codec.encode(codec.Search(1, 'x' * 70000))
    with pytest.raises(ValueError):
        codec.encode(codec.FileHeader(1, 1, 0, b'short'))
    with pytest.raises(TypeError):
        codec.encode(codec.Chunk(b'', True))
