"""The KV node's append-only log (nodes/kv/aof.py): records and recovery from a damaged tail.

Recovery must keep exactly the records before the first bad one, whatever the damage: the log is
cut at every byte of a small log, and every byte of it is flipped in turn.
"""

import zlib

import pytest
from hypothesis import given, settings, strategies as st

from nodes.kv import aof

OPS = [('S', b'a', b'1'), ('S', b'bb', b''), ('D', b'a', None), ('S', b'c', b'xyz' * 5),
       ('F', None, None), ('S', b'a', b'again'), ('S', b'd', b'\r\n\x00'), ('D', b'zz', None)]


def encode(op):
    """The record of one (op, key, value)."""
    kind, key, value = op
    if kind == 'S':
        return aof.encode_set(key, value)
    return aof.encode_del(key) if kind == 'D' else aof.encode_flushall()


def expected(ops):
    """The key directory (memory storage) after applying `ops` in order."""
    d = {}
    for kind, key, value in ops:
        if kind == 'S':
            d[key] = value
        elif kind == 'D':
            d.pop(key, None)
        else:
            d.clear()
    return d


RECORDS = [encode(op) for op in OPS]
LOG = b''.join(RECORDS)
BOUNDARIES = [sum(len(r) for r in RECORDS[:i]) for i in range(len(RECORDS) + 1)]


def chunks(data, size):
    """`data` in pieces of `size` bytes, as a file would be read."""
    return (data[i:i + size] for i in range(0, len(data), size))


def test_a_whole_log_recovers_in_both_storages():
    mem = aof.recover([LOG], 'memory')
    assert mem.problem is None and mem.records == len(OPS)
    assert mem.keydir == expected(OPS) and mem.valid_bytes == mem.total_bytes == len(LOG)
    log = aof.recover(chunks(LOG, 3), 'log')
    assert log.keydir.keys() == mem.keydir.keys()
    for key, (offset, length) in log.keydir.items():
        assert LOG[offset:offset + length] == mem.keydir[key]


def test_value_offset_in_record_and_append_set_match_encode_set():
    buf = bytearray(b'xx')
    aof.append_set(buf, b'key', b'value')
    assert bytes(buf[2:]) == aof.encode_set(b'key', b'value')
    at = aof.value_offset_in_record(b'key')
    assert buf[2 + at:2 + at + 5] == b'value'


@pytest.mark.parametrize('storage', ['memory', 'log'])
def test_every_truncation_point_keeps_the_whole_records_before_it(storage):
    for cut in range(len(LOG) + 1):
        r = aof.recover(chunks(LOG[:cut], 4), storage)
        whole = max(i for i, b in enumerate(BOUNDARIES) if b <= cut)
        assert (r.valid_bytes, r.records, r.total_bytes) == (BOUNDARIES[whole], whole, cut)
        assert r.keydir.keys() == expected(OPS[:whole]).keys()
        if cut == BOUNDARIES[whole]:
            assert r.problem is None
        else:
            assert r.problem.startswith('log ends with a truncated record at byte %d ('
                                        % BOUNDARIES[whole])
            assert ('%d bytes of a' % (cut - BOUNDARIES[whole])) in r.problem


def test_every_flipped_byte_is_detected_and_nothing_after_it_is_applied():
    for at in range(len(LOG)):
        damaged = bytearray(LOG)
        damaged[at] ^= 0x40
        r = aof.recover([bytes(damaged)], 'memory')
        bad = max(i for i, b in enumerate(BOUNDARIES) if b <= at)
        assert r.problem is not None, 'flip at byte %d not detected' % at
        assert ('at byte %d ' % BOUNDARIES[bad]) in r.problem
        assert r.records == bad and r.valid_bytes == BOUNDARIES[bad]
        assert r.keydir == expected(OPS[:bad]) and r.total_bytes == len(LOG)


def test_a_checksum_failure_says_so():
    damaged = bytearray(LOG)
    damaged[BOUNDARIES[3] + aof.value_offset_in_record(b'c')] ^= 1    # inside c's value
    r = aof.recover([bytes(damaged)])
    assert r.problem == 'record at byte %d fails its checksum' % BOUNDARIES[3]


def test_a_corrupt_length_is_not_buffered():
    head = aof.HEADER.pack(aof.MAGIC, 0, 1 << 30)
    r = aof.recover([LOG, head, b'x' * 100], 'log', max_payload=1000)
    assert r.valid_bytes == len(LOG) and 'declares a 1073741824-byte payload' in r.problem


def test_a_valid_checksum_with_a_malformed_payload_is_reported():
    payload = b'D\x00\x00\x00\x09ab'        # key length beyond the payload
    rec = aof.HEADER.pack(aof.MAGIC, zlib.crc32(payload), len(payload)) + payload
    r = aof.recover([LOG, rec])
    assert r.records == len(OPS) and 'is malformed (key length 9' in r.problem


def test_an_empty_log_and_a_bad_storage():
    assert aof.recover([]).problem is None and aof.recover([]).valid_bytes == 0
    with pytest.raises(ValueError):
        aof.recover([], 'disk')


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from('SSSDF'), st.binary(max_size=6),
                          st.binary(max_size=30)), max_size=20),
       st.integers(1, 64))
def test_random_logs_recover_the_same_in_any_chunking(ops, size):
    ops = [(k, key, v) if k == 'S' else (k, key, None) for k, key, v in ops]
    log = b''.join(encode(op) for op in ops)
    r = aof.recover(chunks(log, size), 'memory')
    assert r.problem is None and r.keydir == expected(ops) and r.records == len(ops)
