"""End to end across two servers: this machine and a namespace server (root, Mininet).

``repronet.cluster.nsserver`` makes the second server: sshd in its own network namespace and
its own mount namespace (private /tmp and /run), reached over ssh only. Every results folder
here is under /tmp, which the second server does not share, so a remote node's log can only
be in it if it came back over ssh. Each run must leave nothing on either server: no
Mininet leftovers, no ssh client of the run, no process the launcher started, no record on
the server, no interface in its root namespace but its veth, and no one but this test holding
the machine lock (other helpers' runs may hold or wait for it).

A host with a CPU limit placed on the server gets its cgroup there and its node process runs
at its share of one core (a busy loop, within 10 %).

Cost: about 4 minutes in the quiet CI run at 698719b, most of it dht8 (its full smoke
scale over VXLAN, Parts I and failover with one peer over ssh tunnels); the SIGTERM and
SIGKILL runs take about 12 s each since they signal mid-transfer (docs/tests.md); the
CPU-limit test about 20 s. Without PR_SET_PDEATHSIG on the runner's ssh processes the SIGKILL test
fails (checked): a remote host's shell ssh survives its runner.
"""

import json
import os
import signal
import subprocess
import time

import pytest

from repronet.cluster.nsserver import NamespaceServer
from repronet.cluster.ssh import REMOTE_DIR, SOCKET_ROOT
from repronet.run import leftovers, namespaces, pids
from repronet.run.results import read_manifest

pytestmark = pytest.mark.root

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = '/usr/bin/python3'
CLEAN = {'intfs': [], 'ovs_bridges': [], 'mininet_shells': [], 'state_file': False}


@pytest.fixture(scope='module')
def server():
    with NamespaceServer() as ns:
        yield ns


