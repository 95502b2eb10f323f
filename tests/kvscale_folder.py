"""A hand-made kvscale results folder for the analysis tests (no emulator, no root).

``make_run(path)`` writes what a real run leaves (``topologies/kvscale.py`` and
``workloads/kvscale_points.py``; formats copied from a smoke run): the manifest with
``server_classes`` and ``class_cores``, ``logs/points.jsonl``, per point the mix
processes' logs (``pNNN-mix-gK.jsonl``: a ready and a summary line) with their raw
latency files (``.get.u32``/``.set.u32``: little-endian uint32 in 100 ns ticks), the
``pNNN-info.jsonl`` of ``kvcluster_admin info``, ``ring.jsonl`` and CPU samples.

It is small enough to work every figure out by hand. The latency files hold a handful
of requests each while the summaries count more: the analysis takes percentiles from
the files and throughput from the summaries' ``ok`` counts, so each figure follows from
its own constants below. The helpers rewrite one input, so every test starts from the
same folder and breaks only what it is about.

Timeline: point ``n``'s timed mix runs over ``T0 + 10 n`` .. ``+ SPAN`` s.
"""

import json
import struct

T0 = 2000.0
SPAN = 2.0
INTERVAL = 0.5
VNODES = 1024
CORES = {'fast': 0.25, 'slow': 0.0625}
HOSTS = dict([('g1', '10.0.0.1'), ('g2', '10.0.0.2')] +
             [('h%d' % i, '10.0.0.%d' % (2 + i)) for i in range(1, 11)] +
             [('m%d' % i, '10.0.0.%d' % (12 + i)) for i in range(1, 11)])
# every third server of the mixed class is slow, from the first (s1, s4, s7, s10)
CLASSES = {'homogeneous': {'s%d' % i: 'fast' for i in range(1, 11)},
           'mixed': {'s%d' % i: 'slow' if i % 3 == 1 else 'fast' for i in range(1, 11)}}

LFU = {'cache': 'lfu', 'cache_size': 100, 'vnodes': VNODES, 'repetition': 0}
HOMO = dict(LFU, kind='scale', server='ours', clients=10, **{'class': 'homogeneous'})
CACHE = dict(HOMO, kind='cache', servers=2, cache_size=10)
POINTS = (
    dict(HOMO, servers=1),                                                      # 0
    dict(HOMO, servers=2),                                                      # 1
    dict(HOMO, servers=10),                                                     # 2
    dict(LFU, kind='scale', server='redis', servers=2, clients=1, **{'class': 'mixed'}),
    dict(LFU, kind='skew', server='ours', servers=10, clients=10, vnodes=1,     # 4
         **{'class': 'mixed'}),
    dict(CACHE, cache='fifo'), dict(CACHE, cache='lru'), dict(CACHE, cache='lfu'),  # 5-7
    dict(HOMO, servers=2, repetition=1),                        # 8: point 1 repeated
)

# (GET ok, SET ok) of each load generator's summary; default (800, 200)
OK = {1: (1440, 360), 2: (1640, 410), 8: (1600, 400)}
# requests per server of one generator: (point, generator) -> {member: (get, set)}
PER_SERVER = {(1, 1): {'s1': (1000, 250), 's2': (440, 110)},
              (1, 2): {'s1': (900, 200), 's2': (540, 160)},
              (3, 1): {'s1': (500, 100), 's2': (300, 100)}}
MOVED = {(1, 2): 3}
# latencies in ms: (point, generator) -> {op: [ms]}; default 10 GETs of 1 ms, 2 SETs of 2 ms
LATENCIES = {(1, 1): {'get': [1.0] * 10, 'set': [2.0] * 3},
             (1, 2): {'get': [3.0] * 9 + [20.0], 'set': [4.0] * 2},
             (8, 1): {'get': [5.0] * 5, 'set': [2.0]},
             (8, 2): {'get': [5.0] * 5, 'set': [6.0]}}
# keys per server after the mix (DBSIZE), s1 first
DBSIZE = {0: [100], 1: [55, 45], 8: [55, 45], 2: [11] + [10] * 8 + [9], 3: [60, 40],
          4: [30, 5, 5, 20, 5, 5, 10, 5, 5, 10], 5: [55, 45], 6: [55, 45], 7: [55, 45]}
