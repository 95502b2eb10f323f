"""Figures and report.md of the dht8 experiment, from the tables of ``analysis.dht8``.

Kept apart from the table code so each module stays small. Figures are drawn by
``analysis.figures`` (the one seaborn module): time against concurrent operations (ours and
the seed's), time per operation against concurrent clients, bytes/s per file-size set, and
centralized against decentralized. The report puts our numbers next to the seed's, says
which targets were met, and says when the machine's CPU, not the emulated network, was the
limit (a point whose CPU samples were over the 65 % busy bar for more than a tenth of them).
"""

import math

import pandas as pd

from analysis import figures
from analysis.dht8 import SEED_PART1, SEED_PART2, SEED_SOURCE

CPU_FLAG = 0.1


def draw(run_dir, manifest, data):
    """Draw every figure whose table has rows."""
    out = run_dir / 'figures'
    p1 = data.get('part1', pd.DataFrame())
    if len(p1):
        rows = []
        for r in p1.itertuples():
            total = r.concurrent_clients * r.ops_per_client
            rows.append({'total operations': total, 'total time (s)': r.total_time_s,
                         'series': 'ours', 'op': r.variant,
                         'clients': r.concurrent_clients, 'ms': r.time_per_op_ms})
            if not _nan(r.seed_total_time_s):
                rows.append({'total operations': r.concurrent_clients * 10000,
                             'total time (s)': r.seed_total_time_s,
                             'series': 'seed', 'op': r.variant,
                             'clients': r.concurrent_clients,
                             'ms': r.seed_time_per_op_ms})
        df = pd.DataFrame(rows)
        fast = df[df['op'] != 'download']
        figures.lines_over_time(
            fast, 'total operations', 'total time (s)', 'op', out,
            'part1_time_vs_operations', 'Part I: register and search, time against '
            'concurrent operations', 'total operations (all clients)',
            'average total time per client (s)', style='series')
        figures.lines_over_time(
            df[df['op'] == 'download'], 'total operations', 'total time (s)', 'op',
            out, 'part1_download_time_vs_operations',
            'Part I: download, time against concurrent operations',
            'total files downloaded (all clients)', 'average total time per client (s)',
            style='series')
        figures.lines_over_time(
            fast, 'clients', 'ms', 'op', out, 'part1_time_per_operation',
            'Part I: time per operation', 'concurrent clients', 'ms per operation', style='series')
    p2 = data.get('part2', pd.DataFrame())
    if len(p2):
        many = p2['concurrent_clients'].max()
        pts = data['points']
        pts = pts[(pts['part'] == 'II') & (pts['concurrent_clients'] == many)].copy()
        pts['set'] = pts['fileset'].str[-1] + ' ' + pts['fileset'].str[-1].map(_size_label)
        pts['MB/s per peer'] = pts['bytes_per_s_per_client'] / 1e6
        bw = float(manifest['params'].get('bw') or 0)
        figures.bars_with_spread(
            pts, 'set', 'MB/s per peer', out, 'part2_bytes_per_s',
            'Part II: download rate per peer by file size, %d peers' % many,
            'file set (size of each file)', 'MB/s per peer',
            reference=bw / 8 if bw else None,
            reference_label='link %g Mbit/s' % bw)
        rows = []
        for r in p2[p2['concurrent_clients'] == many].itertuples():
            if _nan(r.file_size_bytes):
                continue
            x = math.log10(r.file_size_bytes)
            rows.append({'log10 size': x, 'MB/s': r.bytes_per_s_per_client / 1e6,
                         'series': 'ours (%d peers)' % many})
            rows.append({'log10 size': x, 'MB/s': r.seed_bytes_per_s / 1e6,
                         'series': 'seed (8 peers)'})
        figures.lines_over_time(
            pd.DataFrame(rows), 'log10 size', 'MB/s', 'series', out,
            'part2_bytes_per_s_vs_size', 'Part II: bytes/s against file size, ours '
            'and the seed\'s', 'log10 of file size (bytes)', 'MB/s per peer',
            xlim_zero=False)
    p3 = data.get('part3', pd.DataFrame())
    if len(p3):
        df = p3.assign(**{
            'total operations': p3['concurrent_clients'] * p3['ops_per_client'],
            'series': p3['variant'] + ', ' + p3['system'] + ' (' +
            p3['servers'].astype(str) + ')'})
        figures.lines_over_time(
            df, 'total operations', 'total_time_s', 'series', out,
            'part3_centralized_vs_decentralized',
            'Part III: centralized (1 server) against decentralized',
            'total operations (all clients)', 'average total time per client (s)')
    cap = data.get('capture', pd.DataFrame())
    if len(cap):
        figures.bars_with_spread(
            cap.rename(columns={'register_messages': 'REGISTER messages per peer'}),
            'mode', 'REGISTER messages per peer', out, 'capture_messages',
            'REGISTER messages per peer on the servers\' wires (K=%d servers, N=%d '
            'files)' % (cap['servers_K'].iloc[0], cap['files_N'].max()),
            'register mode', 'messages per peer')


