"""Analysis of the dht8 experiment: the seed's tables, next to ours, from logs only.

Reads ``manifest.json`` and ``logs/`` of a run (``topologies/dht8.py`` says what produced
them: ``points.jsonl`` names every point, ``<tag>-client-<peer>.jsonl`` holds each client's
``op`` records and ``summary``, ``<tag>-capture-<server>.jsonl`` each wire capture,
``cpu.jsonl`` the machine's CPU samples) and writes:

- ``tables/clients.csv``: one row per client per point (the raw material of all others);
- ``tables/points.csv``: one row per point: the seed's columns (servers, concurrent
  clients, total time = mean of the clients' timed parts, time per operation = total time /
  operations per client, as the seed divides 1.85 s by 10K), bytes/s, latency percentiles
  and the CPU during the point (busy fraction, share of samples over the 65 % bar);
- ``tables/part1.csv``, ``part2.csv``, ``part3.csv``: those rows averaged over
  ``--repeat`` with their spread (sd, min, max) and the seed's numbers beside them;
- ``tables/ping.csv``, ``capture.csv`` (REGISTER messages per peer seen on the wire against
  K servers and N files), ``failover.csv``, ``targets.csv``;
- ``figures/`` (drawn by ``analysis.figures``) and ``report.md``.

The seed's numbers are constants below, copied from the seed report
(``SEED_SOURCE``). Rows have a fixed order and floats a fixed format, so the same logs
always give byte-identical tables.
"""

import math
import pathlib

import pandas as pd

from analysis.tables import write_tables
from repronet.run.results import read_jsonl, read_manifest, read_points

FLOAT = '%.6g'
SEED_SOURCE = 'seeds/000_a0ac7540a03218ff.txt'
#: Part I: variant -> {concurrent clients: (avg total time s, ms per operation)}.
SEED_PART1 = {
    'register batched': {1: (1.85, 0.185), 2: (2.02, 0.202), 4: (2.78, 0.278),
                         8: (3.94, 0.394)},
    'register batched replicated': {1: (2.10, 0.210), 2: (2.9, 0.290),
                                    4: (3.87, 0.387), 8: (4.27, 0.427)},
    'register unbatched': {1: (12.78, 1.278), 2: (13.23, 1.323), 4: (14.16, 1.416),
                           8: (15.78, 1.578)},
    'search': {1: (5.94, 0.594), 2: (6.72, 0.672), 4: (8.15, 0.815), 8: (9.74, 0.974)},
    'download': {1: (312.23, 31.23), 2: (318.11, 31.81), 4: (323.28, 32.23),
                 8: (334.41, 33.44)},
}
#: Part II (8 peers): set -> (avg total time s, s per file, bytes/s).
SEED_PART2 = {'A': (121.02, 0.0137, 82500), 'B': (197.86, 0.028, 354600),
              'C': (47.67, 0.04767, 210120), 'D': (248.67, 2.487, 4090000),
              'E': (133.34, 26.68, 3750000), 'F': (372.12, 372.12, 2680000)}
#: Ping checks: 100 searches to 4 servers, total s; one 1 MB transfer, s.
SEED_PING = {'search': 0.16, 'download': 4.73}
#: Targets at seed scale, 1 peer: (variant, seed ms per op).
TARGETS = (('register batched', 0.185), ('register unbatched', 1.278),
           ('search', 0.594), ('download', 31.23))
GOODPUT_TARGET = 0.9
CPU_BAR = 0.65


def node_names(point):
    """Return the log names of a point's nodes (same rule as topologies/dht8.py)."""
    tag = 'p%03d' % point['point']
    clients = ['p%d' % i for i in range(1, point['peers'] + 1)]
    servers = ['s%d' % i for i in range(1, point['servers'] + 1)]
    return ({c: '%s-client-%s' % (tag, c) for c in clients},
            {s: '%s-capture-%s' % (tag, s) for s in servers}
            if point['part'] == 'capture' else {})


def variant(point):
    """Return the seed's name of what a point measures."""
    if point['op'] != 'register':
        return point['op']
    name = 'register %s' % ('batched' if point['batch'] else 'unbatched')
    return name + (' replicated' if point['replicas'] else '')