# cache (hits, misses) per server of our points; default (50, 50) each
HITS = {1: [(30, 10), (5, 15)], 8: [(30, 10), (5, 15)],
        5: [(15, 35), (5, 45)], 6: [(20, 30), (10, 40)], 7: [(25, 25), (15, 35)]}
# each server's CPU seconds over the mix; default 0.1 s each
SERVER_CPU = {3: {'s1': 0.1125, 's2': 0.3}}


def write(path, records):
    """Write records as JSON lines."""
    with open(path, 'w') as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True) + '\n')


def point(n):
    """Return point n as points.jsonl records it."""
    return dict(POINTS[n], point=n, seed=100 + n)


def mix_start(n):
    """Return the time point n's timed mix starts."""
    return T0 + 10 * n


def hosts(n):
    """Return point n's server hosts, s1 first (h<i> or m<i> by class)."""
    p = POINTS[n]
    prefix = 'h' if p['class'] == 'homogeneous' else 'm'
    return ['%s%d' % (prefix, i) for i in range(1, p['servers'] + 1)]


def members(n):
    """Return {member: address} of point n, as the point's result records it."""
    return {'s%d' % i: '%s:6379' % HOSTS[h] for i, h in enumerate(hosts(n), 1)}


def generators(n):
    """Return the load generators of point n (g1, and g2 when it has two clients or more)."""
    return [1, 2][:min(2, POINTS[n]['clients'])]


def name(n, gen):
    """Return a mix process's log name, as workloads/kvscale_points.py makes it."""
    return 'p%03d-mix-g%d' % (n, gen)


def mix_log(logs, n, gen, summary=True, ok=None, miss=0, wrong=0, errors=None):
    """Write one generator's mix log and latency files; miss, wrong and errors
    ({'ERR': k}) go to its GET counts. Without summary: the ready line alone."""
    get_ok, set_ok = ok or OK.get(n, (800, 200))
    address = members(n)
    per = PER_SERVER.get((n, gen), {'s1': (get_ok, set_ok)})
    records = [{'t': mix_start(n) - 0.1, 'event': 'ready', 'phase': 'mix',
                'mode': 'cluster', 'servers': sorted(address.values())}]
    ops = {'get': {'ok': get_ok, 'miss': miss, 'wrong': wrong, 'errors': errors or {}},
           'set': {'ok': set_ok, 'miss': 0, 'wrong': 0, 'errors': {}}}
    if summary:
        records.append({'t': mix_start(n) + SPAN - 0.1, 'event': 'summary', 'phase': 'mix',
                        'ops': ops, 'moved': MOVED.get((n, gen), 0),
                        'per_server': {address[m]: {'get': g, 'set': s}
                                       for m, (g, s) in per.items()},
                        'clients_failed': 0, 'duration_s': SPAN})
    write(logs / (name(n, gen) + '.jsonl'), records)
    lat = LATENCIES.get((n, gen), {'get': [1.0] * 10, 'set': [2.0] * 2})
    for op in ('get', 'set'):
        ticks = [round(ms * 10000) for ms in lat[op]]
        (logs / ('%s.%s.u32' % (name(n, gen), op))).write_bytes(
            struct.pack('<%dI' % len(ticks), *ticks))


def info_log(logs, n, dbsize=None, hits=None):
    """Write point n's kvcluster_admin info log: one server line per DBSIZE given."""
    dbsize = DBSIZE[n] if dbsize is None else dbsize
    hits = hits or HITS.get(n, [(50, 50)] * len(dbsize))
    records = []
    for i, keys in enumerate(dbsize, 1):
        r = {'event': 'server', 'name': 's%d' % i, 'dbsize': keys, 'keyspace_misses': 0}
        if POINTS[n]['server'] == 'ours':
            r.update(cache_hits=hits[i - 1][0], cache_misses=hits[i - 1][1],
                     cache_policy=POINTS[n]['cache'], cache_size=POINTS[n]['cache_size'])
        records.append(r)
    write(logs / ('p%03d-info.jsonl' % n), records + [{'event': 'info', 'nodes': len(dbsize)}])


