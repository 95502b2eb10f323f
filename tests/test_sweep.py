"""Sweep expansion, derived seeds, progress lines, shared options."""

import io
import os

import pytest

from repronet.run import results, options
from repronet.run import sweep


def test_cross_product_order_and_repetitions_outer():
    points = sweep.expand({'a': [1, 2], 'b': ['x', 'y']}, repeat=2, seed=3)
    assert [(p['repetition'], p['a'], p['b']) for p in points] == [
        (0, 1, 'x'), (0, 1, 'y'), (0, 2, 'x'), (0, 2, 'y'),
        (1, 1, 'x'), (1, 1, 'y'), (1, 2, 'x'), (1, 2, 'y')]
    assert [p['point'] for p in points] == list(range(8))


def test_seeds_reproducible_distinct_and_position_independent():
    first = sweep.expand({'a': [1, 2]}, repeat=3, seed=5)
    again = sweep.expand({'a': [1, 2]}, repeat=3, seed=5)
    assert [p['seed'] for p in first] == [p['seed'] for p in again]
    assert len({p['seed'] for p in first}) == len(first)
    other = sweep.expand({'a': [1, 2]}, repeat=3, seed=6)
    assert {p['seed'] for p in first}.isdisjoint(p['seed'] for p in other)
    # Adding a value does not change the seeds of existing points.
    wider = sweep.expand({'a': [0, 1, 2]}, repeat=3, seed=5)
    by_key = {(p['a'], p['repetition']): p['seed'] for p in wider}
    for p in first:
        assert by_key[(p['a'], p['repetition'])] == p['seed']
    assert all(0 <= p['seed'] < 2 ** 31 for p in first)


def test_empty_grid_gives_one_point_per_repetition():
    points = sweep.expand({}, repeat=3, seed=1)
    assert [p['repetition'] for p in points] == [0, 1, 2]


@pytest.mark.parametrize('grid,repeat', [
    ({'a': 5}, 1), ({'a': 'abc'}, 1), ({'seed': [1]}, 1), ({'a': [1]}, 0)])
def test_bad_sweeps_are_refused(grid, repeat):
    with pytest.raises(ValueError):
        sweep.expand(grid, repeat=repeat)


def test_progress_prints_elapsed_and_eta():
    now = [100.0]
    out = io.StringIO()
    progress = sweep.Progress(4, stream=out, clock=lambda: now[0])
    now[0] += 10
    progress.point_done({'point': 0, 'rate': 5, 'repetition': 0, 'seed': 9},
                        result={'goodput_mbps': 4.9})
    now[0] += 10
    progress.point_done({'point': 1, 'rate': 6, 'repetition': 0, 'seed': 9})
    lines = out.getvalue().splitlines()
    assert lines[0] == ('[1/4] point 0: rate=5 repetition=0 ok goodput_mbps=4.9  '
                        'elapsed 0:00:10  ETA 0:00:30')
    assert lines[1].endswith('elapsed 0:00:20  ETA 0:00:20')
    assert '\r' not in out.getvalue()


def test_progress_names_each_point_by_the_number_reports_and_tables_use():
    """A new user read '[3/4]' as point 3, which the report calls point 2: the count of
    finished points starts at 1, so every line also names the point by its own number,
    counted from 0 like logs/points.jsonl, the tables, the reports and --dry-run."""
    points = sweep.expand({'rate': [5, 6]}, repeat=2)
    out = io.StringIO()
    progress = sweep.Progress(len(points), stream=out, clock=lambda: 0.0)
    for point in points:
        progress.point_done(point)
    for count, (line, point) in enumerate(zip(out.getvalue().splitlines(), points), 1):
        assert line.startswith('[%d/4] point %d: rate=%d ' % (
            count, point['point'], point['rate'])), line
    assert [p['point'] for p in points] == [0, 1, 2, 3]


def test_eta_weighs_the_points_left_by_their_estimates():
    now = [0.0]
    out = io.StringIO()
    # a short point, then one estimated ten times longer, then one unknown
    progress = sweep.Progress(3, stream=out, clock=lambda: now[0],
                              weights=[1.0, 10.0, None])
    now[0] += 2     # the short point took 2 s: twice its estimate
    progress.point_done({'point': 0})
    # left: 10 + 5.5 (the unknown one counts as the mean) estimated, at 2 s per unit
    assert out.getvalue().splitlines()[0].endswith('ETA 0:00:31')


