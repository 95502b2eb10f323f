"""Per-host CPU limits without a kernel: spec, conversion, quota arithmetic, and the cgroup
files written for v2 and v1 into a plain directory standing in for the hierarchy's root."""

import dataclasses
import os
import subprocess

import pytest
from mininet.topo import Topo

from repronet.emu import capabilities, cpulimit, cpulimit_cgroups, network
from repronet.emu.cpulimit import CpuLimitError, host_limit, quota_and_period
from repronet.emu.cpulimit_cgroups import Group


def caps(mechanism):
    """Capabilities of this machine with cgroup_cpu set to `mechanism` (None: missing)."""
    return dataclasses.replace(capabilities.probe(), cgroup_cpu=mechanism is not None,
                               cgroup_cpu_mechanism=mechanism)


def topo(**hosts):
    """h1.. on one switch; hosts maps name -> params."""
    class T(Topo):
        def build(self):
            s1 = self.addSwitch('s1')
            for name, params in sorted(hosts.items()):
                self.addLink(self.addHost(name, **params), s1)
    return T()


def fake_root(tmp_path, mechanism, subtree=''):
    """A directory laid out like the root of a cgroup hierarchy with the cpu controller."""
    root = tmp_path / mechanism
    root.mkdir()
    if mechanism == 'v2':
        (root / 'cgroup.controllers').write_text('cpuset cpu io memory pids\n')
        (root / 'cgroup.subtree_control').write_text(subtree)
    return str(root)


@pytest.mark.parametrize('cores, expected', [
    (0.2, (2000, 10000)),       # the default 10 ms period
    (0.5, (5000, 10000)),
    (0.3, (3000, 10000)),       # no float residue (0.3 * 10000 = 3000.0000000000005)
    (1.5, (15000, 10000)),      # more than one core: quota above the period
    (0.1, (1000, 10000)),       # exactly the 1 ms minimum
    (0.05, (1000, 20000)),      # period grown so the quota stays 1 ms
    (0.07, (1000, 14286)),
    (0.001, (1000, 1000000)),   # the smallest limit: 1 ms per second
])
def test_quota_and_period(cores, expected):
    quota, period = quota_and_period(cores)
    assert (quota, period) == expected
    assert abs(quota / period - cores) <= 0.0001 * cores + 1e-9


def test_quota_below_the_smallest_limit_is_refused():
    with pytest.raises(CpuLimitError, match='below the smallest CFS limit'):
        quota_and_period(0.0005)


def test_cores_are_of_one_core_and_cpu_is_of_the_whole_machine():
    limit = host_limit('s1', {'cores': 0.2}, cpu_count=4)
    assert (limit.cores, limit.quota_us, limit.period_us, limit.asked) == \
        (0.2, 2000, 10000, 'cores=0.2')
    limit = host_limit('s1', {'cpu': 0.25}, cpu_count=4)     # Mininet: 1/4 of 4 CPUs
    assert (limit.cores, limit.quota_us, limit.asked) == (1.0, 10000, 'cpu=0.25')
    assert host_limit('s1', {'cpu': 0.1}, cpu_count=2).cores == pytest.approx(0.2)
    assert host_limit('s1', {'cores': 2}, cpu_count=2).quota_us == 20000
    assert host_limit('s1', {'cores': 0.2, 'period_us': 100000}, 2).quota_us == 20000


@pytest.mark.parametrize('params', [{}, {'cpu': None}, {'cpu': -1}, {'ip': '10.0.0.9/8'}])
def test_no_limit(params):
    assert host_limit('h1', params, cpu_count=2) is None


@pytest.mark.parametrize('params, words', [
    ({'cores': 0.2, 'cpu': 0.1}, 'not both'),
    ({'cores': [0, 1]}, 'not a list of CPUs'),      # Mininet's cpuset meaning of cores=
    ({'cores': True}, 'must be a number of cores'),
    ({'cores': '0.5'}, 'must be a number of cores'),
    ({'cores': float('nan')}, 'must be a number of cores'),
    ({'cores': 0}, 'a limit must be from'),
    ({'cores': -0.5}, 'a limit must be from'),
    ({'cores': 3}, "this machine's 2 cores"),
    ({'cpu': 0}, 'fraction of the whole machine'),
    ({'cpu': 1.5}, 'fraction of the whole machine'),
    ({'cpu': -0.5}, 'fraction of the whole machine'),
    ({'cpu': 0.5, 'sched': 'rt'}, 'CFS bandwidth only'),
    ({'cores': 0.5, 'period_us': 500}, 'period_us=500'),
    ({'cores': 0.5, 'period_us': 0.01}, 'period_us=0.01'),
])
def test_bad_limits_are_one_sentence_naming_the_host(params, words):
    with pytest.raises(CpuLimitError) as err:
        host_limit('s7', params, cpu_count=2)
    text = str(err.value)
    assert text.startswith('host s7: ') and words in text and '\n' not in text


