"""The KV node's RESP2 request parser and reply encoders (nodes/kv/resp.py).

Hand-written cases pin each error Redis gives for a malformed request; Hypothesis checks what
must hold for every input: a valid stream parses to the same commands however the network splits
it, and arbitrary bytes raise nothing but ProtocolError and never make the parser hold more than
its limit.
"""

import hiredis
import pytest
from hypothesis import given, settings, strategies as st

from nodes.kv import resp
from nodes.kv.resp import ProtocolError, RequestParser

SETTINGS = settings(max_examples=300, deadline=None)    # shared, noisy machine: no timing


def multibulk(*args):
    """A request in the multibulk form, as every Redis client sends it."""
    return b'*%d\r\n' % len(args) + b''.join(b'$%d\r\n%b\r\n' % (len(a), a) for a in args)


def parse_all(parser):
    """Every complete command the parser holds now."""
    out = []
    while (cmd := parser.get()) is not None:
        out.append(cmd)
    return out


def parse_split(data, cuts, parser=None):
    """Feed `data` cut at `cuts`, collecting commands after each piece."""
    parser = parser or RequestParser(4096, 64)
    out, start = [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        parser.feed(data[start:cut])
        start = cut
        out += parse_all(parser)
    return out, parser


def test_pipelined_multibulk_and_inline_commands():
    p = RequestParser(4096, 64)
    p.feed(multibulk(b'SET', b'k', b'a\r\nb') + b'PING\r\n\r\n  get  k \r\n' + multibulk(b'DEL'))
    assert parse_all(p) == [[b'SET', b'k', b'a\r\nb'], [b'PING'], [b'get', b'k'], [b'DEL']]
    assert p.buffered == 0


def test_zero_and_negative_counts_are_skipped_like_redis():
    p = RequestParser(4096, 64)
    p.feed(b'*0\r\n*-1\r\n' + multibulk(b'PING'))
    assert parse_all(p) == [[b'PING']]


def test_a_command_split_byte_by_byte():
    data = multibulk(b'SET', b'key', b'x' * 100)
    out, p = parse_split(data, range(len(data)))
    assert out == [[b'SET', b'key', b'x' * 100]] and p.buffered == 0


@pytest.mark.parametrize('data, message', [
    (b'*1\r\n+PING\r\n', "expected '$', got '+'"),
    (b'*2\r\n$3\r\nGET\r\n*1\r\n$1\r\nk\r\n', "expected '$', got '*'"),
    (b'*1\r\n$3\r\nabcXY', 'expected CRLF after a bulk string'),
    (b'*1\r\n$+3\r\nabc\r\n', 'invalid bulk length'),
    (b'*1\r\n$-1\r\n', 'invalid bulk length'),
    (b'*x\r\n', 'invalid multibulk length'),
    (b'*65\r\n', 'invalid multibulk length'),
    (b'*1\r\n$5000\r\n', 'invalid bulk length'),
    (b'*1\r\n$' + b'1' * 40, 'too big bulk count string'),
    (b'*' + b'1' * 40, 'too big mbulk count string'),
    (b'x' * (64 * 1024 + 1), 'too big inline request'),
    (b'*3\r\n$2000\r\n' + b'x' * 2000 + b'\r\n$2100\r\n', 'invalid bulk length'),
], ids=lambda v: v[:12] if isinstance(v, bytes) else None)
def test_malformed_or_oversized_requests_raise_redis_wording(data, message):
    p = RequestParser(4096, 64)
    p.feed(data)
    with pytest.raises(ProtocolError, match='^Protocol error: ' + message.replace('+', r'\+')
                       .replace('$', r'\$').replace('*', r'\*')):
        parse_all(p)


def test_declared_sizes_are_refused_before_the_bytes_arrive():
    p = RequestParser(4096, 64)
    p.feed(b'*1\r\n$4097\r\n')          # nothing of the value has arrived yet
    with pytest.raises(ProtocolError):
        p.get()
    p = RequestParser(4096, 64)
    p.feed(b'*2\r\n$3\r\nSET\r\n$4080\r\n')     # fits alone, not with its headers
    with pytest.raises(ProtocolError):
        p.get()


def test_a_command_at_the_limit_is_accepted():
    value = b'v' * (4096 - len(multibulk(b'SET', b'k', b'')) - 3)    # 3 digits more in $4068
    data = multibulk(b'SET', b'k', value)
    assert len(data) == 4096
    out, _ = parse_split(data, [10, 2000])
    assert out == [[b'SET', b'k', value]]
    with pytest.raises(ProtocolError):
        parse_split(multibulk(b'SET', b'k', value + b'v'), [10])


def test_hiredis_would_accept_what_the_parser_refuses():
    """Why the parser is not hiredis.Reader (see resp.py): if this changes, revisit."""
    r = hiredis.Reader()
    r.feed(b'*1\r\n$3\r\nabcXY')
    assert r.gets() == [b'abc']


args = st.lists(st.binary(max_size=40), min_size=1, max_size=6)


@SETTINGS
@given(st.lists(args, max_size=10), st.data())
def test_any_valid_stream_parses_the_same_however_it_is_split(commands, data):
    stream = b''.join(multibulk(*c) for c in commands)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=25))
    out, p = parse_split(stream, cuts)
    assert out == commands and p.buffered == 0


