"""The index server's bounds: holder addresses, holders per name, replies per call, idle
connections and shutdown -- the core in memory, the driver on loopback."""

import asyncio
import socket
import tracemalloc

import pytest

from nodes.dht import codec
from nodes.dht.client_core import Channel
from nodes.dht.ring import MAX_HOST, Ring, parse_addr
from nodes.dht.server import IndexServer
from nodes.dht.server_core import (MAX_HOLDERS, MAX_NAME, MAX_REPLY, OUTPUT_BUDGET,
                                   ServerConnection, ServerCore)
from tests.memnet import MemNet, register_all

POPULAR = 'p' * MAX_NAME


def longest_holder(i):
    """The i-th holder address of the longest kind: a 253-byte DNS name (labels of at most
    63 bytes) and a 5-digit port."""
    host = '.'.join([('h%d' % i).ljust(63, 'h'), 'h' * 63, 'h' * 63, 'h' * 61])
    assert len(host) == MAX_HOST
    return '%s:%d' % (host, 60000 + i % 5000)


def fill(core, name=POPULAR):
    """Register MAX_HOLDERS longest holders of name; return them."""
    holders = [longest_holder(i) for i in range(MAX_HOLDERS)]
    for i, addr in enumerate(holders):
        assert core.handle(codec.Register(i + 1, addr, (name,)), 0) == codec.Ack(i + 1, 1)
    return holders


def searches(reqs, name=POPULAR):
    return b''.join(codec.encode(codec.Search(r, name)) for r in reqs)


def test_a_holder_address_is_host_port_with_a_hostname_sized_host():
    core = ServerCore('s1')
    ok = longest_holder(0)
    assert len(ok) == MAX_HOST + 6 and parse_addr(ok)[1] == 60000
    assert core.handle(codec.Register(1, ok, ('a',)), 0) == codec.Ack(1, 1)
    for bad in ('x' * (MAX_HOST + 1) + ':1', 'h' * 60000 + ':7000', 'h:99999', 'h:٧٠'):
        reply = core.handle(codec.Register(2, bad, ('b',)), 0)
        assert isinstance(reply, codec.Error) and reply.code == codec.ERR_MALFORMED
        assert len(codec.encode(reply)) < 300            # the error does not echo it all
        with pytest.raises(ValueError):
            parse_addr(bad)
    assert core.store.holders('b') == () and core.store.entries == 1


def test_a_name_keeps_at_most_max_holders_and_its_reply_fits_a_frame():
    core = ServerCore('s1')
    holders = fill(core)
    one_more = codec.Register(9000, '10.0.0.1:7000', ('other', POPULAR))
    reply = core.handle(one_more, 0)
    assert isinstance(reply, codec.Error) and reply.code == codec.ERR_TOO_LARGE
    assert 'already has %d holders' % MAX_HOLDERS in reply.text
    assert core.store.holders('other') == ()             # refused whole: nothing registered
    again = codec.Register(9001, holders[5], (POPULAR,))  # a holder registering again is fine
    assert core.handle(again, 0) == codec.Ack(9001, 0)
    found = core.handle(codec.Search(7, POPULAR), 0)
    assert found.holders == tuple(holders)
    assert codec.frame_size(found) == MAX_REPLY < codec.MAX_FRAME
    bad = core.handle(codec.Register(9002, '10.0.0.1:7000', ('n' * (MAX_NAME + 1),)), 0)
    assert isinstance(bad, codec.Error) and 'longer than %d bytes' % MAX_NAME in bad.text
    # The client's channel (default frame limit) takes the largest reply there is.
    ch = Channel('s1')
    req, _ = ch.send(codec.Search, 0, (POPULAR,))
    ((_, got),) = ch.receive(codec.encode(codec.Found(req, POPULAR, found.holders)), 0)
    assert got.holders == found.holders


def test_the_client_core_reports_a_full_name_as_a_failed_register_and_still_finds_it():
    net = MemNet(n=1)
    server = next(iter(net.servers.values()))
    fill(server, 'song.mp3')
    (rec,) = register_all(net, ['song.mp3'], '10.0.1.1:8000')
    assert not rec['ok'] and 'already has %d holders' % MAX_HOLDERS in rec['error']
    (rec,) = net.run([('search', 'song.mp3')])
    assert rec['ok'] and rec['holders'] == MAX_HOLDERS


