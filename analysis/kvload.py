"""Analysis of the kvload experiment (seed 001): our KV store and Redis under the seed's load.

Reads only ``manifest.json`` and ``logs/`` of a run (``topologies/kvload.py`` and
``workloads/kv_points.py`` say what produced them) and writes, with byte-identical
results on every rebuild:

- ``tables/clients.csv``: the seed's per-client table: each client's total ms per
  operation (first request sent .. last reply, from ``workloads.kvload``'s phase lines),
  ms per request, p50/p99 and failures;
- ``tables/response.csv``: per server, layout, client count and operation, the seed's
  "Avg" (mean of the clients' totals over repetitions), ms per request, p50/p99 of
  every request of every client pooled from the raw latency files, aggregate requests/s
  of the point, and the CPU verdict over the load (:mod:`analysis.stats`);
- ``tables/cpu.csv``: per load, bench and fsync point, its CPU verdict: by the samples
  inside its timed part, else by the runner's own reading of that part (``points.jsonl``'s
  ``cpu``; ``cpu_verdict`` says which), 'modelled' in a simulated run;
- ``tables/seed.csv``: the seed's ms per request beside ours and Redis's (local layout);
- ``tables/bench.csv`` and ``tables/bench_ratio.csv``: ``redis-benchmark --csv`` against
  both servers and our throughput as a fraction of Redis's in the same run;
- ``tables/fsync.csv``: SET throughput under each ``appendfsync`` policy, relative to
  ``no`` for the same server;
- ``tables/profile.csv``: the functions our server spent its own time in under
  ``redis-benchmark -c 50 -P 16`` (cProfile; where Python is the limit, this says where);
- ``tables/targets.csv`` and ``tables/inputs.csv``; figures; ``report.md``
  (:mod:`analysis.kvload_report`).
"""

import csv
import pathlib

import numpy as np
import pandas as pd

from analysis import figures, kvload_seed
from analysis.inputs import Inputs, as_dict, incomplete, is_number, number, read_manifest
from analysis.stats import PointJudge, pooled_cpu
from analysis.tables import write_tables

FLOAT = '%.4f'
TICK_US = 0.1                       # workloads.kvload: uint32 latencies in 100 ns units
POINT_KEYS = ('point', 'repetition', 'kind', 'server')


def tag(point):
    """Return the point's log-name prefix (same rule as workloads/kv_points.py)."""
    return 'p%03d' % point['point']


def latencies(logs, name, phase):
    """Return a phase's latencies in ms from the client's .lat file (empty if absent)."""
    path = logs / (name + '.lat')
    off, count = phase.get('lat_offset'), phase.get('lat_count')
    if not (path.exists() and is_number(off) and is_number(count)):
        return np.zeros(0)
    data = np.fromfile(path, dtype='<u4', count=int(count), offset=4 * int(off))
    return data * (TICK_US / 1000.0)


def load_point(found, logs, point, lat):
    """Return (client rows, ok requests, first start, last end) of a load point;
    lat[(op)] collects the point's latencies per op.

    A phase a client never logged (it stopped after an earlier failure) counts all its
    requests as failed; a latency file shorter than its phase lines say is missing input."""
    rows, ok, starts, ends = [], 0, [], []
    for i in range(1, point['clients'] + 1):
        name = '%s-kvload-c%d' % (tag(point), i)
        records = found.read(name + '.jsonl', point=point['point'])
        phases = [r for r in records if r.get('event') == 'phase']
        if not phases:
            found.missing('client c%d of point %d logged no phase' % (i, point['point']),
                          point=point['point'])
            continue
        for ph in phases:
            ms = latencies(logs, name, ph)
            if is_number(ph.get('lat_count')) and len(ms) < ph['lat_count']:
                found.missing('logs/%s.lat has %d of the %d latencies of client c%d\'s %s '
                              'phase in point %d' % (name, len(ms), ph['lat_count'], i,
                                                     ph.get('op'), point['point']),
                              point=point['point'])
            lat.setdefault(str(ph.get('op')), []).append(ms)
            ok += number(ph.get('ok'))
            if is_number(ph.get('start')) and is_number(ph.get('end')):
                starts.append(ph['start'])
                ends.append(ph['end'])
            rows.append(_client_row(point, i, ph, ms))
        planned = max(number(ph.get('requests')) for ph in phases)
        logged = {str(ph.get('op')) for ph in phases}
        for op in kvload_seed.OPS:
            if op not in logged:
                rows.append(_client_row(point, i, {'op': op, 'requests': planned}, ()))
    return rows, ok, (min(starts) if starts else None), (max(ends) if ends else None)


