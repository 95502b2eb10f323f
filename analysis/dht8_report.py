"""report.md of the dht8 experiment, from the tables of ``analysis.dht8``.

The report puts our numbers next to the seed's and says which targets were met, and it
says what stands behind each number: the machine the manifest names, when the CPU rather
than the emulated network was the limit (the runner's own bar, ``repronet.run.cpu``, as
the manifest recorded it), how late the delay daemons released packets next to the links'
configured delay, and which inputs were missing or could not be read. A target's verdict
carries its failed operations and a CPU-bound note beside it.
"""


import pandas as pd

from analysis import inputs, machine
from analysis.tables import cell as _f, nan
from analysis.dht8_logs import cpu_bar
from analysis.dht8_seed import SEED_PART2, SEED_SOURCE, SIZE_LABELS
from analysis.dht8_tables import seed_figures
from analysis.stats import run_cpu_line, verdicts_line
from repronet.emu.linkcpus import ranges
from repronet.emu.linkemu_holds import weighted_mean


def _pct(fraction):
    """Return a fraction as a percentage without needless digits (0.65 -> '65 %')."""
    return '%g %%' % round(100 * fraction, 6)


def _verdicts(pts, busy):
    """The line saying how the points' CPU verdicts were made ([] in a simulated run)."""
    return verdicts_line(pts['cpu_verdict'] if 'cpu_verdict' in pts.columns else [],
                         (busy, None))


def report(manifest, data):
    """Return report.md text."""
    params = manifest['params']
    busy, over = cpu_bar(manifest)
    links = inputs.as_dict(manifest.get('mechanisms')).get('links')
    mechanisms = ', '.join(sorted({str(inputs.as_dict(r).get('mechanism')) for r in (
        links if isinstance(links, list) else [])})) or '?'
    lines = ['# DHT file-sharing index (dht8), next to the seed', '',
             'Seed: `%s`. Scale `%s`, %s repetition(s), %s index servers, up to %s peers, '
             'replicas %s, window %s; links %s Mbit/s, delay %s; switch %s; link mechanism '
             '%s.' % (SEED_SOURCE, params.get('scale'), params.get('repeat'),
                      params.get('servers'), params.get('peers'), params.get('replicas'),
                      params.get('window'), params.get('bw'), params.get('delay'),
                      params.get('switch'), mechanisms),
             '', '- status: %s' % inputs.status(manifest),
             ] + _run_lines(manifest, data, params, busy, over)
    pts = data.get('points', pd.DataFrame())
    if len(pts):
        hot = pts[pts['cpu_bound'].map(lambda v: str(v) == 'True')]
        bad = pts[(pts['failed'] > 0) | (pts['missing_clients'] > 0)]
        lines += ['- operations: %d ok, %d failed, over %d points' % (
            pts['ok'].sum(), pts['failed'].sum(), len(pts))] + _verdicts(pts, busy)
        if len(bad):
            lines.append('- points with failures or missing clients: %s' % ', '.join(
                str(p) for p in bad['point']))
        if len(hot):
            lines.append('- **the CPU was the bottleneck** (more than %s of its samples over '
                         '%s busy, or its timed part\'s reading over it) in %d of %d points: '
                         '%s. Their times measure the run\'s machine (above) running every '
                         'server, peer, client and the switch, not the emulated LAN.' % (
                             _pct(over), _pct(busy), len(hot), len(pts), _hot_list(hot)))
    lines += _inputs(data.get('inputs', pd.DataFrame())) + ['']
    lines += _targets(data.get('targets', pd.DataFrame()), params)
    lines += _part1(data.get('part1', pd.DataFrame()))
    lines += _ping(data.get('ping', pd.DataFrame()))
    lines += _part2(data.get('part2', pd.DataFrame()))
    lines += _part3(data.get('part3', pd.DataFrame()))
    lines += _capture(data.get('capture', pd.DataFrame()))
    lines += _failover(data.get('failover', pd.DataFrame()), params)
    lines += _filesets(inputs.as_dict(manifest.get('filesets')))
    lines += _downloads_fs(data.get('points', pd.DataFrame()), params)
    return '\n'.join(lines)


def _run_lines(manifest, data, params, busy, over):
    """The machine, CPU and lateness lines of an emulated run; a simulated run's say that its
    times are the model's and which machine ran the simulator."""
    if inputs.simulated(manifest):
        return [
            '- **backend: simulation** (`repronet.sim`, virtual time): every time below was '
            'computed by the simulator\'s network model and CPU charges (`--sim-cost`, '
            'recorded in the manifest), not measured on a network; the machine that ran '
            'the simulator: %s' % machine.describe(manifest),
            run_cpu_line(manifest), '- the capture part does not run in simulation']
    return ['- %s' % _machine(manifest),
            run_cpu_line(manifest, ' (a sample is over the bar when the machine is more than '
                         '%s busy, less than %s idle; a run or a point is CPU-bound when '
                         'more than %s of its samples are over)' % (
                             _pct(busy), _pct(1 - busy), _pct(over))),
            '- %s' % _lateness(data.get('linkdelay', pd.DataFrame()), params)]


