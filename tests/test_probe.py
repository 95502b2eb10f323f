"""Localhost integration test of workloads/probe.py: echo, one-way counts, bad input."""

import json
import os
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _lines(path):
    """JSON records written so far to path."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith('{')]


def test_probe_counts_echoes_and_survives_garbage(tmp_path):
    """Garbage is reported and ignored; a 300-probe stream is echoed and counted one way."""
    log = tmp_path / 'reflect.jsonl'
    env = dict(os.environ, PYTHONPATH=REPO)
    with open(log, 'w') as out:
        reflector = subprocess.Popen([sys.executable, '-m', 'workloads.probe', 'reflect',
                                      '--port', '0', '--bind', '127.0.0.1'],
                                     stdout=out, env=env)
    try:
        for _ in range(200):
            ready = [r for r in _lines(log) if r['event'] == 'ready']
            if ready:
                break
            time.sleep(0.02)
        port = ready[0]['port']
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b'not a probe', ('127.0.0.1', port))
        sent = subprocess.run([sys.executable, '-m', 'workloads.probe', 'send', '--dst',
                               '127.0.0.1', '--port', str(port), '--count', '300',
                               '--interval', '0.0005', '--drain', '0.5'],
                              capture_output=True, text=True, env=env, timeout=60, check=True)
        for _ in range(200):
            stream = [r for r in _lines(log) if r['event'] == 'stream']
            if stream:
                break
            time.sleep(0.02)
    finally:
        reflector.terminate()
        reflector.wait(timeout=10)
    records = [json.loads(line) for line in sent.stdout.splitlines()]
    echoes = [r for r in records if r['event'] == 'echo']
    summary = records[-1]
    assert summary['event'] == 'summary' and summary['sent'] == summary['echoed'] == 300
    assert sorted(r['seq'] for r in echoes) == list(range(300))
    assert all(r['rtt_us'] > 0 for r in echoes)
    errors = [r for r in _lines(log) if r['event'] == 'error']
    assert errors and errors[0]['error'] == 'malformed datagram'
    assert stream[0]['received'] == 300 and stream[0]['reordered'] == 0


def _closed_port():
    """A loopback UDP port nobody listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def test_failed_sends_are_counted_apart_from_sent():
    """Sends the kernel refuses are not counted as sent and do not stop the probe.

    A burst to a closed loopback port: each datagram that goes out comes back as an ICMP
    port unreachable, which the kernel reports on the connected socket's next send
    (ECONNREFUSED; that datagram is not sent). EAGAIN from a full socket buffer cannot be
    provoked on loopback (the loopback device frees each datagram's buffer space as it
    takes it), so this is the failing send a test can make happen for real.
    """
    env = dict(os.environ, PYTHONPATH=REPO)
    run = subprocess.run([sys.executable, '-m', 'workloads.probe', 'send', '--dst',
                          '127.0.0.1', '--port', str(_closed_port()), '--count', '200',
                          '--interval', '0', '--drain', '0.2'],
                         capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.splitlines()[-1])
    assert summary['event'] == 'summary' and summary['echoed'] == 0
    assert summary['send_failed'] > 0
    assert summary['sent'] + summary['send_failed'] == 200
    assert summary['send_failed_errors'] == {'ECONNREFUSED': summary['send_failed']}


def test_bad_destination_and_size_are_one_line_errors():
    """An oversized datagram is a usage error (2); a refused destination one line and 1."""
    env = dict(os.environ, PYTHONPATH=REPO)
    base = [sys.executable, '-m', 'workloads.probe', 'send', '--port', '9']
    big = subprocess.run(base + ['--dst', '127.0.0.1', '--size', '70000'],
                         capture_output=True, text=True, env=env, timeout=60)
    assert big.returncode == 2 and '--size 0..65507' in big.stderr
    # connecting a UDP socket to the broadcast address without SO_BROADCAST: EACCES
    refused = subprocess.run(base + ['--dst', '255.255.255.255'],
                             capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.count('\n') == 1 and 'Traceback' not in refused.stderr
