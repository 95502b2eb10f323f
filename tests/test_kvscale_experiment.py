"""kvscale (seed 003) end to end on Mininet at --scale smoke: ours and Redis Cluster over 1
and 2 CPU-limited servers of both speed classes, the cache and one-vnode points, the
analysis, and nothing left behind (processes, links, cgroups, server data)."""

import json
import os
import subprocess

import pandas as pd
import pytest

from tests.test_kvload_experiment import _leftovers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _groups():
    """repronet's CPU-limit cgroups that exist now (v1 cpu hierarchy or v2 root)."""
    found = []
    for root in ('/sys/fs/cgroup/cpu/repronet', '/sys/fs/cgroup/repronet'):
        if os.path.isdir(root):
            found += [os.path.join(root, d) for d in os.listdir(root)
                      if os.path.isdir(os.path.join(root, d))]
    return found


@pytest.mark.root
@pytest.mark.timeout(900)    # includes waiting for the machine lock; the run takes ~2 min
def test_smoke_run_end_to_end(tmp_path):
    out, work = tmp_path / 'run', str(tmp_path / 'work')
    # 1 s of mix per point instead of smoke's 3, and slow servers at 1/8 of a core instead
    # of 1/16 (still half the fast class): every point still runs, and the checks below need
    # requests, hits and one slow class, not a steady state (~26 s and ~10 s less)
    proc = subprocess.run(['/usr/bin/python3', 'topologies/kvscale.py', '--scale', 'smoke',
                           '--duration', '1', '--slow-cores', '0.125',
                           '--out', str(out), '--workdir', work],
                          cwd=REPO, capture_output=True, text=True, timeout=800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'kvscale targets' in proc.stdout
    manifest = json.loads((out / 'manifest.json').read_text())
    assert manifest['status'] == 'ok' and manifest['experiment'] == 'kvscale'
    # CPU limits were applied and recorded, one class slow in the mixed set
    limits = manifest['mechanisms']['cpu_limits']
    assert limits['mechanism'] in ('v1', 'v2')
    assert limits['hosts']['m1'] == manifest['params']['slow_cores']
    assert limits['hosts']['h1'] == manifest['params']['fast_cores']
    points = pd.read_csv(out / 'tables' / 'points.csv')
    assert len(points) == 13 and points['failed'].sum() == 0
    assert set(points['server']) == {'ours', 'redis'}
    assert (points['get_n'] > 0).all() and (points['set_n'] > 0).all()
    assert (points['get_p99_ms'] >= points['get_p50_ms']).all()
    # every preloaded key is on some server, for both stores
    assert (points['keys_total'] == manifest['params']['keys']).all()
    # both stores partition identically: same key counts per server for the same layout
    keys = pd.read_csv(out / 'tables' / 'keys.csv')
    two = keys[(keys['kind'] == 'scale') & (keys['servers'] == 2)]
    for host, g in two.groupby('host'):
        assert g['keys'].nunique() == 1, g
    # the cache points counted hits; one vnode per server is more skewed than many
    cache = pd.read_csv(out / 'tables' / 'cache.csv')
    assert len(cache) == 3 and (cache['hit_rate'] > 0).all()
    ring = pd.read_csv(out / 'tables' / 'ring.csv')
    two_ring = ring[ring['servers'] == 2].set_index('vnodes')['slot_imbalance']
    assert two_ring[1] > two_ring[manifest['params']['vnodes']]
    report = (out / 'report.md').read_text()
    assert 'machine: ' in report and "seed's statements" in report
    # nothing left behind: no node process, no emulated link, no cgroup, no server data
    assert not _leftovers(work, str(out))
    assert subprocess.run(['ip', 'link', 'show', 'sw1-eth1'], capture_output=True
                          ).returncode != 0
    assert not _groups()
    # no data file; the --workdir lock file (leftovers.workdir_lock) holds none and stays
    assert not os.path.exists(work) or set(os.listdir(work)) <= {'.lock'}
