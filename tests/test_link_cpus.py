"""CPUs set apart for the link delay daemons (``--link-cpus``, repronet.emu.linkcpus; issue 15).

No root needed: the split, its refusals, moving this process's threads and its children
(affinity of one's own processes needs no privilege), the CPU verdict over the hosts' CPUs,
and the machine line. ``test_link_cpus_root.py`` checks a real network's daemons and hosts.
Checked able to fail: with ``confine()`` moving only the calling thread (``sched_setaffinity(0)``
instead of every task) the thread test fails; with the sampler judging the whole machine in
spite of ``cpus`` the monitor test reads 0.5 instead of 1.0.
"""

import os
import shutil
import subprocess
import threading
import time

import pytest

from analysis import machine
from repronet.emu import linkcpus
from repronet.run import cpu, cpu_span, options
from tests.test_links_option import _Exp

MS = 1_000_000
TWO = len(os.sched_getaffinity(0)) >= 2


def test_the_last_cpus_go_to_the_daemons_and_the_rest_to_the_hosts():
    split = linkcpus.LinkCpus(2, usable=[0, 1, 2, 5])
    assert (split.daemons, split.rest, split.active) == ([2, 5], [0, 1], True)
    assert split.record()['daemons'] == '2,5' and split.record()['rest'] == '0-1'
    none = linkcpus.LinkCpus(0, usable=[0, 1])
    assert (none.daemons, none.rest, none.active) == ([], [0, 1], False)
    assert none.record()['reserved'] == 0
    assert linkcpus.ranges([0, 1, 2, 5, 7, 8]) == '0-2,5,7-8'


@pytest.mark.parametrize('count, words', [
    (2, 'leaves no CPU for the hosts: this run may use 2 CPU(s) (0-1), so ask for at most 1'),
    (-1, 'whole number of CPUs, 0 or more')])
def test_a_split_that_leaves_the_hosts_nothing_is_refused(count, words):
    with pytest.raises(linkcpus.LinkCpuError) as info:
        linkcpus.LinkCpus(count, usable=[0, 1])
    assert words in str(info.value)


def _allowed(tid):
    with open(f'/proc/self/task/{tid}/status') as f:
        line = next(x for x in f if x.startswith('Cpus_allowed_list'))
    return line.split(':')[1].strip()


@pytest.mark.skipif(not TWO, reason='needs two CPUs to split')
def test_confine_moves_every_thread_and_children_place_moves_a_daemon_release_undoes():
    before = os.sched_getaffinity(0)
    split = linkcpus.LinkCpus(1)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    child = daemon = None
    try:
        split.confine()
        rest = linkcpus.ranges(split.rest)
        assert _allowed(other.native_id) == rest and _allowed(threading.get_native_id()) == rest
        child = subprocess.Popen(['sleep', '30'])           # a host's process: inherits
        assert sorted(os.sched_getaffinity(child.pid)) == split.rest
        daemon = subprocess.Popen(['sleep', '30'])
        split.place('h2', daemon.pid)
        assert sorted(os.sched_getaffinity(daemon.pid)) == split.daemons
        assert split.record()['placed'] == {'h2': linkcpus.ranges(split.daemons)}
    finally:
        split.release()
        stop.set()
        other.join()
        for proc in (child, daemon):
            if proc is not None:
                proc.kill()
                proc.wait()
    assert os.sched_getaffinity(0) == before
    split.release()                         # idempotent
    assert os.sched_getaffinity(0) == before


def test_the_flag_parses_and_is_refused_in_one_sentence_where_it_cannot_work():
    assert options.parse(_Exp(), []).link_cpus is None
    assert options.parse(_Exp(), ['--link-cpus', '1']).link_cpus == 1
    usable = len(os.sched_getaffinity(0))
    for argv, words in [
            (['--link-cpus', '-1'], '0 or more'),
            (['--link-cpus', str(usable)], 'leaves no CPU for the hosts'),
            (['--link-cpus', '1', '--links', 'netem'], '--links netem has none'),
            (['--link-cpus', '1', '--backend', 'sim'], 'a simulated run has none')]:
        with pytest.raises(options.UsageError) as info:
            options.check_shared(options.parse(_Exp(), argv))
        assert words in str(info.value), argv


