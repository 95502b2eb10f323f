"""The KV server and kvload in the simulator (repronet.sim), started by the argv
workloads/kv_points.py gives them.

Bad input: the same bytes go to a real server process on localhost and to the simulated one
(raw connections on both sides, no client library), and the replies must be the same bytes,
and the connection closed in both or in neither: malformed RESP, oversized keys and values,
requests over the size limit, unknown commands. Then: the append-only file is written and
recovered by a simulated restart; ``appendfsync always`` still answers; kvload against the
simulated server gets every reply right with virtual-time latencies; kvload's bad flags exit
2 and a refused connection exits 1 with one sentence; ``--profile`` is refused. No root:
virtual time, plus localhost for the real server."""

import json
import sys
from pathlib import Path

import pytest
from mininet.topo import Topo

from repronet.sim.backend import SimBackend
from tests.kv_proc import KVProc, command, exchange_until_pong
from tests.test_sans_io import violations

ROOT = Path(__file__).resolve().parent.parent
PORT = 6379
PONG = b'+PONG\r\n'
LIMITS = ['--max-key-bytes', 8, '--max-value-bytes', 100]


class Pair(Topo):
    """a (clients) and b (server) on one switch: 100 Mbit/s, 0.1 ms per link."""

    def build(self):
        sw = self.addSwitch('sw1')
        for h in ('a', 'b'):
            self.addLink(self.addHost(h), sw, bw=100, delay='0.1ms')


class Sim:
    """A simulated pair with the KV server (when started) on b."""

    def __init__(self, tmp, seed=1):
        self.logs = Path(tmp) / 'logs'
        self.logs.mkdir(parents=True, exist_ok=True)
        self.backend = SimBackend(Pair(), seed, log_dir=self.logs)
        self.ip = self.backend.hosts['b'].ip

    def start(self, host, name, module, flags):
        return self.backend.start_node(self.backend.hosts[host], name,
                                       [sys.executable, '-m', module] + flags)

    def server(self, *flags, name='server'):
        proc = self.start('b', name, 'nodes.kv.server',
                          ['--host', '0.0.0.0', '--port', PORT] + list(flags))
        proc.wait_ready(5)
        return proc

    def records(self, name):
        return [json.loads(line) for line in (self.logs / (name + '.jsonl')).open()]

    def exchange(self, data, seconds=5.0):
        """Send data from a on a new connection; return (bytes received, closed by the
        server) once it closed, it answered a PING, or seconds of virtual time passed."""
        got = _Raw()
        self.backend.stacks['a'].connect(self.ip, PORT, got).send(data)
        self.backend.run_until(lambda: got.closed or got.data.endswith(PONG), seconds)
        return bytes(got.data), got.closed


class _Raw:
    """A raw simulated connection's protocol: keeps every byte, notes the close."""

    def __init__(self):
        self.data, self.closed = bytearray(), False

    def connection_made(self, conn):
        pass

    def data_received(self, conn, data):
        self.data += data

    def connection_lost(self, conn, why):
        self.closed = True


def test_sim_modules_do_no_io():
    assert violations(ROOT / 'nodes/kv/sim_server.py') == []
    assert violations(ROOT / 'workloads/kvload_sim.py') == []


BAD = {
    'huge bulk length': b'*1\r\n$999999999999\r\n',
    'array length not a number': b'*zz\r\n',
    'array of integers': b'*2\r\n:1\r\n:2\r\n',
    'bulk longer than it said': b'*1\r\n$3\r\nGETxxxxxxxx',
    'binary garbage inline': b'\x00\xffgarbage here\r\n',
    'unknown command, wrong arity': command('FOO', 'bar') + command('GET'),
    'oversized key and value': command('SET', 'k' * 9, 'v') + command('SET', 'k', 'v' * 101)
    + command('SET', 'k', 'v' * 100) + command('DBSIZE'),
    'request over the size limit': b'*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5000\r\n' + b'v' * 5000,
    'too many arguments': b'*2000000\r\n',
}


@pytest.fixture(scope='module')
def real():
    with KVProc(*LIMITS) as proc:
        yield proc


@pytest.mark.parametrize('name', sorted(BAD))
def test_bad_input_gets_the_real_servers_bytes(tmp_path, real, name):
    data = BAD[name] + command('PING')
    sim = Sim(tmp_path)
    sim.server(*LIMITS)
    simulated = sim.exchange(data)
    assert simulated == exchange_until_pong(real.port, data)
    assert simulated[0].startswith(b'-ERR') or b'\r\n-ERR' in simulated[0]
    assert sim.exchange(command('SET', 'x', 'y') + command('PING'))[0] == b'+OK\r\n' + PONG


@pytest.mark.parametrize('policy', ['always', 'everysec', 'no'])
def test_the_log_is_written_and_recovered_by_a_restart(tmp_path, policy):
    sim = Sim(tmp_path)
    aof = str(tmp_path / 'kv.aof')
    first = sim.server('--log', aof, '--appendfsync', policy, name='first')
    writes = b''.join(command('SET', 'k%d' % i, 'v%d' % i) for i in range(50))
    got, closed = sim.exchange(writes + command('DEL', 'k0') + command('PING'))
    assert got == b'+OK\r\n' * 50 + b':1\r\n' + PONG and not closed
    assert first.stop() == 0
    summary = sim.records('first')[-1]
    assert summary['event'] == 'summary' and summary['keys'] == 49
    assert summary['fsyncs'] >= 1 and summary['log_file_bytes'] == Path(aof).stat().st_size
    second = sim.server('--log', aof, name='second')
    assert sim.records('second')[0]['recovered']['records'] == 51
    assert sim.exchange(command('GET', 'k7') + command('EXISTS', 'k0') + command('PING'))[0] \
        == b'$2\r\nv7\r\n:0\r\n' + PONG
    second.stop()


