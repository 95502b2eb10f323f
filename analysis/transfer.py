"""Analysis of the transfer experiment (seed 002): T_x and R_x beside iperf3 and the seed.

Reads only ``manifest.json`` and ``logs/`` of a run (``topologies/transfer.py`` and
``workloads/transfer_points.py`` say what produced them) and writes, byte-identical on
every rebuild:

- ``tables/transfers.csv``: one row per connection: the client's R_x (first..last read),
  its rate from request to last byte, and the server's T_x for the same connection
  (first..last write, and from the file's open: the disk read is the sender's time);
  the server's record is the one whose request arrived first after the client sent it
  (all processes share the machine's monotonic clock);
- ``tables/points.csv``: one row per point: ours (mean per connection, the aggregate
  over the point, Jain's index over the connections' rates) and iperf3 ``-R`` in the same
  point (``end.sum_received``, its streams, their Jain's index; none in a simulated
  run), the CPU verdict over our transfer (``cpu_verdict``: by the samples inside it, else
  by the runner's own reading of the point's timed parts, ours and iperf3's together, from
  ``points.jsonl``'s ``cpu``; 'modelled' in a simulated run) and over iperf3's (samples);
- ``table1_size.csv`` .. ``table4_iperf.csv``: the seed's four tables, its numbers beside
  ours (means over repetitions, with min and max), and our rate over iperf3's and over
  the configured bandwidth;
- ``path.csv``: rate against delay and loss with the bandwidth-delay product and the
  Mathis et al. (1997) bound ``MSS/RTT * sqrt(3/2) / sqrt(p)``;
- ``capture.csv``: the payload sizes a capture saw on the wire, against the packet size;
- ``targets.csv``, ``inputs.csv``; figures; ``report.md`` (:mod:`analysis.transfer_report`).
"""

import json
import pathlib

import pandas as pd

from analysis import transfer_figures, transfer_seed
from analysis.inputs import Inputs, as_dict, incomplete, is_number, read_manifest, \
    simulated
from analysis.stats import PointJudge, pooled_cpu
from analysis.tables import write_tables
from nodes.transfer.core import jain

FLOAT = '%.4f'
POINT_KEYS = ('point', 'repetition', 'kind', 'size', 'packet')
MSS = 1448                  # payload of a full segment with timestamps on a 1500-byte MTU
BAND = (0.5, 2.0)           # measured / Mathis bound counted as "within the band"
WIRE_SHARE = 0.98           # full packets that must leave as one exact segment each


def tag(point):
    """The point's log-name prefix (workloads/transfer_points.names)."""
    return 'p%03d' % point['point']


def mathis_mbps(rtt_ms, loss_percent):
    """Mathis et al. (1997): MSS/RTT * sqrt(3/2)/sqrt(p) in Mbit/s; None without loss."""
    if not loss_percent or loss_percent <= 0 or rtt_ms <= 0:
        return None
    return MSS * 8 / (rtt_ms / 1000.0) * 1.5 ** 0.5 / (loss_percent / 100.0) ** 0.5 / 1e6


def _match(clients, sent):
    """Pair each client record with the server's sent record whose request arrived first
    at or after the client's t_request; return [(client, sent or {})]."""
    free = sorted((s for s in sent if is_number(s.get('t_request'))),
                  key=lambda s: s['t_request'])
    pairs = []
    for c in sorted(clients, key=lambda c: c.get('t_request') or 0):
        t = c.get('t_request')
        found = next((s for s in free if is_number(t) and s['t_request'] >= t - 1e-4), None)
        if found is not None:
            free.remove(found)
        pairs.append((c, found or {}))
    return pairs


def _iperf(found, logs, name, point):
    """(sum_received Mbit/s, [per-stream receiver Mbit/s], start, end) of an iperf3 -J log."""
    path = logs / (name + '.json')
    try:
        doc = json.loads(path.read_text())
        end = doc['end']
        total = end['sum_received']['bits_per_second'] / 1e6
        streams = [s['receiver']['bits_per_second'] / 1e6 for s in end.get('streams', [])]
        start = doc['start']['timestamp']['timesecs']
        return total, streams, start, start + end['sum_received']['seconds']
    except FileNotFoundError:
        found.missing('iperf3 output missing (logs/%s.json)' % name, point)
    except (ValueError, KeyError, TypeError):
        found.missing('iperf3 output unreadable (logs/%s.json)' % name, point)
    return None, [], None, None


