"""Analysis of the smoke experiment: goodput, ping loss, switch counters.

Reads only ``manifest.json`` and ``logs/`` of a run (see
``topologies/smoke.py`` for what produced them) and writes:

- ``tables/goodput.csv``: one row per point: configured rate, receiver
  goodput over the whole transfer (iperf3's ``end.sum_received``), ratio,
  payload bytes, TCP retransmissions;
- ``tables/goodput_intervals.csv``: the receiver's per-interval goodput
  (``iperf3 -s -J`` intervals), the data behind the time-series figure;
- ``tables/ping.csv``: packets sent/received, loss, RTT per host pair;
- with ``--switch osken``: ``tables/port_stats.csv`` (``analysis.portstats``)
  and ``tables/port_counters.csv``, which sets the bytes the switch sent on
  the receiver's port against the payload iperf3 received.  The ratio should
  be about 1514/1448 = 1.046 (Ethernet + IPv4 + TCP-with-timestamps headers
  per full-size segment) plus a little for pings, ARP, iperf3's control
  connection and the OpenFlow learning switch's first flooded packets;
- ``figures/goodput_over_time``, ``figures/goodput``, and with osken
  ``figures/port_utilization``; ``report.md``.

Tables have a fixed row order and float format, so rebuilding from the same
logs gives byte-identical files.
"""

import json
import pathlib
import re

import pandas as pd

from analysis import figures, inputs, machine
from analysis.stats import run_cpu_line
from analysis.tables import write_tables
from repronet.run.results import read_manifest, read_points

FLOAT = '%.4f'
_PING_COUNTS = re.compile(r'(\d+) packets transmitted, (\d+) received')
_PING_RTT = re.compile(r'= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms')


def parse_ping(text):
    """Return (transmitted, received, rtt_avg_ms or None) from ping output."""
    counts = _PING_COUNTS.search(text)
    if not counts:
        raise ValueError('no ping summary line')
    rtt = _PING_RTT.search(text)
    return (int(counts.group(1)), int(counts.group(2)),
            float(rtt.group(2)) if rtt else None)


def tables(run_dir):
    """Return the smoke tables as DataFrames, from logs and manifest only."""
    run_dir = pathlib.Path(run_dir)
    logs = run_dir / 'logs'
    manifest = read_manifest(run_dir)
    bw = float(manifest['params']['bw'])
    goodput, intervals, pings = [], [], []
    for point, _ in read_points(run_dir):
        p, rep = point['point'], point['repetition']
        client = json.loads((logs / ('iperf-client-p%d.json' % p)).read_text())
        server = json.loads((logs / ('iperf-server-p%d.json' % p)).read_text())
        received = client['end']['sum_received']
        sent = client['end']['sum_sent']
        mbps = received['bits_per_second'] / 1e6
        goodput.append({'point': p, 'repetition': rep, 'configured_mbps': bw,
                        'goodput_mbps': mbps, 'ratio': mbps / bw,
                        'bytes': int(received['bytes']),
                        'seconds': received['seconds'],
                        'retransmits': sent.get('retransmits')})
        step = float(manifest['params'].get('interval') or 0)
        for interval in server['intervals']:
            s = interval['sum']
            if s['seconds'] < 0.5 * step:   # the stub after the sender stops
                continue
            intervals.append({'point': p, 'repetition': rep,
                              't_start': s['start'], 't_end': s['end'],
                              'goodput_mbps': s['bits_per_second'] / 1e6})
        for path in sorted(logs.glob('ping-*-p%d.txt' % p)):
            _, src, dst, _ = path.stem.split('-')
            sent_n, recv_n, rtt = parse_ping(path.read_text())
            pings.append({'point': p, 'repetition': rep, 'src': src,
                          'dst': dst, 'transmitted': sent_n,
                          'received': recv_n,
                          'loss_pct': 100.0 * (sent_n - recv_n) / sent_n,
                          'rtt_avg_ms': rtt})
    out = {'goodput': pd.DataFrame(goodput,
                                   columns=_columns(goodput, 'point')),
           'goodput_intervals': pd.DataFrame(intervals),
           'ping': pd.DataFrame(pings)}
    if manifest.get('params', {}).get('switch') == 'osken':
        from analysis.portstats import port_stats_table
        ports = port_stats_table(str(run_dir))
        out['port_stats'] = ports
        out['port_counters'] = _port_counters(manifest, ports, goodput)
    return out


def _columns(rows, first):
    """Return the column order of rows (dict insertion order)."""
    return list(rows[0]) if rows else [first]


def _name_column(ports):
    """Return the port-name column of the portstats table."""
    return 'port_name' if 'port_name' in ports.columns else 'name'


def _port_counters(manifest, ports, goodput):
    """Set switch port bytes toward h2 against iperf3's received payload."""
    port_names = {r['node1']: r['intf2'] for r in
                  manifest.get('mechanisms', {}).get('ports', [])}
    receiver_port = port_names.get('h2')
    payload = sum(row['bytes'] for row in goodput)
    rows = []
    if receiver_port and len(ports):
        mine = ports[ports[_name_column(ports)] == receiver_port]
        mine = mine.sort_values('t')
        if len(mine):
            tx = int(mine['tx_bytes'].iloc[-1])
            rows.append({'port': receiver_port, 'switch_tx_bytes': tx,
                         'iperf3_payload_bytes': payload,
                         'ratio': tx / payload if payload else float('nan')})
    return pd.DataFrame(rows, columns=['port', 'switch_tx_bytes',
                                       'iperf3_payload_bytes', 'ratio'])


