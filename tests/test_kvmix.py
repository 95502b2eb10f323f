"""workloads.kvmix against one server on 127.0.0.1: redis-server, and our KV node alone.

Each test starts its own server (ephemeral port) and kills it by PID.  kvmix runs as a
child process; what is checked is what the runner sees: exit status, JSON lines, one
sentence on stderr, the latency files, and what the server itself counted (DBSIZE, INFO
commandstats, the values it holds).  No timing is asserted.
"""

import collections
import os
import signal
import socket
import time

import numpy as np
import pytest

from tests import kvmix_proc as kvmix
from tests.kv_proc import KVProc
from tests.ports import free_port
from tests.redis_proc import needs_redis, redis_server  # noqa: F401  (the server fixture)
from workloads.keyspace import Keyspace


def _keyspace_args(keys, seed=0, *more):
    return ['--keys', keys, '--seed', seed] + list(more)


@needs_redis
def test_preload_then_mix_gets_check_out_and_counts_match_the_server(server, tmp_path):
    """Preload SETs every key once with version 0; the 80/20 mix's GETs all check out; the
    per_server counts are the server's own command counts; latency files hold every op."""
    keys, ks = 3000, Keyspace(3000, seed=11)
    status, records, err = kvmix.run('--servers', server.addr, '--phase', 'preload',
                                     '--clients', 4, '--pipeline', 16,
                                     *_keyspace_args(keys, 11))
    assert status == 0 and err == '', err
    ready = records[0]
    assert ready['event'] == 'ready' and ready['mode'] == 'single'
    assert ready['servers'] == [server.addr] and ready['keys'] == keys
    s = kvmix.summary(records)
    assert s['ops']['set']['ok'] == s['ops']['set']['count'] == keys
    assert s['per_server'] == {server.addr: {'get': 0, 'set': keys}} and s['moved'] == 0
    r = server.client()
    assert r.dbsize() == keys
    for i in (0, 1, 1234, keys - 1):
        assert r.get('key:%d' % i) == ks.value(i)

    r.config_resetstat()
    prefix = tmp_path / 'lat'
    status, records, err = kvmix.run('--servers', server.addr, '--clients', 5,
                                     '--requests', 400, '--latencies', prefix,
                                     *_keyspace_args(keys, 11))
    assert status == 0 and err == '', err
    s = kvmix.summary(records)
    get, put = s['ops']['get'], s['ops']['set']
    assert (get['miss'], get['wrong'], get['errors'], put['wrong'], put['errors']) == \
        (0, 0, {}, 0, {})
    assert get['ok'] == get['count'] and put['ok'] == put['count']
    assert get['count'] + put['count'] == s['requests'] == 5 * 400
    assert 0.74 < get['count'] / s['requests'] < 0.86
    assert s['per_server'] == {server.addr: kvmix.command_calls(server)}
    assert s['per_server'][server.addr] == {'get': get['count'], 'set': put['count']}
    for op in ('get', 'set'):
        us = np.fromfile('%s.%s.u32' % (prefix, op), dtype='<u4') * 0.1
        assert len(us) == s['ops'][op]['count']
        assert s['ops'][op]['mean_us'] == pytest.approx(us.mean(), abs=0.001)
        assert s['ops'][op]['p50_us'] <= s['ops'][op]['p99_us'] <= s['ops'][op]['max_us']
    assert s['ops_per_s'] > 0 and s['duration_s'] > 0 and s['clients_failed'] == 0
    versions = {r.get('key:%d' % i).split(b'|')[1] for i in range(keys)}
    assert any(v.startswith(b'c') for v in versions) and b'0' in versions


@needs_redis
def test_the_seed_fixes_each_clients_keys_and_operations(server):
    """One client, one request in flight: the server ends up exactly as replaying that
    client's draws (Keyspace(seed).sampler(client)) says, and again on a second run."""
    keys, seed, base, n = 200, 3, 5, 300
    r = server.client()

    def run_once():
        r.flushall()
        for args in (('--phase', 'preload'), ('--requests', n, '--client-base', base)):
            status, records, err = kvmix.run('--servers', server.addr, *args,
                                             *_keyspace_args(keys, seed))
            assert status == 0, err
        return kvmix.summary(records), {k: r.get(k) for k in r.keys()}

    summary, state = run_once()
    ks = Keyspace(keys, seed=seed)
    expected = {b'key:%d' % i: ks.value(i) for i in range(keys)}
    sets = 0
    for op, i in ks.sampler(base).take(n):
        if op == 'set':
            sets += 1
            expected[b'key:%d' % i] = ks.value(i, b'c%d.%d' % (base, sets))
    assert summary['ops']['set']['count'] == sets
    assert state == expected
    assert run_once()[1] == state


@needs_redis
def test_misses_are_counted_and_not_failures(server):
    """A mix without preload: GETs of keys never SET are misses; the run still succeeds."""
    status, records, err = kvmix.run('--servers', server.addr, '--requests', 300,
                                     *_keyspace_args(50))
    assert status == 0, err
    get = kvmix.summary(records)['ops']['get']
    assert get['miss'] > 0 and get['ok'] > 0 and get['wrong'] == 0
    assert get['miss'] + get['ok'] == get['count']


