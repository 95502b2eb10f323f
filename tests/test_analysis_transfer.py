"""transfer analysis on the hand-made folder of tests/transfer_folder.py: the seed's tables
beside ours, per-connection matching, aggregate and Jain's index, the Mathis bound, the wire
check, targets that a failed transfer keeps from being met, missing inputs (still written,
exit status 1) and byte-identical rebuilds. Every expected figure is worked out by hand in
the folder's docstring."""

import pathlib
import subprocess
import sys

import pytest

from analysis import transfer
from tests import transfer_folder
from tests.test_analysis_kvload import _one

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def run(tmp_path):
    return transfer_folder.make_run(tmp_path)


def _target(data, start):
    return _one(data['targets'][data['targets']['target'].str.startswith(start)])


def test_table1_warm_beside_cold_and_the_seed(run):
    data = transfer.tables(run)
    row = _one(data['table1_size'], size=transfer_folder.MB10)
    assert (row['seed_tx_mbps'], row['seed_rx_mbps']) == (611, 582)
    assert row['rx_mbps'] == pytest.approx(720.0)              # (800 + 640) / 2
    assert (row['rx_min'], row['rx_max']) == pytest.approx((640.0, 800.0))
    assert row['tx_mbps'] == pytest.approx(1440.0)             # the server's, 2 x R_x
    assert row['iperf_mbps'] == pytest.approx(900.0)
    assert row['rx_over_iperf'] == pytest.approx(0.8)
    assert row['rx_over_bw'] == pytest.approx(0.72)
    assert row['cold_rx_mbps'] == pytest.approx(400.0)
    assert (row['warm_read_s'], row['cold_read_s']) == pytest.approx((0.001, 0.01))
    assert row['repetitions'] == 2
    failed = _one(data['table1_size'], size=1000000)
    assert failed['failed'] == 1 and pd_isna(failed['rx_mbps'])
    seed_only = _one(data['table1_size'], size=70 * 1000 * 1000)
    assert seed_only['seed_tx_mbps'] == 544 and seed_only['repetitions'] == 0


def pd_isna(value):
    return value is None or value != value


def test_table2_packet(run):
    row = _one(transfer.tables(run)['table2_packet'], packet=100)
    assert (row['seed_tx_mbps'], row['seed_rx_mbps']) == (440, 436)
    assert row['rx_mbps'] == pytest.approx(500.0) and row['rx_over_iperf'] == pytest.approx(1.0)


def test_load_aggregate_jain_and_iperf_streams(run):
    data = transfer.tables(run)
    three = _one(data['table3_load'], conns=3)
    assert three['rx_mbps'] == pytest.approx((800 / 3 * 2 + 1600 / 3) / 3)
    assert three['aggregate_mbps'] == pytest.approx(800.0)     # 30 MB over 0.3 s
    assert three['aggregate_over_one'] == pytest.approx(1.0)
    assert three['jain'] == pytest.approx(0.8889, abs=1e-4)
    assert (three['seed_tx_mbps'], three['seed_rx_mbps']) == (434, 431)
    iperf = _one(data['table4_iperf'], conns=3)
    assert iperf['iperf_mbps'] == pytest.approx(800.0)
    assert iperf['iperf_stream_mean_mbps'] == pytest.approx(800 / 3)
    assert iperf['iperf_jain'] == pytest.approx(640000 / 660000)
    assert iperf['seed_iperf_sum_mbps'] == 899
    # each connection's T_x is the server record of its own request
    conns = data['transfers']
    assert list(conns[conns['point'] == 5]['tx_mbps'].round(3)) == pytest.approx(
        [2 * 800 / 3, 2 * 800 / 3, 2 * 1600 / 3], abs=1e-3)


def test_path_bounds(run):
    path = transfer.tables(run)['path']
    lossy = _one(path, delay_ms=10.0, loss=1.0)
    assert lossy['rtt_ms'] == 20.0 and lossy['bdp_bytes'] == 250000
    assert lossy['mathis_mbps'] == pytest.approx(7.0937, abs=1e-4)
    assert lossy['limit_mbps'] == pytest.approx(lossy['mathis_mbps'])
    assert lossy['rx_over_limit'] == pytest.approx(20 / 7.0937, abs=1e-3)
    clean = _one(path, delay_ms=10.0, loss=0.0)
    assert pd_isna(clean['mathis_mbps']) and clean['limit_mbps'] == 100.0
    assert clean['rx_over_limit'] == pytest.approx(0.9)


def test_capture_and_targets(run):
    data = transfer.tables(run)
    cap = _one(data['capture'], packet=1000)
    assert (cap['exact'], cap['expected_exact'], cap['larger']) == (262, 262, 0)
    assert cap['wire_ok'] and cap['sizes_seen'] == '75:1 144:1 1000:262'
    assert _target(data, 'R_x / iperf3')['measured'] == pytest.approx(0.8)
    assert _target(data, 'R_x / iperf3')['verdict'] == 'not met'
    assert _target(data, 'R_x / configured')['measured'] == pytest.approx(0.72)
    assert _target(data, 'N connections')['verdict'] == 'met'
    assert _target(data, "Jain's")['verdict'] == 'not met'
    mathis = _target(data, 'under loss')
    assert mathis['verdict'] == 'not met' and 'cubic grows its window faster' in mathis['notes']
    sha = _target(data, 'every received file')
    assert sha['verdict'] == 'not met' and sha['notes'] == '1 failed'
    assert _target(data, 'captured segments')['verdict'] == 'met'


def test_a_failed_transfer_keeps_its_target_from_being_met(tmp_path):
    run = transfer_folder.make_run(tmp_path)
    log = run / 'logs' / 'p001-client-c1.jsonl'
    log.write_text('{"event": "error", "error": "the server went away", "bytes": 1}\n')
    data = transfer.tables(run)
    target = _target(data, 'R_x / iperf3')
    assert target['verdict'] == 'not met' and target['notes'] == '1 failed operations', target


def _analysis(run):
    return subprocess.run([sys.executable, '-m', 'analysis', str(run)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_a_missing_iperf_log_is_named_and_the_rest_still_written(run):
    (run / 'logs' / 'p003-iperf3-client.json').unlink()
    done = _analysis(run)
    assert done.returncode == 1 and 'p003-iperf3-client.json' in done.stderr
    assert (run / 'report.md').exists() and (run / 'tables' / 'table2_packet.csv').exists()
    assert 'p003-iperf3-client.json' in (run / 'tables' / 'inputs.csv').read_text()


def test_rebuilding_gives_byte_identical_tables_and_report(run):
    assert _analysis(run).returncode == 0
    first = {p.name: p.read_bytes() for p in sorted((run / 'tables').iterdir())}
    first['report.md'] = (run / 'report.md').read_bytes()
    assert _analysis(run).returncode == 0
    again = {p.name: p.read_bytes() for p in sorted((run / 'tables').iterdir())}
    again['report.md'] = (run / 'report.md').read_bytes()
    assert first == again
    figures = sorted(p.name for p in (run / 'figures').iterdir())
    assert 'rate_by_size.png' in figures and 'rate_by_path.png' in figures
