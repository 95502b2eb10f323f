"""The cross-validation tables of ``analysis.crosscheck``: simulated against emulated, per
configuration, from the two runs' own tables.

dht8 (``tables/points.csv`` of each run, one row per point and repetition): a configuration
is (part, variant, servers, concurrent clients, file set); the file set is part of it because
Part II's points differ only in their set. Parts I, II, III and the ping checks are compared;
``capture`` does not run in simulation and ``failover`` points differ only by a fault kind
that ``points.csv`` does not carry, so neither is. Per configuration: the emulated time per
operation as a mean over repetitions with its spread (sd, min, max), the simulated mean, the
ratio sim / emu and the target of issue 13 (|ratio - 1| <= 0.15), whether any emulated
repetition was CPU-bound (such rows are a section of their own: there the emulation measured
the machine, not the network; a point's verdict is the emulated run's own ``cpu_bound``,
made from the CPU samples inside its timed part or, for a part shorter than a sample, the
runner's precise reading of it: ``analysis.stats.point_cpu``) with the mean busy share, the
p50 latencies, failed operations and missing clients of
both, and, for a row outside the target, the mechanical reasons this module can see.

fidelity (``rtt.csv``, ``loss.csv``, ``goodput.csv``): one row per measure and configured
point, configured against emulated against simulated. The simulation side is read leniently:
a table, column or row it lacks is "not measured (simulation)", never an error.

The emulation's SPREAD is the range (min..max) of its repetitions; a simulated mean outside
it differs by more than the emulation's own noise. With one repetition there is no spread.
"""

import math

import pandas as pd

from analysis.tables import nan

TARGET = 0.15           # issue 13: simulated per-operation time within 15 % of emulated
_SLACK = 1e-9           # 0.85 / 1.0 - 1 is -0.15000000000000002 in binary floating point
DHT8_KEY = ('part', 'variant', 'servers', 'concurrent_clients', 'fileset')
DHT8_PARTS = ('I', 'II', 'III', 'ping')
UNCONGESTED, CPU_BOUND = 'uncongested', 'cpu-bound'
DHT8_COLUMNS = (('section',) + DHT8_KEY + (
    'emu_repeats', 'emu_time_per_op_ms', 'emu_time_per_op_ms_sd', 'emu_time_per_op_ms_min',
    'emu_time_per_op_ms_max', 'sim_repeats', 'sim_time_per_op_ms', 'sim_over_emu',
    'emu_spread_pct', 'within_target', 'beyond_emu_spread', 'emu_cpu_bound_repeats',
    'emu_cpu_verdicts', 'emu_cpu_busy', 'emu_lat_p50_ms', 'sim_lat_p50_ms', 'lat_p50_sim_over_emu',
    'emu_failed', 'sim_failed',    'emu_missing_clients', 'sim_missing_clients', 'why'))
NOT_SIMULATED = 'not measured (simulation)'
# measure, table, key columns, configured column, measured column, kinds (None: all)
FIDELITY = (
    ('median RTT (ms)', 'rtt', ('shape', 'kind', 'delay_ms', 'jitter_ms'),
     'configured_rtt_ms', 'median_rtt_ms', None),
    ('RTT std (ms)', 'rtt', ('shape', 'kind', 'delay_ms', 'jitter_ms'),
     'configured_rtt_std_ms', 'std_rtt_ms', ('jitter',)),
    ('one-way loss (%)', 'loss', ('shape', 'kind', 'configured_loss_pct'),
     'configured_loss_pct', 'measured_loss_pct', None),
    ('goodput (Mbit/s)', 'goodput', ('shape', 'kind', 'proto', 'bw', 'delay_ms'),
     'bw', 'goodput_mbps', None),
)


def _norm(value):
    """A key cell as a comparable value: numbers as float, missing as None, else text."""
    if nan(value):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return str(value)


def _order(key):
    """Sort key for a tuple of normalised cells: numbers in numeric order, then text."""
    return tuple((0, v, '') if isinstance(v, float) else (2, 0, '') if v is None
                 else (1, 0, v) for v in key)


