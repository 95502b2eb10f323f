"""Property tests of the DHT wire decoder with Hypothesis.

The hand-written cases in test_dht_codec.py pin each message and each kind of bad frame;
these check what must hold for every input a peer could send: a stream decodes to the same
items however the network splits it, arbitrary bytes never raise and never make the
decoder hold more than one frame, and a frame the decoder cannot trust ends the stream.
"""

import random
import struct

from hypothesis import given, settings, strategies as st

from nodes.dht import codec

SETTINGS = settings(max_examples=300, deadline=None)    # shared, noisy machine: no timing

text = st.text(st.characters(blacklist_categories=('Cs',)), max_size=40)
names = st.lists(text, max_size=6).map(tuple)
req = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)


@st.composite
def file_header_with_body(draw):
    """A FILE header and the raw bytes that follow it on the stream."""
    body = draw(st.binary(max_size=300))
    offset = draw(st.integers(0, 2**40))
    header = codec.FileHeader(draw(req), offset + len(body), offset,
                              draw(st.binary(min_size=32, max_size=32)))
    return header, body


message = st.one_of(
    st.builds(codec.Register, req, text, names),
    st.builds(codec.Unregister, req, text, names),
    st.builds(codec.Search, req, text),
    st.builds(codec.Get, req, text, u64),
    st.builds(codec.Ack, req, u64),
    st.builds(codec.Found, req, text, names),
    st.builds(codec.NotFound, req, text),
    st.builds(codec.Error, req, st.integers(0, 0xFFFF), text),
)
stream_item = st.one_of(message.map(lambda m: (m, b'')), file_header_with_body())


