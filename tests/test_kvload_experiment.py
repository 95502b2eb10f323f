"""kvload (seed 001) end to end on Mininet at --scale smoke: both servers, both layouts,
redis-benchmark and appendfsync points, the analysis, and nothing left behind."""

import json
import os
import subprocess

import pandas as pd
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _leftovers(*paths):
    """Processes whose command line names one of paths (the run's servers name their
    append-only files under --workdir, its clients their latency files under --out)."""
    found = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            argv = open('/proc/%s/cmdline' % pid, 'rb').read().split(b'\0')
        except OSError:
            continue
        text = b' '.join(argv).decode(errors='replace')
        if any(p in text for p in paths):
            found.append((pid, text))
    return found


@pytest.mark.root
@pytest.mark.timeout(900)    # includes waiting for the machine lock; the run takes ~1 min
def test_smoke_run_end_to_end(tmp_path):
    out, work = tmp_path / 'run', str(tmp_path / 'work')
    proc = subprocess.run(['/usr/bin/python3', 'topologies/kvload.py', '--scale', 'smoke',
                           '--out', str(out), '--workdir', work],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'kvload targets' in proc.stdout
    manifest = json.loads((out / 'manifest.json').read_text())
    assert manifest['status'] == 'ok' and manifest['experiment'] == 'kvload'
    requests = manifest['params']['requests']
    # every client of every load point logged three phases, all requests ok
    clients = pd.read_csv(out / 'tables' / 'clients.csv')
    assert set(clients['server']) == {'ours', 'redis'}
    assert set(clients['layout']) == {'local', 'lan'}
    assert (clients['ok'] == requests).all() and clients['failed'].sum() == 0
    assert len(clients) == 2 * 2 * (1 + 2) * 3        # servers x layouts x clients x ops
    for lat in (out / 'logs').glob('*.lat'):          # one uint32 per request
        assert lat.stat().st_size == 4 * 3 * requests, lat
    response = pd.read_csv(out / 'tables' / 'response.csv')
    assert (response['p50_ms'] > 0).all() and (response['p99_ms'] >= response['p50_ms']).all()
    # redis-cli (a client nobody here wrote) found every store empty after the DELs
    points = [json.loads(line) for line in (out / 'logs' / 'points.jsonl').read_text()
              .splitlines()]
    loads = [p for p in points if p['point']['kind'] == 'load']
    assert loads and all(p['result']['dbsize_after'] == 0 for p in loads)
    # redis-benchmark ran against both servers: SET and GET, three shapes
    ratio = pd.read_csv(out / 'tables' / 'bench_ratio.csv')
    assert len(ratio) == 6 and (ratio['ours_over_redis'] > 0).all()
    fsync = pd.read_csv(out / 'tables' / 'fsync.csv')
    assert len(fsync) == 6 and (fsync['set_rps'] > 0).all()
    # our server ran on uvloop and said so; its summary counted the load's commands
    ours = [p for p in loads if p['point']['server'] == 'ours'][0]
    lines = [json.loads(x) for x in (out / 'logs' / ('p%03d-server-ours.jsonl' % ours[
        'point']['point'])).read_text().splitlines()]
    ready = [x for x in lines if x.get('event') == 'ready'][0]
    summary = [x for x in lines if x.get('event') == 'summary'][-1]
    assert ready['loop'] == 'uvloop' and summary['commands'] >= 3 * requests
    assert manifest['kv_server_loops'] == ['uvloop']
    report = (out / 'report.md').read_text()
    assert 'seed_ms_per_request' in report and 'machine: ' in report
    targets = pd.read_csv(out / 'tables' / 'targets.csv')
    assert not targets['verdict'].str.startswith('not met: operations').any()
    # nothing left behind: no node process, no emulated link, no append-only file
    assert not _leftovers(work, str(out))
    assert subprocess.run(['ip', 'link', 'show', 'sw1-eth1'], capture_output=True
                          ).returncode != 0
    # no data file; the --workdir lock file (leftovers.workdir_lock) holds none and stays
    assert not os.path.exists(work) or set(os.listdir(work)) <= {'.lock'}
