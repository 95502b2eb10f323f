"""Targets, figures and report.md of the kvscale experiment (seed 003).

The seed gives graphs without numbers, so the report sets its *statements* (what its
authors expected, what they observed and how they explained it) beside the measured
figures and says, for each, whether this run's data supports it.
"""

import pathlib

from analysis import figures, inputs, kvload_report, machine, targets as shared
from analysis.stats import cpu_bar, run_cpu_line, verdicts_line, with_cpu_mark
from analysis.tables import cell, nan

IMBALANCE_TARGET = 1.1


def _failed_note(df):
    """' (N operations failed)' when any did, else ''."""
    failed = int(df['failed'].sum()) if len(df) else 0
    return ' (%d operations or steps failed)' % failed if failed else ''


def hit_rate_target(cache):
    """Rows: LFU >= LRU >= FIFO hit rate at each cache size, with the gaps."""
    rows = []
    for size, g in cache.groupby('cache_size', sort=True):
        rate = dict(zip(g['cache'], g['hit_rate']))
        lfu, lru, fifo = rate.get('lfu'), rate.get('lru'), rate.get('fifo')
        if any(nan(v) for v in (lfu, lru, fifo)):
            continue
        failed = int(g['failed'].sum())
        met = lfu >= lru >= fifo and not failed
        rows.append(shared.row(
            'hit rate LFU >= LRU >= FIFO, cache %d' % size, min(lfu - lru, lru - fifo),
            '>= 0 (the smaller gap)', shared.met_word(bool(met)),
            'LFU %.3f, LRU %.3f, FIFO %.3f (gaps %+.3f, %+.3f)%s' % (
                lfu, lru, fifo, lfu - lru, lru - fifo, _failed_note(g))))
    return rows


def imbalance_target(points, vnodes):
    """Rows: measured key imbalance at the largest server count, with vnodes and with one."""
    rows = []
    part = points[points['kind'].isin(['scale', 'skew'])]
    if not len(part):
        return rows
    largest = part['servers'].max()
    for v in sorted(part['vnodes'].dropna().unique(), reverse=True):
        g = part[(part['servers'] == largest) & (part['vnodes'] == v)]
        if not len(g) or g['keys_imbalance'].isna().all():
            continue
        worst = g['keys_imbalance'].max()
        want = v == vnodes and largest >= 10
        rows.append(shared.row(
            ('key imbalance (max/mean) <= %.1f with %d virtual nodes at %d servers'
             % (IMBALANCE_TARGET, v, largest)) if want else
            ('key imbalance with %d virtual node(s) at %d servers (reported)' % (v, largest)),
            worst, '<= %.1f' % IMBALANCE_TARGET if want else '-',
            shared.met_word(bool(worst <= IMBALANCE_TARGET) and not int(g['failed'].sum()))
            if want else 'reported',
            'worst %.3f over %d points%s' % (worst, len(g), _failed_note(g))))
    return rows


def throughput_target(throughput):
    """Rows: throughput grows with servers until the CPUs saturate; where that is.

    Judged at the largest client count only: a closed loop of one client (or ten) has
    at most that many requests in flight, so its throughput stops growing once the
    servers wait on the clients, with CPUs to spare; those rows are reported."""
    rows = []
    most = throughput['clients'].max() if len(throughput) else None
    for (server, klass, clients), g in throughput.groupby(['server', 'class', 'clients'],
                                                          sort=True):
        if len(g) < 2:
            continue
        g = g.sort_values('servers')
        counts = [int(n) for n in g['servers']]
        stops = [int(n) for n, s in zip(g['servers'], g['saturated']) if s]
        bound = [int(n) for n, b in zip(g['servers'], g['cpu_bound']) if b]
        text = ', '.join('%d: %.0f/s' % (n, r) for n, r in zip(g['servers'], g['ops_per_s'])
                         if not nan(r))
        first_stop = stops[0] if stops else None
        before = counts[counts.index(first_stop) - 1] if stops else None
        # met: throughput grew up to where it stopped, and it stopped only where the
        # machine's CPUs were saturated, at that server count or the one before (or never);
        # CPUs saturated at some other count do not explain the stop
        met = bool(not stops or first_stop in bound or before in bound)
        rates = [r for r in g['ops_per_s'] if not nan(r)]
        rows.append(shared.row(
            ('throughput grows with servers until the CPUs saturate '
             '(%s, %s, %d clients)' if clients == most else
             'throughput against servers (%s, %s, %d clients; reported: '
             'fewer clients than the largest count)') % (server, klass, clients),
            rates[-1] / rates[0] if len(rates) > 1 and rates[0] else None,
            'grows until the CPUs saturate (measured: most servers / fewest)'
            if clients == most else '-',
            shared.met_word(met) if clients == most else 'reported',
            '%s; growth stops at %s; CPU-bound at %s' % (
                text, first_stop or 'never', ','.join(map(str, bound)) or 'none')))
    return rows


