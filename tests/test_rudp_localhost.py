"""The reliable-UDP sender and receiver as real processes on 127.0.0.1: the file arrives
whole (SHA-256 checked), in the seed's mode and windowed, and a peer that vanishes ends
the other side with one sentence and no partial file under the final name."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.kv_proc import ROOT


def _start_receiver(out, *extra):
    """Start a receiver on an ephemeral port; return (process, port)."""
    p = subprocess.Popen([sys.executable, '-m', 'nodes.rudp.recv', '--host', '127.0.0.1',
                          '--port', '0', '--out', str(out)] + [str(a) for a in extra],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready = json.loads(p.stdout.readline())
    assert ready['event'] == 'ready', ready
    return p, ready['port']


def _send(port, path, *extra, timeout=120):
    p = subprocess.run([sys.executable, '-m', 'nodes.rudp.send', '--dst', '127.0.0.1',
                        '--port', str(port), '--file', str(path)] + [str(a) for a in extra],
                       cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return p.returncode, [json.loads(x) for x in p.stdout.splitlines()], p.stderr


@pytest.fixture
def payload(tmp_path):
    path = tmp_path / 'data.bin'
    path.write_bytes(os.urandom(3_000_000))
    out = tmp_path / 'out'
    out.mkdir()
    return path, out


@pytest.mark.parametrize('extra', [['--block', '1'], ['--block', '32'],
                                   ['--block', '16', '--window', '8', '--rate', '200']])
def test_the_file_arrives_whole(payload, extra):
    path, out = payload
    receiver, port = _start_receiver(out, '--once', '--linger', '0.2')
    code, records, err = _send(port, path, *extra)
    assert code == 0, err
    (done,) = records
    assert done['event'] == 'done' and done['bytes'] == 3_000_000 and done['goodput_mbps'] > 0
    stdout, _ = receiver.communicate(timeout=30)
    got = json.loads(stdout.splitlines()[-1])
    assert receiver.returncode == 0 and got['event'] == 'done'
    assert (out / 'data.bin').read_bytes() == path.read_bytes()
    assert os.listdir(out) == ['data.bin']


def test_receiver_killed_mid_transfer_ends_the_sender(tmp_path):
    path = tmp_path / 'big.bin'
    path.write_bytes(os.urandom(30_000_000))
    out = tmp_path / 'out'
    out.mkdir()
    receiver, port = _start_receiver(out, '--once')
    sender = subprocess.Popen([sys.executable, '-m', 'nodes.rudp.send', '--dst', '127.0.0.1',
                               '--port', str(port), '--file', str(path), '--block', '1',
                               '--timeout', '1'], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not [f for f in os.listdir(out) if '.part' in f] and time.monotonic() < deadline:
        time.sleep(0.01)
    receiver.send_signal(signal.SIGKILL)
    receiver.wait()
    stdout, _ = sender.communicate(timeout=60)
    (record,) = [json.loads(x) for x in stdout.splitlines()]
    assert sender.returncode == 1 and record['event'] == 'error'
    assert record['error'] == 'no answer from the receiver for 1 s'
    assert 'big.bin' not in os.listdir(out)      # at most the killed receiver's .part


def test_sender_killed_mid_transfer_leaves_no_file(tmp_path):
    path = tmp_path / 'big.bin'
    path.write_bytes(os.urandom(30_000_000))
    out = tmp_path / 'out'
    out.mkdir()
    receiver, port = _start_receiver(out, '--once', '--timeout', '1')
    sender = subprocess.Popen([sys.executable, '-m', 'nodes.rudp.send', '--dst', '127.0.0.1',
                               '--port', str(port), '--file', str(path), '--block', '1'],
                              cwd=ROOT, stdout=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not [f for f in os.listdir(out) if '.part' in f] and time.monotonic() < deadline:
        time.sleep(0.01)
    sender.kill()
    sender.wait()
    stdout, _ = receiver.communicate(timeout=60)
    record = json.loads(stdout.splitlines()[-1])
    assert receiver.returncode == 1 and record['event'] == 'error'
    assert record['error'].startswith('no datagram from the sender for 1 s after')
    assert os.listdir(out) == []


def test_garbage_does_not_disturb_a_transfer(payload):
    import socket
    path, out = payload
    receiver, port = _start_receiver(out, '--once', '--linger', '0.2')
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for junk in (b'', b'RU', b'\xff' * 2000, b'RU\x01\x03' + b'\0' * 30):
            s.sendto(junk, ('127.0.0.1', port))
    code, _, err = _send(port, path)
    assert code == 0, err
    receiver.communicate(timeout=30)
    assert (out / 'data.bin').read_bytes() == path.read_bytes()


@pytest.mark.parametrize('argv, sentence', [
    (['nodes.rudp.send', '--dst', 'host', '--port', '1', '--file', '/etc/hostname'],
     "--dst must be an IPv4 address, not 'host'"),
    (['nodes.rudp.send', '--dst', '127.0.0.1', '--port', '1', '--file', '/nonexistent'],
     "--file '/nonexistent' is not a file"),
    (['nodes.rudp.send', '--dst', '127.0.0.1', '--port', '1', '--file', '/etc/hostname',
      '--block', '0'], '--block must be between 1 and 4096'),
    (['nodes.rudp.recv', '--port', '1', '--out', '/nonexistent'],
     "--out '/nonexistent' is not a folder"),
])
def test_bad_flags_are_one_sentence(argv, sentence):
    p = subprocess.run([sys.executable, '-m'] + argv, cwd=ROOT, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and p.stdout == '' and p.stderr.count('\n') == 1
    assert sentence in p.stderr, p.stderr
