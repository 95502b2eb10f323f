"""Analysis of the kvscale experiment (seed 003): a partitioned KV store over 1 to 10 servers.

Reads only ``manifest.json`` and ``logs/`` of a run (``topologies/kvscale.py`` and
``workloads/kvscale_points.py`` say what produced them) and writes, byte-identical on
every rebuild:

- ``tables/points.csv``: one row per point: GET and SET mean/p50/p99 pooled over every
  request of every load generator (raw ``.get.u32``/``.set.u32`` files), throughput over
  the timed mix, failed operations, MOVED redirects, cache hit rate (our servers' own
  counters over the mix), keys per server (DBSIZE after the mix) and their imbalance
  (max/mean), the share of keys on slow servers, and the CPU verdict over the mix;
- ``tables/response.csv``: scenarios 1-3 as the seed drew them: per store, class,
  virtual nodes, clients and servers, GET and SET response times (latencies pooled over
  repetitions) and throughput;
- ``tables/cache.csv``: scenario 4: hit rate and GET times per policy and cache size;
- ``tables/keys.csv``: per point and server: speed class, keys, requests served, hits;
- ``tables/ring.csv``: slot shares of the ring the run used (``logs/ring.jsonl``,
  computed by ``nodes.kv.cluster`` at the start of the run) per virtual-node count;
- ``tables/throughput.csv``: throughput against servers and where it stops growing;
- ``tables/targets.csv``, ``tables/inputs.csv``; figures and ``report.md``
  (:mod:`analysis.kvscale_report`).
"""

import pathlib

import numpy as np
import pandas as pd

from analysis.inputs import Inputs, as_dict, incomplete, is_number, number, read_manifest
from analysis.stats import PointJudge, pooled_cpu
from analysis.tables import write_tables

FLOAT = '%.4f'
TICK_MS = 1e-4                      # workloads.kvmix: uint32 latencies in 100 ns units
OPS = ('get', 'set')
POINT_KEYS = ('point', 'repetition', 'kind', 'server', 'servers', 'clients', 'class')
SATURATION_GAIN = 1.10              # a server count whose throughput grows < 10 % saturates


def tag(point):
    """Return the point's log-name prefix (same rule as workloads/kvscale_points.py)."""
    return 'p%03d' % point['point']


def loadgen_names(point):
    """Return the mix processes' log names (g1.. with the point's clients split)."""
    return ['%s-mix-g%d' % (tag(point), k + 1) for k in range(min(2, point['clients']))]


def mix(found, logs, point):
    """Return (summaries, {op: latencies ms}) of a point's mix processes."""
    summaries, lat = [], {op: [] for op in OPS}
    for name in loadgen_names(point):
        records = found.read(name + '.jsonl', point=point['point'])
        summary = [r for r in records if r.get('event') == 'summary']
        if not summary:
            found.missing('load generator %s logged no summary' % name, point=point['point'])
            continue
        summaries.append(summary[-1])
        for op in OPS:
            path = logs / ('%s.%s.u32' % (name, op))
            if path.exists():
                lat[op].append(np.fromfile(path, dtype='<u4') * TICK_MS)
            else:
                found.missing('logs/%s missing' % path.name, point=point['point'])
    return summaries, {op: np.concatenate(v) if v else np.zeros(0) for op, v in lat.items()}


def servers_info(found, point):
    """Return [server record] of the point's kvcluster_admin info log."""
    records = found.read('%s-info.jsonl' % tag(point), point=point['point'])
    servers = [r for r in records if r.get('event') == 'server']
    if len(servers) != point['servers']:
        found.missing('point %d: %d of %d servers reported INFO' % (
            point['point'], len(servers), point['servers']), point=point['point'])
    return servers


def _pct(values, q):
    """Nearest-rank percentile of values, or None when empty."""
    return float(np.percentile(values, q, method='inverted_cdf')) if len(values) else None


def _mean(values):
    """Mean of values, or None when empty."""
    return float(np.mean(values)) if len(values) else None


def _failed(summaries):
    """Operations that failed across the summaries: misses, wrong replies and errors."""
    total = 0
    for s in summaries:
        for op in OPS:
            o = as_dict(as_dict(s.get('ops')).get(op))
            total += number(o.get('miss')) + number(o.get('wrong'))
            total += sum(number(v) for v in as_dict(o.get('errors')).values())
    return int(total)


