"""The delay daemons' lateness split by point (issue 15): a run's mean hides which points it
came from, so each daemon answers every reseed with its counters so far and
repronet.emu.linkemu_holds.by_seed takes the differences; the runner names each seed's point,
the report's machine line gives the least and most late point, and dht8 writes them as
tables/linkdelay_points.csv."""

import pandas as pd

from analysis import machine
from analysis.tables import link_late_points
from repronet.emu import linkemu_holds


def _line(event, seed, released, mean, read, hist):
    return {'event': event, 'seed': seed, 'released': released, 'late_us_mean': mean,
            'late_read_us_mean': read, 'late_hist_log2_us': hist}


# h1: 10 releases before the first reseed (set-up), 100 in seed 7's point (1,000 us late in
# all), 50 in seed 8's (5,000 us); h2: 20 in seed 7's (200 us), 0 in seed 8's.
H1 = [_line('seeded', 7, 10, 1.0, 0.5, [10, 0, 0]),
      _line('seeded', 8, 110, 1010.0 / 110, 5.0 / 110, [100, 10, 0]),
      _line('stats', 8, 160, 6010.0 / 160, 1005.0 / 160, [100, 10, 50])]
H2 = [_line('seeded', 7, 0, 0.0, 0.0, [0, 0, 0]),
      _line('seeded', 8, 20, 10.0, 0.0, [10, 10, 0]),
      _line('stats', 8, 20, 10.0, 0.0, [10, 10, 0])]


def test_each_seed_gets_the_releases_from_its_reseed_to_the_next_line():
    points = linkemu_holds.by_seed([H1, H2])
    assert [p['seed'] for p in points] == [7, 8]
    first, second = points
    assert (first['released'], second['released']) == (120, 50)
    assert first['late_us_mean'] == round(1200.0 / 120, 3)
    assert second['late_us_mean'] == 100.0 and second['late_read_us_mean'] == 20.0
    assert first['late_hist_log2_us'] == [100, 20, 0]
    assert second['late_hist_log2_us'] == [0, 0, 50]
    assert first['late_us_bounds'] == {'p50': 1, 'p99': 2}
    assert second['late_us_bounds'] == {'p50': None, 'p99': None}    # the open last bucket


def test_a_seed_given_twice_sums_and_old_lines_without_counters_give_nothing():
    lines = [_line('seeded', 7, 10, 1.0, 0.0, [10, 0, 0]),
             _line('seeded', 8, 110, 1010.0 / 110, 0.0, [100, 10, 0]),
             _line('seeded', 7, 160, 6010.0 / 160, 0.0, [100, 10, 50]),
             _line('stats', 7, 170, 6020.0 / 170, 0.0, [110, 10, 50])]
    points = linkemu_holds.by_seed([lines])
    assert [(p['seed'], p['released']) for p in points] == [(7, 100 + 10), (8, 50)]
    assert points[0]['late_us_mean'] == round((1000.0 + 10.0) / 110, 3)
    assert points[0]['late_hist_log2_us'] == [100, 10, 0]
    old = [{'event': 'seeded', 'seed': 7}, {'event': 'seeded', 'seed': 8},
           {'event': 'stats', 'released': 5, 'late_us_mean': 1.0}]
    assert linkemu_holds.by_seed([old]) == []
    assert linkemu_holds.by_seed([]) == []


def test_points_are_named_and_the_report_gives_the_least_and_most_late():
    record = {'points': linkemu_holds.by_seed([H1, H2])}
    linkemu_holds.name_points(record, [{'point': 0, 'repetition': 0, 'seed': 7},
                                       {'point': 1, 'repetition': 1, 'seed': 8}])
    assert [(p['point'], p['repetition']) for p in record['points']] == [(0, 0), (1, 1)]
    assert machine._by_point(record['points']) == \
        '; by point, the mean ran from 10.0 us (point 0) to 100.0 us (point 1)'
    assert machine._by_point(record['points'][:1]) == ''
    manifest = {'link_holds': {'hold_us_min': 100, 'late_us_mean': 30.0, 'late_us_max': 900.0,
                               'late_share': 0.1, 'points': record['points']}}
    assert 'by point, the mean ran from 10.0 us (point 0) to 100.0 us (point 1)' in \
        machine.holds(manifest)


def test_the_table_sets_each_points_lateness_beside_the_point():
    record = {'points': linkemu_holds.by_seed([H1, H2])}
    linkemu_holds.name_points(record, [{'point': 0, 'seed': 7}, {'point': 1, 'seed': 8}])
    pts = pd.DataFrame({'point': [0, 1], 'op': ['register', 'search']})
    table = link_late_points({'link_holds': record}, pts)
    assert list(table['op']) == ['register', 'search']
    assert list(table['released']) == [120, 50]
    assert table['late_us_p50_under'][0] == 1 and pd.isna(table['late_us_p50_under'][1])
    assert link_late_points({}, pts).empty
    assert link_late_points({'link_holds': {'points': []}}, pts).empty
