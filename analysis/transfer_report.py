"""Targets and report.md of the transfer experiment, from the tables of ``analysis.transfer``.

Every target is a ratio measured in this one run: ours against iperf3 between the same
hosts in the same point, against the configured link rate, N connections against one, the
measured rate against the Mathis bound of the configured path. A target with a failed
transfer is never called met, and a CPU-bound measurement says so beside its verdict.
"""


import pandas as pd

from analysis import inputs, kvload_report, machine, targets as shared, transfer_seed
from analysis.kvload_report import _table, figures_and_inputs
from analysis.stats import cpu_bar, run_cpu_line, verdicts_line, with_cpu_mark
from analysis.tables import cell as _f, nan

IPERF_GOAL = 0.9        # files >= 10 MB at 1000-byte packets: R_x / iperf3 goodput
BW_GOAL = 0.9           # ... and R_x / configured link rate
SHARE_GOAL = 0.05       # N connections together within 5 % of one connection
JAIN_GOAL = 0.95
BIG = 10 * 1000 * 1000


def _worst(values, key=min):
    """The worst of the values that are numbers, or None."""
    values = [v for v in values if not nan(v)]
    return key(values) if values else None


def targets(data, manifest):
    """Return the targets table."""
    points = data['points']
    bound = bool(points['cpu_bound'].fillna(False).astype(bool).any()) if len(points) else False
    rows = []
    t1 = data['table1_size']
    big = t1[(t1['size'] >= BIG) & t1['rx_mbps'].notna()] if len(t1) else t1
    big_failed = int(big['failed'].sum()) if len(big) else 0
    big_bound = bool(big['cpu_bound'].any()) if len(big) else False
    for name, column, goal in (('R_x / iperf3 goodput, files >= 10 MB', 'rx_over_iperf',
                                IPERF_GOAL),
                               ('R_x / configured link rate, files >= 10 MB', 'rx_over_bw',
                                BW_GOAL)):
        worst = _worst(big[column]) if len(big) else None
        verdict, notes = shared.judge(worst, worst is not None and worst >= goal, big_failed,
                                  big_bound)
        rows.append({'target': name + ' (worst size)', 'measured': worst,
                     'goal': '>= %g' % goal, 'verdict': verdict, 'notes': notes})
    t3 = data['table3_load']
    many = t3[t3['conns'] > 1] if len(t3) else t3
    load_failed = int(t3['failed'].sum()) if len(t3) else 0
    load_bound = bool(t3['cpu_bound'].any()) if len(t3) else False
    ratios = list(many['aggregate_over_one']) if 'aggregate_over_one' in many else []
    worst = _worst(ratios, key=lambda v: max(v, key=lambda x: abs(x - 1)))
    verdict, notes = shared.judge(worst, worst is not None and abs(worst - 1) <= SHARE_GOAL,
                              load_failed, load_bound)
    one = t3.loc[t3['conns'] == 1, 'aggregate_mbps'] if len(t3) else []
    if worst is not None and worst > 1 + SHARE_GOAL and len(one):
        notes = '; '.join(filter(None, [notes, 'more than one connection moved: one alone '
                                        'left the link partly idle (%.0f Mbit/s from request '
                                        'to last byte)' % one.iloc[0]]))
    rows.append({'target': 'N connections together / one connection (furthest from 1)',
                 'measured': worst, 'goal': '1 +- %g' % SHARE_GOAL, 'verdict': verdict,
                 'notes': notes})
    worst = _worst(many['jain']) if len(many) else None
    verdict, notes = shared.judge(worst, worst is not None and worst >= JAIN_GOAL, load_failed,
                              load_bound)
    rows.append({'target': "Jain's index over N connections (lowest)", 'measured': worst,
                 'goal': '>= %g' % JAIN_GOAL, 'verdict': verdict, 'notes': notes})
    rows.append(_mathis_target(data['path'], 'sim' if inputs.simulated(manifest) else
                               manifest['params'].get('congestion_control')))
    conns = data['transfers']
    ok = int(conns['ok'].sum()) if len(conns) else 0
    verdict = 'no data' if not len(conns) else ('met' if ok == len(conns) else 'not met')
    rows.append({'target': 'every received file whole and its SHA-256 equal to the sent one',
                 'measured': float(ok), 'goal': '%d of %d' % (len(conns), len(conns)),
                 'verdict': verdict, 'notes': '%d failed' % (len(conns) - ok) if ok < len(
                     conns) else ''})
    cap = data['capture']
    good = int(cap['wire_ok'].sum()) if len(cap) else 0
    rows.append({'target': 'captured segments carry exactly one packet (none larger)',
                 'measured': float(good), 'goal': '%d of %d points' % (len(cap), len(cap)),
                 'verdict': 'no data' if not len(cap) else (
                     'met' if good == len(cap) else 'not met'),
                 'notes': ''})
    out = shared.frame(rows)
    if bound:
        out.attrs['cpu_bound'] = True
    return out


