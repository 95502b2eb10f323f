"""Unit tests of the index-server and client cores, wired together in memory (no sockets)."""

import struct

import pytest

from nodes.dht import codec
from nodes.dht.client_core import Channel, ChannelError, ClientCore
from nodes.dht.ring import Ring
from nodes.dht.server_core import MemoryStore, ServerConnection, ServerCore

SERVERS = ['s%d' % i for i in range(1, 9)]
NAMES = ['f%04d.txt' % i for i in range(1000)]
ADDR = '10.0.0.9:7000'


def test_store_add_remove_holders():
    st = MemoryStore()
    assert st.add('a', 'x:1') and not st.add('a', 'x:1') and st.add('a', 'y:1')
    assert st.holders('a') == ('x:1', 'y:1') and st.entries == 2
    assert st.remove('a', 'x:1') and not st.remove('a', 'x:1') and not st.remove('b', 'x:1')
    assert st.remove('a', 'y:1') and len(st) == 0 and st.holders('a') == ()


def test_store_remembers_its_answer_until_the_name_changes():
    st = MemoryStore()
    st.add('a', 'x:1')
    first = st.holders('a')
    assert st.holders('a') is first and first == ('x:1',)     # not built again
    st.add('a', 'y:1')
    assert st.holders('a') == ('x:1', 'y:1')
    st.add('b', 'z:1')
    assert st.holders('a') is st.holders('a') == ('x:1', 'y:1')
    st.remove('a', 'x:1')
    assert st.holders('a') == ('y:1',)
    st.remove('a', 'y:1')
    assert st.holders('a') == () and st.holders('b') == ('z:1',)
    st.add('a', 'x:1')
    assert st.holders('a') == ('x:1',)


def test_server_register_search_unregister():
    core = ServerCore('s1')
    assert core.handle(codec.Register(1, ADDR, ('a', 'b')), 0) == codec.Ack(1, 2)
    assert core.handle(codec.Register(2, '10.0.0.8:7000', ('a',)), 0) == codec.Ack(2, 1)
    assert core.handle(codec.Search(3, 'a'), 0) == codec.Found(3, 'a', (ADDR, '10.0.0.8:7000'))
    assert core.handle(codec.Unregister(4, ADDR, ('a', 'zz')), 0) == codec.Ack(4, 1)
    assert core.handle(codec.Search(5, 'a'), 0) == codec.Found(5, 'a', ('10.0.0.8:7000',))
    assert core.handle(codec.Search(6, 'zz'), 0) == codec.NotFound(6, 'zz')


@pytest.mark.parametrize('msg', [codec.Register(1, 'no-port', ('a',)),
                                 codec.Register(1, ADDR, ('../etc/passwd',)),
                                 codec.Register(1, ADDR, ('',)),
                                 codec.Get(1, 'a', 0)])
def test_server_rejects_bad_requests(msg):
    core = ServerCore('s1')
    reply = core.handle(msg, 0)
    assert isinstance(reply, codec.Error) and reply.req == 1
    assert len(core.store) == 0 and core.counters['errors'] == 1


def test_server_connection_survives_bad_frames():
    conn = ServerConnection(ServerCore('s1'))
    bad = struct.pack('>IBBI', 6, codec.PROTOCOL_VERSION, 0x55, 77)
    good = codec.encode(codec.Register(78, ADDR, ('a',)))
    out, close = conn.receive(bad + good[:5], 0)
    assert not close
    out2, close = conn.receive(good[5:], 0)
    replies = codec.Decoder().feed(out + out2)
    assert replies[0].code == codec.ERR_UNKNOWN_TYPE and replies[0].req == 77
    assert replies[1] == codec.Ack(78, 1)
    out, close = conn.receive(struct.pack('>I', codec.MAX_FRAME + 1), 0)
    assert close and codec.Decoder().feed(out)[0].code == codec.ERR_TOO_LARGE