@needs_redis
def test_wrong_values_and_error_replies_fail_with_one_sentence(server):
    """A foreign value is wrong, a list is WRONGTYPE: counted per kind, exit 1."""
    ks = Keyspace(3, zipf=0)
    r = server.client()
    r.set('key:0', b'garbage')
    r.rpush('key:1', b'a list')
    r.set('key:2', ks.value(2))
    status, records, err = kvmix.run('--servers', server.addr, '--get-ratio', 1,
                                     '--requests', 300, '--keys', 3, '--zipf', 0)
    assert status == 1
    get = kvmix.summary(records)['ops']['get']
    assert get['wrong'] > 0 and get['errors']['WRONGTYPE'] > 0 and get['ok'] > 0
    assert get['wrong'] + get['errors']['WRONGTYPE'] + get['ok'] == get['count'] == 300
    assert 'were wrong or errors' in kvmix.one_sentence(err)


@needs_redis
def test_server_killed_mid_run_is_a_clear_failure(server):
    """SIGKILL of the server during a timed mix: exit 1 naming the server; summary written."""
    kvmix.run('--servers', server.addr, '--phase', 'preload', *_keyspace_args(500))
    proc = kvmix.start('--servers', server.addr, '--clients', 10, '--duration', 120,
                       *_keyspace_args(500))
    kvmix.wait_ready(proc)
    deadline = time.monotonic() + 30
    while kvmix.command_calls(server)['get'] < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    server.kill()
    status, records, err = kvmix.finish(proc, timeout=60)
    assert status == 1
    sentence = kvmix.one_sentence(err)
    assert server.addr in sentence and 'stopped after' in sentence, sentence
    assert 'and 9 other clients' in sentence
    s = kvmix.summary(records)
    assert s['clients_failed'] == 10 and s['requests'] > 0


@needs_redis
def test_barrier_holds_requests_until_go_and_sigterm_stops_with_a_summary(server):
    """--barrier: connected and ready, nothing sent before go.  SIGTERM mid-run: exit 1,
    'interrupted by SIGTERM', the summary still written."""
    proc = kvmix.start('--servers', server.addr, '--clients', 3, '--barrier',
                       '--duration', 120, *_keyspace_args(100))
    ready = kvmix.wait_ready(proc)
    assert ready['clients'] == 3 and ready['mode'] == 'single'
    assert server.client().info('clients')['connected_clients'] == 3 + 1   # + this one
    assert kvmix.command_calls(server) == {'get': 0, 'set': 0}
    proc.stdin.write('go\n')
    proc.stdin.flush()
    deadline = time.monotonic() + 30
    while sum(kvmix.command_calls(server).values()) < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    status, records, err = kvmix.finish(proc, timeout=60)
    assert status == 1 and 'interrupted by SIGTERM' in kvmix.one_sentence(err)
    assert kvmix.summary(records)['requests'] > 0


@needs_redis
def test_a_server_that_stops_answering_is_a_timeout(server):
    """Requests held by the server (CLIENT PAUSE) longer than --timeout: exit 1 saying so."""
    proc = kvmix.start('--servers', server.addr, '--clients', 2, '--barrier', '--timeout', 0.5,
                       '--requests', 100, *_keyspace_args(10))
    kvmix.wait_ready(proc)
    server.client().execute_command('CLIENT', 'PAUSE', 30000, 'ALL')   # killed at teardown
    status, records, err = kvmix.finish(proc, 'go\n', timeout=60)
    assert status == 1
    assert 'no reply within 0.5 s' in kvmix.one_sentence(err)
    assert kvmix.summary(records)['clients_failed'] == 2


@needs_redis
def test_an_unreachable_entry_point_is_skipped(server):
    """--servers down,up: the second answers, the run goes to it alone."""
    down = '127.0.0.1:%d' % free_port()
    status, records, err = kvmix.run('--servers', '%s,%s' % (down, server.addr),
                                     '--requests', 20, *_keyspace_args(10))
    assert status == 0, err
    assert records[0]['servers'] == [server.addr]


def test_no_server_answering_is_one_sentence():
    """Nothing listening, or a listener that never answers CLUSTER SLOTS: exit 1 naming each."""
    down = '127.0.0.1:%d' % free_port()
    with socket.socket() as mute:
        mute.bind(('127.0.0.1', 0))
        mute.listen()
        silent = '127.0.0.1:%d' % mute.getsockname()[1]
        status, records, err = kvmix.run('--servers', '%s,%s' % (down, silent),
                                         '--timeout', 0.5, '--keys', 10)
    assert status == 1
    sentence = kvmix.one_sentence(err)
    assert sentence.startswith('kvmix: no server of --servers answered') and down in sentence
    assert silent + ': no reply within 0.5 s' in sentence
    assert kvmix.summary(records)['requests'] == 0