def _client_row(point, client, ph, ms):
    """Return one client's row for one phase line (ms: its latencies in ms)."""
    requests, ok, wrong = number(ph.get('requests')), number(ph.get('ok')), number(
        ph.get('wrong'))
    errors = sum(number(v) for v in as_dict(ph.get('errors')).values())
    total = ph.get('total_ms')
    return {'point': point['point'], 'repetition': point['repetition'],
            'server': point['server'], 'layout': point['layout'],
            'clients': point['clients'], 'client': client, 'op': str(ph.get('op')),
            'requests': requests, 'ok': ok,
            'failed': errors + wrong + max(0, requests - ok - errors - wrong),
            'total_ms': total if is_number(total) else None,
            'ms_per_request': total / requests if is_number(total) and requests else None,
            'p50_ms': _pct(ms, 50), 'p99_ms': _pct(ms, 99)}


def tables(run_dir):
    """Return the kvload tables as DataFrames, from logs and manifest only."""
    run_dir = pathlib.Path(run_dir)
    logs = run_dir / 'logs'
    manifest = read_manifest(run_dir)
    found = Inputs(logs)
    judge = PointJudge(found, manifest)
    client_rows, groups, bench, fsync, profile, cpu = [], {}, [], [], [], []
    for record, point, result in found.points(POINT_KEYS):
        if point['kind'] == 'load':
            lat = {}
            rows, ok, start, end = load_point(found, logs, point, lat)
            client_rows += rows
            busy, _, bound, verdict = judge(start, end, record)
            rate = ok / (end - start) if start is not None and end > start else None
            for op, parts in lat.items():
                key = (point['server'], point['layout'], point['clients'], op)
                g = groups.setdefault(key, {'lat': [], 'rates': [], 'busy': [], 'bound': [],
                                            'verdict': [], 'reps': set()})
                g['lat'] += parts
                g['rates'].append(rate)
                g['busy'].append(busy)
                g['bound'].append(bound)
                g['verdict'].append(verdict)
                g['reps'].add(point['repetition'])
        elif point['kind'] == 'profile':
            profile = profile_rows(found, logs, point)
            continue
        else:
            busy, _, bound, verdict = judge(record.get('started'), record.get('t'), record)
            for row in bench_rows(found, logs, point):
                row.update(cpu_busy=busy, cpu_bound=bound, cpu_verdict=verdict)
                (bench if point['kind'] == 'bench' else fsync).append(row)
        cpu.append(dict({k: point.get(k) for k in CPU_COLUMNS[:4]}, cpu_busy=busy,
                        cpu_bound=bound, cpu_verdict=verdict))
    clients = pd.DataFrame(client_rows, columns=CLIENT_COLUMNS)
    response = response_table(clients, groups)
    data = {'clients': clients, 'response': response, 'seed': seed_table(response),
            'bench': pd.DataFrame(bench, columns=BENCH_COLUMNS),
            'bench_ratio': ratio_table(pd.DataFrame(bench, columns=BENCH_COLUMNS)),
            'fsync': fsync_table(pd.DataFrame(fsync, columns=BENCH_COLUMNS)),
            'profile': pd.DataFrame(profile, columns=PROFILE_COLUMNS),
            'cpu': pd.DataFrame(cpu, columns=CPU_COLUMNS)}
    from analysis.kvload_report import targets
    data['targets'] = targets(data)
    data['inputs'] = found.table()
    return data


CLIENT_COLUMNS = ['point', 'repetition', 'server', 'layout', 'clients', 'client', 'op',
                  'requests', 'ok', 'failed', 'total_ms', 'ms_per_request', 'p50_ms', 'p99_ms']
BENCH_COLUMNS = ['point', 'repetition', 'kind', 'server', 'bench', 'appendfsync', 'test',
                 'rps', 'avg_ms', 'p50_ms', 'p99_ms', 'cpu_busy', 'cpu_bound', 'cpu_verdict']
CPU_COLUMNS = ['point', 'repetition', 'kind', 'server', 'cpu_busy', 'cpu_bound', 'cpu_verdict']


