"""The index server's driver under load on loopback: a flooding client gets one batch per
turn of the loop, connections past the cap are closed at once, a trickled frame is closed,
undecoded bytes are bounded over all connections, and a server at its open-file limit keeps
its stderr short. Assertions are on counts and closes, never on how long something took."""

import asyncio
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from nodes.dht import codec
from nodes.dht.server import parse_args
from nodes.dht.server_core import BATCH, MAX_ENTRIES
from tests.test_dht_server_limits import run, started

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def search(req, name='x'):
    return codec.encode(codec.Search(req, name))


async def reply_or_end(reader):
    """The first reply on a connection, or 'closed' if the server ends it first."""
    dec = codec.Decoder()
    try:
        while True:
            data = await asyncio.wait_for(reader.read(65536), 30)
            if not data:
                return 'closed'
            items = dec.feed(data)
            if items:
                return items[0]
    except ConnectionResetError:
        return 'closed'


def flood(port, n, done):
    """A client thread: pipeline n smallest searches at once, read every reply."""
    sock = socket.create_connection(('127.0.0.1', port))
    data = b''.join(search(i, '') for i in range(1, n + 1))
    reader = threading.Thread(target=lambda: done.append(_drain(sock, len(data))))
    reader.start()
    sock.sendall(data)
    reader.join()
    sock.close()


def _drain(sock, nbytes):
    got = 0
    while got < nbytes:                 # a NOTFOUND for '' is as long as its search
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        got += len(chunk)
    return got


def test_a_flooding_client_gets_one_batch_per_turn_of_the_loop():
    n = 60000                           # several reads' worth of pipelined searches

    async def main():
        node, _, port = await started()
        done = []
        thread = threading.Thread(target=flood, args=(port, n, done))
        thread.start()
        deltas, last = [], 0
        while not done:
            await asyncio.sleep(0)      # exactly one turn of the loop
            now = node.core.counters['search']
            deltas.append(now - last)
            last = now
        thread.join()
        await node.close()
        return deltas, done

    deltas, done = run(main())
    assert sum(deltas) == n and done == [n * len(search(1, ''))]
    # A turn answers one batch (after a read, or the next-batch callback) and maybe one
    # more when the output drains; the sampler's turns may straddle two of those. Before,
    # one read's worth (thousands) went in a single callback.
    assert max(deltas) <= 4 * BATCH, max(deltas)


def test_connections_past_max_connections_are_closed_at_once_and_counted():
    async def main():
        node, host, port = await started(max_connections=3)
        conns = [await asyncio.open_connection(host, port) for _ in range(5)]
        for i, (_, w) in enumerate(conns):
            w.write(search(i + 1))
        ends = [await reply_or_end(r) for r, _ in conns]
        for _, w in conns:
            w.close()
        while node.protocols:                        # the server sees the three close
            await asyncio.sleep(0.01)
        r, w = await asyncio.open_connection(host, port)
        w.write(search(9))
        after = await reply_or_end(r)
        w.close()
        await node.close()
        return ends, after, node.summary()

    ends, after, summary = run(main())
    assert ends == [codec.NotFound(i, 'x') for i in (1, 2, 3)] + ['closed', 'closed']
    assert after == codec.NotFound(9, 'x')
    assert summary['refused_connections'] == 2 and summary['connections'] == 4


def test_a_frame_trickled_a_byte_at_a_time_is_closed_after_frame_timeout():
    async def main():
        node, host, port = await started(frame_timeout=0.5)
        r, w = await asyncio.open_connection(host, port)
        frame = search(1, 'x' * 1000)
        sent = 0
        while sent < len(frame) - 1:                       # never the last byte
            w.write(frame[sent:sent + 1])
            sent += 1
            await asyncio.sleep(0.05)
            try:
                if await asyncio.wait_for(r.read(1), 0.001) == b'':
                    break                                   # the server closed
            except asyncio.TimeoutError:
                pass
            except ConnectionResetError:
                break
        w.close()
        await node.close()
        return sent, len(frame), node.summary()

    sent, size, summary = run(main())
    assert sent < size - 1 and summary['slow_closed'] == 1 and summary['idle_closed'] == 0


def test_past_max_buffered_the_connection_holding_the_most_is_closed():
    limit = 1 << 20

    async def main():
        node, host, port = await started(max_buffered=limit)
        big = codec.encode(codec.Register(1, '10.0.0.1:7000', ('x' * 200,) * 30000))
        small = codec.encode(codec.Register(2, '10.0.0.1:7000', ('y' * 200,) * 2500))
        ra, wa = await asyncio.open_connection(host, port)
        wa.write(big[:limit * 7 // 10])             # 70 % of the bound, held undecoded
        while node.buffered < limit * 7 // 10:
            await asyncio.sleep(0.01)
        rb, wb = await asyncio.open_connection(host, port)
        wb.write(small[:-1])                        # another half: over the bound
        first = await reply_or_end(ra)
        wb.write(small[-1:])
        second = await reply_or_end(rb)
        held = node.buffered
        wa.close()
        wb.close()
        await node.close()
        return first, second, held, node.summary()

    first, second, held, summary = run(main())
    assert first == 'closed' and second == codec.Ack(2, 1)
    assert summary['overload_closed'] == 1 and held == 0


def test_the_command_line_sets_the_bounds():
    base = ['--name', 's1', '--listen', '127.0.0.1:0', '--servers', 's1=127.0.0.1:0']
    args = parse_args(base + ['--max-entries', '5', '--max-connections', '7'])
    assert (args.max_entries, args.max_connections) == (5, 7)
    assert parse_args(base).max_entries == MAX_ENTRIES
    for bad in (['--max-entries', '0'], ['--max-connections', '-1']):
        with pytest.raises(SystemExit):
            parse_args(base + bad)


def _limit_files():
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


def test_a_server_at_its_open_file_limit_serves_again_with_a_short_stderr(tmp_path):
    """With 64 descriptors the default cap is 32 clients; 80 connect at once."""
    err = open(tmp_path / 'err', 'w+')
    proc = subprocess.Popen([sys.executable, '-m', 'nodes.dht.server', '--name', 's1',
                             '--listen', '127.0.0.1:0', '--servers', 's1=127.0.0.1:0',
                             '--max-entries', '2'],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                            preexec_fn=_limit_files)
    try:
        port = int(json.loads(proc.stdout.readline())['listen'].rsplit(':', 1)[1])
        socks = []
        for i in range(80):
            s = socket.create_connection(('127.0.0.1', port))
            s.settimeout(30)
            s.sendall(search(i + 1))
            socks.append(s)
        served = 0
        for s in socks:                              # a reply, or closed by the server
            try:
                served += len(s.recv(4096)) > 0
            except ConnectionResetError:
                pass
        for s in socks:
            s.close()
        refused = []
        for _ in range(300):            # until the server has seen the 80 close
            with socket.create_connection(('127.0.0.1', port), timeout=30) as s:
                s.sendall(codec.encode(codec.Register(1, '10.0.0.1:7000', ('a', 'b', 'c'))))
                try:
                    refused = codec.Decoder().feed(s.recv(4096))
                except ConnectionResetError:
                    pass
            if refused:
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        summary = json.loads(proc.communicate(timeout=30)[0].splitlines()[-1])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err.seek(0)
    lines = err.read().splitlines()
    assert 0 < served <= 32 and summary['refused_connections'] >= 80 - served
    assert refused[0].code == codec.ERR_TOO_LARGE and 'keeps at most 2' in refused[0].text
    assert proc.returncode == 0 and len(lines) <= 3, lines[:10]
