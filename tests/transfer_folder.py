"""A hand-made transfer results folder for the analysis tests (no emulator, no root).

``make_run(path)`` writes what ``topologies/transfer.py`` leaves: the manifest,
``logs/points.jsonl``, each point's server ``sent`` records, clients' ``received`` (or
``error``) records, ``iperf3 -J`` output and capture summaries, and CPU samples. Every
number is chosen so the tables can be worked out by hand:

- point 0/1 (size 10 MB, repetitions 0 and 1, warm): the client reads for 0.1 s and
  0.125 s (800 and 640 Mbit/s), iperf3 says 1000 and 800; point 2: the same size cold,
  reads for 0.2 s (400);
- point 3 (packet 100 at 10 MB): 0.16 s (500), iperf3 500;
- point 4 (load, 1 connection, 10 MB): request at 100.0, last byte at 100.1 (800 Mbit/s);
- point 5 (load, 3 connections, 10 MB each): requests at 200.0, last bytes at 200.3,
  200.3, 200.15 (rates 266.7, 266.7, 533.3; all: 30 MB over 0.3 s = 800);
  iperf3 -P 3 streams 300, 300, 200;
- point 6/7 (path 10 ms one way, loss 0 and 1 %, 100 Mbit/s link): R_x 90 and 20
  (the bound at 1 %: 1448 * 8 / 0.02 * sqrt(1.5) / 0.1 / 1e6 = 7.094 Mbit/s);
- point 8 (capture 1000 at 262144 bytes): 262 segments of 1000, the tail of 144 and
  the 75-byte OK line, none larger;
- point 9 (size 1 MB): the client failed ("the server went away").
"""

import json

T0 = 1000.0
BW = 1000.0
MB10 = 10 * 1000 * 1000
SHA = 'ab' * 32

# point -> (point dict, [(t_request, t_first_read, t_last_read, ok)], iperf3 streams)
POINTS = [
    ({'kind': 'size', 'size': MB10, 'packet': 1000, 'cold': False, 'repetition': 0},
     [(10.0, 10.0, 10.1, True)], [1000.0]),
    ({'kind': 'size', 'size': MB10, 'packet': 1000, 'cold': False, 'repetition': 1},
     [(20.0, 20.0, 20.125, True)], [800.0]),
    ({'kind': 'size', 'size': MB10, 'packet': 1000, 'cold': True, 'repetition': 0},
     [(30.0, 30.0, 30.2, True)], None),
    ({'kind': 'packet', 'size': MB10, 'packet': 100, 'repetition': 0},
     [(40.0, 40.0, 40.16, True)], [500.0]),
    ({'kind': 'load', 'size': MB10, 'packet': 1000, 'conns': 1, 'repetition': 0},
     [(100.0, 100.0, 100.1, True)], [900.0]),
    ({'kind': 'load', 'size': MB10, 'packet': 1000, 'conns': 3, 'repetition': 0},
     [(200.0, 200.0, 200.3, True), (200.0, 200.0, 200.3, True),
      (200.0, 200.0, 200.15, True)], [300.0, 300.0, 200.0]),
    ({'kind': 'path', 'size': MB10, 'packet': 1000, 'delay_ms': 10.0, 'loss': 0.0,
      'bw': 100.0, 'config': 1, 'repetition': 0},
     [(300.0, 300.0, 300.0 + MB10 * 8 / 90e6, True)], [95.0]),
    ({'kind': 'path', 'size': MB10, 'packet': 1000, 'delay_ms': 10.0, 'loss': 1.0,
      'bw': 100.0, 'config': 2, 'repetition': 0},
     [(400.0, 400.0, 400.0 + MB10 * 8 / 20e6, True)], [30.0]),
    ({'kind': 'capture', 'size': 262144, 'packet': 1000, 'repetition': 0},
     [(500.0, 500.0, 500.01, True)], None),
    ({'kind': 'size', 'size': 1000000, 'packet': 1000, 'cold': False, 'repetition': 0},
     [(600.0, 600.0, 600.05, False)], [700.0]),
]


