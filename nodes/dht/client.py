"""DHT client process: register/unregister a shared folder, search names, download files.

    python -m nodes.dht.client --name c1 --servers s1=IP:PORT,... --replicas R
        --op register|unregister|search|download [--batch | --no-batch]
        [--share DIR --advertise IP:PORT] [--names FILE] [--downloads DIR]
        [--window W] [--barrier] [--timeout S]

asyncio driver around `client_core` and `transfer`. One persistent TCP connection per index
server (TCP_NODELAY), opened before the timed part; one persistent connection per holder
peer for downloads. `--window W`: with W = 1 (default) the client has one request in
flight at a time, as in the seed; with W > 1 up to W requests are in flight on each server
connection (pipelining) and W downloads run at once. Log: one `op` record per operation
(per message for batched register), then `summary`; exit status 0 only if all succeeded.
"""

import argparse
import asyncio
import os
import sys
import time

from . import codec
from .client_core import Channel, ChannelError, ClientCore, Lookup
from .common import JsonLog, error, wait_go
from .connections import IndexConn, LocalWriteError, PeerConn
from .peer import Catalog
from .ring import DEFAULT_VNODES, Ring, parse_addr, parse_servers
from .server_core import valid_name
from .transfer import Download, DownloadError

_FAILURES = (OSError, asyncio.TimeoutError, ChannelError, ConnectionError)


