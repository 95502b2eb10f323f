"""The index-server core's bounds against a client that sends too much: entries per server,
names per message, requests decoded per call and the time a frame may take -- in memory,
on the core's own clock."""

import tracemalloc

from nodes.dht import codec
from nodes.dht.client_core import ClientCore
from nodes.dht.ring import Ring
from nodes.dht.server_core import BATCH, MAX_NAMES, ServerConnection, ServerCore
from tests.memnet import MemNet, register_all

ADDR = '10.0.0.1:7000'


def replies(data):
    return codec.Decoder().feed(data)


def test_a_register_past_max_entries_is_refused_whole_and_changes_nothing():
    core = ServerCore('s1', max_entries=10)
    assert core.handle(codec.Register(1, ADDR, tuple('abcdefgh')), 0) == codec.Ack(1, 8)
    over = core.handle(codec.Register(2, '10.0.0.2:7000', ('a', 'b', 'c')), 0)
    assert isinstance(over, codec.Error) and over.code == codec.ERR_TOO_LARGE
    assert 'keeps at most 10' in over.text and 'nothing registered' in over.text
    assert core.store.entries == 8 and core.store.holders('a') == (ADDR,)
    assert core.counters['refused'] == 1
    # entries already there cost nothing; a name given twice counts once
    again = codec.Register(3, ADDR, tuple('abcdefgh') + ('i', 'i', 'j'))
    assert core.handle(again, 0) == codec.Ack(3, 2) and core.store.entries == 10
    assert isinstance(core.handle(codec.Register(4, ADDR, ('k',)), 0), codec.Error)
    assert core.handle(codec.Unregister(5, ADDR, ('a',)), 0) == codec.Ack(5, 1)
    assert core.handle(codec.Register(6, ADDR, ('k',)), 0) == codec.Ack(6, 1)


def test_the_client_core_reports_a_full_server_as_a_failed_register():
    net = MemNet(n=1)
    net.servers[next(iter(net.servers))].max_entries = 3
    ok, full = register_all(net, ['a', 'b', 'c'], ADDR) + register_all(net, ['d'], ADDR)
    assert ok['ok'] and not full['ok'] and 'keeps at most 3' in full['error']


def many_names(n):
    return tuple('%x' % i for i in range(n))


def test_a_message_naming_more_than_max_names_is_refused_before_its_names_are_decoded():
    core = ServerCore('s1')
    conn = ServerConnection(core)
    names = many_names(10 * MAX_NAMES)             # short names: a frame well under 8 MB
    frame = codec.encode(codec.Register(7, ADDR, names))
    assert len(frame) < codec.MAX_FRAME
    tracemalloc.start()
    try:
        out, close = conn.receive(frame + codec.encode(codec.Search(8, '1')), 1.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    refused, found = replies(out)
    assert refused.req == 7 and refused.code == codec.ERR_TOO_LARGE and not close
    assert 'names %d files, more than the %d' % (len(names), MAX_NAMES) in refused.text
    assert found == codec.NotFound(8, '1') and core.store.entries == 0
    # The names as str objects would take several times the frame; its bytes are held once
    # (plus the join of the caller's data) and never decoded.
    assert peak < 3 * len(frame), (peak, len(frame))
    unreg = codec.encode(codec.Unregister(9, ADDR, names[:MAX_NAMES + 1]))
    assert replies(conn.receive(unreg, 2.0)[0])[0].code == codec.ERR_TOO_LARGE
    at_most = codec.encode(codec.Register(10, ADDR, names[:MAX_NAMES]))
    assert replies(conn.receive(at_most, 3.0)[0]) == [codec.Ack(10, MAX_NAMES)]


def test_the_client_splits_a_batch_at_max_names():
    names = ['f%07d.bin' % i for i in range(2 * MAX_NAMES + 5)]    # well under a frame's bytes
    batches = ClientCore(Ring(['s1'])).batches(names)
    assert [len(b) for _, b in batches] == [MAX_NAMES, MAX_NAMES, 5]
    assert [n for _, b in batches for n in b] == names


def searches(reqs, name='x'):
    return b''.join(codec.encode(codec.Search(r, name)) for r in reqs)


def test_one_call_decodes_and_answers_at_most_a_batch_of_pipelined_requests():
    conn = ServerConnection(ServerCore('s1'))
    n = 256 * 1024 // len(searches([1], ''))       # one full read of the smallest searches
    data = searches(range(1, n + 1), '')
    out, close = conn.receive(data, 1.0)
    got = replies(out)
    assert 0 < len(got) <= BATCH and conn.waiting and not close
    assert conn.buffered <= len(data)               # the rest stays undecoded bytes
    calls = 1
    while conn.waiting:
        out, close = conn.more(1.0)
        batch = replies(out)
        assert 0 < len(batch) <= BATCH and not close
        got += batch
        calls += 1
    assert [r.req for r in got] == list(range(1, n + 1)) and conn.buffered == 0
    assert calls >= n // BATCH


def test_a_frame_not_finished_within_frame_timeout_closes_the_connection():
    core = ServerCore('s1')
    conn = ServerConnection(core, idle_timeout=300.0, frame_timeout=30.0, now=0.0)
    conn.receive(codec.encode(codec.Search(1, 'x' * 1000))[:4], 0.0)   # announces ~1 KB
    for t in range(5, 30, 5):                       # then a byte every 5 s: never idle
        assert conn.receive(b'x', float(t)) == (b'', False)
        assert conn.get_timer() == 30.0 and conn.handle_timer(float(t)) == (b'', False)
    assert conn.handle_timer(30.0) == (b'', True)
    assert core.counters['slow_closed'] == 1 and core.counters['idle_closed'] == 0


def test_frames_that_keep_finishing_are_not_closed_however_long_the_stream():
    core = ServerCore('s1')
    conn = ServerConnection(core, idle_timeout=300.0, frame_timeout=30.0, now=0.0)
    stream = searches(range(1, 101))
    size = len(stream) // 100
    got = []
    for i in range(100):                            # each piece ends 5 bytes into a frame
        t = 20.0 * i
        out, _ = conn.receive(stream[max(0, size * i - size + 5):size * i + 5], t)
        got += replies(out)
        assert conn.handle_timer(t + 29.0) == (b'', False)
    assert [r.req for r in got] == list(range(1, 100)) and core.counters['slow_closed'] == 0


def test_the_frame_clock_stops_while_requests_wait_for_the_client_to_read():
    core = ServerCore('s1')
    conn = ServerConnection(core, idle_timeout=300.0, frame_timeout=30.0, now=0.0)
    conn.pause_output()                             # the client does not read its replies
    conn.receive(searches([1, 2]) + searches([3])[:5], 0.0)
    assert conn.waiting and conn.get_timer() == 300.0   # not reading: the frame cannot move
    out, _ = conn.resume_output(100.0)
    assert [r.req for r in replies(out)] == [1, 2] and not conn.waiting
    assert conn.get_timer() == 130.0 and conn.handle_timer(129.0) == (b'', False)
