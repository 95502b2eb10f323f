"""The rudp experiment on the simulation backend, end to end: no root, no Mininet.

Runs ``topologies/rudp.py --backend sim --scale smoke`` twice with one seed (separate
processes, other string hashes) and once with another: the run ends ok and is analysed by
the same module, only our protocol's modes ran (the iperf3 and uftp points are skipped with
one sentence), every file arrived whole, the manifest records the simulated backend, and the
two same-seed runs' logs and tables are byte-identical while the other seed's differ."""


import pytest

from tests.sim_runs import (assert_no_cpu_monitor, digests as _digests, points_of_ok_run,
                            run_sim)
from tests.test_targets import assert_one_format


def _run(out, seed, workdir, hashseed):
    return run_sim('rudp.py', out, workdir, hashseed, '--scale', 'smoke', '--seed', seed)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp('rudpsim')
    work = base / 'work'
    first = _run(base / 'a', 7, work, 1)
    _run(base / 'b', 7, work, 2)
    _run(base / 'c', 8, work, 3)
    return base / 'a', base / 'b', base / 'c', first


def test_a_simulated_smoke_run_is_analysed_and_skips_what_needs_real_hosts(runs):
    first, _, _, proc = runs
    assert proc.stdout.count('skips the iperf3 (TCP, UDP) and uftp points') == 1
    points = points_of_ok_run(first)
    assert {p['point']['mode'] for p in points} == {'seed', 'window'}
    assert len(points) == 5 and all(not p['result']['problems'] for p in points)
    transfers = (first / 'tables' / 'transfers.csv').read_text()
    assert transfers.count('\n') == 6 and (first / 'report.md').is_file()
    assert '5 whole and checked, 0 failed' in (first / 'report.md').read_text()


def test_the_same_seed_gives_byte_identical_logs_and_tables(runs):
    first, second, other, _ = runs
    assert _digests(first, 'logs') == _digests(second, 'logs')
    assert _digests(first, 'tables') == _digests(second, 'tables')
    assert _digests(first, 'logs') != _digests(other, 'logs')


def test_its_targets_are_in_the_one_format(runs):
    assert_one_format(runs[0])


def test_the_report_says_the_simulation_had_no_cpu_monitor(runs):
    assert_no_cpu_monitor(runs[0])
