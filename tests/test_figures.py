"""Unit tests of analysis/figures.py: what each figure kind draws, read back from its axes.

Each function returns the PNG and PDF paths in a list that carries ``.drawn``
(``figures.Drawn``); these tests check titles, labels, series and their data there, and that
identical data still gives byte-identical files.
"""

import hashlib

import pandas as pd
import pytest

from analysis import figures


def _digest(paths):
    """sha256 of each file, in order."""
    return [hashlib.sha256(open(p, 'rb').read()).hexdigest() for p in paths]


def _goodput():
    """Two repetitions of a goodput time series, rows deliberately out of time order."""
    return pd.DataFrame({'t': [2.0, 1.0, 3.0, 1.0, 2.0],
                         'mbps': [9.0, 8.0, 9.5, 7.0, 9.2],
                         'rep': ['rep 0', 'rep 0', 'rep 0', 'rep 1', 'rep 1']})


def test_lines_over_time_draws_one_sorted_line_per_group_and_the_reference(tmp_path):
    """Each hue value is a line with its points in x order; the reference is a dashed line."""
    saved = figures.lines_over_time(_goodput(), 't', 'mbps', 'rep', tmp_path, 'g',
                                    'Goodput', 'time (s)', 'Mbit/s', reference=10.0,
                                    reference_label='configured 10 Mbit/s')
    assert list(saved) == [str(tmp_path / 'g.png'), str(tmp_path / 'g.pdf')]
    assert all((tmp_path / name).stat().st_size > 1000 for name in ('g.png', 'g.pdf'))
    drawn = saved.drawn
    assert (drawn.name, drawn.title, drawn.xlabel, drawn.ylabel) == \
        ('g', 'Goodput', 'time (s)', 'Mbit/s')
    assert drawn.legend == ('rep 0', 'rep 1', 'configured 10 Mbit/s')
    assert drawn.get('rep 0', 'line').x == (1.0, 2.0, 3.0)
    assert drawn.get('rep 0', 'line').y == (8.0, 9.0, 9.5)
    assert drawn.get('rep 1', 'line').y == (7.0, 9.2)
    assert drawn.get('configured 10 Mbit/s', 'reference').y == (10.0,)
    assert drawn.ylim == pytest.approx((0.0, 11.5))     # 15 % above the reference
    assert drawn.xlim[0] == 0.0


def test_lines_over_time_style_and_unlabelled_single_line(tmp_path):
    """style adds 'style: group' labels; without hue the one line has no label."""
    df = _goodput().assign(series=['ours', 'ours', 'ours', 'seed', 'seed'], op='get')
    drawn = figures.lines_over_time(df, 't', 'mbps', 'op', tmp_path, 's', 'T', 'x', 'y',
                                    style='series').drawn
    assert [s.label for s in drawn.series] == ['ours: get', 'seed: get']
    alone = figures.lines_over_time(_goodput(), 't', 'mbps', None, tmp_path, 'one',
                                    'T', 'x', 'y').drawn
    assert [(s.label, s.kind, len(s.x)) for s in alone.series] == [('', 'line', 5)]
    assert alone.legend == ()


@pytest.mark.parametrize('ylim_zero', [True, False])
def test_lines_over_time_xlim_zero_switch(tmp_path, ylim_zero):
    """xlim_zero starts the x axis at 0 whether or not the y axis starts at 0; off, it does not."""
    df = pd.DataFrame({'x': [3.0, 4.0, 5.0], 'y': [5.0, 6.0, 7.0], 'h': 'a'})
    on = figures.lines_over_time(df, 'x', 'y', 'h', tmp_path, 'on', 'T', 'x', 'y',
                                 ylim_zero=ylim_zero).drawn
    off = figures.lines_over_time(df, 'x', 'y', 'h', tmp_path, 'off', 'T', 'x', 'y',
                                  ylim_zero=ylim_zero, xlim_zero=False).drawn
    assert on.xlim[0] == 0.0
    assert 2.5 < off.xlim[0] < 3.0
    assert (on.ylim[0] == 0.0) == ylim_zero


def test_measured_vs_configured_draws_each_group_and_the_identity(tmp_path):
    """One labelled point series per hue value, the identity line, square limits from 0."""
    df = pd.DataFrame({'configured': [10.0, 40.0, 10.0, 40.0],
                       'measured': [10.2, 40.3, 10.5, 41.0],
                       'shape': ['two-host', 'two-host', 'multi-hop', 'multi-hop']})
    drawn = figures.measured_vs_configured(df, 'configured', 'measured', tmp_path, 'rtt',
                                           'RTT', 'configured (ms)', 'measured (ms)',
                                           hue='shape').drawn
    assert drawn.legend == ('two-host', 'multi-hop', 'measured = configured')
    two = drawn.get('two-host', 'points')
    assert (two.x, two.y) == ((10.0, 40.0), (10.2, 40.3))
    assert drawn.get('multi-hop', 'points').y == (10.5, 41.0)
    identity = drawn.get('measured = configured', 'line')
    assert identity.x == identity.y == pytest.approx((0.0, 41.0 * 1.1))
    assert drawn.xlim == drawn.ylim == pytest.approx((0.0, 41.0 * 1.1))


def test_bars_with_spread_draws_means_sd_and_every_repetition(tmp_path):
    """Bars are means per category (string order), error bars mean +- sd, dots every value."""
    df = pd.DataFrame({'setting': [' 20 ms', ' 20 ms', '  5 ms', '  5 ms', '  5 ms'],
                       'ratio': [1.0, 1.2, 0.9, 1.0, 1.1]})
    drawn = figures.bars_with_spread(df, 'setting', 'ratio', tmp_path, 'ratio', 'Ratio',
                                     'configured', 'ratio', reference=1.0).drawn
    bars = drawn.get('mean ± sd', 'bars')
    assert bars.x == ('  5 ms', ' 20 ms')
    assert bars.y == pytest.approx((1.0, 1.1))
    spread = drawn.get('', 'errorbars')
    assert spread.x == bars.x
    sd = (0.1, 0.02 ** 0.5)        # sample standard deviation of each category
    assert [lo for lo, _ in spread.y] == pytest.approx([1.0 - sd[0], 1.1 - sd[1]])
    assert [hi for _, hi in spread.y] == pytest.approx([1.0 + sd[0], 1.1 + sd[1]])
    dots = drawn.get('repetitions', 'points')
    assert sorted(zip(dots.x, dots.y)) == sorted(zip(df['setting'], df['ratio']))
    assert drawn.get('configured', 'reference').y == (1.0,)
    assert set(drawn.legend) == {'mean ± sd', 'repetitions', 'configured'}


def test_missing_series_is_a_clear_error(tmp_path):
    """Asking for a series that was not drawn raises KeyError naming it and the figure."""
    drawn = figures.lines_over_time(_goodput(), 't', 'mbps', 'rep', tmp_path, 'g',
                                    'T', 'x', 'y').drawn
    with pytest.raises(KeyError, match="'rep 2'.*figure g"):
        drawn.get('rep 2')


def test_identical_data_gives_identical_files(tmp_path):
    """Reading what was drawn leaves the saved PNG and PDF byte-stable."""
    first = figures.bars_with_spread(_goodput(), 'rep', 'mbps', tmp_path / 'a', 'b',
                                     'T', 'x', 'y', reference=10.0)
    second = figures.bars_with_spread(_goodput(), 'rep', 'mbps', tmp_path / 'b', 'b',
                                      'T', 'x', 'y', reference=10.0)
    assert _digest(first) == _digest(second)
    assert first.drawn == second.drawn
