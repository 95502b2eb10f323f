"""kvmix: the seed 003 workload: closed-loop clients, 80 % GET / 20 % SET, Zipf keys, cluster-aware.

Seed 003 ran 1, 10 and 100 clients against 1 to 10 key-value servers, 80 % GETs and 20 %
PUTs of the Enron e-mails.  This tool is those clients for any RESP server: one Redis
or our ``nodes.kv`` server alone, or a Redis Cluster or our cluster of them.

- Servers: ``--servers HOST:PORT[,...]`` are entry points.  The first that answers is
  asked ``CLUSTER SLOTS``; an error reply (a plain Redis, a node without a cluster) means
  it is run against alone; otherwise every request goes straight to the owner of its
  key's slot and ``-MOVED`` replies are followed (``workloads.kvmix_client``).
- Clients: ``--clients N`` logical clients in this process, global ids ``--client-base``
  + 0..N-1, each a closed loop with ``--pipeline`` requests in flight (1: one at a time,
  as the seed's clients) over its own connection to every server, all opened before the
  ready line, so connecting is not timed.  ``--barrier``: print ready, wait for ``go`` on
  stdin (the runner releases many load-generator processes together).
- Keys (``workloads.keyspace``): ``--keys K`` synthetic keys with e-mail-sized values, or
  the first K messages of an Enron maildir (``--dataset enron:DIR``, ``workloads.enron``);
  popularity Zipf(``--zipf``) over a permutation seeded by ``--seed``.  Every process
  given the same key flags builds the same key space.
- ``--phase preload``: every key SET once (version 0); client g of ``--total-clients``
  (default: client-base + clients, i.e. this process is the last one) SETs the keys
  i = g mod total, so processes with disjoint id ranges load disjoint keys.  ``--phase
  mix``: each client draws (GET with probability ``--get-ratio``, else SET; key) from
  its own stream, seeded by ``--seed`` and its id, for ``--duration`` seconds (default
  10) or ``--requests`` per client.

Output, JSON lines on stdout: ``ready`` (mode, servers, slots per server, the key space),
then ``summary``: ``ops`` per kind (ok, miss, wrong, errors by first word, count and
mean/p50/p99/max in us; the percentiles from ``loadgen.LatencyLog``'s histogram, exact
to 0.1 %, the latency files exact), ``moved``, ``per_server`` {"host:port": {"get": n,
"set": n}} (requests sent there, a redirected one counting at each server it reached),
``duration_s`` (first send to last reply), ``ops_per_s``, ``cpu_s``, ``run_cpu_s``.  ``--latencies
PREFIX`` writes PREFIX.get.u32 and PREFIX.set.u32 (``workloads.loadgen``: uint32, 100 ns
ticks, in reply order over all clients of the process).

Exit status 0 when every request got a correct reply (a GET miss is not a failure: it
depends on what was loaded); 1 with one sentence on stderr when a client stopped
(connection refused or lost, ``--timeout`` per request, a bad redirect), a reply was wrong
or an error, or on SIGTERM/SIGINT (the summary is still written); 2 for bad arguments,
checked before connecting.

    python -m workloads.kvmix --servers 127.0.0.1:6379 --phase preload --clients 8 --pipeline 32
    python -m workloads.kvmix --servers 127.0.0.1:7000 --clients 100 --duration 30 --latencies lat
"""

import os
import resource
import sys

from nodes.dht.common import error
from nodes.dht.ring import parse_addr
from workloads import enron
from workloads.keyspace import DEFAULT_ZIPF, MAX_KEYS, MAX_VALUE, MIN_VALUE, Keyspace
from workloads.kvmix_client import OPS, MixClient
from workloads.kvmix_run import Run, discover, run_clients
from workloads.loadgen import UsageParser, run_cli

MAX_IN_FLIGHT_BYTES = 256 << 20     # clients x pipeline x largest value


