"""Two results folders of the same experiment, side by side (``repronet compare A B``).

The question it answers: run twice, or on two machines, did the experiment give the same
numbers, up to the noise the experiment itself shows?  It reads only ``manifest.json`` and
``tables/*.csv`` of each folder (what ``repronet analyse`` wrote), never the emulator.

For each table both folders have:

- key columns: the numeric columns named after a run parameter (``manifest['params']``) or
  a sweep value (a key of the point dicts in ``logs/points.jsonl``), columns whose name
  starts with ``configured``, and the text columns that are labels: no more distinct values
  over both runs than the longer table has rows (a text column with more, e.g. fidelity's
  ``measured`` descriptions that differ in every run, is listed as not compared);
- the repetition columns ``point``, ``repetition`` and ``seed`` are dropped: the rows of one
  folder that share a key are the repetitions of that configuration (a table without key
  columns is one group: all its rows);
- every other numeric column is a figure: per key, its mean in A, its mean in B, the ratio
  B/A, and each side's SPREAD, the sample standard deviation (n - 1) of the figure over the
  repetitions in that folder (so a folder needs at least two repetitions to have one);
- a difference is FLAGGED when |mean B - mean A| exceeds the sum of the two standard
  deviations, i.e. when it is larger than what the repetitions of either run vary by.  With a
  single repetition on both sides there is no spread and nothing is flagged ("n/a").

Rows whose key is in one folder only are counted, not compared.  Refused, with one sentence
(``CompareError``, exit 2): a folder that does not exist or cannot be read (the same sentence
as ``repronet analyse``: ``results.folder_problem``), a folder that is not a results folder (no
readable manifest), folders of
different experiments, a folder without tables (not analysed yet).
"""

import dataclasses
import json
import math
import pathlib

import pandas as pd

from repronet.run import results

REPEAT_COLUMNS = ('point', 'repetition', 'seed')
SPREAD = 'sample standard deviation over repetitions (n-1)'


class CompareError(ValueError):
    """The two folders cannot be compared (one sentence)."""


@dataclasses.dataclass
class Figure:
    """One figure of one key: both runs' means, spreads and repetition counts."""

    table: str
    key: str
    column: str
    mean_a: float
    sd_a: float
    n_a: int
    mean_b: float
    sd_b: float
    n_b: int

    @property
    def ratio(self):
        """B / A (nan when A is 0 or missing)."""
        if self.mean_a in (0, None) or _nan(self.mean_a) or _nan(self.mean_b):
            return float('nan')
        return self.mean_b / self.mean_a

    @property
    def spread(self):
        """The allowance: sd A + sd B over the sides that have one, or None."""
        sds = [sd for sd in (self.sd_a, self.sd_b) if not _nan(sd)]
        return sum(sds) if sds else None

    @property
    def flagged(self):
        """True when the difference exceeds the spread (None: no spread known)."""
        if self.spread is None or _nan(self.mean_a) or _nan(self.mean_b):
            return None
        return abs(self.mean_b - self.mean_a) > self.spread


@dataclasses.dataclass
class Comparison:
    """What compare() found: figures, and what could not be matched."""

    experiment: str
    run_a: str
    run_b: str
    figures: list
    only_a: dict        # table -> keys found only in A (tables only in A: ['*'])
    only_b: dict
    param_diffs: dict   # param -> (A value, B value)
    texts: dict = dataclasses.field(default_factory=dict)   # table -> text result columns
    columns_a: dict = dataclasses.field(default_factory=dict)   # table -> columns only in A
    columns_b: dict = dataclasses.field(default_factory=dict)


def _nan(x):
    """True for None and NaN."""
    return x is None or (isinstance(x, float) and math.isnan(x))


def _manifest(run_dir):
    """Return the manifest dict of a results folder, or raise CompareError."""
    path = pathlib.Path(run_dir) / 'manifest.json'
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        raise CompareError('%s is not a results folder (no readable manifest.json)'
                           % run_dir) from None
    if not isinstance(manifest, dict) or not manifest.get('experiment'):
        raise CompareError('%s is not a results folder (its manifest.json names no '
                           'experiment)' % run_dir)
    return manifest


