"""Inline commands (a person typing into telnet) get the same bytes from this KV server as
from Redis 7 itself: both run on loopback, the same raw line goes to each on a new
connection followed by PING, and the replies, and whether the connection was closed, must be
equal. Quoting is where the two differed: ``SET "k v`` stored the key ``"k`` here, and is a
protocol error and a close in Redis. Skipped only when redis-server is not installed. No NUL
bytes: Redis never answers a line holding one (see nodes/kv/resp.py)."""

import pytest
from hypothesis import example, given, settings, strategies as st

from tests.kv_proc import KVProc, command, exchange_until_pong
from tests.redis_proc import RedisProc, needs_redis

pytestmark = needs_redis

UNBALANCED = (b'-ERR Protocol error: unbalanced quotes in request\r\n', True)
CASES = [
    b'SET "k v', b'SET "a b" c', b'GET "a b"', b"SET 'a\\'b' c", b'GET "a\'b"', b'SET "a"b c',
    b"ECHO 'a'b", b'ECHO a"b c"d', b'ECHO a"b c"', b'ECHO "\\x41\\x4a\\n\\r\\t\\b\\a\\q\\\\\\""',
    b'ECHO "\\x4g"', b'ECHO "\\x4"', b'ECHO ""', b"ECHO ''", b'ECHO "abc\\', b"ECHO 'a\\nb'",
    b"ECHO 'a\\'", b'ECHO a\x0bb', b'ECHO \x0bb', b'ECHO "a"\x0b', b'ECHO "a"\t', b'ECHO x\r',
    b'ECHO "x\r"', b'""', b"''", b'  ECHO   "spaced  out"  ', b'ECHO "\\xff\\x00"',
]


@pytest.fixture(name='servers', scope='module')
def _servers(tmp_path_factory):
    """(our server's port, redis-server's port), both fresh for this module."""
    redis = RedisProc(tmp_path_factory.mktemp('redis'))
    try:
        with KVProc() as ours:
            yield ours.port, redis.port
    finally:
        redis.kill()


def _both(servers, line):
    """The same inline line, then PING, to our server and to Redis: their (replies, closed)."""
    data = line + b'\r\nPING\r\n'
    return tuple(exchange_until_pong(port, data, timeout=5) for port in servers)


@pytest.mark.parametrize('line', CASES)
def test_inline_lines_get_redis_own_replies(servers, line):
    ours, theirs = _both(servers, line)
    assert ours == theirs


def test_an_unbalanced_quote_is_refused_closes_and_stores_nothing(servers):
    assert _both(servers, b'SET "k v') == (UNBALANCED, UNBALANCED)
    for port in servers:
        assert exchange_until_pong(port, command('EXISTS', '"k') + command('PING')) == \
            (b':0\r\n+PONG\r\n', False)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([b'ECHO ', b'NOSUCH ']),
       st.text(alphabet='ab4x "\'\\\t\x0b\x0c\r', max_size=14))
@example(b'NOSUCH ', 'a"b c"d')
def test_any_quoted_line_gets_redis_own_replies(servers, verb, text):
    """ECHO shows one argument byte for byte; an unknown command lists all of them."""
    ours, theirs = _both(servers, verb + text.encode())
    assert ours == theirs
