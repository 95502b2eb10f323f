"""Localhost integration: real server, peer and client processes on ephemeral ports."""

import hashlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from nodes.dht import codec
from nodes.dht.ring import Ring

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Proc:
    """One node process; stdout parsed as JSON lines."""

    def __init__(self, *argv, stdin=None):
        self.p = subprocess.Popen([sys.executable, '-m'] + list(argv), cwd=ROOT,
                                  stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        self.records = []

    def wait_event(self, event, timeout=20):
        """Read records until one with this event arrives; return it."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            ready, _, _ = select.select([self.p.stdout], [], [], end - time.monotonic())
            if not ready:
                break
            line = self.p.stdout.readline()
            if not line:
                break
            rec = json.loads(line)
            self.records.append(rec)
            if rec['event'] == event:
                return rec
        raise AssertionError('no %s from %s; stderr: %s' % (event, self.p.args, self.stop_err()))

    def stop_err(self):
        """Kill if needed and return stderr."""
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        return '' if self.p.stderr.closed else self.p.stderr.read()

    def terminate(self):
        """SIGTERM; return the summary record and the exit code."""
        self.p.send_signal(signal.SIGTERM)
        out, _ = self.p.communicate(timeout=20)
        recs = [json.loads(line) for line in out.splitlines()]
        return recs[-1], self.p.returncode


def run_client(servers, *args, timeout=120):
    """Run a client to completion; return (exit code, op records, summary, stderr)."""
    argv = [sys.executable, '-m', 'nodes.dht.client', '--name', 'c1', '--servers', servers]
    r = subprocess.run(argv + [str(a) for a in args], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    ops = [x for x in recs if x['event'] == 'op']
    assert recs and recs[-1]['event'] == 'summary', r.stderr
    return r.returncode, ops, recs[-1], r.stderr


@pytest.fixture
def cluster(request):
    """Start N index servers on ephemeral ports; yield (servers arg, {name: Proc})."""
    procs = {}

    def start(n=3, replicas=0):
        names = ['s%d' % i for i in range(1, n + 1)]
        placeholder = ','.join('%s=127.0.0.1:0' % s for s in names)
        addrs = {}
        for s in names:
            procs[s] = Proc('nodes.dht.server', '--name', s, '--listen', '127.0.0.1:0',
                            '--servers', placeholder, '--replicas', str(replicas))
            addrs[s] = procs[s].wait_event('ready')['listen']
        return ','.join('%s=%s' % kv for kv in addrs.items()), procs
    yield start
    for p in procs.values():
        p.stop_err()


@pytest.fixture
def peers():
    """Start peers on ephemeral ports; yield start(name, share) -> 'IP:PORT'."""
    procs = {}

    def start(name, share):
        procs[name] = Proc('nodes.dht.peer', '--name', name, '--listen', '127.0.0.1:0',
                           '--share', str(share))
        return procs[name].wait_event('ready')['listen'], procs[name]
    yield start
    for p in procs.values():
        p.stop_err()


def make_files(folder, sizes, seed=1):
    """Write files of the given sizes with random content; return {name: sha256}."""
    import random
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for i, size in enumerate(sizes):
        data = rng.randbytes(size)
        (folder / ('file%03d.bin' % i)).write_bytes(data)
        out['file%03d.bin' % i] = hashlib.sha256(data).hexdigest()
    return out


def names_file(path, names):
    """Write one name per line."""
    path.write_text(''.join(n + '\n' for n in names))
    return path


def test_register_search_download_with_replicas(tmp_path, cluster, peers):
    servers, sprocs = cluster(3, replicas=1)
    files = make_files(tmp_path / 'share1', [0, 1, 1000, 4096, 70000, 300000, 2 * 1024 * 1024])
    p1, _ = peers('p1', tmp_path / 'share1')
    rc, ops, summ, err = run_client(servers, '--replicas', 1, '--op', 'register', '--batch',
                                    '--share', tmp_path / 'share1', '--advertise', p1)
    assert rc == 0 and summ['count'] == summ['ok'] == len(files), err
    assert summ['messages_sent'] == len(ops) <= 3 and sum(o['files'] for o in ops) == 2 * len(files)
    rc, ops, summ, _ = run_client(servers, '--replicas', 1, '--op', 'register', '--no-batch',
                                  '--share', tmp_path / 'share1', '--advertise', p1)
    assert rc == 0 and len(ops) == len(files) and summ['messages_sent'] == 2 * len(files)
    names = names_file(tmp_path / 'names', sorted(files))
    rc, ops, summ, _ = run_client(servers, '--op', 'search', '--names', names, '--window', 4)
    assert rc == 0 and all(o['ok'] and o['holders'] == 1 for o in ops) and summ['window'] == 4
    rc, ops, summ, err = run_client(servers, '--op', 'download', '--names', names,
                                    '--downloads', tmp_path / 'dl')
    assert rc == 0, err
    assert summ['bytes'] == sum(os.path.getsize(tmp_path / 'share1' / n) for n in files)
    for name, digest in files.items():
        assert hashlib.sha256((tmp_path / 'dl' / name).read_bytes()).hexdigest() == digest
    assert sorted(os.listdir(tmp_path / 'dl')) == sorted(files)       # no temp files left
    rc, ops, summ, err = run_client(servers, '--op', 'download', '--names', names,
                                    '--downloads', tmp_path / 'dl3', '--window', 3)
    assert rc == 0 and summ['window'] == 3, err
    assert summ['messages_sent'] == 2 * len(files)                    # a search and a GET each
    for name, digest in files.items():
        assert hashlib.sha256((tmp_path / 'dl3' / name).read_bytes()).hexdigest() == digest
    rc, _, summ, _ = run_client(servers, '--op', 'unregister', '--replicas', 1,
                                '--share', tmp_path / 'share1', '--advertise', p1)
    assert rc == 0
    rc, ops, summ, err = run_client(servers, '--op', 'search', '--names', names)
    assert rc == 1 and summ['failed'] == len(files) and 'failed' in err
    assert all(o['error'] == 'not found' for o in ops)
    stats = [p.terminate() for p in sprocs.values()]
    assert all(code == 0 and rec['event'] == 'summary' for rec, code in stats)
    assert sum(rec['entries'] for rec, _ in stats) == 0
    assert sum(rec['entries_added'] for rec, _ in stats) == 2 * len(files)
    assert sum(rec['misrouted'] for rec, _ in stats) == 0


def test_malformed_frames_do_not_stop_the_server(cluster):
    servers, sprocs = cluster(1)
    host, port = servers.split('=')[1].split(':')
    a = socket.create_connection((host, int(port)))
    a.sendall(struct.pack('>IBBI', 6, 1, 0x66, 5) + struct.pack('>IBBI', 6, 9, 0x03, 6))
    dec = codec.Decoder()
    replies = []
    while len(replies) < 2:
        replies += dec.feed(a.recv(65536))
    assert [(r.req, r.code) for r in replies] == [(5, codec.ERR_UNKNOWN_TYPE),
                                                  (6, codec.ERR_VERSION)]
    a.sendall(struct.pack('>I', 0xFFFFFFF0))          # oversized: error, then the server closes
    data = b''
    while True:
        chunk = a.recv(65536)
        if not chunk:
            break
        data += chunk
    assert codec.Decoder().feed(data)[0].code == codec.ERR_TOO_LARGE
    b = socket.create_connection((host, int(port)))
    b.sendall(codec.encode(codec.Search(1, 'x'))[:-1])
    b.close()                                        # truncated frame, then gone
    rc, ops, _, _ = run_client(servers, '--op', 'search', '--names', names_file_tmp(['x']))
    assert rc == 1 and ops[0]['error'] == 'not found'   # answered: the server still serves
    rec, code = sprocs['s1'].terminate()
    assert code == 0 and rec['errors'] >= 4


def names_file_tmp(names):
    """A names file in a fresh temporary folder."""
    import tempfile
    fd, path = tempfile.mkstemp(suffix='.names')
    os.write(fd, ''.join(n + '\n' for n in names).encode())
    os.close(fd)
    return path


def test_search_fails_over_to_replica_when_owner_is_dead_before_it_starts(tmp_path, cluster):
    """A dead owner before the searches (searches in flight at a kill: test_dht8.py)."""
    servers, sprocs = cluster(3, replicas=1)
    share = tmp_path / 'share'
    files = make_files(share, [10] * 60)
    rc, _, _, _ = run_client(servers, '--replicas', 1, '--op', 'register', '--share', share,
                             '--advertise', '127.0.0.1:9')
    assert rc == 0
    ring = Ring(['s1', 's2', 's3'])
    victim = ring.owner(sorted(files)[0])
    sprocs[victim].p.kill()
    sprocs[victim].p.wait()
    names = names_file(tmp_path / 'names', sorted(files))
    rc, ops, summ, err = run_client(servers, '--replicas', 1, '--op', 'search', '--names', names,
                                    '--timeout', 1)
    assert rc == 0, err
    assert summ['down'] == [victim] and 'cannot connect' in err
    assert all(o['server'] != victim for o in ops)
    rc, ops, summ, _ = run_client(servers, '--replicas', 0, '--op', 'search', '--names', names,
                                  '--timeout', 1)
    assert rc == 1 and summ['failed'] == sum(ring.owner(n) == victim for n in files)
    assert any('no index server answered' in o.get('error', '') for o in ops)


class HalfHolder:
    """A holder that sends a true FILE header, half of the bytes, then vanishes."""

    def __init__(self, data):
        self.data = data
        self.sock = socket.create_server(('127.0.0.1', 0))
        self.addr = '127.0.0.1:%d' % self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        """Answer every connection with half a file."""
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            dec = codec.Decoder()
            items = []
            while not items:
                items = dec.feed(conn.recv(4096))
            get = items[0]
            head = codec.FileHeader(get.req, len(self.data), get.offset,
                                    hashlib.sha256(self.data).digest())
            conn.sendall(codec.encode(head) + self.data[get.offset:len(self.data) // 2])
            conn.close()


def test_vanishing_holder_resumes_from_second_holder(tmp_path, cluster, peers):
    servers, _ = cluster(2)
    files = make_files(tmp_path / 'share', [3 * 1024 * 1024 + 17])
    name = next(iter(files))
    half = HalfHolder((tmp_path / 'share' / name).read_bytes())
    p2, _ = peers('p2', tmp_path / 'share')
    for addr in (half.addr, p2):                      # the vanishing holder is listed first
        assert run_client(servers, '--op', 'register', '--share', tmp_path / 'share',
                          '--advertise', addr)[0] == 0
    names = names_file(tmp_path / 'names', [name])
    rc, ops, _, err = run_client(servers, '--op', 'download', '--names', names,
                                 '--downloads', tmp_path / 'dl')
    assert rc == 0, err
    assert ops[0]['resumes'] == 1 and ops[0]['holder'] == p2
    assert hashlib.sha256((tmp_path / 'dl' / name).read_bytes()).hexdigest() == files[name]


def test_vanishing_only_holder_is_a_clear_error_and_no_file(tmp_path, cluster):
    servers, _ = cluster(1)
    files = make_files(tmp_path / 'share', [1000000])
    name = next(iter(files))
    half = HalfHolder((tmp_path / 'share' / name).read_bytes())
    assert run_client(servers, '--op', 'register', '--share', tmp_path / 'share',
                      '--advertise', half.addr)[0] == 0
    rc, ops, summ, err = run_client(servers, '--op', 'download', '--timeout', 2,
                                    '--names', names_file(tmp_path / 'names', [name]),
                                    '--downloads', tmp_path / 'dl')
    assert rc == 1 and summ['failed'] == 1
    assert 'closed the connection mid-transfer' in ops[0]['error']
    assert 'after 500000 of 1000000 bytes' in ops[0]['error']
    assert os.listdir(tmp_path / 'dl') == []


def test_real_peer_killed_mid_download_resumes(tmp_path, cluster, peers):
    servers, _ = cluster(1)
    size = 320 * 1024 * 1024
    share = tmp_path / 'share'
    share.mkdir()
    with open(share / 'big.bin', 'wb') as f:
        block = os.urandom(1024 * 1024)
        for i in range(size // len(block)):
            f.write(block[:-8] + struct.pack('>Q', i))
    try:
        _kill_one_of_two_holders(tmp_path, share, size, servers, peers)
    finally:
        for path in (share / 'big.bin', tmp_path / 'dl' / 'big.bin'):
            if path.exists():
                path.unlink()             # do not leave 640 MB in pytest's kept tmp folders


def _kill_one_of_two_holders(tmp_path, share, size, servers, peers):
    """Download from p1, SIGKILL p1 midway, expect the rest from p2."""
    p1, proc1 = peers('p1', share)
    p2, _ = peers('p2', share)
    for addr in (p1, p2):
        run_client(servers, '--op', 'register', '--share', share, '--advertise', addr)
    client = subprocess.Popen(
        [sys.executable, '-m', 'nodes.dht.client', '--name', 'c1', '--servers', servers,
         '--op', 'download', '--names', str(names_file(tmp_path / 'n', ['big.bin'])),
         '--downloads', str(tmp_path / 'dl')], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        parts = [f for f in os.listdir(tmp_path / 'dl')] if (tmp_path / 'dl').exists() else []
        if parts and os.path.getsize(tmp_path / 'dl' / parts[0]) > 16 * 1024 * 1024:
            break
        time.sleep(0.002)
    proc1.p.kill()
    out, _ = client.communicate(timeout=120)
    op = [json.loads(line) for line in out.splitlines()][0]
    assert client.returncode == 0 and op['ok'] and op['bytes'] == size
    assert op.get('resumes') == 1 and op['holder'] == p2, 'the kill came too late: %s' % op
    h = hashlib.sha256()
    with open(tmp_path / 'dl' / 'big.bin', 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            h.update(block)
    with open(share / 'big.bin', 'rb') as f:
        assert h.digest() == hashlib.sha256(f.read()).digest()


def test_barrier_waits_for_go(cluster):
    servers, _ = cluster(1)
    c = Proc('nodes.dht.client', '--name', 'c1', '--servers', servers, '--op', 'search',
             '--names', names_file_tmp(['a', 'b']), '--barrier', stdin=subprocess.PIPE)
    c.wait_event('ready')
    time.sleep(0.3)
    assert c.p.poll() is None                       # still waiting at the barrier
    c.p.stdin.write('go\n')
    c.p.stdin.flush()
    summ = c.wait_event('summary')
    assert summ['count'] == 2 and summ['failed'] == 2
    assert c.p.wait(10) == 1


def test_download_refuses_unsafe_names_and_peer_hides_symlinks(tmp_path, cluster, peers):
    servers, _ = cluster(1)
    files = make_files(tmp_path / 'share', [100])
    secret = tmp_path / 'secret.txt'
    secret.write_text('not shared')
    os.symlink(secret, tmp_path / 'share' / 'link.txt')
    p1, _ = peers('p1', tmp_path / 'share')
    # Register the symlink's name by hand through a folder that holds a regular file of that name.
    (tmp_path / 'fake').mkdir()
    (tmp_path / 'fake' / 'link.txt').write_text('x')
    assert run_client(servers, '--op', 'register', '--share', tmp_path / 'fake',
                      '--advertise', p1)[0] == 0
    names = names_file(tmp_path / 'names', ['../escape.bin', 'link.txt'])
    rc, ops, summ, _ = run_client(servers, '--op', 'download', '--names', names,
                                  '--downloads', tmp_path / 'dl')
    assert rc == 1 and summ['failed'] == 2
    assert 'invalid file name' in ops[0]['error']
    assert 'no such file' in ops[1]['error']
    assert os.listdir(tmp_path / 'dl') == [] and not (tmp_path / 'escape.bin').exists()
    assert files


def test_search_times_out_on_a_hung_owner_and_uses_the_replica(tmp_path, cluster):
    servers, sprocs = cluster(2, replicas=1)
    share = tmp_path / 'share'
    files = make_files(share, [10] * 20)
    assert run_client(servers, '--replicas', 1, '--op', 'register', '--share', share,
                      '--advertise', '127.0.0.1:9')[0] == 0
    ring = Ring(['s1', 's2'])
    hung = ring.owner(sorted(files)[0])
    os.kill(sprocs[hung].p.pid, signal.SIGSTOP)      # connected but silent
    try:
        rc, ops, summ, err = run_client(servers, '--replicas', 1, '--op', 'search', '--names',
                                        names_file(tmp_path / 'names', sorted(files)),
                                        '--timeout', 0.5)
    finally:
        os.kill(sprocs[hung].p.pid, signal.SIGCONT)
    assert rc == 0, err
    assert summ['down'] == [hung] and all(o['server'] != hung for o in ops)
    slow = [o for o in ops if o['latency'] >= 0.5]
    assert len(slow) == 1, 'one timeout, then the hung server is tried last'


def test_local_write_failure_fails_the_download_without_resuming(tmp_path, cluster, peers):
    import resource
    servers, _ = cluster(1)
    files = make_files(tmp_path / 'share', [1000000])
    name = next(iter(files))
    for peer in ('p1', 'p2'):                         # a second holder must not be used
        addr, _ = peers(peer, tmp_path / 'share')
        assert run_client(servers, '--op', 'register', '--share', tmp_path / 'share',
                          '--advertise', addr)[0] == 0
    (tmp_path / 'dl').mkdir()
    r = subprocess.run(
        [sys.executable, '-m', 'nodes.dht.client', '--name', 'c1', '--servers', servers,
         '--op', 'download', '--names', str(names_file(tmp_path / 'names', [name])),
         '--downloads', str(tmp_path / 'dl')], cwd=ROOT, capture_output=True, text=True,
        timeout=60,       # files this process writes may not exceed 200 KB (EFBIG after that)
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (200000, 200000)))
    op = json.loads(r.stdout.splitlines()[0])
    assert r.returncode == 1 and not op['ok'] and 'cannot write' in op['error']
    assert 'resumes' not in op and os.listdir(tmp_path / 'dl') == []