STEPS = ('setup', 'preload', 'resetstat', 'info')


def _failed_steps(point, result):
    """Steps of a point that failed: a load generator, a setup/preload/resetstat/info
    process that exited non-zero, a server that exited, or a mix that never ran (a point
    whose Redis setup failed has no operation to count, yet it did not succeed)."""
    steps = len(result.get('failed_loadgens') or [])
    steps += sum(1 for s in STEPS if result.get(s + '_status') not in (None, 0))
    alive = result.get('servers_alive')
    steps += point['servers'] - alive if is_number(alive) else 0
    return steps + (0 if 'failed_loadgens' in result else 1)


def _ops(summaries, op, field='ok'):
    """Sum of one field of one op over the summaries."""
    return int(sum(number(as_dict(as_dict(s.get('ops')).get(op)).get(field))
                   for s in summaries))


def point_row(point, result, summaries, lat, servers, classes, verdict):
    """Return the points.csv row of one point."""
    start, end = result.get('mix_start'), result.get('mix_end')
    ok = sum(_ops(summaries, op) for op in OPS)
    span = (end - start) if is_number(start) and is_number(end) and end > start else None
    keys = [number(s.get('dbsize')) for s in servers]
    slow = sum(number(s.get('dbsize')) for s in servers
               if classes.get(s.get('name')) == 'slow')
    hits = sum(number(s.get('cache_hits')) for s in servers)
    misses = sum(number(s.get('cache_misses')) for s in servers)
    row = {k: point.get(k) for k in ('point', 'repetition', 'kind', 'server', 'class',
                                     'servers', 'clients', 'cache', 'cache_size', 'vnodes')}
    for op in OPS:
        row.update({'%s_n' % op: len(lat[op]), '%s_mean_ms' % op: _mean(lat[op]),
                    '%s_p50_ms' % op: _pct(lat[op], 50), '%s_p99_ms' % op: _pct(lat[op], 99)})
    row.update({
        'ops_per_s': ok / span if span else None,
        'failed': _failed(summaries) + _failed_steps(point, result),
        'moved': int(sum(number(s.get('moved')) for s in summaries)),
        'hit_rate': hits / (hits + misses) if point['server'] == 'ours' and hits + misses
        else None,
        'keys_total': int(sum(keys)),
        'keys_imbalance': max(keys) / (sum(keys) / len(keys)) if keys and sum(keys) else None,
        'slow_key_share': slow / sum(keys) if sum(keys) and any(
            classes.get(s.get('name')) == 'slow' for s in servers) else None,
        'cpu_busy': verdict[0], 'cpu_bound': verdict[2], 'cpu_verdict': verdict[3]})
    return row


POINT_COLUMNS = ['point', 'repetition', 'kind', 'server', 'class', 'servers', 'clients',
                 'cache', 'cache_size', 'vnodes'] + [
    '%s_%s' % (op, f) for op in OPS for f in ('n', 'mean_ms', 'p50_ms', 'p99_ms')] + [
    'ops_per_s', 'failed', 'moved', 'hit_rate', 'keys_total', 'keys_imbalance',
    'slow_key_share', 'busiest_server_cpu', 'cpu_busy', 'cpu_bound', 'cpu_verdict']


def key_rows(point, result, summaries, servers, classes, addresses, cores):
    """Return keys.csv rows: per server of a point, keys, requests served, cache hits and
    the share of its CPU limit it used during the mix (its own CPU seconds / span / cores)."""
    start, end = result.get('mix_start'), result.get('mix_end')
    span = end - start if is_number(start) and is_number(end) and end > start else None
    used = as_dict(result.get('server_cpu_s'))
    served = {}
    for s in summaries:
        for address, counts in as_dict(s.get('per_server')).items():
            name = addresses.get(address, address)
            served[name] = served.get(name, 0) + sum(number(v) for v in
                                                     as_dict(counts).values())
    total = sum(number(s.get('dbsize')) for s in servers) or None
    return [{'point': point['point'], 'kind': point['kind'], 'server': point['server'],
             'class': point['class'], 'servers': point['servers'],
             'clients': point['clients'], 'vnodes': point.get('vnodes'),
             'host': s.get('name'), 'speed': classes.get(s.get('name'), 'fast'),
             'keys': number(s.get('dbsize')),
             'key_share': number(s.get('dbsize')) / total if total else None,
             'requests': served.get(s.get('name'), 0),
             'cache_hits': s.get('cache_hits'), 'cache_misses': s.get('cache_misses'),
             'cpu_of_limit': _of_limit(used.get(s.get('name')), span,
                                       cores.get(classes.get(s.get('name'), 'fast')))}
            for s in servers]


