"""workloads.kvload against a real redis-server on 127.0.0.1 (ephemeral port), and its client alone.

Each test starts its own ``redis-server`` (no persistence) and kills it by PID in teardown.
The load generator runs as a child process, as the runner starts it, so its exit status,
stdout JSON lines and one-sentence stderr are what is checked.  Speed is not measured here:
``benchmarks/kv_placement.py`` prints one sequential client's figures.
"""

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from workloads.kvload import latency_stats, read_latencies
from workloads.kvload_client import KvClient, Workload
from tests.ports import free_port
from tests.redis_proc import needs_redis, redis_server  # noqa: F401  (the server fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASE_FIELDS = {'client', 'op', 'requests', 'done', 'ok', 'errors', 'wrong', 'start', 'end',
                'total_ms', 'p50_us', 'p90_us', 'p99_us', 'max_us', 'mean_us'}


def _argv(port, *args):
    """kvload's command line against 127.0.0.1:port."""
    return [sys.executable, '-m', 'workloads.kvload', '--port', str(port)] + [str(a) for a in args]


def _kvload(port, *args, timeout=120):
    """Run kvload to the end; return (exit status, JSON records, stderr)."""
    p = subprocess.run(_argv(port, *args), cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, [json.loads(line) for line in p.stdout.splitlines()], p.stderr


def _one_sentence(stderr):
    """Assert stderr is one line, no traceback; return it."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and 'Traceback' not in stderr, stderr
    return lines[0]


def _phases(records):
    """The phase records, keyed (client, op)."""
    return {(r['client'], r['op']): r for r in records if r['event'] == 'phase'}


def _summary(records):
    """The one summary record."""
    (summary,) = [r for r in records if r['event'] == 'summary']
    return summary


@needs_redis
def test_sequential_clients_use_disjoint_keys_and_latencies_match(server, tmp_path):
    """2 x 500 SETs make exactly k0..k999; GET, DEL all right; the latencies file fits the lines."""
    status, records, err = _kvload(server.port, '--clients', 2, '--requests', 500, '--ops', 'set')
    assert status == 0, err
    r = server.client()
    assert r.dbsize() == 1000
    assert sorted(r.keys()) == sorted(b'k%d' % i for i in range(1000))
    assert r.get('k0') == b'Value0' and r.get('k999') == b'Value999'
    assert records[0]['event'] == 'ready' and records[0]['clients'] == 2

    lat = tmp_path / 'lat.u32'
    status, records, err = _kvload(server.port, '--clients', 2, '--requests', 500,
                                   '--ops', 'get,del', '--latencies', lat)
    assert status == 0 and err == '', err
    assert r.dbsize() == 0
    phases = _phases(records)
    assert set(phases) == {(c, op) for c in (0, 1) for op in ('get', 'del')}
    assert os.path.getsize(lat) == 4 * 2 * 500 * 2
    offsets = []
    for rec in phases.values():
        assert PHASE_FIELDS <= set(rec), rec
        assert (rec['requests'], rec['done'], rec['ok'], rec['wrong'], rec['errors']) == \
            (500, 500, 500, 0, {})
        assert rec['start'] <= rec['end'] and rec['total_ms'] > 0
        assert rec['lat_count'] == 500
        offsets.append(rec['lat_offset'])
        us = read_latencies(lat, rec['lat_offset'], rec['lat_count'])
        assert len(us) == 500
        assert {k: rec[k] for k in latency_stats(us)} == latency_stats(us)
        assert rec['p50_us'] <= rec['p90_us'] <= rec['p99_us'] <= rec['max_us']
    assert sorted(offsets) == [0, 500, 1000, 1500]
    summary = _summary(records)
    assert (summary['planned'], summary['done'], summary['ok']) == (2000, 2000, 2000)
    assert summary['loop'] in ('uvloop', 'asyncio') and summary['ops_per_s'] > 0


@needs_redis
@pytest.mark.parametrize('loop', ['asyncio', 'auto'])
def test_pipelined_depth_16_gets_every_reply_right(server, loop):
    """Three clients 16 deep, set/get/del of 1000 keys each: all ok, none left behind."""
    status, records, err = _kvload(server.port, '--clients', 3, '--client-base', 5,
                                   '--requests', 1000, '--pipeline', 16, '--loop', loop)
    assert status == 0, err
    phases = _phases(records)
    assert set(phases) == {(c, op) for c in (5, 6, 7) for op in ('set', 'get', 'del')}
    assert all(p['ok'] == p['done'] == 1000 for p in phases.values())
    summary = _summary(records)
    assert summary['pipeline'] == 16 and summary['done'] == summary['ok'] == 9000
    assert server.client().dbsize() == 0


@needs_redis
def test_wrong_values_nils_and_error_replies_are_counted_not_raised(server):
    """GET of a changed value and a missing key are wrong; a list is a WRONGTYPE error; exit 1."""
    r = server.client()
    for i in range(10):
        r.set('k%d' % i, 'Value%d' % i)
    r.set('k3', 'other')
    r.delete('k5')
    r.delete('k7')
    r.lpush('k7', 'x')
    status, records, err = _kvload(server.port, '--requests', 10, '--ops', 'get')
    assert status == 1
    assert 'not the expected' in _one_sentence(err)
    phase = _phases(records)[0, 'get']
    assert (phase['ok'], phase['wrong'], phase['errors']) == (7, 2, {'WRONGTYPE': 1})
    summary = _summary(records)
    assert (summary['done'], summary['ok'], summary['wrong']) == (10, 7, 2)


@needs_redis
def test_value_size_pads_values(server):
    """--value-size 100 SETs 100-byte values that GET then accepts."""
    status, _, err = _kvload(server.port, '--requests', 20, '--ops', 'set,get',
                             '--value-size', 100)
    assert status == 0, err
    assert server.client().get('k19') == b'Value19'.ljust(100, b'x')


@contextlib.contextmanager
def _started(port, *args):
    """kvload running, its ready line read; SIGKILLed (by PID) on the way out if still running."""
    proc = subprocess.Popen(_argv(port, *args), cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline() or '{}')
        assert ready.get('event') == 'ready', 'kvload printed no ready line'
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _wait_for(predicate, timeout, what):
    """Poll predicate() until true; fail the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail('timed out after %.0f s waiting for %s' % (timeout, what))
        time.sleep(0.02)


def _finish(proc, timeout=30):
    """Wait for kvload to exit by itself; return (status, records, stderr)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail('kvload did not exit within %d s' % timeout)
    return proc.returncode, [json.loads(line) for line in out.splitlines()], err


@needs_redis
def test_server_killed_mid_run_ends_with_one_sentence(server):
    """SIGKILL of the server during SETs: exit 1 in bounded time; the summary says how far."""
    with _started(server.port, '--clients', 2, '--requests', 1_000_000, '--ops', 'set') as proc:
        r = server.client()
        _wait_for(lambda: r.dbsize() > 100, 30, 'SETs to arrive')
        server.kill()
        status, records, err = _finish(proc)
    assert status == 1
    sentence = _one_sentence(err)
    assert re.match(r'kvload: client [01] stopped during set after \d+ of 1000000 requests: '
                    r'(the server closed the connection|the connection was lost)',
                    sentence), sentence
    summary = _summary(records)
    assert summary['clients_failed'] == 2 and 100 < summary['done'] < summary['planned']
    phases = _phases(records)
    assert all(p['failure'] and p['done'] < 1_000_000 for p in phases.values())


@needs_redis
def test_sigterm_stops_with_a_summary_of_what_was_done(server):
    """SIGTERM mid-run: summary printed, one sentence, exit 1."""
    with _started(server.port, '--requests', 1_000_000, '--ops', 'set') as proc:
        r = server.client()
        _wait_for(lambda: r.dbsize() > 100, 30, 'SETs to arrive')
        proc.send_signal(signal.SIGTERM)
        status, records, err = _finish(proc)
    assert status == 1
    assert _one_sentence(err).startswith('kvload: interrupted by SIGTERM after ')
    summary = _summary(records)
    assert summary['done'] > 100 and summary['done'] == summary['ok']
    assert _phases(records)[0, 'set']['failure'] == 'interrupted by SIGTERM'


@needs_redis
def test_barrier_holds_the_first_request_until_go(server):
    """With --barrier nothing is sent before 'go': every phase starts after it was written."""
    with _started(server.port, '--clients', 2, '--requests', 50, '--barrier') as proc:
        assert server.client().dbsize() == 0
        released = time.time()
        proc.stdin.write('go\n')
        proc.stdin.flush()
        status, records, err = _finish(proc)
    assert status == 0, err
    phases = _phases(records)
    assert len(phases) == 6 and min(p['start'] for p in phases.values()) >= released


def test_connection_refused_is_one_sentence():
    """Nobody listening: exit 1, one sentence naming the address."""
    port = free_port()
    status, records, err = _kvload(port, '--requests', 10, timeout=60)
    assert status == 1
    assert _one_sentence(err).startswith('kvload: cannot connect to 127.0.0.1:%d' % port)
    assert _summary(records)['done'] == 0


def test_a_server_that_never_replies_times_out():
    """A listener that accepts and never answers: --timeout 0.5 ends the run with exit 1."""
    with socket.socket() as listener:
        listener.bind(('127.0.0.1', 0))
        listener.listen(8)
        started = time.monotonic()
        status, records, err = _kvload(listener.getsockname()[1], '--requests', 10,
                                       '--timeout', 0.5, timeout=60)
    assert status == 1 and time.monotonic() - started < 30
    assert 'no reply within 0.5 s' in _one_sentence(err)
    assert _phases(records)[0, 'set']['done'] == 0


def test_a_server_that_closes_cleanly_mid_phase_is_a_failure():
    """A listener that reads the first request and closes (FIN, no reset): exit 1, one sentence."""
    with socket.socket() as listener:
        listener.bind(('127.0.0.1', 0))
        listener.listen(8)

        def close_after_first_request():
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(30)
                conn.recv(4096)
        closer = threading.Thread(target=close_after_first_request, daemon=True)
        closer.start()
        status, records, err = _kvload(listener.getsockname()[1], '--requests', 10,
                                       '--timeout', 60, timeout=60)
        closer.join(10)
    assert status == 1
    assert _one_sentence(err) == ('kvload: client 0 stopped during set after 0 of 10 requests: '
                                  'the server closed the connection.')


@pytest.mark.parametrize('args, words', [
    (['--requests', 0], '--requests must be between 1 and 10000000'),
    (['--requests', 'many'], 'invalid int value'),
    (['--clients', 1001], '--clients must be between 1 and 1000'),
    (['--pipeline', 2000], '--pipeline must be between 1 and 1024'),
    (['--ops', 'set,put'], '--ops must list'),
    (['--ops', 'get,get'], '--ops must list'),
    (['--timeout', 0], '--timeout must be'),
    (['--value-size', 3], 'shorter than the longest value'),
    (['--latencies', '/nonexistent/dir/lat'], 'cannot write --latencies'),
    (['--bogus'], 'unrecognized arguments'),
])
def test_bad_arguments_exit_2_with_one_sentence(args, words):
    """Checked before connecting: status 2, one line on stderr, nothing on stdout."""
    p = subprocess.run(_argv(free_port(), *args), cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and p.stdout == ''
    assert words in _one_sentence(p.stderr)


# -- the client in memory ----------------------------------------------------------------------

class _Transport:
    """Records writes; stands in for a TCP transport."""

    def __init__(self):
        self.writes = []
        self.closed = False

    def write(self, data):
        self.writes.append(data)

    def close(self):
        self.closed = True

    def get_extra_info(self, name):
        return None


def _client(ops, requests, depth, cid=0):
    """A KvClient on a fake transport, started; return (client, transport, ended phases)."""
    loop = asyncio.new_event_loop()
    ended = []
    client = KvClient(cid, Workload(), ops, requests, depth, lambda c, p: ended.append(p),
                      loop.create_future())
    transport = _Transport()
    client.connection_made(transport)
    client.start()
    return client, transport, ended


def test_pipeline_keeps_depth_in_flight_and_answers_a_batch_with_one_write():
    """Depth 4: 4 requests in the first write; 3 replies at once bring one write of 3 more."""
    client, transport, _ = _client(['set'], 10, 4, cid=2)
    assert transport.writes == [b''.join(b'*3\r\n$3\r\nSET\r\n$3\r\nk%d\r\n$7\r\nValue%d\r\n'
                                         % (i, i) for i in range(20, 24))]
    client.data_received(b'+OK\r\n' * 3)
    assert len(transport.writes) == 2 and transport.writes[1].count(b'SET') == 3
    assert b'k26' in transport.writes[1] and b'k27' not in transport.writes[1]


def test_phases_run_back_to_back_and_judge_replies():
    """SET then GET of 2 keys: a wrong value, an error, then the next phase starts at once."""
    client, transport, ended = _client(['set', 'get'], 2, 1)
    client.data_received(b'+OK\r\n')
    client.data_received(b'-OOM no memory\r\n')
    assert ended[0].op == 'set' and (ended[0].ok, ended[0].errors) == (1, {'OOM': 1})
    assert transport.writes[-1] == b'*2\r\n$3\r\nGET\r\n$2\r\nk0\r\n'
    client.data_received(b'$6\r\nValue0\r\n$6\r\nValue9\r\n'[:12])
    client.data_received(b'$6\r\nValue9\r\n')
    assert (ended[1].ok, ended[1].wrong, len(ended[1].latencies)) == (1, 1, 2)
    assert client.done.done() and client.failure is None and transport.closed


def test_malformed_reply_fails_the_client():
    """Bytes that are not RESP end the client with a reason, not an exception."""
    client, transport, _ = _client(['get'], 5, 1)
    client.data_received(b'?what\r\n')
    assert client.done.done() and 'malformed RESP' in client.failure and transport.closed
    assert client.phases[0].failure == client.failure


def test_latency_stats_are_nearest_rank():
    """p50 of 1..10 is 5, p90 is 9, p99 is 10."""
    stats = latency_stats(np.arange(1, 11, dtype=float))
    assert stats == {'p50_us': 5.0, 'p90_us': 9.0, 'p99_us': 10.0, 'max_us': 10.0,
                     'mean_us': 5.5}
