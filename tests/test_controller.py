"""The os-ken controller app (nodes/osken_switch.py) and OsKenController (repronet/emu/controller.py).

Three tiers: configuration parsing; the app under a real ``osken-manager`` on a loopback
ephemeral port (no root: start, garbage on the OpenFlow port, SIGTERM shutdown, bad
configuration); and a Mininet LinearTopo(3) of userspace OVS switches driven by the controller
(root): 0% ping loss, a transfer of a known number of bytes, the port counters along the path,
the learned flows, and a clean stop.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from repronet.emu.controller import APP, find_osken_manager
from tests.ports import accepts, free_port

OSKEN = find_osken_manager()
needs_osken = pytest.mark.skipif(OSKEN is None, reason='osken-manager not installed '
                                 '(Debian package python3-os-ken)')



def _records(path):
    """All JSON records of a controller log."""
    if not os.path.exists(path):
        return []
    with open(path, encoding='utf-8') as log:
        return [json.loads(line) for line in log if line.strip()]


def _wait_for(predicate, timeout, what):
    """Poll predicate() until true; fail the test with `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail('timed out after %.0f s waiting for %s' % (timeout, what))
        time.sleep(0.05)


# -- configuration -----------------------------------------------------------------------------

def test_config_from_env_defaults_and_errors():
    """Defaults apply when unset; bad values raise ValueError naming the variable."""
    app = pytest.importorskip('nodes.osken_switch')
    assert app.config_from_env({}) == {'log': None, 'interval': 1.0, 'idle_timeout': 60}
    config = app.config_from_env({'REPRONET_PORT_STATS_LOG': '/tmp/x.jsonl',
                                  'REPRONET_STATS_INTERVAL': '0.25', 'REPRONET_IDLE_TIMEOUT': '0'})
    assert config == {'log': '/tmp/x.jsonl', 'interval': 0.25, 'idle_timeout': 0}
    for key, value in (('REPRONET_STATS_INTERVAL', 'fast'), ('REPRONET_STATS_INTERVAL', '0'),
                       ('REPRONET_IDLE_TIMEOUT', '-1'), ('REPRONET_IDLE_TIMEOUT', '1.5'),
                       ('REPRONET_IDLE_TIMEOUT', '70000')):
        with pytest.raises(ValueError, match=key):
            app.config_from_env({key: value})


# -- the app under osken-manager, on loopback ----------------------------------------------------

def _start_app(tmp_path, port, **env):
    """Start osken-manager with the app on 127.0.0.1:port; return (process, log path)."""
    log = str(tmp_path / 'c0.jsonl')
    environ = dict(os.environ, REPRONET_PORT_STATS_LOG=log, REPRONET_STATS_INTERVAL='0.2',
                   PYTHONDONTWRITEBYTECODE='1')
    environ.update(env)
    err = open(tmp_path / 'c0.err', 'wb')
    proc = subprocess.Popen([OSKEN, '--ofp-listen-host', '127.0.0.1', '--ofp-tcp-listen-port',
                             str(port), APP], stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                            env=environ, start_new_session=True)
    err.close()
    return proc, log



@needs_osken
def test_app_survives_garbage_and_stops_cleanly_on_sigterm(tmp_path):
    """Garbage on the OpenFlow port does not kill it; SIGTERM gives final_round, stopped, exit 0."""
    port = free_port()
    proc, log = _start_app(tmp_path, port)
    try:
        _wait_for(lambda: accepts(port), 30, 'the controller to listen')
        for junk in (b'\x00' * 64, b'GET / HTTP/1.0\r\n\r\n', b'\x04\x00\x00\x08'):
            with socket.create_connection(('127.0.0.1', port), timeout=2) as sock:
                sock.sendall(junk)
        time.sleep(0.5)
        assert proc.poll() is None, 'controller died on garbage input'
        assert accepts(port), 'controller stopped accepting connections after garbage input'
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events = [record['event'] for record in _records(log)]
    assert events[0] == 'controller_started'
    assert events[-2:] == ['final_round', 'stopped']
    assert all('t' in record for record in _records(log))


@needs_osken
def test_app_rejects_bad_configuration_with_clear_error(tmp_path):
    """A non-numeric interval stops the app at start with one sentence naming the variable."""
    proc, _ = _start_app(tmp_path, free_port(), REPRONET_STATS_INTERVAL='often')
    assert proc.wait(30) == 2
    err = (tmp_path / 'c0.err').read_text()
    assert "REPRONET_STATS_INTERVAL must be a number, got 'often'" in err


# -- Mininet end to end ------------------------------------------------------------------------

_RECEIVER = '''
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(('0.0.0.0', int(sys.argv[1])))
server.listen(1)
print('listening', flush=True)
conn, _ = server.accept()
total = 0
while True:
    data = conn.recv(65536)
    if not data:
        break
    total += len(data)
conn.close()
print(total, flush=True)
'''

_SENDER = '''
import socket, sys
left = int(sys.argv[3])
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
chunk = b'\\x5a' * 65536
while left:
    part = chunk[:min(left, len(chunk))]
    sock.sendall(part)
    left -= len(part)
sock.shutdown(socket.SHUT_WR)
assert sock.recv(1) == b''   # the receiver read everything and closed
print('sent', flush=True)
'''

TRANSFER_BYTES = 16 * 1024 * 1024


def _transfer(src, dst, nbytes, port=5001):
    """Send exactly nbytes over TCP from host src to host dst; return the bytes received."""
    receiver = dst.popen([sys.executable, '-c', _RECEIVER, str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout.readline().strip() == 'listening', receiver.stderr.read()
        sender = src.popen([sys.executable, '-c', _SENDER, dst.IP(), str(port), str(nbytes)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = sender.communicate(timeout=120)
        assert sender.returncode == 0 and out.strip() == 'sent', err
        received, err = receiver.communicate(timeout=30)
        return int(received.strip())
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()


def _switch_port(switch, neighbor):
    """OpenFlow port number of the switch interface linked to `neighbor`."""
    for intf in switch.intfList():
        link = intf.link
        if link is not None and neighbor in (link.intf1.node, link.intf2.node):
            return switch.ports[intf]
    raise AssertionError('%s is not linked to %s' % (switch.name, neighbor.name))


def _learned_flow_bytes(switch):
    """Bytes matched by the learning switch's flows (priority 1, with an idle timeout)."""
    out = subprocess.run(['ovs-ofctl', '-O', 'OpenFlow13', 'dump-flows', switch.name],
                         capture_output=True, text=True, check=True).stdout
    total = 0
    for line in out.splitlines():
        if 'priority=1,' in line and 'idle_timeout=60' in line:
            total += int(re.search(r'n_bytes=(\d+)', line).group(1))
    return total


def _our_controller_pids(port):
    """PIDs of osken-manager processes listening on our port (from /proc cmdlines)."""
    wanted = b'--ofp-tcp-listen-port\x00%d\x00' % port
    pids = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as cmdline:
                if wanted in cmdline.read():
                    pids.append(int(pid))
        except OSError:
            continue
    return pids


def _wait_for_round(stats_log, after):
    """Wait until the log holds port_stats from every switch taken after `after`."""
    def done():
        return {r['dpid'] for r in _records(stats_log)
                if r['event'] == 'port_stats' and r['t'] > after} >= {1, 2, 3}
    _wait_for(done, 10, 'a statistics round')


@pytest.mark.root
def test_learning_switch_counts_a_known_transfer_on_every_port_of_the_path(tmp_path):
    """LinearTopo(3) under OsKenController: 0% loss, counters match a known transfer, clean stop."""
    from functools import partial
    from mininet.net import Mininet
    from mininet.node import OVSSwitch
    from mininet.topo import LinearTopo
    from analysis.portstats import counter_delta, port_stats_table
    from repronet.emu.controller import OsKenController

    port = free_port()
    log_dir = tmp_path / 'logs'
    net = Mininet(topo=LinearTopo(3), autoSetMacs=True, waitConnected=False,
                  switch=partial(OVSSwitch, datapath='user', protocols='OpenFlow13'),
                  controller=partial(OsKenController, port=port, log_dir=str(log_dir),
                                     stats_interval=0.5))
    controller = net.controllers[0]
    names = [intf for node in net.hosts + net.switches for intf in node.intfNames()
             if intf != 'lo']
    try:
        net.start()
        print('\ncontroller listening %.2f s after start' % controller.start_seconds)
        controller.wait_connected([1, 2, 3], timeout=30)
        for host in net.hosts:
            for intf in host.intfNames():
                host.cmd('ethtool -K %s tx off tso off gso off' % intf)
        loss = net.pingAll()
        assert loss == 0.0

        h1, h3 = net.get('h1', 'h3')
        _wait_for_round(controller.stats_log, time.time())    # a baseline sample
        since = time.time()
        received = _transfer(h1, h3, TRANSFER_BYTES)
        until = time.time()
        assert received == TRANSFER_BYTES
        _wait_for_round(controller.stats_log, until)
        table = port_stats_table(str(tmp_path))
        s1, s2, s3 = net.get('s1', 's2', 's3')
        # The data direction h1 -> s1 -> s2 -> s3 -> h3: (dpid, port, counter) along the path.
        path = [(1, _switch_port(s1, h1), 'rx_bytes'), (1, _switch_port(s1, s2), 'tx_bytes'),
                (2, _switch_port(s2, s1), 'rx_bytes'), (2, _switch_port(s2, s3), 'tx_bytes'),
                (3, _switch_port(s3, s2), 'rx_bytes'), (3, _switch_port(s3, h3), 'tx_bytes')]
        headers = 1 + 54 / 1460    # at least 54 header bytes per full 1460-byte segment
        for i, (dpid, number, counter) in enumerate(path):
            delta = counter_delta(table, dpid, number, counter, since, until)
            side = counter[:2]
            reverse = counter_delta(table, dpid, number, ('tx' if side == 'rx' else 'rx')
                                    + '_bytes', since, until)
            drops = counter_delta(table, dpid, number, side + '_dropped', since, until)
            print('s%d port %d %s +%d (%.4f x payload), reverse +%d, %s_dropped +%d'
                  % (dpid, number, counter, delta, delta / TRANSFER_BYTES, reverse, side, drops))
            # Every payload byte crossed every port of the path at least once, in frames that
            # add Ethernet, IP and TCP headers: 66 bytes per 1448-byte segment with timestamps,
            # never less than 54 per 1460 (3.7%).
            assert delta >= headers * TRANSFER_BYTES
            # The first switch's ingress also counts the retransmissions of segments the
            # userspace datapath dropped (measured 1.17 x payload at full speed); downstream
            # of the first switch each segment passes once (measured 1.0456 = 1514/1448), so
            # 10% leaves room for small segments and spurious retransmissions only.
            assert delta <= (2.0 if i == 0 else 1.10) * TRANSFER_BYTES
            # The other direction carries only ACKs: 66 bytes per one or two segments (<5%).
            assert 0 < reverse <= 0.1 * TRANSFER_BYTES
        # The data went through the flows the controller installed, not through packet-ins.
        # OVS copies datapath counters into OpenFlow flow stats in the background (its
        # revalidators, about every 0.5 s), so poll.
        for switch in (s1, s2, s3):
            _wait_for(lambda: _learned_flow_bytes(switch) >= TRANSFER_BYTES, 10,
                      'the flows of %s to count the transfer' % switch.name)
    finally:
        net.stop()

    assert controller.process.poll() is not None
    assert not _our_controller_pids(port)
    events = [record['event'] for record in _records(controller.stats_log)]
    assert events[-2:] == ['final_round', 'stopped']
    links = subprocess.run(['ip', '-o', 'link', 'show'], capture_output=True, text=True).stdout
    left = [name for name in names if re.search(r'\d+: %s[@:]' % re.escape(name), links)]
    assert not left, 'interfaces left after net.stop(): %s' % left
    bridges = subprocess.run(['ovs-vsctl', 'list-br'], capture_output=True, text=True).stdout
    assert not {'s1', 's2', 's3'} & set(bridges.split())


@pytest.mark.root
def test_controller_refuses_a_port_in_use_and_reports_a_dead_process(tmp_path):
    """A busy port is refused up front; a process that dies at start is reported with its stderr."""
    from repronet.emu.controller import ControllerError, OsKenController

    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen(1)
        with pytest.raises(ControllerError, match='already in use'):
            OsKenController('c9', port=busy.getsockname()[1], log_dir=str(tmp_path))
    controller = OsKenController('c9', port=free_port(), log_dir=str(tmp_path))
    controller.stats_interval = 'never'   # the app rejects this value at start
    try:
        with pytest.raises(ControllerError, match='REPRONET_STATS_INTERVAL must be a number'):
            controller.start()
        assert controller.process.poll() is not None
    finally:
        controller.stop()


RUNNER_STAND_IN = r'''
import sys, time
from repronet.emu.controller import OsKenController
out = open(sys.argv[2], 'w')
def started(c):
    out.write('%d\n' % c.process.pid)     # before it listens: a crash now is covered
    out.flush()
c = OsKenController('c8', port=int(sys.argv[1]), log_dir=sys.argv[3], on_start=started)
c.start()
out.write('listening\n')
out.flush()
time.sleep(120)
'''


@pytest.mark.root
@needs_osken
def test_a_sigkilled_runner_takes_its_controller_with_it(tmp_path):
    """The controller's PID reaches on_start before it listens, and the controller dies with
    the process that started it (an orphan kept port 6653 and broke every later run)."""
    port = free_port()
    said = tmp_path / 'said'
    runner = subprocess.Popen([sys.executable, '-c', RUNNER_STAND_IN, str(port), str(said),
                               str(tmp_path)], cwd=os.path.dirname(APP) + '/..')
    try:
        _wait_for(lambda: said.exists() and 'listening' in said.read_text(), 60,
                  'the controller to listen')
        pid = int(said.read_text().split()[0])
        assert open('/proc/%d/cmdline' % pid, 'rb').read().split(b'\0')[0].endswith(b'python3')
        runner.kill()
        runner.wait()
        _wait_for(lambda: not os.path.exists('/proc/%d' % pid)
                  or open('/proc/%d/stat' % pid).read().rsplit(')', 1)[1].split()[0] == 'Z',
                  10, 'the orphaned controller %d to die' % pid)
        with socket.socket() as again:          # the port is free for the next run
            again.bind(('127.0.0.1', port))
    finally:
        runner.kill()
        runner.wait()
