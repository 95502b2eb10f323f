"""The KV node's sans-I/O core (nodes/kv/core.py, commands.py): command semantics and storage.

Replies are checked byte for byte against what Redis 7.0 sends, since redis-cli, redis-benchmark
and redis-py must work unchanged; storage is checked through the log the core hands out (a
bytearray stands for the driver's file).
"""

import pytest

from nodes.kv import aof
from nodes.kv.core import KVConfig, KVCore


def cmd(*args):
    """One multibulk request."""
    args = [a.encode() if isinstance(a, str) else a for a in args]
    return b'*%d\r\n' % len(args) + b''.join(b'$%d\r\n%b\r\n' % (len(a), a) for a in args)


def connect(**cfg):
    """A core and one connection."""
    core = KVCore(KVConfig(**cfg))
    return core, core.connect(0.0)


def ask(conn, *args):
    """The reply to one command."""
    return conn.receive(cmd(*args), 1.0).replies


def test_get_set_del_exists_dbsize_and_pipelining_in_one_receive():
    core, c = connect()
    out = c.receive(cmd('SET', 'k', 'v') + cmd('get', 'k') + cmd('GET', 'nope') +
                    cmd('EXISTS', 'k', 'k', 'nope') + cmd('DBSIZE') + cmd('DEL', 'k', 'nope') +
                    cmd('DEL', 'k') + cmd('PING') + cmd('ping', 'hi') + cmd('ECHO', ''), 1.0)
    assert out.replies == (b'+OK\r\n$1\r\nv\r\n$-1\r\n:2\r\n:1\r\n:1\r\n:0\r\n+PONG\r\n'
                           b'$2\r\nhi\r\n$0\r\n\r\n')
    assert out.writes == 2 and not out.close        # the SET and one deleted key
    assert core.info()['commands'] == 10


def test_a_command_split_across_receive_calls():
    core, c = connect()
    data = cmd('SET', 'key', 'x' * 50) + cmd('GET', 'key')
    replies = b''.join(c.receive(data[i:i + 7], 1.0).replies for i in range(0, len(data), 7))
    assert replies == b'+OK\r\n$50\r\n' + b'x' * 50 + b'\r\n'


def test_inline_commands_as_typed_into_telnet():
    _, c = connect()
    assert c.receive(b'SET a b\r\nget a\r\nEXISTS a\n', 1.0).replies == b'+OK\r\n$1\r\nb\r\n:1\r\n'


@pytest.mark.parametrize('args, reply', [
    (('GET',), b"-ERR wrong number of arguments for 'get' command\r\n"),
    (('get', 'a', 'b'), b"-ERR wrong number of arguments for 'get' command\r\n"),
    (('SET', 'k'), b"-ERR wrong number of arguments for 'set' command\r\n"),
    (('DEL',), b"-ERR wrong number of arguments for 'del' command\r\n"),
    (('PING', 'a', 'b'), b"-ERR wrong number of arguments for 'ping' command\r\n"),
    (('DBSIZE', 'x'), b"-ERR wrong number of arguments for 'dbsize' command\r\n"),
    (('SET', 'k', 'v', 'EX', '10'), b'-ERR syntax error\r\n'),
    (('FOO',), b"-ERR unknown command 'FOO', with args beginning with: \r\n"),
    (('foo', 'a', 'b c'), b"-ERR unknown command 'foo', with args beginning with: 'a' 'b c' \r\n"),
    (('x\r\ny', 'a'), b"-ERR unknown command 'x  y', with args beginning with: 'a' \r\n"),
    (('SELECT', '0'), b'+OK\r\n'),
    (('SELECT', '1'), b'-ERR DB index is out of range\r\n'),
    (('SELECT', 'x'), b'-ERR value is not an integer or out of range\r\n'),
    (('CONFIG', 'GET', 'save'), b'*2\r\n$4\r\nsave\r\n$0\r\n\r\n'),
    (('CONFIG', 'GET', 'nosuch'), b'*0\r\n'),
    (('CONFIG', 'FOO'), b"-ERR unknown subcommand 'FOO'. Try CONFIG HELP.\r\n"),
    (('COMMAND', 'DOCS'), b'*0\r\n'),
    (('COMMAND', 'COUNT'), b':0\r\n'),
    (('CLIENT', 'SETINFO', 'lib-name', 'x'), b'+OK\r\n'),
    (('CLIENT', 'GETNAME'), b'$-1\r\n'),
])
def test_replies_with_redis_wording(args, reply):
    _, c = connect()
    assert ask(c, *args) == reply


def test_unknown_command_shows_at_most_128_bytes_of_arguments():
    _, c = connect()
    reply = ask(c, 'nosuch', 'a' * 200, 'b')
    assert reply == b"-ERR unknown command 'nosuch', with args beginning with: '" + b'a' * 128 + \
        b"' \r\n"