def _percentile(values, q):
    """Return the q-quantile of sorted values (nearest rank), or None."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def _cpu(samples, start, end, interval):
    """Return (mean busy, fraction over the bar) of the samples inside [start, end].

    A sample at t covers (t - interval, t]; only samples wholly inside the timed part
    count, so process start-up before the barrier is not blamed on it (a timed part
    shorter than one interval has no CPU figure).
    """
    inside = [s['busy'] for s in samples if s.get('busy') is not None
              and start <= s.get('t', 0) - interval and s.get('t', 0) <= end + 0.05]
    if not inside:
        return None, None
    return (sum(inside) / len(inside),
            sum(b > CPU_BAR for b in inside) / len(inside))


def client_rows(run_dir, points):
    """Return one dict per client per point, from the clients' logs."""
    logs = pathlib.Path(run_dir) / 'logs'
    rows = []
    for point, _result in points:
        clients, _ = node_names(point)
        for peer, name in clients.items():
            records = read_jsonl(logs / (name + '.jsonl'))
            summary = next((r for r in records if r.get('event') == 'summary'), None)
            ops = [r for r in records if r.get('event') == 'op']
            lat = sorted(1000 * r['latency'] for r in ops if r.get('ok'))
            row = {'point': point['point'], 'repetition': point['repetition'],
                   'part': point['part'], 'variant': variant(point),
                   'servers': point['servers'], 'peers': point['peers'],
                   'fileset': point['fileset'], 'client': peer,
                   'count': None, 'ok': None, 'failed': None, 'elapsed_s': None,
                   'ms_per_op': None, 'bytes': None, 'bytes_per_s': None,
                   'messages_sent': None, 'op_records': len(ops),
                   'lat_p50_ms': _percentile(lat, 0.5),
                   'lat_p99_ms': _percentile(lat, 0.99),
                   'lat_max_ms': lat[-1] if lat else None}
            if summary:
                count, elapsed = summary['count'], summary['elapsed']
                row.update(count=count, ok=summary['ok'], failed=summary['failed'],
                           elapsed_s=elapsed, bytes=summary['bytes'],
                           messages_sent=summary['messages_sent'],
                           ms_per_op=1000 * elapsed / count if count else None,
                           bytes_per_s=summary['bytes'] / elapsed if elapsed else None)
            rows.append(row)
    return rows


def point_rows(run_dir, points, clients):
    """Return one dict per point: the seed's columns, latency and CPU."""
    samples = read_jsonl(pathlib.Path(run_dir) / 'logs' / 'cpu.jsonl')
    interval = (read_manifest(run_dir).get('cpu') or {}).get('interval') or 0.5
    by_point = {}
    for c in clients:
        by_point.setdefault(c['point'], []).append(c)
    rows = []
    for point, result in points:
        cs = [c for c in by_point.get(point['point'], []) if c['elapsed_s'] is not None]
        busy, over = _cpu(samples, result.get('released', 0),
                          result.get('finished', 0), interval)
        n = len(cs)
        elapsed = [c['elapsed_s'] for c in cs]
        total_bytes = sum(c['bytes'] for c in cs)
        rows.append({
            'point': point['point'], 'repetition': point['repetition'],
            'part': point['part'], 'op': point['op'], 'variant': variant(point),
            'servers': point['servers'], 'concurrent_clients': point['peers'],
            'replicas': point['replicas'], 'fileset': point['fileset'],
            'ops_per_client': cs[0]['count'] if cs else None,
            'total_ops': sum(c['count'] for c in cs),
            'total_time_s': sum(elapsed) / n if n else None,
            'max_time_s': max(elapsed) if n else None,
            'time_per_op_ms': sum(c['ms_per_op'] for c in cs) / n if n else None,
            'bytes': total_bytes,
            'bytes_per_s_per_client': (sum(c['bytes_per_s'] for c in cs) / n
                                       if n and total_bytes else None),
            'lat_p50_ms': _median([c['lat_p50_ms'] for c in cs]),
            'lat_p99_ms': max([c['lat_p99_ms'] for c in cs if c['lat_p99_ms']
                               is not None], default=None),
            'ok': sum(c['ok'] for c in cs), 'failed': sum(c['failed'] for c in cs),
            'missing_clients': len(by_point.get(point['point'], [])) - n,
            'downloads': result.get('downloads', ''),
            'cpu_busy': busy, 'cpu_over_fraction': over})
    return rows


def _median(values):
    """Return the median of the non-None values, or None."""
    values = sorted(v for v in values if v is not None)
    return _percentile(values, 0.5)


