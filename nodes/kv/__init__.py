"""Key-value store speaking RESP2 (the Redis protocol): sans-I/O core and its asyncio driver.

Reproduces the store of seed 001 (put/get/delete from 1-8 clients) and, with a cache per server,
seed 003. redis-cli, redis-benchmark and redis-py work against it unchanged, so Redis itself is the
baseline under the same load generator (issue 9).

Modules
    resp       RESP2 request parser (multibulk and inline, bounded) and reply encoders
    cache      FIFO, LRU and LFU caches, O(1) per operation, with hit/miss/eviction counts;
               the exact eviction order is specified in its docstring
    aof        append-only log records (magic, crc32, length, payload) and recovery of the key
               directory from a log with a truncated or corrupt tail
    core       KVConfig, KVCore (key directory, cache, pending log, counters) and Connection
               (`receive(data, now) -> Output(replies, writes, close)`); no I/O, no clock
    commands   one handler per command (GET, SET, DEL, EXISTS, PING, ECHO, INFO, DBSIZE,
               FLUSHALL/FLUSHDB, QUIT, SELECT, CONFIG, COMMAND, CLIENT) and the dispatch table
    cluster    Redis Cluster's key -> hash slot, the consistent-hashing ring (virtual nodes)
               from slots to servers, the --cluster layout parser
    cluster_commands
               a server in a layout: -MOVED/-CROSSSLOT for keys of other slots, CLUSTER
               SLOTS/NODES/SHARDS/INFO/..., COMMAND for redis-py's RedisCluster
    server     the asyncio driver (sockets, log file, appendfsync policy)

Storage: 'memory' keeps values in the key directory (the log is for durability, like Redis's
AOF); 'log' keeps (offset, length) of each value in the log and reads it back on a cache miss,
so the cache saves real work (Bitcask-like).
"""
