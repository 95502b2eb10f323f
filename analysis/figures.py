"""The one seaborn module: every figure of every experiment is drawn here.

A small set of figure kinds, each one function taking a tidy DataFrame:

- ``lines_over_time``: one line per group over time (e.g. goodput per
  repetition), with an optional dashed reference (the configured rate);
- ``measured_vs_configured``: measured value against the configured one, with
  the identity line, so distance from it is the emulation error;
- ``bars_with_spread``: mean per category as a bar, the standard deviation
  across repetitions as the error bar and every repetition as a dot.

One style for all (seaborn ``whitegrid``, ``paper`` context, colour-blind
palette, DejaVu Sans which matplotlib always ships, fixed figure size and
DPI), so figures of different experiments read alike.  ``save`` writes PNG and
PDF into ``figures/`` with the metadata that would change on every run (creation
date, software version) stripped, so identical tables give byte-identical
files.

Every function returns the two paths as before, in a list that also carries
``.drawn``: a :class:`Drawn` record read back from the axes just before the
figure is closed (title, axis labels, legend, and each series' data).  Tests
check what a reader of the figure would see without reopening the image, and a
caller that only wants the paths can ignore it.
"""

import contextlib
import dataclasses
import os

import matplotlib
import numpy as np
import pandas as pd

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

SIZE = (6.0, 3.4)       # inches
DPI = 150
PALETTE = 'colorblind'
_RC = {'font.family': 'DejaVu Sans', 'font.size': 9, 'axes.titlesize': 10,
       'axes.labelsize': 9, 'legend.fontsize': 8, 'xtick.labelsize': 8,
       'ytick.labelsize': 8, 'svg.hashsalt': 'repronet',
       'pdf.fonttype': 42, 'figure.dpi': DPI}
_PNG_META = {'Software': None}
_PDF_META = {'Creator': None, 'Producer': None, 'CreationDate': None}


@contextlib.contextmanager
def _style():
    """Apply the one figure style inside the block."""
    with sns.axes_style('whitegrid'), sns.plotting_context('paper'), \
            plt.rc_context(_RC):
        yield


@dataclasses.dataclass(frozen=True)
class Series:
    """One thing drawn on the axes, in data coordinates.

    kind is ``line``, ``points``, ``bars``, ``errorbars`` (y holds (low, high) per x) or
    ``reference`` (a horizontal line across the plot: x is empty, y is its one value).
    On a bar chart x holds the category names under the bars.
    """

    label: str      # legend label, '' when it has none
    kind: str
    x: tuple
    y: tuple


@dataclasses.dataclass(frozen=True)
class Drawn:
    """What a saved figure shows, read from its axes."""

    name: str
    title: str
    xlabel: str
    ylabel: str
    xlim: tuple
    ylim: tuple
    legend: tuple   # legend entry texts, top to bottom
    series: tuple   # Series, in drawing order; same label and kind merged into one

    def get(self, label, kind=None):
        """The one series with this legend label (and kind); KeyError if there is none."""
        found = [s for s in self.series if s.label == label and kind in (None, s.kind)]
        if len(found) != 1:
            raise KeyError('%d series labelled %r%s in figure %s' % (
                len(found), label, ' of kind %s' % kind if kind else '', self.name))
        return found[0]


class Saved(list):
    """The written paths [PNG, PDF], with what was drawn as ``.drawn``."""

    def __init__(self, paths, drawn):
        super().__init__(paths)
        self.drawn = drawn


def _label(artist):
    """An artist's legend label, '' for matplotlib's unlabelled '_child' names."""
    label = artist.get_label()
    return '' if label is None or str(label).startswith('_') else str(label)


