"""dht8's raw logs, one point at a time: clients, CPU samples, the fault, the delay daemons.

``analysis.dht8`` walks the points of ``logs/points.jsonl`` and, for each, reads its clients'
logs once (``read_clients``), so memory holds one point's operations, not the run's. What a
point's row says, and why:

- the time per operation divides a client's timed part by the operations that
  *succeeded* (a failed one is not a finished operation), then averages over clients;
- latency percentiles pool the ``op`` records of every client of the point (the latency
  of a point's operations, not a median of per-client medians), successful ones only;
- the CPU figures take the samples wholly inside the timed part, and a point is
  ``cpu_bound`` by the runner's own rule (:func:`cpu_bar`, ``repronet.run.cpu``); a timed
  part shorter than a sample is judged by the runner's precise reading of it, with the
  same bar (``cpu_verdict`` says which: ``samples`` or ``timed part``;
  ``cpu_timed_busy`` is that reading, beside the samples' figure);
- a client without a usable summary, or whose summary counts no operation, is a
  missing input (``analysis.inputs.Inputs``), named in the report.

A failover point's row (``failover_row``) keeps the fault kind the point injected
(``workloads/dht8_points.py``: kill, hang or cut; its result's ``kill`` record, named so
for history) and how long the clients took to route around it.
"""

import math

from analysis.inputs import as_dict, is_number, number
from analysis.stats import cpu_bar, percentile, point_cpu, read_cpu  # noqa: F401

SUMMARY_FIELDS = ('count', 'ok', 'failed', 'elapsed', 'bytes')
POINT_FIELDS = {'point': int, 'repetition': int, 'part': str, 'op': str, 'servers': int,
                'peers': int, 'replicas': int, 'fileset': str}


def node_names(point):
    """Return the log names of a point's nodes (same rule as workloads/dht8_points.py)."""
    tag = 'p%03d' % point['point']
    clients = ['p%d' % i for i in range(1, point['peers'] + 1)]
    servers = ['s%d' % i for i in range(1, point['servers'] + 1)]
    return ({c: '%s-client-%s' % (tag, c) for c in clients},
            {s: '%s-capture-%s' % (tag, s) for s in servers}
            if point['part'] == 'capture' else {})


def variant(point):
    """Return the seed's name of what a point measures."""
    if point['op'] != 'register':
        return point['op']
    name = 'register %s' % ('batched' if point.get('batch') else 'unbatched')
    return name + (' replicated' if point['replicas'] else '')


def read_points(inputs):
    """Return the (point, result, cpu) of logs/points.jsonl's records that describe a
    point; cpu is the runner's precise reading of its timed parts ({} without one)."""
    pairs, bad = [], 0
    for r in inputs.read('points.jsonl', event='point'):
        point = r.get('point')
        if not isinstance(point, dict) or not all(
                type(point.get(k)) is t for k, t in POINT_FIELDS.items()):
            bad += 1
            continue
        pairs.append((point, as_dict(r.get('result')), as_dict(r.get('cpu'))))
    if bad:
        inputs.missing('%d point record(s) of logs/points.jsonl name no point' % bad,
                       count=bad)
    if not pairs:
        inputs.missing('no finished point in logs/points.jsonl')
    return sorted(pairs, key=lambda pair: pair[0]['point'])


def _summary(records):
    """Return the last summary record whose counts are numbers, or None."""
    found = [r for r in records if r.get('event') == 'summary']
    if found and all(is_number(found[-1].get(k)) for k in SUMMARY_FIELDS):
        return found[-1]
    return None


def read_clients(inputs, point, keep_ops=False):
    """Read a point's client logs; return (rows, pooled ok latencies in ms, ops, summaries).

    ops (every op record with t and latency, of every client) only when keep_ops."""
    clients, _ = node_names(point)
    rows, latencies, ops, summaries = [], [], [], []
    for peer, name in clients.items():
        records = inputs.read(name + '.jsonl', point=point['point'])
        summary = _summary(records)
        mine = [r for r in records if r.get('event') == 'op' and is_number(r.get('t'))
                and is_number(r.get('latency'))]
        lat = sorted(1000 * r['latency'] for r in mine if r.get('ok') is True)
        latencies += lat
        if keep_ops:
            ops += mine
        row = {'point': point['point'], 'repetition': point['repetition'],
               'part': point['part'], 'variant': variant(point),
               'servers': point['servers'], 'peers': point['peers'],
               'fileset': point['fileset'], 'client': peer, 'summary': summary is not None,
               'count': None, 'ok': None, 'failed': None, 'elapsed_s': None,
               'ms_per_op': None, 'bytes': None, 'bytes_per_s': None,
               'messages_sent': None, 'op_records': len(mine),
               'lat_p50_ms': percentile(lat, 0.5), 'lat_p99_ms': percentile(lat, 0.99),
               'lat_max_ms': lat[-1] if lat else None, 'dropped_lines': records.dropped}
        if summary is not None:
            summaries.append(summary)
            ok, elapsed = summary['ok'], summary['elapsed']
            row.update(count=summary['count'], ok=ok, failed=summary['failed'],
                       elapsed_s=elapsed, bytes=summary['bytes'],
                       messages_sent=summary.get('messages_sent'),
                       ms_per_op=1000 * elapsed / ok if ok else None,
                       bytes_per_s=summary['bytes'] / elapsed if elapsed else None)
        rows.append(row)
    _note_missing(inputs, point['point'], rows)
    return rows, sorted(latencies), ops, summaries