def targets(data):
    """The issue's targets, measured: the one targets table (analysis.targets); the
    figures behind each measured number are in its notes."""
    points = data['points']
    vnodes = int(points['vnodes'].max()) if len(points) else 0
    rows = (hit_rate_target(data['cache']) + imbalance_target(points, vnodes)
            + throughput_target(data['throughput']))
    failed = int(points['failed'].sum()) if len(points) else 0
    rows.append(shared.row('no operation or step failed', failed, '0',
                           shared.met_word(failed == 0), '%d failed' % failed))
    return shared.frame(rows)


def targets_text(run_dir):
    """The targets of a finished run as printable lines."""
    lines = ['kvscale targets (%s):' % run_dir]
    for r in shared.read(run_dir).itertuples():
        verdict = {'met': 'MET', 'not met': 'NOT MET'}.get(r.verdict, r.verdict)
        lines.append('  [%s] %s: %s' % (verdict, r.target, r.notes or cell(
            None if r.measured == '' else float(r.measured))))
    return '\n'.join(lines)


def draw(run_dir, data):
    """Draw the kvscale figures; return {name: figures.Saved}."""
    out = pathlib.Path(run_dir) / 'figures'
    drawn = {}
    resp = data['response']
    scale = resp[resp['vnodes'] == resp['vnodes'].max()] if len(resp) else resp
    for op, label in (('get', 'GET'), ('set', 'PUT (SET)')):
        for clients in sorted(scale['clients'].unique()) if len(scale) else []:
            part = scale[scale['clients'] == clients]
            part = part.assign(series=part['server'] + ' ' + part['class'])
            name = 'response_%s_c%d' % (op, clients)
            drawn[name] = figures.lines_over_time(
                part, 'servers', '%s_mean_ms' % op, 'series', out, name,
                'Mean %s response time, %d client(s)' % (label, clients), 'servers',
                'mean response time (ms)')
    if len(scale):
        part = scale.assign(series=scale['server'] + ' ' + scale['class'] + ' ' +
                            scale['clients'].astype(str) + ' clients')
        drawn['p99_get'] = figures.lines_over_time(
            part, 'servers', 'get_p99_ms', 'series', out, 'p99_get',
            '99th percentile GET response time', 'servers', 'p99 (ms)')
    thr = data['throughput']
    if len(thr):
        part = thr.assign(series=thr['server'] + ' ' + thr['class'] + ' ' +
                          thr['clients'].astype(str) + ' clients')
        drawn['throughput'] = figures.lines_over_time(
            part, 'servers', 'ops_per_s', 'series', out, 'throughput',
            'Throughput of the 80/20 mix against servers', 'servers', 'operations/s')
    cache = data['cache']
    if len(cache):
        drawn['hit_rate'] = figures.lines_over_time(
            cache, 'cache_size', 'hit_rate', 'cache', out, 'hit_rate',
            'Cache hit rate, 10 clients on 2 servers', 'cache entries per server',
            'hit rate')
    keys = data['keys']
    part = keys[(keys['server'] == 'ours') & (keys['servers'] == keys['servers'].max())] \
        if len(keys) else keys
    if len(part):
        n = int(part['servers'].max())
        part = part.assign(index=part['host'].str.lstrip('s').astype(int),
                           series=part['vnodes'].astype(int).astype(str) + ' vnodes')
        part = part.groupby(['series', 'index'], as_index=False)['key_share'].mean()
        drawn['keys'] = figures.lines_over_time(
            part, 'index', 'key_share', 'series', out, 'keys',
            'Share of the keys on each of %d servers (DBSIZE)' % n, 'server s<i>',
            'share of keys', reference=1.0 / n, reference_label='even share')
    return drawn


