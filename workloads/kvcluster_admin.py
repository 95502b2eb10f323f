"""Administer the servers of one kvscale point through the ``redis`` client package.

Three actions, each run as a short-lived process on a load-generator host, so they go
through the emulated network like any client (and through a client nobody here wrote):

``setup``
    Make N ``redis-server --cluster-enabled yes`` nodes one Redis Cluster whose slots
    follow *our* ring (``nodes.kv.cluster``, the same ``--cluster`` spec and
    ``--vnodes`` our servers get): each node is given its slot ranges with ``CLUSTER
    ADDSLOTSRANGE``, the first node meets the others (``CLUSTER MEET``), then every node
    is polled until it reports ``cluster_state:ok`` and a ``CLUSTER SLOTS`` table that
    agrees with the ring. So Redis and our store partition the keys identically and the
    comparison is one of servers. ``redis-cli --cluster create`` is not used: it needs
    at least three masters and splits slots its own way.
``resetstat``
    ``CONFIG RESETSTAT`` on every server: the cache counters cover the mix, not the
    preload.
``info``
    One JSON line per server with ``DBSIZE`` and the INFO fields analysis uses (cache
    hits, misses and evictions for ours; keyspace hits and misses; commands processed).

Exit status 0, or 1 with one sentence on stderr naming the server and what failed.
"""

import json
import sys
import time

import redis

from nodes.dht.common import UsageParser
from nodes.kv import cluster

INFO_FIELDS = ('total_commands_processed', 'keyspace_hits', 'keyspace_misses',
               'cache_policy', 'cache_size', 'cache_entries', 'cache_hits', 'cache_misses',
               'cache_evictions', 'used_memory', 'uptime_in_seconds')
SETUP_WAIT_S = 60


class AdminError(Exception):
    """One step failed (its sentence names the server)."""


def connect(member, timeout):
    """Return a redis.Redis client of one member (name, host, port)."""
    return redis.Redis(host=member.host, port=member.port, socket_timeout=timeout,
                       socket_connect_timeout=timeout)


def expected_owners(ring):
    """Return {(start, end): 'host:port'} of the ring's contiguous slot ranges."""
    return {(start, end): ring.members[index].addr for start, end, index in ring.ranges()}


def _slots_table(client):
    """Return {(start, end): 'ip:port'} from one node's raw CLUSTER SLOTS reply."""
    table = {}
    for entry in client.execute_command('CLUSTER', 'SLOTS'):    # no callback: raw lists
        primary = entry[2]
        table[(int(entry[0]), int(entry[1]))] = '%s:%d' % (_text(primary[0]), int(primary[1]))
    return table


def _text(value):
    """bytes or str -> str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def setup(ring, timeout):
    """Give each Redis node its ranges, join them, wait until all agree with the ring."""
    members = ring.members
    clients = [connect(m, timeout) for m in members]
    for index, (member, client) in enumerate(zip(members, clients)):
        flat = [x for start, end, owner in ring.ranges() if owner == index
                for x in (start, end)]
        try:
            client.execute_command('CLUSTER', 'ADDSLOTSRANGE', *flat)
        except redis.RedisError as e:
            raise AdminError('%s refused its slots: %s' % (member.name, e)) from None
    for member in members[1:]:
        clients[0].execute_command('CLUSTER', 'MEET', member.host, member.port)
    want = expected_owners(ring)
    want_flat = _per_slot(want)
    deadline = time.monotonic() + SETUP_WAIT_S
    pending = list(zip(members, clients))
    while pending:
        member, client = pending[0]
        try:
            state = client.execute_command('CLUSTER', 'INFO')
            ok = 'cluster_state:ok' in _text(state)
            if ok and _per_slot(_slots_table(client)) == want_flat:
                pending.pop(0)
                continue
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise AdminError('%s did not agree with the ring within %d s' % (
                member.name, SETUP_WAIT_S))
        time.sleep(0.2)
    return {'event': 'setup', 'nodes': len(members), 'ranges': len(want)}


def _per_slot(table):
    """{(start, end): owner} -> list of 16384 owners (tables may merge ranges differently)."""
    owners = [None] * cluster.SLOTS
    for (start, end), owner in table.items():
        for slot in range(start, end + 1):
            owners[slot] = owner
    return owners


def resetstat(ring, timeout):
    """CONFIG RESETSTAT on every server."""
    for member in ring.members:
        try:
            connect(member, timeout).config_resetstat()
        except redis.RedisError as e:
            raise AdminError('%s: CONFIG RESETSTAT failed: %s' % (member.name, e)) from None
    return {'event': 'resetstat', 'nodes': len(ring.members)}


def info(ring, timeout, out):
    """Print one JSON line per server: DBSIZE and the INFO fields in INFO_FIELDS."""
    for member in ring.members:
        client = connect(member, timeout)
        try:
            dbsize = client.dbsize()
            fields = client.info('all')
        except redis.RedisError as e:
            raise AdminError('%s: INFO failed: %s' % (member.name, e)) from None
        record = {'event': 'server', 'name': member.name, 'dbsize': dbsize}
        record.update({k: fields[k] for k in INFO_FIELDS if k in fields})
        print(json.dumps(record, sort_keys=True), file=out, flush=True)
    return {'event': 'info', 'nodes': len(ring.members)}


def parse_args(argv):
    """Parse and check the arguments (one sentence on error, exit 2)."""
    p = UsageParser('kvcluster_admin', description=__doc__.split('\n')[0])
    p.add_argument('action', choices=('setup', 'resetstat', 'info'))
    p.add_argument('--cluster', required=True, metavar='SPEC',
                   help='NAME=HOST:PORT,... as given to nodes.kv.server')
    p.add_argument('--vnodes', type=int, required=True, metavar='V')
    p.add_argument('--timeout', type=float, default=10.0, metavar='S')
    args = p.parse_args(argv)
    p.bounded(args, 'timeout', 0.001, 3600)
    try:
        args.ring = cluster.Ring(cluster.parse_layout(args.cluster), vnodes=args.vnodes)
    except ValueError as e:
        p.error(str(e))
    return args


def main(argv=None):
    """Run one action; print its JSON line(s)."""
    args = parse_args(argv)
    try:
        if args.action == 'setup':
            done = setup(args.ring, args.timeout)
        elif args.action == 'resetstat':
            done = resetstat(args.ring, args.timeout)
        else:
            done = info(args.ring, args.timeout, sys.stdout)
    except (AdminError, redis.RedisError, OSError) as e:
        print('kvcluster_admin %s: %s' % (args.action, e), file=sys.stderr)
        return 1
    print(json.dumps(done, sort_keys=True), flush=True)
    return 0


def simulate(env, argv):
    """Run resetstat or info in the simulator (`repronet.sim`) against simulated servers
    (`kvcluster_admin_sim`; setup, for Redis nodes, is refused there)."""
    from workloads.kvcluster_admin_sim import SimAdmin
    SimAdmin(env, parse_args(argv)).start()


if __name__ == '__main__':
    sys.exit(main())