def _note_missing(inputs, n, rows):
    """Note clients without a summary, and summaries that count no operation."""
    absent = sum(not r['summary'] for r in rows)
    if absent:
        inputs.missing('client summary missing for %d of %d clients in point %d'
                       % (absent, len(rows), n), point=n, count=absent)
    empty = sum(r['summary'] and not r['count'] for r in rows)
    if empty:
        inputs.missing('no operations in %d of %d client summaries in point %d'
                       % (empty, len(rows), n), point=n, count=empty)


def _mean(values):
    """Return the mean of values, or None when there are none."""
    return sum(values) / len(values) if values else None


def point_row(point, result, clients, latencies, cpu_figures, timed_busy=None):
    """Return a point's row: the seed's columns, pooled latency and CPU (point_cpu()'s
    figures; timed_busy: the runner's precise busy share over the timed part)."""
    cs = [c for c in clients if c['summary']]
    counts = [c['count'] for c in cs]
    elapsed = [c['elapsed_s'] for c in cs]
    total_bytes = sum(c['bytes'] for c in cs)
    rates = [c['bytes_per_s'] for c in cs if c['bytes_per_s'] is not None]
    busy, over, bound, verdict = cpu_figures
    return {
        'point': point['point'], 'repetition': point['repetition'],
        'part': point['part'], 'op': point['op'], 'variant': variant(point),
        'servers': point['servers'], 'concurrent_clients': point['peers'],
        'replicas': point['replicas'], 'fileset': point['fileset'],
        'ops_per_client': max(counts) if counts else None,
        'total_ops': sum(counts),
        'total_time_s': _mean(elapsed),
        'max_time_s': max(elapsed) if elapsed else None,
        'time_per_op_ms': _mean([c['ms_per_op'] for c in cs if c['ms_per_op'] is not None]),
        'bytes': total_bytes,
        'bytes_per_s_per_client': _mean(rates) if total_bytes else None,
        'latency_samples': len(latencies),
        'lat_p50_ms': percentile(latencies, 0.5),
        'lat_p99_ms': percentile(latencies, 0.99),
        'lat_max_ms': latencies[-1] if latencies else None,
        'ok': sum(c['ok'] for c in cs), 'failed': sum(c['failed'] for c in cs),
        'missing_clients': len(clients) - len(cs),
        'downloads': result.get('downloads', ''),
        'downloads_fs': result.get('downloads_fs', ''),
        'cpu_busy': busy, 'cpu_over_fraction': over, 'cpu_bound': bound,
        'cpu_verdict': verdict, 'cpu_timed_busy': timed_busy}


