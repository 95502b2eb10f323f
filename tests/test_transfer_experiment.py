"""transfer (seed 002) end to end on Mininet at --scale smoke: every kind of point, the
received files' SHA-256, the segment sizes a capture saw, iperf3 beside ours, the
analysis, and nothing left behind."""

import json
import os
import subprocess

import pandas as pd
import pytest

from tests.test_kvload_experiment import _leftovers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _records(path, event):
    """Return the JSON-lines records of one event in a log."""
    return [r for r in map(json.loads, path.read_text().splitlines())
            if r.get('event') == event]


@pytest.mark.root
@pytest.mark.timeout(900)    # includes waiting for the machine lock; the run takes ~1 min
def test_smoke_run_end_to_end(tmp_path):
    out, work = tmp_path / 'run', str(tmp_path / 'work')
    proc = subprocess.run(['/usr/bin/python3', 'topologies/transfer.py', '--scale', 'smoke',
                           '--out', str(out), '--workdir', work],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'transfer targets' in proc.stdout
    manifest = json.loads((out / 'manifest.json').read_text())
    assert manifest['status'] == 'ok' and manifest['experiment'] == 'transfer'
    assert manifest['tcp']['congestion_control'] and manifest['workdir_fs']
    points = [json.loads(x) for x in (out / 'logs' / 'points.jsonl').read_text().splitlines()]
    kinds = {p['point']['kind'] for p in points}
    assert kinds == {'size', 'packet', 'load', 'path', 'capture'}
    for record in points:
        point, tag = record['point'], 'p%03d' % record['point']['point']
        assert record['result']['problems'] == [], record
        expected = record['result']['files']['f%d.bin' % point['size']]
        clients = sorted((out / 'logs').glob('%s-client-c*.jsonl' % tag))
        assert len(clients) == point.get('conns', 1)
        for log in clients:     # every client got the whole file, hash checked
            (got,) = _records(log, 'received')
            assert got['bytes'] == point['size'] and got['sha256'] == expected
            assert got['sha256_ok'] is True
        (sent,) = _records(out / 'logs' / ('%s-server.jsonl' % tag), 'sent') \
            if point.get('conns', 1) == 1 else [None]
        if sent:                # one send() per packet: the write size is real; cubic
            assert sent['congestion_control'] == 'cubic'
            assert sent['writes'] >= -(-point['size'] // point['packet'])
        if point['kind'] == 'capture':   # the wire carried one packet per segment
            (summary,) = _records(out / 'logs' / ('%s-capture.jsonl' % tag), 'summary')
            sizes = {int(k): v for k, v in summary['payload_sizes'].items()}
            full = point['size'] // point['packet']     # a few may go out split, no more
            assert sizes.get(point['packet'], 0) >= 0.98 * full, sizes
            assert sum(n for s, n in sizes.items() if s > point['packet']) == 0, sizes
        elif not point.get('cold'):     # iperf3 ran beside ours in the same point
            iperf = json.loads((out / 'logs' / ('%s-iperf3-client.json' % tag)).read_text())
            assert iperf['end']['sum_received']['bits_per_second'] > 0
            assert iperf['end']['sender_tcp_congestion'] == 'cubic'
    for name in ('table1_size', 'table2_packet', 'table3_load', 'table4_iperf', 'path',
                 'capture', 'targets'):
        assert len(pd.read_csv(out / 'tables' / ('%s.csv' % name))) > 0, name
    report = (out / 'report.md').read_text()
    assert 'machine: ' in report
    # nothing left behind: no node process, no emulated link, no data files
    assert not _leftovers(work, str(out))
    assert subprocess.run(['ip', 'link', 'show', 's1-eth1'], capture_output=True
                          ).returncode != 0
    # no data file; the --workdir lock file (leftovers.workdir_lock) holds none and stays
    leftover = [os.path.join(d, f) for d, _, fs in os.walk(work) for f in fs
                if os.path.join(d, f) != os.path.join(str(work), '.lock')]
    assert not leftover, leftover
