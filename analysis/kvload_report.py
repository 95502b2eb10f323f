"""Targets and report.md of the kvload experiment, from the tables of ``analysis.kvload``.

Every target is a ratio measured in this one run (ours against Redis under the same load
generator, or under ``redis-benchmark``), never a figure from another machine. A target
with failed operations is never called met, and one measured while the CPU was the limit
says so beside its verdict.
"""

import pathlib

import pandas as pd

from analysis import inputs, machine, targets as shared
from analysis.tables import cell as _f, nan
from analysis.kvload_seed import (OP_NAMES, OPS, SEED_MACHINE, SEED_REQUESTS, SEED_SOURCE,
                                  aggregate_ops_per_s)
from analysis.stats import cpu_bar, run_cpu_line, verdicts_line, with_cpu_mark

P50_GOAL = 1.5          # one sequential client: our p50 within 1.5x of Redis's
BENCH_GOAL = 0.5        # redis-benchmark -c 50 unpipelined: at least half of Redis's rate


def _row(response, server, clients, op, layout='local'):
    """Return the response row of (server, clients, op, layout) or None."""
    m = response[(response['server'] == server) & (response['clients'] == clients) &
                 (response['op'] == op) & (response['layout'] == layout)]
    return m.iloc[0] if len(m) else None


def targets(data):
    """Return the targets table (ratios measured in this run)."""
    resp, ratio, bench = data['response'], data['bench_ratio'], data['bench']
    rows = []
    for op in OPS:
        ours, redis = _row(resp, 'ours', 1, op), _row(resp, 'redis', 1, op)
        value = (ours['p50_ms'] / redis['p50_ms']) if ours is not None and \
            redis is not None and redis['p50_ms'] else None
        failed = sum(int(r['failed']) for r in (ours, redis) if r is not None)
        bound = any(bool(r['cpu_bound']) for r in (ours, redis) if r is not None)
        verdict, notes = shared.judge(value, value is not None and value <= P50_GOAL, failed,
                                      bound)
        rows.append({'target': 'one sequential client, %s: p50 ours / Redis' % op,
                     'measured': value, 'goal': '<= %g' % P50_GOAL, 'verdict': verdict,
                     'notes': notes})
    for b in ('c50', 'c50p16'):
        for test in ('SET', 'GET'):
            m = ratio[(ratio['bench'] == b) & (ratio['test'] == test)]
            value = m['ours_over_redis'].iloc[0] if len(m) else None
            bound = bool(len(bench) and bench[(bench['bench'] == b) & (
                bench['kind'] == 'bench')]['cpu_bound'].map(lambda v: v is True).any())
            if b == 'c50':
                verdict, notes = shared.judge(value, not nan(value) and value >= BENCH_GOAL, 0,
                                          bound)
                goal = '>= %g' % BENCH_GOAL
            else:
                verdict, notes, goal = ('reported' if not nan(value) else 'no data'), (
                    'CPU-bound' if bound else ''), '-'
            rows.append({'target': 'redis-benchmark -c 50%s %s: ours / Redis requests/s' % (
                ' -P 16' if b == 'c50p16' else '', test), 'measured': value, 'goal': goal,
                'verdict': verdict, 'notes': notes})
    local = resp[resp['layout'] == 'local']
    if len(local):
        n = int(local['clients'].max())
        for server in ('ours', 'redis'):
            r = _row(resp, server, n, 'set')
            value = r['point_ops_per_s'] if r is not None else None
            failed = int(local[(local['server'] == server) & (local['clients'] == n)][
                'failed'].sum())
            notes = ['seed: %.0f requests/s with %d clients' % (aggregate_ops_per_s(n), n)] \
                if n in range(1, 9) else []
            if failed:
                notes.append('%d failed operations' % failed)
            if r is not None and bool(r['cpu_bound']):
                notes.append('CPU-bound: the machine, not the store, was the limit')
            rows.append({'target': '%d clients, %s: aggregate requests/s (all phases)' % (
                n, 'ours' if server == 'ours' else 'Redis'), 'measured': value, 'goal': '-',
                'verdict': 'reported' if not nan(value) else 'no data',
                'notes': '; '.join(notes)})
    return shared.frame(rows)


def targets_text(run_dir):
    """The targets of a built run as lines for the terminal."""
    return shared.text(run_dir, 'kvload')