def test_plan_limits_only_the_hosts_that_ask(tmp_path):
    root = fake_root(tmp_path, 'v2')
    limits = cpulimit.plan(topo(h1={'cores': 0.2}, h2={}, h3={'cpu': 0.25}), caps('v2'),
                           cpu_count=2, roots={'v2': root})
    assert limits.mechanism == 'v2' and limits.root == root
    assert limits.record() == {
        'mechanism': 'v2', 'period_us': 10000, 'hosts': {'h1': 0.2, 'h3': 0.5},
        'groups': {'h1': {'path': os.path.join(root, 'repronet', 'h1'), 'quota_us': 2000,
                          'period_us': 10000, 'asked': 'cores=0.2'},
                   'h3': {'path': os.path.join(root, 'repronet', 'h3'), 'quota_us': 5000,
                          'period_us': 10000, 'asked': 'cpu=0.25'}}}
    grown = cpulimit.plan(topo(h1={'cores': 0.2}, h2={'cores': 0.05}), caps('v1'),
                          cpu_count=2, roots={'v1': root}).record()
    assert grown['period_us'] is None       # hosts differ: each group says its own
    assert grown['groups']['h2']['period_us'] == 20000


def test_plan_without_limits_needs_no_capability():
    assert cpulimit.plan(topo(h1={}, h2={'cpu': -1}), caps(None), cpu_count=2,
                         roots={}) is None


def test_plan_without_the_capability_fails_with_the_explain_sentence():
    missing = caps(None)
    with pytest.raises(CpuLimitError) as err:
        cpulimit.plan(topo(h1={'cores': 0.2}), missing, cpu_count=2)
    assert str(err.value) == capabilities.explain('cgroup_cpu', missing)
    with pytest.raises(CpuLimitError, match='^host h1: cores='):     # the spec comes first
        cpulimit.plan(topo(h1={'cores': 'fast'}), missing, cpu_count=2)


def test_network_refuses_before_building_anything():
    with pytest.raises(network.NetworkError) as err:
        network.Network(topo(h1={'cores': 0.2}), 'lxbr', caps=caps(None))
    assert str(err.value) == capabilities.explain('cgroup_cpu', caps(None))
    with pytest.raises(network.NetworkError, match='not both'):
        network.Network(topo(h1={'cores': 0.2, 'cpu': 0.2}), 'lxbr', caps=caps('v1'))
    plain = network.Network(topo(h1={}, h2={}), 'lxbr', caps=caps(None))
    assert plain.cpu_limits is None and plain.mechanisms()['cpu_limits'] is None
    assert plain.mechanisms()['hosts'] == 'Host'


def test_v2_group_enables_cpu_down_the_chain_and_writes_cpu_max(tmp_path):
    root = fake_root(tmp_path, 'v2')
    group = Group('v2', root, 'h1')
    group.create(2000, 10000)
    group.add(4242)
    assert open(os.path.join(root, 'cgroup.subtree_control')).read() == '+cpu'
    assert open(os.path.join(root, 'repronet', 'cgroup.subtree_control')).read() == '+cpu'
    assert open(os.path.join(root, 'repronet', 'h1', 'cpu.max')).read() == '2000 10000'
    assert open(os.path.join(root, 'repronet', 'h1', 'cgroup.procs')).read() == '4242'
    assert group.limit() == (2000, 10000)
    assert not os.path.exists(os.path.join(root, 'repronet', 'h1', 'cpu.cfs_quota_us'))


def test_v2_controller_already_enabled_is_left_alone(tmp_path):
    root = fake_root(tmp_path, 'v2', subtree='cpuset cpu io memory\n')
    Group('v2', root, 'h1').create(5000, 10000)
    assert open(os.path.join(root, 'cgroup.subtree_control')).read() == \
        'cpuset cpu io memory\n'


def test_v1_group_writes_period_and_quota(tmp_path):
    root = fake_root(tmp_path, 'v1')
    group = Group('v1', root, 'h1')
    group.create(1000, 20000)
    path = os.path.join(root, 'repronet', 'h1')
    assert open(os.path.join(path, 'cpu.cfs_period_us')).read() == '20000'
    assert open(os.path.join(path, 'cpu.cfs_quota_us')).read() == '1000'
    assert group.limit() == (1000, 20000)
    assert not os.path.exists(os.path.join(path, 'cpu.max'))
    assert not os.path.exists(os.path.join(root, 'repronet', 'cgroup.subtree_control'))


def test_an_existing_group_is_refused_with_what_to_do(tmp_path):
    root = fake_root(tmp_path, 'v1')
    Group('v1', root, 'h1').create(2000, 10000)
    with pytest.raises(cpulimit_cgroups.CgroupError, match='repronet clean'):
        Group('v1', root, 'h1').create(2000, 10000)


def test_joiner_writes_zero_in_the_child_then_runs_the_callers_hook(tmp_path):
    root = fake_root(tmp_path, 'v1')
    group = Group('v1', root, 'h1')
    group.create(2000, 10000)
    open(group.procs, 'w').close()
    marker = tmp_path / 'hook-ran'
    subprocess.run(['true'], check=True,
                   preexec_fn=group.joiner(lambda: marker.write_text('yes')))
    assert open(group.procs).read() == '0' and marker.read_text() == 'yes'