def parse_args(argv):
    """Parse and check the command line; load the key space (exit 2 with one sentence)."""
    p = UsageParser('kvmix', description=__doc__.split('\n')[0])
    a = p.add_argument
    a('--servers', default='127.0.0.1:6379', help='entry points HOST:PORT[,HOST:PORT...]')
    a('--phase', choices=('preload', 'mix'), default='mix')
    a('--clients', type=int, default=1, help='logical clients in this process')
    a('--client-base', type=int, default=0, help='global id of the first client')
    a('--total-clients', type=int, help='preload: clients of all processes (default: '
      'client-base + clients)')
    a('--pipeline', type=int, default=1, help='requests in flight per client')
    a('--duration', type=float, help='mix: seconds (default 10 unless --requests)')
    a('--requests', type=int, help='mix: requests per client instead of --duration')
    a('--get-ratio', type=float, default=0.8)
    a('--seed', type=int, default=0)
    a('--dataset', default='synthetic', help='synthetic or enron:/path/to/maildir')
    a('--enron-keys', choices=enron.KEY_MODES, default='message-id')
    a('--keys', type=int, default=20000, help='distinct keys (at most, for a data set)')
    a('--zipf', type=float, default=DEFAULT_ZIPF, help='Zipf exponent (0: uniform)')
    a('--value-size', type=int, default=0, help='synthetic: every value this size (0: '
      'log-normal, median 1 KiB)')
    a('--timeout', type=float, default=10.0, help='seconds a request may wait')
    a('--latencies', metavar='PREFIX', help='write PREFIX.get.u32 and PREFIX.set.u32')
    a('--loop', choices=('auto', 'uvloop', 'asyncio'), default='auto')
    a('--barrier', action='store_true', help='print ready, wait for "go" on stdin')
    args = p.parse_args(argv)
    args.entries = _entries(p, args.servers)
    p.bounded(args, 'clients', 1, 1000)
    p.bounded(args, 'client_base', 0, 1_000_000)
    p.bounded(args, 'pipeline', 1, 1024)
    p.bounded(args, 'seed', 0, 2**63 - 1)
    p.bounded(args, 'keys', 1, MAX_KEYS)
    p.bounded(args, 'zipf', 0, 10)
    p.bounded(args, 'get_ratio', 0, 1)
    if args.value_size:
        p.bounded(args, 'value_size', MIN_VALUE, MAX_VALUE)
    if not 0 < args.timeout <= 600:     # topologies/kvscale.py's range; > 429 s is clamped
        p.error('--timeout must be more than 0 and at most 600 seconds')
    _check_phase(p, args)
    if args.dataset != 'synthetic' and not args.dataset.startswith('enron:'):
        p.error('--dataset must be synthetic or enron:/path/to/maildir')
    if args.dataset != 'synthetic' and args.value_size:
        p.error('--value-size applies to the synthetic data set only')
    if args.clients * args.pipeline * (args.value_size or MAX_VALUE) > MAX_IN_FLIGHT_BYTES \
            and args.dataset == 'synthetic':
        p.error('--clients x --pipeline x the largest value must be at most %d bytes'
                % MAX_IN_FLIGHT_BYTES)
    args.loop_factory, args.loop = p.loop(args.loop)
    args.keyspace, args.dataset_info = _keyspace(p, args)
    if args.clients * args.pipeline * args.keyspace.max_value_bytes() > MAX_IN_FLIGHT_BYTES:
        p.error('--clients x --pipeline x the largest value must be at most %d bytes'
                % MAX_IN_FLIGHT_BYTES)
    args.latency_files = _latency_files(p, args.latencies)
    return args


def _entries(p, text):
    """The --servers addresses as 'host:port' strings."""
    entries = [t.strip() for t in text.split(',') if t.strip()]
    if not entries:
        p.error('--servers must name at least one HOST:PORT')
    for entry in entries:
        try:
            parse_addr(entry, port_zero=False)
        except ValueError as exc:
            p.error('--servers: %s' % str(exc).rstrip('.'))
    return entries