def _table(df, columns, fmt='%.4f'):
    """Return a Markdown table of df's columns."""
    out = ['| %s |' % ' | '.join(columns), '|%s|' % '|'.join('---' for _ in columns)]
    for r in df[columns].itertuples(index=False):
        out.append('| %s |' % ' | '.join(
            (_f(v, fmt) if isinstance(v, float) else str(v)) for v in r))
    return out


def figures_and_inputs(drawn, missing):
    """A report's closing sections: the figure files drawn, then any input missing."""
    lines = ['', '## Figures', '']
    for name, saved in sorted(drawn.items()):
        lines += ['- `figures/%s`' % pathlib.Path(p).name for p in saved]
    if len(missing):
        lines += ['', '## Inputs missing or unreadable', '']
        lines += ['- %s' % p for p in missing['problem']]
    return lines


def _why_seed_is_fast(data):
    """Whether a networked store reached the seed's one-client figures in this run, and
    what the seed's 0.021-0.029 ms per request most likely measured."""
    resp, bench = data['response'], data['bench']
    seed = data['seed']
    said = ['The seed reports 0.021 to 0.029 ms per sequential request with one client '
            '(34K requests/s).']
    for server, name in (('redis', 'Redis'), ('ours', 'Our store')):
        rows = seed[(seed['clients'] == 1) & seed['%s_ms_per_request' % server].notna()]
        if not len(rows):
            continue
        reached = (rows['%s_ms_per_request' % server] <= rows['seed_ms_per_request']).sum()
        said.append('%s, with one client of our load generator on another emulated host '
                    '(local layout), took %s ms per request (set, get, del) and reached the '
                    'seed\'s figure in %d of %d operations.' % (
                        name, ', '.join(_f(v, '%.4f') for v in
                                        rows['%s_ms_per_request' % server]),
                        reached, len(rows)))
    c1 = bench[(bench['bench'] == 'c1') & (bench['server'] == 'redis')] if len(bench) \
        else bench
    if len(c1):
        said.append('redis-benchmark -c 1 against Redis had a p50 of %s ms.' % (
                        _f(c1['p50_ms'].mean(), '%.3f')))
    said.append('A sequential client waits one round trip per request, so its rate is set '
                'by how fast two processes wake each other: with client and server pinned to '
                'one CPU a loopback request took 0.021-0.027 ms on this project\'s 2-core '
                'machine, on two CPUs three to five times longer (benchmarks/kv_placement.py; '
                'docs/experiments.md, kvload). The seed\'s figures are therefore plausible for a small store on '
                'an idle machine and measure mostly the round trip, not the store: compare '
                'the spread between repetitions and client counts here.')
    return ' '.join(said)


def _lan(resp, params, manifest):
    """One sentence on the LAN layout: configured round trip against measured p50."""
    lan = resp[(resp['layout'] == 'lan') & (resp['clients'] == 1)]
    if not len(lan):
        return []
    try:
        from repronet.emu.linkemu_params import parse_time_ms
        rtt = 4 * parse_time_ms(params.get('lan_delay'), 'lan_delay', 'kvload')
    except ValueError:
        return []
    return ['', 'LAN layout: each request crosses two links each way, %.3f ms of configured '
            'round-trip delay; one client\'s p50 was %s ms (ours) and %s ms (Redis). The '
            '%s' % (rtt, _f(_p50(lan, 'ours'), '%.3f'), _f(_p50(lan, 'redis'), '%.3f'),
                    _LAN_REST[inputs.simulated(manifest)])]


_LAN_REST = {False: 'rest is the hosts\' stacks and the delay daemons (the machine line above '
             'says how late they released packets; docs/link-emulation.md has the measurements).',
             True: 'rest is serialisation at the link rate in the simulator\'s network model '
             '(no processing time unless --sim-cost charges it).'}


def network_text(manifest):
    """How the run's network was made: the emulated switch, or the simulator and what it
    charged for processing (a simulated run has no switch)."""
    params = inputs.as_dict(manifest.get('params'))
    if inputs.simulated(manifest):
        return 'simulated (repronet.sim), processing cost %s' % (
            params.get('sim_cost') or 'none')
    return 'switch %s' % params.get('switch')


def _p50(rows, server):
    """Median of the p50s of a server's rows, or None."""
    m = rows[rows['server'] == server]['p50_ms']
    return m.median() if len(m) else None


