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