def _of_limit(seconds, span, cores):
    """CPU seconds over a span as a fraction of a limit of `cores`, or None."""
    if not (is_number(seconds) and span and is_number(cores) and cores > 0):
        return None
    return seconds / span / cores


KEY_COLUMNS = ['point', 'kind', 'server', 'class', 'servers', 'clients', 'vnodes', 'host',
               'speed', 'keys', 'key_share', 'requests', 'cache_hits', 'cache_misses',
               'cpu_of_limit']


def tables(run_dir):
    """Return the kvscale tables as DataFrames, from logs and manifest only."""
    run_dir = pathlib.Path(run_dir)
    logs = run_dir / 'logs'
    manifest = read_manifest(run_dir)
    found = Inputs(logs)
    judge = PointJudge(found, manifest)
    cores = as_dict(manifest.get('class_cores'))
    for field in ('server_classes', 'class_cores'):
        if not as_dict(manifest.get(field)):
            found.missing('the manifest has no %s (slow-server shares and CPU against the '
                          'limit are left empty)' % field)
    rows, keys, pooled = [], [], {}
    for record, point, result in found.points(POINT_KEYS):
        classes = as_dict(as_dict(manifest.get('server_classes')).get(point['class']))
        addresses = {addr: name for name, addr in as_dict(result.get('members')).items()}
        summaries, lat = mix(found, logs, point)
        servers = servers_info(found, point)
        verdict = judge(result.get('mix_start'), result.get('mix_end'), record)
        rows.append(point_row(point, result, summaries, lat, servers, classes, verdict))
        mine = key_rows(point, result, summaries, servers, classes, addresses, cores)
        keys += mine
        rows[-1]['busiest_server_cpu'] = max(
            (r['cpu_of_limit'] for r in mine if r['cpu_of_limit'] is not None), default=None)
        group = _group(point)
        for op in OPS:
            pooled.setdefault(group + (op,), []).append(lat[op])
    points = pd.DataFrame(rows, columns=POINT_COLUMNS)
    data = {'points': points, 'response': response_table(points, pooled),
            'cache': cache_table(points, pooled), 'keys': _counts(pd.DataFrame(keys, columns=KEY_COLUMNS)),
            'ring': ring_table(found), 'throughput': throughput_table(points)}
    from analysis.kvscale_report import targets
    data['targets'] = targets(data)
    data['inputs'] = found.table()
    return data


def _counts(keys):
    """keys.csv with whole-number columns as integers (a Redis point leaves the cache
    counters empty, which would otherwise turn every count into a float)."""
    for column in ('keys', 'requests', 'cache_hits', 'cache_misses'):
        keys[column] = pd.to_numeric(keys[column], errors='coerce').round().astype('Int64')
    return keys


GROUP = ('kind', 'server', 'class', 'vnodes', 'cache', 'cache_size', 'clients', 'servers')


def _group(point):
    """The configuration a point repeats (everything but repetition and seed)."""
    return tuple(point.get(k) for k in GROUP)