def _spread(df, keys, value):
    """Return mean, sd, min, max and n of value per keys group, in key order."""
    g = df.dropna(subset=[value]).groupby(keys, sort=True)[value]
    out = g.agg(['mean', 'std', 'min', 'max', 'count']).reset_index()
    out = out.rename(columns={'mean': value, 'std': value + '_sd', 'min': value + '_min',
                              'max': value + '_max', 'count': 'repeats'})
    return out


def part1_table(points):
    """Return Part I averaged over repetitions, with the seed beside it."""
    df = points[points['part'] == 'I']
    if df.empty:
        return pd.DataFrame()
    keys = ['variant', 'servers', 'concurrent_clients', 'ops_per_client']
    out = _spread(df, keys, 'time_per_op_ms')
    tt = _spread(df, keys, 'total_time_s').drop(columns=['repeats'])
    out = out.merge(tt, on=keys)
    extra = df.groupby(keys, sort=True).agg(
        bytes_per_s_per_client=('bytes_per_s_per_client', 'mean'),
        ok=('ok', 'sum'), failed=('failed', 'sum'),
        cpu_busy=('cpu_busy', 'mean')).reset_index()
    out = out.merge(extra, on=keys)
    seed = [SEED_PART1.get(v, {}).get(c, (None, None))
            for v, c in zip(out['variant'], out['concurrent_clients'])]
    out['seed_total_time_s'] = [s[0] for s in seed]
    out['seed_time_per_op_ms'] = [s[1] for s in seed]
    out['seed_over_ours'] = out['seed_time_per_op_ms'] / out['time_per_op_ms']
    order = {v: i for i, v in enumerate(SEED_PART1)}
    out['_o'] = out['variant'].map(lambda v: order.get(v, 99))
    return out.sort_values(['_o', 'concurrent_clients']).drop(columns='_o') \
        .reset_index(drop=True)


def part2_table(points, sizes, bw):
    """Return Part II per set and peer count, with goodput against the link."""
    df = points[points['part'] == 'II'].copy()
    if df.empty:
        return pd.DataFrame()
    df['set'] = df['fileset'].str[-1]
    df['s_per_file'] = df['time_per_op_ms'] / 1000
    keys = ['set', 'concurrent_clients', 'ops_per_client']
    out = _spread(df, keys, 'bytes_per_s_per_client')
    for value in ('total_time_s', 's_per_file'):
        out = out.merge(_spread(df, keys, value).drop(columns=['repeats']), on=keys)
    out['file_size_bytes'] = out['set'].map(lambda s: sizes.get('part2' + s))
    out['data_per_peer_bytes'] = out['file_size_bytes'] * out['ops_per_client']
    out['goodput_mbps'] = out['bytes_per_s_per_client'] * 8 / 1e6
    out['link_mbps'] = bw
    out['fraction_of_link'] = out['goodput_mbps'] / bw if bw else None
    out['cpu_busy'] = out.apply(lambda r: df[(df['set'] == r['set']) & (
        df['concurrent_clients'] == r['concurrent_clients'])]['cpu_busy'].mean(), axis=1)
    out['seed_total_time_s'] = out['set'].map(lambda s: SEED_PART2[s][0])
    out['seed_s_per_file'] = out['set'].map(lambda s: SEED_PART2[s][1])
    out['seed_bytes_per_s'] = out['set'].map(lambda s: SEED_PART2[s][2])
    return out.sort_values(['concurrent_clients', 'set'],
                           ascending=[False, True]).reset_index(drop=True)


def part3_table(points):
    """Return centralized (1 server) against decentralized register and search."""
    df = points[((points['part'] == 'III') | (
        (points['part'] == 'I') & points['variant'].isin(['register batched', 'search'])))]
    if df.empty or not (df['part'] == 'III').any():
        return pd.DataFrame()
    keys = ['variant', 'servers', 'concurrent_clients', 'ops_per_client']
    out = _spread(df, keys, 'total_time_s')
    out = out.merge(_spread(df, keys, 'time_per_op_ms').drop(columns=['repeats']), on=keys)
    out['system'] = out['servers'].map(lambda s: 'centralized' if s == 1 else 'decentralized')
    return out.sort_values(['variant', 'servers', 'concurrent_clients']) \
        .reset_index(drop=True)


