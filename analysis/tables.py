"""Tidy tables, written so that the same logs always give byte-identical CSV files.

Every experiment's analysis writes its tables through :func:`write_tables`: no index column,
the experiment's fixed float format and '\\n' line ends, whatever the platform. That is what
lets ``python -m analysis RUN_DIR`` promise identical tables on regeneration.
"""

import math
import pathlib

import pandas as pd


def write_tables(run_dir, tables, float_format):
    """Write each DataFrame of tables ({name: df}) as RUN_DIR/tables/<name>.csv."""
    folder = pathlib.Path(run_dir) / 'tables'
    folder.mkdir(exist_ok=True)
    for name, df in tables.items():
        df.to_csv(folder / ('%s.csv' % name), index=False, float_format=float_format,
                  lineterminator='\n')


def nan(v):
    """True when v is None or NaN (a cell a table or report shows as a dash)."""
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA


def cell(v, fmt='%.3f'):
    """Format a number for a report, or return a dash for a missing one."""
    return '-' if nan(v) else fmt % v


def link_late_points(manifest, points):
    """One row per point of the delay daemons' lateness (manifest ``link_holds['points']``,
    repronet.emu.linkemu_holds.by_seed), with the point's own columns from ``points`` (a
    DataFrame with a ``point`` column) beside it; empty without daemons or the split."""
    record = manifest.get('link_holds')
    split = record.get('points') if isinstance(record, dict) else None
    rows = [{'point': p.get('point'), 'seed': p.get('seed'), 'released': p.get('released'),
             'late_us_mean': p.get('late_us_mean'),
             'late_read_us_mean': p.get('late_read_us_mean'),
             'late_us_p50_under': (p.get('late_us_bounds') or {}).get('p50'),
             'late_us_p99_under': (p.get('late_us_bounds') or {}).get('p99')}
            for p in split or () if isinstance(p, dict)]
    late = pd.DataFrame(rows)
    if late.empty or points is None or points.empty or 'point' not in points:
        return late
    return points.merge(late, on='point', how='right')