def _aggregate(points, pooled, keys):
    """Rows of points grouped by keys: latencies pooled over repetitions, rates averaged.

    A row's points may differ outside keys (with --vnodes 1 a skew point is a scale
    point's twin), so the latencies of every configuration among them are pooled."""
    rows = []
    for values, part in points.groupby(list(keys), sort=True, dropna=False):
        groups = sorted({tuple(r[k] for k in GROUP) for _, r in part.iterrows()}, key=str)
        row = dict(zip(keys, values))
        row['repetitions'] = len(part)
        for op in OPS:
            lat = np.concatenate([np.zeros(0)] + [a for g in groups
                                                  for a in pooled.get(g + (op,), [])])
            row.update({'%s_mean_ms' % op: _mean(lat), '%s_p50_ms' % op: _pct(lat, 50),
                        '%s_p99_ms' % op: _pct(lat, 99)})
        row.update({'ops_per_s': part['ops_per_s'].mean(), 'failed': int(part['failed'].sum()),
                    'hit_rate': part['hit_rate'].mean(),
                    'keys_imbalance': part['keys_imbalance'].mean(),
                    'slow_key_share': part['slow_key_share'].mean(),
                    'busiest_server_cpu': part['busiest_server_cpu'].max(),
                    **pooled_cpu(part)})
        rows.append(row)
    return rows


def response_table(points, pooled):
    """Scenarios 1-3 (and the --vnodes 1 points): response time against servers."""
    part = points[points['kind'].isin(['scale', 'skew'])]
    keys = ('server', 'class', 'vnodes', 'clients', 'servers')
    return pd.DataFrame(_aggregate(part, pooled, keys) if len(part) else [],
                        columns=list(keys) + RESPONSE_TAIL)


RESPONSE_TAIL = ['repetitions'] + ['%s_%s' % (op, f) for op in OPS
                                   for f in ('mean_ms', 'p50_ms', 'p99_ms')] + [
    'ops_per_s', 'failed', 'hit_rate', 'keys_imbalance', 'slow_key_share',
    'busiest_server_cpu', 'cpu_bound', 'cpu_verdict']


def cache_table(points, pooled):
    """Scenario 4: hit rate and GET times per policy and cache size."""
    part = points[points['kind'] == 'cache']
    keys = ('cache', 'cache_size')
    return pd.DataFrame(_aggregate(part, pooled, keys) if len(part) else [],
                        columns=list(keys) + RESPONSE_TAIL)


def ring_table(found):
    """Slot shares of the ring per server count and virtual nodes (logs/ring.jsonl)."""
    rows = [{'servers': r.get('servers'), 'vnodes': r.get('vnodes'),
             'slot_imbalance': r.get('slot_imbalance'),
             'min_share': r.get('min_share'), 'max_share': r.get('max_share'),
             'used_by_run': bool(r.get('used_by_run'))}
            for r in found.read('ring.jsonl', event='ring')]
    if not rows:
        found.missing('no ring shares (logs/ring.jsonl)')
    return pd.DataFrame(rows, columns=['servers', 'vnodes', 'slot_imbalance', 'min_share',
                                       'max_share', 'used_by_run']).sort_values(
        ['vnodes', 'servers'], kind='stable')


def throughput_table(points):
    """Throughput against servers per store, class and clients; where growth stops."""
    part = points[points['kind'] == 'scale']
    rows = []
    for (server, klass, clients), g in part.groupby(['server', 'class', 'clients'],
                                                    sort=True):
        mean = g.groupby('servers')['ops_per_s'].mean()
        previous = None
        for n, rate in mean.items():
            gain = rate / previous if previous and rate == rate else None
            rows.append({'server': server, 'class': klass, 'clients': clients, 'servers': n,
                         'ops_per_s': rate, 'gain_over_previous': gain,
                         'saturated': bool(gain is not None and gain < SATURATION_GAIN),
                         **pooled_cpu(g[g['servers'] == n])})
            previous = rate
    return pd.DataFrame(rows, columns=['server', 'class', 'clients', 'servers', 'ops_per_s',
                                       'gain_over_previous', 'saturated', 'cpu_bound',
                                       'cpu_verdict'])


def build(run_dir):
    """Rewrite tables/, figures/ and report.md of a kvscale run; return the tables.

    Raises IncompleteInputs (after writing everything) when inputs were missing."""
    from analysis import kvscale_report
    run_dir = pathlib.Path(run_dir)
    manifest = read_manifest(run_dir)
    data = tables(run_dir)
    write_tables(run_dir, data, FLOAT)
    drawn = kvscale_report.draw(run_dir, data)
    (run_dir / 'report.md').write_text(kvscale_report.report(manifest, data, drawn))
    problem = incomplete(data['inputs'])
    if problem:
        raise problem
    return data