def _nan(v):
    """True when v is None or NaN."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def _size_label(letter):
    """Return the seed's size label of a Part II set."""
    return {'A': '1KB', 'B': '10KB', 'C': '100KB', 'D': '10MB', 'E': '100MB',
            'F': '1GB'}[letter]


def _f(v, fmt='%.3f'):
    """Format a number or return a dash."""
    return '-' if _nan(v) else fmt % v


def report(manifest, data):
    """Return report.md text."""
    params = manifest.get('params', {})
    cpu = manifest.get('cpu') or {}
    mech = manifest.get('mechanisms') or {}
    lines = ['# DHT file-sharing index (dht8), next to the seed', '',
             'Seed: `%s`. Scale `%s`, %s repetition(s), %s index servers, up to %s peers, '
             'replicas %s, window %s; links %s Mbit/s, delay %s; switch %s; link mechanism '
             '%s.' % (SEED_SOURCE, params.get('scale'), params.get('repeat'),
                      params.get('servers'), params.get('peers'), params.get('replicas'),
                      params.get('window'), params.get('bw'), params.get('delay'),
                      params.get('switch'), ', '.join(sorted({str(r.get('mechanism')) for r
                                                              in mech.get('links', [])}))
                      or '?'),
             '', '- status: %s%s' % (manifest.get('status'), ' (%s)' % manifest['error']
                                     if manifest.get('error') else ''),
             '- CPU over the run: mean busy %s, saturated: %s (bar: 35 %% idle)'
             % (_f(cpu.get('mean'), '%.2f'), cpu.get('saturated')), '']
    pts = data.get('points', pd.DataFrame())
    if len(pts):
        hot = pts[pts['cpu_over_fraction'].fillna(0) > CPU_FLAG]
        bad = pts[(pts['failed'] > 0) | (pts['missing_clients'] > 0)]
        lines += ['- operations: %d ok, %d failed, over %d points' % (
            pts['ok'].sum(), pts['failed'].sum(), len(pts))]
        if len(bad):
            lines.append('- points with failures: %s' % ', '.join(
                str(p) for p in bad['point']))
        if len(hot):
            lines.append('- **the CPU was the bottleneck** (more than %d %% of samples '
                         'over 65 %% busy) in %d of %d points: %s. Their times measure '
                         'this 2-core machine running every server, peer, client and '
                         'the switch, not the emulated LAN.' % (
                             100 * CPU_FLAG, len(hot), len(pts), _hot_list(hot)))
        lines.append('')
    tg = data.get('targets', pd.DataFrame())
    if len(tg):
        lines += ['## Targets', '', 'They apply at `--scale seed` (10K files per peer); '
                  'this run is `%s`.' % params.get('scale'), '',
                  '| target | seed | measured | ratio | met |', '| --- | --- | --- | --- | --- |']
        for r in tg.itertuples():
            lines.append('| %s | %s | %s | %s | %s |' % (
                r.target, _f(r.seed, '%.4g'), _f(r.measured, '%.4g'),
                _f(r.ratio, '%.2fx'),
                'not run' if pd.isna(r.met) else 'yes' if r.met else '**no**'))
        lines.append('')
    lines += _part1(data.get('part1', pd.DataFrame()))
    lines += _ping(data.get('ping', pd.DataFrame()))
    lines += _part2(data.get('part2', pd.DataFrame()))
    lines += _part3(data.get('part3', pd.DataFrame()))
    lines += _capture(data.get('capture', pd.DataFrame()))
    lines += _failover(data.get('failover', pd.DataFrame()))
    sets = manifest.get('filesets') or {}
    if sets:
        lines += ['## File sets', '', '| key | id | files | bytes | manifest digest |',
                  '| --- | --- | --- | --- | --- |']
        for key in sorted(sets):
            s = sets[key]
            lines.append('| %s | %s | %d | %d | %s |' % (
                key, s['id'], s['files'], s['bytes'], s['digest'][:16]))
        lines.append('')
    return '\n'.join(lines)