def _run(server, script, *args, timeout=900):
    """Run topologies/SCRIPT with the server reachable; return (exit status, output)."""
    env = dict(os.environ, **server.environ())
    proc = subprocess.run([PYTHON, os.path.join(REPO, 'topologies', script)] + list(args),
                          env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def _ours(server):
    """Processes of a cluster run still alive: its ssh clients, launchers, remote shells."""
    found = []
    for pid, argv in sorted(pids.cmdlines().items()):
        cmd = ' '.join(argv)
        if ('ssh' in cmd.split(' ')[0] and server.name in cmd) or \
                'repronet/cluster/launch.py' in cmd:
            found.append((pid, cmd[:120]))
    return found


def _remote_state(server):
    """What the server holds of this machine's runs, and its root namespace's interfaces."""
    out = subprocess.run(server.ssh_argv() + [
        'ls %s 2>/dev/null; echo ---; ls /sys/class/net' % os.path.dirname(REMOTE_DIR)],
        capture_output=True, text=True, timeout=60).stdout
    records, intfs = out.split('---')
    return records.split(), sorted(intfs.split())


def _assert_nothing_left(server):
    deadline = time.monotonic() + 10
    while _ours(server) and time.monotonic() < deadline:    # ssh clients exiting
        time.sleep(0.2)
    assert _ours(server) == []
    assert leftovers.find() == CLEAN
    assert _remote_state(server) == ([], sorted(['lo', server.server_intf]))
    sockets = os.listdir(SOCKET_ROOT) if os.path.isdir(SOCKET_ROOT) else []
    assert [f for f in sockets if not os.path.exists('/proc/' + f.split('-')[0])] == []
    for pid in leftovers.lock_holders(leftovers.LOCK_PATH) - {os.getpid()}:
        # other runs may wait for the lock (/proc/locks lists them); none may be ours
        assert pid not in {p for p, _ in _ours(server)}
        assert namespaces.comm(pid) not in ('ssh', 'sshd'), pid


def _remote_logs(manifest, out):
    """The logs of node processes that ran on another server, as found in the results folder."""
    remote = {h for h, m in manifest['cluster']['placement'].items()
              if not manifest['cluster']['machines'][m]['local']}
    nodes = [n for n in manifest['nodes'] if n['host'] in remote]
    assert nodes, 'no node ran on the second server'
    return {n['name']: sorted(p.name for p in (out / 'logs').glob(n['name'] + '.*'))
            for n in nodes}


@pytest.mark.parametrize('tunnel', ['vxlan', 'ssh'])
def test_smoke_across_two_servers(server, tunnel, tmp_path):
    out = tmp_path / 'run'
    code, text = _run(server, 'smoke.py', '--scale', 'smoke', '--out', str(out),
                      '--machines', 'localhost,' + server.name,
                      '--placement', 'h2=' + server.name, '--tunnel', tunnel)
    assert code == 0, text[-3000:]
    manifest = read_manifest(out)
    cluster = manifest['cluster']
    assert cluster['placement'] == {'h1': 'localhost', 'h2': server.name, 'h3': 'localhost'}
    probe = cluster['machines'][server.name]['probe']
    assert probe['provenance']['kernel']['release'] and probe['capabilities']
    tunnels = manifest['mechanisms']['cluster']['tunnels']
    assert [(t['node1'], t['tunnel']) for t in tunnels] == [('h2', tunnel)]
    logs = _remote_logs(manifest, out)
    for name, files in logs.items():      # iperf3 -s ran on the server; its log is here
        assert name + '.json' in files and name + '.err' in files
        report = json.loads((out / 'logs' / (name + '.json')).read_text())
        assert report['end']['sum_received']['bytes'] > 0
    _assert_nothing_left(server)


# vxlan: the whole smoke scale; ssh tunnels: Parts I and failover with one peer (the
# mechanism, not the concurrency sweep vxlan and the one-machine test already run)
@pytest.mark.parametrize('tunnel, parts', [('vxlan', None), ('ssh', 'I,failover')])
def test_dht8_with_half_its_hosts_on_the_second_server(server, tunnel, parts, tmp_path):
    out = tmp_path / 'run'
    args = ['--scale', 'smoke', '--out', str(out), '--machines', 'localhost,' + server.name,
            '--tunnel', tunnel] + (['--parts', parts, '--peers', '1'] if parts else [])
    code, text = _run(server, 'dht8.py', *args)
    assert code == 0, text[-3000:]
    manifest = read_manifest(out)
    placed = manifest['cluster']['placement']
    assert sorted(placed.values()).count(server.name) == len(placed) // 2
    for name, files in _remote_logs(manifest, out).items():
        assert name + '.jsonl' in files, name
        assert (out / 'logs' / (name + '.jsonl')).stat().st_size > 0, name
    # the remote hosts' linkdelay daemons (0.05 ms links) report their own CPU time
    rows = manifest['link_holds']['daemons']
    remote_cpu = [r['cpu_s'] for r in rows if r['server'] == server.name]
    assert remote_cpu and sum(remote_cpu) > 0, rows
    expected = {'part1.csv', 'failover.csv', 'points.csv'}
    if parts is None:
        expected |= {'part2.csv', 'part3.csv', 'ping.csv', 'capture.csv'}
    assert expected <= {p.name for p in (out / 'tables').iterdir()}
    _assert_nothing_left(server)


def test_unreachable_or_keyless_server_is_refused_before_anything(server, tmp_path):
    bad = tmp_path / 'ssh_config'
    key = tmp_path / 'stranger'
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', str(key)], check=True)
    common = open(server.ssh_config).read().split('\n', 1)[1]
    bad.write_text('Host keyless\n%s  IdentityFile %s\n  IdentitiesOnly yes\n'
                   'Host closed\n%s  Port 2\n' % (
                       common.replace('IdentityFile', '#'), key, common))
    env = dict(os.environ, REPRONET_SSH_CONFIG=str(bad))
    for name, words in (('keyless', 'refuses passwordless ssh'), ('closed', 'unreachable')):
        out = tmp_path / name
        proc = subprocess.run([PYTHON, os.path.join(REPO, 'topologies', 'smoke.py'),
                               '--scale', 'smoke', '--out', str(out),
                               '--machines', 'localhost,' + name], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert words in proc.stderr and proc.stderr.count('\n') == 1, proc.stderr
        assert not out.exists()
    _assert_nothing_left(server)


def _signalled_mid_transfer(server, out, signum):
    """Start smoke with h2 on the server; send signum while iperf3 crosses the tunnel."""
    env = dict(os.environ, **server.environ())
    run = subprocess.Popen([PYTHON, os.path.join(REPO, 'topologies', 'smoke.py'),
                            '--scale', 'smoke', '--duration', '30', '--out', str(out),
                            '--machines', 'localhost,' + server.name,
                            '--placement', 'h2=' + server.name], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # the client (h1, here) opens its log as it starts, after the server on h2 listens;
    # iperf3 -J writes nothing until the transfer ends, so 2 s later it is mid-transfer
    log = out / 'logs' / 'iperf-client-p0.json'
    deadline = time.monotonic() + 300
    while not log.exists():
        assert run.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(2)
    assert run.poll() is None and log.stat().st_size == 0    # still transferring
    run.send_signal(signum)
    return run.wait(timeout=120), env


def test_sigterm_mid_transfer_tears_down_both_servers(server, tmp_path):
    code, _ = _signalled_mid_transfer(server, tmp_path / 'run', signal.SIGTERM)
    assert code == 128 + signal.SIGTERM
    assert read_manifest(tmp_path / 'run')['status'] == 'interrupted'
    _assert_nothing_left(server)


def test_killed_run_leaves_nothing_running_and_clean_removes_the_rest(server, tmp_path):
    code, env = _signalled_mid_transfer(server, tmp_path / 'run', signal.SIGKILL)
    assert code == -signal.SIGKILL
    deadline = time.monotonic() + 20
    while _ours(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ours(server) == []          # every ssh of the run died with it, and so did
    records, _ = _remote_state(server)  # what they carried; its record is still there
    assert records == [os.path.basename(REMOTE_DIR)]
    clean = subprocess.run([PYTHON, '-m', 'repronet', 'clean', '--machines',
                            'localhost,' + server.name], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stderr
    _assert_nothing_left(server)


def _namespace_server_gone(name, ident):
    """Nothing of namespace server name is left: namespace, veth, keys, processes in it."""
    from repronet.cluster import nsserver
    links = subprocess.run(['ip', '-o', 'link'], capture_output=True, text=True).stdout
    return (not os.path.exists('/run/netns/' + name) and 'rns%sa' % ident not in links
            and not os.path.exists(os.path.join(nsserver.KEY_ROOT, ident)))


def test_namespace_server_goes_on_sigterm_and_after_sigkill():
    from repronet.cluster import nsserver
    for signum in (signal.SIGTERM, signal.SIGKILL):
        proc = subprocess.Popen([PYTHON, '-m', 'repronet.cluster.nsserver'], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        name = proc.stdout.readline().split()[2]        # 'namespace server NAME at ...'
        ident = name[len(nsserver.PREFIX):]
        inode = os.stat('/run/netns/' + name).st_ino
        proc.send_signal(signum)
        proc.wait(timeout=60)
        if signum == signal.SIGKILL:        # its sshd lives on until remove_stale()
            assert namespaces.pids_by_netns().get(inode)
            assert nsserver.remove_stale() == [name]
        assert _namespace_server_gone(name, ident)
        assert not namespaces.pids_by_netns().get(inode)


@pytest.mark.timeout(300)
def test_a_cpu_limited_host_on_the_second_server_gets_its_share(server, monkeypatch):
    """h1 (cores=0.2) on the namespace server: its cgroup is made there, a node process
    started through launch.py runs in it at 0.2 of one core (within 10 %), and the group is
    gone after stop. The server shares this kernel, so its cgroup files are visible here."""
    from repronet.cluster import placement
    from repronet.cluster.network import ClusterNetwork
    from repronet.emu import capabilities
    from repronet.run import provenance
    from tests.test_cpulimit_root import BUSY, _topo
    caps = capabilities.probe()
    if not caps.cgroup_cpu:
        pytest.skip(capabilities.explain('cgroup_cpu', caps))

    monkeypatch.setenv('REPRONET_SSH_CONFIG', server.ssh_config)
    machines, where = placement.precheck(_topo(cores=0.2), ['localhost', server.name],
                                         'h1=' + server.name, provenance.collect(REPO))
    net = ClusterNetwork(_topo(cores=0.2), machines, where, 'vxlan', switch='lxbr', caps=caps)
    group = None
    try:
        net.start()
        record = net.mechanisms()
        limit = record['cluster']['cpu_limits']['h1']
        assert (limit['server'], limit['cores']) == (server.name, 0.2), limit
        assert record['cpu_limits'] is None             # this machine limits none of its own
        group = limit['path']
        assert os.path.isdir(group) and '/from-' in group
        proc = net.net.get('h1').popen([PYTHON, '-c', BUSY, '3'], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        report = json.loads(out.strip().splitlines()[-1])
        print('h1 on %s at cores=0.2: %.4f of one core' % (server.name, report['fraction']))
        assert os.path.basename(group) in report['cgroup']
        assert 0.9 * 0.2 <= report['fraction'] <= 1.1 * 0.2
    finally:
        net.stop()
    assert group and not os.path.exists(group)
    held = net.cpu_idle_record()['servers'][server.name]    # the other server's request
    assert held['mode'] == 'poll' and held['in_force_us'] == 0, held
    _assert_nothing_left(server)