def point_rows(found, logs, point, result):
    """Return (connection rows, point row) of one point."""
    t = tag(point)
    sent = list(found.read('%s-server.jsonl' % t, point['point'], event='sent'))
    if not (logs / ('%s-server.jsonl' % t)).exists():
        found.missing('server log missing (logs/%s-server.jsonl)' % t, point['point'])
    conns, clients = point.get('conns', 1), []
    for i in range(1, conns + 1):
        name = '%s-client-c%d.jsonl' % (t, i)
        records = [r for r in found.read(name, point['point'])
                   if r.get('event') in ('received', 'error')]
        if not records:
            found.missing('client c%d of point %d logged no result (logs/%s)' % (
                i, point['point'], name), point['point'])
            records = [{'event': 'error', 'error': 'no result logged'}]
        clients.append(dict(records[-1], client='c%d' % i))
    rows = []
    for c, s in _match(clients, sent):
        ok = c.get('event') == 'received' and c.get('sha256_ok') is True
        rows.append({'point': point['point'], 'repetition': point['repetition'],
                     'kind': point['kind'], 'size': point['size'],
                     'packet': point['packet'], 'conns': conns,
                     'delay_ms': point.get('delay_ms'), 'loss': point.get('loss'),
                     'client': c['client'], 'ok': ok,
                     'error': None if ok else c.get('error', 'checksum not confirmed'),
                     'bytes': c.get('bytes'), 'mss': c.get('mss'),
                     'rx_mbps': c.get('rx_mbps') if ok else None,
                     'total_mbps': c.get('total_mbps') if ok else None,
                     'total_s': c.get('total_s') if ok else None,
                     'tx_mbps': s.get('tx_mbps') if ok else None,
                     'tx_open_mbps': s.get('tx_open_mbps') if ok else None,
                     'read_s': s.get('read_s'), 'writes': s.get('writes'),
                     'reads': c.get('reads'), 't_request': c.get('t_request'),
                     't_last_read': c.get('t_last_read'), 't_wall': c.get('t')})
    return rows


def _aggregate(rows):
    """(aggregate Mbit/s, Jain) of a point's connections: all bytes over first request ..
    last byte of any, and fairness over each connection's request-to-last-byte rate."""
    good = [r for r in rows if r['ok']]
    if not good or len(good) < len(rows):
        return None, None
    span = max(r['t_last_read'] for r in good) - min(r['t_request'] for r in good)
    total = sum(r['bytes'] for r in good)
    agg = total * 8 / span / 1e6 if span > 0 else None
    return agg, jain([r['total_mbps'] for r in good])


def _mean(rows, key):
    """Mean of a key over rows, skipping None; None when there is none."""
    values = [r[key] for r in rows if is_number(r.get(key))]
    return sum(values) / len(values) if values else None


def tables(run_dir):
    """Return every table of a transfer run as DataFrames (nothing written)."""
    run_dir = pathlib.Path(run_dir)
    manifest = read_manifest(run_dir)
    logs = run_dir / 'logs'
    found = Inputs(logs)
    judge = PointJudge(found, manifest)
    sim = simulated(manifest)    # no iperf3 there
    conns, points = [], []
    for record, point, result in found.points(POINT_KEYS):
        if record.get('status') == 'failed':
            found.missing('point %d failed: %s' % (point['point'], record.get('error')),
                          point['point'])
        rows = point_rows(found, logs, point, result)
        conns += rows
        agg, fair = _aggregate(rows)
        walls = [(r['t_wall'] - r['total_s'], r['t_wall']) for r in rows
                 if is_number(r['t_wall']) and is_number(r['total_s'])]
        busy, _over, bound, verdict = judge(min(w[0] for w in walls) if walls else None,
                                            max(w[1] for w in walls) if walls else None,
                                            record)
        row = {k: point.get(k) for k in ('point', 'repetition', 'kind', 'size', 'packet',
                                        'delay_ms', 'loss', 'bw')}
        row['cold'] = bool(point.get('cold'))
        row.update(conns=point.get('conns', 1), ok=sum(r['ok'] for r in rows),
                   failed=sum(not r['ok'] for r in rows),
                   tx_mbps=_mean(rows, 'tx_mbps'), tx_open_mbps=_mean(rows, 'tx_open_mbps'),
                   rx_mbps=_mean(rows, 'rx_mbps'), total_mbps=_mean(rows, 'total_mbps'),
                   read_s=_mean(rows, 'read_s'), aggregate_mbps=agg, jain=fair,
                   cpu_busy=busy, cpu_bound=bound, cpu_verdict=verdict)
        if point['kind'] != 'capture' and not point.get('cold') and not sim:
            total, streams, start, end = _iperf(found, logs, '%s-iperf3-client' % tag(point),
                                                point['point'])
            ibusy, _o, ibound = judge.window(start, end)
            row.update(iperf_mbps=total, iperf_streams=len(streams) or None,
                       iperf_stream_mean_mbps=sum(streams) / len(streams) if streams else None,
                       iperf_jain=jain(streams), iperf_cpu_bound=ibound)
        points.append(row)
    conns = pd.DataFrame(conns, columns=CONN_COLUMNS)
    points = pd.DataFrame(points, columns=POINT_COLUMNS)
    bw = manifest['params'].get('bw')
    data = {'transfers': conns.drop(columns=['t_wall']), 'points': points}
    data.update(seed_tables(points, bw if is_number(bw) and bw > 0 else None))
    data['path'] = path_table(points)
    data['capture'] = capture_table(found, logs, points, conns)
    from analysis import transfer_report
    data['targets'] = transfer_report.targets(data, manifest)
    data['inputs'] = found.table()
    return data


