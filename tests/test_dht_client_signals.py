"""Issue 8 item 6: a client stopped with SIGTERM mid-download cleans up: no traceback, one
line on stderr, its temporary file removed, a `summary` record, non-zero exit. A real
client process against a real peer serving a large (sparse) file on loopback."""

import json
import signal
import subprocess
import sys
import time

from tests.test_dht_localhost import ROOT, cluster, names_file, peers, run_client  # noqa: F401

SIZE = 1 << 30      # sparse: cheap on disk, long enough on loopback to stop midway


def test_sigterm_mid_download_removes_the_temporary_file(tmp_path, cluster, peers):
    servers, _ = cluster(1)
    share = tmp_path / 'share'
    share.mkdir()
    with open(share / 'big.bin', 'wb') as f:
        f.truncate(SIZE)
    addr, _ = peers('p1', share)
    assert run_client(servers, '--op', 'register', '--share', share, '--advertise', addr)[0] == 0
    dl = tmp_path / 'dl'
    argv = [sys.executable, '-m', 'nodes.dht.client', '--name', 'c1', '--servers', servers,
            '--op', 'download', '--names', str(names_file(tmp_path / 'names', ['big.bin'])),
            '--downloads', str(dl)]
    p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    end = time.monotonic() + 30
    while time.monotonic() < end and not any(x.stat().st_size for x in dl.glob('.big.bin.part*')
                                             if x.exists()):
        time.sleep(0.005)
    assert p.poll() is None, 'the download ended before it could be stopped'
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode != 0
    assert 'Traceback' not in err and len(err.strip().splitlines()) == 1, err
    assert 'interrupted' in err
    assert list(dl.iterdir()) == []                  # neither a partial nor a final file
    recs = [json.loads(line) for line in out.splitlines()]
    assert recs[-1]['event'] == 'summary' and recs[-1]['interrupted'] and recs[-1]['ok'] == 0


def test_sigterm_at_the_barrier_is_one_line_and_status_1(tmp_path, cluster):
    servers, _ = cluster(1)
    argv = [sys.executable, '-m', 'nodes.dht.client', '--name', 'c1', '--servers', servers,
            '--op', 'search', '--barrier',
            '--names', str(names_file(tmp_path / 'names', ['a']))]
    p = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert json.loads(p.stdout.readline())['event'] == 'ready'
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)              # stdin stays open: the signal alone stops it
    err = p.stderr.read()
    p.stdin.close()
    assert p.returncode == 1 and err.strip() == 'c1: interrupted before the operations started'