SEED_CLAIMS = [
    ('More servers make GETs faster (more capacity, more cache, smaller database).',
     'get_faster'),
    ('More servers make PUTs faster.', 'set_faster'),
    ('Each server has its own cache, so the hit rate rises with servers.', 'hits_rise'),
    ('More clients make GET and PUT slower.', 'clients_slower'),
    ('Keys were not spread evenly over the servers (the observed irregularity).', 'skew'),
    ('Slower servers held more keys.', 'slow_more'),
    ('LFU has the best hit rate of the three policies (scenario 4).', 'lfu_best'),
]


def _slow_count(n):
    """'1 of 2 slow' for n servers of the mixed class (every third, from the first)."""
    return '%d of %d slow' % (len(range(1, n + 1, 3)), n)


def claims(data):
    """{claim id: one sentence of what this run says about it}."""
    resp, cache = data['response'], data['cache']
    out = {}
    homo = resp[(resp['class'] == 'homogeneous') & (resp['vnodes'] == resp['vnodes'].max())
                & (resp['server'] == 'ours')] if len(resp) else resp

    def trend(col):
        parts = []
        for c, g in homo.groupby('clients', sort=True):
            g = g.sort_values('servers')
            if len(g) >= 2:
                parts.append('%d clients: %s ms from %d to %d servers' % (
                    c, ' -> '.join(cell(v) for v in g[col]), g['servers'].iloc[0],
                    g['servers'].iloc[-1]))
        return '; '.join(parts) or 'not measured in this run'
    out['get_faster'] = 'Ours, homogeneous, mean GET: ' + trend('get_mean_ms')
    out['set_faster'] = 'Ours, homogeneous, mean SET: ' + trend('set_mean_ms')
    out['hits_rise'] = 'Hit rate (LFU 100): ' + trend('hit_rate').replace(' ms', '')
    by_clients = homo.groupby('clients')['get_mean_ms'].mean() if len(homo) else []
    out['clients_slower'] = 'Mean GET over all server counts per client count: ' + (
        ', '.join('%d: %s ms' % (c, cell(v)) for c, v in by_clients.items())
        if len(by_clients) else 'not measured')
    imb = resp.groupby('vnodes')['keys_imbalance'].max() if len(resp) else []
    out['skew'] = 'Worst key imbalance (max/mean) per virtual-node count: ' + (
        ', '.join('%d vnodes: %s' % (v, cell(i)) for v, i in imb.items())
        if len(imb) else 'not measured')
    skew = resp[(resp['class'] == 'mixed') & (resp['servers'] > 1) &
                (resp['server'] == 'ours') & (resp['vnodes'] == 1)] if len(resp) else resp
    parts = []
    for _, one in skew.sort_values('servers').iterrows():
        n = int(one['servers'])
        many = resp[(resp['class'] == 'mixed') & (resp['server'] == 'ours') &
                    (resp['servers'] == n) & (resp['clients'] == one['clients']) &
                    (resp['vnodes'] != 1)]
        text = '%d servers (%s, even share %.2f): 1 vnode %s of the keys, GET %s ms' % (
            n, _slow_count(n), len(range(1, n + 1, 3)) / n, cell(one['slow_key_share']),
            cell(one['get_mean_ms']))
        for _, r in many.iterrows():
            text += '; %d vnodes %s, GET %s ms' % (r['vnodes'], cell(r['slow_key_share']),
                                                   cell(r['get_mean_ms']))
        parts.append(text)
    out['slow_more'] = ('Ours, mixed class, %d clients, share of the keys on the slow '
                        'servers and mean GET: ' % skew['clients'].max() if len(skew)
                        else '') + (' | '.join(parts) or 'not measured')
    out['lfu_best'] = 'Hit rates: ' + ('; '.join(
        'cache %d: %s' % (size, ', '.join('%s %s' % (p, cell(h)) for p, h in
                                          zip(g['cache'], g['hit_rate'])))
        for size, g in cache.groupby('cache_size')) if len(cache) else 'not measured')
    return out