CONN_COLUMNS = ['point', 'repetition', 'kind', 'size', 'packet', 'conns', 'delay_ms', 'loss',
                'client', 'ok', 'error', 'bytes', 'mss', 'rx_mbps', 'total_mbps', 'total_s',
                'tx_mbps', 'tx_open_mbps', 'read_s', 'writes', 'reads', 't_request',
                't_last_read', 't_wall']
POINT_COLUMNS = ['point', 'repetition', 'kind', 'size', 'packet', 'cold', 'conns', 'delay_ms',
                 'loss', 'bw', 'ok', 'failed', 'tx_mbps', 'tx_open_mbps', 'rx_mbps',
                 'total_mbps', 'read_s', 'aggregate_mbps', 'jain', 'cpu_busy', 'cpu_bound',
                 'cpu_verdict',
                 'iperf_mbps', 'iperf_streams', 'iperf_stream_mean_mbps', 'iperf_jain',
                 'iperf_cpu_bound']


def _summary(points, kind, key, seed_rows, bw):
    """One seed table: per key value, mean/min/max over repetitions beside the seed."""
    part = points[points['kind'] == kind]
    out = []
    seed = {r[key]: r for r in seed_rows}
    for value in sorted(set(part[key]) | (set(seed) if kind != 'load' else set())):
        rows = part[part[key] == value]
        row = dict(seed.get(value, {}), **{key: value})
        row['repetitions'] = len(rows)
        row['failed'] = int(rows['failed'].sum()) if len(rows) else 0
        for col in ('tx_mbps', 'tx_open_mbps', 'rx_mbps', 'total_mbps', 'aggregate_mbps',
                    'jain', 'iperf_mbps', 'iperf_stream_mean_mbps', 'iperf_jain'):
            vals = rows[col].dropna() if len(rows) else []
            row[col] = float(vals.mean()) if len(vals) else None
            if col in ('tx_mbps', 'rx_mbps', 'aggregate_mbps'):
                row[col.replace('_mbps', '_min')] = float(vals.min()) if len(vals) else None
                row[col.replace('_mbps', '_max')] = float(vals.max()) if len(vals) else None
        row['rx_over_iperf'] = _ratio(row['rx_mbps'], row['iperf_mbps'])
        row['rx_over_bw'] = _ratio(row['rx_mbps'], bw)
        row.update(pooled_cpu(rows))
        out.append(row)
    return pd.DataFrame(out)


def _ratio(a, b):
    """a / b, or None when either is missing or b is 0."""
    return a / b if is_number(a) and is_number(b) and b else None


def seed_tables(points, bw):
    """The seed's Tables 1-4 beside ours; Table 1 from warm reads (the file in the page
    cache), with the same sizes read cold (evicted first) beside them."""
    warm = points[points['cold'] != True]       # noqa: E712 (a column, not a bool)
    t1 = _summary(warm, 'size', 'size', transfer_seed.size_rows(), bw)
    cold = _summary(points[points['cold'] == True], 'size', 'size', [], bw)  # noqa: E712
    if len(t1):
        for col in ('tx_mbps', 'tx_open_mbps', 'rx_mbps'):
            got = dict(zip(cold['size'], cold[col])) if len(cold) else {}
            t1['cold_' + col] = [got.get(size) for size in t1['size']]
        reads = points[(points['kind'] == 'size')].groupby(['size', 'cold'])['read_s'].mean()
        for flag, name in ((False, 'warm_read_s'), (True, 'cold_read_s')):
            t1[name] = [reads.get((size, flag)) for size in t1['size']]
    t2 = _summary(warm, 'packet', 'packet', transfer_seed.packet_rows(), bw)
    t3 = _summary(points, 'load', 'conns', transfer_seed.load_rows(), bw)
    if len(t3):
        one = t3.loc[t3['conns'] == 1, 'aggregate_mbps']
        base = one.iloc[0] if len(one) else None
        t3['aggregate_over_one'] = [_ratio(a, base) for a in t3['aggregate_mbps']]
    t4 = t3[[c for c in ('conns', 'seed_iperf_mean_mbps', 'seed_iperf_sum_mbps',
                         'iperf_stream_mean_mbps', 'iperf_mbps', 'iperf_jain', 'repetitions')
             if c in t3.columns]].copy() if len(t3) else pd.DataFrame()
    return {'table1_size': t1, 'table2_packet': t2, 'table3_load': t3, 'table4_iperf': t4}