def result(n, **fields):
    """Return point n's result as points.jsonl records it, with fields replaced."""
    r = {'members': members(n), 'preload_status': 0, 'resetstat_status': 0,
         'info_status': 0, 'mix_start': mix_start(n), 'mix_end': mix_start(n) + SPAN,
         'server_cpu_s': SERVER_CPU.get(n, {m: 0.1 for m in members(n)}),
         'failed_loadgens': [], 'servers_alive': POINTS[n]['servers']}
    if POINTS[n]['server'] == 'redis':
        r['setup_status'] = 0
    r.update(fields)
    return r


def points_log(path, numbers=range(len(POINTS)), results=None, changes=None):
    """Write logs/points.jsonl with the given points; results {n: result} replace theirs
    and changes {n: {field: value}} change their point's fields."""
    write(path / 'logs' / 'points.jsonl', [
        {'t': mix_start(n) + 3, 'event': 'point', 'started': mix_start(n) - 2,
         'point': dict(point(n), **(changes or {}).get(n, {})), 'elapsed': 5.0,
         'result': (results or {}).get(n, result(n))} for n in numbers])


def cpu_log(logs, busy_points=()):
    """Write CPU samples every INTERVAL s over the run: 0.9 busy inside the mix windows of
    busy_points, 0.2 elsewhere."""
    records = []
    for i in range(int((10 * len(POINTS) + 10) / INTERVAL) + 1):
        t = T0 - 5 + INTERVAL * i
        hot = any(mix_start(n) < t <= mix_start(n) + SPAN for n in busy_points)
        records.append({'t': t, 'busy': 0.9 if hot else 0.2, 'steal': 0.0,
                        'cores': [0.9, 0.9] if hot else [0.2, 0.2], 'phase': None})
    write(logs / 'cpu.jsonl', records)


def ring_log(logs):
    """Write logs/ring.jsonl for 1, 2 and 10 servers at 1 and VNODES virtual nodes."""
    shares = {(1, 1): (1.0, 1.0), (2, 1): (0.33667, 0.66333), (10, 1): (0.02, 0.3),
              (1, VNODES): (1.0, 1.0), (2, VNODES): (0.49, 0.51), (10, VNODES): (0.095, 0.104)}
    write(logs / 'ring.jsonl', [
        {'event': 'ring', 'servers': n, 'vnodes': v, 'min_share': low, 'max_share': high,
         'slot_imbalance': round(high * n, 6), 'used_by_run': v == VNODES}
        for (n, v), (low, high) in shares.items()])


def manifest(**fields):
    """Return the folder's manifest with fields replaced."""
    m = {'experiment': 'kvscale', 'status': 'ok', 'error': None, 'hosts': HOSTS,
         'server_classes': CLASSES, 'class_cores': CORES,
         'params': {'scale': 'test', 'repeat': 2, 'keys': 100, 'duration': SPAN,
                    'vnodes': VNODES, 'fast_cores': CORES['fast'],
                    'slow_cores': CORES['slow'], 'bw': 100.0, 'zipf': 0.99,
                    'dataset': 'synthetic', 'seed': 1},
         'cpu': {'interval': INTERVAL, 'mean': 0.3, 'saturated': False, 'threshold': 0.65,
                 'max_over_fraction': 0.05},
         'mechanisms': {'cpu_limits': {'mechanism': 'v2', 'period_us': 10000}},
         'provenance': {'host': {'cpus': 2, 'cpus_usable': 2, 'memory_bytes': 8 * 2 ** 30,
                                 'cpu_model': 'Test CPU'}}}
    m.update(fields)
    return m


def make_run(path, busy_points=(2,)):
    """Write the folder under path: the nine points of POINTS, CPU samples 0.9 busy
    during busy_points (by default the 10-server scale point); return path."""
    logs = path / 'logs'
    logs.mkdir()
    (path / 'manifest.json').write_text(json.dumps(manifest(), sort_keys=True))
    for n in range(len(POINTS)):
        for gen in generators(n):
            mix_log(logs, n, gen)
        info_log(logs, n)
    points_log(path)
    cpu_log(logs, busy_points)
    ring_log(logs)
    return path