def test_the_timed_parts_verdict_is_over_the_hosts_cpus():
    """CPU 0 (the hosts') full, CPU 1 (the daemons') idle over 20 ms: bound by the hosts' CPU,
    not by the machine's average of 0.5."""
    span = cpu_span.delta({'ns': 0, 'usage': [0, 0], 'stat': (0, 0, 0)},
                          {'ns': 20 * MS, 'usage': [20 * MS, 0], 'stat': (4, 2, 0)})
    assert cpu_span.verdict([span], cpu.THRESHOLD)['busy'] == 0.5
    record = cpu_span.verdict([span], cpu.THRESHOLD, [0])
    assert (record['busy'], record['bound'], record['judged_cpus']) == (1.0, True, [0])


def test_the_sampler_judges_the_run_by_the_hosts_cpus(monkeypatch):
    """Counters where cpu0 is always busy and cpu1 always idle, through the sampling loop."""
    ticks = {'n': 0}

    def fake_stat(path='/proc/stat'):
        ticks['n'] += 1
        n = ticks['n'] * 100
        return {'cpu': (2 * n, n, 0), 'cpu0': (n, 0, 0), 'cpu1': (n, n, 0)}

    monkeypatch.setattr(cpu, 'read_stat', fake_stat)
    hosts = cpu.CpuMonitor(interval=0.02, cpus=[0]).start()
    whole = cpu.CpuMonitor(interval=0.02).start()
    time.sleep(0.2)
    hosts.stop()
    whole.stop()
    assert {s['busy'] for s in hosts.samples} == {1.0}
    assert {s['busy'] for s in whole.samples} == {0.5}
    assert hosts.summary()['judged_cpus'] == [0] and hosts.summary()['saturated']
    assert whole.summary()['judged_cpus'] is None and not whole.summary()['saturated']
    with pytest.raises(ValueError, match='no CPU'):
        cpu.CpuMonitor(interval=0.02, cpus=[7]).start()


def test_the_machine_line_says_which_cpus_the_daemons_had():
    manifest = {'provenance': {'host': {'cpus': 2, 'cpus_usable': 2, 'memory_bytes': 2 ** 34}},
                'mechanisms': {'link_cpus': linkcpus.LinkCpus(1, usable=[0, 1]).record()}}
    assert machine.describe(manifest).startswith(
        '2 CPUs (CPU 1 set apart for the link delay daemons, the hosts on CPU 0), 16.0 GiB')
    manifest['mechanisms']['link_cpus'] = linkcpus.LinkCpus(0, usable=[0, 1]).record()
    assert machine.describe(manifest).startswith('2 CPUs, 16.0 GiB')


def test_the_machine_line_survives_odd_records():
    base = {'provenance': {'host': {'cpus': 2, 'memory_bytes': 2 ** 34}}}
    for mechanisms in ([1], 'x', {'link_cpus': [2]}, {'link_cpus': {'reserved': 'x'}}, None):
        assert machine.describe(dict(base, mechanisms=mechanisms)).startswith('2 CPUs, 16.0')


def test_the_kernels_cpu_list_reads_as_the_cpus_it_names():
    assert linkcpus.allowed_list('0-2,5,7-8\n') == [0, 1, 2, 5, 7, 8]
    assert linkcpus.allowed_list(' 3') == [3]
    with open('/proc/self/status') as handle:
        line = [x for x in handle if x.startswith('Cpus_allowed_list:')][0]
    assert linkcpus.allowed_list(line.split(':', 1)[1]) == sorted(os.sched_getaffinity(0))
    with pytest.raises(ValueError):
        linkcpus.allowed_list('0-x')


def test_one_helper_says_which_cpus_usable_for_the_split_and_the_provenance():
    """CPython asks sched_getaffinity, PyPy (which has none) the kernel's list: both the
    same CPUs, and the manifest's cpus_usable is their count."""
    from repronet.run import provenance
    mine = sorted(os.sched_getaffinity(0))
    assert linkcpus.usable_cpus() == mine
    assert provenance.host()['cpus_usable'] == len(mine)
    pypy = shutil.which('pypy3')
    if pypy is None:
        pytest.skip('pypy3 not installed (the fallback path)')
    out = subprocess.run([pypy, '-c', 'import os; from repronet.emu.linkcpus import '
                          'usable_cpus; from repronet.run.provenance import host; '
                          'print(hasattr(os, "sched_getaffinity"), usable_cpus(), '
                          'host()["cpus_usable"])'], capture_output=True, text=True,
                         timeout=60, check=True, cwd=os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__))))
    assert out.stdout.split(None, 1)[1].strip() == '%s %d' % (mine, len(mine))