inline_word = st.binary(min_size=1, max_size=10).filter(lambda w: not any(
    c in w for c in b' \t\r\n\x0b\x0c"\'') and not w.startswith(b'*'))


@SETTINGS
@given(st.lists(st.lists(inline_word, min_size=1, max_size=5), max_size=8), st.data())
def test_inline_commands_parse_the_same_however_split(commands, data):
    stream = b''.join(b' '.join(c) + b'\r\n' for c in commands)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    assert parse_split(stream, cuts)[0] == commands


def quoted(arg):
    """arg typed as a double-quoted inline argument: printable bytes as they are, the rest
    (and the quote and backslash) as \\xHH."""
    return b'"' + b''.join(bytes([c]) if 32 <= c < 127 and c not in b'"\\' else b'\\x%02x' % c
                           for c in arg) + b'"'


@settings(max_examples=100, deadline=None)   # the slow, byte-by-byte path: 1 s
@given(st.lists(st.lists(st.binary(max_size=10), min_size=1, max_size=4), max_size=6),
       st.data())
def test_any_arguments_typed_in_double_quotes_come_back_byte_for_byte(commands, data):
    stream = b''.join(b' '.join(quoted(a) for a in c) + b'\r\n' for c in commands)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    assert parse_split(stream, cuts)[0] == commands


@pytest.mark.parametrize('line, args', [            # each checked against redis-server 7.0
    (b'SET "a b" c', [b'SET', b'a b', b'c']),
    (b"SET 'a\\'b' c", [b'SET', b"a'b", b'c']),
    (b'ECHO a"b c"', [b'ECHO', b'ab c']),
    (b'ECHO "\\x41\\n\\r\\t\\b\\a\\q\\\\\\""', [b'ECHO', b'A\n\r\t\x08\x07q\\"']),
    (b'ECHO "\\x4g"', [b'ECHO', b'x4g']),
    (b"ECHO 'a\\nb'", [b'ECHO', b'a\\nb']),
    (b'ECHO "" \'\'', [b'ECHO', b'', b'']),
    (b'ECHO a\x0bb \x0bc', [b'ECHO', b'a\x0bb', b'c']),
    (b'ECHO "x\r"', [b'ECHO', b'x\r']),
    (b'ECHO x\r', [b'ECHO', b'x']),
])
def test_inline_quotes_and_escapes_as_redis_reads_them(line, args):
    p = RequestParser(4096, 64)
    p.feed(line + b'\r\n')
    assert p.get() == args


@pytest.mark.parametrize('line', [b'SET "k v', b'SET "a"b c', b"ECHO 'a'b", b'ECHO a"b c"d',
                                  b'ECHO "abc\\', b"ECHO 'a\\'"])
def test_unbalanced_quotes_are_redis_protocol_error(line):
    p = RequestParser(4096, 64)
    p.feed(line + b'\r\n')
    with pytest.raises(ProtocolError, match='^Protocol error: unbalanced quotes in request$'):
        p.get()


@SETTINGS
@given(st.lists(st.one_of(st.binary(max_size=300),
                          st.sampled_from([b'*', b'$', b'\r\n', b'*3\r\n', b'$9\r\n', b'$300\r\n',
                                           b'*99\r\n', b'-1', multibulk(b'GET', b'k')])),
                max_size=40))
def test_garbage_raises_only_protocol_error_and_stays_bounded(pieces):
    limit = 256
    p = RequestParser(limit, 8)
    try:
        for piece in pieces:
            p.feed(piece)
            for cmd in parse_all(p):
                assert isinstance(cmd, list) and 1 <= len(cmd) <= 8
                assert all(type(a) is bytes for a in cmd)
            assert p.buffered <= limit
    except ProtocolError as e:
        assert str(e).startswith('Protocol error: ')


def test_encoders():
    assert resp.bulk(None) == resp.NIL == b'$-1\r\n'
    assert resp.bulk(b'a\r\nb') == b'$4\r\na\r\nb\r\n'
    assert resp.integer(-3) == b':-3\r\n'
    assert resp.simple('OK') == resp.OK
    assert resp.error('ERR bad\r\nthing') == b'-ERR bad  thing\r\n'
    assert resp.array([b'a', 1, None, [b'b']]) == \
        b'*4\r\n$1\r\na\r\n:1\r\n$-1\r\n*1\r\n$1\r\nb\r\n'
    r = hiredis.Reader()
    r.feed(resp.array([b'x', [2, None]]))
    assert r.gets() == [b'x', [2, None]]
