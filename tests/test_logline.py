"""repronet.logline writes exactly what json.dumps(record, separators=(',', ':')) wrote.

Node logs from before the fast formatter, and from the other backend, must stay byte for
byte the same, so random records (non-ASCII and control characters in strings, NaN and
infinities, huge integers, booleans, None, nested values, keys that are not strings) are
compared with json's own encoding of {'t': round(t, 6), 'event': event, **fields}."""

import json
import math
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repronet import logline

_SCALARS = st.one_of(st.text(), st.integers(), st.integers(-2 ** 80, 2 ** 80),
                     st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none())
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=4)
_KEYS = st.one_of(st.text(max_size=8), st.sampled_from(['op', 'name', 'ok', 'latency']))


def _expected(t, event, fields):
    rec = {'t': round(t, 6), 'event': event}
    rec.update(fields)
    return json.dumps(rec, separators=(',', ':')) + '\n'


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.floats(0, 1e7), st.integers(0, 10 ** 6)), st.text(),
       st.dictionaries(_KEYS, _VALUES, max_size=8))
def test_a_record_is_the_line_json_dumps_writes(t, event, fields):
    fields.pop('t', None)
    fields.pop('event', None)
    assert logline.line(t, event, fields) == _expected(t, event, fields)


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.floats(0, 1e7), st.integers(0, 10 ** 6)), st.text(),
       st.dictionaries(_KEYS, _VALUES, max_size=8), st.integers(0, 8), st.integers(0, 8))
def test_a_record_holding_its_t_and_event_is_the_line_write_wrote(t, event, fields, at_t,
                                                                  at_event):
    """logline.record(rec) (a client's op records) writes what log.write(**rec) wrote,
    wherever t and event stand in the record."""
    fields.pop('t', None)
    fields.pop('event', None)
    items = list(fields.items())
    items.insert(min(at_t, len(items)), ('t', t))
    items.insert(min(at_event, len(items)), ('event', event))
    rec = dict(items)
    assert logline.record(rec) == logline.line(t, event, fields) == _expected(t, event, fields)


def test_the_awkward_values_one_by_one():
    awkward = {'nan': math.nan, 'inf': math.inf, 'minus_inf': -math.inf, 'true': True,
               'false': False, 'none': None, 'big': 10 ** 30, 'neg': -5, 'tiny': 1e-300,
               'quote': 'a"b\\c\n\x00\u00e9\U0001f600', 'list': [1, 'x', None], 'empty': '',
               'nested': {'a': [1.5, {'b': False}]}, 'tuple': (1, 2)}
    for key, value in awkward.items():
        assert logline.line(1.25, 'op', {key: value}) == _expected(1.25, 'op', {key: value})
    assert logline.line(3.1234567, 'op', awkward) == _expected(3.1234567, 'op', awkward)


def test_keys_that_are_not_strings_are_written_as_json_writes_them():
    fields = {1: 'a', 2.5: 'b', True: 'c', None: 'd'}
    assert logline.line(0, 'x', fields) == _expected(0, 'x', fields)
    for key in (True, 1, 1.0, False, 0, 0.0):      # equal keys, which json writes apart
        assert logline.line(0, 'x', {key: 1}) == _expected(0, 'x', {key: 1})


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-1e-3, 1e-3),
                 st.floats(0.9e-4, 1.1e-4), st.floats(2.0 ** 32 - 10, 2.0 ** 32 + 10),
                 st.integers(0, 10 ** 7).map(lambda k: k / 1e7 + 0.5e-7)))
def test_the_time_is_round_t_6_as_json_writes_it_at_every_magnitude(t):
    """t takes a shortcut ('%.6f', trailing zeros cut) in [1e-4, 2**32): ties at the
    seventh decimal, the edges of that range and beyond them must match round() and repr."""
    assert logline.line(t, 'op', {}) == _expected(t, 'op', {})


def _bits(x):
    return struct.pack('>d', x)


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.floats(0, 1e5), st.floats(0, 1e-3), st.floats(0, 1.0),
                 st.floats(9.9e4, 1.1e5), st.floats(1e5, 1e12),
                 st.floats(allow_nan=True, allow_infinity=True),
                 st.integers(0, 10 ** 8).map(lambda k: (k + 0.5) / 1e6),
                 st.integers(0, 10 ** 8).map(lambda k: (k + 0.5) / 1e7),
                 st.integers(-10 ** 6, 10 ** 6)),
       st.sampled_from([6, 7]))
def test_rounded_is_round_bit_for_bit(x, digits):
    """The op records' time and latency: ties at the next decimal, values just beside them,
    the edges of the fast range, negatives, NaN, infinities and ints all match round()."""
    for value in (x, math.nextafter(x, -math.inf), math.nextafter(x, math.inf)) \
            if type(x) is float else (x,):
        expected = round(value, digits)
        got = logline.rounded(value, digits)
        assert type(got) is type(expected)
        assert got == expected or (got != got and expected != expected)
        if type(got) is float and got == got:
            assert _bits(got) == _bits(expected)


