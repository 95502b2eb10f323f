"""KV node process: the asyncio driver around `core.KVCore`, speaking RESP2 on TCP.

    python -m nodes.kv.server [--host 127.0.0.1] [--port 6379] [--log PATH]
        [--appendfsync always|everysec|no] [--cache lru|lfu|fifo|none] [--cache-size N]
        [--storage memory|log] [--max-key-bytes N] [--max-value-bytes N] [--max-keys N]
        [--max-connections N] [--max-pending-bytes N] [--max-input-bytes N]
        [--idle-timeout S]
        [--cluster NAME=HOST:PORT[*WEIGHT],... --node-id NAME [--vnodes V]]
        [--loop auto|uvloop|asyncio] [--profile PATH]

Stdout is JSON lines (`nodes.dht.common.JsonLog`): ``recovery`` when the log had a bad
tail, ``ready`` once listening (with the real port, the event loop and what was
recovered), ``summary`` (the core's `info()` and this driver's counters) after SIGTERM or
SIGINT, then exit 0. Bad arguments are one sentence on stderr and exit 2, before anything
is opened or bound; a log or socket that cannot be opened is one sentence and exit 1, as is
a log that can no longer be written or synced (see `durable`).

The core decides; this driver moves bytes, time and log records. `KVServer` owns the
listener, the core and the log file (`durable`: recovery at start-up, appends, the
``appendfsync`` policy with group commit); each client is a `connection.ClientProtocol`,
which also keeps that client's memory bounded (input slices, a high-water mark of unsent
replies, ``--max-pending-bytes``, ``--max-connections``, ``--idle-timeout``) and, with
the server, the input held by all clients together (``--max-input-bytes``). Unlike
Redis's default timeout of 0, an idle client is closed after 300 s by default, so a
client that stopped reading does not hold its buffers forever.

With ``--cluster`` the server is one member of a static Redis-Cluster-like layout (every
member is started with the same SPEC and its own ``--node-id``): it serves the hash slots the
consistent-hashing ring (`cluster.Ring`, ``--vnodes`` points per member and weight) gives it,
answers ``-MOVED <slot> <host>:<port>`` for the others and the CLUSTER commands Redis Cluster's
clients need (`cluster_commands`); it listens on its member's port (and host, unless ``--host``
says where to bind), and the ready line adds its name, slots owned and slot share.

``--profile PATH`` runs the process under cProfile and dumps the stats at exit, the way to
see where the CPU goes (``python3 -m pstats PATH``).

``simulate(env, argv)`` runs the same server in the simulator (`sim_server`: the same core
and connection policy over simulated streams, the log file written, fdatasync modelled).
"""

import argparse
import asyncio
import cProfile
import os
import resource
import sys
import time

if __package__ in (None, ''):       # run as nodes/kv/server.py: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))

from nodes.dht.common import (JsonLog, UsageParser, error, loop_factory,  # noqa: E402
                              nodelay, stop_event_on_signals)
from nodes.kv import cluster, cluster_commands, durable  # noqa: E402
from nodes.kv.connection import ClientProtocol  # noqa: E402
from nodes.kv.core import KVConfig  # noqa: E402
from nodes.kv.serving import (IDLE_TIMEOUT, MAX_INPUT_BYTES,  # noqa: E402
                              MAX_PENDING_BYTES, KVBook, open_log, ready_fields)

MAX_BULK = 512 << 20            # Redis's proto-max-bulk-len: the largest key or value allowed
_READ_ROOM = 1 << 20            # a client's reads beyond its largest request (backlog)


def default_max_connections():
    """The open-file limit less a reserve for the log, stdio and the loop, at most 10000."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 10000 if soft == resource.RLIM_INFINITY else max(1, min(10000, soft - 32))


class _Client(ClientProtocol, asyncio.Protocol):
    """A client connection on a real socket: Nagle off, then `ClientProtocol`."""

    def connection_made(self, transport):
        nodelay(transport)
        super().connection_made(transport)


class KVServer(KVBook):
    """The asyncio side of one KV node: listener, clients, log file and fsync policy."""

    def __init__(self, cfg, loop, log=None, recovery=None, appendfsync='everysec',
                 max_connections=None, max_pending=MAX_PENDING_BYTES,
                 idle_timeout=IDLE_TIMEOUT, max_input=MAX_INPUT_BYTES):
        super().__init__(cfg, log, recovery, appendfsync,
                         max_connections or default_max_connections(), max_pending,
                         idle_timeout, max_input)
        self.loop = loop
        self.stop = None
        self.server = None
        if log is not None:
            self.syncer = durable.Syncer(log, appendfsync, loop, self.synced, self.fail)

    wall = staticmethod(time.time)      # the time the core is given
    error = staticmethod(error)

    def on_failure(self):
        if self.stop is not None:
            self.stop.set()

    async def start(self, host, port):
        """Start listening; return the bound (host, port)."""
        self.server = await self.loop.create_server(lambda: _Client(self), host, port,
                                                    reuse_address=True, backlog=511)
        return self.server.sockets[0].getsockname()[:2]

    async def close(self):
        """Stop listening, drop every client, sync and close the log."""
        self.closing = True
        if self.server is not None:
            self.server.close()
        for client in list(self.clients):
            client.transport.abort()
        if self.server is not None:
            await self.server.wait_closed()
        try:
            if self.syncer is not None:
                await self.syncer.close()
        except OSError as exc:
            self.fail('cannot fdatasync the log file %s: %s' % (self.log.path, exc))
        if self.log is not None:
            self.log.close()


def _count(low, high=None):
    """argparse type: an integer of at least low (and at most high)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError('%r is not an integer' % text) from None
        if value < low:
            raise argparse.ArgumentTypeError('%d is below %d' % (value, low))
        if high is not None and value > high:
            raise argparse.ArgumentTypeError('%d is above %d' % (value, high))
        return value
    return parse