def ping_table(points):
    """Return the seed's two ping checks, measured against the seed."""
    rows = []
    for op, label in (('search', '100 searches, 1 client, %s servers: total s'),
                      ('download', 'one 1 MB file between two peers: s')):
        df = points[(points['part'] == 'ping') & (points['op'] == op)]
        if df.empty:
            continue
        rows.append({'check': label % df['servers'].iloc[0] if '%' in label else label,
                     'measured_s': df['total_time_s'].mean(),
                     'measured_sd': df['total_time_s'].std(),
                     'repeats': len(df), 'seed_s': SEED_PING[op],
                     'seed_over_ours': SEED_PING[op] / df['total_time_s'].mean()})
    return pd.DataFrame(rows)


def capture_table(run_dir, points, hosts):
    """Return REGISTER messages per peer seen on the servers' wires, per capture point."""
    logs = pathlib.Path(run_dir) / 'logs'
    by_ip = {ip: name for name, ip in hosts.items()}
    rows = []
    for point, _ in points:
        if point['part'] != 'capture':
            continue
        clients, captures = node_names(point)
        per_peer = {p: {'register_messages': 0, 'names': 0, 'segments_to': 0,
                        'bytes_to': 0, 'segments_from': 0, 'bytes_from': 0}
                    for p in clients}
        drops = gaps = errors = missing = 0
        for name in captures.values():
            summary = next((r for r in read_jsonl(logs / (name + '.jsonl'))
                            if r.get('event') == 'summary'), None)
            if summary is None:
                missing += 1
                continue
            drops += summary.get('kernel_drops', 0)
            gaps += summary.get('gaps', 0)
            errors += summary.get('decode_errors', 0)
            for ip, c in summary['clients'].items():
                peer = by_ip.get(ip, ip)
                if peer not in per_peer:
                    continue
                d = per_peer[peer]
                d['register_messages'] += c['messages_to'].get('REGISTER', 0)
                d['names'] += c['names_to']
                for k in ('segments_to', 'bytes_to', 'segments_from', 'bytes_from'):
                    d[k] += c[k]
        files = _files_per_peer(logs, clients)
        for peer in sorted(per_peer, key=lambda p: int(p[1:])):
            n = files.get(peer)
            expected = point['servers'] if point['batch'] else n
            d = per_peer[peer]
            rows.append(dict({'point': point['point'], 'repetition': point['repetition'],
                              'mode': 'batched' if point['batch'] else 'unbatched',
                              'peer': peer, 'servers_K': point['servers'], 'files_N': n,
                              'expected_messages': expected}, **d,
                             matches=d['register_messages'] == expected,
                             kernel_drops=drops, gaps=gaps, decode_errors=errors,
                             missing_captures=missing))
    return pd.DataFrame(rows)


def _files_per_peer(logs, clients):
    """Return {peer: files registered} from the clients' summaries."""
    out = {}
    for peer, name in clients.items():
        summary = next((r for r in read_jsonl(logs / (name + '.jsonl'))
                        if r.get('event') == 'summary'), None)
        out[peer] = summary['count'] if summary else None
    return out


def failover_table(run_dir, points):
    """Return per failover point: searches, failures and the time to fail over."""
    logs = pathlib.Path(run_dir) / 'logs'
    rows = []
    for point, result in points:
        kill = result.get('kill')
        if point['part'] != 'failover' or not kill:
            continue
        clients, _ = node_names(point)
        victim = kill['server'].rsplit('-', 1)[-1]
        t_kill = kill['t']
        ops, stalls, summaries = [], [], []
        for name in clients.values():
            records = read_jsonl(logs / (name + '.jsonl'))
            summaries += [r for r in records if r.get('event') == 'summary']
            ops += [r for r in records if r.get('event') == 'op']
        for r in ops:
            if r['t'] >= t_kill and r['t'] - r['latency'] <= t_kill:
                stalls.append(r['t'] - t_kill)
        after = [r for r in ops if r['t'] > t_kill]
        before = sorted(1000 * r['latency'] for r in ops if r['t'] <= t_kill)
        rows.append({
            'point': point['point'], 'repetition': point['repetition'],
            'servers': point['servers'], 'replicas': point['replicas'],
            'clients': point['peers'], 'killed': victim,
            'kill_after_release_s': kill['after_release'],
            'searches': sum(s['count'] for s in summaries),
            'ok': sum(s['ok'] for s in summaries),
            'failed': sum(s['failed'] for s in summaries),
            'searches_after_kill': len(after),
            'answered_by_killed_after_kill': sum(r.get('server') == victim for r in after),
            'in_flight_at_kill': len(stalls),
            'failover_ms': 1000 * max(stalls) if stalls else None,
            'max_latency_after_kill_ms': max((1000 * r['latency'] for r in after),
                                             default=None),
            'p50_latency_before_kill_ms': _percentile(before, 0.5),
            'marked_down': ','.join(sorted({d for s in summaries
                                            for d in s.get('down', [])}))})
    return pd.DataFrame(rows)


