"""Sans-I/O core of the KV node: connections in, RESP replies and log records out.

The driver (nodes/kv/server.py) owns sockets, the log file and the clock; this module owns
everything else, so the same core runs under asyncio, in tests and in a simulator::

    core = KVCore(KVConfig(...), recovery=aof.recover(...), read=pread)
    conn = core.connect(now)
    out = conn.receive(data, now)     # Output(replies, writes, close)
    log = core.take_log()             # append to the log file; with appendfsync=always make it
                                      # durable before sending out.replies
Storage (Bitcask-like): the append-only log is the persistent store. In 'memory' storage the key
directory holds the values (the log is for durability, as Redis's AOF); in 'log' storage it holds
(offset, length) of each value in the log and a GET that misses the cache reads the value back
through `read(offset, length)`. Records not yet taken by the driver stay in a pending buffer and
reads of them are served from it, so the driver never reads bytes it has not written. The driver
must write what `take_log` returns before its next `receive` call and must call `take_log` even
without a log file, or build the core with `append_log=False` (no records at all).

With `KVConfig.cluster` (a `cluster.Ring`) and `node_id`, the core is one server of a cluster:
it dispatches through `cluster_commands.TABLE`, which serves the keys of its own slots and
redirects the others with -MOVED; without them it is the single node it always was (the
CLUSTER command then answers Redis's "cluster support disabled").

The cache (cache.py) sits in front of the key directory: SET writes through, DEL and FLUSHALL
remove, a GET miss of an existing key inserts it. Limits (key and value size, number of keys,
request size, arguments) answer with an error reply and store nothing; malformed requests get
Redis's "-ERR Protocol error: ..." and the connection is closed.
"""

from dataclasses import dataclass

from . import aof, cache, cluster_commands, commands, resp


@dataclass(frozen=True)
class KVConfig:
    """Limits, cache and storage of one KV node (one name per parameter: --cache-size etc.)."""
    cache_policy: str = 'lru'
    cache_size: int = 100
    storage: str = 'memory'
    max_key_bytes: int = 512
    max_value_bytes: int = 1 << 20
    max_keys: int = 1_000_000
    max_request_bytes: int = None
    max_args: int = 1 << 20     # Redis takes 2**31-1; max_request_bytes bounds memory
    append_log: bool = True
    cluster: object = None      # a cluster.Ring: serve only its slots owned by node_id
    node_id: str = None         # this server's name in `cluster`

    def __post_init__(self):
        cache.make(self.cache_policy, self.cache_size)       # raises on a bad policy or size
        if self.storage not in aof.STORAGES:
            raise ValueError('storage must be memory or log, not %r' % (self.storage,))
        for name in ('max_key_bytes', 'max_value_bytes', 'max_keys', 'max_args'):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError('%s must be an integer >= 1' % name)
        if self.max_request_bytes is None:
            object.__setattr__(self, 'max_request_bytes',
                               self.max_key_bytes + self.max_value_bytes + 4096)
        elif self.max_request_bytes < 64:
            raise ValueError('max_request_bytes must be >= 64')
        if self.storage == 'log' and not self.append_log:
            raise ValueError("storage='log' needs append_log=True (the log holds the values)")
        if (self.cluster is None) != (self.node_id is None):
            raise ValueError('cluster and node_id go together (a layout and this node in it)')
        if self.cluster is not None and self.node_id not in \
                [m.name for m in self.cluster.members]:
            raise ValueError('node %r is not in the cluster layout (its members are %s)'
                             % (self.node_id, ', '.join(m.name for m in self.cluster.members)))

    def max_payload(self):
        """Largest log record payload these limits can write (for aof.recover)."""
        return 5 + self.max_key_bytes + self.max_value_bytes


@dataclass(frozen=True)
class Output:
    """What one `receive` call produced."""
    replies: bytes
    writes: int
    close: bool


_CLOSED = Output(b'', 0, True)