def _mathis_target(path, cc):
    """Under loss, the measured rate against the lower of the Mathis bound and the link.

    The bound models Reno's additive increase; cc (the senders' congestion control, 'sim'
    in a simulated run) says why a rate can exceed it: CUBIC and BBR grow faster, BBR does
    not slow for loss, and the simulator's streams have no congestion control at all."""
    lossy = path[path['loss'] > 0] if len(path) else path
    if not len(lossy) or lossy['rx_mbps'].isna().all():
        return {'target': 'under loss, rate / min(Mathis bound, link) within [0.5, 2]',
                'measured': None, 'goal': 'all points', 'verdict': 'no data', 'notes': ''}
    ratios = lossy['rx_over_limit']
    inside = [0.5 <= r <= 2 for r in ratios if not nan(r)]
    outside = lossy[[not (0.5 <= r <= 2) if not nan(r) else True for r in ratios]]
    why = []
    for r in outside.itertuples():
        if nan(r.rx_over_limit):
            why.append('%g ms %g %%: no rate' % (r.delay_ms, r.loss))
        elif r.rx_over_limit > 2 and cc == 'sim':
            why.append('%g ms %g %%: %.2f x the bound (the simulated stream has no congestion '
                       'control: a loss costs its repair, never a smaller window)' % (
                           r.delay_ms, r.loss, r.rx_over_limit))
        elif r.rx_over_limit > 2:
            why.append('%g ms %g %%: %.2f x the bound (%s %s the Reno model of Mathis\'s '
                       'formula)' % (r.delay_ms, r.loss, r.rx_over_limit, cc or 'the sender',
                                     'does not back off for loss as' if cc == 'bbr'
                                     else 'grows its window faster than'))
        else:
            why.append('%g ms %g %%: %.2f x the bound (retransmission timeouts the formula '
                       'leaves out, or a transfer too short to leave slow start)' % (
                           r.delay_ms, r.loss, r.rx_over_limit))
    failed = int(lossy['failed'].sum())
    verdict, notes = shared.judge(float(sum(inside)), len(outside) == 0, failed, False)
    return {'target': 'under loss, rate / min(Mathis bound, link) within [0.5, 2]',
            'measured': float(sum(inside)), 'goal': '%d of %d' % (len(lossy), len(lossy)),
            'verdict': verdict, 'notes': '; '.join(filter(None, [notes] + why))}


def targets_text(run_dir):
    """Return the targets of a built run as lines for the terminal."""
    return shared.text(run_dir, 'transfer', (64, 8, 14))