def _check_phase(p, args):
    """The flags of one phase: --duration/--requests for mix, --total-clients for preload."""
    if args.phase == 'mix':
        if args.total_clients is not None:
            p.error('--total-clients applies to --phase preload only')
        if args.duration is not None and args.requests is not None:
            p.error('give --duration or --requests, not both')
        if args.requests is not None:
            p.bounded(args, 'requests', 1, 100_000_000)
        elif args.duration is None:
            args.duration = 10.0
        elif not 0 < args.duration <= 86400:
            p.error('--duration must be more than 0 and at most 86400 seconds')
        return
    if args.duration is not None or args.requests is not None:
        p.error('--duration and --requests apply to --phase mix only')
    if args.total_clients is None:
        args.total_clients = args.client_base + args.clients
    elif args.total_clients < args.client_base + args.clients:
        p.error('--total-clients must be at least --client-base + --clients (%d)'
                % (args.client_base + args.clients))
    elif args.total_clients > 1_001_000:
        p.error('--total-clients must be at most 1001000')


def _keyspace(p, args):
    """(Keyspace, what the ready line says about the data set) of the key flags."""
    if args.dataset == 'synthetic':
        return Keyspace(args.keys, args.zipf, args.seed, args.value_size), {}
    path = args.dataset[len('enron:'):]
    try:
        pairs, loader = enron.load(path, args.enron_keys, limit=args.keys)
    except enron.EnronError as exc:
        p.error('--dataset: %s' % exc)
    info = {'maildir': loader.root, 'loaded': loader.loaded, 'skipped': dict(loader.skipped)}
    return Keyspace.from_pairs(pairs, args.zipf, args.seed), info


def _latency_files(p, prefix):
    """[set file, get file] opened for writing, or [None, None]."""
    if prefix is None:
        return [None, None]
    files = []
    for op in OPS:
        path = '%s.%s.u32' % (prefix, op)
        try:
            files.append(open(path, 'wb'))
        except OSError as exc:
            p.error('cannot write --latencies %s: %s' % (path, exc.strerror or exc))
    return files


def _plan(args, ks, cid):
    """(plan iterator of (is_get, key index), requests or None) of client cid."""
    if args.phase == 'preload':
        indices = ks.preload_indices(cid, args.total_clients)
        return ((False, i) for i in indices), len(indices)
    sampler = ks.sampler(cid, args.get_ratio)

    def draws():
        while True:
            gets, keys = sampler.block()
            yield from zip(gets, keys)
    return draws(), args.requests


def _raise_file_limit():
    """Raise the open-file soft limit to the hard one; return the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


async def _main(args, log):
    """Discover, connect, run; write the summary; return the exit status."""
    run = Run(args, log)
    cpu0 = sum(os.times()[:2])
    problem = await run.guarded(discover(run, args.entries, args.timeout))
    if problem is None:
        needed = args.clients * len(run.slots.addrs) + 64
        if needed > _raise_file_limit():
            problem = '%d clients x %d servers need more connections than the open-file ' \
                      'limit allows' % (args.clients, len(run.slots.addrs))
    if problem is None:
        for n in range(args.clients):
            plan, requests = _plan(args, args.keyspace, args.client_base + n)
            run.clients.append(MixClient(args.client_base + n, args.keyspace, plan, requests,
                                         args.pipeline, run,
                                         versioned=args.phase == 'mix'))
        problem = await run.guarded(run.connect())
    cpu_go = sum(os.times()[:2])
    if problem is None:
        problem = await run.guarded(run.ready(dataset=args.dataset, **args.dataset_info))
    if problem is None:
        cpu_go = sum(os.times()[:2])
        problem = await run.guarded(run_clients(run, args.duration))
    return run.finish(problem, error, (cpu0, cpu_go, sum(os.times()[:2])))


def main(argv=None):
    """Command-line entry point; returns the exit status."""
    return run_cli(parse_args, _main, argv)


def simulate(env, argv):
    """Run this load generator in the simulator (`repronet.sim`): the same clients and
    records in virtual time (`kvmix_sim`)."""
    from workloads.kvmix_sim import SimKvmix
    SimKvmix(env, parse_args(argv), _plan).start()


if __name__ == '__main__':
    sys.exit(main())