def failover_row(inputs, point, result, ops, summaries):
    """Return a failover point's row: the fault, the searches, the time to recover.

    ``recovery_ms`` is the longest any search waited after the fault was in place
    (an operation in flight at the fault counts from the fault, a later one whole): the
    time the clients took to route around a dead, hung or cut-off server. It is an upper
    bound: a search slowed by anything else after the fault counts too (compare with
    ``p50_latency_before_fault_ms``)."""
    fault = result.get('kill')
    if not isinstance(fault, dict) or not is_number(fault.get('t')):
        inputs.missing('fault record missing for failover point %d' % point['point'],
                       point=point['point'])
        return None
    t_fault = fault['t']
    victim = str(fault.get('server', '')).rsplit('-', 1)[-1]
    after = [r for r in ops if r['t'] > t_fault]
    waits = [r['t'] - max(t_fault, r['t'] - r['latency']) for r in ops if r['t'] >= t_fault]
    before = sorted(1000 * r['latency'] for r in ops if r['t'] <= t_fault)
    return {
        'point': point['point'], 'repetition': point['repetition'],
        'fault': str(fault.get('fault', point.get('fault', 'kill'))),
        'servers': point['servers'], 'replicas': point['replicas'],
        'clients': point['peers'], 'server': victim,
        'fault_after_release_s': fault['after_release']
        if is_number(fault.get('after_release')) else None,
        'searches': sum(s['count'] for s in summaries),
        'ok': sum(s['ok'] for s in summaries),
        'failed': sum(s['failed'] for s in summaries),
        'searches_after_fault': len(after),
        'answered_by_faulty_after_fault': sum(r.get('server') == victim for r in after),
        'in_flight_at_fault': sum(r['t'] - r['latency'] <= t_fault <= r['t'] for r in ops),
        'recovery_ms': 1000 * max(waits) if waits else None,
        'max_latency_after_fault_ms': max((1000 * r['latency'] for r in after),
                                          default=None),
        'p50_latency_before_fault_ms': percentile(before, 0.5),
        'fault_undone': 'ended' in fault if fault.get('fault', 'kill') != 'kill' else None,
        'marked_down': ','.join(sorted({str(d) for s in summaries
                                        for d in (s.get('down') or [])}))}


def capture_rows(inputs, point, clients, hosts):
    """Return a capture point's rows: REGISTER messages per peer seen on the servers' wires.

    clients are the point's client rows (their summaries say how many files each
    registered, N); a batched peer should send one message per server (K)."""
    _, captures = node_names(point)
    by_ip = {ip: name for name, ip in hosts.items() if isinstance(ip, str)}
    counters = ('segments_to', 'bytes_to', 'segments_from', 'bytes_from')
    per_peer = {c['client']: dict({'register_messages': 0, 'names': 0},
                                  **{k: 0 for k in counters}) for c in clients}
    drops = gaps = errors = missing = 0
    for name in captures.values():
        found = [r for r in inputs.read(name + '.jsonl', point=point['point'])
                 if r.get('event') == 'summary' and isinstance(r.get('clients'), dict)]
        if not found:
            missing += 1
            continue
        summary = found[-1]
        drops += number(summary.get('kernel_drops'))
        gaps += number(summary.get('gaps'))
        errors += number(summary.get('decode_errors'))
        for ip, c in summary['clients'].items():
            d = per_peer.get(by_ip.get(ip, ip))
            if d is None or not isinstance(c, dict):
                continue
            d['register_messages'] += number(as_dict(c.get('messages_to')).get('REGISTER'))
            d['names'] += number(c.get('names_to'))
            for k in counters:
                d[k] += number(c.get(k))
    if missing:
        inputs.missing('capture summary missing for %d of %d captures in point %d' % (
            missing, len(captures), point['point']), point=point['point'], count=missing)
    rows = []
    for c in sorted(clients, key=lambda c: int(c['client'][1:])):
        n = c['count']
        expected = point['servers'] if point.get('batch') else n
        d = per_peer[c['client']]
        rows.append(dict({'point': point['point'], 'repetition': point['repetition'],
                          'mode': 'batched' if point.get('batch') else 'unbatched',
                          'peer': c['client'], 'servers_K': point['servers'], 'files_N': n,
                          'expected_messages': expected}, **d,
                         matches=None if expected is None or missing
                         else d['register_messages'] == expected,
                         kernel_drops=drops, gaps=gaps, decode_errors=errors,
                         missing_captures=missing))
    return rows


def linkdelay_rows(inputs):
    """Return one row per delay daemon log (logs/linkdelay-<host>.jsonl): its last counters.

    ``repronet/emu/linkdelay/linkdelay.c`` prints cumulative ``stats`` on SIGUSR1 and at
    exit, so the last one covers the daemon's whole life (the whole run, set-up included).
    ``late_us_mean``/``late_us_max``: how late it released held packets, in µs (the mean
    is over ``released``, the held packets it let go; ``accepted`` also counts packets
    passed without a hold)."""
    rows = []
    for path in sorted(inputs.logs.glob('linkdelay-*.jsonl')):
        stats = inputs.read(path.name, event='stats')
        last = stats[-1] if stats else {}
        row = {'host': path.stem[len('linkdelay-'):], 'stats_records': len(stats)}
        for key in ('arrivals', 'accepted', 'dropped', 'released', 'late_us_mean',
                    'late_us_max'):
            row[key] = last.get(key) if is_number(last.get(key)) else None
        rows.append(row)
    return rows