def _read(ax, name, categories):
    """Build the Drawn record of ax (call after saving: tick labels exist once drawn)."""
    ticks = {}
    if categories:
        ticks = {int(round(t)): text.get_text()
                 for t, text in zip(ax.get_xticks(), ax.get_xticklabels())}

    def xs(values):
        return tuple(ticks.get(int(round(v)), float(v)) if categories else float(v)
                     for v in values)

    found = []
    for bars in ax.containers:
        found.append((_label(bars), 'bars', xs(p.get_x() + p.get_width() / 2 for p in bars),
                      tuple(float(p.get_height()) for p in bars)))
    for line in ax.get_lines():
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        if line.get_transform() is not ax.transData:    # axhline: x in axes fractions
            found.append((_label(line), 'reference', (), (float(y[0]),)))
        elif categories and not _label(line):           # seaborn's error bars and caps
            if len(x) == 2 and x[0] == x[1]:
                found.append(('', 'errorbars', xs(x[:1]), ((float(y.min()), float(y.max())),)))
        else:
            found.append((_label(line), 'line', xs(x), tuple(float(v) for v in y)))
    for points in ax.collections:
        offsets = np.asarray(points.get_offsets(), float)
        if len(offsets):                                # seaborn's empty legend proxies
            found.append((_label(points), 'points', xs(offsets[:, 0]),
                          tuple(float(v) for v in offsets[:, 1])))
    merged = {}
    for label, kind, x, y in found:
        old = merged.get((label, kind))
        merged[(label, kind)] = (old[0] + x, old[1] + y) if old else (x, y)
    legend = ax.get_legend()
    return Drawn(name=name, title=ax.get_title(), xlabel=ax.get_xlabel(),
                 ylabel=ax.get_ylabel(), xlim=tuple(map(float, ax.get_xlim())),
                 ylim=tuple(map(float, ax.get_ylim())),
                 legend=tuple(t.get_text() for t in legend.get_texts()) if legend else (),
                 series=tuple(Series(label, kind, x, y)
                              for (label, kind), (x, y) in merged.items()))


def save(fig, figures_dir, name, categories=False):
    """Save fig as figures_dir/name.png and .pdf; return both paths (a Saved list).

    categories: the x axis is categorical (bars), so x values are read as tick labels.
    """
    os.makedirs(figures_dir, exist_ok=True)
    paths = []
    for ext, meta in (('png', _PNG_META), ('pdf', _PDF_META)):
        path = os.path.join(str(figures_dir), '%s.%s' % (name, ext))
        fig.savefig(path, dpi=DPI, metadata=meta, bbox_inches='tight')
        paths.append(path)
    drawn = _read(fig.axes[0], name, categories)
    plt.close(fig)
    return Saved(paths, drawn)


def _reference(ax, value, label):
    """Draw a dashed horizontal reference line with a legend label."""
    if value is not None:
        ax.axhline(value, color='0.3', linestyle='--', linewidth=1,
                   label=label, zorder=1)


def _finish(ax, title, xlabel, ylabel, legend_title=None):
    """Set labels and title; put the legend outside the plot."""
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, title=legend_title, frameon=False,
                  loc='upper left', bbox_to_anchor=(1.01, 1.0))


LINESTYLES = ('-', '--', ':', '-.')


def lines_over_time(df, x, y, hue, figures_dir, name, title, xlabel, ylabel,
                    reference=None, reference_label='configured',
                    ylim_zero=True, style=None, xlim_zero=True, logx=False):
    """Lines of y over x, one colour per hue value (and one line style per style value).

    ylim_zero starts the y axis at 0 (with room above the highest value or reference);
    xlim_zero starts the x axis at 0; logx draws x on a log scale (sizes over decades).
    """
    with _style():
        fig, ax = plt.subplots(figsize=SIZE)
        groups = sorted(df[hue].unique()) if hue else [None]
        styles = sorted(df[style].unique()) if style else [None]
        colors = sns.color_palette(PALETTE, max(len(groups), 1))
        for linestyle, kind in zip(LINESTYLES, styles):
            for color, group in zip(colors, groups):
                part = df if group is None else df[df[hue] == group]
                part = part if kind is None else part[part[style] == kind]
                if not len(part):
                    continue
                part = part.sort_values(x)
                label = None if group is None else '%s' % group
                if kind is not None:
                    label = '%s: %s' % (kind, label)
                ax.plot(part[x], part[y], color=color, linewidth=1.4, linestyle=linestyle,
                        marker='o', markersize=2.5, label=label)
        _reference(ax, reference, reference_label)
        if ylim_zero:
            top = max([df[y].max() if len(df) else 0, reference or 0])
            ax.set_ylim(0, top * 1.15 if top > 0 else 1)
        if logx:
            ax.set_xscale('log')
        elif xlim_zero:
            ax.set_xlim(left=0)
        _finish(ax, title, xlabel, ylabel, legend_title=hue)
        return save(fig, figures_dir, name)