def _machine(manifest):
    """The machine line: what the manifest recorded, never an assumption."""
    text = machine.describe(manifest)
    return text if not machine.host(manifest) else 'machine (from the manifest): ' + text


def _lateness(late, params):
    """The delay daemons' line: how late they released packets, next to the links' delay."""
    if not len(late) or late['late_us_max'].isna().all():
        return ('delay daemons\' lateness: not recorded (no linkdelay counters in logs/: '
                'the links were emulated by netem, or not delayed)')
    known = late.dropna(subset=['late_us_mean'])
    weight = known['released' if 'released' in known else 'accepted'].fillna(0)   # the
    # mean's own count (held packets let go); tables written before it was kept: accepted
    mean = weighted_mean(zip(weight, known['late_us_mean']))    # the daemons' rule
    if mean is None:
        mean = known['late_us_mean'].mean()
    return ('delay daemons released packets late by %.1f µs on average, %.1f µs at most '
            '(%d daemons, the whole run), against links of %s one way (`tables/'
            'linkdelay.csv`)' % (mean, late['late_us_max'].max(), len(known),
                                 params.get('delay')))


def _inputs(table):
    """Missing inputs and dropped log lines, when there are any."""
    if not len(table):
        return []
    lines = []
    missing = list(table.loc[table['kind'] == 'missing', 'problem'])
    if missing:
        lines.append('- **inputs missing** (the figures below leave them out): %s'
                     % '; '.join(missing))
    dropped = table[table['kind'] == 'dropped']
    if len(dropped):
        lines.append('- unreadable log lines dropped: %d (%s)' % (
            inputs.dropped_lines(table), '; '.join(list(dropped['problem'])[:5]) + (
                '; ...' if len(dropped) > 5 else '')))
    return lines


def _hot_list(hot):
    """Return every point of hot, compactly, and what they measured: '3-17, 20 (I register,
    I search)' (the tables below mark each row's CPU-bound points)."""
    kinds = dict.fromkeys('%s %s' % (r.part, r.variant) for r in hot.itertuples())
    return '%s (%s)' % (ranges([int(p) for p in hot['point']], ', '), ', '.join(kinds))


def _targets(tg, params):
    """Targets section: each verdict with its failures and CPU note beside it."""
    if not len(tg):
        return []
    lines = ['## Targets', '', 'They apply at `--scale seed` (10K files per peer); '
             'this run is `%s`. A target is met only when no operation failed.'
             % params.get('scale'), '',
             '| target | seed | measured | ratio | met |', '| --- | --- | --- | --- | --- |']
    for r, (seed, ratio) in zip(tg.itertuples(), seed_figures(tg)):
        verdict = {'met': 'yes', 'not met': '**no**'}.get(r.verdict, 'not run')
        lines.append('| %s | %s | %s | %s | %s%s |' % (
            r.target, _f(seed, '%.4g'), _f(_number(r.measured), '%.4g'), _f(ratio, '%.2fx'),
            verdict, ' (%s)' % r.notes if r.notes else ''))
    return lines + ['']


def _number(value):
    """A table cell as a float, None when empty."""
    return None if value == '' or nan(value) else float(value)


