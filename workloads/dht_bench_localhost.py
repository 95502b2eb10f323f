"""Localhost benchmark of the DHT system against the seed's per-operation times.

    /usr/bin/python3 -m workloads.dht_bench_localhost [--files 10000] [--downloads 1000]
        [--servers 8] [--big-mb 1024] [--clients 2,4,8] [--keep DIR]

Starts real server and peer processes on 127.0.0.1 (ephemeral ports), writes a shared
folder of --files files (1 KB-5 MB, about 4 KB on average, like the seed's 40 MB per 10K
files), and runs real client processes: register batched/unbatched (also with 1 replica),
search, download, in the seed's one-request-at-a-time mode (--window 1) and pipelined
(--window 8), for 8 servers and for one centralized server. Each figure is the client's own
timed part (`summary.elapsed`, connections already open) divided by the operations, as the
seed computes "Avg. Time per Operation". Loopback has no link delay, so these numbers are
the software cost per operation; the Mininet experiment (topologies/dht8.py) adds the links.
With --clients, each count of clients runs at once behind the `--barrier`/`go` start line
(fresh servers per count) and ms per operation is the clients' mean timed part divided by
the operations per client, the seed's "Avg. Time per Operation" for concurrent clients.
"""

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

from nodes.dht.common import UsageParser

SEED_MS = {'register batched': 0.185, 'register batched R=1': 0.210,
           'register unbatched': 1.278, 'search': 0.594, 'download': 31.23}
# The seed's ms per operation with 1, 2, 4 and 8 clients running at once (8 servers).
SEED_CLIENTS = {'register batched': (0.185, 0.202, 0.278, 0.394),
                'register unbatched': (1.278, 1.323, 1.416, 1.578),
                'search': (0.594, 0.672, 0.815, 0.974),
                'download': (31.23, 31.81, 32.23, 33.44)}


def make_share(folder, n, rng):
    """Write n files of 1 KB-5 MB (mostly small, mean about 4 KB); return total bytes."""
    os.makedirs(folder, exist_ok=True)
    total = 0
    for i in range(n):
        r = rng.random()
        if i == n // 2:
            size = 5 * 1024 * 1024
        elif r < 0.001:
            size = rng.randint(100 * 1024, 1024 * 1024)
        else:
            size = rng.randint(1024, 5 * 1024)
        with open(os.path.join(folder, 'file%05d.dat' % i), 'wb') as f:
            f.write(rng.randbytes(size))
        total += size
    return total


class Node:
    """A server or peer process started for the benchmark."""

    def __init__(self, argv):
        self.p = subprocess.Popen([sys.executable, '-m'] + argv, stdout=subprocess.PIPE,
                                  text=True)
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError('%s did not start' % argv[:3])
        self.listen = json.loads(line)['listen']

    def stop(self):
        """SIGTERM and wait."""
        self.p.terminate()
        self.p.communicate(timeout=20)


def start_servers(n):
    """Start n index servers; return (servers argument, nodes)."""
    names = ['s%d' % i for i in range(1, n + 1)]
    placeholder = ','.join('%s=127.0.0.1:0' % s for s in names)
    nodes = [Node(['nodes.dht.server', '--name', s, '--listen', '127.0.0.1:0',
                   '--servers', placeholder]) for s in names]
    return ','.join('%s=%s' % (s, x.listen) for s, x in zip(names, nodes)), nodes


def client(servers, *args):
    """Run one client; return its summary record."""
    r = subprocess.run([sys.executable, '-m', 'nodes.dht.client', '--name', 'bench',
                        '--servers', servers] + [str(a) for a in args],
                       capture_output=True, text=True)
    summ = json.loads(r.stdout.splitlines()[-1])
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-2000:])
    return summ


def row(label, summ, seed=None):
    """Print one result line."""
    ms = 1000.0 * summ['elapsed'] / max(1, summ['count'])
    extra = ''
    if summ['bytes']:
        extra = '  %.1f MB/s' % (summ['bytes'] / summ['elapsed'] / 1e6)
    print('%-34s %7d ops %4d failed %8.3f s %9.4f ms/op %9s%s' % (
        label, summ['count'], summ['failed'], summ['elapsed'], ms,
        '%.3f' % seed if seed else '-', extra), flush=True)
    return ms


