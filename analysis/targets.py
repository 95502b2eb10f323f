"""The one format of ``tables/targets.csv``, which every experiment's analysis writes.

A target is a row of five columns: ``target`` (what is judged, in words), ``measured`` (the
number this run measured, empty when there is none: data, never a sentence, so that
``repronet compare`` and the reproduce report can read it), ``goal`` (the bar, in words:
``>= 0.9``, ``0 failed``, ``-`` for a figure reported with no bar), ``verdict`` (one of
:data:`VERDICTS`) and ``notes`` (what stands beside the verdict: failed operations, a
CPU-bound point, the figures behind the number). Every experiment builds its rows with
:func:`row` and its table with :func:`frame`, so a verdict outside the list or a
sentence in ``measured`` fails at analysis time, not in a reader; ``analysis.seeds``
stacks the experiments' tables by these columns, and :func:`text` prints them.
"""

import pathlib

import pandas as pd

from analysis.tables import cell, nan

COLUMNS = ['target', 'measured', 'goal', 'verdict', 'notes']
VERDICTS = ('met', 'not met', 'no data', 'reported')


def _number(value):
    """value as a float, None when missing; a ValueError for anything that is not a number."""
    if nan(value):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:                                    # numpy scalars
            value = value.item()
        except AttributeError:
            raise ValueError('a target\'s measured value must be a number, not %r' % (value,))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError('a target\'s measured value must be a number, not %r' % (value,))
    return float(value)


def row(target, measured, goal, verdict, notes=()):
    """One target as a dict of :data:`COLUMNS`; notes a string or a list of strings
    (joined by '; ', empty ones left out)."""
    if verdict not in VERDICTS:
        raise ValueError('a target\'s verdict must be one of %s, not %r'
                         % (', '.join(VERDICTS), verdict))
    if not isinstance(notes, str):
        notes = '; '.join(n for n in notes if n)
    return {'target': str(target), 'measured': _number(measured), 'goal': str(goal),
            'verdict': verdict, 'notes': notes}


def frame(rows):
    """The targets table of rows (each from :func:`row`), in :data:`COLUMNS`."""
    return pd.DataFrame([row(**r) for r in rows], columns=COLUMNS)


def judge(value, ok, failed=0, bound=False, notes=()):
    """(verdict, notes) of a measured value against its bar: 'no data' without a value,
    never 'met' when operations failed (notes say how many), 'CPU-bound' noted."""
    notes = list(notes)
    if failed:
        notes.append('%d failed operations' % failed)
    if bound:
        notes.append('CPU-bound')
    if nan(value):
        return 'no data', '; '.join(notes)
    return ('met' if ok and not failed else 'not met'), '; '.join(notes)


def met_word(met):
    """The verdict of a yes/no judgement: 'met', 'not met', or 'no data' for None."""
    return 'no data' if met is None else 'met' if met else 'not met'


def read(run_dir, dtype=None):
    """The targets table a built run wrote (keep_default_na off: an empty cell
    is '', so a measured column with one reads as strings)."""
    df = pd.read_csv(pathlib.Path(run_dir) / 'tables' / 'targets.csv', dtype=dtype,
                     keep_default_na=False)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError('%s/tables/targets.csv is in an older format (no %s column): '
                         'rebuild it with `repronet analyse %s`'
                         % (run_dir, ', '.join(missing), run_dir))
    return df


def text(run_dir, experiment, widths=(62, 10, 6)):
    """The targets of a built run (tables/targets.csv) as lines for the terminal."""
    lines = ['%s targets (ratios measured in this run):' % experiment]
    for r in read(run_dir).itertuples():
        lines.append('  %-*s %*s  goal %-*s %s%s' % (
            widths[0], r.target, widths[1],
            cell(None if r.measured == '' else float(r.measured), '%.3f'), widths[2], r.goal,
            r.verdict, ' (%s)' % r.notes if r.notes else ''))
    return '\n'.join(lines)
