"""The transfer experiment's figures, drawn by ``analysis.figures`` (the one seaborn module)
from the tables of ``analysis.transfer``: each is a long table of (x, rate, series), so
ours, iperf3, the seed and the bounds share one set of axes per question the seed asked.
"""

import pathlib

import pandas as pd

from analysis import figures


def _long(df, x, columns):
    """Rows (x, mbps, series) for each {column: series label} present and not empty."""
    parts = []
    for column, label in columns.items():
        if column in df.columns and df[column].notna().any():
            part = df[[x, column]].dropna().rename(columns={column: 'mbps'})
            parts.append(part.assign(series=label))
    return pd.concat(parts) if parts else pd.DataFrame(columns=[x, 'mbps', 'series'])


RATES = {'tx_mbps': 'ours T_x (sender)', 'rx_mbps': 'ours R_x (receiver)',
         'iperf_mbps': 'iperf3 -R', 'seed_tx_mbps': 'seed T_x', 'seed_rx_mbps': 'seed R_x'}


def draw(run_dir, data, manifest):
    """Draw every figure there is data for; return {name: figures.Saved}."""
    out = pathlib.Path(run_dir) / 'figures'
    bw = manifest['params'].get('bw') or None
    drawn = {}
    t1 = data['table1_size']
    if len(t1) and t1['rx_mbps'].notna().any():
        df = _long(t1.assign(size_mb=t1['size'] / 1e6), 'size_mb', RATES)
        drawn['rate_by_size'] = figures.lines_over_time(
            df, 'size_mb', 'mbps', 'series', out, 'rate_by_size',
            'Rate against file size (%s-byte packets)' % _one(data['points'], 'size'),
            'file size (MB, log scale)', 'Mbit/s (= bits per microsecond)',
            reference=bw, reference_label='link rate', logx=True)
    t2 = data['table2_packet']
    if len(t2) and t2['rx_mbps'].notna().any():
        drawn['rate_by_packet'] = figures.lines_over_time(
            _long(t2, 'packet', RATES), 'packet', 'mbps', 'series', out, 'rate_by_packet',
            'Rate against packet (write) size', 'packet size (bytes, log scale)',
            'Mbit/s', reference=bw, reference_label='link rate', logx=True)
    t3 = data['table3_load']
    if len(t3) and t3['rx_mbps'].notna().any():
        drawn['rate_by_load'] = figures.lines_over_time(
            _long(t3, 'conns', {'rx_mbps': 'ours, per connection (R_x)',
                                'aggregate_mbps': 'ours, all connections',
                                'iperf_stream_mean_mbps': 'iperf3 -P N, per stream',
                                'iperf_mbps': 'iperf3 -P N, all streams',
                                'seed_rx_mbps': 'seed R_x, per connection',
                                'seed_iperf_mean_mbps': 'seed iperf, per connection'}),
            'conns', 'mbps', 'series', out, 'rate_by_load',
            'Per-connection and aggregate rate against simultaneous connections',
            'simultaneous connections', 'Mbit/s', reference=bw, reference_label='link rate')
        drawn['fairness'] = figures.lines_over_time(
            _long(t3, 'conns', {'jain': 'ours', 'iperf_jain': 'iperf3 -P N'}).rename(
                columns={'mbps': 'jain'}), 'conns', 'jain', 'series', out, 'fairness',
            "Jain's fairness index over the connections' rates", 'simultaneous connections',
            "Jain's index (1 = equal shares)", reference=0.95, reference_label='target 0.95')
    path = data['path']
    if len(path) and path['rx_mbps'].notna().any():
        rows = []
        for r in path.itertuples():
            loss = 'loss %g %%' % r.loss
            rows.append({'delay_ms': r.delay_ms, 'mbps': r.rx_mbps, 'loss': loss,
                         'what': 'ours'})
            if r.mathis_mbps:       # capped at twice the link so the rates stay readable
                rows.append({'delay_ms': r.delay_ms, 'mbps': min(r.mathis_mbps, 2 * r.bw),
                             'loss': loss, 'what': 'Mathis bound'})
        drawn['rate_by_path'] = figures.lines_over_time(
            pd.DataFrame(rows).dropna(), 'delay_ms', 'mbps', 'loss', out, 'rate_by_path',
            'Rate against one-way delay and loss (%g Mbit/s link; bound capped at 2x)'
            % path['bw'].iloc[0], 'one-way delay of the link (ms, log scale)', 'Mbit/s',
            reference=float(path['bw'].iloc[0]), reference_label='link rate', logx=True,
            style='what')
    return drawn


def _one(points, kind):
    """The packet size of a kind's points, as text ('?' when there are none)."""
    values = sorted(set(points.loc[points['kind'] == kind, 'packet']))
    return ','.join(str(v) for v in values) or '?'