def _tables(run_dir):
    """Return {name: DataFrame} of RUN_DIR/tables/*.csv, or raise CompareError."""
    paths = sorted((pathlib.Path(run_dir) / 'tables').glob('*.csv'))
    if not paths:
        raise CompareError('%s has no tables/*.csv; run "repronet analyse %s" first'
                           % (run_dir, run_dir))
    out = {}
    for path in paths:
        try:
            out[path.stem] = pd.read_csv(path)
        except pd.errors.EmptyDataError:
            out[path.stem] = pd.DataFrame()
        except (OSError, ValueError) as e:
            raise CompareError('%s cannot be read as CSV (%s)' % (path, e)) from None
    return out


def _sweep_names(run_dir):
    """Return the sweep value names of a run (keys of its point dicts)."""
    names = set()
    try:
        with open(pathlib.Path(run_dir) / 'logs' / 'points.jsonl') as f:
            for line in f:
                try:
                    point = json.loads(line).get('point')
                except (ValueError, AttributeError):
                    continue
                if isinstance(point, dict):
                    names |= set(point)
    except OSError:
        pass
    return names


def key_columns(df_a, df_b, names):
    """Return (key columns, text result columns) of a table present in both runs."""
    keys, texts = [], []
    for col in df_a.columns:
        if col in REPEAT_COLUMNS or col not in df_b.columns:
            continue
        numeric = (pd.api.types.is_numeric_dtype(df_a[col])
                   and pd.api.types.is_numeric_dtype(df_b[col]))
        if numeric and (col in names or str(col).startswith('configured')):
            keys.append(col)
        elif not numeric:
            distinct = set(df_a[col].astype(str)) | set(df_b[col].astype(str))
            if len(distinct) <= max(len(df_a), len(df_b)):
                keys.append(col)
            else:       # a description that differs in every run, not a label
                texts.append(col)
    return keys, texts


def _groups(df, keys, figures):
    """Return {key text: {figure: (mean, sd, n)}} for one table of one run."""
    out = {}
    if df.empty:
        return out
    by = keys[0] if len(keys) == 1 else keys    # one key: scalar group values
    grouped = df.groupby(by, dropna=False, sort=True) if keys else [((), df)]
    for values, rows in grouped:
        values = values if isinstance(values, tuple) else (values,)
        text = ' '.join('%s=%s' % (k, v) for k, v in zip(keys, values)) or '(all rows)'
        stats = {}
        for col in figures:
            column = rows[col].dropna()
            n = len(column)
            mean = float(column.mean()) if n else float('nan')
            sd = float(column.std(ddof=1)) if n > 1 else float('nan')
            stats[col] = (mean, sd, n)
        out[text] = stats
    return out