def _lines(path, records):
    path.write_text(''.join(json.dumps(r) + '\n' for r in records))


def make_run(root, busy=0.2):
    """Write the folder under root/run; return its path."""
    run = root / 'run'
    logs = run / 'logs'
    logs.mkdir(parents=True)
    manifest = {'experiment': 'transfer', 'status': 'ok',
                'params': {'bw': BW, 'delay': '0.05ms', 'loss': 0.0, 'packet': 1000,
                           'scale': 'test', 'repeat': 2, 'nodelay': True, 'segment': True,
                           'congestion_control': 'cubic', 'path_bw': 100.0,
                           'switch': 'lxbr', 'dropcache': 'both'},
                'tcp': {'congestion_control': 'bbr', 'wmem': '4096 16384 4194304'},
                'workdir_fs': 'ext4', 'cpu': {'interval': 0.5, 'mean': busy},
                'provenance': {'host': {'cpus': 2, 'memory_bytes': 2 ** 34}}}
    (run / 'manifest.json').write_text(json.dumps(manifest))
    points = []
    for i, (point, clients, streams) in enumerate(POINTS):
        point = dict(point, point=i, seed=i)
        tag = 'p%03d' % i
        points.append({'event': 'point', 'point': point, 'result': {
            'files': {'f%d.bin' % point['size']: SHA}, 'problems': []},
            't': T0 + i, 'started': T0 + i - 1, 'elapsed': 1.0})
        sent = []
        for k, (t_req, t_first, t_last, ok) in enumerate(clients, 1):
            record = {'t': T0 + t_last, 'event': 'received' if ok else 'error',
                      'name': 'f.bin', 'packet': point['packet'], 'mss': 1012}
            if ok:
                record.update(bytes=point['size'], sha256=SHA, sha256_ok=True, reads=10,
                              t_request=t_req, t_first_read=t_first, t_last_read=t_last,
                              rx_mbps=point['size'] * 8 / (t_last - t_first) / 1e6,
                              total_s=t_last - t_req,
                              total_mbps=point['size'] * 8 / (t_last - t_req) / 1e6)
                sent.append({'t': T0 + t_last, 'event': 'sent', 'conn': k,
                             't_request': t_req + 0.0001, 'bytes': point['size'],
                             'writes': -(-point['size'] // point['packet']),
                             'tx_mbps': 2 * record['rx_mbps'],
                             'tx_open_mbps': 1.5 * record['rx_mbps'],
                             'read_s': 0.01 if point.get('cold') else 0.001,
                             'congestion_control': 'cubic'})
            else:
                record.update(error='the server went away mid-transfer', bytes=5000)
            _lines(logs / ('%s-client-c%d.jsonl' % (tag, k)), [record])
        _lines(logs / ('%s-server.jsonl' % tag), [{'event': 'ready'}] + sent)
        if streams is not None:
            (logs / ('%s-iperf3-client.json' % tag)).write_text(json.dumps({
                'start': {'timestamp': {'timesecs': int(T0 + i)}},
                'end': {'sum_received': {'bits_per_second': sum(streams) * 1e6,
                                         'seconds': 0.5},
                        'streams': [{'receiver': {'bits_per_second': s * 1e6}}
                                    for s in streams]}}))
        if point['kind'] == 'capture':
            _lines(logs / ('%s-capture.jsonl' % tag), [{'event': 'ready'}, {
                'event': 'summary', 'payload_sizes': {'75': 1, '144': 1, '1000': 262},
                'retransmits': 0, 'kernel_drops': 0}])
    _lines(logs / 'points.jsonl', points)
    _lines(logs / 'cpu.jsonl', [{'t': T0 + k * 0.5, 'busy': busy} for k in range(-10, 2000)])
    return run