def test_profile_is_refused_and_a_taken_port_ends_with_one_line(tmp_path):
    sim = Sim(tmp_path)
    proc = sim.start('b', 'prof', 'nodes.kv.server', ['--port', PORT, '--profile',
                                                      str(tmp_path / 'x.prof')])
    assert proc.returncode == 2 and 'does not run in the simulator' in \
        (sim.logs / 'prof.err').read_text()
    sim.server()
    again = sim.start('b', 'again', 'nodes.kv.server', ['--port', PORT])
    assert again.returncode == 1
    assert (sim.logs / 'again.err').read_text().count('\n') == 1


def _kvload(sim, name, *flags):
    return sim.start('a', name, 'workloads.kvload', [
        '--host', sim.ip, '--port', PORT, '--timeout', 2] + [str(f) for f in flags])


@pytest.mark.parametrize('pipeline', [1, 8])
def test_kvload_gets_every_reply_right_in_virtual_time(tmp_path, pipeline):
    sim = Sim(tmp_path)
    server = sim.server()
    lat = tmp_path / 'logs' / 'load.lat'
    load = _kvload(sim, 'load', '--clients', 3, '--requests', 200, '--pipeline', pipeline,
                   '--latencies', lat)
    assert load.wait(60) == 0
    records = sim.records('load')
    assert records[0]['event'] == 'ready' and records[0]['loop'] == 'sim'
    phases = [r for r in records if r['event'] == 'phase']
    assert len(phases) == 9 and all(p['ok'] == 200 for p in phases)
    summary = records[-1]
    assert summary['ok'] == summary['planned'] == 1800 and summary['cpu_s'] is None
    assert summary['latencies'] == 'load.lat' and lat.stat().st_size == 1800 * 4
    # one request on 0.1 ms links crosses 4 link hops: at least 0.4 ms per sequential reply
    if pipeline == 1:
        assert all(p['p50_us'] >= 400 for p in phases)
    server.stop()
    assert sim.records('server')[-1]['keys'] == 0


@pytest.mark.parametrize('flags, says', [
    (['--requests', 0], '--requests'),
    (['--ops', 'set,nope'], '--ops'),
])
def test_kvload_bad_flags_exit_2_with_one_sentence(tmp_path, flags, says):
    sim = Sim(tmp_path)
    proc = _kvload(sim, 'bad', *flags)
    assert proc.returncode == 2
    err = (sim.logs / 'bad.err').read_text()
    assert says in err and err.strip().count('\n') == 0


def test_kvload_without_a_server_is_refused_with_one_sentence(tmp_path):
    sim = Sim(tmp_path)
    proc = _kvload(sim, 'alone', '--requests', 10)
    assert proc.wait(30) == 1
    err = (sim.logs / 'alone.err').read_text()
    assert 'cannot connect to %s:%d: connection refused' % (sim.ip, PORT) in err
    assert err.strip().count('\n') == 0


def test_a_simulated_cluster_redirects_to_the_owner_of_each_key(tmp_path):
    from nodes.kv import cluster
    sim = Sim(tmp_path)
    spec = 's1=%s:7001,s2=%s:7002' % (sim.ip, sim.ip)
    for name in ('s1', 's2'):
        sim.start('b', name, 'nodes.kv.server', ['--cluster', spec, '--node-id', name])
        sim.backend.run_until(lambda: False, 0.01)
    ring = cluster.Ring(cluster.parse_layout(spec))
    keys = ['key%d' % i for i in range(40)]
    got = _Raw()
    sim.backend.stacks['a'].connect(sim.ip, 7001, got).send(
        b''.join(command('SET', k, 'v') for k in keys) + command('PING'))
    sim.backend.run_until(lambda: got.data.endswith(PONG), 5)
    want = [b'+OK' if ring.owner(cluster.key_slot(k.encode()))[1].name == 's1' else
            b'-MOVED %d %s:7002' % (cluster.key_slot(k.encode()), sim.ip.encode())
            for k in keys]
    assert got.data.split(b'\r\n')[:-2] == want
    assert b'+OK' in want and any(w.startswith(b'-MOVED') for w in want)


def test_idle_timeout_and_max_connections_act_in_virtual_time(tmp_path):
    sim = Sim(tmp_path)
    server = sim.server('--idle-timeout', 2, '--max-connections', 1)
    idle = _Raw()
    sim.backend.stacks['a'].connect(sim.ip, PORT, idle)
    sim.backend.run_until(lambda: False, 0.01)
    assert sim.exchange(command('PING')) == (b'-ERR max number of clients reached\r\n', True)
    sim.backend.run_until(lambda: idle.closed, 10)     # it connected at time 0
    assert idle.closed and 2.0 <= sim.backend.engine.now <= 2.01
    assert sim.exchange(command('PING')) == (PONG, False)      # the slot is free again
    server.stop()
    summary = sim.records('server')[-1]
    assert summary['idle_closed'] == 1 and summary['rejected_connections'] == 1