@pytest.mark.parametrize('args, words', [
    (['--servers', ''], 'at least one'),
    (['--servers', 'localhost'], 'HOST:PORT'),
    (['--servers', '127.0.0.1:0'], 'port'),
    (['--clients', 0], '--clients'),
    (['--pipeline', 2000], '--pipeline'),
    (['--keys', 0], '--keys'),
    (['--zipf', -1], '--zipf'),
    (['--get-ratio', 1.5], '--get-ratio'),
    (['--value-size', 10], '--value-size'),
    (['--timeout', 0], '--timeout'),
    (['--duration', 1, '--requests', 5], 'not both'),
    (['--duration', -1], '--duration'),
    (['--phase', 'preload', '--requests', 5], 'mix only'),
    (['--phase', 'preload', '--client-base', 4, '--clients', 2, '--total-clients', 5],
     '--total-clients'),
    (['--total-clients', 5], 'preload only'),
    (['--dataset', 'wikipedia'], '--dataset'),
    (['--dataset', 'enron:/nonexistent/maildir'], 'not a folder'),
    (['--value-size', 100, '--dataset', 'enron:/tmp'], 'synthetic'),
    (['--clients', 1000, '--pipeline', 100], 'bytes'),
    (['--latencies', '/nonexistent/dir/lat'], 'cannot write'),
    (['--phase', 'warmup'], 'invalid choice'),
])
def test_bad_arguments_are_one_sentence_and_exit_2(args, words):
    status, records, err = kvmix.run('--servers', '127.0.0.1:1', *args) \
        if '--servers' not in args else kvmix.run(*args)
    assert status == 2 and records == []
    sentence = kvmix.one_sentence(err)
    assert sentence.startswith('kvmix: ') and words in sentence, sentence


def _maildir(root):
    """A small Enron-style maildir: 6 messages of 2 users, one without a Message-ID."""
    bodies = collections.OrderedDict()
    for user, folder, n, body in [('a-b', 'inbox', 1, b'hi'), ('a-b', 'inbox', 2, b'\x00\xff'),
                                  ('a-b', 'sent/2001', 1, b'x' * 5000), ('c-d', 'inbox', 1, b''),
                                  ('c-d', 'inbox', 3, b'last')]:
        folder_path = os.path.join(root, 'maildir', user, folder)
        os.makedirs(folder_path, exist_ok=True)
        mid = b'<%s.%s.%d@thyme>' % (user.encode(), folder.encode(), n)
        with open(os.path.join(folder_path, '%d.' % n), 'wb') as f:
            f.write(b'Message-ID: ' + mid + b'\r\nSubject: s\r\n\r\n' + body)
        bodies[mid] = body
    with open(os.path.join(root, 'maildir', 'c-d', 'inbox', '2.'), 'wb') as f:
        f.write(b'Subject: no id\r\n\r\nnothing')
    return bodies


@needs_redis
def test_enron_dataset_values_are_message_bodies(server, tmp_path):
    """--dataset enron:DIR: keys are Message-IDs, values the bodies, GETs must match exactly;
    the ready line says what was loaded and skipped."""
    bodies = _maildir(str(tmp_path))
    spec = 'enron:%s' % tmp_path
    status, records, err = kvmix.run('--servers', server.addr, '--phase', 'preload',
                                     '--dataset', spec, '--keys', 100)
    assert status == 0, err
    ready = records[0]
    assert ready['keys'] == 5 and ready['loaded'] == 5 and not ready['synthetic']
    assert ready['skipped'] == {'no_message_id': 1}
    r = server.client()
    assert {k: r.get(k) for k in r.keys()} == bodies
    status, records, err = kvmix.run('--servers', server.addr, '--dataset', spec,
                                     '--requests', 200, '--clients', 2)
    assert status == 0, err
    s = kvmix.summary(records)
    assert s['ops']['get']['ok'] == s['ops']['get']['count'] > 0
    assert {k: r.get(k) for k in r.keys()} == bodies
    status, _, err = kvmix.run('--servers', server.addr, '--dataset', 'enron:%s' % tmp_path,
                               '--enron-keys', 'path', '--phase', 'preload')
    assert status == 0 and r.get('c-d/inbox/2.') == b'nothing'


def test_our_kv_node_without_a_cluster_is_one_server():
    """nodes.kv.server without --cluster: CLUSTER SLOTS is an error, so kvmix runs against it
    alone, and every GET after the preload checks out."""
    with KVProc() as node:
        addr = '127.0.0.1:%d' % node.port
        status, records, err = kvmix.run('--servers', addr, '--phase', 'preload',
                                         '--pipeline', 8, *_keyspace_args(500))
        assert status == 0, err
        assert records[0]['mode'] == 'single'
        status, records, err = kvmix.run('--servers', addr, '--clients', 4, '--requests', 200,
                                         *_keyspace_args(500))
        assert status == 0, err
        get = kvmix.summary(records)['ops']['get']
        assert get['ok'] == get['count'] > 0