def test_server_connection_reports_truncation_at_eof():
    conn = ServerConnection(ServerCore('s1'))
    conn.receive(codec.encode(codec.Search(1, 'abc'))[:-2], 0)
    (err,) = codec.Decoder().feed(conn.eof())
    assert err.code == codec.ERR_MALFORMED and 'truncated' in err.text


def test_batching_sends_one_message_per_server():
    core = ClientCore(Ring(SERVERS))
    batches = core.batches(NAMES)
    assert len(batches) == len(SERVERS) == len({s for s, _ in batches})
    assert sorted(n for _, names in batches for n in names) == sorted(NAMES)
    for server, names in batches:
        assert all(core.ring.owner(n) == server for n in names)
    assert len(core.unbatched(NAMES)) == len(NAMES)


def test_batching_with_replicas_and_frame_limit():
    core = ClientCore(Ring(SERVERS), replicas=2)
    batches = core.batches(NAMES)
    assert len(batches) == len(SERVERS)
    assert sum(len(names) for _, names in batches) == 3 * len(NAMES)
    small = ClientCore(Ring(SERVERS[:2]), max_frame=2000)
    parts = small.batches(NAMES)
    assert len(parts) > 2 and all(len(codec.encode(codec.Register(1, ADDR, n))) <= 2000
                                  for _, n in parts)


# Search failover, write-to-all and resume through the real client core: test_dht_client_ops.py


def test_channel_window_ids_and_errors():
    ch = Channel('s1', window=2, timeout=1.0)
    r1, d1 = ch.send(codec.Search, 0.0, ('a',))
    assert ch.can_send()
    r2, d2 = ch.send(codec.Search, 0.5, ('b',))
    assert not ch.can_send() and r1 != r2
    assert ch.next_deadline() == 1.0 and not ch.expired(0.9) and ch.expired(1.0)
    # Replies may be matched out of order by id.
    both = codec.encode(codec.NotFound(r2, 'b')) + codec.encode(codec.NotFound(r1, 'a'))
    got = ch.receive(both, 0.6)
    assert [(r, reply.name) for r, reply in got] == [(r2, 'b'), (r1, 'a')]
    assert ch.can_send() and ch.next_deadline() is None
    with pytest.raises(ChannelError):
        ch.receive(codec.encode(codec.Ack(999, 0)), 1.0)
    r3, _ = ch.send(codec.Search, 2.0, ('c',))
    assert ch.fail() == [r3] and ch.can_send()


def test_peer_catalog_hashes_regular_files_and_notices_changes(tmp_path):
    import hashlib
    import os
    from nodes.dht.peer import Catalog
    (tmp_path / 'a').write_bytes(b'one')
    (tmp_path / '.hidden').write_bytes(b'x')
    os.symlink('/etc/hostname', tmp_path / 'link')
    cat = Catalog(tmp_path)
    assert cat.names() == ['a'] and cat.scan() == 1
    assert cat.stat('a') == (3, hashlib.sha256(b'one').digest())
    (tmp_path / 'a').write_bytes(b'changed!')
    assert cat.stat('a') == (8, hashlib.sha256(b'changed!').digest())
    assert cat.stat('link') is None and cat.stat('.hidden') is None and cat.stat('../a') is None


def test_candidates_make_no_closure_cell_and_put_down_servers_last():
    """ClientCore.candidates runs for every search; a comprehension in it would keep self in
    a closure cell made on every call under CPython 3.11 (stop 41 moved it to _down_last)."""
    assert ClientCore.candidates.__code__.co_cellvars == ()
    core = ClientCore(Ring(['s1', 's2', 's3', 's4']), replicas=3)
    pref = core.candidates('f0001')
    assert sorted(pref) == ['s1', 's2', 's3', 's4']
    core.mark_down(pref[0])
    core.mark_down(pref[2])
    assert core.candidates('f0001') == [pref[1], pref[3], pref[0], pref[2]]
