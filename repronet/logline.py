"""One node log record as a JSON line, the same for every writer of one.

A node's log is one compact JSON object per line, ``t`` (seconds, rounded to the
microsecond) and ``event`` first, then the record's fields in order. The real processes
write it with ``nodes.dht.common.JsonLog`` and the simulator with ``repronet.sim.process``;
both call ``line`` here, so the two backends cannot drift apart.

The bytes are exactly ``json.dumps(record, separators=(',', ':'))``. Why not call that: the
simulator writes one record per operation of every client, and under PyPy that call was
about a fifth of a search. Flat fields (str, int, float, bool, None) are formatted here the
way json's encoder formats them (``encode_basestring_ascii``, ``int.__repr__``,
``float.__repr__``, NaN and Infinity as json spells them); any other value (a list, a dict,
a subclass) goes through json's own encoder. ``tests/test_logline.py`` compares the two on
random records.
"""

import json
from json.encoder import encode_basestring_ascii as _quoted

_ENCODE = json.JSONEncoder(separators=(',', ':')).encode     # what json.dumps does
_FLOAT = float.__repr__
_INT = int.__repr__
_KEYS = {}                  # field name -> ',"name":' (a log has few names)
_MAX_KEYS = 4096
_FLOATS = {}                # positive float -> its repr (latencies repeat: 0.000235 ...)
_MAX_FLOATS = 65536


def line(t, event, fields):
    """The line (with its newline) of a record at time t (seconds) of event with fields."""
    return _with_fields('{"t":' + _time(t) + ',"event":' + _value(event), fields, False)


def record(rec):
    """line() of a record that holds its own ``t`` and ``event`` (a client's op record):
    the same bytes as ``line(rec['t'], rec['event'], the other fields in order)``, which is
    what ``log.write(**rec)`` wrote, without building two dicts of keywords per record (the
    simulator writes one record per operation of every client)."""
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
    """',"name":' for a field name, as json writes a key (remembered for a few thousand)."""
    key = ',' + (_quoted(name) if type(name) is str else _ENCODE({name: 0})[1:-3]) + ':'
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
        if value > 0.0 and value != _INF:       # not 0.0, -0.0, NaN or an infinity
            text = _FLOATS.get(value)
            if text is None:
                text = _FLOAT(value)
                if len(_FLOATS) < _MAX_FLOATS:
                    _FLOATS[value] = text
            return text
        if value != value or value in (_INF, -_INF):
            return _ENCODE(value)
        return _FLOAT(value)
    if value is True:
        return 'true'
    if value is False:
        return 'false'
    if value is None:
        return 'null'
    return _ENCODE(value)


_INF = float('inf')


_SCALES = {6: 1e6, 7: 1e7}
_HALF_MARGIN = 2.0 ** -10   # far wider than an ulp of x * 10 ** digits below 2 ** 40
_BELOW_HALF, _ABOVE_HALF = 0.5 - _HALF_MARGIN, 0.5 + _HALF_MARGIN


def rounded(x, digits):
    """round(x, digits), bit for bit, for a float x in (0, 1e5) and digits 6 or 7 (a record's
    time and latency), without round()'s decimal conversion: a quarter of a microsecond
    under PyPy, twice per operation record, against a fiftieth here.

    Why it is the same: round() rounds the exact x * 10 ** digits to an integer N (half to
    even) and returns the double nearest N / 10 ** digits. Below 2 ** 40 the product p
    computed in floating point is within 2 ** -13 of the exact one, so unless its fraction
    lies within _HALF_MARGIN of a half, both round to the same N; N and 10 ** digits are
    exact doubles and IEEE division is correctly rounded, so N / 10 ** digits is that
    nearest double. Near a half, and for anything else, round() itself answers. The whole
    part of p is p // 1.0: exact for a positive double, as float(int(p)), without two calls.
    ``tests/test_logline.py`` compares the two."""
    scale = _SCALES.get(digits)
    if scale is not None and type(x) is float and 0.0 < x < 1e5:    # not -0.0
        p = x * scale
        n = p // 1.0
        frac = p - n
        if frac < _BELOW_HALF:
            return n / scale
        if frac > _ABOVE_HALF:
            return (n + 1.0) / scale
    return round(x, digits)