def test_pipelined_searches_are_answered_a_batch_at_a_time_and_none_while_paused():
    core = ServerCore('s1')
    fill(core)
    conn = ServerConnection(core)
    out, close = conn.receive(searches(range(1, 61)), 1.0)
    assert MAX_REPLY <= len(out) <= OUTPUT_BUDGET + MAX_REPLY
    assert not close and conn.waiting
    replies = codec.Decoder().feed(out)
    conn.pause_output()                         # the driver's transport is full
    assert conn.more(2.0) == (b'', False)
    assert conn.receive(searches([61]), 2.0) == (b'', False) and conn.waiting
    out, close = conn.resume_output(3.0)
    while conn.waiting:
        assert len(out) <= OUTPUT_BUDGET + MAX_REPLY and not close
        replies += codec.Decoder().feed(out)
        out, close = conn.more(3.0)
    replies += codec.Decoder().feed(out)
    assert [r.req for r in replies] == list(range(1, 62))
    assert all(type(r) is codec.Found and len(r.holders) == MAX_HOLDERS for r in replies)


def test_end_of_stream_answers_what_waits_then_closes():
    core = ServerCore('s1')
    conn = ServerConnection(core)
    conn.pause_output()
    conn.receive(searches([1, 2], 'x') + searches([3], 'x')[:-1], 0)
    assert conn.eof() == b'' and not conn.finished
    out, close = conn.resume_output(0)
    items = codec.Decoder().feed(out)
    assert close and conn.finished
    assert [(type(i), i.req) for i in items] == [(codec.NotFound, 1), (codec.NotFound, 2),
                                                 (codec.Error, 0)]
    assert 'truncated' in items[-1].text


def test_the_core_closes_an_idle_connection_on_its_timer():
    core = ServerCore('s1')
    conn = ServerConnection(core, idle_timeout=10.0, now=100.0)
    assert conn.get_timer() == 110.0
    assert conn.handle_timer(109.0) == (b'', False)
    conn.receive(searches([1], 'x'), 105.0)              # traffic moves the deadline
    assert conn.get_timer() == 115.0 and conn.handle_timer(110.0) == (b'', False)
    assert conn.handle_timer(115.0) == (b'', True)
    assert core.counters['idle_closed'] == 1


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


async def started(**kw):
    """An index server on a loopback ephemeral port: (node, host, port)."""
    node = IndexServer('s1', Ring(['s1']), **kw)
    host, port = await node.start('127.0.0.1', 0)
    return node, host, port


async def read_to_end(reader):
    """Read until the server closes; b'' then, or what arrived before a reset."""
    data = b''
    try:
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), 5)
            if not chunk:
                return data
            data += chunk
    except ConnectionResetError:
        return data


def test_the_server_builds_replies_only_as_fast_as_a_client_reads_them():
    n = 100        # pipelined searches whose replies are the largest there are

    async def main():
        node, host, port = await started()
        fill(node.core)
        loop = asyncio.get_running_loop()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.setblocking(False)
        await loop.sock_connect(sock, (host, port))
        tracemalloc.start()
        try:
            await loop.sock_sendall(sock, searches(range(1, n + 1)))
            data = await loop.sock_recv(sock, 65536)     # the server has read the requests
            for _ in range(100):
                await asyncio.sleep(0)                   # and done what it does with them
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        dec = codec.Decoder()
        replies = dec.feed(data)
        while len(replies) < n:
            replies += dec.feed(await loop.sock_recv(sock, 1 << 20))
        sock.close()
        await node.close()
        return peak, replies

    peak, replies = run(main())
    assert [r.req for r in replies] == list(range(1, n + 1))
    assert all(type(r) is codec.Found and len(r.holders) == MAX_HOLDERS for r in replies)
    # Every reply built at once is n * MAX_REPLY bytes, and more in copies; a batch is a
    # budget's worth plus one reply, and a couple of copies of it.
    assert peak < 16 * MAX_REPLY < n * MAX_REPLY, peak


def test_the_server_answers_a_half_closed_client_then_closes():
    async def main():
        node, host, port = await started()
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(searches(range(1, 6), 'x'))
        writer.write_eof()
        data = await read_to_end(reader)
        writer.close()
        await node.close()
        return codec.Decoder().feed(data)

    assert [(type(r), r.req) for r in run(main())] == [(codec.NotFound, i) for i in range(1, 6)]


def test_the_server_closes_an_idle_client():
    async def main():
        node, host, port = await started(idle_timeout=0.2)
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(searches([1], 'x'))
        got = await read_to_end(reader)              # the reply, then the idle close
        writer.close()
        await node.close()
        return got, node.summary()

    got, summary = run(main())
    assert codec.Decoder().feed(got) == [codec.NotFound(1, 'x')]
    assert summary['idle_closed'] == 1


def test_shutdown_closes_connected_clients_and_does_not_wait_for_them():
    async def main():
        node, host, port = await started()
        idle = await asyncio.open_connection(host, port)
        busy = await asyncio.open_connection(host, port)
        busy[1].write(searches([1], 'x')[:-3])           # half a request, then silence
        await asyncio.wait_for(node.close(), 5)
        ends = [await read_to_end(r) for r, _ in (idle, busy)]
        for _, w in (idle, busy):
            w.close()
        return ends

    assert run(main()) == [b'', b'']      # both connections ended by the server, no reply
