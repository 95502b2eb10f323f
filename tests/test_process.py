"""NodeProcess on this machine (host=None): logs, readiness, barrier, stop."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from repronet.emu.process import LogReady, NodeError, NodeProcess, TcpListening, \
    TcpReady, stop_all

BARRIER_NODE = r'''
import json, sys, time
print(json.dumps({"t": 0.0, "event": "ready"}), flush=True)
line = sys.stdin.readline().strip()
print(json.dumps({"t": 1.0, "event": "released", "line": line}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
'''

SERVER = r'''
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], file=sys.stderr, flush=True)
time.sleep(float(sys.argv[1]))
s.listen()
while True:
    c, _ = s.accept()
    c.close()
'''


def _py(code, *args):
    return [sys.executable, '-c', code] + [str(a) for a in args]


def test_barrier_logs_and_exit_status(tmp_path):
    node = NodeProcess(None, 'n1', _py(BARRIER_NODE), tmp_path,
                       ready=LogReady(), barrier=True).start()
    node.wait_ready(timeout=10)
    assert node.returncode is None          # blocked on the barrier
    node.go()
    assert node.wait(timeout=10) == 0
    records = [json.loads(x) for x in open(tmp_path / 'n1.jsonl')]
    assert records[1] == {'t': 1.0, 'event': 'released', 'line': 'go'}
    assert (tmp_path / 'n1.err').read_text() == 'to stderr\n'


def test_exit_before_ready_is_an_error_with_stderr(tmp_path):
    node = NodeProcess(None, 'bad', _py('import sys; sys.exit("no config")'),
                       tmp_path, ready=LogReady()).start()
    with pytest.raises(NodeError, match='status 1.*no config'):
        node.wait_ready(timeout=10)


def test_not_ready_in_time(tmp_path):
    node = NodeProcess(None, 'slow', _py('import time; time.sleep(30)'),
                       tmp_path, ready=LogReady()).start()
    try:
        with pytest.raises(NodeError, match='not ready'):
            node.wait_ready(timeout=0.3)
    finally:
        node.stop(grace=1)


def _port_of(node):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = open(node.err_path).read().strip()
        if text:
            return int(text)
        time.sleep(0.02)
    raise AssertionError('server printed no port')


def test_tcp_readiness_waits_for_listen(tmp_path):
    node = NodeProcess(None, 'srv', _py(SERVER, 0.5), tmp_path).start()
    try:
        port = _port_of(node)
        listening = TcpListening(port)
        assert not listening.check(node)    # bound but not listening yet
        node.ready = listening
        node.wait_ready(timeout=10)
        node.ready = TcpReady(port)
        node.wait_ready(timeout=10)
        with socket.create_connection(('127.0.0.1', port), timeout=2):
            pass
    finally:
        node.stop(grace=2)


def test_stop_escalates_to_sigkill_and_takes_children(tmp_path):
    code = ('import signal, subprocess, sys, time\n'
            'signal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
            'child = subprocess.Popen([sys.executable, "-c", '
            '"import time; time.sleep(60)"])\n'
            'print(child.pid, flush=True)\n'
            'time.sleep(60)\n')
    node = NodeProcess(None, 'stubborn', _py(code), tmp_path,
                       suffix='.txt').start()
    deadline = time.monotonic() + 10
    while not open(node.log_path).read().strip():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    child = int(open(node.log_path).read())
    started = time.monotonic()
    assert node.stop(grace=0.5) == -9
    assert time.monotonic() - started < 5
    deadline = time.monotonic() + 5
    while os.path.exists('/proc/%d' % child):   # reaped by init
        with open('/proc/%d/stat' % child) as f:
            if f.read().rsplit(')', 1)[1].split()[0] == 'Z':
                break
        assert time.monotonic() < deadline, 'child survived stop()'
        time.sleep(0.02)


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError):
        NodeProcess(None, 'x', 'echo hi', tmp_path)
    with pytest.raises(ValueError):
        NodeProcess(None, '../x', ['echo'], tmp_path)
    node = NodeProcess(None, 'missing', ['/nonexistent/tool'], tmp_path)
    with pytest.raises(NodeError, match='cannot start'):
        node.start()
    node = NodeProcess(None, 'nob', ['true'], tmp_path).start()
    node.wait(timeout=10)
    with pytest.raises(NodeError):
        node.go()


def test_stop_all_shares_one_grace_period(tmp_path):
    code = ('import signal, time\n'
            'signal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
            'print("up", flush=True)\n'
            'time.sleep(60)\n')
    nodes = [NodeProcess(None, 'n%d' % i, _py(code), tmp_path,
                         suffix='.txt').start() for i in range(4)]
    nodes.append(NodeProcess(None, 'polite', ['sleep', '60'],
                             tmp_path).start())
    for node in nodes[:4]:
        deadline = time.monotonic() + 10
        while not open(node.log_path).read():
            assert time.monotonic() < deadline
            time.sleep(0.02)
    started = time.monotonic()
    codes = stop_all(nodes, grace=0.5)
    assert time.monotonic() - started < 2.5     # not 4 x 0.5 s + more
    assert codes == {'n0': -9, 'n1': -9, 'n2': -9, 'n3': -9, 'polite': -15}


def test_stop_popen_escalates_when_sigterm_is_ignored():
    import signal as sig
    from repronet.emu.process import stop_popen
    proc = subprocess.Popen([sys.executable, '-c',
                             'import signal, sys, time\n'
                             'signal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
                             'print("armed", flush=True)\n'
                             'time.sleep(60)'], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == 'armed'
    assert stop_popen(proc, grace=0.5) == -sig.SIGKILL
    assert stop_popen(proc, grace=0.5) == -sig.SIGKILL  # idempotent
    proc.stdout.close()


def _gone_or_zombie(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] == 'Z'
    except FileNotFoundError:
        return True


def test_an_exited_node_is_never_signalled_again(tmp_path, monkeypatch):
    # Its group number may belong to an unrelated process by teardown time.
    node = NodeProcess(None, 'brief', ['true'], tmp_path).start()
    assert node.wait(timeout=10) == 0
    sent = []
    monkeypatch.setattr(os, 'killpg', lambda pid, sig: sent.append((pid, sig)))
    monkeypatch.setattr(os, 'kill', lambda pid, sig: sent.append((pid, sig)))
    assert stop_all([node], grace=0.5) == {'brief': 0}
    assert node.stop() == 0
    assert sent == []


def test_what_an_exited_node_left_in_its_group_goes_when_the_exit_is_seen(tmp_path):
    code = ('import subprocess, sys\n'
            'child = subprocess.Popen(["sleep", "60"])\n'
            'print(child.pid, flush=True)\n')
    node = NodeProcess(None, 'parent', _py(code), tmp_path, suffix='.txt').start()
    assert node.wait(timeout=10) == 0
    child = int(open(node.log_path).read())
    deadline = time.monotonic() + 5
    while not _gone_or_zombie(child):
        assert time.monotonic() < deadline, 'the orphan outlived its node'
        time.sleep(0.02)


def test_the_barrier_pipe_closes_once_go_is_written(tmp_path):
    code = ('import json, sys\n'
            'print(json.dumps({"event": "ready"}), flush=True)\n'
            'assert sys.stdin.readline() == "go\\n"\n'
            'sys.stdin.read()\n'           # returns only at end of file
            'print(json.dumps({"event": "eof"}), flush=True)\n')
    node = NodeProcess(None, 'reader', _py(code), tmp_path, ready=LogReady(),
                       barrier=True).start()
    node.wait_ready(timeout=10)
    node.go()
    assert node.wait(timeout=10) == 0       # before: blocked until teardown
    assert json.loads(open(node.log_path).read().splitlines()[-1]) == {'event': 'eof'}
