"""Analysis of the rudp experiment (seed 004): transfer time against block size, beside TCP,
uftp and iperf3, and goodput under loss.

Reads only ``manifest.json`` and ``logs/`` (``workloads/rudp_points.py`` names them) and
writes, byte-identical on every rebuild:

- ``tables/transfers.csv``: one row per point: mode, block, link, seconds and goodput as
  the mode's own tool measured them (ours: the sender from its first META to DONE, which
  comes only after the receiver checked the SHA-256; iperf3: ``end.sum_received``; uftp:
  the "time: N seconds" its log gives for the file), retransmissions and failures;
- ``tables/seed.csv``: the seed's seconds for 190 MB beside ours, scaled to 190 MB from
  this run's file (seconds x 190 MB / size), per block size and for TCP with 92 KB;
- ``tables/sweep.csv``: goodput per link configuration and mode, over the link rate and
  over TCP's goodput on the same link;
- ``tables/targets.csv``, ``tables/inputs.csv``; figures; ``report.md``.
"""

import json
import pathlib
import re

import pandas as pd

from analysis import figures, inputs, kvload_report, machine, targets as shared
from analysis.inputs import Inputs, as_dict, incomplete, read_manifest
from analysis.kvload_report import _table, figures_and_inputs
from analysis.stats import (PointJudge, cpu_bar, pooled_cpu, run_cpu_line, verdicts_line,
                            with_cpu_mark)
from analysis.tables import write_tables

SEED_SOURCE = 'seeds/004_5e4f43026e4f1d5b.txt'
SEED_BYTES = 190e6
SEED_SECONDS = {1: 794, 2: 492, 4: 389, 8: 268, 16: 168, 32: 80, 64: 72}
SEED_TCP = 160
POINT_KEYS = ('point', 'mode', 'config', 'size')
CPU = ['cpu_bound', 'cpu_verdict']      # of a row pooling points (stats.pooled_cpu)
UFTP_TIME = re.compile(r'Status: Completed\s+time:\s+([0-9.]+) seconds')
COLUMNS = ['point', 'repetition', 'config', 'mode', 'block', 'bw', 'delay_ms', 'loss',
           'size', 'ok', 'seconds', 'goodput_mbps', 'retransmitted', 'lost_percent',
           'cpu_bound', 'cpu_verdict', 'error']


def _ours(found, logs, tag, row):
    recs = [r for r in found.read('%s-send.jsonl' % tag, row['point'])
            if r.get('event') in ('done', 'error')]
    if not recs:
        found.missing('our sender logged no result (logs/%s-send.jsonl)' % tag, row['point'])
        return
    r = recs[-1]
    row.update(ok=r['event'] == 'done', seconds=r.get('seconds'),
               goodput_mbps=r.get('goodput_mbps'), retransmitted=r.get('retransmitted', 0),
               error=r.get('error'))


def _iperf(found, logs, tag, row):
    path = logs / ('%s-iperf3-client.json' % tag)
    try:
        end = json.loads(path.read_text())['end']
        total = end.get('sum_received') or end['sum']
        row.update(ok=True, seconds=total['seconds'],
                   goodput_mbps=total['bits_per_second'] / 1e6,
                   retransmitted=as_dict(end.get('sum_sent')).get('retransmits'),
                   lost_percent=total.get('lost_percent'))
    except FileNotFoundError:
        found.missing('iperf3 output missing (logs/%s-iperf3-client.json)' % tag, row['point'])
    except (ValueError, KeyError, TypeError):
        found.missing('iperf3 output unreadable (logs/%s-iperf3-client.json)' % tag,
                      row['point'])


def _uftp(found, logs, tag, row):
    path = logs / ('%s-uftp.log' % tag)
    try:
        match = UFTP_TIME.search(path.read_text(errors='replace'))
    except FileNotFoundError:
        found.missing('uftp log missing (logs/%s-uftp.log)' % tag, row['point'])
        return
    if match and float(match.group(1)) > 0:
        seconds = float(match.group(1))
        row.update(ok=True, seconds=seconds, goodput_mbps=row['size'] * 8 / seconds / 1e6)
    else:
        row.update(error='uftp did not report the file completed')


