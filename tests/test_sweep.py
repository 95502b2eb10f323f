"""Sweep expansion, derived seeds, progress lines, shared options."""

import io

import pytest

from repronet.run import options
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
    assert lines[0] == ('[1/4] rate=5 repetition=0 ok goodput_mbps=4.9  '
                        'elapsed 0:00:10  ETA 0:00:30')
    assert lines[1].endswith('elapsed 0:00:20  ETA 0:00:20')
    assert '\r' not in out.getvalue()


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


@pytest.mark.parametrize('argv', [['--repeat', '0'], ['--switch', 'nope'],
                                  ['--scale', 'huge'], ['--repeat', 'x']])
def test_options_reject_bad_values(argv):
    with pytest.raises(SystemExit):
        options.parse(_Exp(), argv)