class Client:
    """Runs operations against the index servers and holder peers."""

    def __init__(self, servers, replicas=0, window=1, timeout=5.0, vnodes=DEFAULT_VNODES):
        self.addrs = servers
        self.core = ClientCore(Ring(servers, vnodes), replicas)
        self.window = max(1, window)
        self.timeout = timeout
        self.conns = {}
        self.sems = {s: asyncio.Semaphore(self.window) for s in servers}
        self.messages_sent = 0
        self.records = []
        self._seq = 0

    async def _connect(self, server):
        """Return a live connection to an index server, opening it if needed."""
        conn = self.conns.get(server)
        if conn is not None and not conn.lost:
            return conn
        host, port = self.addrs[server]
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: IndexConn(Channel(server, self.window)), host, port),
            self.timeout)
        self.conns[server] = conn
        return conn

    async def connect_all(self):
        """Open a connection to every index server; return the names that failed."""
        failed = []
        for server in self.addrs:
            try:
                await self._connect(server)
            except _FAILURES as exc:
                self.core.mark_down(server)
                failed.append(server)
                error('cannot connect to index server %s: %s' % (server, exc or type(exc).__name__))
        return failed

    async def ask(self, server, kind, *fields):
        """Send one request to server and return its reply (raises on failure/timeout)."""
        async with self.sems[server]:
            conn = await self._connect(server)
            fut = conn.request(kind, *fields)
            self.messages_sent += 1
            # A timer handle is much cheaper than asyncio.wait_for (no extra task per request).
            timer = asyncio.get_running_loop().call_later(self.timeout, self._expire, conn, server)
            try:
                return await fut
            finally:
                timer.cancel()

    def _expire(self, conn, server):
        """A reply is late: give up on the connection (and every request on it)."""
        conn.abort(asyncio.TimeoutError('no reply from %s in %.1f s' % (server, self.timeout)))

    def record(self, op, name, ok, t0, server, nbytes=0, **extra):
        """Keep one op record (written after the timed part)."""
        now = time.time()
        rec = {'t': round(now, 6), 'event': 'op', 'op': op, 'name': name, 'ok': ok,
               'latency': round(time.perf_counter() - t0, 7), 'server': server, 'bytes': nbytes}
        rec.update(extra)
        self.records.append(rec)

    async def write_batch(self, op, kind, server, names, addr):
        """One batched REGISTER/UNREGISTER message; return the names that failed."""
        t0 = time.perf_counter()
        try:
            reply = await self.ask(server, kind, addr, names)
            err = None if type(reply) is codec.Ack else reply.text
        except _FAILURES as exc:
            err = str(exc) or type(exc).__name__
        self.record(op, names[0], err is None, t0, server, files=len(names),
                    **({'error': err} if err else {}))
        return () if err is None else names

    async def write_one(self, op, kind, name, servers, addr):
        """One unbatched write of one name to all of its servers; return True if all acked."""
        t0 = time.perf_counter()
        if len(servers) == 1:       # no replicas: skip gather's task per operation
            try:
                results = [await self.ask(servers[0], kind, addr, (name,))]
            except _FAILURES as exc:
                results = [exc]
        else:
            results = await asyncio.gather(*(self.ask(s, kind, addr, (name,)) for s in servers),
                                           return_exceptions=True)
        errs = ['%s: %s' % (s, getattr(r, 'text', None) or r or type(r).__name__)
                for s, r in zip(servers, results) if type(r) is not codec.Ack]
        self.record(op, name, not errs, t0, servers[0],
                    **({'error': '; '.join(errs)} if errs else {}))
        return not errs

    async def search(self, name):
        """Look name up with failover; return (server, ok, holders, error)."""
        lookup = Lookup(name, self.core.candidates(name))
        while True:
            server = lookup.next_server()
            if server is None:
                return None, False, (), lookup.error()
            try:
                reply = await self.ask(server, codec.Search, name)
            except _FAILURES as exc:
                lookup.failed(server, str(exc) or type(exc).__name__)
                self.core.mark_down(server)
                continue
            self.core.mark_up(server)
            ok, holders, err = lookup.answered(server, reply)
            return server, ok, holders, err

    async def search_op(self, name):
        """One timed search; return True if holders were found."""
        t0 = time.perf_counter()
        server, ok, holders, err = await self.search(name)
        self.record('search', name, ok, t0, server, holders=len(holders),
                    **({'error': err} if err else {}))
        return ok

    async def _peer(self, addr, pool):
        """Return a live connection to a holder peer from pool."""
        conn = pool.get(addr)
        if conn is not None and not conn.transport.is_closing():
            return conn
        host, port = parse_addr(addr)
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: PeerConn(addr, self.timeout), host, port), self.timeout)
        pool[addr] = conn
        return conn

    async def download_op(self, name, downloads, pool):
        """Search name, fetch it from a holder (resuming from others), verify, rename."""
        t0 = time.perf_counter()
        bad = valid_name(name)
        if bad:                 # never write outside --downloads
            self.record('download', name, False, t0, None, error=bad)
            return False
        server, ok, holders, err = await self.search(name)
        if not ok:
            self.record('download', name, False, t0, server, error=err)
            return False
        d = Download(name, holders)
        final = os.path.join(downloads, name)
        self._seq += 1
        tmp = os.path.join(downloads, '.%s.part.%d.%d' % (name, os.getpid(), self._seq))
        try:
            with open(tmp, 'wb') as f:
                while True:
                    try:
                        conn = await self._peer(d.holder, pool)
                        self.messages_sent += 1
                        await conn.fetch(d, f)
                        break
                    except LocalWriteError as exc:
                        raise DownloadError(str(exc)) from None
                    except (DownloadError,) + _FAILURES as exc:
                        bad = pool.pop(d.holder, None)
                        if bad is not None:
                            bad.transport.abort()
                        if d.holder_failed(str(exc) or type(exc).__name__) is None:
                            raise DownloadError(d.error()) from None
                f.flush()
                if os.fstat(f.fileno()).st_size != d.size:
                    raise DownloadError('%r: wrote %d bytes, expected %d'
                                        % (name, os.fstat(f.fileno()).st_size, d.size))
            os.replace(tmp, final)
        except (DownloadError, OSError) as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            self.record('download', name, False, t0, server, d.received, error=str(exc))
            return False
        self.record('download', name, True, t0, server, d.size, holder=d.holder,
                    **({'resumes': d.resumes} if d.resumes else {}))
        return True


