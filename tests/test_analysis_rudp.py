"""rudp analysis on a hand-made results folder: each mode's seconds read from its own tool
(our sender's done line, iperf3's JSON, uftp's log), the seed's table with ours scaled to
190 MB, goodput over the link and over TCP, the targets, a failed transfer, byte-identical
rebuilds. Every figure below is worked out by hand from the folder."""

import json
import subprocess
import sys

import pytest

from analysis import rudp
from tests.test_analysis_kvload import REPO, _one

SIZE = 1_900_000                  # 1/100 of the seed's 190 MB: seconds x 100 = seconds_190mb
# (config, delay, loss, mode, block, seconds)
POINTS = [(0, 3.0, 0.1, 'seed', 1, 8.0), (0, 3.0, 0.1, 'seed', 32, 0.4),
          (0, 3.0, 0.1, 'seed', 64, 0.36), (0, 3.0, 0.1, 'tcp92k', 32, 0.2),
          (0, 3.0, 0.1, 'tcp', 32, 0.19), (0, 3.0, 0.1, 'window', 32, 0.19),
          (0, 3.0, 0.1, 'uftp', 32, 0.25), (0, 3.0, 0.1, 'udp', 32, 0.16),
          (1, 5.0, 1.0, 'window', 32, 0.17), (1, 5.0, 1.0, 'tcp', 32, 0.76),
          (2, 5.0, 0.0, 'window', 32, 0.19), (2, 5.0, 0.0, 'tcp', 32, 0.17)]


def _mbps(seconds):
    return SIZE * 8 / seconds / 1e6


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path)


def make_run(tmp_path):
    """Write the hand-made rudp folder under tmp_path/run; return its path."""
    run = tmp_path / 'run'
    logs = run / 'logs'
    logs.mkdir(parents=True)
    (run / 'manifest.json').write_text(json.dumps({
        'experiment': 'rudp', 'status': 'ok', 'params': {'size': SIZE, 'bw': 100.0}}))
    records = []
    for i, (config, delay, loss, mode, block, seconds) in enumerate(POINTS):
        point = {'point': i, 'repetition': 0, 'config': config, 'delay_ms': delay,
                 'loss': loss, 'mode': mode, 'block': block, 'size': SIZE, 'bw': 100.0}
        records.append({'event': 'point', 'point': point, 'started': 1000.0, 't': 1009.0,
                        'result': {'problems': [], 'sha256': 'ab' * 32}})
        tag = 'p%03d' % i
        if mode in ('seed', 'window'):
            (logs / ('%s-send.jsonl' % tag)).write_text(json.dumps({
                'event': 'done', 'seconds': seconds, 'goodput_mbps': _mbps(seconds),
                'retransmitted': 3}) + '\n')
        elif mode == 'uftp':
            (logs / ('%s-uftp.log' % tag)).write_text(
                'x: Host: 0x0A000003       Status: Completed   time:   %.3f seconds\n'
                % seconds)
        else:
            (logs / ('%s-iperf3-client.json' % tag)).write_text(json.dumps({'end': {
                'sum_received': {'seconds': seconds, 'bits_per_second': _mbps(seconds) * 1e6},
                'sum_sent': {'retransmits': 7}}}))
    (logs / 'points.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in records))
    (logs / 'cpu.jsonl').write_text(''.join(json.dumps({'t': 1000.0 + k / 2, 'busy': 0.1})
                                            + '\n' for k in range(20)))
    return run


def test_seed_table_scales_ours_to_190_mb(run):
    seed = rudp.tables(run)['seed']
    b1 = _one(seed, mode='B=1')
    assert b1['seed_seconds_190mb'] == 794 and b1['seconds_190mb'] == pytest.approx(800.0)
    assert _one(seed, mode='TCP 92 KB')['seconds_190mb'] == pytest.approx(20.0)
    assert _one(seed, mode='TCP 92 KB')['seed_seconds_190mb'] == 160
    assert _one(seed, mode='uftp')['goodput_mbps'] == pytest.approx(_mbps(0.25))


def test_sweep_ratios_and_targets(run):
    data = rudp.tables(run)
    lossy = _one(data['sweep'], config=1, mode='window')
    assert lossy['over_bw'] == pytest.approx(_mbps(0.17) / 100)      # 0.894
    assert lossy['over_tcp'] == pytest.approx(0.76 / 0.17)            # 4.47
    targets = data['targets'].set_index('target')
    assert targets.loc['windowed goodput / link rate, 5 ms, 1 % loss', 'verdict'] == 'met'
    assert targets.loc['windowed goodput / TCP goodput, 5 ms, 1 % loss', 'verdict'] == 'met'
    clean = targets.loc['windowed goodput / TCP goodput, 5 ms, no loss']
    assert clean['measured'] == pytest.approx(0.17 / 0.19) and clean['verdict'] == 'not met'
    steep = targets.loc['seed mode: time at B=32 / at B=1 (steep fall)']
    assert steep['measured'] == pytest.approx(0.05) and steep['verdict'] == 'met'
    flat = targets.loc['seed mode: time at B=64 / at B=32 (flat after)']
    assert flat['measured'] == pytest.approx(0.9) and flat['verdict'] == 'met'
    assert targets.loc['every transfer whole, its SHA-256 checked', 'verdict'] == 'met'


def test_a_failed_transfer_is_not_a_met_target(run):
    points = (run / 'logs' / 'points.jsonl').read_text().splitlines()
    broken = json.loads(points[8])                  # config 1, windowed
    broken['result']['problems'] = ['our receiver received a file whose SHA-256 differs']
    points[8] = json.dumps(broken)
    (run / 'logs' / 'points.jsonl').write_text('\n'.join(points) + '\n')
    targets = rudp.tables(run)['targets'].set_index('target')
    assert targets.loc['windowed goodput / link rate, 5 ms, 1 % loss', 'verdict'] == 'no data'
    assert targets.loc['every transfer whole, its SHA-256 checked', 'verdict'] == 'not met'


def test_rebuilds_are_byte_identical(run):
    for _ in range(2):
        done = subprocess.run([sys.executable, '-m', 'analysis', str(run)], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        if _ == 0:
            first = {p.name: p.read_bytes() for p in (run / 'tables').iterdir()}
    assert first == {p.name: p.read_bytes() for p in (run / 'tables').iterdir()}
    assert (run / 'figures' / 'time_by_block.png').exists()
