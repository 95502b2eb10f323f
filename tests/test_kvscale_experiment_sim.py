"""The kvscale experiment on the simulation backend, end to end: no root, no Mininet.

Runs a small ``topologies/kvscale.py --backend sim`` twice with one seed (separate
processes, other string hashes): the run ends ok and is analysed by the same module, only
our servers on the homogeneous hosts ran (Redis and the mixed class skipped with one
sentence), every step of every point succeeded, the admin step's INFO records add up to
the preloaded keys, and the two runs' logs and tables are byte-identical. The admin's
``setup`` (for Redis nodes) is refused in the simulator with one sentence."""

import json
import subprocess
import sys

import pytest

from tests.sim_runs import (REPO, assert_no_cpu_monitor, digests as _digests, points_of_ok_run,
                            run_sim, two_runs)
from tests.test_targets import assert_one_format
from tests.test_kv_sim import Sim

SMALL = ['--scale', 'smoke', '--server-counts', '2', '--client-counts', '4',
         '--cache-sizes', '10', '--policies', 'lfu', '--skew-servers', '', '--keys', '300',
         '--duration', '0.5']


def _run(out, workdir, hashseed):
    return run_sim('kvscale.py', out, workdir, hashseed, '--seed', 3, *SMALL)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    return two_runs(tmp_path_factory, 'kvscalesim', _run)


def test_a_small_simulated_run_is_analysed_and_skips_what_it_cannot_model(runs):
    first, _, proc = runs
    assert proc.stdout.count('skips Redis') == 1
    points = points_of_ok_run(first)
    assert [(p['point']['kind'], p['point']['server'], p['point']['class'])
            for p in points] == [('scale', 'ours', 'homogeneous'),
                                 ('cache', 'ours', 'homogeneous')]
    for p in points:
        r = p['result']
        assert (r['preload_status'], r['resetstat_status'], r['info_status']) == (0, 0, 0)
        assert r['failed_loadgens'] == [] and r['servers_alive'] == 2
        assert r['mix_end'] - r['mix_start'] >= 0.5
        info = [json.loads(line) for line in
                (first / 'logs' / ('p%03d-info.jsonl' % p['point']['point'])).open()]
        assert sum(rec['dbsize'] for rec in info if rec['event'] == 'server') == 300
    assert 'not applied: simulated' in (first / 'report.md').read_text()


def test_the_same_seed_gives_byte_identical_logs_and_tables(runs):
    first, second, _ = runs
    assert _digests(first, 'logs') == _digests(second, 'logs')
    assert _digests(first, 'tables') == _digests(second, 'tables')


def test_redis_or_the_mixed_class_alone_is_refused_in_one_sentence():
    for flags in (['--servers', 'redis'], ['--classes', 'mixed']):
        proc = subprocess.run([sys.executable, str(REPO / 'topologies' / 'kvscale.py'),
                               '--backend', 'sim', '--dry-run'] + flags,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and 'homogeneous hosts only' in proc.stderr
        assert proc.stderr.strip().count('\n') == 0


def test_the_admin_setup_for_redis_is_refused_in_the_simulator(tmp_path):
    sim = Sim(tmp_path)
    proc = sim.start('a', 'setup', 'workloads.kvcluster_admin', [
        'setup', '--cluster', 's1=%s:6379' % sim.ip, '--vnodes', 4])
    assert proc.returncode == 1
    assert (sim.logs / 'setup.err').read_text() == (
        'kvcluster_admin setup: setup configures Redis nodes, which do not run in the '
        'simulator\n')


def test_its_targets_are_in_the_one_format(runs):
    assert_one_format(runs[0])


def test_the_report_says_the_simulation_had_no_cpu_monitor(runs):
    assert_no_cpu_monitor(runs[0])