def _hot_list(hot):
    """Return a short 'point (part op clients)' list."""
    items = ['%d (%s %s x%d)' % (r.point, r.part, r.variant, r.concurrent_clients)
             for r in hot.itertuples()]
    return ', '.join(items[:12]) + (', ...' if len(items) > 12 else '')


def _part1(p1):
    """Part I section."""
    if not len(p1):
        return []
    lines = ['## Part I: register, search, download', '',
             'Total time = mean of the clients\' timed parts; time per operation = total '
             'time / operations per client (the seed\'s definition). Spread: sd over '
             'repetitions. Seed columns: %s with 10K operations per client.' % SEED_SOURCE,
             '', '| operation | servers | clients | ops/client | total time s (sd) | '
             'ms/op | seed total s | seed ms/op | seed/ours | bytes/s per client | CPU busy |',
             '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    for r in p1.itertuples():
        lines.append('| %s | %d | %d | %d | %s (%s) | %s | %s | %s | %s | %s | %s |' % (
            r.variant, r.servers, r.concurrent_clients, r.ops_per_client,
            _f(r.total_time_s), _f(r.total_time_s_sd), _f(r.time_per_op_ms, '%.4f'),
            _f(r.seed_total_time_s, '%.2f'), _f(r.seed_time_per_op_ms, '%.3f'),
            _f(r.seed_over_ours, '%.1fx'), _f(r.bytes_per_s_per_client, '%.0f'),
            _f(r.cpu_busy, '%.2f')))
    return lines + ['', 'Figures: `figures/part1_time_vs_operations.png`, '
                    '`figures/part1_download_time_vs_operations.png`, '
                    '`figures/part1_time_per_operation.png`.', '']


def _ping(ping):
    """Ping-check section."""
    if not len(ping):
        return []
    lines = ['## Ping checks (seed)', '', '| check | measured | seed | seed/ours |',
             '| --- | --- | --- | --- |']
    for r in ping.itertuples():
        lines.append('| %s | %s | %s | %s |' % (
            r.check, _f(r.measured_s, '%.4f'), _f(r.seed_s, '%.2f'),
            _f(r.seed_over_ours, '%.0fx')))
    return lines + ['', 'Our 1 MB transfer includes one index lookup before the GET.', '']


def _part2(p2):
    """Part II section."""
    if not len(p2):
        return []
    lines = ['## Part II: file sizes', '',
             'Each peer downloads one set from the next peer. Bytes/s is per peer (its '
             'bytes over its timed part); goodput against each link\'s rate.', '',
             '| set | file size | files/peer | peers | total s (sd) | s/file | bytes/s per '
             'peer | of link | seed total s | seed s/file | seed bytes/s | CPU busy |',
             '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    for r in p2.itertuples():
        lines.append('| %s | %s | %d | %d | %s (%s) | %s | %s | %s | %s | %s | %s | %s |' % (
            r.set, _size_label(r.set), r.ops_per_client, r.concurrent_clients,
            _f(r.total_time_s), _f(r.total_time_s_sd), _f(r.s_per_file, '%.5f'),
            _f(r.bytes_per_s_per_client, '%.0f'), _f(r.fraction_of_link, '%.2f'),
            _f(SEED_PART2[r.set][0], '%.2f'), _f(SEED_PART2[r.set][1], '%.4g'),
            _f(SEED_PART2[r.set][2], '%.0f'), _f(r.cpu_busy, '%.2f')))
    return lines + ['', 'Figures: `figures/part2_bytes_per_s.png`, '
                    '`figures/part2_bytes_per_s_vs_size.png`.', '']


def _part3(p3):
    """Part III section."""
    if not len(p3):
        return []
    lines = ['## Part III: centralized against decentralized', '',
             'The seed gives only graphs here ("almost the same with very minor '
             'difference").', '', '| operation | system | servers | clients | total s (sd) '
             '| ms/op |', '| --- | --- | --- | --- | --- | --- |']
    for r in p3.itertuples():
        lines.append('| %s | %s | %d | %d | %s (%s) | %s |' % (
            r.variant, r.system, r.servers, r.concurrent_clients, _f(r.total_time_s),
            _f(r.total_time_s_sd), _f(r.time_per_op_ms, '%.4f')))
    return lines + ['', 'Figure: `figures/part3_centralized_vs_decentralized.png`.', '']


def _capture(cap):
    """Wire-capture section."""
    if not len(cap):
        return []
    lines = ['## Messages on the wire (scapy capture on every index server)', '',
             'REGISTER frames decoded from the reassembled client->server TCP streams.', '',
             '| mode | peer | K servers | N files | REGISTER msgs | names | segments to/from '
             '| bytes to/from | as expected |', '| --- | --- | --- | --- | --- | --- | --- '
             '| --- | --- |']
    for r in cap.itertuples():
        lines.append('| %s | %s | %d | %s | %d | %d | %d / %d | %d / %d | %s |' % (
            r.mode, r.peer, r.servers_K, r.files_N, r.register_messages, r.names,
            r.segments_to, r.segments_from, r.bytes_to, r.bytes_from,
            'yes' if r.matches else '**no**'))
    ok = bool(cap['matches'].all())
    drops = int(cap['kernel_drops'].max())
    mean = cap.groupby('mode')[['register_messages', 'segments_to', 'bytes_to',
                                'segments_from', 'bytes_from']].mean()
    lines.append('')
    for mode, r in mean.iterrows():
        lines.append('- %s, mean per peer: %.0f REGISTER messages, %.0f segments / %.0f '
                     'bytes to the servers, %.0f segments / %.0f bytes back' % (
                         mode, r['register_messages'], r['segments_to'], r['bytes_to'],
                         r['segments_from'], r['bytes_from']))
    lines += ['', 'Batched registration used K messages per peer and unbatched N: %s. '
              'Capture kernel drops: %d, stream gaps: %d, decode errors: %d.' % (
                  'confirmed' if ok else '**not confirmed**', drops,
                  int(cap['gaps'].max()), int(cap['decode_errors'].max())), '']
    return lines


def _failover(fo):
    """Failover section."""
    if not len(fo):
        return []
    lines = ['## Failover: one index server SIGKILLed during searches', '',
             '| servers | replicas | clients | killed | kill after s | searches | ok | failed '
             '| in flight | failover ms | max latency after kill ms | p50 before ms |',
             '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    for r in fo.itertuples():
        lines.append('| %d | %d | %d | %s | %s | %d | %d | %d | %d | %s | %s | %s |' % (
            r.servers, r.replicas, r.clients, r.killed, _f(r.kill_after_release_s),
            r.searches, r.ok, r.failed, r.in_flight_at_kill, _f(r.failover_ms),
            _f(r.max_latency_after_kill_ms), _f(r.p50_latency_before_kill_ms)))
    ok = bool((fo['failed'] == 0).all())
    return lines + ['', 'All searches succeeded: %s. Failover time = how long the '
                    'searches in flight at the kill took to complete through a replica.'
                    % ('yes' if ok else '**no**'), '']


__all__ = ['draw', 'report', 'SEED_PART1']