def test_oversized_key_or_value_is_refused_and_nothing_is_stored():
    core, c = connect(max_key_bytes=4, max_value_bytes=8)
    assert ask(c, 'SET', 'kkkkk', 'v') == b'-ERR key is too large (5 bytes, the limit is 4)\r\n'
    assert ask(c, 'SET', 'k', 'v' * 9) == b'-ERR value is too large (9 bytes, the limit is 8)\r\n'
    assert ask(c, 'SET', 'kkkk', 'v' * 8) == b'+OK\r\n'
    assert core.info()['keys'] == 1 and core.info()['rejected'] == 2
    assert core.take_log() == aof.encode_set(b'kkkk', b'v' * 8)


def test_max_keys_refuses_new_keys_with_oom_but_allows_overwrites():
    core, c = connect(max_keys=2)
    assert ask(c, 'SET', 'a', '1') == ask(c, 'SET', 'b', '1') == b'+OK\r\n'
    assert ask(c, 'SET', 'c', '1').startswith(b'-OOM ')
    assert ask(c, 'SET', 'a', '2') == b'+OK\r\n'
    assert ask(c, 'DEL', 'b') == b':1\r\n' and ask(c, 'SET', 'c', '1') == b'+OK\r\n'
    assert ask(c, 'DBSIZE') == b':2\r\n'


def test_a_protocol_error_replies_then_closes_and_stops_processing():
    core, c = connect()
    out = c.receive(cmd('SET', 'a', '1') + b'*1\r\n+PING\r\n' + cmd('SET', 'b', '2'), 1.0)
    assert out.replies == b"+OK\r\n-ERR Protocol error: expected '$', got '+'\r\n" and out.close
    assert core.info()['keys'] == 1 and core.info()['rejected'] == 1
    assert c.receive(cmd('PING'), 2.0).replies == b''


def test_an_oversized_request_closes_the_connection_before_it_is_buffered():
    core, c = connect(max_key_bytes=10, max_value_bytes=100)
    out = c.receive(b'*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$999999\r\n', 1.0)
    assert out.close and out.replies.startswith(b'-ERR Protocol error: invalid bulk length')
    assert c.buffered < 100


def test_quit_replies_ok_and_closes():
    core, c = connect()
    out = c.receive(cmd('QUIT') + cmd('SET', 'a', '1'), 1.0)
    assert out == type(out)(b'+OK\r\n', 0, True) and core.info()['keys'] == 0
    c.close(2.0)
    assert core.info()['connections'] == 0


def test_flushall_logs_one_record_and_empties_keys_and_cache():
    core, c = connect(cache_policy='lru', cache_size=10)
    ask(c, 'SET', 'a', '1')
    core.take_log()
    assert ask(c, 'FLUSHALL') == b'+OK\r\n' and ask(c, 'FLUSHDB', 'ASYNC') == b'+OK\r\n'
    assert core.take_log() == aof.encode_flushall() * 2
    assert ask(c, 'GET', 'a') == b'$-1\r\n' and core.info()['keys'] == 0


def test_info_fields_and_cache_counters():
    core, c = connect(cache_policy='fifo', cache_size=1)
    ask(c, 'SET', 'a', '1')         # cached (write-through)
    ask(c, 'SET', 'b', '2')         # evicts a
    ask(c, 'GET', 'b')              # hit
    ask(c, 'GET', 'a')              # miss, found, inserted: evicts b
    ask(c, 'GET', 'zz')             # miss, not found
    i = core.info()
    assert (i['cache_hits'], i['cache_misses'], i['cache_evictions']) == (1, 2, 2)
    assert (i['keyspace_hits'], i['keyspace_misses'], i['keys']) == (2, 1, 2)
    text = ask(c, 'INFO').decode()
    for line in ('# Server', '# Stats', 'keyspace_hits:2', 'keyspace_misses:1', '# Cache',
                 'cache_policy:fifo', 'cache_size:1', 'cache_hits:1', 'cache_misses:2',
                 'cache_evictions:2', '# Keyspace', 'db0:keys=2,expires=0,avg_ttl=0'):
        assert '\r\n%s\r\n' % line in text or text.split('\r\n', 1)[1].startswith(line)
    cache_only = ask(c, 'INFO', 'cache').decode()
    assert '# Cache' in cache_only and '# Stats' not in cache_only
    assert ask(c, 'CONFIG', 'RESETSTAT') == b'+OK\r\n' and core.info()['cache_hits'] == 0


def test_no_cache_counts_keyspace_only():
    core, c = connect(cache_policy='none')
    ask(c, 'SET', 'a', '1')
    ask(c, 'GET', 'a')
    i = core.info()
    assert (i['cache_hits'], i['cache_misses'], i['keyspace_hits']) == (0, 0, 1)
    assert i['cache_policy'] == 'none'


class FakeFile:
    """The driver's log file: what take_log returned, read back by offset."""

    def __init__(self, data=b''):
        self.data = bytearray(data)
        self.reads = 0

    def read(self, offset, length):
        self.reads += 1
        return bytes(self.data[offset:offset + length])


