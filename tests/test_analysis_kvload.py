"""kvload analysis on the hand-made results folder of tests/kvload_folder.py: the seed's
per-client totals, percentiles pooled from the raw latency files, failed operations that
keep a target from being met, the CPU mark, redis-benchmark and fsync ratios, missing
inputs (tables and report still written, exit status 1) and byte-identical rebuilds.

Every expected figure is worked out by hand from the folder's constants."""

import pathlib
import subprocess
import sys

import pytest

from analysis import kvload, kvload_report
from tests import kvload_folder

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def run(tmp_path):
    return kvload_folder.make_run(tmp_path)


@pytest.fixture(scope='module')
def clean(tmp_path_factory):
    """The clean folder and what one build of it returned, shared by the tests that only
    read them (a build draws every figure: most of each such test's time)."""
    run = kvload_folder.make_run(tmp_path_factory.mktemp('kvload-clean'))
    return run, kvload.build(run)


def _one(df, **match):
    """Return the single row of df matching every column=value."""
    for column, value in match.items():
        df = df[df[column] == value]
    assert len(df) == 1, match
    return df.iloc[0]


def _target(data, start):
    return _one(data['targets'][data['targets']['target'].str.startswith(start)])


def _analysis(run):
    """Run python -m analysis on run; return the finished process."""
    return subprocess.run([sys.executable, '-m', 'analysis', str(run)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_per_client_totals_and_ms_per_request(clean):
    run, data = clean
    c2 = _one(data['clients'], point=2, client=2, op='set')
    assert c2['total_ms'] == 16.0 and c2['ms_per_request'] == pytest.approx(16.0 / 20)
    assert c2['requests'] == 20 and c2['ok'] == 20 and c2['failed'] == 0
    # the seed's "Avg": the mean of the two clients' totals (12 and 16 ms)
    two = _one(data['response'], server='ours', clients=2, op='set')
    assert two['avg_total_ms'] == pytest.approx(14.0)
    assert two['ms_per_request'] == pytest.approx(0.7)
    # 2 clients x 60 requests answered over the point's 3 s (first set .. last del)
    assert two['point_ops_per_s'] == pytest.approx(40.0)
    seed = _one(data['seed'], clients=1, op='del')
    assert seed['ours_ms_per_request'] == pytest.approx(0.3)
    assert seed['redis_ms_per_request'] == pytest.approx(0.2)
    assert seed['seed_ms_per_request'] == pytest.approx(2098.0 / 100000)
    assert seed['ours_over_redis'] == pytest.approx(1.5)
    # the clean folder meets the one-client p50 target: 0.12 / 0.10 ms
    row = _target(data, 'one sequential client, set')
    assert row['measured'] == pytest.approx(1.2) and row['verdict'] == 'met'


def test_percentiles_pool_every_request_of_every_client_nearest_rank(clean):
    run, data = clean
    # point 2, set: c1 10 x 0.1 + 10 x 0.2 ms, c2 19 x 0.5 + 1 x 5.0 ms; 40 pooled,
    # the 20th is 0.2 ms (not the mean of the clients' p50s, 0.3) and the 40th is 5.0 ms
    c1, c2 = (_one(data['clients'], point=2, client=c, op='set') for c in (1, 2))
    assert c1['p50_ms'] == pytest.approx(0.1) and c1['p99_ms'] == pytest.approx(0.2)
    assert c2['p50_ms'] == pytest.approx(0.5) and c2['p99_ms'] == pytest.approx(5.0)
    two = _one(data['response'], server='ours', clients=2, op='set')
    assert two['p50_ms'] == pytest.approx(0.2)
    assert two['p99_ms'] == pytest.approx(5.0)
    # get is read from its own slice of the .lat files (offset 20), not the sets'
    get = _one(data['response'], server='ours', clients=2, op='get')
    assert get['p50_ms'] == pytest.approx(0.05) and get['p99_ms'] == pytest.approx(0.05)
    assert _one(data['response'], server='ours', clients=1, op='del')['p50_ms'] == \
        pytest.approx(0.09)


def test_wrong_replies_and_errors_fail_the_p50_target(run):
    # one client, ours, set: 17 ok, 2 wrong values, 1 error reply
    kvload_folder.client_log(run / 'logs', 0, 1, ok=17, wrong=2, errors={'ERR': 1})
    data = kvload.build(run)
    row = _one(data['clients'], point=0, client=1, op='set')
    assert row['failed'] == 3 and row['ok'] == 17
    assert _one(data['response'], server='ours', clients=1, op='set')['failed'] == 3
    target = _target(data, 'one sequential client, set')
    assert target['measured'] == pytest.approx(1.2)        # within 1.5x, but failed
    assert target['verdict'] == 'not met'
    assert '3 failed operations' in target['notes']
    assert _target(data, 'one sequential client, get')['verdict'] == 'met'
    report = (run / 'report.md').read_text()
    assert '- requests: 357 ok, 3 failed' in report
    line = [ln for ln in report.splitlines()
            if ln.startswith('| one sequential client, set')][0]
    assert '| not met | 3 failed operations' in line and '| met |' not in line
    assert 'not met (3 failed operations)' in kvload_report.targets_text(run)


def test_phases_a_client_never_logged_count_as_failed(run):
    # c2 of point 2 stopped after its sets: its 20 gets and 20 dels were never done
    kvload_folder.client_log(run / 'logs', 2, 2, phases=('set',))
    data = kvload.build(run)
    for op in ('get', 'del'):
        row = _one(data['clients'], point=2, client=2, op=op)
        assert row['failed'] == 20 and row['ok'] == 0
        assert _one(data['response'], server='ours', clients=2, op=op)['failed'] == 20
    assert _one(data['response'], server='ours', clients=2, op='set')['failed'] == 0
    assert _target(data, '2 clients, ours')['notes'].endswith('40 failed operations')


def test_a_cpu_bound_load_point_is_marked_and_named(run):
    # the folder's samples are 0.9 busy (over the 0.65 bar) only inside point 3
    data = kvload.build(run)
    redis2 = data['response'][(data['response']['server'] == 'redis') &
                              (data['response']['clients'] == 2)]
    assert len(redis2) == 3 and redis2['cpu_bound'].all()
    assert redis2['cpu_busy'].tolist() == pytest.approx([0.9] * 3)
    others = data['response'][~data['response'].index.isin(redis2.index)]
    assert not others['cpu_bound'].any()
    report = (run / 'report.md').read_text()
    hot = [ln for ln in report.splitlines() if ln.startswith('- CPU-bound load points')]
    assert hot == ['- CPU-bound load points (the machine, not the store, limited them): '
                   'redis local 2 clients']
    assert 'CPU-bound' in _target(data, '2 clients, Redis')['notes']
    assert 'CPU-bound' not in _target(data, '2 clients, ours')['notes']


def test_no_load_point_is_cpu_bound_when_the_samples_are_idle(tmp_path):
    run = kvload_folder.make_run(tmp_path, busy_points=())
    data = kvload.build(run)
    assert not data['response']['cpu_bound'].any()
    assert '- CPU-bound load points' not in (run / 'report.md').read_text()


def test_bench_ratio_and_c50_verdicts_at_one_half(clean):
    run, data = clean
    ratio = data['bench_ratio']
    assert _one(ratio, bench='c50', test='SET')['ours_over_redis'] == 0.5
    assert _one(ratio, bench='c50', test='GET')['ours_over_redis'] == \
        pytest.approx(39992 / 80000)
    assert _one(ratio, bench='c50p16', test='SET')['ours_over_redis'] == pytest.approx(0.25)
    assert _one(ratio, bench='c1', test='GET')['ours_rps'] == 10000.0
    assert _target(data, 'redis-benchmark -c 50 SET')['verdict'] == 'met'
    assert _target(data, 'redis-benchmark -c 50 GET')['verdict'] == 'not met'
    assert _target(data, 'redis-benchmark -c 50 -P 16 GET')['verdict'] == 'reported'
    report = (run / 'report.md').read_text()
    assert '| c50 | SET | 40000.000 | 80000.000 | 0.500 |' in report
    assert '| c50 | GET | 39992.000 | 80000.000 | 0.500 |' in report     # 0.4999 at 3 places


def test_fsync_throughput_relative_to_no(clean):
    run, data = clean
    fsync = data['fsync']
    assert _one(fsync, server='ours', appendfsync='always')['relative_to_no'] == \
        pytest.approx(0.2)
    assert _one(fsync, server='ours', appendfsync='everysec')['relative_to_no'] == \
        pytest.approx(0.8)
    assert _one(fsync, server='redis', appendfsync='always')['relative_to_no'] == \
        pytest.approx(0.25)
    assert _one(fsync, server='redis', appendfsync='no')['relative_to_no'] == 1.0
    assert '| ours | always | 2000.000 | 0.200 |' in (run / 'report.md').read_text()
    assert 'fsync' not in set(data['bench']['kind'])        # fsync points stay out of bench


def _still_written(run, sentence):
    """python -m analysis exits 1 with one sentence naming the input; all was written."""
    proc = _analysis(run)
    assert proc.returncode == 1 and proc.stdout == ''
    assert proc.stderr.count('\n') == 1 and sentence in proc.stderr, proc.stderr
    assert 'inputs were missing' in proc.stderr and 'Traceback' not in proc.stderr
    for name in ('clients', 'response', 'seed', 'bench', 'bench_ratio', 'fsync', 'targets',
                 'inputs'):
        assert (run / 'tables' / ('%s.csv' % name)).stat().st_size > 0
    report = (run / 'report.md').read_text()
    assert '## Inputs missing or unreadable' in report and sentence in report
    return report


def test_a_missing_client_log_is_named_and_the_rest_still_written(run):
    (run / 'logs' / 'p002-kvload-c2.jsonl').unlink()
    _still_written(run, 'client c2 of point 2 logged no phase')
    data = kvload.tables(run)
    assert _one(data['response'], server='ours', clients=2, op='set')['p50_ms'] == \
        pytest.approx(0.1)                      # c1's 20 sets alone


def test_a_short_latency_file_is_named(run):
    lat = run / 'logs' / 'p002-kvload-c2.lat'
    lat.write_bytes(lat.read_bytes()[:4 * 30])          # 20 sets and 10 of the gets
    _still_written(run, "logs/p002-kvload-c2.lat has 10 of the 20 latencies of client "
                        "c2's get phase in point 2")


def test_a_missing_bench_csv_is_named_and_its_target_has_no_data(run):
    n = kvload_folder.point_of(run, 'bench', 'redis', 'c50')
    (run / 'logs' / ('p%03d-bench.csv' % n)).unlink()
    _still_written(run, 'redis-benchmark gave no result in point %d (logs/p%03d-bench.csv)'
                   % (n, n))
    data = kvload.tables(run)
    assert _target(data, 'redis-benchmark -c 50 SET')['verdict'] == 'no data'


def test_the_clean_folder_exits_zero(run):
    proc = _analysis(run)
    assert proc.returncode == 0 and proc.stderr == '', proc.stderr
    assert (run / 'tables' / 'inputs.csv').read_text() == 'point,kind,count,problem\n'


def _outputs(run):
    """Return {name: bytes} of tables/*.csv and report.md."""
    out = {p.name: p.read_bytes() for p in sorted((run / 'tables').glob('*.csv'))}
    out['report.md'] = (run / 'report.md').read_bytes()
    return out


def test_rebuilding_gives_byte_identical_tables_and_report(tmp_path):
    first, second = tmp_path / 'a', tmp_path / 'b'
    first.mkdir()
    second.mkdir()
    kvload_folder.make_run(first)
    kvload_folder.make_run(second)
    kvload.build(first)
    once = _outputs(first)
    assert len(once) == 11       # 10 tables and report.md
    kvload.build(first)
    assert _outputs(first) == once
    kvload.build(second)
    assert _outputs(second) == once