def groups(df, keys):
    """Return {normalised key tuple: rows} of df; {} when df lacks a key column."""
    if df is None or df.empty or any(k not in df.columns for k in keys):
        return {}
    out = {}
    for i, row in enumerate(df[list(keys)].itertuples(index=False)):
        out.setdefault(tuple(_norm(v) for v in row), []).append(i)
    return {k: df.iloc[rows] for k, rows in out.items()}


def stats(rows, column):
    """Return (mean, sd, min, max, n) of a column's numbers (NaN where undefined)."""
    if column not in rows.columns:
        return (math.nan,) * 4 + (0,)
    values = pd.to_numeric(rows[column], errors='coerce').dropna()
    n = len(values)
    if not n:
        return (math.nan,) * 4 + (0,)
    return (float(values.mean()), float(values.std(ddof=1)) if n > 1 else math.nan,
            float(values.min()), float(values.max()), n)


def ratio(sim, emu):
    """sim / emu, NaN when either is missing or emu is 0."""
    return math.nan if nan(sim) or nan(emu) or emu == 0 else sim / emu


def within(r):
    """The target: |ratio - 1| <= 15 % (None without a ratio)."""
    return None if nan(r) else bool(abs(r - 1) <= TARGET + _SLACK)


def spread_pct(low, high, mean, n):
    """The emulation's range over its repetitions in % of its mean (NaN: fewer than 2)."""
    if n < 2 or nan(low) or nan(high) or nan(mean) or mean == 0:
        return math.nan
    return 100.0 * (high - low) / mean


def beyond_spread(sim, low, high, n):
    """True when sim lies outside the emulation's min..max (None: fewer than 2 repetitions)."""
    if n < 2 or nan(sim) or nan(low):
        return None
    return bool(sim < low or sim > high)


def _bound_count(rows):
    """(repetitions the emulation marked CPU-bound, repetitions with a CPU verdict)."""
    if 'cpu_bound' not in rows.columns:
        return 0, 0
    known = [str(v) for v in rows['cpu_bound'] if not nan(v)]
    return sum(v in ('True', '1', '1.0') for v in known), len(known)


def _total(rows, column):
    """Sum of a count column (0 when the table lacks it)."""
    if column not in rows.columns:
        return 0
    return int(pd.to_numeric(rows[column], errors='coerce').fillna(0).sum())


def _side(rows):
    """One run's figures of one dht8 configuration."""
    mean, sd, low, high, n = stats(rows, 'time_per_op_ms')
    ops = sorted({int(v) for v in pd.to_numeric(rows.get('ops_per_client'),
                                                errors='coerce').dropna()}) \
        if 'ops_per_client' in rows.columns else []
    bound, verdicts = _bound_count(rows)
    return {'repeats': len(rows), 'time': mean, 'sd': sd, 'min': low, 'max': high, 'n': n,
            'p50': stats(rows, 'lat_p50_ms')[0], 'failed': _total(rows, 'failed'),
            'missing': _total(rows, 'missing_clients'), 'ops': ops, 'bound': bound,
            'verdicts': verdicts, 'busy': stats(rows, 'cpu_busy')[0]}


def model_reasons(key, r, costs):
    """What the simulator's model leaves out that shows in this row (phrases): known
    causes, named by the variant, the servers and clients of the row and whether the
    simulated run charged a processing cost (its manifest's params.sim_costs)."""
    row = dict(zip(DHT8_KEY, key))
    variant, why = str(row.get('variant')), []
    if nan(r):
        return why
    if not costs:
        if r < 1:
            why.append('the simulated run charged no processing (no --sim-cost): its time '
                       'is the network\'s alone, the emulation\'s adds the nodes\', the '
                       'kernel\'s and the delay daemons\' work per message')
        return why
    if any(k.endswith('/byte') for k in costs):
        return _per_byte_reasons(row, variant, r, costs)
    if r < 1 and 'batched' in variant and 'unbatched' not in variant:
        why.append('a batched REGISTER carries hundreds of names in one message, and '
                   '--sim-cost charges per callback, not per name')
    elif r < 1 and variant == 'download':
        why.append('a download reads a file and sends it in many writes; --sim-cost charges '
                   'per callback, not per byte read or sent')
    elif r < 1 and variant == 'register unbatched':
        why.append('an unbatched REGISTER (store an entry, answer) costs more than the '
                   'search --sim-cost was measured on')
    if r > 1 and row.get('servers') == 1 and (row.get('concurrent_clients') or 0) > 2:
        why.append('one index server serves every client, and --sim-cost charges it as '
                   'much per callback as a client (half a measured search each), more than '
                   'the emulated server spends, so its one simulated thread saturates first')
    return why


