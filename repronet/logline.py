"""One node log record as a JSON line, the same for every writer of one.

A node's log is one compact JSON object per line, ``t`` (seconds, rounded to the
microsecond) and ``event`` first, then the record's fields in order. The real processes
write it with ``nodes.dht.common.JsonLog`` and the simulator with ``repronet.sim.process``;
both call ``line`` here, so the two backends cannot drift apart.

The bytes are exactly ``json.dumps(record, separators=(',', ':'))``. Why not call that: the
simulator writes one record per operation of every client, and under PyPy that call was
about a fifth of a search (under CPython 3.11 json's C encoder costs about as much as the
field writer here: its float reprs and its chunk list). Flat fields (str, int, float, bool,
None) are formatted here the way json's encoder formats them (``encode_basestring_ascii``,
``int.__repr__``, ``float.__repr__``, NaN and Infinity as json spells them); any other value
(a list, a dict, a subclass) goes through json's own encoder. ``tests/test_logline.py``
compares the two on random records, and the by-shape writer of op records (below) with the
field writer.
"""

import json
import operator
import sys
from json.encoder import encode_basestring_ascii as _quoted

_ENCODE = json.JSONEncoder(separators=(',', ':')).encode     # what json.dumps does
_FLOAT = float.__repr__
_INT = int.__repr__
_KEYS = {}                  # field name -> ',"name":' (a log has few names)
_MAX_KEYS = 4096


class _FloatTexts(dict):
    """Positive finite float -> its repr, as json writes it (latencies repeat: 0.000235 ...);
    a miss computes the text (any float) and remembers it while there is room. Zeros are
    never kept (0.0 == -0.0, but json writes them apart), nor NaN or infinities."""

    def __missing__(self, value):
        if value > 0.0 and value != _INF:
            text = _FLOAT(value)
            if len(self) < _MAX_FLOATS:
                self[value] = text
            return text
        if value != value or value in (_INF, -_INF):
            return _ENCODE(value)
        return _FLOAT(value)


_INF = float('inf')
_FLOATS = _FloatTexts()
_MAX_FLOATS = 65536


def line(t, event, fields):
    """The line (with its newline) of a record at time t (seconds) of event with fields."""
    return _with_fields('{"t":' + _time(t) + ',"event":' + _value(event), fields, False)


def _record_by_field(rec):
    """line() of a record that holds its own ``t`` and ``event`` (a client's op record):
    the same bytes as ``line(rec['t'], rec['event'], the other fields in order)``, which is
    what ``log.write(**rec)`` wrote, without building two dicts of keywords per record (the
    simulator writes one record per operation of every client). ``records`` writes each
    record this way under PyPy; under CPython, ``_records_by_shape``, which comes here for
    what it does not take."""
    return _with_fields('{"t":' + _time(rec['t']) + ',"event":' + _value(rec['event']), rec,
                        True)


def _with_fields(text, fields, own):
    """text (a record's opening, its t and event) with fields added and closed; own: fields
    holds t and event too, which are already in text."""
    keys = _KEYS
    for name, value in fields.items():
        if own and (name == 't' or name == 'event'):
            continue
        try:
            key = keys[name]
        except KeyError:
            key = _key(name)
        kind = type(value)      # _value's commonest cases first, without a call (CPython)
        if kind is str:
            text += key + _quoted(value)
        elif kind is bool:
            text += key + ('true' if value else 'false')
        elif kind is int:
            text += key + _INT(value)
        else:
            text += key + _value(value)
    return text + '}\n'


def _time(t):
    """repr(round(t, 6)), as json writes it, for a float t in [1e-4, 2**32) the cheap way:
    '%.6f' rounds as round() does (the same correctly rounded conversion), and the double
    nearest a decimal of at most six places (a microsecond) prints as that decimal, since
    its neighbours there are closer together than a millionth. Else round() and repr."""
    if type(t) is float and 1e-4 <= t < 4294967296.0:
        text = '%.6f' % t
        text = text.rstrip('0')
        return text + '0' if text[-1] == '.' else text
    return _value(round(t, 6))