class KVCore:
    """The store shared by all connections: key directory, cache, pending log, counters."""

    def __init__(self, cfg, recovery=None, read=None):
        if cfg.storage == 'log' and read is None:
            raise ValueError("storage='log' needs a read(offset, length) callable")
        if recovery is not None and recovery.storage != cfg.storage:
            raise ValueError('the recovery was made for %r storage, the core uses %r'
                             % (recovery.storage, cfg.storage))
        self.cfg = cfg
        self._cache = cache.make(cfg.cache_policy, cfg.cache_size)
        self._keydir = recovery.keydir if recovery is not None else {}
        self._log_storage = cfg.storage == 'log'
        self._read = read
        self._pending = bytearray() if cfg.append_log else None
        self._pending_start = recovery.valid_bytes if recovery is not None else 0
        self._records = 0
        self._max_key = cfg.max_key_bytes
        self._max_value = cfg.max_value_bytes
        self._max_keys = cfg.max_keys
        self._oom = resp.error('OOM command not allowed when the key limit (max_keys=%d) is '
                               'reached' % cfg.max_keys)
        self._cluster = self._mine = None       # cluster_commands.ClusterNode, its slots
        self._table = commands.TABLE
        if cfg.cluster is not None:
            self._cluster = cluster_commands.ClusterNode(cfg.cluster, cfg.node_id, self._keydir)
            self._mine = self._cluster.mine
            self._table = cluster_commands.TABLE
        self._started = None
        self._now = None
        self._next_id = 1
        self.connections = 0
        self.connections_total = 0
        self._reset_stats()

    def _reset_stats(self):
        """Zero the statistics counters (not keys, connections or log size)."""
        self.commands = self.keyspace_hits = self.keyspace_misses = self.rejected = 0
        if self._cache is not None:
            self._cache.reset_counters()

    def connect(self, now):
        """A new client connection."""
        self._tick(now)
        self.connections += 1
        self.connections_total += 1
        conn = Connection(self, self._next_id)
        self._next_id += 1
        return conn

    def take_log(self):
        """Log bytes appended since the last call, for the driver to write in order."""
        if not self._pending:
            return b''
        data = bytes(self._pending)
        self._pending_start += len(data)
        self._pending = bytearray()
        return data

    def info(self):
        """Counters and settings, for the driver's summary line and tests."""
        c = self._cache
        return {'keys': len(self._keydir),
                'cache_hits': c.hits if c is not None else 0,
                'cache_misses': c.misses if c is not None else 0,
                'cache_evictions': c.evictions if c is not None else 0,
                'keyspace_hits': self.keyspace_hits, 'keyspace_misses': self.keyspace_misses,
                'commands': self.commands, 'connections': self.connections,
                'connections_total': self.connections_total, 'rejected': self.rejected,
                'log_bytes': self._log_end(), 'storage': self.cfg.storage,
                'cache_policy': self.cfg.cache_policy if c is not None else 'none',
                'cache_size': c.capacity if c is not None else 0,
                **self.cluster_info()}

    def cluster_info(self):
        """This node's name, slots owned, slot share and the ring's vnodes ({} if standalone)."""
        cl = self._cluster
        if cl is None:
            return {}
        return {'node': cl.me.name, 'slots': cl.slots_owned,
                'slot_share': cl.slots_owned / cluster_commands.SLOTS, 'vnodes': cl.ring.vnodes}

    def largest_reply(self):
        """Bytes of the largest reply to a request that is not a GET (for input slicing)."""
        return self._cluster.largest_reply() if self._cluster is not None else 0

    # Storage (used by commands.py).
    def _log_end(self):
        """Size of the log including pending records."""
        return self._pending_start + (len(self._pending) if self._pending is not None else 0)

    def _append_set(self, key, value):
        """Log a SET; returns what the key directory holds for the key."""
        pending = self._pending
        if pending is None:
            return value
        at = self._pending_start + len(pending)
        aof.append_set(pending, key, value)
        self._records += 1
        if self._log_storage:
            return (at + aof.value_offset_in_record(key), len(value))
        return value

    def _delete(self, key):
        """Remove an existing key (log, key directory, cache)."""
        if self._pending is not None:
            self._pending += aof.encode_del(key)
            self._records += 1
        del self._keydir[key]
        if self._cache is not None:
            self._cache.delete(key)

    def _flush(self):
        """FLUSHALL: log it, empty the key directory and the cache."""
        if self._pending is not None:
            self._pending += aof.encode_flushall()
            self._records += 1
        self._keydir.clear()
        if self._cache is not None:
            self._cache.clear()

    def _read_value(self, offset, length):
        """A value in the log (pending buffer or the driver's read); raises LogReadError."""
        rel = offset - self._pending_start
        if rel >= 0:
            return bytes(self._pending[rel:rel + length])
        try:
            v = self._read(offset, length)
        except OSError as e:
            raise aof.LogReadError('ERR could not read the value from the log (%s)' % e) from e
        if len(v) != length:
            raise aof.LogReadError('ERR the log is shorter than the key directory says '
                                   '(%d of %d bytes at offset %d)' % (len(v), length, offset))
        return v if v.__class__ is bytes else bytes(v)

    def _too_large(self, key, value):
        """The error reply for an oversized key or value (counted as rejected)."""
        self.rejected += 1
        if len(key) > self._max_key:
            return resp.error('ERR key is too large (%d bytes, the limit is %d)'
                              % (len(key), self._max_key))
        return resp.error('ERR value is too large (%d bytes, the limit is %d)'
                          % (len(value), self._max_value))

    def _tick(self, now):
        """Remember the time the driver gave (INFO's uptime)."""
        if self._started is None:
            self._started = now
        self._now = now

    def _info_sections(self):
        """(section, [(field, value)]) for INFO."""
        i = self.info()
        up = (self._now - self._started) if self._started is not None else 0
        return [
            ('Server', [('redis_version', '7.0.0'),
                        ('redis_mode', 'standalone' if self._cluster is None else 'cluster'),
                        ('server_name', 'repronet-kv'), ('uptime_in_seconds', int(up)),
                        ('storage', i['storage'])]),
            ('Clients', [('connected_clients', i['connections'])]),
            ('Stats', [('total_connections_received', i['connections_total']),
                       ('total_commands_processed', i['commands']),
                       ('keyspace_hits', i['keyspace_hits']),
                       ('keyspace_misses', i['keyspace_misses']),
                       ('rejected', i['rejected']), ('log_bytes', i['log_bytes'])]),
            ('Cache', [('cache_policy', i['cache_policy']), ('cache_size', i['cache_size']),
                       ('cache_entries', len(self._cache) if self._cache else 0),
                       ('cache_hits', i['cache_hits']), ('cache_misses', i['cache_misses']),
                       ('cache_evictions', i['cache_evictions'])]),
            ('Cluster', [('cluster_enabled', 0 if self._cluster is None else 1)]),
            ('Keyspace', [('db0', 'keys=%d,expires=0,avg_ttl=0' % i['keys'])]
             if i['keys'] else []),
        ]

    def _config_values(self):
        """CONFIG GET's answers (parameter -> value as str)."""
        c = self.cfg
        return {'save': '', 'appendonly': 'yes' if c.append_log else 'no', 'databases': '1',
                'maxmemory': '0', 'cache-policy': c.cache_policy, 'cache-size': str(c.cache_size),
                'storage': c.storage, 'max-key-bytes': str(c.max_key_bytes),
                'max-value-bytes': str(c.max_value_bytes), 'max-keys': str(c.max_keys)}