def _per_byte_reasons(row, variant, r, costs):
    """model_reasons for a run charged per callback and per byte received (the model
    analysis.sim_cost fits on Part I's one-client points)."""
    why, one = [], row.get('servers') == 1
    if r > 1 and one and 'batched' in variant and 'unbatched' not in variant:
        why.append('the per-byte (per-name) cost was fitted on 250-500-name REGISTERs and '
                   'a single 2,000-name one costs the emulation less per name%s; with one '
                   'index server all of the charge falls on its one simulated thread, which '
                   'then serialises the clients' % (
                       '' if any(k.endswith('/first') for k in costs) else
                       ' (each of Part I\'s REGISTERs is the first request on its '
                       'connection, and without a /first charge that cost is fitted per '
                       'name: analysis.sim_warmth)'))
    elif r < 1 and variant == 'register unbatched':
        why.append('an unbatched REGISTER (store an entry, answer) costs the emulation more '
                   'than a search of its size, and the model charges both alike')
    elif variant == 'download' and r > 1:
        why.append('the fitted per-callback cost is charged to all five callbacks of a '
                   'download (its search, GET, file), more than the emulation spends there')
    elif variant == 'download':
        why.append('the peer\'s reading and sending of each file is charged to the '
                   'receiving client per byte, so the one peer\'s own load is left out')
    if r > 1 and one and variant == 'search' and (row.get('concurrent_clients') or 0) > 1:
        why.append('one index server serves every client and is charged the same per '
                   'callback as a client, so its one simulated thread saturates first')
    return why


def dht8_reasons(e, s, spread, key=(), r=float('nan'), costs=None):
    """Return the mechanical reasons for a row outside the target (a list of phrases)."""
    why = model_reasons(key, r, costs) if key else []
    if e['bound']:
        why.append('the emulation was CPU-bound in %d of %d repetition(s)'
                   % (e['bound'], e['repeats']))
    for side, name in ((e, 'emulation'), (s, 'simulation')):
        if nan(side['time']):
            why.append('the %s has no per-operation time (no client summary with a '
                       'successful operation)' % name)
        if side['failed']:
            why.append('%d operation(s) failed in the %s' % (side['failed'], name))
        if side['missing']:
            why.append('%d client summar(y/ies) missing in the %s' % (side['missing'], name))
    if e['ops'] and s['ops'] and e['ops'] != s['ops']:
        why.append('operations per client differ (emulation %s, simulation %s)'
                   % ('/'.join(map(str, e['ops'])), '/'.join(map(str, s['ops']))))
    if spread is False:
        why.append('the simulated time lies within the emulation\'s own range over its '
                   'repetitions (%.4g..%.4g ms, %.0f %% of their mean): the emulation\'s '
                   'noise here is wider than the miss' % (
                       e['min'], e['max'], spread_pct(e['min'], e['max'], e['time'], e['n'])))
    return why


