"""A hand-made dht8 results folder for the analysis tests (no emulator, no root).

``make_run(path)`` writes what a real run leaves (``topologies/dht8.py``): the manifest,
``logs/points.jsonl``, each client's ``op`` records and ``summary``, two wire captures, CPU
samples and one failover point per fault kind. The helpers below let a test add a point or
break one input on purpose (``rewrite_points``, ``client_log``), so every analysis test starts
from the same folder.
"""

import json

HOSTS = {'s1': '10.0.0.1', 's2': '10.0.0.2', 'p1': '10.0.0.3', 'p2': '10.0.0.4'}
FAULT_AT = 0.010        # seconds after a failover point's release


def point(n, rep, part, op, peers, batch=True, replicas=0, servers=2, fault=None):
    """Return a point dict as topologies/dht8.py makes it."""
    p = {'point': n, 'repetition': rep, 'seed': 1, 'part': part, 'op': op,
         'servers': servers, 'peers': peers, 'batch': batch, 'replicas': replicas,
         'fileset': 'part1'}
    if fault:
        p['fault'] = fault
    return p


def write(path, records):
    """Write records as JSON lines."""
    with open(path, 'w') as f:
        for r in records:
            f.write(json.dumps(r) + '\n')


def client_log(logs, name, op, count, elapsed, t0, latency=0.001, server='s1', fail=0,
               latencies=None):
    """Write a client's log: count op records (the first fail of them failed), a summary.

    latencies (seconds, one per operation) overrides the single latency."""
    latencies = latencies or [latency] * count
    records = [{'t': t0, 'event': 'ready'}]
    t = t0
    for i, lat in enumerate(latencies):
        t += lat
        records.append({'t': t, 'event': 'op', 'op': op, 'name': 'f%d' % i,
                        'ok': i >= fail, 'latency': lat, 'server': server, 'bytes': 0})
    records.append({'t': t0 + elapsed, 'event': 'summary', 'op': op, 'count': count,
                    'ok': count - fail, 'failed': fail, 'elapsed': elapsed, 'bytes': 0,
                    'messages_sent': count, 'down': []})
    write(logs / (name + '.jsonl'), records)


def capture_log(logs, name, per_client):
    """Write a capture's log; per_client is {ip: (REGISTER messages, names)}."""
    clients = {}
    for ip, (msgs, names) in per_client.items():
        clients[ip] = {'segments_to': msgs + 2, 'bytes_to': 100 * msgs,
                       'segments_from': msgs + 1, 'bytes_from': 80 * msgs,
                       'messages_to': {'REGISTER': msgs}, 'messages_from': {'ACK': msgs},
                       'names_to': names}
    write(logs / (name + '.jsonl'), [
        {'t': 1.0, 'event': 'ready'},
        {'t': 2.0, 'event': 'summary', 'clients': clients, 'kernel_drops': 0,
         'gaps': 0, 'decode_errors': 0}])


def manifest(**fields):
    """Return the folder's manifest with fields replaced."""
    m = {'experiment': 'dht8', 'status': 'ok', 'hosts': HOSTS,
         'params': {'scale': 'smoke', 'repeat': 2, 'servers': 2, 'peers': 2,
                    'replicas': 1, 'window': 1, 'bw': 100.0, 'delay': '0.05ms',
                    'switch': 'lxbr', 'timeout': 1.0},
         'cpu': {'interval': 0.5, 'mean': 0.5, 'saturated': False},
         'provenance': {'host': {'cpus': 6, 'cpus_usable': 6, 'memory_bytes': 8 * 2 ** 30,
                                 'cpu_model': 'Test CPU'}},
         'mechanisms': {'switch': 'lxbr', 'links': [{'mechanism': 'linkdelay'}]},
         'filesets': {'part1': {'id': 'x', 'files': 4, 'bytes': 4000,
                                'digest': '0' * 64, 'spec': {'size': 'part1'}}}}
    m.update(fields)
    return m


