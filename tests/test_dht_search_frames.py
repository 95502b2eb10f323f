"""An index server's SEARCH fast path (`nodes.dht.search_frames`) against the general path.

A connection answers well-formed SEARCH frames from their bytes; one with `fast_search`
False decodes every frame and encodes every reply. Both must write the same bytes, close
at the same call and count the same, whatever arrives: good searches (names held or not,
non-ASCII), SEARCH frames that are short, long, not UTF-8 or of another version, registers
that change the holders between searches, FILE headers (whose raw bytes follow), unknown
types, a frame too long to trust, all cut at random points.
"""

import random
import struct

from nodes.dht import codec, search_frames
from nodes.dht.server_core import ServerConnection, ServerCore

NAMES = ['a.txt', 'b', 'émile.bin', 'x' * 255, 'ünï/cödé', '', 'f%d' % 7]
ADDRS = ['10.0.0.%d:8000' % i for i in range(1, 5)]


def _search_frame(rng, req):
    """A SEARCH frame, well formed or not."""
    name = rng.choice(NAMES).encode('utf-8')
    body = struct.pack('>H', len(name)) + name
    kind = rng.random()
    if kind < 0.08:
        body = body[:rng.randrange(len(body) + 1)]          # short
    elif kind < 0.14:
        body += bytes([rng.randrange(256)])                 # trailing byte
    elif kind < 0.20:
        body = struct.pack('>H', 2) + b'\xff\xfe'           # not UTF-8
    elif kind < 0.24:
        body = struct.pack('>H', len(name) + 3) + name      # length beyond the body
    version = 2 if rng.random() < 0.04 else codec.PROTOCOL_VERSION
    return struct.pack('>IBBI', 6 + len(body), version, 0x03, req) + body


def _stream(rng, n):
    """n frames of a client that mostly searches."""
    out = []
    for _ in range(n):
        req = rng.randrange(2 ** 32)
        kind = rng.random()
        if kind < 0.6:
            out.append(_search_frame(rng, req))
        elif kind < 0.75:
            names = tuple(rng.sample(NAMES, rng.randrange(1, 4)))
            msg = (codec.Register if rng.random() < 0.7 else codec.Unregister)(
                req, rng.choice(ADDRS), names)
            out.append(codec.encode(msg))
        elif kind < 0.8:        # raw bytes after it: a few, or what looks like a SEARCH
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(4))) \
                if rng.random() < 0.5 else _search_frame(rng, req)
            out.append(codec.encode(codec.FileHeader(req, len(body), 0, b'\0' * 32)) + body)
        elif kind < 0.85:
            out.append(struct.pack('>IBBI', 6, 1, rng.choice([0x05, 0x81, 0x82]), req))
        elif kind < 0.87:
            out.append(struct.pack('>I', 2 ** 31))          # fatal length
        else:
            out.append(codec.encode(codec.Search(req, rng.choice(NAMES))))
    return b''.join(out)


def _serve(data, cuts, fast, used=None):
    """Every call's (reply bytes, close) and the counters of a fresh server fed data;
    used (a list) gets one item per frame the fast path answered."""
    core = ServerCore('s1')
    for name in NAMES[:3]:
        core.store.add(name, ADDRS[0])
    if used is not None:
        answer = core.search_frame
        core.search_frame = lambda *item: used.append(item) or answer(*item)
    conn = ServerConnection(core)
    conn.fast_search = fast
    calls, start = [], 0
    for cut in sorted(cuts) + [len(data)]:
        calls.append(conn.receive(data[start:cut], 1.0))
        start = cut
        for _ in range(100):
            if not conn.waiting or calls[-1][1]:
                break
            calls.append(conn.more(1.0))
        if calls[-1][1]:
            break
    return calls, dict(core.counters), conn.buffered


def test_the_fast_path_writes_and_counts_what_the_general_path_does():
    rng = random.Random(13)
    used = []
    for _ in range(1500):
        data = _stream(rng, rng.randrange(1, 40))
        cuts = rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(4)))
        assert _serve(data, cuts, True, used) == _serve(data, cuts, False)
    assert len(used) > 5000


def test_a_well_formed_search_is_taken_apart_and_others_are_left_to_the_decoder():
    frame = codec.encode(codec.Search(7, 'émile.bin'))
    assert search_frames.read(frame, 0, len(frame) - 4) == (
        7, 'émile.bin', frame[10:])
    for bad in (frame[:-1], frame + b'x'):
        bad = struct.pack('>I', len(bad) - 4) + bad[4:]
        assert search_frames.read(bad, 0, len(bad) - 4) is None
    other = codec.encode(codec.NotFound(7, 'a'))
    assert search_frames.read(other, 0, len(other) - 4) is None