class Connection:
    """One client connection: a request parser and its state."""

    __slots__ = ('_core', '_parser', '_closing', '_closed', 'id', 'name')

    def __init__(self, core, conn_id):
        self._core = core
        self._parser = resp.RequestParser(core.cfg.max_request_bytes, core.cfg.max_args)
        self._closing = False
        self._closed = False
        self.id = conn_id
        self.name = None

    @property
    def buffered(self):
        """Request bytes held while a command is incomplete."""
        return self._parser.buffered

    def receive(self, data, now):
        """Run every complete command in `data` (plus what was buffered) in order."""
        if self._closing or self._closed:
            return _CLOSED
        core = self._core
        core._now = now
        parser = self._parser
        parser.feed(data)
        table = core._table
        replies = []
        append = replies.append
        records = core._records
        n = 0
        while True:
            try:
                args = parser.get()
            except resp.ProtocolError as e:
                append(resp.error('ERR %s' % e))
                core.rejected += 1
                self._closing = True
                break
            if args is None:
                break
            n += 1
            entry = table.get(args[0])
            if entry is None:
                entry = table.get(args[0].upper())
                if entry is None:
                    append(commands.unknown(args))
                    continue
            fn, arity = entry
            if len(args) != arity and (arity > 0 or len(args) < -arity):
                append(commands.wrong_arity(args))
                continue
            append(fn(core, self, args))
            if self._closing:
                break
        core.commands += n
        return Output(b''.join(replies), core._records - records, self._closing)

    def close(self, now):
        """The driver closed the connection (after sending the replies, or the peer left);
        the input it held is dropped at once."""
        if not self._closed:
            self._closed = True
            self._parser.clear()
            self._core.connections -= 1
            self._core._now = now