def _part1(p1):
    """Part I section."""
    if not len(p1):
        return []
    lines = ['## Part I: register, search, download', '',
             'Total time = mean of the clients\' timed parts; time per operation = a '
             'client\'s timed part / its successful operations, averaged over clients (the '
             'seed\'s definition). Spread: sd over repetitions. Seed columns: %s with 10K '
             'operations per client.' % SEED_SOURCE,
             '', '| operation | servers | clients | ops/client | total time s (sd) | '
             'ms/op | seed total s | seed ms/op | seed/ours | bytes/s per client | failed '
             '| CPU busy |',
             '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    for r in p1.itertuples():
        lines.append('| %s | %s | %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s | %s |' % (
            r.variant, _f(r.servers, '%d'), _f(r.concurrent_clients, '%d'),
            _f(r.ops_per_client, '%d'), _f(r.total_time_s), _f(r.total_time_s_sd),
            _f(r.time_per_op_ms, '%.4f'), _f(r.seed_total_time_s, '%.2f'),
            _f(r.seed_time_per_op_ms, '%.3f'), _f(r.seed_over_ours, '%.1fx'),
            _f(r.bytes_per_s_per_client, '%.0f'), _f(r.failed, '%d'),
            _f(r.cpu_busy, '%.2f') + (' (CPU-bound)' if str(r.cpu_bound) == 'True' else '')))
    names = ['part1_time_vs_operations'] + (
        ['part1_download_time_vs_operations'] if (p1['variant'] == 'download').any()
        else []) + ['part1_time_per_operation']
    return lines + ['', 'Figures: %s.' % ', '.join('`figures/%s.png`' % n for n in names), '']


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
        seed = SEED_PART2[r.set]
        lines.append('| %s | %s | %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s | %s |' % (
            r.set, SIZE_LABELS[r.set], _f(r.ops_per_client, '%d'),
            _f(r.concurrent_clients, '%d'), _f(r.total_time_s), _f(r.total_time_s_sd),
            _f(r.s_per_file, '%.5f'), _f(r.bytes_per_s_per_client, '%.0f'),
            _f(r.fraction_of_link, '%.2f'), _f(seed[0], '%.2f'), _f(seed[1], '%.4g'),
            _f(seed[2], '%.0f'),
            _f(r.cpu_busy, '%.2f') + (' (CPU-bound)' if str(r.cpu_bound) == 'True' else '')))
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
        lines.append('| %s | %s | %s | %s | %s (%s) | %s |' % (
            r.variant, r.system, _f(r.servers, '%d'), _f(r.concurrent_clients, '%d'),
            _f(r.total_time_s), _f(r.total_time_s_sd), _f(r.time_per_op_ms, '%.4f')))
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
        lines.append('| %s | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s |' % (
            r.mode, r.peer, _f(r.servers_K, '%d'), _f(r.files_N, '%d'),
            _f(r.register_messages, '%d'), _f(r.names, '%d'), _f(r.segments_to, '%d'),
            _f(r.segments_from, '%d'), _f(r.bytes_to, '%d'), _f(r.bytes_from, '%d'),
            '-' if nan(r.matches) else 'yes' if r.matches else '**no**'))
    ok = all(str(m) == 'True' for m in cap['matches'])
    mean = cap.groupby('mode')[['register_messages', 'segments_to', 'bytes_to',
                                'segments_from', 'bytes_from']].mean()
    lines.append('')
    for mode, r in mean.iterrows():
        lines.append('- %s, mean per peer: %.0f REGISTER messages, %.0f segments / %.0f '
                     'bytes to the servers, %.0f segments / %.0f bytes back' % (
                         mode, r['register_messages'], r['segments_to'], r['bytes_to'],
                         r['segments_from'], r['bytes_from']))
    lines += ['', 'Batched registration used K messages per peer and unbatched N: %s. '
              'Capture kernel drops: %s, stream gaps: %s, decode errors: %s.' % (
                  'confirmed' if ok else '**not confirmed**', _f(cap['kernel_drops'].max(),
                                                                 '%d'),
                  _f(cap['gaps'].max(), '%d'), _f(cap['decode_errors'].max(), '%d')), '']
    return lines


FAULTS = {'kill': 'SIGKILL', 'hang': 'SIGSTOP: the connection stays up, nothing answers',
          'cut': 'its link down'}


def _failover(fo, params):
    """Failover section: one row per fault (kill, hang, cut)."""
    if not len(fo):
        return []
    lines = ['## Failover: one index server killed, hung or cut off during searches', '',
             'Faults: %s. Recovery = the longest any search waited after the fault was in '
             'place (one in flight at the fault counts from the fault): how long the clients '
             'took to route around the server; a hung or cut-off server costs the client\'s '
             '`--timeout` (%s s).' % ('; '.join('%s (%s)' % kv for kv in FAULTS.items()),
                                      params.get('timeout')), '',
             '| fault | servers | replicas | clients | server | fault after s | searches | ok '
             '| failed | in flight | recovery ms | max latency after fault ms | p50 before '
             'ms |', '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- '
             '| --- |']
    for r in fo.itertuples():
        lines.append('| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
            r.fault, _f(r.servers, '%d'), _f(r.replicas, '%d'), _f(r.clients, '%d'),
            r.server, _f(r.fault_after_release_s), _f(r.searches, '%d'), _f(r.ok, '%d'),
            _f(r.failed, '%d'), _f(r.in_flight_at_fault, '%d'), _f(r.recovery_ms),
            _f(r.max_latency_after_fault_ms), _f(r.p50_latency_before_fault_ms)))
    ok = bool((fo['failed'] == 0).all())
    return lines + ['', 'All searches succeeded: %s. Figure: `figures/failover_recovery.png`.'
                    % ('yes' if ok else '**no**'), '']


def _downloads_fs(pts, params):
    """Where the clients wrote their downloads (--downloads-in): the file system per point.
    A file's creation on a disk's file system holds the CPU the link daemons need (1 ms on
    the development machine's ext4: workloads.scratch), so a reader comparing runs needs it."""
    kinds = {}
    if 'downloads_fs' in pts.columns:
        for fs in pts['downloads_fs']:
            if isinstance(fs, str) and fs:
                kinds[fs] = kinds.get(fs, 0) + 1
    if not kinds:
        return []
    return ['Downloads were written on %s (`--downloads-in %s`; tmpfs is memory).' % (
        ', '.join('%s in %d point%s' % (fs, n, '' if n == 1 else 's')
                  for fs, n in sorted(kinds.items())), params.get('downloads_in', 'workdir')),
            '']


def _filesets(sets):
    """File-set section."""
    if not sets:
        return []
    lines = ['## File sets', '', '| key | id | files | bytes | manifest digest |',
             '| --- | --- | --- | --- | --- |']
    for key in sorted(sets):
        s = inputs.as_dict(sets[key])
        lines.append('| %s | %s | %s | %s | %s |' % (
            key, s.get('id'), s.get('files'), s.get('bytes'), str(s.get('digest'))[:16]))
    return lines + ['']
