"""The fidelity experiment on the simulation backend (no root): end to end, its goodput
program (workloads.bulk), and the analysis of what a simulation does not measure.

The RTT tolerance is 1 us. On unshaped links the model adds nothing to the configured
propagation delay (no serialisation, queueing, processing or jitter), and the smoke scale's
per-link delays (2.5, 10, 1.25 and 5 ms) are whole microseconds, so a simulated RTT equals
the configured one up to float rounding of the virtual clock (~1e-15 s at these times) and
the probe log's 0.1 us resolution. Anything the model wrongly added would show: even a
64-byte probe serialised at 1 Gbit/s on one hop is 0.85 us each way.
"""

import hashlib
import json
import os
import subprocess

import pandas as pd
import pytest
from mininet.topo import Topo

from analysis import fidelity as analysis
from repronet.sim.backend import SimBackend
from tests.test_targets import assert_one_format

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTT_TOLERANCE_MS = 0.001
SKIPPED = 'fidelity: --backend sim skips ping'


def _run(out):
    """Run the smoke scale in simulation into out; return the completed process."""
    proc = subprocess.run(['/usr/bin/python3', os.path.join(REPO, 'topologies', 'fidelity.py'),
                           '--backend', 'sim', '--scale', 'smoke', '--out', str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope='module')
def smoke(tmp_path_factory):
    """One simulated smoke run shared by the tests below: (folder, process)."""
    out = tmp_path_factory.mktemp('fidelity-sim') / 'run'
    return out, _run(out)


def test_smoke_runs_without_root_and_writes_the_tables(smoke):
    """Exit 0, the skips said once, the same tables as an emulated run, no real-host files."""
    out, proc = smoke
    assert proc.stdout.count(SKIPPED) == 1, proc.stdout
    manifest = json.loads((out / 'manifest.json').read_text())
    assert manifest['status'] == 'ok' and manifest['mechanisms']['backend'] == 'sim'
    for name in ('rtt', 'ping', 'loss', 'goodput', 'cpu', 'targets'):
        assert (out / 'tables' / (name + '.csv')).exists(), name
    assert not (out / 'logs' / 'linkemu.json').exists()
    assert not (out / 'logs' / 'sysctl.txt').exists()
    assert not list((out / 'logs').glob('ping-*')) and not list((out / 'logs').glob('iperf-*'))
    report = (out / 'report.md').read_text()
    assert report.count('not measured (simulation)') == 3      # ping, UDP goodput, CPU
    targets = pd.read_csv(out / 'tables' / 'targets.csv')
    assert (targets['verdict'] == 'met').all(), targets.to_string()


def test_simulated_rtt_is_the_configured_rtt(smoke):
    """Every delay point's median RTT, and every single echo, within 1 us of configured."""
    out, _ = smoke
    rtt = pd.read_csv(out / 'tables' / 'rtt.csv')
    delay = rtt[rtt['kind'] == 'delay']
    assert sorted(set(delay['configured_rtt_ms'])) == [0.0, 10.0, 40.0]
    assert len(delay) == 6          # both shapes
    for _, row in delay.iterrows():
        assert row['median_rtt_ms'] == pytest.approx(row['configured_rtt_ms'],
                                                     abs=RTT_TOLERANCE_MS), row.to_dict()
        echoes = [json.loads(line) for line in open(out / 'logs' / ('probe-p%d.jsonl'
                                                                     % row['point']))]
        rtts = [r['rtt_us'] / 1000 for r in echoes if r['event'] == 'echo']
        assert len(rtts) == row['sent'] == 200
        assert max(abs(r - row['configured_rtt_ms']) for r in rtts) <= RTT_TOLERANCE_MS


def test_simulated_goodput_loss_and_skips_in_the_tables(smoke):
    """TCP goodput from workloads.bulk near the link's payload share; no UDP, ping or CPU
    numbers (not zeros); loss inside its interval."""
    out, _ = smoke
    goodput = pd.read_csv(out / 'tables' / 'goodput.csv')
    assert set(goodput['proto']) == {'tcp'} and len(goodput) == 4
    # 1,448 payload bytes of 1,514 on the wire, less the handshake and the first train
    assert goodput['ratio'].between(0.9, 1448 / 1514).all(), goodput.to_string()
    assert (goodput['loaded_rtt_median_ms'] > goodput['configured_rtt_ms']).all()
    assert (out / 'tables' / 'ping.csv').read_text().strip() in ('', '""')
    cpu = pd.read_csv(out / 'tables' / 'cpu.csv')
    assert cpu['daemon_cpu_fraction'].isna().all() and cpu['machine_busy'].isna().all()
    assert not (out / 'figures' / 'cpu.png').exists()
    loss = pd.read_csv(out / 'tables' / 'loss.csv')
    assert loss['inside_99'].all() and (loss['sent'] == 20000).all()


def test_same_seed_gives_identical_logs(smoke, tmp_path):
    """A second run with the same seed writes byte-identical node logs and tables."""
    out, _ = smoke
    again = tmp_path / 'again'
    _run(again)

    def digests(folder):
        files = sorted(folder.glob('logs/*-p*.jsonl')) + sorted(folder.glob('tables/*.csv'))
        return {f.relative_to(folder).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest()
                for f in files}
    first = digests(out)
    assert len(first) > 40 and digests(again) == first


class _Bottleneck(Topo):
    """a - s1 - b with rate and delay on a's link only."""

    def build(self):
        switch = self.addSwitch('s1')
        self.addLink(self.addHost('a'), switch, bw=20, delay='5ms')
        self.addLink(self.addHost('b'), switch)


def test_bulk_measures_the_stream_model_goodput(tmp_path):
    """20 Mbit/s for 3 s: the server's bytes over its seconds come out at the payload share
    of the rate, less the start (a handshake and one 64 KiB train, about 0.04 s of 3.1)."""
    backend = SimBackend(_Bottleneck(), seed=1, log_dir=tmp_path)
    bulk = ['/usr/bin/python3', '-m', 'workloads.bulk']
    server = backend.start_node(backend.hosts['b'], 'server', bulk + ['server', '--port', 5201])
    client = backend.start_node(backend.hosts['a'], 'client',
                                bulk + ['client', '--dst', '10.0.0.2', '--port', 5201,
                                        '--duration', 3])
    assert server.wait(30) == 0
    assert client.stop() == 0
    done = [json.loads(line) for line in open(server.log_path)][-1]
    summary = [json.loads(line) for line in open(client.log_path)][-1]
    assert done['event'] == 'done' and summary['event'] == 'summary'
    assert done['bytes'] == summary['bytes'] and summary['retransmits'] == 0
    ideal = 20e6 * 1448 / 1514
    # after 3 s: the queued 64 KiB and the window (12.5 KB of BDP + 64 KiB) at 2.5 MB/s,
    # 57 ms; before: the handshake and the first train, 36 ms (measured 3.097 s in all)
    assert 3 < done['seconds'] < 3.15
    assert 0.98 * ideal < 8 * done['bytes'] / done['seconds'] <= ideal


def test_bulk_refuses_to_run_as_a_real_process():
    """As a real process it says in one sentence where it runs, and exits 2."""
    proc = subprocess.run(['/usr/bin/python3', '-m', 'workloads.bulk', 'server', '--port', '1'],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count('\n') == 1
    assert 'only in simulation' in proc.stderr


def test_analysis_of_a_simulated_folder_says_not_measured(tmp_path):
    """A hand-made simulated goodput point: bulk's numbers in goodput.csv, and the CPU
    columns missing rather than 0."""
    logs = tmp_path / 'logs'
    logs.mkdir()
    (tmp_path / 'manifest.json').write_text(json.dumps(
        {'experiment': 'fidelity', 'status': 'ok', 'mechanisms': {'backend': 'sim'}}))
    point = dict(kind='goodput', shape='two-host', delay_ms=10.0, jitter_ms=0.0, loss=0.0,
                 bw=10.0, rtt_ms=20.0, rtt_std_ms=0.0, nlinks=2, point=0, repetition=0)
    (logs / 'points.jsonl').write_text(json.dumps(
        {'event': 'point', 'point': point, 'result': {'elapsed_s': 5.5}}) + '\n')
    (logs / 'bulk-server-p0.jsonl').write_text(json.dumps(
        {'t': 1, 'event': 'done', 'bytes': 5_000_000, 'seconds': 4.5}) + '\n')
    (logs / 'bulk-client-p0.jsonl').write_text(json.dumps(
        {'t': 1, 'event': 'summary', 'bytes': 5_000_000, 'retransmits': 2}) + '\n')
    goal = analysis.build(tmp_path)
    row = analysis.tables(tmp_path)['goodput'].iloc[0]
    assert row['goodput_mbps'] == pytest.approx(8 * 5e6 / 4.5 / 1e6)
    assert (row['proto'], row['retransmits']) == ('tcp', 2)
    assert list(goal['verdict']) == ['not met']            # 8.9 Mbit/s < 90 % of 10
    cpu = pd.read_csv(tmp_path / 'tables' / 'cpu.csv')
    assert cpu['seconds'][0] == 5.5 and cpu['daemon_cpu_fraction'].isna().all()
    report = (tmp_path / 'report.md').read_text()
    assert 'ping runs only on real hosts' in report and 'daemon_cpu' not in report


def test_its_targets_are_in_the_one_format(smoke):
    assert_one_format(smoke[0])
