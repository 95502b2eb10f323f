"""The kvload experiment on the simulation backend, end to end: no root, no Mininet.

Runs ``topologies/kvload.py --backend sim --scale smoke`` twice with one seed (separate
processes, other string hashes): the run ends ok and is analysed by the same module, only
our server's load points ran (Redis, redis-benchmark and the profile point skipped with one
sentence; the local layout left out without --sim-cost, said once), every client got every
reply right and the store was empty after the DELs, and the two runs' logs and tables are
byte-identical. Refusals that only a simulated run has are one sentence."""

import json
import subprocess
import sys

import pytest

from tests.sim_runs import (REPO, assert_no_cpu_monitor, digests as _digests, points_of_ok_run,
                            run_sim, two_runs)
from tests.test_targets import assert_one_format


def _run(out, workdir, hashseed, *flags):
    return run_sim('kvload.py', out, workdir, hashseed, '--scale', 'smoke', '--seed', 7,
                   *flags)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    return two_runs(tmp_path_factory, 'kvloadsim', _run)


def test_a_simulated_smoke_run_is_analysed_and_skips_what_needs_real_hosts(runs):
    first, _, proc = runs
    assert proc.stdout.count('skips Redis, the redis-benchmark') == 1
    assert proc.stdout.count('leaves out the local layout') == 1
    points = points_of_ok_run(first)
    assert [(p['point']['kind'], p['point']['server'], p['point']['layout'],
             p['point']['clients']) for p in points] == [('load', 'ours', 'lan', 1),
                                                         ('load', 'ours', 'lan', 2)]
    assert all(p['result'] == {'failed_clients': [], 'dbsize_after': 0,
                               'server_alive': True} for p in points)
    assert 'requests: 2700 ok, 0 failed' in (first / 'report.md').read_text()


def test_the_same_seed_gives_byte_identical_logs_and_tables(runs):
    first, second, _ = runs
    assert _digests(first, 'logs') == _digests(second, 'logs')
    assert _digests(first, 'tables') == _digests(second, 'tables')


@pytest.mark.parametrize('flags, words', [
    (['--servers', 'redis'], 'runs our server only'),
    (['--layouts', 'local'], 'take no time at all'),
])
def test_simulation_only_refusals_are_one_sentence(tmp_path, flags, words):
    proc = subprocess.run([sys.executable, str(REPO / 'topologies' / 'kvload.py'),
                           '--backend', 'sim', '--dry-run'] + flags, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert proc.stderr.strip().count('\n') == 0


def test_with_a_processing_cost_the_local_layout_runs(tmp_path):
    proc = _run(tmp_path / 'cost', tmp_path / 'work', 1, '--layouts', 'local', '--clients', '1',
                '--sim-cost', 'nodes.kv.server=2e-5,workloads.kvload=1e-5')
    assert 'leaves out' not in proc.stdout
    phases = [json.loads(line) for line in
              (tmp_path / 'cost' / 'logs' / 'p000-kvload-c1.jsonl').open()]
    # each request costs the client and the server their charge: at least 30 us
    assert all(r['p50_us'] >= 30 for r in phases if r['event'] == 'phase')
    report = (tmp_path / 'cost' / 'report.md').read_text()
    assert '; --sim-cost modelled the nodes\' CPU time (on this machine\'s core count)' in report


def test_its_targets_are_in_the_one_format(runs):
    assert_one_format(runs[0])


def test_the_report_says_the_simulation_had_no_cpu_monitor(runs):
    assert_no_cpu_monitor(runs[0])