def _seconds(text):
    """argparse type: seconds, a number of at least 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError('%r is not a number of seconds' % text) from None
    if not value >= 0 or value == float('inf'):
        raise argparse.ArgumentTypeError('%r is not a number of seconds >= 0' % text)
    return value


def _file_arg(p, flag, path):
    """Error unless path can be created or opened for writing as a regular file."""
    parent = os.path.dirname(os.path.abspath(path))
    if path.endswith(os.sep):
        p.error('%s %s: names a folder, not a file' % (flag, path))
    if not os.path.isdir(parent):
        p.error('%s %s: folder %s does not exist' % (flag, path, parent))
    if os.path.exists(path):
        if not os.path.isfile(path):
            p.error('%s %s: not a regular file' % (flag, path))
        if not os.access(path, os.R_OK | os.W_OK):
            p.error('%s %s: not readable and writable by this user' % (flag, path))
    elif not os.access(parent, os.W_OK | os.X_OK):
        p.error('%s %s: cannot create files in %s' % (flag, path, parent))


def parse_args(argv):
    """Parse and check the command line (exit 2 with one sentence on an error)."""
    p = UsageParser('kv.server', package='nodes',
                    description=__doc__.split('\n')[0])
    p.add_argument('--host', default=None,
                   help="address to listen on (default 127.0.0.1, or the --cluster member's)")
    p.add_argument('--port', type=_count(0), default=None,
                   help="TCP port (0: any free one; default 6379, or the --cluster member's)")
    p.add_argument('--log', metavar='PATH', help='append-only file (default: no persistence)')
    p.add_argument('--appendfsync', choices=durable.POLICIES, default='everysec')
    p.add_argument('--cache', choices=('lru', 'lfu', 'fifo', 'none'), default='lru')
    p.add_argument('--cache-size', type=_count(0), default=100, metavar='N',
                   help='entries in the cache (0: none)')
    p.add_argument('--storage', choices=('memory', 'log'), default='memory',
                   help="where values live: in memory, or read back from --log")
    p.add_argument('--max-key-bytes', type=_count(1, MAX_BULK), default=512, metavar='N')
    p.add_argument('--max-value-bytes', type=_count(1, MAX_BULK), default=1 << 20,
                   metavar='N')
    p.add_argument('--max-keys', type=_count(1), default=1_000_000, metavar='N')
    p.add_argument('--max-connections', type=_count(1), default=None, metavar='N',
                   help='clients served at once (default: open-file limit less 32, '
                   'at most 10000)')
    p.add_argument('--max-pending-bytes', type=_count(1024), default=MAX_PENDING_BYTES,
                   metavar='N', help='unsent replies per client before it is closed')
    p.add_argument('--max-input-bytes', type=_count(1 << 20), default=None, metavar='N',
                   help='unfinished requests of all clients together before the largest '
                   'holders are closed (default: 256 MiB, or enough for one largest '
                   'request)')
    p.add_argument('--idle-timeout', type=_seconds, default=IDLE_TIMEOUT, metavar='S',
                   help='close a client silent this long (0: never)')
    p.add_argument('--cluster', metavar='SPEC',
                   help='the layout NAME=HOST:PORT[*WEIGHT],... (the same on every member): '
                   'serve the slots of --node-id, redirect the rest with -MOVED')
    p.add_argument('--node-id', metavar='NAME', help="this server's name in --cluster")
    p.add_argument('--vnodes', type=_count(1, cluster.MAX_VNODES), default=None, metavar='V',
                   help='ring points per member and unit of weight (default %d)'
                   % cluster.DEFAULT_VNODES)
    p.add_argument('--loop', choices=('auto', 'uvloop', 'asyncio'), default='auto')
    p.add_argument('--profile', metavar='PATH', help='dump cProfile stats here at exit')
    args = p.parse_args(argv)
    ring = _cluster_args(p, args)
    if args.port > 65535:
        p.error('--port %d is above 65535' % args.port)
    if args.storage == 'log' and not args.log:
        p.error('--storage log needs --log PATH (values are read back from that file)')
    for flag, path in (('--log', args.log), ('--profile', args.profile)):
        if path == '':
            p.error('%s: an empty path (leave the flag out for none)' % flag)
        if path:
            _file_arg(p, flag, path)
    args.loop_factory, args.loop_name = _pick_loop(p, args.loop)
    try:
        args.config = KVConfig(cache_policy=args.cache, cache_size=args.cache_size,
                               storage=args.storage, max_key_bytes=args.max_key_bytes,
                               max_value_bytes=args.max_value_bytes, max_keys=args.max_keys,
                               append_log=bool(args.log), cluster=ring,
                               node_id=args.node_id if ring else None)
    except (TypeError, ValueError) as exc:
        p.error(str(exc))
    if ring is not None:
        largest = cluster_commands.ClusterNode(ring, args.node_id).largest_reply()
        if args.max_pending_bytes < largest:
            p.error('--max-pending-bytes %d is below the largest CLUSTER reply of this layout '
                    '(%d bytes)' % (args.max_pending_bytes, largest))
    need = args.config.max_request_bytes + _READ_ROOM
    if args.max_input_bytes is None:
        args.max_input_bytes = max(MAX_INPUT_BYTES, need)
    elif args.max_input_bytes < need:
        p.error('--max-input-bytes %d is below %d, the largest request (--max-key-bytes + '
                '--max-value-bytes + 4096) plus 1 MiB of reads'
                % (args.max_input_bytes, need))
    return args


def _cluster_args(p, args):
    """The cluster.Ring of --cluster/--node-id/--vnodes (None without --cluster); fills in
    --host and --port from this node's member; usage error with one sentence if inconsistent."""
    if args.cluster is None:
        for flag, value in (('--node-id', args.node_id), ('--vnodes', args.vnodes)):
            if value is not None:
                p.error('%s needs --cluster (the layout it applies to)' % flag)
        args.host = '127.0.0.1' if args.host is None else args.host
        args.port = 6379 if args.port is None else args.port
        return None
    if args.node_id is None:
        p.error('--cluster needs --node-id NAME (which member of the layout this server is)')
    try:
        members = cluster.parse_layout(args.cluster)
    except ValueError as exc:
        p.error('--cluster: %s' % exc)
    me = next((m for m in members if m.name == args.node_id), None)
    if me is None:
        p.error('--node-id %s is not in --cluster (its members are %s)'
                % (args.node_id, ', '.join(m.name for m in members)))
    if args.port is not None and args.port != me.port:
        p.error("--port %d differs from %s's port %d in --cluster (where the other members "
                'redirect its keys)' % (args.port, me.name, me.port))
    args.host = me.host if args.host is None else args.host
    args.port = me.port
    try:
        return cluster.Ring(members, args.vnodes or cluster.DEFAULT_VNODES)
    except ValueError as exc:
        p.error('--cluster: %s' % exc)


