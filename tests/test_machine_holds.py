"""The machine line of every report says how late the delay daemons were (issue 15).

``analysis.machine.describe`` is what every experiment's report prints for the machine; it
appends the manifest's ``link_holds`` record (written by the runner after the daemons stopped)
and marks a run whose mean lateness exceeds the recorded share of the smallest hold.
"""

from analysis import machine

HOST = {'provenance': {'host': {'cpus': 2, 'memory_bytes': 2 ** 34}}}


def _manifest(**holds):
    """A manifest with a host and a link_holds record (100 to 400 us holds, 10 % share)."""
    record = {'late_share': 0.1, 'hold_us_min': 100, 'hold_us_max': 400,
              'late_us_mean': 3.0, 'late_us_max': 250.0, **holds}
    return dict(HOST, link_holds=record)


def test_lateness_stands_next_to_the_configured_holds():
    """Mean, worst and the holds' range are in the machine line, not marked under 10 %."""
    text = machine.describe(_manifest())
    assert text.startswith('2 CPUs, 16.0 GiB memory; ')
    assert '3.0 us late on average, 250 us at most, against configured holds of 100 to 400 us' \
        in text
    assert 'MARKED' not in text
    assert 'against configured holds of 100 us' in machine.describe(_manifest(hold_us_max=100))


def test_mean_above_the_share_of_the_smallest_hold_marks_the_run():
    """10.5 us against a 100 us hold and a 10 % share: marked; exactly 10 us: not."""
    assert 'MARKED: the mean exceeds 10 % of the smallest hold' in machine.describe(
        _manifest(late_us_mean=10.5))
    assert 'MARKED' not in machine.describe(_manifest(late_us_mean=10.0))


def test_runs_without_daemons_or_counters_say_so_or_nothing():
    """No record (netem, no delay, older runs): the line is the machine alone; a record whose
    daemons printed no counters says the lateness was not recorded."""
    assert machine.describe(HOST) == '2 CPUs, 16.0 GiB memory'
    assert machine.describe(dict(HOST, link_holds=None)) == '2 CPUs, 16.0 GiB memory'
    assert machine.holds(_manifest(late_us_mean=None)) == \
        'link delay daemons: lateness not recorded'
    assert machine.describe({'link_holds': _manifest()['link_holds']}).startswith(
        'machine not recorded in the manifest; link delay daemons released')


def test_a_daemon_that_left_the_realtime_class_is_named():
    """A daemon demoted to SCHED_OTHER (RLIMIT_RTTIME) is named in the line, marked or not;
    none demoted (or an older record without the key) adds nothing."""
    text = machine.describe(_manifest(rt_demoted=['h2'], daemons=[{'host': 'h1'},
                                                                   {'host': 'h2'}]))
    assert '1 of 2 daemons (h2) left SCHED_FIFO during the run' in text
    assert 'MARKED' not in text
    assert 'SCHED_FIFO' not in machine.describe(_manifest(rt_demoted=[]))
    assert 'SCHED_FIFO' not in machine.describe(_manifest())


def test_the_daemons_cpu_seconds_follow_with_the_other_servers_share():
    """The daemons' rows (cpu_s, server) add up to the CPU clause; rows without cpu_s (runs
    before it was recorded) add nothing."""
    rows = [{'host': 'h1', 'cpu_s': 1.5, 'server': 'localhost'},
            {'host': 'h2', 'cpu_s': 0.25, 'server': 'HOST2'}]
    text = machine.describe(_manifest(daemons=rows))
    assert text.endswith('100 to 400 us, using 1.75 CPU seconds (0.25 of them on other '
                         'servers)')
    assert machine.describe(_manifest(daemons=rows[:1])).endswith('using 1.50 CPU seconds')
    assert machine.describe(_manifest(daemons=[{'host': 'h1'}])).endswith('100 to 400 us')


def test_serialisation_time_is_stated_when_the_daemons_timed_it():
    """A run whose daemons timed packets on rated links says how long that took on average,
    after the holds; a record without it (no bw, older runs) adds nothing."""
    text = machine.describe(_manifest(serial_us_mean=42.25, serialised=10))
    assert ("against configured holds of 100 to 400 us after each packet's time on the rated "
            "links (42.2 us on average, timed by the daemons)") in text
    assert 'rated links' not in machine.describe(_manifest())
    assert 'rated links' not in machine.describe(_manifest(serial_us_mean=None))


def test_the_tail_and_the_read_share_of_the_lateness_are_stated():
    """With the daemons' summed histogram and split (since 2026-11-26), the line gives the
    median's and the 99th percentile's bounds and what packets read late added: 900 of 1,000
    releases under 1 us and 100 in [512, 1024) us: half under 1 us, 99 % under 1024 us; one
    release in the open last bucket at the 99th percentile reads '16 ms late or more'."""
    hist = [900] + [0] * 9 + [100] + [0] * 5
    text = machine.holds(_manifest(late_hist_log2_us=hist, late_read_us_mean=61.25))
    assert ('(50 % of packets under 1 us late, 99 % of packets under 1024 us late; 61.2 us of '
            'the mean from packets the daemons read after their deadline)') in text
    tail = [1] + [0] * 14 + [1]
    assert '99 % of packets 16 ms late or more' in machine.holds(_manifest(late_hist_log2_us=tail))
    assert '(' not in machine.holds(_manifest()).split('holds of')[1]


