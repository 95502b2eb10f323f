"""Figures of the dht8 experiment, from the tables of ``analysis.dht8``.

Drawn by ``analysis.figures`` (the one seaborn module), through its public figure kinds
only: time against concurrent operations (ours and the seed's), time per operation against
concurrent clients, bytes/s per file-size set and against file size, centralized against
decentralized, REGISTER messages on the wire, and the time to recover from each failover
fault (kill, hang, cut) against the clients' ``--timeout``. A table without rows draws
nothing; missing values draw as gaps, never as an error.
"""

import math

import pandas as pd

from analysis import figures
from analysis.inputs import number
from analysis.tables import nan
from analysis.dht8_seed import SIZE_LABELS


def draw(run_dir, manifest, data):
    """Draw every figure whose table has rows; return {name: what analysis.figures
    saved}, whose ``.drawn`` says what each figure shows (the tests read it)."""
    out = run_dir / 'figures'
    params = manifest['params']
    saved = {}
    _part1(saved, out, data.get('part1', pd.DataFrame()))
    _part2(saved, out, data, params)
    p3 = data.get('part3', pd.DataFrame())
    if len(p3):
        df = p3.assign(**{
            'total operations': p3['concurrent_clients'] * p3['ops_per_client'],
            'series': p3['variant'] + ', ' + p3['system'] + ' (' +
            p3['servers'].astype(str) + ')'})
        saved['part3_centralized_vs_decentralized'] = figures.lines_over_time(
            df, 'total operations', 'total_time_s', 'series', out,
            'part3_centralized_vs_decentralized',
            'Part III: centralized (1 server) against decentralized',
            'total operations (all clients)', 'average total time per client (s)')
    cap = data.get('capture', pd.DataFrame())
    if len(cap):
        files = cap['files_N'].max()
        saved['capture_messages'] = figures.bars_with_spread(
            cap.rename(columns={'register_messages': 'REGISTER messages per peer'}),
            'mode', 'REGISTER messages per peer', out, 'capture_messages',
            'REGISTER messages per peer on the servers\' wires (K=%d servers, N=%s '
            'files)' % (cap['servers_K'].iloc[0], '?' if nan(files) else '%d' % files),
            'register mode', 'messages per peer')
    _failover(saved, out, data.get('failover', pd.DataFrame()), params)
    return saved


def _part1(saved, out, p1):
    """Part I: time against operations (ours and the seed's), time per operation."""
    if not len(p1):
        return
    rows = []
    for r in p1.itertuples():
        total = r.concurrent_clients * r.ops_per_client
        rows.append({'total operations': total, 'total time (s)': r.total_time_s,
                     'series': 'ours', 'op': r.variant,
                     'clients': r.concurrent_clients, 'ms': r.time_per_op_ms})
        if not nan(r.seed_total_time_s):
            rows.append({'total operations': r.concurrent_clients * 10000,
                         'total time (s)': r.seed_total_time_s,
                         'series': 'seed', 'op': r.variant,
                         'clients': r.concurrent_clients,
                         'ms': r.seed_time_per_op_ms})
    df = pd.DataFrame(rows)
    fast = df[df['op'] != 'download']
    saved['part1_time_vs_operations'] = figures.lines_over_time(
        fast, 'total operations', 'total time (s)', 'op', out,
        'part1_time_vs_operations', 'Part I: register and search, time against '
        'concurrent operations', 'total operations (all clients)',
        'average total time per client (s)', style='series')
    downloads = df[df['op'] == 'download']
    if len(downloads):
        saved['part1_download_time_vs_operations'] = figures.lines_over_time(
            downloads, 'total operations', 'total time (s)', 'op',
            out, 'part1_download_time_vs_operations',
            'Part I: download, time against concurrent operations',
            'total files downloaded (all clients)', 'average total time per client (s)',
            style='series')
    saved['part1_time_per_operation'] = figures.lines_over_time(
        fast, 'clients', 'ms', 'op', out, 'part1_time_per_operation',
        'Part I: time per operation', 'concurrent clients', 'ms per operation', style='series')


def _part2(saved, out, data, params):
    """Part II: bytes/s per set against the link, and against file size beside the seed."""
    p2 = data.get('part2', pd.DataFrame())
    if not len(p2):
        return
    many = p2['concurrent_clients'].max()
    pts = data['points']
    pts = pts[(pts['part'] == 'II') & (pts['concurrent_clients'] == many)].copy()
    letter = pts['fileset'].str[-1]
    pts['set'] = letter + ' ' + letter.map(lambda s: SIZE_LABELS.get(s, '?'))
    pts['MB/s per peer'] = pts['bytes_per_s_per_client'] / 1e6
    bw = number(params.get('bw'))
    saved['part2_bytes_per_s'] = figures.bars_with_spread(
        pts, 'set', 'MB/s per peer', out, 'part2_bytes_per_s',
        'Part II: download rate per peer by file size, %d peers' % many,
        'file set (size of each file)', 'MB/s per peer',
        reference=bw / 8 if bw else None,
        reference_label='link %g Mbit/s' % bw)
    rows = []
    for r in p2[p2['concurrent_clients'] == many].itertuples():
        if nan(r.file_size_bytes) or not r.file_size_bytes > 0:
            continue
        x = math.log10(r.file_size_bytes)
        rows.append({'log10 size': x, 'MB/s': r.bytes_per_s_per_client / 1e6,
                     'series': 'ours (%d peers)' % many})
        rows.append({'log10 size': x, 'MB/s': r.seed_bytes_per_s / 1e6,
                     'series': 'seed (8 peers)'})
    if rows:
        saved['part2_bytes_per_s_vs_size'] = figures.lines_over_time(
            pd.DataFrame(rows), 'log10 size', 'MB/s', 'series', out,
            'part2_bytes_per_s_vs_size', 'Part II: bytes/s against file size, ours '
            'and the seed\'s', 'log10 of file size (bytes)', 'MB/s per peer',
            xlim_zero=False)


def _failover(saved, out, fo, params):
    """Failover: time to recover per fault kind, each repetition a dot, against --timeout."""
    if not len(fo) or fo['recovery_ms'].isna().all():
        return
    timeout = number(params.get('timeout'), None)
    timeout_ms = None if timeout is None else 1000 * timeout
    saved['failover_recovery'] = figures.bars_with_spread(
        fo.dropna(subset=['recovery_ms']).rename(columns={
            'recovery_ms': 'time to recover (ms)'}),
        'fault', 'time to recover (ms)', out, 'failover_recovery',
        'Failover: longest search wait after one index server fails',
        'fault (kill: SIGKILL, hang: SIGSTOP, cut: link down)', 'time to recover (ms)',
        reference=timeout_ms, reference_label='client --timeout')
