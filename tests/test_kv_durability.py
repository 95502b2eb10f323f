"""The KV node's append-only file across crashes and damage (localhost, no root needed).

With ``--appendfsync always`` a SET is acknowledged only after its record is written and
fdatasync'ed, so a SIGKILL in the middle of a write burst must lose no acknowledged key.
(A SIGKILL leaves the page cache intact, so this catches a reply sent before its record was
written, not a missing fdatasync; only a power cut would show that.) A damaged log must be
reported on stderr and as a JSON line, its bad tail moved aside, its valid prefix served.
"""

import os
import signal
import threading

import pytest

from nodes.kv import aof
from tests.kv_proc import Client, KVProc, command, run_server

WRITERS = 4
DEPTH = 8                   # SETs each writer keeps in flight
KILL_AFTER = 600            # acknowledged SETs before the SIGKILL


def _write_burst(port, t, acked, progress):
    """SET w<t>-<i> = v<t>-<i>, DEPTH at a time, until the server dies; record each +OK."""
    try:
        c = Client(port, timeout=10)
        for base in range(0, 1_000_000, DEPTH):         # bounded; the kill ends it first
            keys = ['w%d-%d' % (t, i) for i in range(base, base + DEPTH)]
            c.send(b''.join(command('SET', k, 'v' + k) for k in keys))
            got = c.replies(DEPTH)
            ok = [k for k, r in zip(keys, got) if r == b'OK']
            with progress:
                acked.extend(ok)
                progress.notify_all()
            if len(ok) < DEPTH:
                return
    except OSError:
        return


def _values(port, keys):
    """GET every key over one pipelined connection; return {key: value or None}."""
    c = Client(port, timeout=30)
    try:
        got = c.ask(b''.join(command('GET', k) for k in keys), len(keys))
    finally:
        c.close()
    assert len(got) == len(keys)
    return dict(zip(keys, got))


def test_acknowledged_writes_survive_sigkill(tmp_path):
    log = tmp_path / 'kv.aof'
    acked, progress = [], threading.Condition()
    with KVProc('--log', log, '--appendfsync', 'always') as proc:
        threads = [threading.Thread(target=_write_burst, args=(proc.port, t, acked, progress))
                   for t in range(WRITERS)]
        for th in threads:
            th.start()
        with progress:
            assert progress.wait_for(lambda: len(acked) >= KILL_AFTER, timeout=120)
        proc.p.send_signal(signal.SIGKILL)
        proc.p.wait()
        for th in threads:
            th.join(30)
    assert not any(th.is_alive() for th in threads)
    with progress:
        acked = list(acked)
    with KVProc('--log', log) as again:
        recovered = again.ready['recovered']
        assert recovered['records'] >= len(acked)
        problem = recovered['problem']
        assert problem is None or 'truncated record' in problem     # a write cut by the kill
        values = _values(again.port, acked)
        lost = [k for k in acked if values[k] != ('v' + k).encode()]
        assert not lost, '%d of %d acknowledged SETs lost, e.g. %s' % (len(lost), len(acked),
                                                                       lost[:5])
        print('%d acknowledged SETs before SIGKILL, %d records recovered, all acknowledged '
              'keys present' % (len(acked), recovered['records']))


def _fill(log, n, *args):
    """Start a server on log, SET k0..k<n-1> = value<i>, stop it cleanly."""
    with KVProc('--log', log, *args) as proc:
        c = Client(proc.port)
        assert c.ask(b''.join(command('SET', 'k%d' % i, 'value%d' % i) for i in range(n)),
                     n) == [b'OK'] * n
        c.close()
        summary, status = proc.stop()
        assert status == 0


def _record_len(i):
    return len(aof.encode_set(b'k%d' % i, b'value%d' % i))