def dht8_table(emu_points, sim_points, costs=None):
    """Return (rows of crosscheck_dht8, rows of crosscheck_dht8_unmatched) as DataFrames;
    costs: the simulated run's --sim-cost ({} or None: none charged)."""
    def parts(df):
        if df is None or df.empty or 'part' not in df.columns:
            return df
        return df[df['part'].astype(str).isin(DHT8_PARTS)]
    emu, sim = groups(parts(emu_points), DHT8_KEY), groups(parts(sim_points), DHT8_KEY)
    rows = []
    for key in sorted(set(emu) & set(sim), key=_order):
        e, s = _side(emu[key]), _side(sim[key])
        r = ratio(s['time'], e['time'])
        spread = beyond_spread(s['time'], e['min'], e['max'], e['n'])
        met = within(r)
        p50 = ratio(s['p50'], e['p50'])
        row = dict(zip(('section',) + DHT8_KEY, (CPU_BOUND if e['bound'] else UNCONGESTED,)
                       + key))
        row.update({
            'emu_repeats': e['repeats'], 'emu_time_per_op_ms': e['time'],
            'emu_time_per_op_ms_sd': e['sd'], 'emu_time_per_op_ms_min': e['min'],
            'emu_time_per_op_ms_max': e['max'], 'sim_repeats': s['repeats'],
            'sim_time_per_op_ms': s['time'], 'sim_over_emu': r,
            'emu_spread_pct': spread_pct(e['min'], e['max'], e['time'], e['n']),
            'within_target': met,
            'beyond_emu_spread': spread, 'emu_cpu_bound_repeats': e['bound'],
            'emu_cpu_verdicts': e['verdicts'], 'emu_cpu_busy': e['busy'],
            'emu_lat_p50_ms': e['p50'],
            'sim_lat_p50_ms': s['p50'], 'lat_p50_sim_over_emu': p50,
            'emu_failed': e['failed'], 'sim_failed': s['failed'],
            'emu_missing_clients': e['missing'], 'sim_missing_clients': s['missing'],
            'why': '; '.join(dht8_reasons(e, s, spread, key, r, costs))
            if met is not True else ''})
        rows.append(row)
    rows.sort(key=lambda row: row['section'] != UNCONGESTED)     # stable: key order kept
    unmatched = [dict(zip(('only_in',) + DHT8_KEY, (side,) + key))
                 for side, mine, other in (('emulation', emu, sim), ('simulation', sim, emu))
                 for key in sorted(set(mine) - set(other), key=_order)]
    return (pd.DataFrame(rows, columns=DHT8_COLUMNS),
            pd.DataFrame(unmatched, columns=('only_in',) + DHT8_KEY))


def dht8_summary(table):
    """Return the summary sentence: uncongested rows meeting the target, the worst ratio."""
    if table.empty:
        return 'no dht8 configuration is in both runs'
    free = table[(table['section'] == UNCONGESTED) & table['sim_over_emu'].notna()]
    bound = table[table['section'] == CPU_BOUND]
    text = '%d of %d uncongested configuration(s) meet the target (simulated time per ' \
        'operation within %g %% of emulated)' % (int(free['within_target'].astype(bool).sum()),
                                                  len(free), TARGET * 100)
    if len(free):
        worst = free.loc[(free['sim_over_emu'] - 1).abs().idxmax()]
        text += '; worst ratio sim/emu %.3f (%s)' % (worst['sim_over_emu'], label(worst))
        text += _noise(free)
    unjudged = int((free['emu_cpu_verdicts'] == 0).sum())
    if unjudged:
        text += '; %d of the uncongested without a CPU verdict (timed part shorter than a ' \
            'CPU sample, and no precise reading of it)' % unjudged
    return text + '; %d CPU-bound configuration(s) set apart' % len(bound)


def _noise(free):
    """'; of the N misses, K lie within ...' for the uncongested rows that miss the target
    inside the emulation's own range over its repetitions ('' when none does)."""
    missed = free[free['within_target'] != True]         # noqa: E712 (None: no ratio)
    noisy = missed[missed['beyond_emu_spread'] == False]  # noqa: E712 (None: 1 repetition)
    if not len(noisy):
        return ''
    spread = noisy['emu_spread_pct']
    return ('; of the %d miss(es), %d lie within the emulation\'s own range over its '
            'repetitions (which spans %.0f-%.0f %% of their mean there, so 15 %% is not '
            'resolved)' % (len(missed), len(noisy), spread.min(), spread.max()))


def label(row):
    """'part I, register batched, 4 servers, 2 clients, part1' for a dht8 row."""
    return 'part %s, %s, %g server(s), %g client(s), %s' % (
        row['part'], row['variant'], row['servers'], row['concurrent_clients'], row['fileset'])


def _setting(keys, key):
    """'delay_ms 20, jitter_ms 0' from the key cells after shape and kind."""
    return ', '.join('%s %s' % (k, '%g' % v if isinstance(v, float) else v)
                     for k, v in zip(keys[2:], key[2:]))