def _pick_loop(p, choice):
    """(loop factory, name) for --loop (nodes.dht.common.loop_factory); usage error if missing."""
    try:
        return loop_factory(choice)
    except ValueError as e:
        p.error(str(e))


async def _main(args, out):
    """Recover the log, serve until SIGTERM/SIGINT, return the exit status."""
    loop = asyncio.get_running_loop()
    stop = stop_event_on_signals(loop)
    log, recovery, recovered = open_log(args, out, error)
    node = KVServer(args.config, loop, log, recovery, args.appendfsync,
                    args.max_connections, args.max_pending_bytes, args.idle_timeout,
                    args.max_input_bytes)
    node.stop = stop
    try:
        host, port = await node.start(args.host, args.port)
        out.write('ready', flush=True, **ready_fields(args, node, recovered, host, port,
                                                     args.loop_name, os.getpid()))
        await stop.wait()
    finally:
        await node.close()
    out.write('summary', flush=True, loop=args.loop_name, **node.summary())
    return 1 if node.failure is not None else 0


def simulate(env, argv):
    """Run this server in the simulator (`repronet.sim`): the same core and connection
    policy over simulated streams, in virtual time (`sim_server`)."""
    from nodes.kv.sim_server import SimKVServer
    args = parse_args(argv)
    SimKVServer(env, args, args.max_connections or default_max_connections()).start()


def main(argv=None):
    """Entry point: exit 0 after a signal, 1 when the log or socket fails, 2 on bad args."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    profile = cProfile.Profile() if args.profile else None
    if profile is not None:
        profile.enable()
    try:
        with asyncio.Runner(loop_factory=args.loop_factory) as runner:
            return runner.run(_main(args, JsonLog()))
    except (OSError, durable.LogInUse) as exc:
        error('kv server: %s' % exc)
        return 1
    finally:
        if profile is not None:
            profile.disable()
            profile.dump_stats(args.profile)


if __name__ == '__main__':
    sys.exit(main())
