"""A hand-made kvload results folder for the analysis tests (no emulator, no root).

``make_run(path)`` writes what a real run leaves (``topologies/kvload.py`` and
``workloads/kv_points.py``): the manifest, ``logs/points.jsonl``, each client's phase
lines and raw latency file (little-endian uint32 in 100 ns ticks, set then get then
del), ``redis-benchmark --csv`` logs for the bench and fsync points, and CPU samples.
It is small enough to work every figure out by hand: 2 servers x the local layout x 1..2
clients x 20 requests. The helpers let a test rewrite one client or break one input on
purpose, so every test starts from the same folder.

Timeline: load point ``n`` runs its set, get and del phases over
``T0 + 10 n`` .. ``+1``, ``+2``, ``+3`` s; bench and fsync points follow, 10 s apart.
"""

import json
import struct

REQUESTS = 20
T0 = 1000.0
INTERVAL = 0.5
OPS = ('set', 'get', 'del')
HOSTS = {'c1': '10.0.0.1', 'c2': '10.0.0.2', 'srv': '10.0.0.3'}

# (server, clients) of the load points, in point order
LOADS = (('ours', 1), ('redis', 1), ('ours', 2), ('redis', 2))
# latencies in ms per (point, client): {op: [ms, ...]} (REQUESTS each)
SLOW = 5.0
LATENCIES = {
    (0, 1): {'set': [0.12] * 20, 'get': [0.10] * 20, 'del': [0.09] * 20},
    (1, 1): {'set': [0.10] * 20, 'get': [0.08] * 20, 'del': [0.08] * 20},
    # point 2: c1 10 fast + 10 medium, c2 19 slow + one very slow SET
    (2, 1): {'set': [0.1] * 10 + [0.2] * 10, 'get': [0.05] * 20, 'del': [0.05] * 20},
    (2, 2): {'set': [0.5] * 19 + [SLOW], 'get': [0.05] * 20, 'del': [0.05] * 20},
    (3, 1): {'set': [0.1] * 20, 'get': [0.05] * 20, 'del': [0.05] * 20},
    (3, 2): {'set': [0.1] * 20, 'get': [0.05] * 20, 'del': [0.05] * 20},
}
# total ms per (point, client, op), as the client's phase line reports it
TOTALS = {
    (0, 1): (10.0, 8.0, 6.0), (1, 1): (8.0, 6.0, 4.0),
    (2, 1): (12.0, 8.0, 4.0), (2, 2): (16.0, 10.0, 6.0),
    (3, 1): (9.0, 7.0, 5.0), (3, 2): (11.0, 9.0, 7.0),
}
# redis-benchmark requests/s: (kind, bench or policy, server) -> {test: rps}
BENCH = {
    ('bench', 'c1', 'ours'): {'SET': 9000.0, 'GET': 10000.0},
    ('bench', 'c1', 'redis'): {'SET': 12000.0, 'GET': 14000.0},
    ('bench', 'c50', 'ours'): {'SET': 40000.0, 'GET': 39992.0},
    ('bench', 'c50', 'redis'): {'SET': 80000.0, 'GET': 80000.0},
    ('bench', 'c50p16', 'ours'): {'SET': 100000.0, 'GET': 150000.0},
    ('bench', 'c50p16', 'redis'): {'SET': 400000.0, 'GET': 500000.0},
    ('fsync', 'always', 'ours'): {'SET': 2000.0},
    ('fsync', 'always', 'redis'): {'SET': 5000.0},
    ('fsync', 'everysec', 'ours'): {'SET': 8000.0},
    ('fsync', 'everysec', 'redis'): {'SET': 16000.0},
    ('fsync', 'no', 'ours'): {'SET': 10000.0},
    ('fsync', 'no', 'redis'): {'SET': 20000.0},
}
BENCH_P50_MS = 0.071


def write(path, records):
    """Write records as JSON lines."""
    with open(path, 'w') as f:
        for r in records:
            f.write(json.dumps(r) + '\n')


def name(point, client):
    """Return a client's log name, as workloads/kv_points.py makes it."""
    return 'p%03d-kvload-c%d' % (point, client)


def load_start(point):
    """Return the time a load point's first phase starts."""
    return T0 + 10 * point