def compare(run_a, run_b):
    """Compare two results folders; return a Comparison or raise CompareError."""
    for run in (run_a, run_b):
        problem = results.folder_problem(run)
        if problem:
            raise CompareError(problem)
    man_a, man_b = _manifest(run_a), _manifest(run_b)
    if man_a['experiment'] != man_b['experiment']:
        raise CompareError('%s is a %s run and %s a %s run; compare runs of the same '
                           'experiment' % (run_a, man_a['experiment'], run_b,
                                           man_b['experiment']))
    tables_a, tables_b = _tables(run_a), _tables(run_b)
    params_a = man_a.get('params') if isinstance(man_a.get('params'), dict) else {}
    params_b = man_b.get('params') if isinstance(man_b.get('params'), dict) else {}
    names = (set(params_a) | set(params_b) | _sweep_names(run_a) | _sweep_names(run_b))
    names -= set(REPEAT_COLUMNS)
    result = Comparison(man_a['experiment'], str(run_a), str(run_b), [],
                        {t: ['*'] for t in tables_a if t not in tables_b},
                        {t: ['*'] for t in tables_b if t not in tables_a},
                        {k: (params_a.get(k), params_b.get(k))
                         for k in sorted(set(params_a) | set(params_b))
                         if k != 'out' and params_a.get(k) != params_b.get(k)})
    for table in sorted(set(tables_a) & set(tables_b)):
        df_a, df_b = tables_a[table], tables_b[table]
        for side, mine, other in (('a', df_a, df_b), ('b', df_b, df_a)):
            alone = [c for c in mine.columns if c not in other.columns]
            if alone:   # renamed or new columns (e.g. analysis of another version)
                getattr(result, 'columns_' + side)[table] = alone
        keys, texts = key_columns(df_a, df_b, names)
        if texts:
            result.texts[table] = texts
        figures = [c for c in df_a.columns if c in df_b.columns and c not in keys
                   and c not in REPEAT_COLUMNS and c not in texts
                   and pd.api.types.is_numeric_dtype(df_a[c])
                   and pd.api.types.is_numeric_dtype(df_b[c])]
        a, b = _groups(df_a, keys, figures), _groups(df_b, keys, figures)
        for key in sorted(set(a) & set(b)):
            for col in figures:
                result.figures.append(Figure(table, key, col, *a[key][col], *b[key][col]))
        if set(a) - set(b):
            result.only_a[table] = sorted(set(a) - set(b))
        if set(b) - set(a):
            result.only_b[table] = sorted(set(b) - set(a))
    return result


def _num(x):
    """Format a number compactly ('-' for missing)."""
    return '-' if _nan(x) else '%.4g' % x


def format_comparison(c):
    """Return the side-by-side text of a Comparison."""
    lines = ['%s: A = %s, B = %s' % (c.experiment, c.run_a, c.run_b),
             'spread: %s in each run; "*" marks |B - A| > sd A + sd B'
             % SPREAD]
    for k, (va, vb) in c.param_diffs.items():
        lines.append('parameter %s differs: A %s, B %s' % (k, va, vb))
    header = ('key', 'figure', 'A', 'sd A', 'n A', 'B', 'sd B', 'n B', 'B/A', 'exceeds')
    table = None
    rows = []
    for f in c.figures + [None]:
        if table is not None and (f is None or f.table != table):
            lines.append('')
            lines.append('== %s.csv' % table)
            lines.extend(_align([header] + rows))
            rows = []
        if f is None:
            break
        table = f.table
        mark = {True: '*', False: '', None: 'n/a'}[f.flagged]
        rows.append((f.key, f.column, _num(f.mean_a), _num(f.sd_a), str(f.n_a),
                     _num(f.mean_b), _num(f.sd_b), str(f.n_b), _num(f.ratio), mark))
    for table, columns in sorted(c.texts.items()):
        lines.append('text, not compared: %s.csv %s' % (table, ', '.join(columns)))
    for side, only in (('A', c.columns_a), ('B', c.columns_b)):
        for table, columns in sorted(only.items()):
            lines.append('columns only in %s, not compared: %s.csv %s'
                         % (side, table, ', '.join(map(str, columns))))
    for side, only in (('A', c.only_a), ('B', c.only_b)):
        for table, keys in sorted(only.items()):
            what = 'the whole table' if keys == ['*'] else '%d key(s): %s' % (
                len(keys), '; '.join(keys[:3]) + (' ...' if len(keys) > 3 else ''))
            lines.append('only in %s, not compared: %s.csv, %s' % (side, table, what))
    flagged = sum(1 for f in c.figures if f.flagged)
    unknown = sum(1 for f in c.figures if f.flagged is None)
    lines.append('')
    lines.append('%d figure(s) compared, %d differ by more than their spread, %d without '
                 'a spread (one repetition)' % (len(c.figures), flagged, unknown))
    return '\n'.join(lines)


def _align(rows):
    """Return rows as left-aligned text columns."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return ['  '.join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