def bench_rows(found, logs, point):
    """Return the rows of one redis-benchmark --csv log (one per test)."""
    path = logs / ('%s-bench.csv' % tag(point))
    try:
        with open(path, newline='') as f:
            lines = list(csv.DictReader(f))
    except OSError:
        lines = []
    rows = []
    for line in lines:
        try:
            rows.append({'point': point['point'], 'repetition': point['repetition'],
                         'kind': point['kind'], 'server': point['server'],
                         'bench': point.get('bench', 'c50'),
                         'appendfsync': point.get('appendfsync', ''), 'test': line['test'],
                         'rps': float(line['rps']), 'avg_ms': float(line['avg_latency_ms']),
                         'p50_ms': float(line['p50_latency_ms']),
                         'p99_ms': float(line['p99_latency_ms'])})
        except (KeyError, TypeError, ValueError):
            continue
    if not rows:
        found.missing('redis-benchmark gave no result in point %d (logs/%s)' % (
            point['point'], path.name), point=point['point'])
    return rows


PROFILE_COLUMNS = ['rank', 'function', 'calls', 'own_s', 'own_share', 'cumulative_s']
PROFILE_TOP = 12


def profile_rows(found, logs, point):
    """Return the functions our server spent most of its own time in (cProfile)."""
    import pstats
    path = logs / ('%s-server-ours.prof' % tag(point))
    try:
        stats = pstats.Stats(str(path)).stats
    except (OSError, TypeError, ValueError, EOFError):
        found.missing('no readable profile in point %d (logs/%s)' % (point['point'], path.name),
                      point=point['point'])
        return []
    total = sum(v[2] for v in stats.values()) or 1.0
    rows = []
    for (file, line, name), (_, calls, own, cum, _) in stats.items():
        where = file.split('/work/')[-1] if file.startswith('/') else file
        for root in ('nodes/', 'repronet/', 'asyncio/', 'uvloop/'):
            if root in where:
                where = root + where.split(root, 1)[1]
        rows.append({'function': '%s:%d(%s)' % (where, line, name), 'calls': calls,
                     'own_s': own, 'own_share': own / total, 'cumulative_s': cum})
    rows.sort(key=lambda r: (-r['own_s'], r['function']))
    return [dict(r, rank=i) for i, r in enumerate(rows[:PROFILE_TOP], 1)]


def response_table(clients, groups):
    """Per server, layout, clients, op: the seed's Avg and pooled percentiles."""
    rows = []
    for (server, layout, n, op), g in sorted(groups.items()):
        mine = clients[(clients['server'] == server) & (clients['layout'] == layout) &
                       (clients['clients'] == n) & (clients['op'] == op)]
        pooled = np.concatenate(g['lat']) if g['lat'] else np.zeros(0)
        rates = [r for r in g['rates'] if r is not None]
        busy = [b for b in g['busy'] if b is not None]
        requests = mine['requests'].max() if len(mine) else None
        avg = mine['total_ms'].mean() if len(mine) else None
        rows.append({'server': server, 'layout': layout, 'clients': n, 'op': op,
                     'repetitions': len(g['reps']), 'requests_per_client': requests,
                     'avg_total_ms': avg,
                     'ms_per_request': avg / requests if requests else None,
                     'p50_ms': _pct(pooled, 50), 'p99_ms': _pct(pooled, 99),
                     'point_ops_per_s': sum(rates) / len(rates) if rates else None,
                     'failed': int(mine['failed'].sum()) if len(mine) else 0,
                     'cpu_busy': sum(busy) / len(busy) if busy else None,
                     **pooled_cpu({'cpu_bound': g['bound'], 'cpu_verdict': g['verdict']})})
    return pd.DataFrame(rows, columns=RESPONSE_COLUMNS)


RESPONSE_COLUMNS = ['server', 'layout', 'clients', 'op', 'repetitions', 'requests_per_client',
                    'avg_total_ms', 'ms_per_request', 'p50_ms', 'p99_ms', 'point_ops_per_s',
                    'failed', 'cpu_busy', 'cpu_bound', 'cpu_verdict']


def _pct(values, q):
    """Nearest-rank percentile of values, or None when empty."""
    return float(np.percentile(values, q, method='inverted_cdf')) if len(values) else None


def seed_table(response):
    """The seed's ms per request beside ours and Redis's, local layout."""
    local = response[response['layout'] == 'local']
    rows = []
    for s in kvload_seed.rows():
        row = {'clients': s['clients'], 'op': s['op'],
               'seed_avg_total_ms': s['avg_total_ms'], 'seed_ms_per_request': s['ms_per_request']}
        for server in ('ours', 'redis'):
            m = local[(local['server'] == server) & (local['clients'] == s['clients']) &
                      (local['op'] == s['op'])]
            row['%s_ms_per_request' % server] = m['ms_per_request'].iloc[0] if len(m) else None
            row['%s_p50_ms' % server] = m['p50_ms'].iloc[0] if len(m) else None
        o, r = row['ours_ms_per_request'], row['redis_ms_per_request']
        row['ours_over_redis'] = o / r if o and r else None
        row['ours_over_seed'] = o / s['ms_per_request'] if o else None
        rows.append(row)
    return pd.DataFrame(rows)


