"""The commands of the KV node: one handler per command and the dispatch table.

Each handler is `handler(core, conn, args) -> reply bytes`, looked up by the command's name in
`TABLE` (upper and lower case precomputed, so the hot path does not allocate an upper-cased copy)
together with Redis's arity convention (n: exactly n arguments including the name; -n: at least n).
Replies and error texts follow Redis 7.0 so that redis-cli, redis-benchmark and redis-py work
unchanged; only GET and SET without options, and just enough of CONFIG/COMMAND/CLIENT for those
clients, are implemented. CLUSTER, READONLY and READWRITE answer as a Redis without cluster
support does; a server in a cluster uses `cluster_commands.TABLE` instead.
"""

import fnmatch

from . import resp
from .aof import LogReadError
from .resp import EMPTY_ARRAY, NIL, OK, ONE, PONG, ZERO

_SYNTAX = resp.error('ERR syntax error')
# Each CONFIG GET pattern is a glob compiled and matched against every parameter: a
# million-argument CONFIG GET (any count up to max_args parses) would hold the loop for
# minutes, so the patterns are capped.
_CONFIG_PATTERNS = 64
_TOO_MANY_PATTERNS = resp.error('ERR CONFIG GET takes at most %d patterns' % _CONFIG_PATTERNS)


def _get(core, conn, args):
    """GET key: cache, then the key directory (then the log in 'log' storage)."""
    key = args[1]
    cache = core._cache
    if cache is not None:
        v = cache.get(key)
        if v is not None:
            core.keyspace_hits += 1
            return b'$%d\r\n%b\r\n' % (len(v), v)
    v = core._keydir.get(key)
    if v is None:
        core.keyspace_misses += 1
        return NIL
    if core._log_storage:
        try:
            v = core._read_value(v[0], v[1])
        except LogReadError as e:
            return resp.error(str(e))
    if cache is not None:
        cache.put(key, v)
    core.keyspace_hits += 1
    return b'$%d\r\n%b\r\n' % (len(v), v)


def _set(core, conn, args):
    """SET key value (no options): write-through to the log, key directory and cache."""
    if len(args) != 3:
        return _SYNTAX
    key = args[1]
    value = args[2]
    if len(key) > core._max_key or len(value) > core._max_value:
        return core._too_large(key, value)
    keydir = core._keydir
    if len(keydir) >= core._max_keys and key not in keydir:
        core.rejected += 1
        return core._oom
    keydir[key] = core._append_set(key, value)
    if core._cache is not None:
        core._cache.put(key, value)
    return OK


def _del(core, conn, args):
    """DEL key [key ...]: one log record per key that existed."""
    n = 0
    for key in args[1:]:
        if key in core._keydir:
            core._delete(key)
            n += 1
    return resp.integer(n)


def _exists(core, conn, args):
    """EXISTS key [key ...]: how many of the keys exist (repeats count again, as in Redis)."""
    keydir = core._keydir
    return resp.integer(sum(1 for key in args[1:] if key in keydir))


def _ping(core, conn, args):
    """PING [message]."""
    if len(args) == 1:
        return PONG
    if len(args) == 2:
        return resp.bulk(args[1])
    return arity_error(b'ping')


def _echo(core, conn, args):
    """ECHO message."""
    return resp.bulk(args[1])


def _dbsize(core, conn, args):
    """DBSIZE."""
    return resp.integer(len(core._keydir))


def _flushall(core, conn, args):
    """FLUSHALL/FLUSHDB [ASYNC|SYNC]: one log record, empty key directory and cache."""
    if len(args) > 2 or (len(args) == 2 and args[1].upper() not in (b'ASYNC', b'SYNC')):
        return _SYNTAX
    core._flush()
    return OK


def _quit(core, conn, args):
    """QUIT: +OK, then the connection is closed."""
    conn._closing = True
    return OK


def _select(core, conn, args):
    """SELECT 0 (the only database)."""
    if not args[1].isdigit() or len(args[1]) > 20:     # int() refuses > 4300 digits
        return resp.error('ERR value is not an integer or out of range')
    if int(args[1]) != 0:
        return resp.error('ERR DB index is out of range')
    return OK


def _info(core, conn, args):
    """INFO [section ...]: Redis-like text of the counters."""
    wanted = {a.decode('latin-1').lower() for a in args[1:]} or {'default'}
    text = []
    for name, fields in core._info_sections():
        if wanted & {'all', 'default', 'everything', name.lower()}:
            text.append('# %s\r\n%s' % (name, ''.join('%s:%s\r\n' % kv for kv in fields)))
    return resp.bulk('\r\n'.join(text).encode())