def test_rounded_on_many_random_times():
    rng = random.Random(7)
    for _ in range(200000):
        x = rng.random() * rng.choice([1e-6, 1e-3, 1.0, 30.0, 1e3, 9.9e4, 1e5, 1e9])
        digits = rng.choice([6, 7])
        assert _bits(logline.rounded(x, digits)) == _bits(round(x, digits)), (x, digits)
        by_digits = logline.rounded_6 if digits == 6 else logline.rounded_7    # op records'
        assert _bits(by_digits(x)) == _bits(round(x, digits)), (x, digits)


def test_rounded_leaves_other_digits_to_round():
    assert logline.rounded(2.675, 2) == round(2.675, 2)
    assert logline.rounded(123.456, 0) == round(123.456, 0)
    for digits in (5, 8, 6.0, None):
        with pytest.raises(ValueError):
            logline.rounder(digits)


class _Str(str):
    pass


class _Int(int):
    pass


def _random_value(rng):
    kind = rng.randrange(12)
    if kind == 0:
        return rng.choice(['', 'op', 's6', 'a"b', 'back\\slash', 'é', '\x00\x1f', '100%',
                           '%s%d', 'p3-bench-000001.bin', '\U0001f600', 'nan'])
    if kind == 1:
        return rng.choice([0, 1, -1, 7, 10 ** 20, -(2 ** 70)])
    if kind == 2:
        return rng.choice([True, False])
    if kind == 3:
        return None
    if kind == 4:
        return rng.choice([0.0, -0.0, math.nan, math.inf, -math.inf, 1e-300, -2.5, 0.0004578,
                           1e22, 123456.789, rng.random(), rng.random() * 1e-6])
    if kind == 5:
        return rng.choice([[1, 'x'], {'a': None}, (1.5,), []])
    if kind == 6:
        return rng.choice([_Str('sub'), _Int(3)])
    return rng.choice(['search', 'get', 'put', 'x' * rng.randrange(40), 0.000235, 0, 2, True])


def _random_time(rng):
    kind = rng.randrange(6)
    if kind == 0:       # a microsecond time, as an op record's: its last digits may be zeros
        return rng.randrange(10 ** 9) / rng.choice([1e6, 1e5, 1e3, 1.0])
    if kind == 1:
        return rng.choice([0.0, -0.0, 5e-5, 1e-4, 0.0001234, 2.0 ** 32, 2.0 ** 32 - 1e-6,
                           1e9 + 0.5, 7, True, math.nan, math.inf, -3.25])
    return rng.random() * rng.choice([1e-3, 1.0, 30.0, 1e3, 1e7])


def test_records_written_by_shape_are_the_field_writers_bytes():
    """The CPython op-record writer (_records_by_shape: a shape's template and converters)
    against the field writer and json.dumps, on records of a few dozen shapes met again and
    again with other values: the same keys holding values of other types (a bool where an
    int was, NaN where a latency was, a subclass), t and event elsewhere than first, keys
    that are not strings or hold a '%', t out of the range of '%.6f' or ending in zeros."""
    rng = random.Random(40)
    names = ['op', 'name', 'ok', 'latency', 'server', 'bytes', 'holders', 'error', '100%', 'é']
    layouts = []
    for _ in range(30):
        keys = rng.sample(names, rng.randrange(len(names) + 1))
        if rng.random() < 0.1:
            keys.insert(rng.randrange(len(keys) + 1), rng.choice([1, True, 2.5, None]))
        at_t, at_event = (0, 1) if rng.random() < 0.8 else (rng.randrange(3), rng.randrange(3))
        keys.insert(min(at_t, len(keys)), 't')
        keys.insert(min(at_event, len(keys)), 'event')
        layouts.append(keys)
    layouts += [['t', 'event', key, 'ok'] for key in (1, True, 1.0, '1')]   # equal keys
    logline._SHAPES.clear()
    batch, lines = [], []
    for _ in range(20000):
        keys = rng.choice(layouts)
        rec = {key: _random_value(rng) for key in keys}
        rec['t'] = _random_time(rng)
        rec['event'] = rng.choice(['op', 'op', 'a"b', 5, None])
        fields = {key: value for key, value in rec.items() if key not in ('t', 'event')}
        expected = _expected(rec['t'], rec['event'], fields)
        assert logline._records_by_shape((rec,)) == expected, rec
        assert logline._record_by_field(rec) == expected, rec
        batch.append(rec)
        lines.append(expected)
        if rng.random() < 0.01:     # many records at once: each line in its place
            assert logline._records_by_shape(batch) == ''.join(lines)
            assert logline._records_by_field(batch) == ''.join(lines)
            batch, lines = [], []
    prepared = [shape for shape, how in logline._SHAPES.items() if how is not None]
    assert len(prepared) > 50      # the shape writer wrote many of them itself
    assert logline._records_by_shape([]) == logline._records_by_field([]) == ''