def _observations(data, manifest):
    """Each seed observation with what this run's data says about it."""
    params = manifest['params']
    t1, t2, t3 = data['table1_size'], data['table2_packet'], data['table3_load']
    out = []
    small = t1[(t1['size'] <= 500 * 1000) & t1['tx_mbps'].notna() & t1['rx_mbps'].notna()] \
        if len(t1) else t1
    if len(small):
        pairs = ', '.join('%s: T_x %s, R_x %s' % (_size(r.size), _f(r.tx_mbps, '%.0f'),
                                                    _f(r.rx_mbps, '%.0f'))
                          for r in small.itertuples())
        out.append('- **T_x < R_x for files under 500 KB (seed).** Here %s. A 1 KB file '
                   'leaves in one write and arrives in one read, so neither rate has a '
                   'duration: the seed\'s 17 and 431 for 1 KB measured timer resolution and '
                   'start-up, not the network.' % pairs)
    cold = t1.dropna(subset=['cold_tx_open_mbps']) if 'cold_tx_open_mbps' in t1 else t1.iloc[:0]
    if len(cold):
        out.append('- **The disk explains small files (seed: seek and rotation).** Tested here: '
                   'each size was sent warm (the file in the page cache) and cold (evicted '
                   'with fsync + POSIX_FADV_DONTNEED first), from `%s`. Sender\'s rate from '
                   'the open, warm against cold, and its time in file reads: %s. Where cold '
                   'is not slower, this disk (or its host\'s cache below the VM) answers '
                   'faster than the seed\'s spinning disk did.' % (
                       manifest.get('workdir_fs'), '; '.join(
                           '%s: %s / %s Mbit/s, %s / %s ms' % (
                               _size(r.size), _f(r.tx_open_mbps, '%.0f'),
                               _f(r.cold_tx_open_mbps, '%.0f'),
                               _f(_ms(r.warm_read_s), '%.2f'), _f(_ms(r.cold_read_s), '%.2f'))
                           for r in cold.itertuples())))
    big = t1.dropna(subset=['tx_mbps', 'rx_mbps']) if len(t1) else t1
    if len(big):
        r = big.iloc[-1]
        out.append('- **T_x against R_x.** At %s T_x was %s and R_x %s: a write returns once '
                   'the kernel has the bytes in its send buffer (up to %s bytes here), so T_x '
                   'times the buffer filling and comes near R_x only for files much larger '
                   'than that buffer.' % (
                       _size(r['size']), _f(r['tx_mbps'], '%.0f'), _f(r['rx_mbps'], '%.0f'),
                       (inputs.as_dict(manifest.get('tcp')).get('wmem') or '?').split(' ')[-1]))
    if len(t2) and t2['rx_mbps'].notna().sum() > 1:
        r = t2.dropna(subset=['rx_mbps'])
        out.append('- **Rates grow with packet size up to about 300 bytes, then stay flat '
                   '(seed).** Here R_x was %s Mbit/s at %d bytes and %s at %d bytes; iperf3 '
                   'with the same write size %s and %s. Below 300 bytes the per-write system '
                   'call, not the network, sets the pace (CPU-bound points: %s).' % (
                       _f(r['rx_mbps'].iloc[0], '%.0f'), r['packet'].iloc[0],
                       _f(r['rx_mbps'].iloc[-1], '%.0f'), r['packet'].iloc[-1],
                       _f(r['iperf_mbps'].iloc[0], '%.0f'), _f(r['iperf_mbps'].iloc[-1], '%.0f'),
                       ', '.join(str(p) for p in r.loc[r['cpu_bound'] == True, 'packet'])  # noqa: E712
                       or 'none'))
    if len(t3) and t3['rx_mbps'].notna().sum() > 1:
        r = t3.dropna(subset=['rx_mbps'])
        out.append('- **Each connection gets less as connections are added (seed: queueing '
                   'delay).** Here per-connection R_x went %s Mbit/s for %s connections, '
                   'while all connections together moved %s: the link is shared, not lost. '
                   'The seed\'s own Table 3 total grew from 578 to 1,425 (5 x 285), more than '
                   'its one-connection rate: its single connection did not fill the link.' % (
                       ' / '.join(_f(v, '%.0f') for v in r['rx_mbps']),
                       ' / '.join(str(n) for n in r['conns']),
                       ' / '.join(_f(v, '%.0f') for v in r['aggregate_mbps'])))
    return out


def _ms(seconds):
    """Seconds to milliseconds, None kept."""
    return None if nan(seconds) else 1000 * seconds


def _size(nbytes):
    """'1 KB', '10 MB' in the seed's decimal units."""
    return '%g MB' % (nbytes / 1e6) if nbytes >= 1e6 else '%g KB' % (nbytes / 1e3)