def test_log_storage_reads_pending_records_before_the_driver_took_them():
    f = FakeFile()
    core = KVCore(KVConfig(storage='log', cache_policy='none'), read=f.read)
    c = core.connect(0.0)
    out = c.receive(cmd('SET', 'a', 'one') + cmd('GET', 'a') + cmd('SET', 'a', 'two'), 1.0)
    assert out.replies == b'+OK\r\n$3\r\none\r\n+OK\r\n' and f.reads == 0
    assert ask(c, 'GET', 'a') == b'$3\r\ntwo\r\n' and f.reads == 0
    f.data += core.take_log()
    assert ask(c, 'GET', 'a') == b'$3\r\ntwo\r\n' and f.reads == 1
    ask(c, 'SET', 'b', 'bee')       # pending again, after taken bytes
    assert ask(c, 'GET', 'b') == b'$3\r\nbee\r\n' and ask(c, 'GET', 'a') == b'$3\r\ntwo\r\n'
    assert f.reads == 2


def test_log_storage_cache_saves_reads():
    f = FakeFile()
    core = KVCore(KVConfig(storage='log', cache_policy='lru', cache_size=1), read=f.read)
    c = core.connect(0.0)
    ask(c, 'SET', 'a', '1')
    ask(c, 'SET', 'b', '2')         # evicts a from the cache
    f.data += core.take_log()
    assert ask(c, 'GET', 'b') == b'$1\r\n2\r\n' and f.reads == 0      # cache hit
    assert ask(c, 'GET', 'a') == b'$1\r\n1\r\n' and f.reads == 1      # miss: read the log
    assert ask(c, 'GET', 'a') == b'$1\r\n1\r\n' and f.reads == 1      # now cached


def test_a_failed_or_short_read_is_an_error_reply_not_a_crash():
    def broken(offset, length):
        raise OSError(5, 'Input/output error')
    core = KVCore(KVConfig(storage='log', cache_policy='none'), read=broken)
    c = core.connect(0.0)
    ask(c, 'SET', 'a', '1')
    core.take_log()
    assert ask(c, 'GET', 'a').startswith(b'-ERR could not read the value from the log')
    core._read = lambda offset, length: b''
    assert ask(c, 'GET', 'a').startswith(b'-ERR the log is shorter')


@pytest.mark.parametrize('storage', ['memory', 'log'])
def test_a_restart_from_the_log_serves_the_same_data(storage):
    f = FakeFile()
    core = KVCore(KVConfig(storage=storage), read=f.read)
    c = core.connect(0.0)
    c.receive(cmd('SET', 'a', '1') + cmd('SET', 'b', '2') + cmd('DEL', 'a') + cmd('SET', 'c', '3')
              + cmd('SET', 'b', 'two'), 1.0)
    f.data += core.take_log()
    rec = aof.recover([bytes(f.data)], storage)
    again = KVCore(KVConfig(storage=storage), recovery=rec, read=f.read)
    c2 = again.connect(2.0)
    assert c2.receive(cmd('GET', 'a') + cmd('GET', 'b') + cmd('GET', 'c'), 2.0).replies == \
        b'$-1\r\n$3\r\ntwo\r\n$1\r\n3\r\n'
    assert again.info()['log_bytes'] == len(f.data)
    ask(c2, 'SET', 'd', '4')         # appends after the recovered bytes
    f.data += again.take_log()
    assert aof.recover([bytes(f.data)], storage).keydir.keys() == {b'b', b'c', b'd'}


def test_append_log_false_writes_no_records():
    core, c = connect(append_log=False)
    out = c.receive(cmd('SET', 'a', '1') + cmd('DEL', 'a') + cmd('FLUSHALL'), 1.0)
    assert out.writes == 0 and core.take_log() == b''


@pytest.mark.parametrize('cfg', [dict(cache_policy='mru'), dict(cache_size=-1),
                                 dict(storage='disk'), dict(max_keys=0),
                                 dict(storage='log', append_log=False),
                                 dict(max_request_bytes=10)])
def test_bad_config_is_refused(cfg):
    with pytest.raises(ValueError):
        KVConfig(**cfg)


def test_log_storage_needs_a_reader():
    with pytest.raises(ValueError, match='read'):
        KVCore(KVConfig(storage='log'))


def test_info_names_the_cache_while_it_is_empty():
    # an empty cache object has len 0; INFO must still report its policy and counters
    core, c = connect(cache_policy='lfu', cache_size=5)
    ask(c, 'GET', 'missing')        # a miss that inserts nothing: the cache stays empty
    i = core.info()
    assert (i['cache_policy'], i['cache_size'], i['cache_misses']) == ('lfu', 5, 1)
    assert 'cache_policy:lfu' in ask(c, 'INFO', 'cache').decode()
