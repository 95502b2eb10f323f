"""repronet.emu.linkemu_holds.record: whose and when the worst release was, and the CPU sample
the runner sets beside it (repronet.run.backends.worst_release_sample); the weighted means
record and linkemu_workers.merge both take from weighted_mean, each with its own rounding."""

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


def test_weighted_mean_counts_none_as_zero_and_has_none_without_weight():
    assert linkemu_holds.weighted_mean([(3, 2.0), (1, 6.0)]) == 3.0
    assert linkemu_holds.weighted_mean([(2, None), (None, 9.0), (2, 4.0)]) == 2.0
    assert linkemu_holds.weighted_mean([(0, 5.0), (None, 1.0)]) is None
    assert linkemu_holds.weighted_mean([]) is None


def test_record_and_merge_weigh_the_same_means_each_its_own_way():
    """record: unrounded, None without weight, and only daemons that printed a mean count
    (h3 released 100 with no mean: not in the parts' weights); merge: rounded to 3 places as
    the daemon prints, 0.0 without weight."""
    from repronet.emu.linkemu_workers import merge
    info = {'hold_us_min': 100, 'hold_us_max': 100, 'cpu_s': 1.0, 'server': None}
    finals = [{'released': 2, 'late_us_mean': 1.0, 'late_read_us_mean': 1.0,
               'serialised': 0, 'serial_us_mean': None},
              {'released': 1, 'late_us_mean': 2.0, 'late_read_us_mean': None},
              {'released': 100, 'late_us_mean': None, 'late_read_us_mean': 50.0}]
    record = linkemu_holds.record([dict(info, host=h) for h in ('h1', 'h2', 'h3')], finals, 0.1)
    assert record['released'] == 3
    assert record['late_us_mean'] == 4.0 / 3 and record['late_read_us_mean'] == 2.0 / 3
    assert (record['serialised'], record['serial_us_mean']) == (0, None)
    timed = linkemu_holds.record([dict(info, host='h1'), dict(info, host='h2')],
                                 [{'serialised': 3, 'serial_us_mean': 2.0},
                                  {'serialised': None, 'serial_us_mean': 7.0}], 0.1)
    assert (timed['serialised'], timed['serial_us_mean']) == (3, 2.0)
    got = merge([{'released': 2, 'late_us_mean': 1.0, 'serialised': 0, 'serial_us_mean': 4.0},
                 {'released': 1, 'late_us_mean': 2.0, 'serialised': 0, 'serial_us_mean': 9.0}])
    assert (got['late_us_mean'], got['serial_us_mean']) == (1.333, 0.0)