def test_eta_scales_each_kind_by_its_own_finished_points():
    """Two quick points of one kind as estimated, then a point of another kind that took ten
    times its estimate: the last point, of that kind and estimated ten units, is expected to
    take 100 s, not the 40 s that all points' ratio (12 s over 3 units) would say. Before a
    point of its kind has finished, a kind is scaled by all finished points."""
    now = [0.0]
    out = io.StringIO()
    progress = sweep.Progress(4, stream=out, clock=lambda: now[0],
                              weights=[1.0, 1.0, 1.0, 10.0], kinds=['a', 'a', 'b', 'b'])
    for took in (1, 1):
        now[0] += took
        progress.point_done({'point': 0})
    assert out.getvalue().splitlines()[1].endswith('ETA 0:00:11')   # 11 units at 1 s each
    now[0] += 10
    progress.point_done({'point': 2})
    assert out.getvalue().splitlines()[2].endswith('ETA 0:01:40')
    same = sweep.Progress(4, stream=io.StringIO(), clock=lambda: now[0],
                          weights=[1.0, 1.0, 1.0, 10.0])
    assert same.kinds == [None] * 4


class _Exp:
    """A minimal experiment for the option parser."""

    name = 'demo'
    scales = {'smoke': {'repeat': 2, 'duration': 1.0},
              'default': {'duration': 10.0},
              'defaults': {'rate': 5}}

    def add_arguments(self, parser):
        parser.add_argument('--duration', type=float, default=None)
        parser.add_argument('--rate', type=int, default=None)


def test_options_fill_from_scale_then_defaults():
    params = options.parse(_Exp(), ['--scale', 'smoke'])
    assert (params.repeat, params.duration, params.rate, params.seed) == \
        (2, 1.0, 5, 1)
    assert params.switch == 'lxbr' and params.datapath == 'auto'
    assert params.out.startswith('results/demo-')
    params = options.parse(_Exp(), ['--repeat', '4', '--duration', '3',
                                    '--switch', 'osken', '--out', 'x'])
    assert (params.repeat, params.duration, params.switch, params.out) == \
        (4, 3.0, 'osken', 'x')


@pytest.mark.parametrize('argv', [['--switch', 'nope'], ['--scale', 'huge'],
                                  ['--repeat', 'x'], ['--cli', 'never']])
def test_options_reject_bad_values(argv):
    with pytest.raises(options.UsageError) as info:
        options.parse(_Exp(), argv)
    assert argv[0] in str(info.value) and '\n' not in str(info.value)


@pytest.mark.parametrize('argv, sentence', [
    (['--repeat', '0'], '--repeat 0 must be a whole number from 1 to 1000'),
    (['--repeat', '100000000'], '--repeat 100000000 must be a whole number from 1 to 1000'),
    (['--seed', '-1'], '--seed -1 must be a whole number from 0 to 2^63-1'),
    (['--rate', '0'], '--rate 0 must be packets/s from 1 to 1000'),
    (['--duration', 'nan'], '--duration nan must be seconds from 0.1 to 60'),
    (['--duration', 'inf'], '--duration inf must be seconds from 0.1 to 60')])
def test_shared_checks_say_what_is_wrong_in_one_sentence(argv, sentence, tmp_path):
    params = options.parse(_Exp(), ['--out', str(tmp_path / 'run')] + argv)
    limits = {'rate': (1, 1000, 'packets/s'), 'duration': (0.1, 60, 'seconds')}
    with pytest.raises(options.UsageError) as info:
        options.check_shared(params, limits)
        options.check_out(params)
    assert str(info.value) == sentence


def test_out_that_cannot_hold_a_run_is_refused_before_anything(tmp_path):
    a_file = tmp_path / 'file'
    a_file.write_text('x')
    busy = tmp_path / 'busy'
    busy.mkdir()
    (busy / 'notes.txt').write_text('mine')
    done = tmp_path / 'done'
    results.ResultsFolder(done).start('demo', {}, 1, [])
    read_only = tmp_path / 'ro'
    read_only.mkdir(mode=0o555)
    cases = {str(a_file): 'is not a folder', str(a_file / 'run'): 'is not a folder',
             str(busy): 'holds other files', str(done): 'already holds a run'}
    if os.geteuid() != 0:   # root may write into a 0555 folder
        cases[str(read_only / 'run')] = 'is not writable'
    cases.update({'': 'must name a folder, not an empty string',
                  '  ': 'must name a folder, not an empty string'})
    for out, words in cases.items():
        params = options.parse(_Exp(), ['--out', out])
        options.check_shared(params)
        with pytest.raises(options.UsageError) as info:
            options.check_out(params)
        assert words in str(info.value), out
    assert sorted(p.name for p in tmp_path.iterdir()) == ['busy', 'done', 'file', 'ro']


def test_sweeps_without_points_or_with_absurdly_many_are_refused():
    with pytest.raises(options.UsageError):
        options.check_points([])
    with pytest.raises(options.UsageError):
        options.check_points([{}] * (options.MAX_POINTS + 1))
    options.check_points([{}])