def tables(run_dir):
    """Return every table of an rudp run as DataFrames (nothing written)."""
    run_dir = pathlib.Path(run_dir)
    manifest = read_manifest(run_dir)
    logs = run_dir / 'logs'
    found = Inputs(logs)
    judge = PointJudge(found, manifest)
    rows = []
    for record, point, result in found.points(POINT_KEYS):
        row = {k: point.get(k) for k in COLUMNS if k in point}
        # the samples over the whole point (start-up included: a mark errs towards
        # CPU-bound), else the runner's reading of its timed parts
        _busy, _over, bound, verdict = judge(record.get('started'), record.get('t'), record)
        row.update(ok=False, error=None, cpu_bound=bound, cpu_verdict=verdict)
        tag = 'p%03d' % point['point']
        mode = point['mode']
        (_ours if mode in ('seed', 'window') else _uftp if mode == 'uftp' else _iperf)(
            found, logs, tag, row)
        problems = result.get('problems') or ([record['error']] if record.get('error')
                                              else [])
        if problems:
            row.update(ok=False, error='; '.join(problems))
        rows.append(row)
    df = pd.DataFrame(rows, columns=COLUMNS)
    data = {'transfers': df, 'seed': seed_table(df), 'sweep': sweep_table(df)}
    data['targets'] = targets(data)
    data['inputs'] = found.table()
    return data


def _mean(part, column):
    values = part.loc[part['ok'] == True, column].dropna()     # noqa: E712
    return float(values.mean()) if len(values) else None


def seed_table(df):
    """The seed's table beside ours, our seconds scaled to its 190 MB."""
    main = df[df['config'] == 0]
    out = []
    for label, part, seed in (
            [('B=%d' % b, main[(main['mode'] == 'seed') & (main['block'] == b)],
              SEED_SECONDS.get(b)) for b in sorted(set(main.loc[main['mode'] == 'seed',
                                                                  'block']))]
            + [('TCP 92 KB', main[main['mode'] == 'tcp92k'], SEED_TCP),
               ('TCP', main[main['mode'] == 'tcp'], None),
               ('windowed', main[main['mode'] == 'window'], None),
               ('uftp', main[main['mode'] == 'uftp'], None)]):
        if not len(part):
            continue
        seconds, size = _mean(part, 'seconds'), part['size'].iloc[0]
        out.append({'mode': label, 'block': part['block'].iloc[0] if label.startswith('B=')
                    else None, 'seed_seconds_190mb': seed,
                    'seconds': seconds, 'goodput_mbps': _mean(part, 'goodput_mbps'),
                    'seconds_190mb': seconds * SEED_BYTES / size if seconds else None,
                    'failed': int((~part['ok'].astype(bool)).sum()), **pooled_cpu(part)})
    return pd.DataFrame(out, columns=['mode', 'block', 'seed_seconds_190mb', 'seconds',
                                      'goodput_mbps', 'seconds_190mb', 'failed'] + CPU)


def sweep_table(df):
    """Goodput per configuration and mode, over the link rate and over TCP's."""
    out = []
    for config, part in df[df['mode'] != 'udp'].groupby('config'):
        tcp = _mean(part[part['mode'] == 'tcp'], 'goodput_mbps')
        for mode, rows in part.groupby('mode'):
            if mode == 'seed' and config == 0:
                rows = rows[rows['block'] == 32]
            good = _mean(rows, 'goodput_mbps')
            bw = rows['bw'].iloc[0]
            out.append({'config': config, 'delay_ms': rows['delay_ms'].iloc[0],
                        'loss': rows['loss'].iloc[0], 'bw': bw, 'mode': mode,
                        'goodput_mbps': good, 'over_bw': good / bw if good else None,
                        'over_tcp': good / tcp if good and tcp else None,
                        'failed': int((~rows['ok'].astype(bool)).sum()), **pooled_cpu(rows)})
    return pd.DataFrame(out, columns=['config', 'delay_ms', 'loss', 'bw', 'mode',
                                      'goodput_mbps', 'over_bw', 'over_tcp', 'failed'] + CPU)