def test_answers_match_handle_and_encode_for_held_and_unknown_names():
    rng = random.Random(5)
    fast, slow = ServerCore('s1'), ServerCore('s1')
    for _ in range(3000):
        name = rng.choice(NAMES)
        if rng.random() < 0.3:
            addr, change = rng.choice(ADDRS[:2]), 'add' if rng.random() < 0.5 else 'remove'
            for core in (fast, slow):
                getattr(core.store, change)(name, addr)
        req = rng.randrange(2 ** 32)
        field = codec.encode(codec.Search(req, name))[10:]
        assert fast.search_frame(req, name, field) == codec.encode(
            slow.handle(codec.Search(req, name), 0.0))
    assert fast.counters == slow.counters
    assert fast.counters['found'] > 300 and fast.counters['not_found'] > 300


def _units(rng, n):
    """n pieces a client might write in one go: mostly one whole frame each (a SEARCH, well
    formed or not), sometimes two at once or half of one, a FILE header whose raw bytes
    (which may look like a SEARCH) come in the next piece, a fatal length."""
    out = []
    while len(out) < n:
        frame = _stream(rng, 1)
        kind = rng.random()
        if kind < 0.08:
            out.append(frame + _stream(rng, 1))
        elif kind < 0.14 and len(frame) > 1:
            cut = rng.randrange(1, len(frame))
            out += [frame[:cut], frame[cut:]]
        elif kind < 0.2:
            body = _search_frame(rng, rng.randrange(2 ** 32))
            out += [codec.encode(codec.FileHeader(1, len(body), 0, b'\0' * 32)), body]
        else:
            out.append(frame)
    return out


def _serve_pieces(pieces, fast, max_frame, decodes):
    """Each call's (reply, close, waiting, buffered, timer) and the counters at the end, a
    piece per call at a later time each; decodes (a list) gets one item per _decode call."""
    core = ServerCore('s1')
    for name in NAMES[:3]:
        core.store.add(name, ADDRS[0])
    conn = ServerConnection(core, max_frame=max_frame, idle_timeout=5.0, frame_timeout=2.0)
    conn.fast_search = fast
    decode = conn._decode
    conn._decode = lambda *a: decodes.append(a) or decode(*a)
    calls, now = [], 1.0
    for piece in pieces:
        now += 0.25
        out = conn.receive(piece, now)
        while not out[1] and conn.waiting:
            out = (out[0] + conn.more(now)[0], False)
        calls.append(out + (conn.waiting, conn.buffered, conn.get_timer()))
        if out[1]:
            break
    return calls, dict(core.counters)


def test_a_lone_search_frame_answered_at_once_leaves_what_the_general_path_leaves():
    """ServerConnection._lone_search (a call bringing exactly one SEARCH frame to an idle
    connection is answered without the buffer and the batch loop) against the general
    path, fed a piece at a time: the same replies, closes, waiting, buffered bytes and
    timer after every call, and the same counters, with decoder bounds that a search may
    pass."""
    rng = random.Random(39)
    lone = 0
    for _ in range(1500):
        pieces = _units(rng, rng.randrange(1, 12))
        max_frame = rng.choice([codec.MAX_FRAME, 12, 20])
        fast_decodes, slow_decodes = [], []
        assert _serve_pieces(pieces, True, max_frame, fast_decodes) == \
            _serve_pieces(pieces, False, max_frame, slow_decodes)
        lone += len(slow_decodes) - len(fast_decodes)
    assert lone > 2000


def test_the_timer_asked_with_no_frame_begun_is_the_timer_of_both_deadlines():
    """ServerConnection.get_timer answers from the idle deadline alone when no frame is
    begun (after most answers); here against the earlier of `_deadlines()` after every call
    of random connections, timed and not, some frames left unfinished."""
    rng = random.Random(40)
    shortcut = 0
    for _ in range(600):
        core = ServerCore('s1')
        conn = ServerConnection(core, idle_timeout=rng.choice([None, 5.0]),
                                frame_timeout=rng.choice([None, 2.0]))
        now = 1.0
        for piece in _units(rng, rng.randrange(1, 10)):
            now += 0.25
            out = conn.receive(piece, now)
            while not out[1] and conn.waiting and rng.random() < 0.7:
                out = conn.more(now)
            idle, frame = conn._deadlines()
            both = min([t for t in (idle, frame) if t is not None], default=None)
            assert conn.get_timer() == both
            shortcut += conn._begun is None
            if out[1]:
                break
    assert shortcut > 1000