def run(args, work):
    """Run every measurement; return the number of failed operations."""
    rng = random.Random(1)
    share = os.path.join(work, 'share')
    total = make_share(share, args.files, rng)
    names = sorted(os.listdir(share))
    search_names = os.path.join(work, 'search.txt')
    with open(search_names, 'w') as f:
        f.write('\n'.join(names) + '\n')
    dl_names = os.path.join(work, 'download.txt')
    with open(dl_names, 'w') as f:
        f.write('\n'.join(rng.sample(names, min(args.downloads, len(names)))) + '\n')
    print('shared folder: %d files, %.1f MB (mean %.1f KB); python %s'
          % (len(names), total / 1e6, total / len(names) / 1e3, sys.version.split()[0]))
    print('%-34s %7s %12s %10s %15s %9s' % ('operation', '', '', 'elapsed', 'this', 'seed ms'))
    peer = Node(['nodes.dht.peer', '--name', 'p1', '--listen', '127.0.0.1:0', '--share', share])
    failed = 0
    try:
        for nserv in (args.servers, 1):
            servers, nodes = start_servers(nserv)
            tag = '%d servers' % nserv if nserv > 1 else 'centralized'
            reg = ['--share', share, '--advertise', peer.listen]
            try:
                plan = [
                    ('register batched', ['--op', 'register', '--batch'] + reg),
                    ('register unbatched', ['--op', 'register', '--no-batch'] + reg),
                    ('register unbatched W=8', ['--op', 'register', '--no-batch',
                                                '--window', 8] + reg),
                    ('search', ['--op', 'search', '--names', search_names]),
                    ('search W=8', ['--op', 'search', '--names', search_names, '--window', 8]),
                ]
                if nserv > 1:
                    plan += [('register batched R=1', ['--op', 'register', '--batch',
                                                       '--replicas', 1] + reg),
                             ('register unbatched R=1', ['--op', 'register', '--no-batch',
                                                         '--replicas', 1] + reg)]
                plan += [('download', ['--op', 'download', '--names', dl_names,
                                       '--downloads', os.path.join(work, 'dl')])]
                for label, argv in plan:
                    summ = client(servers, *argv)
                    failed += summ['failed']
                    row('%s, %s' % (label, tag), summ, SEED_MS.get(label))
                    if label == 'download':
                        shutil.rmtree(os.path.join(work, 'dl'))
                if nserv > 1 and args.big_mb:
                    failed += big_file(args, work, servers, peer)
            finally:
                for n in nodes:
                    n.stop()
        for count in args.clients:
            failed += concurrent(args, work, count, peer, search_names, dl_names)
    finally:
        peer.stop()
    return failed