async def _bounded(items, fn, limit):
    """Run fn(item) for every item with at most limit at once; return the results in order."""
    if limit <= 1:
        return [await fn(item) for item in items]
    sem = asyncio.Semaphore(limit)

    async def one(item):
        async with sem:
            return await fn(item)
    return await asyncio.gather(*(one(i) for i in items))


async def run_op(client, args):
    """Run the requested operation; return (files, files ok, bytes)."""
    w = client.window
    if args.op in ('register', 'unregister'):
        kind = codec.Register if args.op == 'register' else codec.Unregister
        names = args.names_list
        if args.batch:
            plan = client.core.batches(names)
            failed = await _bounded(plan, lambda p: client.write_batch(
                args.op, kind, p[0], p[1], args.advertise), len(plan) if w > 1 else 1)
            bad = set(n for group in failed for n in group)
            return len(names), len(names) - len(bad), 0
        plan = client.core.unbatched(names)
        oks = await _bounded(plan, lambda p: client.write_one(
            args.op, kind, p[0], p[1], args.advertise), w * len(client.addrs) if w > 1 else 1)
        return len(names), sum(oks), 0
    if args.op == 'search':
        oks = await _bounded(args.names_list, client.search_op,
                             w * len(client.addrs) if w > 1 else 1)
        return len(oks), sum(oks), 0
    # W connection pools (holder address -> connection), one per download in flight.
    pools = [{} for _ in range(w)]
    free = asyncio.Queue()
    for pool in pools:
        free.put_nowait(pool)

    async def one(name):
        pool = await free.get()
        try:
            return await client.download_op(name, args.downloads, pool)
        finally:
            free.put_nowait(pool)
    oks = await _bounded(args.names_list, one, w)
    nbytes = sum(r['bytes'] for r in client.records if r['ok'])
    for pool in pools:
        for conn in pool.values():
            conn.transport.close()
    return len(oks), sum(oks), nbytes


def parse_args(argv):
    """Parse the client command line."""
    p = argparse.ArgumentParser(prog='python -m nodes.dht.client',
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
    args = p.parse_args(argv)
    try:
        args.servers = parse_servers(args.servers)
        if args.advertise:
            parse_addr(args.advertise)
    except ValueError as exc:
        p.error(str(exc))
    if args.window < 1 or args.timeout <= 0 or args.replicas < 0:
        p.error('--window >= 1, --timeout > 0 and --replicas >= 0 please')
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
            os.makedirs(args.downloads, exist_ok=True)
    return args


async def _main(args, log):
    """Connect, optionally wait at the barrier, run the operation, log; return exit status."""
    client = Client(args.servers, args.replicas, args.window, args.timeout, args.vnodes)
    await client.connect_all()
    if args.barrier:
        await wait_go(log)
    t0 = time.perf_counter()
    count = None
    try:
        count, ok, nbytes = await run_op(client, args)
    finally:
        elapsed = time.perf_counter() - t0
        interrupted = count is None
        if interrupted:       # SIGTERM or an error: count what finished
            count = sum(r.get('files', 1) for r in client.records)
            ok = sum(r.get('files', 1) for r in client.records if r['ok'])
            nbytes = sum(r['bytes'] for r in client.records if r['ok'])
        for rec in client.records:
            log.write(**rec)
        log.write('summary', flush=True, name=args.name, op=args.op, batch=args.batch,
                  window=client.window, replicas=client.core.replicas, count=count, ok=ok,
                  failed=count - ok, elapsed=round(elapsed, 6), bytes=nbytes,
                  messages_sent=client.messages_sent, servers=len(args.servers),
                  down=sorted(client.core.down), **({'interrupted': True} if interrupted else {}))
        for conn in client.conns.values():
            if conn.transport is not None:
                conn.transport.close()
    if ok != count:
        error('%s: %d of %d %s operations failed' % (args.name, count - ok, count, args.op))
        return 1
    return 0


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
        error('%s: interrupted' % args.name)
        return 1
    except RuntimeError as exc:
        error('%s: %s' % (args.name, exc))
        return 1


if __name__ == '__main__':
    sys.exit(main())
