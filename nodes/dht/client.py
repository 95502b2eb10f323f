"""DHT client process: register/unregister a shared folder, search names, download files.

    python -m nodes.dht.client --name c1 --servers s1=IP:PORT,... --replicas R
        --op register|unregister|search|download [--batch | --no-batch]
        [--share DIR --advertise IP:PORT] [--names FILE] [--downloads DIR]
        [--window W] [--barrier] [--timeout S]

A thin process around `client_ops_core.ClientOps` (every decision: routing, failover,
write-to-all, window, timeouts, resume) and `connections.Driver` (sockets, clock, files);
`client_driving` has what it shares with the simulated client (`simulate`, `sim_drivers`).
One persistent TCP connection per index
server (TCP_NODELAY), opened before the timed part; one persistent connection per holder
peer for downloads. `--window W`: with W = 1 (default) the client has one request in
flight at a time, as in the seed; with W > 1 up to W requests are in flight on each server
connection (pipelining) and W downloads run at once. Log: one `op` record per operation
(per message for batched register), then `summary`; exit status 0 only if all succeeded.
"""

import asyncio
import functools
import os
import sys
import time

from . import sim_drivers
from .client_driving import plan, report, setup, totals
from .common import JsonLog, UsageParser, error, wait_go
from .connections import Driver
from .peer import Catalog
from .ring import DEFAULT_VNODES, MAX_REPLICAS, MAX_VNODES, parse_addr, parse_servers

__all__ = ['main', 'parse_args', 'plan', 'simulate', 'totals']


def parse_args(argv):
    """Parse the client command line."""
    p = _parser()
    return _check(p, p.parse_args(argv))


@functools.lru_cache(maxsize=None)
def _parser():
    """The client's parser, built once per process: the simulator starts 10,000 clients in
    one, and building it took longer than parsing (parse_args leaves a parser unchanged)."""
    p = UsageParser('dht.client', package='nodes',
                    description=__doc__.split('\n')[0])
    p.add_argument('--name', required=True)
    p.add_argument('--servers', required=True, help='every index server: s1=IP:PORT,...')
    p.add_argument('--replicas', type=int, default=0)
    p.add_argument('--op', required=True, choices=('register', 'unregister', 'search', 'download'))
    g = p.add_mutually_exclusive_group()
    g.add_argument('--batch', dest='batch', action='store_true', default=True,
                   help='one message per server (default)')
    g.add_argument('--no-batch', dest='batch', action='store_false', help='one message per file')
    p.add_argument('--share', help='register/unregister: the shared folder')
    p.add_argument('--advertise', help='register/unregister: IP:PORT of this peer\'s file server')
    p.add_argument('--names', help='search/download: file with one name per line')
    p.add_argument('--downloads', help='download: folder for the downloaded files')
    p.add_argument('--window', type=int, default=1, help='outstanding requests per connection')
    p.add_argument('--barrier', action='store_true', help='print ready, wait for "go" on stdin')
    p.add_argument('--timeout', type=float, default=5.0, help='seconds to wait for a reply')
    p.add_argument('--vnodes', type=int, default=DEFAULT_VNODES)
    p.add_argument('--connect', choices=('all', 'lazy'), default='all',
                   help='all: connect to every index server before the operations (the '
                   'default, so connecting is never timed); lazy: when first needed (a '
                   'client of 1,000 servers talks to a few)')
    return p


def _check(p, args):
    """The checks argparse cannot make; p.error() (exit 2) on the first that fails."""
    try:
        args.servers = parse_servers(args.servers)
        if args.advertise:
            parse_addr(args.advertise)
    except ValueError as exc:
        p.error(str(exc))
    if args.window < 1 or args.timeout <= 0:
        p.error('--window >= 1 and --timeout > 0 please')
    p.bounded(args, 'replicas', 0, MAX_REPLICAS)
    p.bounded(args, 'vnodes', 1, MAX_VNODES)
    if args.op in ('register', 'unregister'):
        if not args.share or not args.advertise:
            p.error('--op %s needs --share DIR and --advertise IP:PORT' % args.op)
        if not os.path.isdir(args.share):
            p.error('--share %s is not a directory' % args.share)
        args.names_list = Catalog(args.share).names()
    else:
        if not args.names:
            p.error('--op %s needs --names FILE' % args.op)
        try:
            with open(args.names, encoding='utf-8') as f:
                args.names_list = [line.strip() for line in f if line.strip()]
        except OSError as exc:
            p.error('cannot read --names: %s' % exc)
        if args.op == 'download':
            if not args.downloads:
                p.error('--op download needs --downloads DIR')
            try:
                os.makedirs(args.downloads, exist_ok=True)
            except OSError as exc:
                p.error('cannot make --downloads %s: %s' % (args.downloads, exc.strerror or exc))
    return args


async def _main(args, log):
    """Connect, optionally wait at the barrier, run the operation, log; return exit status."""
    routing, ops, core = setup(args)
    driver = Driver(core, args.downloads)
    if args.connect == 'all':
        await driver.connect_all()
    if args.barrier:
        await wait_go(log)
    t0 = time.perf_counter()
    done = False
    try:
        core.submit(ops, driver.now())
        await driver.run()
        done = True
    finally:
        elapsed = time.perf_counter() - t0
        removed = driver.close()
        args.reported = True
        status = report(log, error, args, routing, core, ops, elapsed, done, removed)
    return status


def simulate(env, argv):
    """Run this client in the simulator (`repronet.sim`): the same core, records and exit
    status in virtual time (`sim_drivers.SimClient`)."""
    sim_drivers.SimClient(env, parse_args(argv)).start()


def main(argv=None):
    """Entry point; SIGTERM/SIGINT end the run with a summary and status 1."""
    import signal
    args = parse_args(sys.argv[1:] if argv is None else argv)
    log = JsonLog()

    async def runner():
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        return await _main(args, log)
    try:
        return asyncio.run(runner())
    except asyncio.CancelledError:
        if not getattr(args, 'reported', False):     # stopped before the timed part
            error('%s: interrupted before the operations started' % args.name)
        return 1
    except RuntimeError as exc:
        error('%s: %s' % (args.name, exc))
        return 1


if __name__ == '__main__':
    sys.exit(main())