def _at(sweep, delay, loss, mode):
    m = sweep[(sweep['config'] > 0) & (sweep['delay_ms'] == delay) & (sweep['loss'] == loss)
              & (sweep['mode'] == mode)]
    return m.iloc[0] if len(m) else None


def targets(data):
    """The issue's targets, as ratios measured in this run."""
    sweep, seed, rows = data['sweep'], data['seed'], []
    lossy, clean = _at(sweep, 5.0, 1.0, 'window'), _at(sweep, 5.0, 0.0, 'window')
    for name, row, col, ok in (
            ('windowed goodput / link rate, 5 ms, 1 % loss', lossy, 'over_bw',
             lambda v: v >= 0.85),
            ('windowed goodput / TCP goodput, 5 ms, 1 % loss', lossy, 'over_tcp',
             lambda v: v >= 3),
            ('windowed goodput / TCP goodput, 5 ms, no loss', clean, 'over_tcp',
             lambda v: v >= 0.9)):
        value = None if row is None else row[col]
        verdict, notes = shared.judge(value, value is not None and ok(value),
                                  0 if row is None else row['failed'],
                                  row is not None and str(row['cpu_bound']) == 'True')
        rows.append({'target': name, 'measured': value, 'goal': {
            'over_bw': '>= 0.85'}.get(col, '>= 3' if '1 %' in name else '>= 0.9'),
            'verdict': verdict, 'notes': notes})
    t = dict(zip(seed['block'], seed['seconds'])) if len(seed) else {}
    steep = t[32] / t[1] if t.get(1) and t.get(32) else None
    flat = t[64] / t[32] if t.get(32) and t.get(64) else None
    for name, value, ok, goal in (('seed mode: time at B=32 / at B=1 (steep fall)', steep,
                                   steep is not None and steep <= 0.2, '<= 0.2 (seed 0.10)'),
                                  ('seed mode: time at B=64 / at B=32 (flat after)', flat,
                                   flat is not None and flat >= 0.7, '>= 0.7 (seed 0.90)')):
        failed = int(seed['failed'].sum()) if len(seed) else 0
        bound = bool(len(seed)) and (seed['cpu_bound'] == True).any()  # noqa: E712
        verdict, notes = shared.judge(value, ok, failed, bool(bound))
        rows.append({'target': name, 'measured': value, 'goal': goal, 'verdict': verdict,
                     'notes': notes})
    df = data['transfers']
    ok = int(df['ok'].sum()) if len(df) else 0
    rows.append({'target': 'every transfer whole, its SHA-256 checked', 'measured': float(ok),
                 'goal': '%d of %d' % (len(df), len(df)),
                 'verdict': 'met' if len(df) and ok == len(df) else 'not met', 'notes': ''})
    return shared.frame(rows)


def targets_text(run_dir):
    """The targets of a built run as lines for the terminal."""
    return shared.text(run_dir, 'rudp', (52, 8, 20))


def draw(run_dir, data):
    """Time against block size (ours scaled, the seed's) and goodput against loss."""
    out, drawn = pathlib.Path(run_dir) / 'figures', {}
    seed = data['seed'].dropna(subset=['block'])
    if len(seed):
        long = pd.concat([
            seed[['block', 'seconds_190mb']].rename(columns={'seconds_190mb': 's'}).assign(
                series='ours (scaled to 190 MB)'),
            pd.DataFrame({'block': list(SEED_SECONDS), 's': list(SEED_SECONDS.values()),
                          'series': 'seed (190 MB, wireless)'})]).dropna()
        drawn['time_by_block'] = figures.lines_over_time(
            long, 'block', 's', 'series', out, 'time_by_block',
            'Transfer time against block size, one block at a time',
            'block size B (datagrams of 1,472 bytes, log scale)', 'seconds for 190 MB',
            logx=True)
    sweep = data['sweep'][data['sweep']['config'] > 0].dropna(subset=['goodput_mbps'])
    if len(sweep):
        long = sweep.assign(link=sweep['delay_ms'].map(lambda d: '%g ms' % d))
        drawn['goodput_by_loss'] = figures.lines_over_time(
            long, 'loss', 'goodput_mbps', 'mode', out, 'goodput_by_loss',
            'Goodput against loss (%g Mbit/s link)' % sweep['bw'].iloc[0],
            'loss (%)', 'goodput (Mbit/s)', reference=float(sweep['bw'].iloc[0]),
            reference_label='link rate', style='link')
    return drawn