def test_truncated_tail_plus_garbage_is_reported_moved_aside_and_cut(tmp_path):
    log = tmp_path / 'kv.aof'
    _fill(log, 10)
    data = log.read_bytes()
    valid = len(data) - _record_len(9)
    cut = len(data) - 4                             # inside the last record
    garbage = b'\x00\xffgarbage' * 3
    log.write_bytes(data[:cut] + garbage)
    with KVProc('--log', log) as proc:
        report = [r for r in proc.records if r['event'] == 'recovery']
        assert len(report) == 1 and 'at byte %d' % valid in report[0]['problem']
        recovered = proc.ready['recovered']
        assert (recovered['valid_bytes'], recovered['records']) == (valid, 9)
        assert recovered['total_bytes'] == cut + len(garbage)
        assert os.path.getsize(log) == valid
        bad_tail = tmp_path / 'kv.aof.bad-tail'
        assert recovered['bad_tail'] == str(bad_tail)
        assert bad_tail.read_bytes() == data[valid:cut] + garbage
        values = _values(proc.port, ['k%d' % i for i in range(10)])
        assert values == dict(('k%d' % i, b'value%d' % i if i < 9 else None)
                              for i in range(10))
        c = Client(proc.port)
        assert c.ask(command('SET', 'k9', 'again')) == [b'OK']
        _, status = proc.stop()
    assert status == 0 and report[0]['problem'] in proc.stderr
    with KVProc('--log', log) as proc:             # the repaired log is clean
        assert proc.ready['recovered']['problem'] is None
        assert _values(proc.port, ['k8', 'k9']) == {'k8': b'value8', 'k9': b'again'}


def test_checksum_failure_keeps_only_the_records_before_it(tmp_path):
    log = tmp_path / 'kv.aof'
    _fill(log, 10)
    data = bytearray(log.read_bytes())
    at = sum(_record_len(i) for i in range(5))     # record of k5
    data[at + _record_len(5) - 1] ^= 0xFF          # last byte of its value
    log.write_bytes(bytes(data))
    with KVProc('--log', log) as proc:
        assert proc.ready['recovered']['problem'] == 'record at byte %d fails its checksum' % at
        values = _values(proc.port, ['k%d' % i for i in range(10)])
        assert [k for k, v in values.items() if v is not None] == ['k%d' % i for i in range(5)]
    assert (tmp_path / 'kv.aof.bad-tail').read_bytes() == bytes(data[at:])


def test_second_bad_tail_does_not_overwrite_the_first(tmp_path):
    log = tmp_path / 'kv.aof'
    for n in (3, 4):
        _fill(log, n)
        with open(log, 'ab') as f:
            f.write(b'junk%d' % n)
        with KVProc('--log', log) as proc:
            assert proc.ready['recovered']['problem'] is not None
    assert (tmp_path / 'kv.aof.bad-tail').read_bytes() == b'junk3'
    assert (tmp_path / 'kv.aof.bad-tail.1').read_bytes() == b'junk4'


@pytest.mark.parametrize('policy', ['everysec', 'no'])
def test_clean_stop_keeps_writes_under_every_policy(tmp_path, policy):
    log = tmp_path / 'kv.aof'
    _fill(log, 50, '--appendfsync', policy)
    with KVProc('--log', log) as proc:
        assert proc.ready['recovered']['records'] == 50
        assert _values(proc.port, ['k0', 'k49']) == {'k0': b'value0', 'k49': b'value49'}


def test_log_storage_reads_values_back_from_the_file(tmp_path):
    log = tmp_path / 'kv.aof'
    args = ('--storage', 'log', '--cache', 'lru', '--cache-size', 2)
    _fill(log, 20, *args)
    with KVProc('--log', log, *args) as proc:
        keys = ['k%d' % i for i in range(20)]
        assert _values(proc.port, keys) == {k: b'value' + k[1:].encode() for k in keys}
        c = Client(proc.port)
        assert c.ask(command('SET', 'k3', 'new') + command('DEL', 'k4') + command('GET', 'k3'),
                     3) == [b'OK', 1, b'new']
        summary, _ = proc.stop()
        assert summary['cache_misses'] >= 18
    with KVProc('--log', log, *args) as proc:
        assert _values(proc.port, ['k3', 'k4', 'k5']) == {'k3': b'new', 'k4': None,
                                                          'k5': b'value5'}


def test_log_in_use_by_another_server_is_refused(tmp_path):
    log = tmp_path / 'kv.aof'
    with KVProc('--log', log):
        r = run_server('--port', 0, '--log', log)
    assert r.returncode == 1 and 'in use by another process' in r.stderr
    assert 'Traceback' not in r.stderr