def test_steal_is_stated_with_its_worst_sample():
    """The hypervisor's share of the CPU time and its worst sample follow on the machine line;
    a run with none (bare metal) or no samples says nothing about it."""
    cpu = {'steal_mean': 0.0062, 'steal_max': 0.32, 'core_steal_max': [0.32, 0.05],
           'cores': ['cpu0', 'cpu1'], 'interval': 0.5, 'judged_cpus': [0]}
    line = machine.describe(dict(HOST, cpu=cpu))
    assert line.endswith("; the hypervisor took 0.6 % of the hosts' CPU time (steal), 32 % of "
                         "CPU 0's worst 0.5 s sample")
    del cpu['judged_cpus']
    assert 'took 0.6 % of the CPU time (steal)' in machine.describe(dict(HOST, cpu=cpu))
    none = dict(cpu, steal_mean=0.0, steal_max=0.0, core_steal_max=[0.0, 0.0])
    for manifest in (dict(HOST, cpu=none), HOST, dict(HOST, cpu={'steal_mean': None})):
        assert 'steal' not in machine.describe(manifest)


def test_the_cpu_sample_of_the_worst_release_says_whether_the_vm_stalled():
    """With the sample that held the worst release, the line says how much the hypervisor took
    of each CPU then, or that it took nothing and how busy the CPUs were."""
    stalled = {'t': 10.0, 'busy': 0.5, 'steal': 0.0, 'cores': [1.0, 0.4],
               'core_steal': [0.0, 0.06]}
    line = machine.describe(_manifest(late_max_host='s2', late_max_at=9.8,
                                      late_max_sample=stalled))
    assert "; the worst release (s2's daemon) fell in a CPU sample in which the hypervisor " \
           "took 0 % of CPU 0 and 6 % of CPU 1" in line
    quiet = dict(stalled, core_steal=[0.0, 0.0])
    line = machine.describe(_manifest(late_max_host='s2', late_max_sample=quiet))
    assert "worst release (s2's daemon) fell in a CPU sample with no steal (CPUs 100 % / 40 % " \
           "busy)" in line
    gap = dict(stalled, core_steal=[None, 0.06])     # CPU 0 without a reading keeps CPU 1's name
    assert 'the hypervisor took 6 % of CPU 1' in machine.describe(_manifest(late_max_sample=gap))
    old = dict(stalled)
    del old['core_steal']        # samples from before core_steal existed
    assert 'worst release' not in machine.describe(_manifest(late_max_sample=old))
    assert 'worst release' not in machine.describe(_manifest(late_max_sample=None))


STEAL_HOST = {'provenance': {'host': {'cpus': 3, 'memory_bytes': 2 ** 33,
                                      'cpu_model': 'Test CPU'}}}
STEAL_HOLDS = {'late_share': 0.1, 'hold_us_min': 100, 'hold_us_max': 100,
               'late_us_mean': 3.0, 'late_us_max': 250.0}
LINE_START = ('3 CPUs, 8.0 GiB memory, Test CPU; link delay daemons released packets 3.0 us '
              'late on average, 250 us at most, against configured holds of 100 us; ')


def test_both_steal_clauses_name_cpus_alike_and_stay_byte_identical():
    """The worst release's sample and the run's worst steal sample share one formatter; the
    lines are the ones the two formatters wrote before (three CPUs, percentages rounded, a
    CPU past the sampler's names named by its index)."""
    stalled = dict(STEAL_HOST, link_holds=dict(STEAL_HOLDS, late_max_host='s1', late_max_sample={
        't': 1.0, 'cores': [0.2, 1.0, 0.5], 'core_steal': [0.004, 0.125, 0.0]}), cpu={
        'steal_mean': 0.0149, 'core_steal_max': [0.004, 0.125, 0.999],
        'cores': ['cpu0', 'cpu1', 'cpu2'], 'interval': 0.25, 'judged_cpus': [0, 1]})
    assert machine.describe(stalled) == LINE_START + (
        "the worst release (s1's daemon) fell in a CPU sample in which the hypervisor took 0 % "
        "of CPU 0 and 12 % of CPU 1 and 0 % of CPU 2; the hypervisor took 1.5 % of the hosts' "
        "CPU time (steal), 100 % of CPU 2's worst 0.25 s sample")
    unnamed = dict(STEAL_HOST, link_holds=dict(STEAL_HOLDS, late_max_sample={
        't': 1.0, 'cores': [0.1, 0.2], 'core_steal': [0.0, 0.5]}), cpu={
        'steal_mean': 0.2, 'core_steal_max': [0.1, 0.0, 0.7], 'cores': ['cpu0'],
        'interval': 0.5})
    assert machine.describe(unnamed) == LINE_START + (
        'the worst release fell in a CPU sample in which the hypervisor took 0 % of CPU 0 and '
        "50 % of CPU 1; the hypervisor took 20.0 % of the CPU time (steal), 70 % of CPU 2's "
        'worst 0.5 s sample')
