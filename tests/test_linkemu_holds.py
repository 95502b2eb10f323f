"""repronet.emu.linkemu_holds.record: whose and when the worst release was, and the CPU sample
the runner sets beside it (repronet.run.backends.worst_release_sample)."""

from repronet.emu import linkemu_holds
from repronet.run import backends
from repronet.run.cpu import CpuMonitor


def _daemon(host, released, mean, worst, at):
    return ({'host': host, 'hold_us_min': 100, 'hold_us_max': 100, 'cpu_s': 1.0,
             'server': None},
            {'released': released, 'late_us_mean': mean, 'late_us_max': worst,
             'late_us_max_at': at})


def test_the_worst_release_is_named_and_gets_its_cpu_sample():
    pairs = [_daemon('h1', 100, 2.0, 900.0, 10.3), _daemon('s2', 50, 5.0, 15000.0, 11.1),
             _daemon('h3', 0, None, None, None)]
    record = linkemu_holds.record([p[0] for p in pairs], [p[1] for p in pairs], 0.1)
    assert (record['late_us_max'], record['late_max_host'], record['late_max_at']) == \
        (15000.0, 's2', 11.1)
    assert record['late_us_mean'] == (100 * 2.0 + 50 * 5.0) / 150
    monitor = CpuMonitor(interval=0.5)
    monitor.samples = [{'t': 10.5 + 0.5 * i, 'busy': 0.5, 'steal': 0.0, 'cores': [1.0, 0.1],
                        'core_steal': [0.0, 0.06 * i]} for i in range(3)]
    backends.worst_release_sample(record, monitor)
    assert record['late_max_sample']['t'] == 11.5
    assert record['late_max_sample']['core_steal'] == [0.0, 0.12]


def test_no_release_no_moment():
    info, final = _daemon('h1', 0, None, None, None)
    record = linkemu_holds.record([info], [final], 0.1)
    assert record['late_max_host'] is None and record['late_max_at'] is None
    backends.worst_release_sample(record, CpuMonitor())
    assert 'late_max_sample' not in record
    backends.worst_release_sample(None, CpuMonitor())     # a run without daemons