def measured_vs_configured(df, configured, measured, figures_dir, name,
                           title, xlabel, ylabel, hue=None):
    """Scatter of measured against configured values with the identity line.

    One scatter call per hue value (in order of appearance, as seaborn orders them), so
    each group is its own labelled series on the axes.
    """
    with _style():
        fig, ax = plt.subplots(figsize=(4.0, 3.4))
        groups = list(pd.unique(df[hue])) if hue else [None]
        colors = sns.color_palette(PALETTE, max(len(groups), 1))
        for color, group in zip(colors, groups):
            part = df if group is None else df[df[hue] == group]
            sns.scatterplot(data=part, x=configured, y=measured, color=color, ax=ax, s=25,
                            label=None if group is None else '%s' % group)
        top = max(df[configured].max(), df[measured].max()) * 1.1
        ax.plot([0, top], [0, top], color='0.3', linestyle='--',
                linewidth=1, label='measured = configured')
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        _finish(ax, title, xlabel, ylabel, legend_title=hue)
        return save(fig, figures_dir, name)


def bars_with_spread(df, x, y, figures_dir, name, title, xlabel, ylabel,
                     reference=None, reference_label='configured'):
    """Mean of y per x as bars, sd across repetitions as error bars, dots."""
    with _style():
        order = sorted(df[x].unique(), key=str)
        fig, ax = plt.subplots(figsize=(min(2.6 + 1.1 * len(order), SIZE[0]),
                                        SIZE[1]))
        color = sns.color_palette(PALETTE)[0]
        sns.barplot(data=df, x=x, y=y, order=order, errorbar='sd',
                    color=color, alpha=0.6, capsize=0.1, ax=ax, width=0.5,
                    label='mean ± sd')
        for i, category in enumerate(order):   # fixed offsets, no random jitter
            values = df[df[x] == category][y].to_numpy()
            offsets = np.linspace(-0.15, 0.15, len(values)) \
                if len(values) > 1 else np.zeros(len(values))
            ax.scatter(i + offsets, values, color='0.15', s=12, zorder=3,
                       label='repetitions')
        _reference(ax, reference, reference_label)
        top = max([df[y].max() if len(df) else 0, reference or 0])
        ax.set_ylim(0, top * 1.15 if top > 0 else 1)
        ax.set_xlim(-0.7, len(order) - 0.3)
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles))     # one entry per label
        ax.legend(unique.values(), unique.keys(), frameon=False,
                  loc='upper left', bbox_to_anchor=(1.01, 1.0))
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        return save(fig, figures_dir, name, categories=True)


def sim_against_emu(df, emu, sim, figures_dir, name, title, xlabel, ylabel, hue=None,
                    marked=None, marked_label='marked', band=0.15):
    """Simulated against emulated values on log axes, the line y = x and the +-band lines.

    One colour per hue value; rows whose marked column is True are drawn as crosses
    labelled '<hue>, <marked_label>' (e.g. the points the emulation was CPU-bound at), so
    they read apart from the rest. Values must be above 0 (log axes: per-operation times
    span decades). The band is one line with a break, so it is one legend entry.
    """
    from matplotlib import ticker
    with _style():
        fig, ax = plt.subplots(figsize=(4.8, 3.4))
        groups = list(pd.unique(df[hue])) if hue else [None]
        colors = sns.color_palette(PALETTE, max(len(groups), 1))
        flags = df[marked].fillna(False).astype(bool) if marked else \
            pd.Series(False, index=df.index)
        for color, group in zip(colors, groups):
            part = df if group is None else df[df[hue] == group]
            for flag, marker in ((False, 'o'), (True, 'x')):
                rows = part[flags.loc[part.index] == flag]
                if not len(rows):
                    continue
                label = '' if group is None else '%s' % group
                if flag:
                    label = '%s, %s' % (label, marked_label) if label else marked_label
                ax.scatter(rows[emu], rows[sim], color=color, marker=marker, s=25,
                           zorder=3, label=label or None)
        values = pd.concat([df[emu], df[sim]]).astype(float)
        low = values.min() / 1.5 if len(values) else 0.1
        high = values.max() * 1.5 if len(values) else 1.0
        ax.plot([low, high], [low, high], color='0.3', linestyle='--', linewidth=1,
                label='simulated = emulated')
        ax.plot([low, high, np.nan, low, high],
                [low * (1 + band), high * (1 + band), np.nan, low * (1 - band),
                 high * (1 - band)], color='0.55', linestyle=':', linewidth=1,
                label='±%g %%' % (band * 100))
        ax.set_xscale('log')
        ax.set_yscale('log')
        for axis in (ax.xaxis, ax.yaxis):     # ticks at 1, 2, 5 x 10^k, written plainly
            axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: '%g' % v))
            axis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        _finish(ax, title, xlabel, ylabel)
        return save(fig, figures_dir, name)
