"""dht8 on the simulation backend, end to end: no root, no Mininet, the same analysis.

Runs ``topologies/dht8.py --backend sim --scale smoke`` twice with the same seed as
separate processes (different hash seeds), and checks what the issue asks of the
simulator: the run ends ok, the analysis wrote its tables and report, every point's
clients succeeded, the manifest records the backend and the network model, and the two
runs' logs and tables are byte-identical (determinism: events ordered by (time, sequence),
seeded generators, no wall clock). A third run with another seed must differ.
"""

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.test_targets import assert_one_format

REPO = pathlib.Path(__file__).resolve().parents[1]


def _run(out, seed, workdir, hashseed):
    env = dict(os.environ, PYTHONHASHSEED=str(hashseed))
    proc = subprocess.run(
        [sys.executable, str(REPO / 'topologies' / 'dht8.py'), '--backend', 'sim',
         '--scale', 'smoke', '--seed', str(seed), '--out', str(out), '--workdir',
         str(workdir)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


def _digests(run_dir, sub):
    return {p.relative_to(run_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((run_dir / sub).rglob('*')) if p.is_file()}


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp('dht8sim')
    work = base / 'work'
    first = base / 'a'
    proc = _run(first, 7, work, 1)
    second = base / 'b'
    _run(second, 7, work, 2)
    other = base / 'c'
    _run(other, 8, work, 3)
    return first, second, other, proc


def test_a_simulated_smoke_run_ends_ok_and_is_analysed(runs):
    first, _, _, proc = runs
    manifest = json.loads((first / 'manifest.json').read_text())
    assert manifest['status'] == 'ok'
    assert manifest['params']['backend'] == 'sim'
    assert manifest['mechanisms']['backend'] == 'sim'
    assert 'streams' in manifest['mechanisms']['network_model']
    assert manifest['cpu']['monitored'] is False
    assert (first / 'report.md').is_file() and (first / 'tables' / 'points.csv').is_file()
    assert 'skips the capture part' in proc.stdout
    # a reader must not take the simulated times for measurements (a new user did)
    report = (first / 'report.md').read_text()
    assert '- **backend: simulation** (`repronet.sim`, virtual time)' in report
    assert 'emulated by netem' not in report and 'mean busy' not in report
    assert '- CPU over the run: no monitor (a simulated run' in report
    points = [json.loads(line) for line in (first / 'logs' / 'points.jsonl').open()]
    assert points and all('error' not in p for p in points)
    parts = {p['point']['part'] for p in points}
    assert parts == {'I', 'ping', 'II', 'III', 'failover'}
    assert all(not p['result'].get('failed_clients') for p in points)
    assert all(p['result'].get('downloads', 'ok') == 'ok' for p in points)
    inputs = (first / 'tables' / 'inputs.csv')
    assert 'CPU samples missing' not in (inputs.read_text() if inputs.exists() else '')


def test_the_same_seed_gives_byte_identical_logs_and_tables(runs):
    first, second, other, _ = runs
    assert _digests(first, 'logs') == _digests(second, 'logs')
    assert _digests(first, 'tables') == _digests(second, 'tables')
    assert _digests(first, 'logs') != _digests(other, 'logs')


def test_an_emulation_only_experiment_refuses_the_sim_backend_in_one_sentence(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / 'topologies' / 'smoke.py'), '--backend',
                           'sim', '--out', str(tmp_path / 'x')], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count('\n') == 0 and 'runs only with --backend emu' in proc.stderr
    assert not (tmp_path / 'x').exists()


@pytest.mark.parametrize('flags, words', [
    (['--sim-cost', 'nodes.dht.server=2'], 'in [0, 1)'),
    (['--sim-cost', 'garbage'], 'MODULE=SECONDS'),
    (['--sim-cores', '0'], '--sim-cores'),
    (['--switch', 'ovs'], 'has none'),
])
def test_bad_simulation_flags_are_one_sentence(tmp_path, flags, words):
    proc = subprocess.run([sys.executable, str(REPO / 'topologies' / 'dht8.py'), '--backend',
                           'sim', '--out', str(tmp_path / 'x')] + flags,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert proc.stderr.strip().count('\n') == 0


def test_sim_flags_without_the_sim_backend_are_refused(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / 'topologies' / 'dht8.py'), '--sim-cost',
                           'nodes.dht.server=1e-5', '--dry-run'], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and 'need --backend sim' in proc.stderr


@pytest.mark.parametrize('flags, words', [
    (['--bw', '0', '--delay', '0'], 'takes no time at all'),
    (['--servers', '100'], 'benchmarks/sim_scale.py'),
    (['--sim-cores', '2'], 'without --sim-cost it does nothing'),
    (['--cli', 'failure'], 'does not have'),
])
def test_simulation_only_refusals_name_the_reason(tmp_path, flags, words):
    proc = subprocess.run([sys.executable, str(REPO / 'topologies' / 'dht8.py'), '--backend',
                           'sim', '--dry-run'] + flags, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert proc.stderr.strip().count('\n') == 0


def test_its_targets_are_in_the_one_format(runs):
    assert_one_format(runs[0])
