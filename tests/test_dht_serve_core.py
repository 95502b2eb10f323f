"""The peer's serving core on a virtual clock: its three timers, how every GET ends (sent,
failed for one reason, not found, refused), a busy catalog, and hashing handed to the
driver. No sockets: a small driver loop in memory carries out the core's actions."""

import hashlib

from nodes.dht import codec, transfer

DATA = bytes(range(256)) * 40


def sha(data):
    return hashlib.sha256(data).digest()


def get(req, name, offset=0):
    return codec.encode(codec.Get(req, name, offset))


class Catalog:
    """In-memory files; `busy` names raise Unavailable; digests are unknown (None) for the
    names in `stale`, so the core asks for a HashFile."""

    def __init__(self, files, busy=(), stale=()):
        self.files, self.busy, self.stale = files, set(busy), set(stale)
        self.open_now = 0

    def open(self, name, first=True):
        if name in self.busy:
            raise transfer.Unavailable('too many open files')
        data = self.files.get(name)
        if data is None:
            return None
        self.open_now += 1
        return len(data), None if name in self.stale else sha(data), name

    def close(self, source):
        self.open_now -= 1


def carry_out(conn, cat, actions, now, cut=None):
    """Do what a driver does with a batch: write frames, hash, send bodies (the body of
    `cut` stops after 10 bytes and the connection is lost). Return the replies decoded, or
    None if the connection was lost."""
    replies = []
    todo = list(actions)
    conn.pause_output()
    while todo:
        a = todo.pop(0)
        if type(a) is transfer.SendFrame:
            conn.written(a, now)
            replies += codec.Decoder().feed(a.data)
        elif type(a) is transfer.HashFile:
            todo[:0] = conn.hashed(a, sha(cat.files[a.name][:a.size]), now)
        elif type(a) is transfer.SendFile:
            cat.close(a.source)
            if a.name == cut:
                conn.closed('lost', now)
                return None
            conn.file_sent(a, a.count, now)
        else:
            return replies
    return replies


def adds_up(c):
    failed = sum(c['failed_' + r] for r in transfer.FAILURES)
    return c['gets'] == c['sent'] + c['failed'] + c['not_found'] + c['refused'] \
        and c['failed'] == failed


def test_an_idle_connection_closes_after_idle_timeout_and_traffic_pushes_that_back():
    conn = transfer.ServeConnection(Catalog({}), idle_timeout=10, now=0.0)
    assert conn.get_timer() == 10 and conn.handle_timer(9.9) == []
    conn.receive(get(1, 'nothing'), 5.0)
    assert conn.get_timer() == 15
    (close,) = conn.handle_timer(15.0)
    assert type(close) is transfer.Close and 'idle' in close.reason
    assert conn.counters['idle_closed'] == 1 and conn.get_timer() is None


def test_a_request_frame_left_incomplete_closes_after_frame_timeout():
    conn = transfer.ServeConnection(Catalog({'a': DATA}), idle_timeout=100, frame_timeout=3)
    frame = get(1, 'a')
    conn.receive(frame[:5], 1.0)
    assert conn.get_timer() == 4.0               # from its first bytes, not its last ones
    conn.receive(frame[5:8], 3.0)
    assert conn.get_timer() == 4.0
    acts = conn.receive(frame[8:] + frame[:5], 3.5)      # done; the next one starts
    assert conn.get_timer() == 6.5 and len(acts) == 2
    conn.pause_output()                          # the driver sends a body: not reading
    assert conn.get_timer() > 50
    conn.resume_output(50.0)                     # reads again: the frame has 3 s from now
    assert conn.get_timer() == 53.0
    (close,) = conn.handle_timer(53.0)
    assert 'incomplete' in close.reason and conn.counters['frame_timeouts'] == 1


