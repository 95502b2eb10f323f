"""kvscale analysis on the hand-made results folder of tests/kvscale_folder.py: percentiles
pooled over load generators and repetitions, throughput over the mix window, hit rates and
key counts summed over servers, each server's CPU against its class's limit, the
throughput table's saturation rule, the targets, missing inputs (tables and report still
written, exit status 1), byte-identical rebuilds and a rebuild as user 'nobody'.

Every expected figure is worked out by hand from the folder's constants."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pandas as pd
import pytest

from analysis import kvscale, kvscale_report
from analysis.inputs import IncompleteInputs
from tests import kvscale_folder as folder
from tests import nobody
from tests.test_analysis_kvload import _one, _outputs, _target

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def run(tmp_path):
    return folder.make_run(tmp_path)


def _analysis(run, user=None):
    """Run python -m analysis on run (as 'nobody' if asked); return the finished process."""
    drop, cwd = ([], REPO) if user is None else (nobody.AS_NOBODY, nobody.checkout())
    return subprocess.run(drop + [sys.executable, '-m', 'analysis', str(run)], cwd=cwd,
                          capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE='1'))


def test_percentiles_pool_both_load_generators_and_the_repetitions(run):
    data = kvscale.build(run)
    # point 1: g1 10 GETs of 1 ms, g2 9 of 3 ms and one of 20 ms; pooled nearest rank,
    # the 10th of 20 is 1 ms (the generators' own p50s are 1 and 3 ms)
    p1 = _one(data['points'], point=1)
    assert p1['get_n'] == 20 and p1['get_mean_ms'] == pytest.approx(57 / 20)
    assert p1['get_p50_ms'] == pytest.approx(1.0) and p1['get_p99_ms'] == pytest.approx(20.0)
    # SETs come from their own files: 3 x 2 ms and 2 x 4 ms
    assert p1['set_n'] == 5 and p1['set_mean_ms'] == pytest.approx(2.8)
    assert p1['set_p50_ms'] == pytest.approx(2.0) and p1['set_p99_ms'] == pytest.approx(4.0)
    # the response row pools point 1 with its repetition, point 8 (10 GETs of 5 ms):
    # 30 latencies, mean 107/30 (not the mean of the points' means, 3.925), 15th = 3 ms
    two = _one(data['response'], server='ours', **{'class': 'homogeneous'}, servers=2)
    assert two['repetitions'] == 2
    assert two['get_mean_ms'] == pytest.approx(107 / 30)
    assert two['get_p50_ms'] == pytest.approx(3.0) and two['get_p99_ms'] == pytest.approx(20.0)
    # SETs pooled: 2,2,2,4,4 and 2,6 -> the 4th of 7 is 2 ms, the 7th 6 ms
    assert two['set_mean_ms'] == pytest.approx(22 / 7)
    assert two['set_p50_ms'] == pytest.approx(2.0) and two['set_p99_ms'] == pytest.approx(6.0)


def test_response_rows_pool_the_latencies_of_every_point_they_aggregate(run):
    # with --vnodes 1 a skew point has the same server, class, vnodes, clients and
    # servers as a scale point, so one response row holds both: point 8 as such a point
    folder.points_log(run, changes={8: {'kind': 'skew', 'repetition': 0}})
    two = _one(kvscale.tables(run)['response'], server='ours', servers=2,
               **{'class': 'homogeneous'})
    assert two['repetitions'] == 2 and two['ops_per_s'] == pytest.approx(1900.0)
    assert two['get_mean_ms'] == pytest.approx(107 / 30)       # not point 1's alone, 2.85
    assert two['get_p50_ms'] == pytest.approx(3.0)


def test_throughput_is_ok_operations_over_the_mix_window(run):
    data = kvscale.tables(run)
    points = data['points']
    # two generators x (1440 GET + 360 SET ok) over the 2 s mix
    assert _one(points, point=1)['ops_per_s'] == pytest.approx(1800.0)
    assert _one(points, point=8)['ops_per_s'] == pytest.approx(2000.0)
    assert _one(points, point=3)['ops_per_s'] == pytest.approx(500.0)     # g1 alone
    assert _one(points, point=1)['moved'] == 3
    assert _one(data['response'], server='ours', servers=2,
                **{'class': 'homogeneous'})['ops_per_s'] == pytest.approx(1900.0)
    # the window is the point's mix_start .. mix_end, not the summaries' duration_s
    folder.points_log(run, results={0: folder.result(0, mix_end=folder.mix_start(0) + 4)})
    assert _one(kvscale.tables(run)['points'], point=0)['ops_per_s'] == pytest.approx(500.0)


def test_hit_rate_sums_hits_and_misses_over_the_servers(run):
    data = kvscale.tables(run)
    points = data['points']
    # s1 30 hits / 10 misses, s2 5 / 15: 35 / 60 (the mean of the servers' rates is 0.5)
    assert _one(points, point=1)['hit_rate'] == pytest.approx(35 / 60)
    assert pd.isna(_one(points, point=3)['hit_rate'])             # Redis: no cache counters
    cache = data['cache']
    for policy, rate in (('fifo', 0.2), ('lru', 0.3), ('lfu', 0.4)):
        assert _one(cache, cache=policy, cache_size=10)['hit_rate'] == pytest.approx(rate)
    keys = _one(data['keys'], point=1, host='s2')
    assert keys['cache_hits'] == 5 and keys['cache_misses'] == 15


def test_key_imbalance_and_the_share_of_keys_on_slow_servers(run):
    points = kvscale.tables(run)['points']
    # 10 servers: 11, 10 x 8, 9 keys -> max/mean 11/10
    assert _one(points, point=2)['keys_imbalance'] == pytest.approx(1.1)
    assert _one(points, point=2)['keys_total'] == 100
    assert pd.isna(_one(points, point=2)['slow_key_share'])       # homogeneous: none slow
    # mixed, 2 servers: s1 slow with 60 of 100 keys
    three = _one(points, point=3)
    assert three['keys_imbalance'] == pytest.approx(1.2)
    assert three['slow_key_share'] == pytest.approx(0.6)
    # mixed, 10 servers, 1 vnode: s1, s4, s7, s10 slow hold 30 + 20 + 10 + 10 keys
    four = _one(points, point=4)
    assert four['keys_imbalance'] == pytest.approx(3.0)
    assert four['slow_key_share'] == pytest.approx(0.7)


def test_each_servers_cpu_against_its_class_limit_and_requests_served(run):
    data = kvscale.tables(run)
    keys = data['keys']
    # point 3, 2 s mix: s1 slow (0.0625 cores) used 0.1125 s, s2 fast (0.25) used 0.3 s
    s1, s2 = (_one(keys, point=3, host=h) for h in ('s1', 's2'))
    assert s1['speed'] == 'slow' and s1['cpu_of_limit'] == pytest.approx(0.9)
    assert s2['speed'] == 'fast' and s2['cpu_of_limit'] == pytest.approx(0.6)
    assert _one(data['points'], point=3)['busiest_server_cpu'] == pytest.approx(0.9)
    assert s1['requests'] == 600 and s2['requests'] == 400
    assert s1['key_share'] == pytest.approx(0.6)
    # requests per server add both generators' per_server counts, by the member's address
    assert _one(keys, point=1, host='s1')['requests'] == 1250 + 1100
    assert _one(keys, point=1, host='s2')['requests'] == 550 + 700
    # 0.1 s over 2 s: 0.2 of a fast server's limit, 0.8 of a slow one's
    assert _one(keys, point=4, host='s4')['cpu_of_limit'] == pytest.approx(0.8)
    assert _one(keys, point=4, host='s5')['cpu_of_limit'] == pytest.approx(0.2)


def test_throughput_table_saturates_below_ten_percent_growth(run):
    data = kvscale.tables(run)
    thr = data['throughput']
    ours = thr[thr['server'] == 'ours']
    assert ours['servers'].tolist() == [1, 2, 10]
    assert ours['ops_per_s'].tolist() == pytest.approx([1000.0, 1900.0, 2050.0])
    assert pd.isna(ours['gain_over_previous'].iloc[0])
    assert ours['gain_over_previous'].iloc[1:].tolist() == pytest.approx([1.9, 2050 / 1900])
    assert ours['saturated'].tolist() == [False, False, True]
    assert ours['cpu_bound'].tolist() == [False, False, True]     # CPU busy in point 2 only
    row = _target(data, 'throughput grows with servers until the CPUs saturate (ours')
    assert row['notes'] == ('1: 1000/s, 2: 1900/s, 10: 2050/s; growth stops at 10; '
                            'CPU-bound at 10')
    assert row['verdict'] == 'met'
    assert row['measured'] == pytest.approx(2.05)          # a number: 10 servers / 1
    # one store, class and client count with one server count: a row, no target
    assert _one(thr, server='redis')['saturated'] == False                # noqa: E712
    assert not data['targets']['target'].str.contains('redis').any()


def test_growth_of_exactly_ten_percent_is_not_saturation(run):
    for gen in (1, 2):              # 2 x 2090 ok over 2 s: 2090/s, 1.1 x 1900
        folder.mix_log(run / 'logs', 2, gen, ok=(1672, 418))
    data = kvscale.tables(run)
    ten = _one(data['throughput'], server='ours', servers=10)
    assert ten['gain_over_previous'] == pytest.approx(1.1) and not ten['saturated']
    assert 'growth stops at never' in _target(data, 'throughput grows')['notes']


def test_a_stop_without_saturated_cpus_does_not_meet_the_throughput_target(tmp_path):
    idle = folder.make_run(tmp_path, busy_points=())
    row = _target(kvscale.tables(idle), 'throughput grows')
    assert row['notes'].endswith('growth stops at 10; CPU-bound at none')
    assert row['verdict'] == 'not met'
    # CPU-bound with one server only does not explain a stop at ten
    shutil.rmtree(tmp_path / 'logs')
    early = folder.make_run(tmp_path, busy_points=(0,))
    row = _target(kvscale.tables(early), 'throughput grows')
    assert row['notes'].endswith('growth stops at 10; CPU-bound at 1')
    assert row['verdict'] == 'not met'
    # CPU-bound at the count before the stop: ten servers had no more CPU to share
    shutil.rmtree(tmp_path / 'logs')
    before = folder.make_run(tmp_path, busy_points=(1,))
    row = _target(kvscale.tables(before), 'throughput grows')
    assert row['notes'].endswith('growth stops at 10; CPU-bound at 2')
    assert row['verdict'] == 'met'


def test_hit_rate_target_lfu_lru_fifo(run):
    data = kvscale.tables(run)
    row = _target(data, 'hit rate LFU >= LRU >= FIFO, cache 10')
    assert row['notes'] == 'LFU 0.400, LRU 0.300, FIFO 0.200 (gaps +0.100, +0.100)'
    assert row['verdict'] == 'met' and row['measured'] == pytest.approx(0.1)  # smaller gap
    # LRU above LFU: 40 + 30 hits, 10 + 20 misses
    folder.info_log(run / 'logs', 6, hits=[(40, 10), (30, 20)])
    row = _target(kvscale.tables(run), 'hit rate')
    assert row['notes'].startswith('LFU 0.400, LRU 0.700') and row['verdict'] == 'not met'


def test_failed_operations_keep_the_hit_rate_target_from_being_met(run):
    # FIFO point, g2: 2 GETs found no value (miss), 1 wrong value, 1 error reply
    folder.mix_log(run / 'logs', 5, 2, miss=2, wrong=1, errors={'ERR': 1})
    data = kvscale.build(run)
    assert _one(data['points'], point=5)['failed'] == 4
    assert _one(data['cache'], cache='fifo')['failed'] == 4
    row = _target(data, 'hit rate')
    assert row['notes'].endswith('(4 operations or steps failed)')
    assert row['verdict'] == 'not met'
    row = _target(data, 'no operation or step failed')
    assert row['notes'] == '4 failed' and row['verdict'] == 'not met'
    assert row['measured'] == 4.0
    assert '[NOT MET] no operation or step failed: 4 failed' in kvscale_report.targets_text(run)


def test_imbalance_target_at_ten_servers_with_the_runs_vnodes(run):
    data = kvscale.tables(run)
    row = _target(data, 'key imbalance (max/mean) <= 1.1 with 1024 virtual nodes at 10')
    assert row['notes'] == 'worst 1.100 over 1 points' and row['verdict'] == 'met'
    assert row['measured'] == pytest.approx(1.1) and row['goal'] == '<= 1.1'
    one = _target(data, 'key imbalance with 1 virtual node(s) at 10 servers (reported)')
    assert one['notes'] == 'worst 3.000 over 1 points' and one['verdict'] == 'reported'
    folder.info_log(run / 'logs', 2, dbsize=[12] + [10] * 8 + [8])
    row = _target(kvscale.tables(run), 'key imbalance (max/mean)')
    assert row['notes'] == 'worst 1.200 over 1 points' and row['verdict'] == 'not met'


def test_imbalance_target_is_not_met_when_operations_failed(run):
    folder.mix_log(run / 'logs', 2, 1, errors={'TIMEOUT': 2})
    row = _target(kvscale.tables(run), 'key imbalance (max/mean)')
    assert row['notes'] == 'worst 1.100 over 1 points (2 operations or steps failed)'
    assert row['verdict'] == 'not met'


def test_imbalance_below_ten_servers_is_reported_not_judged(run):
    folder.points_log(run, [0, 1, 3, 5, 6, 7, 8])           # largest point: 2 servers
    targets = kvscale.tables(run)['targets']
    rows = targets[targets['target'].str.startswith('key imbalance')]
    assert rows['target'].tolist() == [
        'key imbalance with 1024 virtual node(s) at 2 servers (reported)']
    assert rows['notes'].tolist() == ['worst 1.200 over 3 points']
    assert (rows['verdict'] == 'reported').all()


def test_a_failed_load_generator_counts_as_a_failure(run):
    folder.mix_log(run / 'logs', 1, 2, summary=False)
    folder.points_log(run, results={1: folder.result(1, failed_loadgens=['g2'])})
    with pytest.raises(IncompleteInputs):
        kvscale.build(run)
    data = kvscale.tables(run)
    assert _one(data['points'], point=1)['failed'] == 1
    assert _target(data, 'no operation or step failed')['verdict'] == 'not met'


def test_a_point_whose_setup_failed_is_a_failure_though_it_ran_no_operation(run):
    # Redis Cluster setup exited 1: no mix ran, no load generator logged anything
    folder.mix_log(run / 'logs', 1, 1, summary=False)
    folder.mix_log(run / 'logs', 1, 2, summary=False)
    bare = {k: v for k, v in folder.result(1, setup_status=1).items()
            if k not in ('failed_loadgens', 'mix_start', 'mix_end')}
    folder.points_log(run, results={1: bare})
    data = kvscale.tables(run)
    assert _one(data['points'], point=1)['failed'] == 2      # setup, and no mix
    row = _target(data, 'no operation or step failed')
    assert row['notes'] == '2 failed' and row['verdict'] == 'not met'


def test_the_ring_table_keeps_the_runs_shares(run):
    ring = kvscale.tables(run)['ring']
    assert list(zip(ring['vnodes'], ring['servers'])) == [
        (1, 1), (1, 2), (1, 10), (1024, 1), (1024, 2), (1024, 10)]
    assert ring['used_by_run'].tolist() == [False] * 3 + [True] * 3
    assert _one(ring, vnodes=1, servers=10)['slot_imbalance'] == pytest.approx(3.0)


def _still_written(run, sentence):
    """build raises IncompleteInputs naming the input after writing everything; python -m
    analysis says the same in one sentence with exit status 1; inputs.csv lists it."""
    with pytest.raises(IncompleteInputs) as raised:
        kvscale.build(run)
    assert sentence in str(raised.value)
    for name in ('points', 'response', 'cache', 'keys', 'ring', 'throughput', 'targets',
                 'inputs'):
        assert (run / 'tables' / ('%s.csv' % name)).stat().st_size > 0
    assert sentence in (run / 'tables' / 'inputs.csv').read_text()
    report = (run / 'report.md').read_text()
    assert '## Missing inputs' in report and sentence in report
    proc = _analysis(run)
    assert proc.returncode == 1 and proc.stdout == ''
    assert proc.stderr.count('\n') == 1 and sentence in proc.stderr, proc.stderr
    assert 'Traceback' not in proc.stderr
    return kvscale.tables(run)


def test_a_load_generator_without_summary_is_named(run):
    folder.mix_log(run / 'logs', 1, 2, summary=False)
    data = _still_written(run, 'load generator p001-mix-g2 logged no summary')
    assert _one(data['inputs'], problem='load generator p001-mix-g2 logged no summary')[
        'point'] == 1
    p1 = _one(data['points'], point=1)
    assert p1['get_n'] == 10 and p1['get_p99_ms'] == pytest.approx(1.0)   # g1's alone
    assert p1['ops_per_s'] == pytest.approx(900.0)


def test_a_missing_latency_file_is_named(run):
    (run / 'logs' / 'p001-mix-g1.set.u32').unlink()
    data = _still_written(run, 'logs/p001-mix-g1.set.u32 missing')
    p1 = _one(data['points'], point=1)
    assert p1['set_n'] == 2 and p1['set_mean_ms'] == pytest.approx(4.0)    # g2's alone
    assert p1['get_n'] == 20


def test_an_info_log_with_fewer_servers_is_named(run):
    folder.info_log(run / 'logs', 2, dbsize=[11] + [10] * 8)            # s10 never answered
    data = _still_written(run, 'point 2: 9 of 10 servers reported INFO')
    assert _one(data['points'], point=2)['keys_total'] == 91
    assert len(data['keys'][data['keys']['point'] == 2]) == 9


def test_the_clean_folder_exits_zero(run):
    proc = _analysis(run)
    assert proc.returncode == 0 and proc.stderr == '', proc.stderr
    assert (run / 'tables' / 'inputs.csv').read_text() == 'point,kind,count,problem\n'
    assert proc.stdout == '%s: tables, figures and report.md rebuilt\n' % run


def test_rebuilding_gives_byte_identical_tables_and_report(tmp_path):
    built = []
    for name in ('a', 'a', 'b'):        # twice in one folder, once in a fresh one
        if not (tmp_path / name).exists():
            (tmp_path / name).mkdir()
            folder.make_run(tmp_path / name)
        kvscale.build(tmp_path / name)
        built.append(_outputs(tmp_path / name))
    assert len(built[0]) == 9           # 8 tables and report.md
    assert built[0] == built[1] == built[2]


@pytest.mark.skipif(os.geteuid() != 0, reason='only root can become nobody')
def test_python_m_analysis_rebuilds_the_folder_as_nobody(run):
    kvscale.build(run)
    want = _outputs(run)
    top = pathlib.Path(tempfile.mkdtemp(prefix='repronet-kvscale-'))
    try:
        os.chmod(top, 0o755)
        copy = top / 'run'
        shutil.copytree(run / 'logs', copy / 'logs')
        shutil.copy(run / 'manifest.json', copy)
        subprocess.run(['chown', '-R', '65534:65534', str(copy)], check=True)
        proc = _analysis(copy, user='nobody')
        assert proc.returncode == 0, proc.stderr
        assert _outputs(copy) == want
        assert json.loads((copy / 'manifest.json').read_text())['experiment'] == 'kvscale'
    finally:
        shutil.rmtree(top)


def test_a_manifest_without_server_classes_names_it_as_missing(run):
    manifest = json.loads((run / 'manifest.json').read_text())
    del manifest['server_classes']
    (run / 'manifest.json').write_text(json.dumps(manifest))
    data = kvscale.tables(run)
    assert data['points']['slow_key_share'].isna().all()
    assert any('no server_classes' in t for t in data['inputs'].astype(str).values.ravel())