def _key(name):
    """',"name":' for a field name, as json writes a key; a few thousand str names are
    remembered, no others (1, 1.0 and True are one dict key, which json writes three ways)."""
    if type(name) is not str:
        return ',' + _ENCODE({name: 0})[1:-3] + ':'
    key = ',' + _quoted(name) + ':'
    if len(_KEYS) < _MAX_KEYS:
        _KEYS[name] = key
    return key


def _value(value):
    """One field's value as json.dumps writes it."""
    kind = type(value)
    if kind is str:
        return _quoted(value)
    if kind is int:
        return _INT(value)
    if kind is float:
        return _FLOATS[value]
    if value is True:
        return 'true'
    if value is False:
        return 'false'
    if value is None:
        return 'null'
    return _ENCODE(value)


# -- op records by shape (CPython) ---------------------------------------------------------
# A client writes one record per operation, all of one shape: the same keys in the same
# order, each holding a value of the same type ({'t': float, 'event': str, 'op': str, 'name':
# str, 'ok': bool, 'latency': float, 'server': str, 'bytes': int, 'holders': int}). Under
# CPython 3.11 the field writer's loop (a type test, a key lookup and two concatenations a
# field) was most of an op record's cost; written by shape, a record is a shape lookup, one
# C-level map of each field's converter and one %-format of the shape's template. Under PyPy
# the field writer is faster (its JIT sees through the loop, not through % or map), so
# ``records`` stays that there. A client's records are written at its end, all in one call.

_SHAPES = {}                # (keys..., value types...) -> (template, converters) or None
_MAX_SHAPES = 1024
_BY_TYPE = {                # exact type -> (converter to what the template takes, its spec)
    str: (_quoted, '%s'),
    int: (operator.index, '%d'),        # an int itself ('%d' writes int.__repr__)
    bool: (('false', 'true').__getitem__, '%s'),
    type(None): ({None: 'null'}.__getitem__, '%s'),
    float: (_FLOATS.__getitem__, '%s'),
}


def _records_by_shape(records):
    """The lines of records (dicts holding their own t and event), each the bytes of
    _record_by_field(rec), written by shape when their shape (its keys and their values'
    exact types) was seen before: its template ('{"t":%.6f,"event":%s,"op":%s,...}') takes
    each value through its type's converter (json's text, or the int itself for '%d').
    One call for all of a client's records: a call per record was a third of the cost. A
    record of the shape of the one before takes that one's template without looking it up
    (a client's records are nearly all of one shape): comparing two equal shapes is cheaper
    than hashing one, and equal shapes are what the lookup would have found equal too.

    What it skips and why that is exact: t must be the first key and a float in [1e-4,
    2**32) (else the field writer), where '%.6f' is what _time writes before it cuts
    trailing zeros; they are cut here when the line shows one. 'event' must be second. Keys
    must be str (1 and True are equal keys that json writes apart; such shapes are never
    prepared), values of the types in _BY_TYPE exactly (a bool is not taken as an int, nor
    a subclass as its base: the types are part of the shape). A shape that does not qualify
    is remembered as None and written by field."""
    shapes = _SHAPES
    lines = []
    add = lines.append
    last = prepared = None
    for rec in records:
        values = rec.values()
        shape = (*rec, *map(type, values))
        if shape != last:
            try:
                prepared = shapes[shape]
            except KeyError:
                prepared = _prepare(shape)
            last = shape
        if prepared is not None and 1e-4 <= rec['t'] < 4294967296.0:
            template, converters = prepared
            text = template % (*map(_call, converters, values),)
            end = text.find(',', 5)             # after t ('%.6f' has no comma)
            if text[end - 1] != '0':
                add(text)
            else:
                head = text[:end].rstrip('0')
                add((head + '0' if head[-1] == '.' else head) + text[end:])
        else:
            add(_record_by_field(rec))
    return ''.join(lines)