def together(servers, argvs):
    """Run one client per argv, released at once by the barrier; return their summaries."""
    procs = [subprocess.Popen([sys.executable, '-m', 'nodes.dht.client', '--name', 'bench%d' % i,
                               '--servers', servers, '--barrier'] + [str(a) for a in argv],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for i, argv in enumerate(argvs)]
    for p in procs:
        if '"ready"' not in p.stdout.readline():
            raise RuntimeError('a client did not reach the barrier')
    for p in procs:
        p.stdin.write('go\n')
        p.stdin.flush()
    return [json.loads(p.communicate()[0].splitlines()[-1]) for p in procs]


def concurrent(args, work, count, peer, search_names, dl_names):
    """Run register/search/download with `count` clients at once; return failures."""
    share = os.path.join(work, 'share')
    servers, nodes = start_servers(args.servers)
    # Client 0 advertises the real peer; the others stand for peers that are not running,
    # and unregister again before the downloads so every holder found is the real one.
    addrs = [peer.listen] + ['127.0.0.1:%d' % (20000 + i) for i in range(1, count)]
    reg = [['--share', share, '--advertise', a] for a in addrs]
    failed = 0
    try:
        plan = [('register batched', [['--op', 'register', '--batch'] + r for r in reg]),
                ('register unbatched', [['--op', 'register', '--no-batch'] + r for r in reg]),
                ('search', [['--op', 'search', '--names', search_names]] * count),
                (None, [['--op', 'unregister'] + r for r in reg[1:]]),
                ('download', [['--op', 'download', '--names', dl_names, '--downloads',
                               os.path.join(work, 'dl%d' % i)] for i in range(count)])]
        for label, argvs in plan:
            if not argvs:
                continue
            summs = together(servers, argvs)
            failed += sum(x['failed'] for x in summs)
            if label is None:
                continue
            mean = {k: sum(x[k] for x in summs) / count for k in ('elapsed', 'count', 'bytes')}
            mean['failed'] = sum(x['failed'] for x in summs)
            seed = dict(zip((1, 2, 4, 8), SEED_CLIENTS[label])).get(count)
            row('%s, %d clients' % (label, count), mean, seed)
    finally:
        for n in nodes:
            n.stop()
        for i in range(count):
            shutil.rmtree(os.path.join(work, 'dl%d' % i), ignore_errors=True)
    return failed


def big_file(args, work, servers, peer):
    """Download one large file; print its goodput."""
    big = os.path.join(work, 'big')
    os.makedirs(big, exist_ok=True)
    with open(os.path.join(big, 'big.bin'), 'wb') as f:
        block = os.urandom(1 << 20)
        for _ in range(args.big_mb):
            f.write(block)
    bigpeer = Node(['nodes.dht.peer', '--name', 'p2', '--listen', '127.0.0.1:0', '--share', big])
    try:
        client(servers, '--op', 'register', '--share', big, '--advertise', bigpeer.listen)
        with open(os.path.join(work, 'big.txt'), 'w') as f:
            f.write('big.bin\n')
        summ = client(servers, '--op', 'download', '--names', os.path.join(work, 'big.txt'),
                      '--downloads', os.path.join(work, 'bigdl'), '--timeout', 30)
        row('download %d MB file' % args.big_mb, summ)
        print('  (%.0f Mbit/s goodput; loopback has no bottleneck link)'
              % (summ['bytes'] * 8 / summ['elapsed'] / 1e6))
    finally:
        bigpeer.stop()
        shutil.rmtree(big)
        shutil.rmtree(os.path.join(work, 'bigdl'), ignore_errors=True)
    return summ['failed']


def main(argv=None):
    """Entry point."""
    p = UsageParser('dht_bench_localhost', description=__doc__.split('\n')[0])
    p.add_argument('--files', type=int, default=10000)
    p.add_argument('--downloads', type=int, default=1000)
    p.add_argument('--servers', type=int, default=8)
    p.add_argument('--big-mb', type=int, default=1024, help='large-file size (0: skip)')
    p.add_argument('--clients', default='', help='comma-separated counts of concurrent '
                   'clients to run too, e.g. 1,2,4,8 (default: none)')
    p.add_argument('--keep', help='work in this folder and keep it')
    args = p.parse_args(argv)
    try:
        args.clients = [int(c) for c in args.clients.split(',') if c.strip()]
    except ValueError:
        p.error('--clients takes counts like 1,2,4,8')
    p.bounded(args, 'files', 1, 10_000_000)
    p.bounded(args, 'downloads', 1, 10_000_000)
    p.bounded(args, 'servers', 1, 1000)
    p.bounded(args, 'big_mb', 0, 1 << 20)
    if not all(1 <= c <= 1000 for c in args.clients):
        p.error('--clients counts must be between 1 and 1000')
    if args.keep and not os.path.isdir(os.path.dirname(os.path.abspath(args.keep))):
        p.error('--keep %s: folder %s does not exist' % (
            args.keep, os.path.dirname(os.path.abspath(args.keep))))
    work = args.keep or tempfile.mkdtemp(prefix='dht-bench-')
    try:
        os.makedirs(work, exist_ok=True)
    except OSError as exc:
        p.error('cannot make --keep %s: %s' % (work, exc.strerror or exc))
    try:
        failed = run(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print('failed operations: %d' % failed)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
