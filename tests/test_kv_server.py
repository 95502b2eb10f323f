"""Localhost integration: the KV node under real clients nobody here wrote, and bad input.

`redis-cli`, the `redis` Python client and `redis-benchmark` (Debian packages) talk to the
server on an ephemeral port exactly as they would to Redis; the expected replies are those
of Debian's redis-server 7.0 for the same commands. Bad input goes over raw sockets
(`tests.kv_proc.Client`): each bad client gets an error or is closed, and a second client
served meanwhile must still get correct replies. No timing is asserted; redis-benchmark's
throughput is printed (run with -s to see it).
"""

import re
import shutil
import signal
import subprocess
import threading

import hiredis
import pytest
import redis

from tests.kv_proc import Client, KVProc, command, run_server

needs_tools = pytest.mark.skipif(
    not (shutil.which('redis-cli') and shutil.which('redis-benchmark')),
    reason='needs Debian redis-tools (redis-cli, redis-benchmark)')


@pytest.fixture
def server():
    """A server with default settings and no log."""
    with KVProc() as proc:
        yield proc


def cli(port, *args):
    """Run redis-cli against port; return its stdout without the final newline."""
    r = subprocess.run(['redis-cli', '-p', str(port)] + list(args), capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.rstrip('\n')


def assert_serves(port, key=b'probe'):
    """A fresh connection can still SET and GET (what a bystander sees)."""
    c = Client(port)
    try:
        assert c.ask(command('SET', key, b'v-' + key) + command('GET', key), 2) \
            == [b'OK', b'v-' + key]
    finally:
        c.close()


@needs_tools
def test_redis_cli_commands(server):
    port = server.port
    assert cli(port, 'PING') == 'PONG'
    assert cli(port, 'SET', 'a', 'b') == 'OK'
    assert cli(port, 'GET', 'a') == 'b'
    assert cli(port, 'EXISTS', 'a', 'nope') == '1'
    assert cli(port, 'SET', 'c', 'd') == 'OK'
    assert cli(port, 'DBSIZE') == '2'
    assert cli(port, 'DEL', 'a', 'nope') == '1'
    assert cli(port, 'GET', 'a') == ''
    info = cli(port, 'INFO')
    assert '# Keyspace' in info and 'db0:keys=1,' in info
    assert re.search(r'^keyspace_hits:\d+', info, re.M)
    assert cli(port, 'FLUSHALL') == 'OK'
    assert cli(port, 'DBSIZE') == '0'
    assert cli(port, 'GET') == "ERR wrong number of arguments for 'get' command"
    assert cli(port, 'FOO', 'bar').startswith("ERR unknown command 'FOO'")


@pytest.mark.parametrize('loop', ['uvloop', 'asyncio'])
def test_redis_py_client(loop):
    with KVProc('--loop', loop) as proc:
        assert proc.ready['loop'] == loop
        r = redis.Redis(port=proc.port, socket_timeout=10)
        try:
            assert r.ping()
            assert r.set('k1', 'v1') is True
            assert r.get('k1') == b'v1'
            assert r.get('missing') is None
            assert r.exists('k1', 'missing') == 1
            assert r.dbsize() == 1
            info = r.info()
            assert info['keyspace_hits'] >= 1 and info['keyspace_misses'] >= 1
            assert info['db0']['keys'] == 1
            assert r.delete('k1', 'missing') == 1
            pipe = r.pipeline(transaction=False)
            for i in range(500):
                pipe.set('p%d' % i, 'value%d' % i)
                pipe.get('p%d' % i)
            got = pipe.execute()
            assert len(got) == 1000
            assert got[0::2] == [True] * 500
            assert got[1::2] == [b'value%d' % i for i in range(500)]
            assert r.dbsize() == 500
            assert r.flushall() is True
            assert r.dbsize() == 0
        finally:
            r.close()
        summary, status = proc.stop(signal.SIGINT)
        assert status == 0 and summary['loop'] == loop


@needs_tools
def test_redis_benchmark(server):
    r = subprocess.run(['redis-benchmark', '-p', str(server.port), '-t', 'set,get',
                        '-n', '20000', '-c', '10', '-q'], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stderr
    rates = dict(re.findall(r'^(SET|GET): ([\d.]+) requests per second', r.stdout.replace(
        '\r', '\n'), re.M))
    print('redis-benchmark -n 20000 -c 10 against ours:', rates)
    assert set(rates) == {'SET', 'GET'} and all(float(v) > 0 for v in rates.values())
    assert len(cli(server.port, 'GET', 'key:__rand_int__')) == 3    # -d 3, random bytes
    summary, status = server.stop()
    assert status == 0 and summary['commands'] >= 40000


def test_unknown_command_and_wrong_arity_keep_the_connection(server):
    c = Client(server.port)
    got = c.ask(command('FOO', 'bar') + command('GET') + b'PING\r\n', 3)
    assert isinstance(got[0], hiredis.ReplyError)
    assert str(got[0]).startswith("ERR unknown command 'FOO', with args beginning with:")
    assert str(got[1]) == "ERR wrong number of arguments for 'get' command"
    assert got[2] == b'PONG' and not c.closed
    c.close()


@pytest.mark.parametrize('garbage', [
    b'*1\r\n$999999999999\r\n',                 # a bulk the server must not allocate
    b'*zz\r\n',                                 # not a number
    b'*2\r\n:1\r\n:2\r\n',                      # an array, but not of bulk strings
    b'*1\r\n$3\r\nGETxxxxxxxx',                 # bulk longer than it said
])
def test_malformed_frames_get_an_error_and_a_close(server, garbage):
    c = Client(server.port)
    got = c.ask(garbage, 2)
    assert len(got) == 1 and isinstance(got[0], hiredis.ReplyError), got
    assert str(got[0]).startswith('ERR Protocol error')
    assert c.closed
    assert_serves(server.port)


def test_garbage_bytes_are_an_unknown_inline_command(server):
    c = Client(server.port)
    got = c.ask(b'\x00\xffgarbage here\r\n')
    assert isinstance(got[0], hiredis.ReplyError) and 'unknown command' in str(got[0])
    c.close()
    assert_serves(server.port)


def test_half_frame_then_disconnect(server):
    c = Client(server.port)
    c.send(command('SET', 'half', 'value')[:-4])
    c.close()
    assert_serves(server.port)
    assert Client(server.port).ask(command('EXISTS', 'half')) == [0]


def test_oversized_key_and_value_are_refused():
    with KVProc('--max-key-bytes', 8, '--max-value-bytes', 100) as proc:
        c = Client(proc.port)
        got = c.ask(command('SET', 'k' * 9, 'v') + command('SET', 'k', 'v' * 101)
                    + command('SET', 'k', 'v' * 100) + command('DBSIZE'), 4)
        assert all(isinstance(g, hiredis.ReplyError) for g in got[:2]), got
        assert got[2:] == [b'OK', 1]


def test_max_connections_refuses_with_redis_error():
    with KVProc('--max-connections', 2) as proc:
        first, second = Client(proc.port), Client(proc.port)
        assert first.ask(command('PING')) == [b'PONG'] == second.ask(command('PING'))
        third = Client(proc.port)
        got = third.replies(2)
        assert [str(g) for g in got] == ['ERR max number of clients reached'] and third.closed
        first.close()
        assert_serves(proc.port, b'after')     # a slot is free again
        summary, status = proc.stop()
        assert status == 0 and summary['rejected_connections'] == 1


def test_idle_client_is_closed():
    with KVProc('--idle-timeout', 0.5) as proc:
        c = Client(proc.port, timeout=20)
        assert c.ask(command('PING')) == [b'PONG']
        assert c.wait_closed()
        summary, _ = proc.stop()
        assert summary['idle_closed'] == 1


def _flood(port, payload, stalled, stop):
    """Send payload without ever reading until all is sent or the server stops taking it
    (stalled is set then); close once stop is set."""
    c = Client(port, timeout=0.5)
    sent = 0
    try:
        while sent < len(payload):
            try:
                sent += c.sock.send(payload[sent:sent + 65536])
            except OSError:
                break           # the server paused reading (timeout) or closed us
        stalled.set()
        stop.wait(60)
    finally:
        stalled.set()
        c.close()


def _start_flood(port, payload):
    """Run _flood on a thread; return (thread, stalled, stop)."""
    stalled, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=_flood, args=(port, payload, stalled, stop))
    thread.start()
    return thread, stalled, stop


def test_slow_reader_flood_is_bounded():
    # 100K GETs of a 2 kB value are 200 MB of replies: only pausing the reader keeps them
    # out of the server's memory (--max-pending-bytes is set above that, to not close it).
    with KVProc('--max-pending-bytes', 256 << 20) as server:
        setup = Client(server.port)
        assert setup.ask(command('SET', 'k', 'x' * 2000)) == [b'OK']
        before = server.rss_kb()
        flood, stalled, stop = _start_flood(server.port, command('GET', 'k') * 100_000)
        try:
            assert stalled.wait(60)
            for i in range(200):        # another client, served all along
                assert_serves(server.port, b'bystander%d' % (i % 5))
            after = server.rss_kb()
        finally:
            stop.set()
            flood.join(70)
        print('server RSS before %d kB, during a slow-reader flood of 100K GETs %d kB'
              % (before, after))
        assert after - before < 64 * 1024
        assert setup.ask(command('GET', 'k')) == [b'x' * 2000]
        summary, _ = server.stop()
        assert summary['slow_closed'] == 0


def test_client_over_max_pending_bytes_is_closed():
    with KVProc('--max-pending-bytes', 1 << 20, '--max-value-bytes', 1 << 20) as proc:
        setup = Client(proc.port)
        assert setup.ask(command('SET', 'big', 'x' * (1 << 20))) == [b'OK']
        flood, stalled, stop = _start_flood(proc.port, command('GET', 'big') * 200)
        try:
            assert stalled.wait(60)
            assert_serves(proc.port)
        finally:
            stop.set()
            flood.join(70)
        summary, status = proc.stop()
        assert status == 0 and summary['slow_closed'] == 1


@pytest.mark.parametrize('args, says', [
    (['--cache-size', '-1'], '--cache-size'),
    (['--storage', 'log'], '--storage log needs --log'),
    (['--log', '/nonexistent/dir/kv.aof'], 'does not exist'),
    (['--port', '70000'], 'above 65535'),
    (['--appendfsync', 'sometimes'], '--appendfsync'),
    (['--idle-timeout', 'soon'], '--idle-timeout'),
])
def test_bad_arguments_are_one_sentence_and_exit_2(args, says):
    r = run_server(*args)
    assert r.returncode == 2 and says in r.stderr and 'Traceback' not in r.stderr
    assert r.stdout == ''


def test_port_in_use_is_one_line_and_exit_1(server):
    r = run_server('--port', server.port)
    assert r.returncode == 1 and 'Traceback' not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and 'address' in r.stderr.lower()
