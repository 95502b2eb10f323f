"""The transfer experiment (seed 002) on the simulation backend, end to end: no root, no
Mininet.

Runs ``topologies/transfer.py --backend sim --scale smoke`` twice with one seed (separate
processes, other string hashes): the run ends ok and is analysed by the same module; only
size (warm), packet, load and path points ran (iperf3, capture and cold points skipped with
one sentence); every received file is whole; with ``--segment`` the packet points' rates
follow payload / (payload + 66 header bytes); and the two runs' logs and tables are
byte-identical. The simulated node programs do no I/O of time, randomness or sockets of
their own, and refusals that only a simulated run has are one sentence."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from repronet.sim.streams import MSS, TCP_OVERHEAD
from tests.sim_runs import REPO, digests as _digests, points_of_ok_run, run_sim, two_runs
from tests.test_targets import assert_one_format
from tests.test_sans_io import violations


def _run(out, workdir, hashseed, *flags):
    return run_sim('transfer.py', out, workdir, hashseed, '--scale', 'smoke', '--seed', 5,
                   *flags)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    return two_runs(tmp_path_factory, 'transfersim', _run)


def test_sim_modules_do_no_io():
    assert violations(REPO / 'nodes/transfer/sim_server.py') == []
    assert violations(REPO / 'nodes/transfer/sim_client.py') == []


def test_a_simulated_smoke_run_is_analysed_and_skips_what_needs_real_hosts(runs):
    first, _, proc = runs
    assert proc.stdout.count('skips iperf3') == 1
    points = points_of_ok_run(first)
    assert [p['point']['kind'] for p in points] == ['size'] * 3 + ['packet'] * 3 + \
        ['load'] * 2 + ['path'] * 2
    assert not any(p['point'].get('cold') for p in points)
    transfers = pd.read_csv(first / 'tables' / 'transfers.csv')
    assert len(transfers) == 11 and transfers['ok'].all()
    assert not any((first / 'logs').glob('*iperf3*'))
    report = (first / 'report.md').read_text()
    assert 'every received file whole' in report and '- backend: simulation' in report
    # the context's hosts and the TCP model's settings (no sysctl to read: runs_programs False)
    manifest = json.loads((first / 'manifest.json').read_text())
    assert {'srv', 'c1', 'ka', 'kb'} <= set(manifest['hosts']) and \
        all(ip.count('.') == 3 for ip in manifest['hosts'].values())
    assert manifest['tcp']['congestion_control'].startswith('none (fixed window')


def test_small_segments_pay_their_headers(runs):
    """1 Gbit/s links, --segment: each packet is one segment of its own with 66 header
    bytes, so the 2 MB file's rate from request to last byte scales with p / (p + 66)
    (within 3 %: the round trips and the first train do not scale)."""
    first = runs[0]
    t2 = pd.read_csv(first / 'tables' / 'table2_packet.csv').set_index('packet')
    share = {p: p / (p + TCP_OVERHEAD) for p in (100, 1000, 1400)}
    for p in (100, 1000):
        assert t2.loc[p, 'total_mbps'] / t2.loc[1400, 'total_mbps'] == pytest.approx(
            share[p] / share[1400], rel=0.03)
    assert t2.loc[100, 'total_mbps'] < 1000 * share[100]
    assert t2.loc[1400, 'total_mbps'] < 1000 * MSS / (MSS + TCP_OVERHEAD)
    mss = pd.read_csv(first / 'tables' / 'transfers.csv').set_index('point')['mss']
    assert sorted(set(mss.dropna())) == [112, 1012, 1412]     # TCP_MAXSEG = payload + 12


def test_the_same_seed_gives_byte_identical_logs_and_tables(runs):
    first, second, _ = runs
    assert _digests(first, 'logs') == _digests(second, 'logs')
    assert _digests(first, 'tables') == _digests(second, 'tables')


def test_dropcache_on_is_refused_in_one_sentence():
    proc = subprocess.run([sys.executable, str(REPO / 'topologies' / 'transfer.py'),
                           '--backend', 'sim', '--dry-run', '--dropcache', 'on'],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and 'does not model' in proc.stderr, proc.stderr
    assert proc.stderr.strip().count('\n') == 0


class _Pair:
    """a (client) and b (file server) on one switch in the simulator; served folder root."""

    def __init__(self, tmp, costs=None):
        from tests.test_kv_sim import Pair
        from repronet.sim.backend import SimBackend
        self.logs, self.root, self.out = tmp / 'logs', tmp / 'root', tmp / 'out'
        for folder in (self.logs, self.root, self.out):
            folder.mkdir()
        self.backend = SimBackend(Pair(), 1, log_dir=self.logs, costs=costs, cores=2)

    def start(self, host, name, module, flags):
        return self.backend.start_node(self.backend.hosts[host], name,
                                       [sys.executable, '-m', module] + [str(f) for f in flags])

    def records(self, name):
        import json
        return [json.loads(line) for line in (self.logs / (name + '.jsonl')).open()]


def test_a_get_delivers_the_file_and_errors_are_the_real_programs_sentences(tmp_path):
    sim = _Pair(tmp_path)
    (sim.root / 'f.bin').write_bytes(bytes(range(256)) * 1000)
    server = sim.start('b', 'server', 'nodes.transfer.server', ['--root', sim.root,
                                                                '--port', 5001])
    server.wait_ready(5)
    ip = sim.backend.hosts['b'].ip
    client = ['get', '--server', ip, '--port', 5001, '--out', sim.out, '--packet', 500,
              '--segment']
    ok = sim.start('a', 'ok', 'nodes.transfer.client', client + ['--name', 'f.bin'])
    missing = sim.start('a', 'missing', 'nodes.transfer.client', client + ['--name', 'g.bin'])
    put = sim.start('a', 'put', 'nodes.transfer.client', ['put', '--server', ip, '--name', 'x',
                                                          '--file', sim.root / 'f.bin'])
    assert (ok.wait(10), missing.wait(10), put.wait(10)) == (0, 1, 2)
    assert (sim.out / 'f.bin').read_bytes() == (sim.root / 'f.bin').read_bytes()
    got = sim.records('ok')[-1]
    assert got['event'] == 'received' and got['sha256_ok'] and got['mss'] == 512
    assert sim.records('missing')[-1]['error'] == "the server refused: no such file: 'g.bin'"
    assert 'put does not run in the simulator' in (sim.logs / 'put.err').read_text()
    server.stop()
    sent = [r for r in sim.records('server') if r['event'] == 'sent']
    assert len(sent) == 1 and sent[0]['writes'] >= 512 and sent[0]['bytes'] == 256000
    assert sim.records('server')[-1] == dict(sim.records('server')[-1], event='summary',
                                              sent=1, errors=1, connections=2)


def test_a_server_killed_mid_transfer_is_the_clients_error_and_leaves_no_file(tmp_path):
    sim = _Pair(tmp_path)
    (sim.root / 'big.bin').write_bytes(bytes(5_000_000))
    server = sim.start('b', 'server', 'nodes.transfer.server', ['--root', sim.root])
    server.wait_ready(5)
    client = sim.start('a', 'c', 'nodes.transfer.client', [
        'get', '--server', sim.backend.hosts['b'].ip, '--port', 5001, '--out', sim.out,
        '--name', 'big.bin'])
    sim.backend.run_until(lambda: False, 0.1)       # 5 MB take 0.4 s at 100 Mbit/s
    server.kill()
    assert client.wait(10) == 1
    last = sim.records('c')[-1]
    assert last['error'] == 'the server went away mid-transfer (connection reset by peer)'
    assert 0 < last['bytes'] < 5_000_000 and list(sim.out.iterdir()) == []


@pytest.mark.parametrize('per_byte, mbps', [(0.0, 100 * 1448 / 1514), (2e-7, 40.0)])
def test_a_per_byte_cost_on_the_client_caps_r_x_at_its_rate(tmp_path, per_byte, mbps):
    """--sim-cost nodes.transfer.client/byte=C: the client takes C s per byte it reads, so
    R_x is at most 8 / C bit/s (40 Mbit/s on the 100 Mbit/s link); without it, the link's
    goodput at 1,448-byte segments."""
    costs = {'nodes.transfer.client/byte': per_byte} if per_byte else None
    sim = _Pair(tmp_path, costs)
    (sim.root / 'f.bin').write_bytes(bytes(4_000_000))
    sim.start('b', 'server', 'nodes.transfer.server', ['--root', sim.root]).wait_ready(5)
    client = sim.start('a', 'c', 'nodes.transfer.client', [
        'get', '--server', sim.backend.hosts['b'].ip, '--port', 5001, '--out', sim.out,
        '--name', 'f.bin'])
    assert client.wait(60) == 0
    assert sim.records('c')[-1]['rx_mbps'] == pytest.approx(mbps, rel=0.05)


def test_its_targets_are_in_the_one_format(runs):
    assert_one_format(runs[0])