def client_log(logs, point, client, latencies=None, totals=None, ok=None, wrong=0,
               errors=None, phases=OPS):
    """Write a client's phase lines and .lat file.

    latencies {op: [ms]} and totals (set, get, del ms) default to the folder's; ok,
    wrong and errors ({'ERR': n}) apply to the SET phase only."""
    latencies = latencies or LATENCIES[(point, client)]
    totals = totals or TOTALS[(point, client)]
    t = load_start(point)
    records = [{'t': t - 0.1, 'event': 'ready', 'clients': 1, 'client_base': client - 1,
                'host': HOSTS['srv'], 'port': 6379, 'pipeline': 1, 'loop': 'asyncio'}]
    ticks, offset = [], 0
    for i, op in enumerate(OPS):
        lat = latencies[op]
        if op in phases:
            errs = dict(errors or {}) if op == 'set' else {}
            good = (ok if ok is not None else len(lat) - wrong - sum(errs.values())) \
                if op == 'set' else len(lat)
            records.append({'t': t + i + 1, 'event': 'phase', 'client': client - 1, 'op': op,
                            'requests': REQUESTS, 'done': REQUESTS, 'ok': good,
                            'errors': errs, 'wrong': wrong if op == 'set' else 0,
                            'start': t + i, 'end': t + i + 1, 'total_ms': totals[i],
                            'lat_offset': offset, 'lat_count': len(lat)})
        ticks += [round(ms * 10000) for ms in lat]       # 100 ns ticks
        offset += len(lat)
    write(logs / (name(point, client) + '.jsonl'), records)
    with open(logs / (name(point, client) + '.lat'), 'wb') as f:
        f.write(struct.pack('<%dI' % len(ticks), *ticks))


def bench_csv(logs, point, rps):
    """Write a redis-benchmark --csv log: rps is {test: requests/s}."""
    lines = ['"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",'
             '"p95_latency_ms","p99_latency_ms","max_latency_ms"']
    for test, r in rps.items():
        lines.append('"%s","%.2f","0.065","0.016","%.3f","0.103","0.127","0.831"' % (
            test, r, BENCH_P50_MS))
    (logs / ('p%03d-bench.csv' % point)).write_text('\n'.join(lines) + '\n')


def manifest(**fields):
    """Return the folder's manifest with fields replaced."""
    m = {'experiment': 'kvload', 'status': 'ok', 'error': None, 'hosts': HOSTS,
         'params': {'scale': 'smoke', 'repeat': 1, 'requests': REQUESTS, 'clients': 2,
                    'pipeline': 1, 'servers': 'ours,redis', 'layouts': 'local',
                    'lan_bw': 1000.0, 'lan_delay': '0.05ms', 'appendfsync': 'everysec',
                    'cache': 'lru', 'cache_size': 100, 'storage': 'memory',
                    'bench_requests': 5000, 'fsync_requests': 1000, 'switch': 'lxbr',
                    'timeout': 10.0, 'workdir': '/tmp/repronet-kvload', 'seed': 1},
         'cpu': {'interval': INTERVAL, 'mean': 0.3, 'saturated': False, 'threshold': 0.65,
                 'max_over_fraction': 0.05},
         'provenance': {'host': {'cpus': 2, 'cpus_usable': 2, 'memory_bytes': 8 * 2 ** 30,
                                 'cpu_model': 'Test CPU'}}}
    m.update(fields)
    return m


def cpu_log(logs, busy_points=()):
    """Write CPU samples every INTERVAL s over the whole run: 0.9 busy inside the load
    points busy_points (start .. end), 0.2 elsewhere."""
    records = []
    for i in range(int(200 / INTERVAL) + 1):
        t = T0 - 5 + INTERVAL * i
        hot = any(load_start(p) < t <= load_start(p) + 3 for p in busy_points)
        records.append({'t': t, 'busy': 0.9 if hot else 0.2, 'steal': 0.0,
                        'cores': [0.9, 0.9] if hot else [0.2, 0.2], 'phase': None})
    write(logs / 'cpu.jsonl', records)


def make_run(path, busy_points=(3,)):
    """Write the folder under path: four load points, six bench and six fsync points,
    CPU samples that are 0.9 busy during busy_points; return path."""
    logs = path / 'logs'
    logs.mkdir()
    (path / 'manifest.json').write_text(json.dumps(manifest()))
    records = []
    for n, (server, clients) in enumerate(LOADS):
        for c in range(1, clients + 1):
            client_log(logs, n, c)
        p = {'point': n, 'repetition': 0, 'kind': 'load', 'server': server,
             'layout': 'local', 'clients': clients, 'seed': n}
        records.append({'t': load_start(n) + 3.2, 'event': 'point', 'point': p,
                        'started': load_start(n) - 1, 'elapsed': 4.2,
                        'result': {'failed_clients': [], 'dbsize_after': 0,
                                   'server_alive': True}})
    for (kind, what, server), rps in BENCH.items():
        n = len(records)
        p = {'point': n, 'repetition': 0, 'kind': kind, 'server': server, 'seed': n,
             'bench' if kind == 'bench' else 'appendfsync': what}
        bench_csv(logs, n, rps)
        records.append({'t': T0 + 10 * n + 2, 'event': 'point', 'point': p,
                        'started': T0 + 10 * n, 'elapsed': 2.0,
                        'result': {'benchmark_status': 0, 'server_alive': True}})
    write(logs / 'points.jsonl', records)
    cpu_log(logs, busy_points)
    return path


def point_of(path, kind, server, what):
    """Return the number of the bench/fsync point of (kind, server, bench or policy)."""
    for line in (path / 'logs' / 'points.jsonl').read_text().splitlines():
        p = json.loads(line)['point']
        if p['kind'] == kind and p['server'] == server and \
                p.get('bench', p.get('appendfsync')) == what:
            return p['point']
    raise KeyError((kind, server, what))