def build(run_dir):
    """Rewrite tables/, figures/ and report.md of a smoke run; return tables."""
    run_dir = pathlib.Path(run_dir)
    manifest = read_manifest(run_dir)
    data = tables(run_dir)
    write_tables(run_dir, data, FLOAT)
    drawn = draw(run_dir, manifest, data)
    (run_dir / 'report.md').write_text(report(manifest, data, list(drawn)))
    return data


def draw(run_dir, manifest, data):
    """Draw the smoke figures of data (from tables()); return {name: figures.Saved}."""
    out = pathlib.Path(run_dir) / 'figures'
    drawn = {}
    bw = float(manifest['params']['bw'])
    switch = manifest['params']['switch']
    iv = data['goodput_intervals']
    if len(iv):
        iv = iv.assign(repetition=iv['repetition'].map(lambda r: 'rep %d' % r))
        drawn['goodput_over_time'] = figures.lines_over_time(
            iv, 't_end', 'goodput_mbps', 'repetition', out,
            'goodput_over_time',
            'Receiver goodput h1 -> h2 over a %.0f Mbit/s link (%s)'
            % (bw, switch), 'time since transfer start (s)',
            'goodput (Mbit/s)', reference=bw,
            reference_label='configured %g Mbit/s' % bw)
    gp = data['goodput']
    if len(gp):
        drawn['goodput'] = figures.bars_with_spread(
            gp.assign(link='h1 -> h2'), 'link', 'goodput_mbps', out,
            'goodput', 'Goodput per transfer, %d repetition(s) (%s)'
            % (len(gp), switch), '', 'goodput (Mbit/s)', reference=bw,
            reference_label='configured %g Mbit/s' % bw)
    ports = data.get('port_stats')
    if ports is not None and len(ports.dropna(subset=['tx_mbps'])):
        from analysis.portstats import LOCAL_PORT
        rates = ports[ports['port'] != LOCAL_PORT].dropna(subset=['tx_mbps'])
        rates = rates.assign(t=rates['t'] - ports['t'].min())
        rates = rates.rename(columns={_name_column(ports): 'port name'})
        drawn['port_utilization'] = figures.lines_over_time(
            rates, 't', 'tx_mbps', 'port name', out,
            'port_utilization',
            'Switch port transmit rate from OpenFlow port counters',
            'time since first sample (s)', 'tx rate (Mbit/s)',
            reference=bw, reference_label='shaped link %g Mbit/s' % bw)
    return drawn


def report(manifest, data, drawn=()):
    """Return report.md text from the manifest and tables."""
    params = manifest['params']
    mech = manifest.get('mechanisms') or {}     # datapath: OVS's, None without OVS
    lines = ['# Smoke run', '',
             '- status: %s' % inputs.status(manifest),
             '- switch: %s%s, link mechanism: %s' % (
                 mech.get('switch') or params['switch'],
                 ', datapath: %s' % mech['datapath'] if mech.get('datapath') else '',
                 ', '.join(sorted({str(r.get('mechanism'))
                                   for r in mech.get('links', [])}))),
             '- configured h1-s1 rate: %g Mbit/s; transfer %g s, %d '
             'repetition(s), scale %s' % (params['bw'], params['duration'],
                                          params['repeat'], params['scale']),
             '- machine: %s' % machine.describe(manifest),
             run_cpu_line(manifest),
             '']
    gp = data['goodput']
    if len(gp):
        lines += ['## Goodput (receiver, whole transfer)', '',
                  '| repetition | goodput (Mbit/s) | of configured '
                  '| retransmits |', '| --- | --- | --- | --- |']
        for row in gp.itertuples():
            lines.append('| %d | %.2f | %.1f %% | %s |' % (
                row.repetition, row.goodput_mbps, 100 * row.ratio,
                row.retransmits))
        lines += ['', 'Mean %.2f Mbit/s = %.1f %% of the configured %g '
                  'Mbit/s (full-size TCP segments carry at most 95.6 %% '
                  'payload).' % (gp['goodput_mbps'].mean(),
                                 100 * gp['ratio'].mean(), params['bw']), '']
    ping = data['ping']
    if len(ping):
        lines += ['## Ping', '', '| repetition | pair | loss | avg RTT (ms) |',
                  '| --- | --- | --- | --- |']
        for row in ping.itertuples():
            lines.append('| %d | %s -> %s | %.0f %% | %s |' % (
                row.repetition, row.src, row.dst, row.loss_pct,
                row.rtt_avg_ms))
        lines.append('')
    counters = data.get('port_counters')
    if counters is not None and len(counters):
        row = counters.iloc[0]
        lines += ['## Switch counters', '',
                  'Port %s sent %d bytes for %d bytes of iperf3 payload: '
                  'ratio %.3f (headers alone give 1.046).' % (
                      row['port'], row['switch_tx_bytes'],
                      row['iperf3_payload_bytes'], row['ratio']), '']
    lines += ['## Figures', '']
    for name in drawn:
        lines.append('- figures/%s.png' % name)
    lines.append('')
    return '\n'.join(lines)
