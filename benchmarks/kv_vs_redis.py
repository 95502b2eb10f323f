"""Throughput of the KV node beside Debian's redis-server, under redis-benchmark, on loopback.

redis-benchmark (a load generator nobody here wrote) runs ``-t set,get -n N`` against each
server in three shapes: one connection; 50 connections; 50 connections pipelining 16
requests each. The two servers run without persistence for these, one after the other on
the same machine, and the script prints each throughput, the p50 latency and the ratio
ours/Redis. Then the price of durability: ``-t set -c 50`` against both servers logging
with each ``appendfsync`` policy (always, everysec, no). Last, with ``--profile PATH``, our
server runs the 50-connection SET/GET load once more under cProfile
(``nodes.kv.server --profile``) and the functions with the most own time are printed.

No figure is asserted: the machine is shared and has two cores, one of them taken by
redis-benchmark itself, so a ratio measured in one run is what to read.

    /usr/bin/python3 benchmarks/kv_vs_redis.py [--requests 100000] [--profile /tmp/kv.prof]
"""

import csv
import io
import json
import os
import pstats
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from repronet.usage import UsageParser  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = (('c1', ['-c', '1']), ('c50', ['-c', '50']), ('c50 P16', ['-c', '50', '-P', '16']))
POLICIES = ('always', 'everysec', 'no')
READY_TIMEOUT = 60


