"""A CPU-limited host on another server: the server-side pieces, on this machine's real cgroups.

``agent cgroup create`` makes the group with the limit and moves the host's shell in, and
records it; ``launch.py --cgroup`` puts a node process in it before exec; ``agent clear``
(teardown, and after a crash) kills what is left in it and removes it. No Mininet and no ssh:
the agent and the launcher run here as they run on a server. The whole path across a
namespace server is tests/test_cluster_root.py's CPU-limit test.
"""

import json
import os
import subprocess
import sys

import pytest

from repronet.cluster import agent
from repronet.cluster.ssh import LAUNCH
from repronet.emu import capabilities

pytestmark = pytest.mark.root


@pytest.fixture
def name():
    if not capabilities.probe().cgroup_cpu:
        pytest.skip('this machine has no cgroup cpu controller')
    group = 'from-test-%d' % os.getpid()
    yield group
    agent._remove_groups([group])


def test_agent_makes_records_and_clears_a_limited_group(tmp_path, name):
    shell = subprocess.Popen(['sleep', '300'])
    try:
        made = agent.cgroup(str(tmp_path), 'create', name, '2000', '10000', str(shell.pid))
        assert made.get('procs'), made
        assert name in open('/proc/%d/cgroup' % shell.pid).read()
        group = agent._group(name)
        assert group.limit() == (2000, 10000) and group.pids() == [shell.pid]
        records = [json.loads(line) for line in open(tmp_path / 'state.jsonl')]
        assert {'cgroup': name} in records
        answer = agent.clear(str(tmp_path))          # what teardown and a crash's clean do
        assert 'cgroup %s' % group.path in answer['done']
        assert shell.wait(timeout=10) == -9          # what was still in the group went
        assert not os.path.exists(group.path) and not tmp_path.exists()
    finally:
        if shell.poll() is None:
            shell.kill()
        shell.wait()


def test_launch_puts_the_process_in_the_group_before_it_execs(tmp_path, name):
    holder = subprocess.Popen(['sleep', '300'])
    try:
        made = agent.cgroup(str(tmp_path), 'create', name, '5000', '10000', str(holder.pid))
        out = subprocess.run([sys.executable, LAUNCH, '--dir', str(tmp_path), '--token', 't1',
                              '--cgroup', made['procs'], '--', 'cat', '/proc/self/cgroup'],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert '/%s\n' % name in out.stdout, out.stdout
        bad = subprocess.run([sys.executable, LAUNCH, '--dir', str(tmp_path), '--token', 't2',
                              '--cgroup', str(tmp_path / 'nope'), '--', 'true'],
                             capture_output=True, text=True, timeout=30)
        assert bad.returncode == 126 and 'cannot join' in bad.stderr
    finally:
        holder.kill()
        holder.wait()