def _failover(logs, p, t, kind):
    """One failover point: s2 fails FAULT_AT after the release while b is in flight."""
    records = [{'t': t, 'event': 'ready'},
               {'t': t + 0.001, 'event': 'op', 'op': 'search', 'name': 'a', 'ok': True,
                'latency': 0.001, 'server': 's2', 'bytes': 0},
               {'t': t + 0.030, 'event': 'op', 'op': 'search', 'name': 'b', 'ok': True,
                'latency': 0.029, 'server': 's1', 'bytes': 0},
               {'t': t + 0.031, 'event': 'op', 'op': 'search', 'name': 'c', 'ok': True,
                'latency': 0.001, 'server': 's1', 'bytes': 0},
               {'t': t + 0.04, 'event': 'summary', 'op': 'search', 'count': 3, 'ok': 3,
                'failed': 0, 'elapsed': 0.04, 'bytes': 0, 'messages_sent': 4,
                'down': ['s2']}]
    write(logs / ('p%03d-client-p1.jsonl' % p['point']), records)
    fault = {'fault': kind, 'server': 'p%03d-server-s2' % p['point'], 't': t + FAULT_AT,
             'began': t + FAULT_AT, 'after_release': FAULT_AT}
    if kind != 'kill':
        fault['ended'] = t + 0.05
    return {'released': t, 'finished': t + 0.04, 'kill': fault}


def make_run(path):
    """Write the folder under path: two repetitions of two Part I points, one capture
    point with two captures, one failover point per fault kind, CPU samples; return path."""
    logs = path / 'logs'
    logs.mkdir()
    (path / 'manifest.json').write_text(json.dumps(manifest()))
    points = []
    t = 1000.0
    for rep, elapsed in ((0, 0.004), (1, 0.006)):
        p = point(len(points), rep, 'I', 'register', 1)
        client_log(logs, 'p%03d-client-p1' % p['point'], 'register', 4, elapsed, t)
        points.append((p, {'released': t, 'finished': t + 1.2}))
        t += 10
        p = point(len(points), rep, 'I', 'search', 2)
        for peer in ('p1', 'p2'):
            client_log(logs, 'p%03d-client-%s' % (p['point'], peer), 'search', 4, 0.008, t)
        points.append((p, {'released': t, 'finished': t + 0.01}))
        t += 10
    cap = point(len(points), 0, 'capture', 'register', 2, batch=False)
    for peer in ('p1', 'p2'):
        client_log(logs, 'p%03d-client-%s' % (cap['point'], peer), 'register', 4, 0.01, t)
    capture_log(logs, 'p%03d-capture-s1' % cap['point'],
                {'10.0.0.3': (3, 3), '10.0.0.4': (2, 2)})
    capture_log(logs, 'p%03d-capture-s2' % cap['point'],
                {'10.0.0.3': (1, 1), '10.0.0.4': (2, 2)})
    points.append((cap, {'released': t, 'finished': t + 0.02}))
    for kind in ('kill', 'hang', 'cut'):
        t += 10
        fo = point(len(points), 0, 'failover', 'search', 1, replicas=1, fault=kind)
        points.append((fo, _failover(logs, fo, t, kind)))
    rewrite_points(path, points)
    write(logs / 'cpu.jsonl', [{'t': 1000.0 + 0.5 * i, 'busy': 0.9 if i < 3 else 0.2,
                                'steal': 0, 'cores': [0.9, 0.9]} for i in range(4)])
    for host, late in (('p1', (3.0, 40.0)), ('s1', (1.0, 90.0))):
        linkdelay_log(logs, host, *late)
    return path


def linkdelay_log(logs, host, late_us_mean, late_us_max, accepted=1000, released=None):
    """Write a linkdelay daemon's log as repronet/emu/linkdelay/linkdelay.c prints it:
    ready, a stats line on SIGUSR1 and the final stats at exit. released (held packets
    let go, what late_us_mean is a mean over) defaults to every accepted packet."""
    released = accepted if released is None else released
    stats = {'event': 'stats', 'arrivals': accepted, 'accepted': accepted, 'dropped': 0,
             'released': released,
             'unknown': 0, 'held_now': 0, 'held_max': 3, 'enobufs': 0,
             'verdict_errors': 0, 'sources': [{'src': '10.0.0.9', 'packets': accepted,
                                                'dropped': 0}]}
    write(logs / ('linkdelay-%s.jsonl' % host), [
        {'event': 'ready', 'queue': 0, 'sources': 1, 'seed': 7, 'gso': 1},
        dict(stats, accepted=accepted // 2, released=released // 2, late_us_mean=0.5, late_us_max=2.0),
        dict(stats, late_us_mean=late_us_mean, late_us_max=late_us_max)])


def rewrite_points(path, points):
    """Write logs/points.jsonl from (point, result) pairs."""
    write(path / 'logs' / 'points.jsonl',
          [{'t': 0, 'event': 'point', 'point': p, 'result': r} for p, r in points])


def read_points(path):
    """Return the (point, result) pairs of logs/points.jsonl."""
    lines = (path / 'logs' / 'points.jsonl').read_text().splitlines()
    return [(r['point'], r['result']) for r in map(json.loads, lines)]
