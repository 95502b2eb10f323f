"""The cluster backend's pieces that need no root and no second server.

Placement and the checks of --machines/--placement/--tunnel (one sentence each, before
anything is built), the precheck's version comparison on real probe records, the words ssh
failures are turned into, and ``launch.py`` itself run as a real process on this machine
(no ssh): it reports its child's PID, hands back the exit status, ends the child's whole
group when its stderr's reader goes away, and removes its pid file before reaping.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from repronet.cluster import placement
from repronet.cluster.ssh import LAUNCH, ClusterError, explain_ssh_failure, spawn
from repronet.run import options, provenance
from repronet.run.runner import Experiment

HOSTS = ['h1', 'h2', 'h3', 'h4', 'h5']


def test_block_placement_cuts_hosts_into_contiguous_blocks():
    where = placement.place(HOSTS, ['localhost', 'B'], 'block')
    assert where == {'h1': 'localhost', 'h2': 'localhost', 'h3': 'localhost',
                     'h4': 'B', 'h5': 'B'}


def test_roundrobin_and_explicit_placement():
    assert placement.place(HOSTS, ['localhost', 'B'], 'roundrobin') == {
        'h1': 'localhost', 'h2': 'B', 'h3': 'localhost', 'h4': 'B', 'h5': 'localhost'}
    where = placement.place(HOSTS, ['localhost', 'B'], 'h2=B,h5=B')
    assert [h for h, m in where.items() if m == 'B'] == ['h2', 'h5']
    with pytest.raises(ClusterError, match='does not have'):
        placement.place(HOSTS, ['localhost', 'B'], 'h9=B')


@pytest.mark.parametrize('machines, place, words', [
    ('B,C', 'block', 'must name this machine once'),
    ('localhost', 'block', 'with one server is a normal run'),
    ('localhost,,B', 'block', 'empty name'),
    ('localhost,B,B', 'block', 'names a server twice'),
    ('localhost,B', 'h1', 'block, roundrobin or HOST=SERVER'),
    ('localhost,B', 'h1=C', 'which --machines does not list'),
])
def test_bad_machine_lists_and_placements_are_one_sentence(machines, place, words):
    with pytest.raises(ClusterError, match=words):
        placement.check_syntax(machines, place)


class _Tiny(Experiment):
    name = 'tiny'
    backends = ('emu', 'sim')


@pytest.mark.parametrize('argv, words', [
    (['--placement', 'block'], 'give --machines too'),
    (['--tunnel', 'ssh'], 'give --machines too'),
    (['--machines', 'localhost,B', '--backend', 'sim'], 'a simulated run has none'),
    (['--machines', 'B,C'], 'must name this machine once'),
])
def test_shared_options_refuse_before_anything_is_built(argv, words):
    params = options.parse(_Tiny(), argv)
    with pytest.raises(options.UsageError, match=words):
        options.check_shared(params)


def test_machines_fill_placement_and_tunnel_defaults():
    params = options.parse(_Tiny(), ['--machines', 'localhost,B'])
    options.check_shared(params)
    assert (params.placement, params.tunnel) == ('block', 'vxlan')


class _Probed:
    """A server as the precheck sees it after its probe (the probe record is real)."""

    def __init__(self, probe):
        self.name, self.probe = 'B', probe


def test_precheck_refuses_another_mininet_or_revision_with_what_to_fix():
    here = provenance.collect(os.getcwd())
    same = {'provenance': json.loads(json.dumps(here)), 'mnexec': '/usr/bin/mnexec'}
    placement._compare(_Probed(same), here)          # the same: accepted
    other = json.loads(json.dumps(same))
    other['provenance']['versions']['mininet'] = '2.2.2'
    with pytest.raises(ClusterError, match='runs Mininet 2.2.2.*install the same version'):
        placement._compare(_Probed(other), here)
    other = json.loads(json.dumps(same))
    other['provenance']['git']['revision'] = 'f' * 40
    with pytest.raises(ClusterError, match='check out the same commit'):
        placement._compare(_Probed(other), here)


@pytest.mark.parametrize('stderr, words', [
    ('root@10.9.9.9: Permission denied (publickey).', 'refuses passwordless ssh'),
    ('ssh: connect to host 10.9.9.9 port 22: Connection refused', 'is unreachable'),
    ('ssh: Could not resolve hostname nohost: Name or service not known', 'is unreachable'),
    ('Host key verification failed.', 'host key is not known'),
])
def test_ssh_failures_become_what_to_fix(stderr, words):
    assert words in explain_ssh_failure('B', stderr)


def _launch(tmp_path, *argv, stderr=subprocess.PIPE):
    return subprocess.Popen([sys.executable, LAUNCH, '--dir', str(tmp_path), '--token', 't1',
                             '--'] + list(argv), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=stderr)


def _wait_for(path, timeout=10):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, '%s never appeared' % path
        time.sleep(0.02)
    time.sleep(0.05)
    with open(path) as f:
        return int(f.read())


def _gone(pid, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open('/proc/%d/stat' % pid) as f:
                if f.read().rsplit(')', 1)[1].split()[0] == 'Z':
                    return True
        except OSError:
            return True
        time.sleep(0.02)
    return False


def test_launch_hands_back_the_status_and_removes_its_pid_file(tmp_path):
    proc = _launch(tmp_path, 'sh', '-c', 'read line; echo "got $line"; exit 7')
    pid = _wait_for(tmp_path / 't1.pid')
    out, _ = proc.communicate(b'go\n', timeout=10)
    assert (proc.returncode, out) == (7, b'got go\n')
    assert not (tmp_path / 't1.pid').exists()
    state = [json.loads(line) for line in (tmp_path / 'state.jsonl').read_text().splitlines()]
    assert state[0]['pid'][0] == pid and state[0]['token'] == 't1'


def test_launch_ends_the_whole_group_when_the_runner_side_goes_away(tmp_path):
    # The child starts a grandchild in its group; both must go once stderr's reader is gone.
    proc = _launch(tmp_path, 'sh', '-c', 'sleep 300 & echo $!; wait')
    pid = _wait_for(tmp_path / 't1.pid')
    grandchild = int(proc.stdout.readline())
    assert os.getpgid(grandchild) == pid        # the child leads a group of its own
    proc.stderr.close()                          # what sshd does when the connection drops
    assert _gone(pid) and _gone(grandchild)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM


def test_launch_sweeps_the_group_when_the_child_exits(tmp_path):
    proc = _launch(tmp_path, 'sh', '-c', 'sleep 300 & echo $!')
    grandchild = int(proc.stdout.readline())
    assert proc.wait(timeout=10) == 0
    assert _gone(grandchild)


def test_agent_reads_the_cpu_seconds_of_a_launched_process_and_none_once_it_is_gone(tmp_path):
    """What RemotePopen.cpu_seconds asks a server for a remote linkdelay daemon: the launched
    process's own CPU time (its pid file), not its ssh client's."""
    from repronet.cluster import agent
    proc = _launch(tmp_path, 'sh', '-c', 'i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; '
                   'echo spun; read line')
    _wait_for(tmp_path / 't1.pid')
    assert proc.stdout.readline() == b'spun\n'
    answer = agent.cpu(str(tmp_path), ['t1', 'nobody'])
    assert answer['nobody'] is None and answer['t1'] > 0.05, answer
    proc.communicate(b'go\n', timeout=10)
    assert agent.cpu(str(tmp_path), ['t1']) == {'t1': None}


def test_a_cpu_limit_on_another_server_is_checked_against_that_server():
    """cores= and cpu= are sized by the server's own CPU count; a server whose probe found
    no cgroup cpu controller, or a limit above its cores, is refused in one sentence."""
    from repronet.cluster.network import remote_limits
    from repronet.cluster.ssh import Machine
    from tests.test_cpulimit_root import _topo      # h1 with the limit, h2 without
    here = provenance.collect(os.getcwd())
    probe = {'provenance': json.loads(json.dumps(here)), 'capabilities': {'cgroup_cpu': True}}
    probe['provenance']['host']['cpus'] = 4
    server = _Probed(probe)
    placement._needs(server, _topo(cores=3), ['h1', 'h2'])       # 3 of its 4 cores
    with pytest.raises(ClusterError, match=r"^host h1: cores=5 asks for 5 core, but .* "
                                           r"this machine's 4 cores \(on server B\)$"):
        placement._needs(server, _topo(cores=5), ['h1'])
    placement._needs(server, _topo(cores=5), ['h2'])             # h1 stays here
    probe['capabilities']['cgroup_cpu'] = False
    with pytest.raises(ClusterError, match='server B has no cgroup cpu controller'):
        placement._needs(server, _topo(cpu=0.5), ['h1'])
    local = Machine('localhost')
    server.local = False
    limits = remote_limits(_topo(cpu=0.5), {'localhost': local, 'B': server},
                           {'h1': 'B', 'h2': 'localhost'})
    assert list(limits) == ['h1'] and limits['h1'].cores == 2.0     # half of ITS 4 cores
    assert remote_limits(_topo(cpu=0.5), {'localhost': local, 'B': server},
                         {'h1': 'localhost', 'h2': 'B'}) == {}


def test_a_spawned_ssh_obeys_sighup_even_under_nohup():
    """Mininet's terminate ends a host's shell (ssh -tt, for a remote host) with SIGHUP; a
    runner started under nohup ignores SIGHUP, and without the reset its ssh inherits
    that and teardown waits forever (seen in a test run started with nohup)."""
    code = ('import signal, subprocess, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN); '
            'from repronet.cluster.ssh import spawn; '
            'p = spawn(["grep", "SigIgn", "/proc/self/status"], stdout=subprocess.PIPE); '
            'print(p.communicate()[0].decode().split()[1])')
    ignored = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert ignored.returncode == 0, ignored.stderr
    assert not int(ignored.stdout, 16) & (1 << (signal.SIGHUP - 1))
    child = spawn(['sleep', '30'])          # and the signal ends it
    child.send_signal(signal.SIGHUP)
    assert child.wait(timeout=10) == -signal.SIGHUP