def test_output_that_makes_no_progress_closes_after_stall_timeout_and_fails_its_gets():
    cat = Catalog({'a': DATA})
    conn = transfer.ServeConnection(cat, idle_timeout=100, stall_timeout=5)
    head, body, _, body2 = conn.receive(get(1, 'a') + get(2, 'a'), 0.0)
    conn.pause_output()
    conn.written(head, 0.0)
    assert conn.get_timer() == 5.0
    conn.progress(4.0)                           # the downloader took some bytes
    assert conn.get_timer() == 9.0 and conn.handle_timer(8.0) == []
    (close,) = conn.handle_timer(9.0)
    assert 'no output' in close.reason
    cat.close(body.source)                       # the driver drops what it still had
    cat.close(body2.source)
    conn.closed('lost', 9.0)                     # the core's own reason wins
    c = conn.counters
    assert (c['stalled'], c['served'], c['failed'], c['failed_timeout']) == (1, 1, 2, 2)
    assert adds_up(c) and cat.open_now == 0


def test_every_get_ends_once_as_sent_failed_not_found_or_refused():
    cat = Catalog({'a': DATA, 'b': DATA[:100], 'cut': DATA}, busy={'hot'}, stale={'b'})
    conn = transfer.ServeConnection(cat)
    reqs = [get(1, 'a'), get(2, 'nope'), get(3, 'a', len(DATA) + 1), get(4, 'hot'),
            get(5, 'b'), get(6, 'b', 100), get(7, 'cut'), get(8, 'a'), get(9, 'a')]
    replies = carry_out(conn, cat, conn.receive(b''.join(reqs), 0.0), 0.0, cut='cut')
    assert replies is None                       # lost in the body of 'cut'
    c = conn.counters
    assert (c['gets'], c['sent'], c['not_found'], c['refused'], c['busy']) == (9, 3, 1, 2, 1)
    assert (c['failed_lost'], c['served']) == (3, 4)   # 'cut' and the two after it
    assert adds_up(c) and c['bytes'] == len(DATA) + 100 and cat.open_now == 2
    # the two GETs after 'cut' were answered, their sources are the driver's to close


def test_a_busy_catalog_is_an_error_that_is_not_no_such_file():
    conn = transfer.ServeConnection(Catalog({}, busy={'x'}))
    (frame,) = conn.receive(get(1, 'x'), 0.0)
    (err,) = codec.Decoder().feed(frame.data)
    assert err.code == codec.ERR_INTERNAL and err.code != codec.ERR_NO_SUCH_FILE
    assert 'busy' in err.text and conn.counters['busy'] == conn.counters['refused'] == 1


def test_a_file_whose_digest_is_unknown_is_hashed_by_the_driver_and_no_timer_runs_meanwhile():
    cat = Catalog({'b': DATA}, stale={'b'})
    conn = transfer.ServeConnection(cat, idle_timeout=10, stall_timeout=5)
    (hashing,) = conn.receive(get(1, 'b', 7), 0.0)
    assert hashing == transfer.HashFile('b', len(DATA)) and hashing.source == 'b'
    conn.pause_output()
    assert conn.get_timer() is None              # the wait is the peer's, not the client's
    head, body = conn.hashed(hashing, sha(DATA), 1000.0)
    (header,) = codec.Decoder().feed(head.data)
    assert (header.size, header.offset, header.sha256) == (len(DATA), 7, sha(DATA))
    assert body == transfer.SendFile('b', 7, len(DATA) - 7) and conn.get_timer() == 1005.0


def test_a_hash_that_failed_is_a_busy_refusal_and_gives_the_file_back():
    cat = Catalog({'b': DATA}, stale={'b'})
    conn = transfer.ServeConnection(cat)
    (hashing,) = conn.receive(get(1, 'b'), 0.0)
    (frame,) = conn.hashed(hashing, None, 1.0)
    (err,) = codec.Decoder().feed(frame.data)
    assert err.code == codec.ERR_INTERNAL and 'busy' in err.text
    assert cat.open_now == 0 and conn.counters['refused'] == 1 and adds_up(conn.counters)