def report(manifest, data, drawn):
    """Return report.md text."""
    params = manifest['params']
    busy, over = cpu_bar(manifest)
    resp = data['response']
    lines = ['# Key-value store under load (kvload), next to seed 001', '',
             'Seed: `%s` (%s; %d requests per client and operation). This run: scale `%s`, '
             '%s repetition(s), %s requests per client and operation, pipeline %s, '
             'layouts %s (LAN: %s Mbit/s, %s per link), appendfsync %s, our cache %s/%s, '
             'storage %s; %s.' % (
                 SEED_SOURCE, SEED_MACHINE, SEED_REQUESTS, params.get('scale'),
                 params.get('repeat'), params.get('requests'), params.get('pipeline'),
                 params.get('layouts'), params.get('lan_bw'), params.get('lan_delay'),
                 params.get('appendfsync'), params.get('cache'), params.get('cache_size'),
                 params.get('storage'), network_text(manifest)), '',
             '- status: %s' % inputs.status(manifest),
             '- machine: %s' % machine.describe(manifest),
             '- our server\'s event loop: %s' % (', '.join(
                 str(x) for x in manifest.get('kv_server_loops') or []) or 'not recorded'),
             run_cpu_line(manifest, '; a point is marked CPU-bound when more than %g %% of '
                          'its samples are over %g %% busy' % (100 * over, 100 * busy))]
    lines += verdicts_line(data['cpu']['cpu_verdict'] if 'cpu' in data else [], (busy, over))
    if len(resp):
        failed = int(data['clients']['failed'].sum())
        lines.append('- requests: %d ok, %d failed' % (int(data['clients']['ok'].sum()), failed))
        hot = resp[resp['cpu_bound'].map(lambda v: v is True)]
        if len(hot):
            lines.append('- CPU-bound load points (the machine, not the store, limited them): '
                         '%s' % ', '.join(sorted({'%s %s %d clients' % (
                             r.server, r.layout, r.clients) for r in hot.itertuples()})))
    lines += ['', '## Targets', ''] + _table(data['targets'], shared.COLUMNS)
    lines += ['', '## Time per request beside the seed (local layout)', '',
              'ms per request = a client\'s total time for its requests of one operation / '
              'its requests, averaged over clients and repetitions (the seed\'s "Avg" row '
              'divided by 100,000).', '']
    seed = data['seed']
    seed = seed[seed['clients'] <= (resp['clients'].max() if len(resp) else 8)]
    lines += _table(seed, ['clients', 'op', 'seed_ms_per_request',
                                   'ours_ms_per_request', 'redis_ms_per_request',
                                   'ours_over_redis', 'ours_p50_ms', 'redis_p50_ms'])
    lines += ['', '## Every layout', ''] + _table(with_cpu_mark(resp), [
        'server', 'layout', 'clients', 'op', 'avg_total_ms', 'ms_per_request', 'p50_ms',
        'p99_ms', 'point_ops_per_s', 'failed', 'cpu']) + _lan(resp, params, manifest)
    lines += ['', '## redis-benchmark (a load generator nobody here wrote)', '']
    lines += _table(with_cpu_mark(data['bench_ratio']), ['bench', 'test', 'ours_rps',
                                                          'redis_rps', 'ours_over_redis',
                                                          'cpu'], '%.3f')
    lines += ['', '## Durability: SET throughput per appendfsync policy', '',
              '`always` acknowledges a write only after an fsync that covers it (group '
              'commit); `everysec` fsyncs once a second; `no` leaves it to the kernel.', '']
    lines += _table(with_cpu_mark(data['fsync']), ['server', 'appendfsync', 'set_rps',
                                                    'relative_to_no', 'cpu'], '%.3f')
    prof = data.get('profile')
    if prof is not None and len(prof):
        lines += ['', '## Where our server spends its time', '',
                  'cProfile of our server under redis-benchmark -c 50 -P 16 (the shape where '
                  'it is furthest behind Redis); own time per function, top %d. The profiler '
                  'slows the server, so this point is in no ratio.' % len(prof), '']
        lines += _table(prof.assign(own_share=100 * prof['own_share']),
                        ['rank', 'function', 'calls', 'own_s', 'own_share'], '%.3f')
        lines[-len(prof) - 2] = lines[-len(prof) - 2].replace('own_share', 'own_share (%)')
    lines += ['', '## What the seed measured', '', _why_seed_is_fast(data)]
    lines += figures_and_inputs(drawn, data['inputs'])
    lines += ['', 'Operations: %s.' % ', '.join('%s = %s' % (k, v)
                                               for k, v in OP_NAMES.items())]
    return '\n'.join(lines) + '\n'
