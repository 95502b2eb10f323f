"""The DHT node programs in the simulator (repronet.sim): started by the argv dht8 gives them,
over real share folders, they register, search, download whole files, fail over to a
replica when a server is killed, fail bad flags as the real programs do, and the same seed
gives byte-identical logs, in this process and in another one with other string hashes.

No root, no sockets: virtual time only, a few seconds of real time in all."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mininet.topo import Topo

from nodes.dht import codec
from nodes.dht.ring import Ring
from repronet.sim.backend import SimBackend
from tests.test_sans_io import violations
from workloads import dht_files

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SERVERS = ['s1', 's2', 's3', 's4']
INDEX_PORT, PEER_PORT = 7000, 8000
SPEC = dht_files.FileSetSpec('simtest', 40, 'part1', 7)     # 1 KB .. 5 MB, 40 files


class Star(Topo):
    """s1..s4, p1, p2 on one switch: 100 Mbit/s, 0.05 ms links."""

    def build(self):
        sw = self.addSwitch('sw1')
        for h in SERVERS + ['p1', 'p2']:
            self.addLink(self.addHost(h), sw, bw=100, delay='0.05ms')


class Net:
    """A simulated run: its backend and the node command lines workloads/dht8_points.py
    builds."""

    def __init__(self, tmp, seed=1, replicas=1, costs=None, cores=2):
        self.tmp, self.replicas = Path(tmp), replicas
        (self.tmp / 'logs').mkdir(parents=True, exist_ok=True)
        self.backend = SimBackend(Star(), seed, log_dir=self.tmp / 'logs', costs=costs,
                                  cores=cores)
        self.ip = {h: self.backend.hosts[h].ip for h in self.backend.hosts}
        self.server_arg = ','.join('%s=%s:%d' % (s, self.ip[s], INDEX_PORT) for s in SERVERS)
        self.fileset = dht_files.generate(SPEC, self.tmp / 'work')
        self.ring = Ring(SERVERS)

    def start(self, host, name, argv):
        return self.backend.start_node(self.backend.hosts[host], name, argv)

    def servers(self):
        procs = {s: self.start(s, 'server-' + s, [
            PY, '-m', 'nodes.dht.server', '--name', s, '--listen',
            '%s:%d' % (self.ip[s], INDEX_PORT), '--servers', self.server_arg,
            '--replicas', self.replicas, '--max-entries', 2000000]) for s in SERVERS}
        for proc in procs.values():
            proc.wait_ready(5)
        return procs

    def share(self, peer):
        return dht_files.peer_share(self.fileset, peer, self.tmp / 'work')

    def peer(self, peer):
        proc = self.start(peer, 'peer-' + peer, [
            PY, '-m', 'nodes.dht.peer', '--name', peer, '--listen',
            '%s:%d' % (self.ip[peer], PEER_PORT), '--share', self.share(peer)])
        proc.wait_ready(5)
        return proc

    def client(self, host, name, op, names=None, downloads=None, barrier=True, window=1,
               source='p1'):
        argv = [PY, '-m', 'nodes.dht.client', '--name', name, '--servers', self.server_arg,
                '--replicas', self.replicas, '--op', op, '--batch', '--window', window,
                '--timeout', 5.0]
        if op == 'register':
            argv += ['--share', self.share(source), '--advertise',
                     '%s:%d' % (self.ip[source], PEER_PORT)]
        if names is not None:
            argv += ['--names', dht_files.write_names(self.tmp / (name + '.txt'), names)]
        if downloads is not None:
            argv += ['--downloads', downloads]
        if barrier:
            argv.append('--barrier')
        proc = self.start(host, name, argv)
        if barrier:
            proc.wait_ready(30)
        return proc

    def register(self, source='p1'):
        proc = self.client(source, 'setup-' + source, 'register', barrier=False,
                           source=source)
        assert proc.wait(60) == 0, self.err(proc)

    def names(self, source='p1'):
        return [n for n, _, _ in dht_files.peer_files(self.fileset, source)]

    def err(self, proc):
        return proc.err_path.read_text()

    def records(self, proc, event=None):
        lines = proc.log_path.read_text().splitlines()
        return [r for r in map(json.loads, lines) if event is None or r['event'] == event]


def test_registered_files_are_found_on_their_owner_and_a_missing_one_fails(tmp_path):
    net = Net(tmp_path)
    servers = net.servers()
    net.register()
    names = net.names()
    c = net.client('p2', 'search-p2', 'search', names + ['nobody-has-this.bin'])
    released = net.backend.engine.now
    c.go()
    assert c.wait(60) == 1
    ops = {r['name']: r for r in net.records(c, 'op')}
    assert all(ops[n]['ok'] and ops[n]['holders'] == 1 for n in names)
    assert all(ops[n]['server'] == net.ring.replicas(n, 0)[0] for n in names)
    assert ops['nobody-has-this.bin']['ok'] is False
    assert ops['nobody-has-this.bin']['error'] == 'not found'
    summary, = net.records(c, 'summary')
    assert (summary['count'], summary['ok'], summary['failed']) == (41, 40, 1)
    last = max(r['t'] for r in ops.values())
    assert summary['elapsed'] == pytest.approx(last - released, abs=1e-6)
    assert '1 of 41 search operations failed' in net.err(c)
    for proc in servers.values():
        assert proc.stop() == 0
    entries = [net.records(p, 'summary')[0]['entries'] for p in servers.values()]
    assert sum(entries) == 2 * len(names)           # every entry on its owner and replica
    ready = net.records(servers['s1'], 'ready')[0]
    assert ready == {'t': 0.0, 'event': 'ready', 'listen': '%s:%d' % (net.ip['s1'], 7000),
                     'name': 's1', 'servers': 4, 'replicas': 1, 'protocol': 1}


class _Pipeliner:
    """A raw simulated connection that writes every request at once and keeps the replies."""

    def __init__(self, requests):
        self.requests, self.replies, self.lost = requests, bytearray(), False

    def connection_made(self, stream):
        stream.send(self.requests)

    def data_received(self, stream, data):
        self.replies += data

    def connection_lost(self, stream, why):
        self.lost = True


@pytest.mark.parametrize('costs', [None, {'nodes.dht.server': 0.01}],
                         ids=['free', 'slow'])      # slow: the next train comes while it waits
def test_a_server_answers_a_pipelined_flood_a_batch_at_a_time_in_order(tmp_path, costs):
    net = Net(tmp_path, replicas=0, costs=costs)
    servers = net.servers()
    net.register()
    names = [n for n in net.names() if net.ring.replicas(n, 0)[0] == 's1']
    asked = [names[i % len(names)] for i in range(3000)]    # ~100 KB: two trains
    flood = _Pipeliner(b''.join(codec.encode(codec.Search(i, n))
                                for i, n in enumerate(asked, 1)))
    net.backend.stacks['p2'].connect(net.ip['s1'], INDEX_PORT, flood)
    net.backend.run_until(lambda: False, 5)
    replies = codec.Decoder().feed(bytes(flood.replies))
    assert [(r.req, r.name, type(r)) for r in replies] == [
        (i, n, codec.Found) for i, n in enumerate(asked, 1)]
    assert not flood.lost
    servers['s1'].stop()
    assert net.records(servers['s1'], 'summary')[0]['search'] == 3000


def test_downloads_arrive_whole_under_their_names(tmp_path):
    net = Net(tmp_path)
    net.servers()
    net.register()
    peer = net.peer('p1')
    downloads = tmp_path / 'downloads'
    c = net.client('p2', 'download-p2', 'download', net.names(), downloads, window=2)
    c.go()
    assert c.wait(60) == 0, net.err(c)
    share = net.share('p1')
    assert sorted(os.listdir(downloads)) == sorted(net.names())     # no temporary left
    for name in net.names():
        assert (downloads / name).read_bytes() == (share / name).read_bytes(), name
    total = net.fileset.total_bytes
    assert max(e['size'] for e in net.fileset.files) > 4 * 1024 * 1024     # drained in parts
    assert net.records(c, 'summary')[0]['bytes'] == total
    assert peer.stop() == 0
    summary = net.records(peer, 'summary')[0]
    assert (summary['gets'], summary['sent'], summary['bytes']) == (40, 40, total)
    assert net.records(peer, 'ready')[0]['files'] == 40


def _search_run(tmp, kill_at=None):
    """A search of p1's files with s-victim killed kill_at seconds after the release;
    return (net, client, release time, victim)."""
    net = Net(tmp)
    servers = net.servers()
    net.register()
    c = net.client('p2', 'search-p2', 'search', net.names())
    victim = net.ring.replicas(net.names()[-1], 0)[0]      # owns the last name at least
    released = net.backend.engine.now
    c.go()
    if kill_at is not None:
        net.backend.run_until(lambda: net.backend.engine.now >= released + kill_at, 60)
        assert c.returncode is None                         # killed mid-run
        servers[victim].kill()
    assert c.wait(60) == 0, net.err(c)
    return net, c, released, victim


def test_a_client_fails_over_to_the_replica_when_its_server_is_killed(tmp_path):
    _, c, released, _ = _search_run(tmp_path / 'whole')
    length = json.loads(c.log_path.read_text().splitlines()[-1])['elapsed']
    net, c, released, victim = _search_run(tmp_path / 'killed', kill_at=length / 2)
    summary = net.records(c, 'summary')[0]
    assert summary['ok'] == summary['count'] == 40 and summary['down'] == [victim]
    assert summary['elapsed'] < length + 1.0        # the reset, not the 5 s timeout, told it
    late = [r for r in net.records(c, 'op') if r['t'] > released + length / 2
            and net.ring.replicas(r['name'], 0)[0] == victim]
    assert late and all(r['server'] == net.ring.replicas(r['name'], 1)[1] for r in late)
    assert 'index server' not in net.err(c)             # a reset, not a refused connect


@pytest.mark.parametrize('module,flags,text', [
    ('server', ['--name', 's1', '--listen', '10.0.0.3:7000', '--servers', 's1=10.0.0.3:7000',
                '--replicas', 'x'], "argument --replicas: invalid int value: 'x'"),
    ('server', ['--name', 's9', '--listen', '10.0.0.3:7000', '--servers', 's1=10.0.0.3:7000'],
     '--name s9 is not in --servers'),
    ('client', ['--name', 'c', '--servers', 's1=10.0.0.3:7000', '--op', 'fly'],
     "argument --op: invalid choice: 'fly'"),
    ('peer', ['--name', 'p1', '--listen', '10.0.0.1:8000', '--share', '/nonexistent'],
     '--share /nonexistent is not a directory'),
])
def test_a_bad_flag_ends_the_program_with_2_and_one_sentence(tmp_path, module, flags, text):
    net = Net(tmp_path)
    proc = net.start('s1', 'bad', [PY, '-m', 'nodes.dht.' + module] + flags)
    assert proc.returncode == 2
    err = net.err(proc)
    assert err.startswith('dht.%s: ' % module) and text in err, err
    assert err.strip().count('\n') == 0 and 'usage:' not in err, err


def test_a_taken_port_ends_the_second_program_with_one_line(tmp_path):
    net = Net(tmp_path)
    net.peer('p1')
    proc = net.start('p1', 'again', [PY, '-m', 'nodes.dht.peer', '--name', 'p1', '--listen',
                                     '%s:%d' % (net.ip['p1'], PEER_PORT), '--share',
                                     net.share('p1')])
    assert proc.returncode == 1
    assert net.err(proc) == 'peer p1: %s:%d: address already in use\n' % (net.ip['p1'],
                                                                           PEER_PORT)


def test_a_stopped_client_logs_what_it_did_and_leaves_no_partial_file(tmp_path):
    net = Net(tmp_path)
    net.servers()
    net.register()
    net.peer('p1')
    early = net.client('p2', 'early', 'search', net.names())
    assert early.stop() == 1
    assert 'early: interrupted before the operations started' in net.err(early)
    downloads = tmp_path / 'downloads'
    c = net.client('p2', 'download-p2', 'download', net.names(), downloads)
    c.go()
    net.backend.run_until(lambda: any(n.startswith('.') for n in os.listdir(downloads)), 60)
    assert c.stop() == 1
    summary = net.records(c, 'summary')[0]
    assert summary['interrupted'] is True and summary['count'] < 40
    assert not [n for n in os.listdir(downloads) if n.startswith('.')]
    assert 'removed 1 unfinished download(s)' in net.err(c)


def scenario_digest(tmp, seed):
    """Run register, download (window 2) and a search during which a server is killed;
    return the SHA-256 of every node's log, in name order."""
    net = Net(tmp, seed)
    servers = net.servers()
    net.register()
    net.peer('p1')
    d = net.client('p2', 'download-p2', 'download', net.names(), tmp / 'downloads', window=2)
    s = net.client('p2', 'search-p2', 'search', net.names()[::-1], window=4)
    d.go()
    s.go()
    net.backend.run_until(lambda: net.backend.engine.now >= 0.2, 60)
    servers['s2'].kill()
    assert d.wait(60) == 0 and s.wait(60) == 0
    net.backend.run_until(lambda: False, 1)
    for proc in list(servers.values()):
        proc.stop()
    h = hashlib.sha256()
    for path in sorted((Path(tmp) / 'logs').glob('*.jsonl')):
        h.update(path.name.encode() + b'\0' + path.read_bytes())
    return h.hexdigest()


def test_the_same_seed_gives_byte_identical_logs(tmp_path):
    first = scenario_digest(tmp_path / 'a', 3)
    assert scenario_digest(tmp_path / 'b', 3) == first
    code = ('import sys; from tests.test_dht_sim import scenario_digest; from pathlib import'
            ' Path; print(scenario_digest(Path(sys.argv[1]), 3))')
    env = dict(os.environ, PYTHONHASHSEED='12345', PYTHONPATH=str(ROOT))
    out = subprocess.run([PY, '-c', code, str(tmp_path / 'c')], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == first          # other string hashes, same run


def test_the_simulated_drivers_do_no_io_and_read_no_clock():
    for module in ('sim_drivers.py', 'sim_peer.py'):
        assert violations(ROOT / 'nodes' / 'dht' / module) == []
