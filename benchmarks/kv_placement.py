"""How much of a sequential client's time per request is CPU placement, on loopback.

Seed 001 reported 0.021-0.029 ms per sequential put/get/delete on one machine; our kvload
run measured about three times that through emulated hosts. A sequential client pays one
round trip per request, and on loopback a round trip is mostly two wake-ups: the client's
send wakes the server, the reply wakes the client. Whether those wake-ups land on the CPU
that is already running (same CPU: no cross-CPU wake-up, no idle CPU to bring back) or on
another one changes the round trip more than either server does. So this script runs the
same client against Debian's ``redis-server`` and our ``nodes.kv.server`` three ways:

- ``unpinned``: the scheduler places both (they inherit this script's CPU set);
- ``same CPU``: client and server both on CPU 0 (``taskset -c 0`` for the client; the
  server's threads get ``sched_setaffinity`` right after it is ready);
- ``different CPUs``: client on CPU 0, server on CPU 1.

The client is ``workloads.kvload`` (one connection, sequential, ``--ops set,get,del``,
``--requests N`` per operation); against Redis also ``redis-benchmark -t get -c 1``. Each
placement gets a fresh server without persistence. Printed per run: ms per request
(a phase's total_ms / requests; for redis-benchmark 1000 / requests per second) and the
p50 in microseconds; then, per server and operation, the ratio same CPU / different CPUs.

No figure is asserted: the machine is shared and has two cores, so one run's table is what
to read, beside whatever else was running then.

    /usr/bin/python3 benchmarks/kv_placement.py [--requests 50000]
"""

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

from kv_vs_redis import REPO, Server

from repronet.usage import UsageParser

PLACEMENTS = (('unpinned', None, None), ('same CPU', 0, 0), ('different CPUs', 0, 1))
OPS = ('set', 'get', 'del')
RUN_TIMEOUT = 900       # seconds for one client run; 1e6 x 3 requests at 0.3 ms fit


def _pin(pid, cpu):
    """Put every thread of process pid on this one CPU."""
    for tid in os.listdir('/proc/%d/task' % pid):
        os.sched_setaffinity(int(tid), {cpu})


def _client(argv, cpu):
    """Run a client (under taskset when cpu is set) to the end; return its stdout."""
    if cpu is not None:
        argv = ['taskset', '-c', str(cpu)] + argv
    proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError('%s exited with %s: %s' % (' '.join(argv), proc.returncode,
                                                      err.strip() or 'no message'))
    return out


def _kvload(port, requests, cpu):
    """kvload's phases against port: {op: (ms per request, p50 us)}; every reply right."""
    out = _client([sys.executable, '-m', 'workloads.kvload', '--port', str(port),
                   '--requests', str(requests), '--ops', ','.join(OPS)], cpu)
    phases = [r for r in map(json.loads, out.splitlines()) if r['event'] == 'phase']
    return {p['op']: (p['total_ms'] / p['requests'], p['p50_us']) for p in phases}


def _redis_benchmark(port, requests, cpu):
    """redis-benchmark -t get -c 1: {'get': (ms per request, p50 us)}."""
    out = _client(['redis-benchmark', '-p', str(port), '-t', 'get', '-n', str(requests),
                   '-c', '1', '--csv'], cpu)
    (row,) = csv.DictReader(io.StringIO(out))
    return {'get': (1000 / float(row['rps']), 1000 * float(row['p50_latency_ms']))}


def _placement(kind, requests, client_cpu, server_cpu, workdir):
    """Start a fresh server, pin it, run the clients; return {tool: {op: figures}}."""
    server = Server(kind, workdir)
    try:
        if server_cpu is not None:
            _pin(server.proc.pid, server_cpu)
        got = {'kvload': _kvload(server.port, requests, client_cpu)}
        if kind == 'redis':
            got['redis-benchmark'] = _redis_benchmark(server.port, requests, client_cpu)
        return got
    finally:
        server.stop()


def measure(requests, workdir):
    """Run every server under every placement; print the table and the ratios."""
    print('one sequential client on loopback, --requests %d per op; this process may use '
          'CPUs %s' % (requests, sorted(os.sched_getaffinity(0))))
    print('%-6s %-16s %-15s %-4s %10s %8s' % ('server', 'tool', 'placement', 'op',
                                              'ms/request', 'p50 us'))
    table = {}
    for kind in ('ours', 'redis'):
        for placement, client_cpu, server_cpu in PLACEMENTS:
            got = _placement(kind, requests, client_cpu, server_cpu, workdir)
            for tool, ops in got.items():
                for op, (ms, p50) in ops.items():
                    table[kind, tool, placement, op] = ms, p50
                    print('%-6s %-16s %-15s %-4s %10.4f %8.1f' % (kind, tool, placement, op,
                                                                  ms, p50))
            sys.stdout.flush()
    print('\nsame CPU / different CPUs')
    print('%-6s %-16s %-4s %10s %8s' % ('server', 'tool', 'op', 'ms/request', 'p50'))
    for (kind, tool, placement, op), (ms, p50) in table.items():
        if placement == 'same CPU':
            other_ms, other_p50 = table[kind, tool, 'different CPUs', op]
            print('%-6s %-16s %-4s %10.2f %8.2f' % (kind, tool, op, ms / other_ms,
                                                    p50 / other_p50))


def parse_args(argv):
    """Parse and check the command line before anything starts."""
    p = UsageParser(tool='kv_placement', description=__doc__.split('\n')[0])
    p.add_argument('--requests', type=int, default=50_000, help='per operation (kvload -n)')
    args = p.parse_args(argv)
    if not 1000 <= args.requests <= 1_000_000:
        p.error('--requests must be between 1000 and 1000000')
    missing = [t for t in ('redis-server', 'redis-benchmark', 'taskset') if not shutil.which(t)]
    if missing:
        p.error('%s not found (Debian packages redis-server, redis-tools, util-linux)'
                % ' and '.join(missing))
    if not {0, 1} <= os.sched_getaffinity(0):
        p.error('CPUs 0 and 1 must both be allowed to this process (taskset or cgroup '
                'limits it to %s)' % sorted(os.sched_getaffinity(0)))
    return args


def main(argv=None):
    """Measure, or say in one sentence why not."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix='kv-placement-') as workdir:
        try:
            measure(args.requests, workdir)
        except KeyboardInterrupt:
            print('interrupted', file=sys.stderr)
            return 130
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            print('kv_placement: %s' % exc, file=sys.stderr)
            return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
