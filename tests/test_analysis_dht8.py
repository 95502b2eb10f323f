"""dht8 analysis: figures that say what they measure, on the hand-made results folder of
tests/dht8_folder.py (pooled latency percentiles, failed operations, the CPU bar, the
machine, the delay daemons' lateness, every fault kind) and read_jsonl's dropped lines."""

import json
import pathlib

import pandas as pd
import pytest

from analysis import dht8, dht8_report, machine
from repronet.run import cpu, results
from tests import dht8_folder

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def run(tmp_path):
    return dht8_folder.make_run(tmp_path)


def _client(run, point, peer, *args, **kwargs):
    dht8_folder.client_log(run / 'logs', 'p%03d-client-%s' % (point, peer), *args, **kwargs)


def _point(data, n):
    points = data['points']
    return points[points['point'] == n].iloc[0]


def test_latency_percentiles_pool_every_operation_of_every_client(run):
    # point 1: p1's 10 searches took 1 ms, p2's 30 took 5 ms: most searches took 5 ms
    _client(run, 1, 'p1', 'search', 10, 0.02, 1010.0, latency=0.001)
    _client(run, 1, 'p2', 'search', 30, 0.2, 1010.0, latency=0.005)
    # point 3: 2 slow searches among 200: the 99th percentile is still 1 ms
    _client(run, 3, 'p1', 'search', 100, 0.2, 1030.0, latencies=[0.001] * 98 + [0.05] * 2)
    _client(run, 3, 'p2', 'search', 100, 0.2, 1030.0, latency=0.001)
    data = dht8.build(run)
    one, three = _point(data, 1), _point(data, 3)
    assert one['lat_p50_ms'] == pytest.approx(5.0)
    assert three['lat_p99_ms'] == pytest.approx(1.0)
    assert three['lat_max_ms'] == pytest.approx(50.0)
    assert three['latency_samples'] == 200


def test_failed_operations_leave_the_per_operation_time_and_fail_the_target(run):
    _client(run, 0, 'p1', 'register', 4, 0.0003, 1000.0, latency=0.00005, fail=1)
    _client(run, 2, 'p1', 'register', 4, 0.0004, 1020.0, latency=0.00005)
    data = dht8.build(run)
    clients = data['clients']
    first = clients[clients['point'] == 0].iloc[0]
    assert first['ms_per_op'] == pytest.approx(0.1)          # 0.3 ms / 3 ok operations
    targets = data['targets']
    row = targets[targets['target'].str.startswith('register batched')].iloc[0]
    assert row['measured'] == pytest.approx(0.1) and row['goal'].startswith('< ')
    assert row['notes'].startswith('1 failed operation,') and row['verdict'] == 'not met'
    assert '1 failed' in dht8.targets_text(run)
    assert '**no** (1 failed operation' in (run / 'report.md').read_text()


def test_one_cpu_bar_flags_points_and_sits_next_to_the_verdict(run):
    points = dht8_folder.read_points(run)
    points[0][1]['finished'] = 1006.5        # point 0's timed part: 13 whole samples
    dht8_folder.rewrite_points(run, points)
    # 1 sample of 13 over the bar: over cpu.MAX_OVER_FRACTION (5 %), as the run's verdict
    dht8_folder.write(run / 'logs' / 'cpu.jsonl', [
        {'t': 1000.0 + 0.5 * i, 'busy': 0.9 if i == 4 else 0.2, 'steal': 0,
         'cores': [0.2, 0.2]} for i in range(15)])
    data = dht8.build(run)
    first = _point(data, 0)
    assert first['cpu_over_fraction'] == pytest.approx(1 / 13)
    assert cpu.MAX_OVER_FRACTION < 1 / 13 and first['cpu_bound']
    targets = data['targets']
    row = targets[targets['target'].str.startswith('register batched')].iloc[0]
    assert 'CPU-bound' in row['notes']
    report = (run / 'report.md').read_text()
    line = [ln for ln in report.splitlines() if ln.startswith('| register batched, ms')][0]
    assert 'CPU-bound' in line
    busy, idle = 100 * cpu.THRESHOLD, 100 * (1 - cpu.THRESHOLD)
    assert 'more than %g %% of its samples over %g %% busy' % (
        100 * cpu.MAX_OVER_FRACTION, busy) in report
    assert '%g %% idle' % idle in report
    assert 'CPU-bound' in dht8.targets_text(run)


def test_the_report_names_the_machine_the_manifest_names(run):
    dht8.build(run)
    report = (run / 'report.md').read_text()
    assert '6 CPUs' in report and '8.0 GiB' in report and 'Test CPU' in report
    assert '2-core' not in report
    (run / 'manifest.json').write_text(
        json.dumps({k: v for k, v in dht8_folder.manifest().items() if k != 'provenance'}))
    dht8.build(run)
    assert 'machine not recorded in the manifest' in (run / 'report.md').read_text()


def test_delay_daemon_lateness_is_a_table_and_a_report_line(run):
    data = dht8.build(run)
    late = data['linkdelay']
    assert list(late['host']) == ['p1', 's1']
    assert list(late['late_us_mean']) == [3.0, 1.0] and list(late['late_us_max']) == [40, 90]
    report = (run / 'report.md').read_text()
    assert ('delay daemons released packets late by 2.0 µs on average, 90.0 µs at most '
            '(2 daemons, the whole run), against links of 0.05ms one way') in report
    for path in (run / 'logs').glob('linkdelay-*.jsonl'):
        path.unlink()
    data = dht8.build(run)
    assert data['linkdelay'].empty
    assert 'delay daemons\' lateness: not recorded' in (run / 'report.md').read_text()


