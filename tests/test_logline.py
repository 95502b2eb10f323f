"""repronet.logline writes exactly what json.dumps(record, separators=(',', ':')) wrote.

Node logs from before the fast formatter, and from the other backend, must stay byte for
byte the same, so random records (non-ASCII and control characters in strings, NaN and
infinities, huge integers, booleans, None, nested values, keys that are not strings) are
compared with json's own encoding of {'t': round(t, 6), 'event': event, **fields}."""

import json
import math
import random
import struct

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
                 st.floats(9.9e4, 1.1e5), st.floats(allow_nan=True, allow_infinity=True),
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
        x = rng.random() * rng.choice([1e-6, 1e-3, 1.0, 30.0, 1e3, 9.9e4])
        digits = rng.choice([6, 7])
        assert _bits(logline.rounded(x, digits)) == _bits(round(x, digits)), (x, digits)


def test_rounded_leaves_other_digits_to_round():
    assert logline.rounded(2.675, 2) == round(2.675, 2)
    assert logline.rounded(123.456, 0) == round(123.456, 0)