def report(manifest, data, drawn):
    """report.md text."""
    p = manifest['params']
    df = data['transfers']
    lines = ['# Reliable UDP in blocks (rudp), next to seed 004', '',
             'Seed: `%s` (ADEN: 190 MB over a 300 Mbit/s home wireless network, Windows 7, '
             'Java). This run: scale `%s`, %s repetition(s), a %s-byte file; the '
             'wireless-like link %s Mbit/s, %s one way, jitter %s, loss %s %%; windowed '
             'mode %s blocks paced at %s Mbit/s; our receiver\'s reorder wait %s s; '
             'TCP (iperf3) congestion control %s; %s.' % (
                 SEED_SOURCE, p.get('scale'), p.get('repeat'), p.get('size'), p.get('bw'),
                 p.get('delay'), p.get('jitter'), p.get('loss'), p.get('window'),
                 p.get('rate'), p.get('reorder_wait'), p.get('congestion_control'),
                 kvload_report.network_text(manifest)), '',
             '- status: %s' % inputs.status(manifest),
             '- machine: %s' % machine.describe(manifest),
             run_cpu_line(manifest, '; CPU-bound points (the machine, not the link, may have '
                          'limited them): %s' % (', '.join(
                              '%d (%s)' % (r.point, r.mode) for r in df[
                                  df['cpu_bound'] == True].itertuples())  # noqa: E712
                              or 'none'))] + verdicts_line(
        df['cpu_verdict'], cpu_bar(manifest)) + [
             '- transfers: %d whole and checked, %d failed' % (
                 int(df['ok'].sum()) if len(df) else 0,
                 int((~df['ok'].astype(bool)).sum()) if len(df) else 0),
             '', '## Targets', ''] + _table(data['targets'], shared.COLUMNS, '%.3f')
    lines += ['', '## The seed\'s table beside ours', '',
              'Ours: seconds for this run\'s file and scaled to the seed\'s 190 MB (x 190 MB '
              '/ size; start-up makes small files look slower per byte).', '']
    lines += _table(with_cpu_mark(data['seed']), ['mode', 'block', 'seed_seconds_190mb',
                                                  'seconds', 'seconds_190mb', 'goodput_mbps',
                                                  'failed', 'cpu'], '%.2f')
    lines += ['', '## Goodput per link and mode', '']
    lines += _table(with_cpu_mark(data['sweep']), ['config', 'delay_ms', 'loss', 'mode',
                                                   'goodput_mbps', 'over_bw', 'over_tcp',
                                                   'failed', 'cpu'], '%.3f')
    bad = df[~df['ok'].astype(bool)] if len(df) else df
    if len(bad):
        lines += ['', '## Failed transfers', ''] + ['- point %d (%s): %s' % (
            r.point, r.mode, r.error) for r in bad.itertuples()]
    lines += figures_and_inputs(drawn, data['inputs'])
    return '\n'.join(lines) + '\n'


def build(run_dir):
    """Rewrite tables/, figures/ and report.md of an rudp run; return the tables."""
    run_dir = pathlib.Path(run_dir)
    manifest = read_manifest(run_dir)
    data = tables(run_dir)
    write_tables(run_dir, data, '%.4f')
    drawn = draw(run_dir, data)
    (run_dir / 'report.md').write_text(report(manifest, data, drawn))
    problem = incomplete(data['inputs'])
    if problem:
        raise problem
    return data