def ratio_table(bench):
    """Our redis-benchmark throughput as a fraction of Redis's, per bench and test."""
    rows = []
    if len(bench):
        mean = bench.groupby(['bench', 'test', 'server'])['rps'].mean()
        for b, t in sorted({(b, t) for b, t, _ in mean.index}):
            ours, redis = mean.get((b, t, 'ours')), mean.get((b, t, 'redis'))
            rows.append({'bench': b, 'test': t, 'ours_rps': ours, 'redis_rps': redis,
                         'ours_over_redis': ours / redis if ours and redis else None,
                         **pooled_cpu(bench[(bench['bench'] == b) & (bench['test'] == t)])})
    return pd.DataFrame(rows, columns=['bench', 'test', 'ours_rps', 'redis_rps',
                                       'ours_over_redis', 'cpu_bound', 'cpu_verdict'])


def fsync_table(fsync):
    """SET throughput per server and appendfsync, relative to 'no' for that server."""
    rows = []
    if len(fsync):
        mean = fsync.groupby(['server', 'appendfsync'])['rps'].mean()
        for (server, policy), rps in mean.items():
            base = mean.get((server, 'no'))
            rows.append({'server': server, 'appendfsync': policy, 'set_rps': rps,
                         'relative_to_no': rps / base if base else None,
                         **pooled_cpu(fsync[(fsync['server'] == server) &
                                            (fsync['appendfsync'] == policy)])})
    return pd.DataFrame(rows, columns=['server', 'appendfsync', 'set_rps', 'relative_to_no',
                                       'cpu_bound', 'cpu_verdict'])


def build(run_dir):
    """Rewrite tables/, figures/ and report.md of a kvload run; return the tables.

    Raises IncompleteInputs (after writing everything) when inputs were missing."""
    from analysis import kvload_report
    run_dir = pathlib.Path(run_dir)
    manifest = read_manifest(run_dir)
    data = tables(run_dir)
    write_tables(run_dir, data, FLOAT)
    drawn = draw(run_dir, data)
    (run_dir / 'report.md').write_text(kvload_report.report(manifest, data, drawn))
    problem = incomplete(data['inputs'])
    if problem:
        raise problem
    return data


def draw(run_dir, data):
    """Draw the kvload figures; return {name: figures.Saved}."""
    out = pathlib.Path(run_dir) / 'figures'
    drawn = {}
    resp = data['response']
    seed = pd.DataFrame(kvload_seed.rows()).assign(server='seed (one machine)',
                                                   layout='local')
    for op in kvload_seed.OPS:
        mine = resp[resp['op'] == op][['server', 'layout', 'clients', 'ms_per_request']]
        if not len(mine):
            continue
        both = pd.concat([mine, seed[seed['op'] == op][list(mine.columns)]])
        both = both[both['clients'] <= max(mine['clients'])]
        drawn['response_%s' % op] = figures.lines_over_time(
            both, 'clients', 'ms_per_request', 'server', out, 'response_%s' % op,
            'Time per %s request against concurrent clients' % kvload_seed.OP_NAMES[op],
            'concurrent clients', 'ms per request (client total / requests)',
            style='layout')
    if len(resp):
        drawn['p99'] = figures.lines_over_time(
            resp.assign(series=resp['server'] + ' ' + resp['op']), 'clients', 'p99_ms',
            'series', out, 'p99', '99th percentile latency against concurrent clients',
            'concurrent clients', 'p99 latency (ms)', style='layout')
    for name, df, label in (('bench', data['bench'], 'bench'),
                            ('fsync', data['fsync'], 'appendfsync')):
        if not len(df):
            continue
        rps = 'rps' if name == 'bench' else 'set_rps'
        df = df.assign(case=df['server'] + ' ' + df[label] + (
            ' ' + df['test'] if name == 'bench' else ''))
        drawn[name] = figures.bars_with_spread(
            df, 'case', rps, out, name,
            'redis-benchmark against both servers' if name == 'bench'
            else 'SET throughput per appendfsync policy (50 connections)',
            '', 'requests/s')
    return drawn
