"""dht8's summary tables from the points table of ``analysis.dht8_logs``, the seed beside them.

Part I, II and III average a point's figures over ``--repeat`` with their spread (sd, min,
max); each keeps the operations that failed, the clients whose summary is missing, and
whether any repetition was CPU-bound, because the targets table reads them from here: a
target is met only when the measured figure beats the seed's *and* no operation failed
or went missing. Rows have a fixed order, so the same logs give the same tables.
"""

import pandas as pd

from analysis import targets
from analysis.dht8_seed import GOODPUT_TARGET, SEED_PART1, SEED_PART2, SEED_PING, TARGETS


def any_bound(values):
    """True if any value is True, False if all known values are False, None if none known."""
    known = [bool(v) for v in values if v is not None and not pd.isna(v)]
    return any(known) if known else None


def _spread(df, keys, value):
    """Return mean, sd, min, max and n of value per keys group, in key order."""
    g = df.dropna(subset=[value]).groupby(keys, sort=True)[value]
    out = g.agg(['mean', 'std', 'min', 'max', 'count']).reset_index()
    return out.rename(columns={'mean': value, 'std': value + '_sd', 'min': value + '_min',
                               'max': value + '_max', 'count': 'repeats'})


def _health(df, keys):
    """Return per keys group: failed operations, missing clients, any CPU-bound repetition."""
    return df.groupby(keys, sort=True).agg(
        failed=('failed', 'sum'), missing_clients=('missing_clients', 'sum'),
        cpu_bound=('cpu_bound', any_bound)).reset_index()


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
        ok=('ok', 'sum'), cpu_busy=('cpu_busy', 'mean')).reset_index()
    out = out.merge(extra, on=keys).merge(_health(df, keys), on=keys)
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
    df = points[(points['part'] == 'II') & points['fileset'].str[-1].isin(
        list(SEED_PART2))].copy()
    if df.empty:
        return pd.DataFrame()
    df['set'] = df['fileset'].str[-1]
    df['s_per_file'] = df['time_per_op_ms'] / 1000
    keys = ['set', 'concurrent_clients', 'ops_per_client']
    out = _spread(df, keys, 'bytes_per_s_per_client')
    for value in ('total_time_s', 's_per_file'):
        out = out.merge(_spread(df, keys, value).drop(columns=['repeats']), on=keys)
    out = out.merge(_health(df, keys), on=keys)
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


def _notes(failed, missing, bound):
    """What stands beside a target's verdict: failures, missing clients, CPU-bound."""
    notes = []
    if not pd.isna(failed) and failed:
        notes.append('%d failed operation%s' % (failed, '' if failed == 1 else 's'))
    if not pd.isna(missing) and missing:
        notes.append('%d client summar%s missing' % (missing, 'y' if missing == 1 else 'ies'))
    if str(bound) == 'True':
        notes.append('CPU-bound')
    return ', '.join(notes)


def _verdict(beats, row):
    """The verdict: met when the figure beats the seed with no failed or missing operation,
    'no data' without a figure."""
    if beats is None:
        return 'no data'
    return 'met' if beats and not row['failed'] and not row['missing_clients'] else 'not met'


def targets_table(params, part1, part2):
    """Return the seed targets (analysis.targets' table): measured figure, the seed's as the
    goal, failures and the CPU-bound note beside the verdict. The rows of TARGETS come
    first, in its order, then the large-file goodput row: :func:`seed_figures` relies on it."""
    rows = []
    for name, seed_ms in TARGETS:
        row = dict(target='%s, ms per op, 1 peer' % name, measured=None,
                   goal='< %g (seed), none failed' % seed_ms, verdict='no data')
        sel = part1[(part1['variant'] == name) & (part1['concurrent_clients'] == 1)] \
            if len(part1) else part1
        if len(sel):
            r = sel.iloc[0]
            m = r['time_per_op_ms']
            row.update(measured=m, verdict=_verdict(None if pd.isna(m) else m < seed_ms, r),
                       notes=_notes(r['failed'], r['missing_clients'], r['cpu_bound']))
        rows.append(row)
    if len(part2):
        solo = part2[part2['concurrent_clients'] == 1]
        big = solo if len(solo) else part2
        r = big.sort_values('file_size_bytes').iloc[-1]
        f = r['fraction_of_link']
        rows.append(dict(
            target='large-file goodput (set %s, %d peer(s)), fraction of %g Mbit/s'
            % (r['set'], r['concurrent_clients'], r['link_mbps']), measured=f,
            goal='>= %g (seed), none failed' % GOODPUT_TARGET,
            verdict=_verdict(None if f is None or pd.isna(f) else f >= GOODPUT_TARGET, r),
            notes=_notes(r['failed'], r['missing_clients'], r['cpu_bound'])))
    return targets.frame(rows)


def seed_figures(table):
    """[(seed figure, ratio)] of each row of a targets table of :func:`targets_table`:
    ms per op (ratio seed / ours), then the goodput fraction (ratio ours / seed)."""
    seeds = [seed for _, seed in TARGETS] + [GOODPUT_TARGET]
    out = []
    for i, m in enumerate(table['measured']):
        m = None if m == '' or pd.isna(m) else float(m)
        seed = seeds[i] if i < len(seeds) else None
        if m is None or seed is None:
            out.append((seed, None))
        else:
            out.append((seed, (seed / m if m else None) if i < len(TARGETS) else m / seed))
    return out