def _read_until(proc, test, timeout=READY_TIMEOUT):
    """Read proc's stdout lines until test(line) is true; return that line."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], end - time.monotonic())
        if not ready:
            break
        line = proc.stdout.readline().decode(errors='replace')
        if not line:
            break
        if test(line):
            return line
    raise RuntimeError('%s did not become ready: %s' % (
        proc.args[0], proc.stderr.read().decode(errors='replace') if proc.poll() is not None
        else 'no ready line in %d s' % timeout))


def _free_port():
    """A port the OS has just handed out (redis-server cannot be asked for port 0)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class Server:
    """One server process (ours or Redis) on loopback, stopped by its PID."""

    def __init__(self, kind, workdir, appendfsync=None, profile=None):
        self.kind = kind
        aof = os.path.join(workdir, '%s-%s.aof' % (kind, appendfsync)) if appendfsync else None
        if aof and os.path.exists(aof):
            os.remove(aof)
        if kind == 'ours':
            argv = [sys.executable, '-m', 'nodes.kv.server', '--port', '0']
            if aof:
                argv += ['--log', aof, '--appendfsync', appendfsync]
            if profile:
                argv += ['--profile', profile]
        else:
            self.port = _free_port()
            argv = ['redis-server', '--port', str(self.port), '--bind', '127.0.0.1',
                    '--save', '', '--daemonize', 'no', '--logfile', '', '--dir', workdir,
                    '--appendonly', 'yes' if aof else 'no']
            if aof:
                argv += ['--appendfilename', os.path.basename(aof),
                         '--appendfsync', appendfsync]
        # Unbuffered: a buffered readline may pull the ready line into its buffer, where
        # select() cannot see it.
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, bufsize=0)
        try:
            if kind == 'ours':
                line = _read_until(self.proc, lambda s: '"event":"ready"' in s)
                ready = json.loads(line)
                self.port, self.loop = ready['port'], ready['loop']
            else:
                _read_until(self.proc, lambda s: 'Ready to accept connections' in s)
                self.loop = 'ae'
        except BaseException:
            self.stop()
            raise

    def stop(self):
        """SIGTERM, then SIGKILL if it does not exit within 30 s; reap it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


def bench(port, tests, requests, shape):
    """Run redis-benchmark; return {test: (requests/s, p50 ms)}."""
    argv = ['redis-benchmark', '-p', str(port), '-t', tests, '-n', str(requests),
            '--csv'] + shape
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError('%s failed: %s' % (' '.join(argv), r.stderr.strip()))
    rows = csv.DictReader(io.StringIO(r.stdout))
    return {row['test']: (float(row['rps']), float(row['p50_latency_ms'])) for row in rows}


def compare(requests, workdir):
    """Print the three shapes against both servers, without persistence."""
    print('redis-benchmark -t set,get -n %d (no persistence)' % requests)
    print('%-8s %-4s %12s %9s %12s %9s %7s' % ('shape', 'test', 'ours req/s', 'p50 ms',
                                               'Redis req/s', 'p50 ms', 'ratio'))
    for name, shape in SHAPES:
        got = {}
        for kind in ('ours', 'redis'):
            server = Server(kind, workdir)
            try:
                got[kind] = bench(server.port, 'set,get', requests, shape)
            finally:
                server.stop()
        for test in ('SET', 'GET'):
            (ours, ours_p50), (theirs, theirs_p50) = got['ours'][test], got['redis'][test]
            print('%-8s %-4s %12.0f %9.3f %12.0f %9.3f %7.2f' % (
                name, test, ours, ours_p50, theirs, theirs_p50, ours / theirs))
        sys.stdout.flush()


def fsync_costs(requests, workdir):
    """Print SET throughput with 50 connections under each appendfsync policy."""
    print('\nredis-benchmark -t set -c 50 -n %d, append-only file in %s' % (requests, workdir))
    print('%-9s %12s %12s %7s' % ('policy', 'ours req/s', 'Redis req/s', 'ratio'))
    for policy in POLICIES:
        got = {}
        for kind in ('ours', 'redis'):
            server = Server(kind, workdir, appendfsync=policy)
            try:
                got[kind] = bench(server.port, 'set', requests, ['-c', '50'])['SET'][0]
            finally:
                server.stop()
        print('%-9s %12.0f %12.0f %7.2f' % (policy, got['ours'], got['redis'],
                                             got['ours'] / got['redis']))
        sys.stdout.flush()


def profile(requests, workdir, path, top):
    """Run -c 50 SET/GET against our server under cProfile; print the top functions."""
    server = Server('ours', workdir, profile=path)
    try:
        rates = bench(server.port, 'set,get', requests, ['-c', '50'])
    finally:
        server.stop()
    print('\ncProfile of our server under -t set,get -c 50 -n %d (%s): %s' % (
        requests, path, ', '.join('%s %.0f req/s' % (t, r[0]) for t, r in rates.items())))
    stats = pstats.Stats(path, stream=sys.stdout)
    stats.sort_stats('tottime').print_stats(top)


def parse_args(argv):
    """Parse and check the command line."""
    p = UsageParser(tool='kv_vs_redis.py', description=__doc__.split('\n')[0])
    p.add_argument('--requests', type=int, default=100_000, help='-n of redis-benchmark')
    p.add_argument('--profile', metavar='PATH', help='also profile our server, stats here')
    p.add_argument('--top', type=int, default=20, help='functions of the profile printed')
    p.add_argument('--skip', choices=('compare', 'fsync'), action='append', default=[],
                   help='leave out a part (repeatable)')
    args = p.parse_args(argv)
    if not 1000 <= args.requests <= 10_000_000:
        p.error('--requests must be within 1000..10000000')
    if args.top < 1:
        p.error('--top must be at least 1')
    if args.profile and not os.path.isdir(os.path.dirname(os.path.abspath(args.profile))):
        p.error('--profile %s: its folder does not exist' % args.profile)
    missing = [t for t in ('redis-server', 'redis-benchmark') if not shutil.which(t)]
    if missing:
        p.error('%s not found (Debian package redis-server / redis-tools)'
                % ' and '.join(missing))
    return args


def main(argv=None):
    """Run the parts asked for."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix='kv-bench-') as workdir:
        try:
            if 'compare' not in args.skip:
                compare(args.requests, workdir)
            if 'fsync' not in args.skip:
                fsync_costs(args.requests, workdir)
            if args.profile:
                profile(args.requests, workdir, args.profile, args.top)
        except KeyboardInterrupt:
            print('interrupted', file=sys.stderr)
            return 130
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