def feed_in_pieces(data, cuts, decoder=None):
    """Feed `data` split at the given cut points; return the decoder's items."""
    dec = decoder or codec.Decoder()
    out, start = [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        out.extend(dec.feed(data[start:cut]))
        start = cut
    return out, dec


def normalise(items):
    """Items with adjacent Chunks merged: how the network splits file bytes is not meaningful."""
    out = []
    for item in items:
        if isinstance(item, codec.Chunk) and out and isinstance(out[-1], codec.Chunk) \
                and not out[-1].last:
            out[-1] = codec.Chunk(bytes(out[-1].data) + bytes(item.data), item.last)
        elif isinstance(item, codec.Chunk):
            out.append(codec.Chunk(bytes(item.data), item.last))
        else:
            out.append(item)
    return out


@SETTINGS
@given(st.lists(stream_item, max_size=12), st.data())
def test_any_stream_decodes_the_same_however_it_is_split(items, data):
    stream = b''.join(codec.encode(m) + body for m, body in items)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    expect = []
    for m, body in items:
        expect.append(m)
        if isinstance(m, codec.FileHeader):
            expect.append(codec.Chunk(body, True))
    got, dec = feed_in_pieces(stream, cuts)
    assert normalise(got) == expect
    assert dec.pending == 0 and not dec.broken


def awaited_file_bytes(items):
    """Raw file bytes the decoder still expects after these items (the last FILE header's)."""
    left = 0
    for item in items:
        if isinstance(item, codec.FileHeader):
            left = item.size - item.offset
        elif isinstance(item, codec.Chunk):
            left -= len(item.data)
    return left


@SETTINGS
@given(st.binary(max_size=2000), st.lists(st.integers(0, 2000), max_size=10))
def test_arbitrary_bytes_never_raise_and_never_buffer_more_than_a_frame(junk, cuts):
    max_frame = 256
    dec = codec.Decoder(max_frame=max_frame)
    out, start = [], 0
    for cut in sorted(c for c in set(cuts) if c < len(junk)) + [len(junk)]:
        out.extend(dec.feed(junk[start:cut]))
        start = cut
        # At most one incomplete frame header + body may wait for more bytes (the rest of
        # `pending` is file bytes announced by a FILE header, awaited, not held).
        assert dec.pending - awaited_file_bytes(out) <= 4 + max_frame
    kinds = (codec.Register, codec.Unregister, codec.Search, codec.Get, codec.Ack,
             codec.Found, codec.NotFound, codec.FileHeader, codec.Error, codec.Chunk,
             codec.ProtocolError)
    assert all(isinstance(item, kinds) for item in out)
    fatal = [i for i, item in enumerate(out)
             if isinstance(item, codec.ProtocolError) and item.fatal]
    if fatal:   # a fatal error is the last thing the stream ever yields
        assert fatal == [len(out) - 1] and dec.broken
        assert dec.feed(codec.encode(codec.Ack(1, 1))) == []


@SETTINGS
@given(st.lists(message, min_size=1, max_size=5), st.integers(0, 4),
       st.binary(min_size=1, max_size=40), st.integers(0, 255))
def test_a_damaged_body_is_skipped_and_the_next_frame_still_decodes(msgs, which, junk, mtype):
    """A frame with a sane length but a bad body costs that frame only (an ERROR reply)."""
    bad = struct.pack('>IBBI', 6 + len(junk), codec.PROTOCOL_VERSION, mtype, 77) + junk
    which = min(which, len(msgs))
    stream = b''.join(codec.encode(m) for m in msgs[:which]) + bad + \
        b''.join(codec.encode(m) for m in msgs[which:])
    out, dec = feed_in_pieces(stream, [])
    if mtype == codec.FileHeader.TYPE and len(junk) == 48:
        return      # a well-formed FILE header: the next bytes are its file body, by design
    decoded = [i for i in out if not isinstance(i, codec.ProtocolError)]
    errors = [i for i in out if isinstance(i, codec.ProtocolError)]
    assert not dec.broken
    if errors:      # junk that was not a valid body: exactly one non-fatal error for req 77
        assert len(errors) == 1 and errors[0].req == 77 and not errors[0].fatal
        assert decoded == list(msgs)
    else:           # junk that happened to be a valid message of that type
        assert len(decoded) == len(msgs) + 1 and decoded[which].req == 77


_TEXT = st.text(max_size=12)
_ANSWERS = st.one_of(
    st.builds(codec.Search, st.just(7), _TEXT), st.builds(codec.NotFound, st.just(7), _TEXT),
    st.builds(codec.Found, st.just(7), _TEXT, st.lists(_TEXT, max_size=4).map(tuple)))


@st.composite
def answer_bodies(draw):
    """(type, body): a SEARCH, NOTFOUND or FOUND body, whole or damaged (cut, lengthened,
    a byte changed, a length field set to anything), or any bytes at all."""
    msg = draw(_ANSWERS)
    body = codec.encode(msg)[10:]
    how = draw(st.sampled_from(['whole', 'cut', 'longer', 'byte', 'junk']))
    if how == 'cut' and body:
        body = body[:draw(st.integers(0, len(body) - 1))]
    elif how == 'longer':
        body += draw(st.binary(min_size=1, max_size=4))
    elif how == 'byte' and body:
        i = draw(st.integers(0, len(body) - 1))
        body = body[:i] + bytes([draw(st.integers(0, 255))]) + body[i + 1:]
    elif how == 'junk':
        body = draw(st.binary(max_size=30))
    mtype = msg.TYPE if how != 'junk' else draw(st.sampled_from([0x03, 0x82, 0x83]))
    return mtype, body


@settings(max_examples=3000, deadline=None)
@given(answer_bodies())
def test_a_search_or_its_answer_read_directly_is_what_the_reader_reads(case):
    """codec._direct (the fast path of the frames a search exchanges) accepts exactly the
    bodies the reader accepts and builds the same message; the rest it leaves to the reader,
    which says what is wrong."""
    mtype, body = case
    try:
        expected = codec._read(mtype, 7, body)
    except (codec.DecodeError, struct.error):
        expected = None
    assert codec._direct(mtype, 7, body) == expected


def _encoded(fn, *args):
    """fn's bytes, or the type of what it raised."""
    try:
        return fn(*args)
    except Exception as exc:     # noqa: BLE001 - compared, not hidden
        return type(exc)


@SETTINGS
@given(req, st.one_of(st.text(max_size=40), st.text(alphabet='ab\u00e9', min_size=21000,
                                                      max_size=33000)))
def test_a_search_encoded_from_its_fields_is_the_encoded_message(r, name):
    """codec.encode_search (the client's SEARCH, no message object) writes encode's bytes,
    and fails where encode fails (a lone surrogate, a name over MAX_STR bytes)."""
    assert _encoded(codec.encode_search, r, name) == _encoded(codec.encode, codec.Search(r, name))


def _answer_pieces(rng):
    """Pieces of a stream a client reads, mostly one whole frame each: FOUND and NOTFOUND
    (well formed, damaged, of another version), FILE headers with their raw bytes (which may
    look like an answer), other frames, sometimes two frames at once or half of one."""
    def frame():
        req = rng.randrange(2 ** 32)
        name = rng.choice(['a', 'émile.bin', '', 'x' * 40])
        msg = rng.choice([codec.Found(req, name, tuple(rng.sample(['h1:1', 'é:2', ''], 2))),
                          codec.NotFound(req, name), codec.Ack(req, 3), codec.Search(req, name)])
        data = bytearray(codec.encode(msg))
        how = rng.random()
        if how < 0.1:
            data[rng.randrange(len(data))] = rng.randrange(256)         # a byte changed
        elif how < 0.13:
            data[3] += rng.choice([-1, 1])                              # the length
        elif how < 0.16:
            data[4] = 2                                                 # another version
        elif how < 0.24:
            body = codec.encode(codec.NotFound(req, name))
            data = bytearray(codec.encode(codec.FileHeader(req, len(body), 0, b'\0' * 32))
                             + body)
            pieces.append(bytes(data[:-len(body)]))                    # raw bytes next
            data = data[-len(body):]
        return bytes(data)
    pieces = []
    for _ in range(rng.randrange(1, 10)):
        data = frame()
        how = rng.random()
        if how < 0.1:
            data += frame()
        elif how < 0.2:
            cut = rng.randrange(1, len(data))
            pieces.append(data[:cut])
            data = data[cut:]
        pieces.append(data)
    return pieces


def _fed(pieces, max_frame, lone):
    dec = codec.Decoder(max_frame)
    dec.lone_answers = lone
    out = [dec.feed(piece) for piece in pieces]
    return out, dec.pending, dec.broken, dec.between_frames()


def test_a_lone_answer_read_at_once_is_what_the_frame_loop_reads():
    """Decoder._lone_answer (a FOUND or NOTFOUND arriving alone, read without the frame loop)
    gives the same items, pending bytes and state as the loop, whatever the stream and the
    decoder's frame limit."""
    rng = random.Random(39)
    lone = 0
    for _ in range(3000):
        pieces = _answer_pieces(rng)
        max_frame = rng.choice([codec.MAX_FRAME, 20, 30])
        assert _fed(pieces, max_frame, True) == _fed(pieces, max_frame, False)
        dec = codec.Decoder(max_frame)
        lone += sum(dec._lone_answer(p) is not None for p in pieces)
    assert lone > 2500