def report(manifest, data, drawn):
    """Return report.md text."""
    params = manifest['params']
    busy, over = cpu_bar(manifest)
    pts, conns = data['points'], data['transfers']
    lines = ['# TCP file transfer (transfer), next to seed 002', '',
             'Seed: `%s` (%s). This run: scale `%s`, %s repetition(s); main links %s Mbit/s, '
             '%s, loss %s %%; packets of %s bytes (Nagle %s, MSS clamped to one packet: %s); '
             'senders\' congestion control %s; path links %s Mbit/s; switch %s.' % (
                 transfer_seed.SOURCE, transfer_seed.MACHINE, params.get('scale'),
                 params.get('repeat'), params.get('bw'), params.get('delay'),
                 params.get('loss'), params.get('packet'),
                 'off' if params.get('nodelay') else 'on', params.get('segment'),
                 '%s (asked; the simulator\'s streams have none)' % params.get(
                     'congestion_control') if inputs.simulated(manifest) else
                 params.get('congestion_control'), params.get('path_bw'),
                 params.get('switch')), '',
             '- status: %s' % inputs.status(manifest),
             '- machine: %s' % machine.describe(manifest),
             '- TCP in the hosts\' namespaces (defaults): %s' % ', '.join('%s %s' % kv for kv in sorted(
                 inputs.as_dict(manifest.get('tcp')).items())),
             '- transfers: %d whole and checked, %d failed' % (
                 int(conns['ok'].sum()) if len(conns) else 0,
                 int((~conns['ok'].astype(bool)).sum()) if len(conns) else 0),
             run_cpu_line(manifest, '; a point is marked CPU-bound when more than %g %% of '
                          'its samples are over %g %% busy' % (100 * over, 100 * busy))]
    lines += verdicts_line(pts['cpu_verdict'] if 'cpu_verdict' in pts else [], (busy, over))
    if inputs.simulated(manifest):
        lines.append('- backend: simulation (`repronet.sim`, virtual time): iperf3, the capture '
                     'and the cold-read points did not run; no CPU monitor; the stream model '
                     'has no slow start or congestion control (DESIGN.md)')
    hot = pts[pts['cpu_bound'] == True] if len(pts) else pts  # noqa: E712
    if len(hot):
        lines.append('- CPU-bound points (the machine, not the network, limited them): %s' % (
            ', '.join('%d (%s)' % (r.point, r.kind) for r in hot.itertuples())))
    lines += ['', '## Targets', ''] + _table(data['targets'], shared.COLUMNS, '%.3f')
    lines += ['', 'Rates are Mbit/s, the seed\'s bits per microsecond. T_x: bytes over the '
              'sender\'s first..last write; R_x: over the receiver\'s first..last read; '
              'iperf3: `iperf3 -R` between the same hosts in the same point '
              '(`end.sum_received`). Means over repetitions; a dash is no measurement (a '
              'transfer of one write or read has no duration).', '']
    for name, title, cols in (
            ('table1_size', 'Table 1: rate against file size',
             ['size', 'seed_tx_mbps', 'seed_rx_mbps', 'tx_mbps', 'rx_mbps', 'rx_min',
              'rx_max', 'iperf_mbps', 'rx_over_iperf', 'rx_over_bw', 'cold_tx_open_mbps',
              'cold_rx_mbps', 'failed', 'cpu']),
            ('table2_packet', 'Table 2: rate against packet size',
             ['packet', 'seed_tx_mbps', 'seed_rx_mbps', 'tx_mbps', 'rx_mbps', 'iperf_mbps',
              'rx_over_iperf', 'failed', 'cpu']),
            ('table3_load', 'Table 3: simultaneous connections (per connection, and all)',
             ['conns', 'seed_tx_mbps', 'seed_rx_mbps', 'tx_mbps', 'rx_mbps',
              'aggregate_mbps', 'aggregate_over_one', 'jain', 'failed', 'cpu']),
            ('table4_iperf', 'Table 4: iperf3 -P N (per stream, and all)',
             ['conns', 'seed_iperf_mean_mbps', 'seed_iperf_sum_mbps',
              'iperf_stream_mean_mbps', 'iperf_mbps', 'iperf_jain']),
            ('path', 'Beyond the seed: delay and loss, with the bounds',
             ['delay_ms', 'loss', 'rtt_ms', 'bdp_bytes', 'mathis_mbps', 'limit_mbps',
              'rx_mbps', 'iperf_mbps', 'rx_over_limit', 'failed']),
            ('capture', 'Segments on the wire (scapy capture on the sender)',
             ['packet', 'size', 'segments', 'exact', 'split_writes', 'expected_exact', 'larger',
              'sizes_seen', 'wire_ok'])):
        df = data[name]
        df = with_cpu_mark(df) if 'cpu_bound' in df else df
        if len(df):
            lines += ['', '## %s' % title, ''] + _table(df, [c for c in cols if c in df], '%.2f')
    lines += ['', '## The seed\'s observations against this run', ''] + _observations(
        data, manifest)
    lines += figures_and_inputs(drawn, data['inputs'])
    return '\n'.join(lines) + '\n'