def test_delay_daemon_lateness_weighs_each_by_the_packets_it_released(run):
    """The mean is over released packets (accepted also counts unheld ones): p1 3.0 us over
    1,000 released, s1 1.0 us over 3,000, both 2,000 accepted: 1.5 us (by accepted: 2.0)."""
    for host, late, released in (('p1', (3.0, 40.0), 1000), ('s1', (1.0, 90.0), 3000)):
        dht8_folder.linkdelay_log(run / 'logs', host, *late, accepted=2000, released=released)
    data = dht8.build(run)
    assert list(data['linkdelay']['released']) == [1000, 3000]
    assert 'delay daemons released packets late by 1.5 µs on average' in (
        run / 'report.md').read_text()


def test_failover_keeps_every_fault_kind_and_draws_recovery(run):
    data = dht8.build(run)
    fo = data['failover']
    assert list(fo['fault']) == ['kill', 'hang', 'cut']
    assert (fo['server'] == 's2').all() and list(fo['recovery_ms']) == pytest.approx([20.0] * 3)
    report = (run / 'report.md').read_text()
    assert 'SIGKILLed' not in report
    heading = [ln for ln in report.splitlines() if ln.startswith('## Failover')][0]
    assert 'killed' in heading and 'hung' in heading and 'cut' in heading
    assert (run / 'figures' / 'failover_recovery.png').exists()


def test_read_jsonl_counts_the_lines_it_dropped(tmp_path):
    log = tmp_path / 'node.jsonl'
    log.write_text('{"t": 1, "event": "ready"}\nnot json\n[1, 2]\n\n'
                   '{"t": 2, "event": "op"}\n{"t": 3, "ev')  # killed mid-write
    records = results.read_jsonl(log)
    assert [r['t'] for r in records] == [1, 2] and records.dropped == 3
    only = results.read_jsonl(log, event='op')
    assert only == [{'t': 2, 'event': 'op'}] and only.dropped == 3
    assert results.read_jsonl(tmp_path / 'missing.jsonl').dropped == 0


def test_every_analysis_module_stays_under_400_lines():
    long = {p.name: n for p in (REPO / 'analysis').glob('*.py')
            if (n := len(p.read_text().splitlines())) >= 400}
    assert not long


def test_figures_draw_what_the_tables_say(run):
    drawn = {name: saved.drawn for name, saved in dht8.build(run)['figures'].items()}
    assert 'part1_download_time_vs_operations' not in drawn    # no download rows: no figure
    per_op = drawn['part1_time_per_operation']
    assert per_op.xlabel == 'concurrent clients' and per_op.ylabel == 'ms per operation'
    ours, seed = per_op.get('ours: search', 'line'), per_op.get('seed: search', 'line')
    assert (ours.x, ours.y) == ((2.0,), (2.0,))       # 2 clients, 8 ops in 0.008 s each
    assert (seed.x, seed.y) == ((2.0,), (0.672,))     # the seed's row for 2 clients
    fo = drawn['failover_recovery']
    assert fo.get('mean ± sd', 'bars').x == ('cut', 'hang', 'kill')
    assert fo.get('mean ± sd', 'bars').y == pytest.approx((20.0, 20.0, 20.0))
    assert fo.get('client --timeout', 'reference').y == (1000.0,)
    cap = drawn['capture_messages']
    assert cap.get('repetitions', 'points').y == (4.0, 4.0)


def test_part2_rows_carry_the_cpu_bound_mark_as_part1_rows_do():
    """A new user saw sets A-E at 8 peers 1.00 busy with no mark though part2.csv said
    cpu_bound: the Part II table now writes it, as Part I's does."""
    import pandas as pd
    row = {'set': 'A', 'ops_per_client': 100, 'concurrent_clients': 8, 'total_time_s': 1.0,
           'total_time_s_sd': 0.1, 's_per_file': 0.01, 'bytes_per_s_per_client': 1e6,
           'fraction_of_link': 0.1, 'cpu_busy': 1.0, 'cpu_bound': True}
    lines = dht8_report._part2(pd.DataFrame([row, dict(row, set='B', cpu_busy=0.3,
                                                      cpu_bound=False)]))
    rows = [ln for ln in lines if ln.startswith('| A ') or ln.startswith('| B ')]
    assert rows[0].endswith('| 1.00 (CPU-bound) |') and rows[1].endswith('| 0.30 |')


def test_every_cpu_bound_point_is_listed_compactly_and_the_machine_once(run):
    """A seed run had 24 CPU-bound points and its report listed 12 and '...': now every one,
    as ranges, with what they measured; the machine is named once, on its own line, not again
    inside the CPU bullet."""
    data = dht8.tables(run)
    one = data['points'].iloc[[0]]
    data['points'] = pd.concat([one.assign(
        point=n, cpu_bound=n in range(3, 18) or n == 20,
        variant='search' if n == 20 else 'register') for n in range(22)], ignore_index=True)
    manifest = dht8_folder.manifest()
    text = dht8_report.report(manifest, data)
    bullet = next(ln for ln in text.splitlines() if 'CPU was the bottleneck' in ln)
    assert 'in 16 of 22 points: 3-17, 20 (I register, I search).' in bullet, bullet
    assert '...' not in bullet
    described = machine.describe(manifest)
    assert text.count(described) == 1 and described not in bullet