def _records_by_field(records):
    """The lines of records, each _record_by_field's (PyPy: its JIT is faster through the
    field writer's loop than through % and map)."""
    return ''.join(map(_record_by_field, records))


def record(rec):
    """The line of one record that holds its own t and event (``records`` of it alone)."""
    return records((rec,))


def _prepare(shape):
    """The (template, converters) of a record shape (its keys, then its values' types), or
    None for a shape _records_by_shape does not write; remembered while there is room."""
    half = len(shape) // 2
    keys, kinds = shape[:half], shape[half:]
    prepared = None
    if keys[:2] == ('t', 'event') and kinds[0] is float and \
            all(type(name) is str for name in keys) and all(kind in _BY_TYPE for kind in kinds):
        specs = [_BY_TYPE[kind][1] for kind in kinds]
        template = '{"t":%.6f,"event":' + specs[1] + ''.join(
            _key(name).replace('%', '%%') + spec for name, spec in zip(keys[2:], specs[2:]))
        prepared = (template + '}\n', (operator.pos,) + tuple(_BY_TYPE[kind][0]
                                                               for kind in kinds[1:]))
    if len(_SHAPES) < _MAX_SHAPES:
        _SHAPES[shape] = prepared
    return prepared


_call = getattr(operator, 'call', None)         # call(f, x) is f(x): Python 3.11 on
records = _records_by_shape if sys.implementation.name == 'cpython' and _call else \
    _records_by_field


_TO_INTEGER = 2.0 ** 52     # p + 2**52 - 2**52 is p rounded to an integer, half to even


def rounded(x, digits):
    """round(x, digits), bit for bit; for a float x in (0, 1e5) and digits 6 or 7 (a record's
    time and latency) without round()'s decimal conversion (``rounder``)."""
    return _ROUNDERS[digits](x) if digits in _ROUNDERS else round(x, digits)


def rounder(digits):
    """rounded(x, digits) for one digits, 6 or 7, as a function of x: an op record rounds its
    time to 6 digits and its latency to 7, and a function that need not test digits nor
    choose a scale each call is a third fewer bytecodes under CPython.

    Why it is round(x, digits) bit for bit: round() rounds the exact x * 10 ** digits to an
    integer N (half to even) and returns the double nearest N / 10 ** digits. The product p
    computed in floating point is that exact product correctly rounded, and below 2 ** 52
    every integer and half is a double, so (rounding being monotonic) p lies on the same
    side of every half as the exact product, or on the half itself: unless p is a half,
    both round to the same N. N and 10 ** digits are exact doubles and IEEE division is
    correctly rounded, so N / 10 ** digits is that nearest double. At a half, and for
    anything else, round() itself answers. The nearest integer n to p: adding 2 ** 52
    (where a double's ulp is 1) rounds the fraction away and subtracting gives n back
    exactly; d = p - n is exact too (Sterbenz), in [-0.5, 0.5], and d * d < 0.25 holds only
    off the halves. A quarter of a microsecond under PyPy, twice per operation record,
    against a fiftieth this way. ``tests/test_logline.py`` compares the two."""
    if type(digits) is not int or digits not in (6, 7):
        raise ValueError('rounder takes 6 or 7 digits, not %r' % (digits,))
    scale = float(10 ** digits)

    def rounded_to(x):
        if type(x) is float and 0.0 < x < 1e5:     # not -0.0
            p = x * scale
            n = p + _TO_INTEGER - _TO_INTEGER
            d = p - n
            if d * d < 0.25:
                return n / scale
        return round(x, digits)
    return rounded_to


rounded_6, rounded_7 = rounder(6), rounder(7)
_ROUNDERS = {6: rounded_6, 7: rounded_7}