def path_table(points):
    """Rate against delay and loss, with the link rate, BDP and the Mathis bound."""
    part = points[points['kind'] == 'path']
    out = []
    for (delay, loss), rows in part.groupby(['delay_ms', 'loss']):
        bw = rows['bw'].iloc[0]
        rtt = 2 * delay
        bound = mathis_mbps(rtt, loss)
        limit = min(bw, bound) if bound else bw
        rx = rows['rx_mbps'].dropna()
        rate = float(rx.mean()) if len(rx) else None
        iperf = rows['iperf_mbps'].dropna()
        out.append({'delay_ms': delay, 'loss': loss, 'rtt_ms': rtt, 'bw': bw,
                    'bdp_bytes': int(bw * 1e6 / 8 * rtt / 1000), 'mathis_mbps': bound,
                    'limit_mbps': limit, 'rx_mbps': rate,
                    'iperf_mbps': float(iperf.mean()) if len(iperf) else None,
                    'rx_over_limit': _ratio(rate, limit),
                    'rx_over_mathis': _ratio(rate, bound),
                    'in_band': (BAND[0] <= rate / bound <= BAND[1])
                    if bound and is_number(rate) else None,
                    'failed': int(rows['failed'].sum()), 'repetitions': len(rows)})
    return pd.DataFrame(out, columns=['delay_ms', 'loss', 'rtt_ms', 'bw', 'bdp_bytes',
                                      'mathis_mbps', 'limit_mbps', 'rx_mbps', 'iperf_mbps',
                                      'rx_over_limit', 'rx_over_mathis', 'in_band', 'failed',
                                      'repetitions'])


def capture_table(found, logs, points, conns):
    """Per capture point: data segments by payload size against the packet size.

    A send() the kernel took only part of (its buffer was full) splits one packet into
    two smaller segments (the sender counts those writes), and so does a receive window
    with less than a packet left, which nothing in the logs counts; so a point passes
    when no segment is larger than a packet and at least WIRE_SHARE of the full packets
    (less the counted splits) went out as one segment of exactly their size."""
    out = []
    writes = dict(zip(conns['point'], conns['writes']))
    for row in points[points['kind'] == 'capture'].itertuples():
        name = 'p%03d-capture.jsonl' % row.point
        summary = [r for r in found.read(name, row.point, event='summary')]
        if not summary:
            found.missing('capture summary missing (logs/%s)' % name, row.point)
            continue
        sizes = {int(k): v for k, v in as_dict(summary[-1].get('payload_sizes')).items()
                 if str(k).isdigit() and is_number(v)}
        segments = sum(sizes.values())
        exact = sizes.get(row.packet, 0)
        larger = sum(v for k, v in sizes.items() if k > row.packet)
        splits = writes.get(row.point)
        splits = int(splits) - -(-row.size // row.packet) if is_number(splits) else 0
        expected = row.size // row.packet - splits
        out.append({'point': row.point, 'repetition': row.repetition, 'packet': row.packet,
                    'size': row.size, 'segments': segments, 'exact': exact,
                    'expected_exact': expected, 'larger': larger,
                    'exact_share': exact / segments if segments else None,
                    'retransmits': summary[-1].get('retransmits'),
                    'kernel_drops': summary[-1].get('kernel_drops'),
                    'sizes_seen': ' '.join('%d:%d' % kv for kv in sorted(sizes.items())),
                    'wire_ok': larger == 0 and exact >= WIRE_SHARE * expected})
    return pd.DataFrame(out, columns=['point', 'repetition', 'packet', 'size', 'segments',
                                      'exact', 'split_writes', 'expected_exact', 'larger', 'exact_share',
                                      'retransmits', 'kernel_drops', 'sizes_seen', 'wire_ok'])


def build(run_dir):
    """Rewrite tables/, figures/ and report.md of a transfer run; return the tables.

    Raises IncompleteInputs (after writing everything) when inputs were missing."""
    from analysis import transfer_report
    run_dir = pathlib.Path(run_dir)
    manifest = read_manifest(run_dir)
    data = tables(run_dir)
    write_tables(run_dir, data, FLOAT)
    drawn = transfer_figures.draw(run_dir, data, manifest)
    (run_dir / 'report.md').write_text(transfer_report.report(manifest, data, drawn))
    problem = incomplete(data['inputs'])
    if problem:
        raise problem
    return data