def _config(core, conn, args):
    """CONFIG GET pattern [pattern ...] (a few known parameters) and CONFIG RESETSTAT."""
    sub = args[1].upper()
    if sub == b'GET' and len(args) > 2 + _CONFIG_PATTERNS:
        return _TOO_MANY_PATTERNS
    if sub == b'GET' and len(args) >= 3:
        known = core._config_values()
        out = []
        for name, value in known.items():
            if any(fnmatch.fnmatchcase(name, p.decode('latin-1').lower()) for p in args[2:]):
                out += [name, value]
        return resp.array(out)
    if sub == b'RESETSTAT' and len(args) == 2:
        core._reset_stats()
        return OK
    if sub in (b'GET', b'RESETSTAT'):
        return arity_error(b'config|' + sub.lower())
    return unknown_subcommand(args[1], b'CONFIG')


def _command(core, conn, args):
    """COMMAND [DOCS|INFO|COUNT ...]: empty answers, enough for redis-cli's start-up."""
    if len(args) >= 2 and args[1].upper() == b'COUNT':
        return ZERO
    return EMPTY_ARRAY


def _client(core, conn, args):
    """CLIENT SETNAME/GETNAME/SETINFO/ID."""
    sub = args[1].upper()
    if sub == b'SETNAME' and len(args) == 3:
        conn.name = args[2] or None
        return OK
    if sub == b'GETNAME' and len(args) == 2:
        return resp.bulk(conn.name)
    if sub == b'SETINFO' and len(args) == 4:
        return OK
    if sub == b'ID' and len(args) == 2:
        return resp.integer(conn.id)
    if sub in (b'SETNAME', b'GETNAME', b'SETINFO', b'ID'):
        return arity_error(b'client|' + sub.lower())
    return unknown_subcommand(args[1], b'CLIENT')


# Redis 7.0's CLUSTER subcommands: known ones answer "cluster support disabled" on a standalone
# server, others "unknown subcommand" (Redis checks the subcommand first).
CLUSTER_SUBCOMMANDS = frozenset(
    b'ADDSLOTS ADDSLOTSRANGE BUMPEPOCH COUNT-FAILURE-REPORTS COUNTKEYSINSLOT DELSLOTS '
    b'DELSLOTSRANGE FAILOVER FORGET GETKEYSINSLOT FLUSHSLOTS HELP INFO KEYSLOT LINKS MEET MYID '
    b'NODES REPLICATE RESET SET-CONFIG-EPOCH SETSLOT REPLICAS SAVECONFIG SLOTS SHARDS '
    b'SLAVES'.split())
CLUSTER_DISABLED = resp.error('ERR This instance has cluster support disabled')


def _cluster_disabled(core, conn, args):
    """CLUSTER, READONLY, READWRITE on a server started without --cluster (Redis's errors)."""
    if args[0].upper() == b'CLUSTER' and args[1].upper() not in CLUSTER_SUBCOMMANDS:
        return unknown_subcommand(args[1], b'CLUSTER')
    return CLUSTER_DISABLED


def arity_error(name):
    """Redis's wrong-arity error for command `name` (bytes, lower case)."""
    return resp.error(b"ERR wrong number of arguments for '%s' command" % name)


def unknown(args):
    """Redis 7's reply to an unknown command (the arguments quoted up to 128 bytes)."""
    shown = b''
    for a in args[1:]:
        if len(shown) >= 128:
            break
        shown += b"'%s' " % a[:128 - len(shown)]
    return resp.error(b"ERR unknown command '%s', with args beginning with: %s"
                      % (args[0][:128], shown))


def unknown_subcommand(sub, cmd):
    """Redis's reply to an unknown subcommand."""
    return resp.error(b"ERR unknown subcommand '%s'. Try %s HELP." % (sub[:128], cmd))


def wrong_arity(args):
    """The wrong-arity error for the command in `args`."""
    return arity_error(args[0].lower())


_COMMANDS = {
    b'get': (_get, 2), b'set': (_set, -3), b'del': (_del, -2), b'exists': (_exists, -2),
    b'ping': (_ping, -1), b'echo': (_echo, 2), b'info': (_info, -1), b'dbsize': (_dbsize, 1),
    b'flushall': (_flushall, -1), b'flushdb': (_flushall, -1), b'quit': (_quit, -1),
    b'select': (_select, 2), b'config': (_config, -2), b'command': (_command, -1),
    b'client': (_client, -2), b'cluster': (_cluster_disabled, -2),
    b'readonly': (_cluster_disabled, 1), b'readwrite': (_cluster_disabled, 1),
}
TABLE = {**_COMMANDS, **{name.upper(): entry for name, entry in _COMMANDS.items()}}