def _limits(manifest):
    """'cgroup v2 cpu.max, period 10000 us' from the manifest's CPU-limit record."""
    if inputs.simulated(manifest):
        return 'not applied: %s' % kvload_report.network_text(manifest)
    limits = (manifest.get('mechanisms') or {}).get('cpu_limits') or {}
    if not limits.get('mechanism'):
        return 'CPU-limit mechanism not recorded'
    period = limits.get('period_us')
    return 'cgroup %s, %s' % (limits['mechanism'], 'period %d us' % period if period else
                              'period 10 ms, longer for limits under 0.1 core')


def _table(df, columns):
    """A markdown table of the given columns (numbers with 3 decimals)."""
    if not len(df):
        return '(no rows)\n'
    lines = ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
    for _, r in df.iterrows():
        lines.append('| ' + ' | '.join(cell(r[c]) if isinstance(r[c], float) else str(r[c])
                                       for c in columns) + ' |')
    return '\n'.join(lines) + '\n'


def report(manifest, data, drawn):
    """report.md: machine, targets, the seed's statements against ours, tables, figures."""
    p = manifest.get('params') or {}
    lines = ['# kvscale: a partitioned KV store over 1 to 10 servers (seed 003)', '',
             '- status: %s' % inputs.status(manifest),
             '- machine: %s' % machine.describe(manifest),
             run_cpu_line(manifest)] + verdicts_line(
        data['points']['cpu_verdict'], cpu_bar(manifest)) + [
             '',
             'Servers: "Pi 3" class %s cores, "Pi 1" class %s cores (%s); links %s Mbit/s; '
             '%s keys (%s), Zipf %s; %s s of 80/20 mix per point; %s virtual nodes.' % (
                 p.get('fast_cores'), p.get('slow_cores'),
                 _limits(manifest),
                 p.get('bw'), p.get('keys'), p.get('dataset'), p.get('zipf'),
                 p.get('duration'), p.get('vnodes')),
             'Redis runs as a Redis Cluster whose slots follow the same ring as ours, so both '
             'partition keys identically. Points marked CPU-bound had the machine\'s CPUs '
             'saturated during the mix: their times measure the machine, not the store.', '',
             '## Targets', '', _table(data['targets'], shared.COLUMNS),
             '## The seed\'s statements against this run', '']
    said = claims(data)
    for text, key in SEED_CLAIMS:
        lines.append('- **Seed:** %s  \n  **Here:** %s' % (text, said.get(key, '-')))
    lines += ['', 'The seed\'s own scenario 4 text names "FIFO, LRU, LRU" and says LRU performs '
              'best while explaining LFU; we read it as LFU.', '',
              '## Response time (scenarios 1-3)', '',
              _table(with_cpu_mark(data['response']), [
                  'server', 'class', 'vnodes', 'clients', 'servers', 'get_mean_ms', 'get_p99_ms',
                  'set_mean_ms', 'set_p99_ms', 'ops_per_s', 'hit_rate', 'keys_imbalance',
                  'busiest_server_cpu', 'failed', 'cpu']),
              '## Cache policies (scenario 4)', '',
              _table(data['cache'], ['cache', 'cache_size', 'hit_rate', 'get_mean_ms',
                                     'get_p99_ms', 'failed']),
              '## Slot shares of the ring (computed)', '',
              _table(data['ring'], ['servers', 'vnodes', 'slot_imbalance', 'min_share',
                                    'max_share']),
              '## Throughput against servers', '',
              _table(with_cpu_mark(data['throughput']), [
                  'server', 'class', 'clients', 'servers', 'ops_per_s', 'gain_over_previous',
                  'saturated', 'cpu']),
              '## Figures', '']
    for name, saved in sorted(drawn.items()):
        lines.append('![%s](figures/%s.png)' % (name, name))
    missing = data['inputs']
    if len(missing):
        lines += ['', '## Missing inputs', '', _table(missing, list(missing.columns))]
    return '\n'.join(lines) + '\n'
