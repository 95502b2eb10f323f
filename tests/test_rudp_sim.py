"""The reliable-UDP programs in the simulator (repronet.sim): started by the argv
workloads/rudp_points.py gives them, a 2 MB file arrives whole at B = 1 and 32 and windowed,
on a clean and a lossy, jittery link; a killed sender leaves the receiver ending with one
sentence and no file under the final name; bad flags exit 2; a seed repeats its logs byte
for byte. The simulated transfer times over B are printed, not asserted.

No root, no sockets: virtual time only."""

import hashlib
import json
import random
import sys
from pathlib import Path

import pytest
from mininet.topo import Topo

from repronet.sim.backend import SimBackend
from tests.test_sans_io import violations

ROOT = Path(__file__).resolve().parent.parent
PORT = 5001
SIZE = 2_000_000


class Pair(Topo):
    """a and b on one switch: 100 Mbit/s, 3 ms per link (12 ms round trip)."""

    def build(self, **lossy):
        sw = self.addSwitch('sw1')
        for h in ('a', 'b'):
            self.addLink(self.addHost(h), sw, bw=100, delay='3ms', **lossy)


LOSSY = {'loss': 1.0, 'jitter': '1ms'}


@pytest.fixture(scope='module')
def source(tmp_path_factory):
    """A 2 MB file of seeded random bytes and its SHA-256."""
    path = tmp_path_factory.mktemp('src') / 'file.bin'
    path.write_bytes(random.Random(4).randbytes(SIZE))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


class Run:
    """One simulated transfer from a to b, with the flags rudp_points builds."""

    def __init__(self, tmp, seed=1, lossy=None):
        self.tmp = Path(tmp)
        self.logs, self.out = self.tmp / 'logs', self.tmp / 'out'
        self.logs.mkdir(parents=True)
        self.out.mkdir()
        self.backend = SimBackend(Pair(**(lossy or {})), seed, log_dir=self.logs)

    def start(self, host, name, module, flags):
        return self.backend.start_node(self.backend.hosts[host], name,
                                       [sys.executable, '-m', module] + flags)

    def receiver(self, timeout=2.0, reorder_wait=0.0):
        proc = self.start('b', 'recv', 'nodes.rudp.recv', [
            '--port', PORT, '--out', self.out, '--once', '--timeout', timeout,
            '--linger', 0.5, '--reorder-wait', reorder_wait])
        proc.wait_ready(5)
        return proc

    def sender(self, path, extra, timeout=2.0):
        proc = self.start('a', 'send', 'nodes.rudp.send', [
            '--dst', self.backend.hosts['b'].ip, '--port', PORT, '--file', path,
            '--timeout', timeout, '--barrier'] + extra)
        proc.wait_ready(5)
        proc.go()
        return proc

    def transfer(self, path, extra, reorder_wait=0.0):
        recv = self.receiver(reorder_wait=reorder_wait)
        send = self.sender(path, extra)
        send.wait(600)
        recv.wait(30)
        return send, recv

    def records(self, name):
        return [json.loads(line) for line in (self.logs / (name + '.jsonl')).open()]


def _received(run, digest):
    path = run.out / 'file.bin'
    return path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_sim_driver_does_no_io():
    assert violations(ROOT / 'nodes/rudp/sim_driver.py') == []


@pytest.mark.parametrize('lossy', [None, LOSSY], ids=['clean', 'lossy'])
@pytest.mark.parametrize('extra', [['--block', 1], ['--block', 32],
                                   ['--block', 32, '--window', 8, '--rate', 80]],
                         ids=['B1', 'B32', 'window'])
def test_file_arrives_whole(tmp_path, source, lossy, extra):
    path, digest = source
    run = Run(tmp_path, lossy=lossy)
    send, recv = run.transfer(path, extra, reorder_wait=0.005 if lossy else 0.0)
    assert (send.returncode, recv.returncode) == (0, 0)
    assert _received(run, digest)
    done = run.records('send')[-1]
    assert done['event'] == 'done' and done['sha256'] == digest and done['bytes'] == SIZE
    assert run.records('recv')[-1]['event'] == 'done'
    assert [p.name for p in run.out.iterdir()] == ['file.bin']      # no temporary file left
    if lossy:
        assert done['retransmitted'] > 0        # the link did lose datagrams


def test_killed_sender(tmp_path, source):
    run = Run(tmp_path)
    recv = run.receiver(timeout=2.0)
    send = run.sender(source[0], ['--block', 32])
    run.backend.run_until(lambda: False, 0.3)       # part of the file is on its way
    assert send.returncode is None
    send.kill()
    start = run.backend.engine.now
    assert recv.wait(30) == 1
    assert run.backend.engine.now - start == pytest.approx(2.0, abs=0.05)
    last = run.records('recv')[-1]
    assert last['event'] == 'error' and last['path'] is None
    assert last['error'].startswith('no datagram from the sender for 2 s after ')
    assert last['error'].count('.') == 0 and '\n' not in last['error']
    assert list(run.out.iterdir()) == []            # neither the final nor a temporary file


@pytest.mark.parametrize('module, flags', [
    ('nodes.rudp.send', ['--dst', '10.0.0.2', '--port', PORT, '--file', '{src}',
                         '--block', 0]),
    ('nodes.rudp.send', ['--dst', 'nowhere', '--port', PORT, '--file', '{src}']),
    ('nodes.rudp.recv', ['--port', PORT, '--out', '{tmp}/missing']),
    ('nodes.rudp.recv', ['--port', PORT, '--out', '{tmp}', '--linger', -1]),
])
def test_bad_flag_exits_2(tmp_path, source, module, flags):
    run = Run(tmp_path)
    flags = [str(f).format(src=source[0], tmp=tmp_path) for f in flags]
    proc = run.start('a', 'bad', module, flags)
    assert proc.returncode == 2
    err = (run.logs / 'bad.err').read_text().strip().splitlines()
    assert len(err) == 1 and err[0].startswith('rudp.')


def test_same_seed_same_logs(tmp_path, source):
    texts = []
    for name in ('one', 'two'):
        run = Run(tmp_path / name, seed=7, lossy=LOSSY)
        run.transfer(source[0], ['--block', 32, '--window', 4, '--rate', 80],
                     reorder_wait=0.005)
        texts.append(''.join((run.logs / f).read_text().replace(str(tmp_path / name), '@')
                             for f in ('send.jsonl', 'recv.jsonl')))
    assert texts[0] == texts[1]
    assert '"retransmitted"' in texts[0]


def test_report_transfer_times(tmp_path, source, capsys):
    """Print the simulated transfer time of the 2 MB file over B on the 3 ms link."""
    lines = []
    for block in (1, 2, 4, 8, 16, 32, 64):
        run = Run(tmp_path / ('b%d' % block))
        send, _ = run.transfer(source[0], ['--block', block])
        done = run.records('send')[-1]
        lines.append('B=%-3d %7.3f s  %6.1f Mbit/s' % (block, done['seconds'],
                                                       done['goodput_mbps']))
    with capsys.disabled():
        print('\nrudp in the simulator, 2 MB over 100 Mbit/s, 3 ms per link (12 ms RTT):')
        print('\n'.join(lines))
