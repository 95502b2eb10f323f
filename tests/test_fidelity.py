"""Tests of the fidelity benchmark: configurations, its analysis on written logs, and a root run.

The analysis test writes the raw logs a run would leave (probe, reflector, iperf3 JSON,
points.jsonl) with known numbers and checks that targets come out PASS or MISS as they should.
"""

import json
import os
import subprocess
import sys
import types

import pytest

from analysis import fidelity as analysis
from topologies import fidelity

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _params(**kw):
    """Fidelity parameters as the option parser would give them."""
    base = dict(delays='1,20', losses='1', rates='10@10', jitter=2.0, jitter_delay=20.0)
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_configurations_split_values_over_links():
    """Two-host splits over 2 links, multi-hop over 4; expected RTT and jitter std follow."""
    configs = fidelity.configurations(_params())
    assert [c['kind'] for c in configs[:5]] == ['delay', 'delay', 'jitter', 'loss', 'goodput']
    assert [c['comp'] for c in configs] == list(range(len(configs)))
    multi_delay = next(c for c in configs if c['shape'] == 'multi-hop' and c['kind'] == 'delay'
                       and c['delay_ms'] == 20.0)
    assert [h['delay'] for h in fidelity._hops(multi_delay)] == ['5000us'] * 4
    assert multi_delay['rtt_ms'] == 40.0
    jitter = next(c for c in configs if c['shape'] == 'two-host' and c['kind'] == 'jitter')
    # two links x two directions, uniform +-2 ms each: variance 4 * 4/3
    assert jitter['rtt_std_ms'] == pytest.approx((4 * 4 / 3) ** 0.5)
    loss = next(c for c in configs if c['shape'] == 'multi-hop' and c['kind'] == 'loss')
    per_link = [h.get('loss', 0) for h in fidelity._hops(loss)]
    assert per_link[1] == per_link[3] == 0
    assert 1 - (1 - per_link[0] / 100) * (1 - per_link[2] / 100) == pytest.approx(0.01)


def test_binomial_quantiles_match_known_values():
    """The 99 % interval of Binomial(20000, 0.01) is 165..237 (scipy.stats.binom.ppf agrees)."""
    assert analysis.binom_quantiles(20000, 0.01, 0.005, 0.995) == (165, 237)
    assert analysis.binom_quantiles(20000, 0.05, 0.005, 0.995) == (921, 1080)
    assert analysis.binom_quantiles(100, 0.0, 0.005, 0.995) == (0, 0)


def _write_run(run_dir, lost, median_ms, tcp_mbps):
    """Write the logs of a 3-point run: a 20 ms delay, a 1 % loss, a 10 Mbit/s transfer."""
    logs = run_dir / 'logs'
    logs.mkdir(parents=True)
    (run_dir / 'manifest.json').write_text(json.dumps({'experiment': 'fidelity',
                                                       'status': 'ok'}))
    points = [dict(kind='delay', shape='two-host', delay_ms=20.0, jitter_ms=0.0, loss=0.0,
                   bw=None, rtt_ms=40.0, rtt_std_ms=0.0, nlinks=2),
              dict(kind='loss', shape='two-host', delay_ms=0.0, jitter_ms=0.0, loss=1.0,
                   bw=None, rtt_ms=0.0, rtt_std_ms=0.0, nlinks=2),
              dict(kind='goodput', shape='two-host', delay_ms=10.0, jitter_ms=0.0, loss=0.0,
                   bw=10.0, rtt_ms=20.0, rtt_std_ms=0.0, nlinks=2)]
    with open(logs / 'points.jsonl', 'w') as f:
        for i, p in enumerate(points):
            p.update(point=i, repetition=0, comp=i, seed=i)
            f.write(json.dumps({'event': 'point', 'point': p,
                                'result': {'elapsed_s': 2.0, 'daemon_cpu_s': 0.1,
                                           'machine_busy': 0.2}}) + '\n')
    echoes = [median_ms - 0.1, median_ms, median_ms + 0.1]
    with open(logs / 'probe-p0.jsonl', 'w') as f:
        for seq, rtt in enumerate(echoes):
            f.write(json.dumps({'event': 'echo', 'seq': seq, 'rtt_us': rtt * 1000}) + '\n')
        f.write(json.dumps({'event': 'summary', 'sent': 3, 'echoed': 3,
                            'reordered_echoes': 0}) + '\n')
    (logs / 'reflect-p0.jsonl').write_text(json.dumps(
        {'event': 'stream', 'sent': 3, 'received': 3, 'reordered': 0}) + '\n')
    (logs / 'probe-p1.jsonl').write_text(json.dumps(
        {'event': 'summary', 'sent': 20000, 'echoed': 20000 - 2 * lost,
         'reordered_echoes': 0}) + '\n')
    (logs / 'reflect-p1.jsonl').write_text(json.dumps(
        {'event': 'stream', 'sent': 20000, 'received': 20000 - lost, 'reordered': 0}) + '\n')
    end = {'sum_received': {'bits_per_second': tcp_mbps * 1e6}, 'sum_sent': {'retransmits': 0}}
    (logs / 'iperf-tcp-client-p2.json').write_text(json.dumps({'end': end}))


def test_analysis_passes_good_numbers(tmp_path):
    """Numbers inside every target give PASS on every row, and the tables and report exist."""
    _write_run(tmp_path, lost=200, median_ms=40.3, tcp_mbps=9.5)
    goal = analysis.build(tmp_path)
    assert list(goal['pass']) == [True] * 4, goal
    assert (tmp_path / 'report.md').read_text().count('| PASS |') == 4
    for name in ('rtt', 'loss', 'goodput', 'cpu', 'targets'):
        assert (tmp_path / 'tables' / (name + '.csv')).exists()
    assert (tmp_path / 'figures' / 'rtt.png').exists()


def test_analysis_misses_bad_numbers(tmp_path):
    """Too much RTT error, implausible loss and low goodput each give MISS."""
    _write_run(tmp_path, lost=300, median_ms=41.5, tcp_mbps=8.0)
    goal = analysis.build(tmp_path).set_index('target')['pass']
    assert not goal[[t for t in goal.index if 'median RTT' in t]].any()
    assert not goal[[t for t in goal.index if 'loss' in t]].any()
    assert not goal[[t for t in goal.index if 'TCP goodput' in t]].any()
    assert goal[[t for t in goal.index if 'reordering' in t]].all()


@pytest.mark.root
@pytest.mark.timeout(240)
def test_fidelity_script_runs_end_to_end(tmp_path):
    """A tiny fidelity run finishes ok and writes targets with measured values."""
    out = tmp_path / 'run'
    argv = [sys.executable, os.path.join(REPO, 'topologies', 'fidelity.py'), '--scale', 'smoke',
            '--out', str(out), '--delays', '10', '--losses', '5', '--rates', '10@5',
            '--rtt-packets', '100', '--loss-packets', '4000', '--duration', '2']
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=220)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    manifest = json.loads((out / 'manifest.json').read_text())
    assert manifest['status'] == 'ok'
    assert any(r['mechanism'] != 'none' for r in manifest['mechanisms']['links'])
    targets = (out / 'tables' / 'targets.csv').read_text()
    assert 'median RTT' in targets and 'one-way loss' in targets
    assert (out / 'logs' / 'linkemu.json').exists()