def _sampling(e_rows, s_rows):
    """For loss rows: the phrase saying both sides' lost counts lie inside the configured
    loss's 99 % binomial interval (fidelity's ``inside_99``), or None.

    A rare loss gives small counts (0.1 % of 20,000 probes: 20 expected, 99 % interval about
    9..33), so two honest runs differ by far more than 15 % (seen: 16 emulated, 29 simulated).
    When both sit inside the interval, neither side is wrong about the configured loss."""
    needed = ('inside_99', 'lost', 'lost_lo99', 'lost_hi99')
    if any(rows is None or not set(needed) <= set(rows.columns) or rows.empty
           for rows in (e_rows, s_rows)):
        return None
    if not all(str(v) in ('True', '1', '1.0') for rows in (e_rows, s_rows)
               for v in rows['inside_99']):
        return None
    lost = lambda rows: '/'.join('%d' % v for v in rows['lost'])     # noqa: E731
    return ('both lost counts (emulated %s, simulated %s) lie inside the configured loss\'s '
            '99 %% binomial interval (%d..%d): the difference is sampling noise, not the link '
            'model' % (lost(e_rows), lost(s_rows), min(e_rows['lost_lo99'].min(),
                                                        s_rows['lost_lo99'].min()),
                       max(e_rows['lost_hi99'].max(), s_rows['lost_hi99'].max())))


def fidelity_reasons(configured, e, s, sampling=None):
    """Return the mechanical reasons for a fidelity row outside 15 % (phrases); sampling is
    ``_sampling``'s phrase for a loss row."""
    if nan(s):
        return [NOT_SIMULATED]
    why = [sampling] if sampling else []
    if nan(configured):
        return why
    if configured == 0:
        why.append('configured value is 0: the ratio compares what the hosts add of their '
                   'own, not the link model')
    elif not nan(e) and abs(e / configured - 1) > abs(s / configured - 1):
        why.append('the emulation is further from the configured value (emu/configured '
                   '%.3f, sim/configured %.3f)' % (e / configured, s / configured))
    return why


def fidelity_table(emu_tables, sim_tables):
    """Return crosscheck_fidelity: per measure and configured point, configured, emu, sim."""
    rows = []
    for measure, table, keys, configured, measured, kinds in FIDELITY:
        emu_df, sim_df = emu_tables.get(table), sim_tables.get(table)
        if kinds is not None:
            emu_df, sim_df = (df[df['kind'].isin(kinds)] if df is not None and 'kind' in
                              df.columns else df for df in (emu_df, sim_df))
        emu, sim = groups(emu_df, keys), groups(sim_df, keys)
        for key in sorted(set(emu) | set(sim), key=_order):
            e_rows, s_rows = emu.get(key), sim.get(key)
            mean, sd, low, high, n = stats(e_rows, measured) if e_rows is not None \
                else (math.nan,) * 4 + (0,)
            s_mean, _, _, _, s_n = stats(s_rows, measured) if s_rows is not None \
                else (math.nan,) * 4 + (0,)
            setting = (e_rows if e_rows is not None else s_rows)
            conf = stats(setting, configured)[0]
            r = ratio(s_mean, mean)
            note = '' if e_rows is not None else 'not in the emulation run'
            if nan(s_mean):
                note = NOT_SIMULATED
            elif within(r) is False:
                note = '; '.join(fidelity_reasons(
                    conf, mean, s_mean, _sampling(e_rows, s_rows) if table == 'loss' else None))
            rows.append({'measure': measure, 'shape': key[0], 'kind': key[1],
                         'setting': _setting(keys, key), 'configured': conf,
                         'emu': mean, 'emu_sd': sd, 'emu_repeats': n, 'sim': s_mean,
                         'sim_repeats': s_n, 'sim_over_emu': r,
                         'emu_over_configured': ratio(mean, conf),
                         'sim_over_configured': ratio(s_mean, conf),
                         'within_15pct': within(r),
                         'beyond_emu_spread': beyond_spread(s_mean, low, high, n),
                         'note': note})
    return pd.DataFrame(rows)