MOUNTINFO_V1 = '''\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / {unified} rw,relatime - cgroup2 cgroup2 rw
'''


def test_find_picks_the_hierarchy_with_the_cpu_controller(tmp_path):
    unified = tmp_path / 'unified'          # this machine: a cgroup2 without cpu
    unified.mkdir()
    (unified / 'cgroup.controllers').write_text('hugetlb\n')
    assert cpulimit_cgroups.find(MOUNTINFO_V1.format(unified=unified)) == \
        {'v1': '/sys/fs/cgroup/cpu'}
    (unified / 'cgroup.controllers').write_text('cpuset cpu io\n')     # a v2-only kernel
    v2_only = '29 23 0:26 / %s rw shared:4 - cgroup2 cgroup2 rw,nsdelegate\n' % unified
    assert cpulimit_cgroups.find(v2_only) == {'v2': str(unified)}
    comounted = ('26 25 0:23 / /sys/fs/cgroup/cpu\\040acct rw shared:9 - cgroup cgroup '
                 'rw,cpu,cpuacct\n')
    assert cpulimit_cgroups.find(comounted) == {'v1': '/sys/fs/cgroup/cpu acct'}
    assert cpulimit_cgroups.find('') == {}


def test_find_on_this_machine_agrees_with_the_probe():
    found = cpulimit_cgroups.find()
    mechanism = capabilities.probe().cgroup_cpu_mechanism
    assert mechanism is None or mechanism in found


@pytest.fixture
def plain_rmdir(monkeypatch):
    """rmdir that also drops a plain directory's files (cgroupfs removes them itself)."""
    def rmdir(path):
        for name in os.listdir(path):
            if os.path.isfile(os.path.join(path, name)):
                os.unlink(os.path.join(path, name))
        os.rmdir(path)
    monkeypatch.setattr(cpulimit_cgroups, '_rmdir', rmdir)


def test_remove_stale_kills_and_removes_only_groups_under_repronet(tmp_path, plain_rmdir):
    root = fake_root(tmp_path, 'v1')
    for name in ('h1', 'h2'):
        Group('v1', root, name).create(2000, 10000)
    os.mkdir(os.path.join(root, 'repronet', 'h2', 'nested'))
    os.mkdir(os.path.join(root, 'someone-else'))
    ours = subprocess.Popen(['sleep', '60'])
    theirs = subprocess.Popen(['sleep', '60'])
    try:
        open(os.path.join(root, 'repronet', 'h1', 'cgroup.procs'), 'w').write(
            '%d\n' % ours.pid)
        open(os.path.join(root, 'someone-else', 'cgroup.procs'), 'w').write(
            '%d\n' % theirs.pid)
        done, failed = cpulimit_cgroups.remove_stale({'v1': root})
        assert ours.wait(timeout=10) == -9
        assert theirs.poll() is None
    finally:
        for proc in (ours, theirs):
            proc.kill()
            proc.wait()
    top = os.path.join(root, 'repronet')
    assert failed == []
    assert done == ['process %d in cgroup %s' % (ours.pid, os.path.join(top, 'h1')),
                    'cgroup %s (v1)' % os.path.join(top, 'h1'),
                    'cgroup %s (v1)' % os.path.join(top, 'h2', 'nested'),
                    'cgroup %s (v1)' % os.path.join(top, 'h2'),
                    'cgroup %s (v1)' % top]
    assert sorted(os.listdir(root)) == ['someone-else']
    assert cpulimit_cgroups.remove_stale({'v1': root}) == ([], [])


def test_limits_remove_all_removes_groups_and_parent(tmp_path, plain_rmdir):
    root = fake_root(tmp_path, 'v2')
    limits = cpulimit.plan(topo(h1={'cores': 0.2}, h2={'cores': 0.5}), caps('v2'),
                           cpu_count=2, roots={'v2': root})
    limits.group('h1').create(2000, 10000)          # h2 never made: nothing to remove
    assert limits.remove_all() == []
    assert not os.path.exists(os.path.join(root, 'repronet'))
    assert limits.remove_all() == []                # idempotent


@pytest.mark.parametrize('mechanism', [None, 'v1'])
def test_explain_cgroup_cpu_is_one_sentence(mechanism, monkeypatch):
    roots = {} if mechanism is None else {'v1': '/sys/fs/cgroup/cpu'}
    monkeypatch.setattr(cpulimit_cgroups, 'find', lambda mountinfo=None: roots)
    text = capabilities.explain('cgroup_cpu', caps(None))
    assert text.endswith('.') and '\n' not in text and 'cores=' in text
    assert ('/sys/fs/cgroup/cpu (cgroup v1)' in text) == (mechanism == 'v1')


def test_report_names_the_mechanism():
    text = capabilities.report(caps('v2'))
    assert 'cgroup_cpu          yes (cgroup v2)' in text


def test_capability_dict_keeps_cgroup_cpu_and_adds_the_mechanism():
    data = capabilities.probe().as_dict()
    assert data['cgroup_cpu'] == (data['cgroup_cpu_mechanism'] is not None)
    assert data['cgroup_cpu_mechanism'] in (None, 'v1', 'v2')