def test_an_op_record_is_written_by_shape_under_cpython():
    """CPython 3.11 (a simulated run's default interpreter) writes op records by shape;
    PyPy by field (its JIT is faster through the field loop)."""
    import sys
    if sys.implementation.name == 'cpython' and sys.version_info >= (3, 11):
        assert logline.records is logline._records_by_shape
    else:
        assert logline.records is logline._records_by_field


def test_zeros_are_never_remembered_as_each_other():
    for value in (0.0, -0.0, 0.0, -0.0, 2.5, -2.5, math.inf, -math.inf):
        rec = {'t': 1.5, 'event': 'op', 'latency': value}
        assert logline.record(rec) == _expected(1.5, 'op', {'latency': value})


def test_the_simulated_log_keeps_records_and_writes_in_order_and_spills(tmp_path):
    """repronet.sim.process's log: op records (log.record, or many by log.records) and other
    lines (log.write) wait in memory in their order, go to the file once 64 KiB wait, and
    all of them by spill()."""
    from types import SimpleNamespace
    from repronet.sim import process
    proc = SimpleNamespace(engine=SimpleNamespace(now=2.5), is_ready=False)
    path = tmp_path / 'node.log'
    log = process._Log(proc, str(path))
    expected = []
    log.write('ready', port=5)
    expected.append(logline.line(2.5, 'ready', {'port': 5}))
    assert proc.is_ready
    rng = random.Random(3)
    for spilled in range(3):
        while sum(map(len, expected)) < (spilled + 1) * log.LIMIT:
            recs = [{'t': rng.random() * 100, 'event': 'op', 'op': 'search',
                     'name': 'f%d' % rng.randrange(10 ** 6), 'ok': rng.random() < 0.9,
                     'latency': rng.random() * 1e-3, 'server': 's1', 'bytes': 0, 'holders': 1}
                    for _ in range(rng.choice([1, 1, 2, 50]))]
            log.records(recs)
            expected.extend(logline.line(rec['t'], 'op', {k: v for k, v in rec.items()
                                                           if k not in ('t', 'event')})
                            for rec in recs)
        written = path.read_text()      # records alone spill once 64 KiB wait
        assert len(written) > spilled * log.LIMIT and ''.join(expected).startswith(written)
        t = rng.random()
        log.write('note', t=t, n=spilled)
        expected.append(logline.line(t, 'note', {'n': spilled}))
    log.spill()
    assert path.read_text() == ''.join(expected)


def test_a_node_process_log_writes_many_records_as_each_alone():
    """nodes.dht.common.JsonLog.records (a real client's op records at its end) writes what
    records() of each alone writes, json.dumps's bytes, in one write."""
    import io
    from nodes.dht.common import JsonLog
    rng = random.Random(41)
    recs = [{'t': rng.randrange(10 ** 8) / 1e6, 'event': 'op', 'op': 'search', 'name': 'f%d' % i,
             'ok': rng.random() < 0.9, 'latency': rng.random() * 1e-3, 'server': 's1',
             'bytes': i, **({'holders': 1} if i % 3 else {'error': 'x'})} for i in range(300)]
    alone, together = JsonLog(io.StringIO()), JsonLog(io.StringIO())
    for rec in recs:
        alone.records([rec])
    together.records(recs)
    expected = ''.join(json.dumps(rec, separators=(',', ':')) + '\n' for rec in recs)
    assert together.stream.getvalue() == alone.stream.getvalue() == expected


def test_records_of_one_shape_then_another_in_one_batch():
    """_records_by_shape reuses the template of the record before when the shape is the
    same: runs of one shape, each broken by a record whose keys, order or one value's type
    differ (a bool where an int was, an int where a float was, a str subclass), each line
    as json.dumps writes it."""
    rng = random.Random(41)
    base = {'t': 1.5, 'event': 'op', 'op': 'search', 'name': 'f', 'ok': True,
            'latency': 0.000235, 'server': 's1', 'bytes': 0, 'holders': 1}
    changes = [lambda r: r.update(ok=1), lambda r: r.update(bytes=True),
               lambda r: r.update(latency=2), lambda r: r.update(holders=1.0),
               lambda r: r.update(name=_Str('f')), lambda r: r.update(error='x'),
               lambda r: r.update(ok=None), lambda r: r.pop('server'),
               lambda r: r.update(server=r.pop('server')), lambda r: r.update(t=5)]
    recs = []
    for change in changes * 5:
        for _ in range(rng.randrange(1, 4)):
            recs.append(dict(base, t=rng.randrange(1, 10 ** 8) / 1e6, name='f%d' % len(recs)))
        odd = dict(base, t=rng.randrange(1, 10 ** 8) / 1e6)
        change(odd)
        recs.append(odd)
    expected = ''.join(_expected(rec['t'], rec['event'], {k: v for k, v in rec.items()
                                                          if k not in ('t', 'event')})
                       for rec in recs)
    assert logline._records_by_shape(recs) == expected
    assert logline._records_by_field(recs) == expected