def targets_table(manifest, part1, part2):
    """Return the seed targets with measured values and ratios."""
    scale = manifest.get('params', {}).get('scale')
    rows = []
    for name, seed_ms in TARGETS:
        m = None
        if not part1.empty:
            sel = part1[(part1['variant'] == name) & (part1['concurrent_clients'] == 1)]
            m = sel['time_per_op_ms'].iloc[0] if len(sel) else None
        rows.append({'target': '%s, ms per op, 1 peer' % name, 'seed': seed_ms,
                     'measured': m, 'ratio': seed_ms / m if m else None,
                     'met': None if m is None else bool(m < seed_ms),
                     'rule': 'measured < seed', 'scale': scale})
    if not part2.empty:
        solo = part2[part2['concurrent_clients'] == 1]
        big = solo if len(solo) else part2
        row = big.sort_values('file_size_bytes').iloc[-1]
        rows.append({'target': 'large-file goodput (set %s, %d peer(s)), fraction of '
                     '%g Mbit/s' % (row['set'], row['concurrent_clients'], row['link_mbps']),
                     'seed': GOODPUT_TARGET, 'measured': row['fraction_of_link'],
                     'ratio': row['fraction_of_link'] / GOODPUT_TARGET,
                     'met': bool(row['fraction_of_link'] >= GOODPUT_TARGET),
                     'rule': 'measured >= seed', 'scale': scale})
    return pd.DataFrame(rows)


def tables(run_dir):
    """Return every table as a DataFrame, from logs and manifest only."""
    run_dir = pathlib.Path(run_dir)
    manifest = read_manifest(run_dir)
    params = manifest.get('params', {})
    points = read_points(run_dir)
    clients = client_rows(run_dir, points)
    pts = pd.DataFrame(point_rows(run_dir, points, clients))
    sizes = {k: v['spec']['size'] for k, v in manifest.get('filesets', {}).items()}
    bw = float(params.get('bw') or 0)
    data = {'clients': pd.DataFrame(clients), 'points': pts}
    if pts.empty:
        return data
    data['part1'] = part1_table(pts)
    data['part2'] = part2_table(pts, sizes, bw)
    data['part3'] = part3_table(pts)
    data['ping'] = ping_table(pts)
    data['capture'] = capture_table(run_dir, points, manifest.get('hosts', {}))
    data['failover'] = failover_table(run_dir, points)
    data['targets'] = targets_table(manifest, data['part1'], data['part2'])
    return data


def build(run_dir):
    """Rewrite tables/, figures/ and report.md of a dht8 run; return the tables."""
    run_dir = pathlib.Path(run_dir)
    manifest = read_manifest(run_dir)
    data = tables(run_dir)
    write_tables(run_dir, data, FLOAT)
    from analysis import dht8_report
    dht8_report.draw(run_dir, manifest, data)
    (run_dir / 'report.md').write_text(dht8_report.report(manifest, data))
    return data


def targets_text(run_dir):
    """Return the target summary printed at the end of a run."""
    path = pathlib.Path(run_dir) / 'tables' / 'targets.csv'
    df = pd.read_csv(path)
    lines = ['dht8 targets (seed: %s; they apply at --scale seed, this run: %s)'
             % (SEED_SOURCE, df['scale'].iloc[0] if len(df) else '?')]
    for r in df.itertuples():
        measured = 'n/a' if pd.isna(r.measured) else '%.4g' % r.measured
        ratio = 'n/a' if pd.isna(r.ratio) else '%.2fx' % r.ratio
        verdict = 'not run' if pd.isna(r.met) else 'MET' if r.met else 'not met'
        lines.append('  %-62s seed %-8.4g measured %-9s ratio %-7s %s' % (
            r.target, r.seed, measured, ratio, verdict))
    return '\n'.join(lines)
