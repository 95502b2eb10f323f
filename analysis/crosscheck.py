"""Simulation against emulation, the cross-validation of issue 13:
``python -m analysis.crosscheck EMU_DIR SIM_DIR --out DIR``.

The simulator earns trust where both backends can run: the same experiment, once emulated
(Mininet, real processes) and once simulated (``--backend sim``), and the figures side by
side. Like ``repronet compare`` this reads only each folder's ``manifest.json`` and
``tables/*.csv`` (what ``repronet analyse`` wrote), never logs, never the emulator, so it can
be rerun anywhere. Unlike ``compare`` it knows which side is which and what the target is:
simulated per-operation time within 15 % of emulated, at the points where the emulation was
not CPU-bound (there it measured the machine, not the network).

Which backend made a folder: ``analysis.inputs.backend`` (``params.backend``, else
``mechanisms.backend``, else emulation: folders from before the simulator have neither). Refused with one sentence
(``CrosscheckError``): a folder that is not a results folder, folders of different
experiments, an experiment this module does not cross-check (dht8 and fidelity), EMU_DIR
not an emulation run, SIM_DIR not a simulated run, a folder not analysed yet, an output
folder that is one of the two runs.

Writes into DIR: ``tables/crosscheck_*.csv`` (``analysis.crosscheck_tables`` says what they
hold; written by ``analysis.tables.write_tables``, so a rebuild is byte-identical),
``figures/`` (simulated against emulated with the identity line and the +-15 % band) and
``report.md`` (``analysis.crosscheck_report``: both runs' machines and commits, and for each
row outside the target the reasons that can be seen mechanically).
"""

import json
import pathlib
import sys

import pandas as pd

from analysis import crosscheck_report, crosscheck_tables, figures, inputs
from analysis.tables import write_tables
from repronet.emu.linkemu_holds import weighted_mean
from repronet.usage import UsageParser

FLOAT = '%.6g'
# experiment -> (tables both runs must have, tables read when present)
EXPERIMENTS = {'dht8': (('points',), ()),
               'fidelity': ((), ('rtt', 'loss', 'goodput'))}
BACKEND_NAMES = {'emu': 'an emulation run', 'sim': 'a simulated run'}


class CrosscheckError(ValueError):
    """The two folders cannot be cross-checked; the message is one sentence."""


def _manifest(run_dir, want, option):
    """Return the manifest of a run that must be of backend want, or raise CrosscheckError."""
    try:
        manifest = inputs.read_manifest(run_dir)
    except inputs.InputError as e:
        raise CrosscheckError(str(e)) from None
    found = inputs.backend(manifest)
    if found != want:
        raise CrosscheckError('%s is %s (backend %s in its manifest), but %s must be %s'
                              % (run_dir, BACKEND_NAMES[found], found, option,
                                 BACKEND_NAMES[want]))
    return manifest


def _read(run_dir, name):
    """Return tables/<name>.csv as a DataFrame (empty for an empty file), None if absent."""
    path = pathlib.Path(run_dir) / 'tables' / ('%s.csv' % name)
    if not path.exists():
        return None
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except (OSError, ValueError) as e:
        raise CrosscheckError('%s cannot be read as CSV (%s)' % (path, e)) from None


def _tables(run_dir, experiment):
    """Return {name: DataFrame or None} of the tables a cross-check reads from one run."""
    required, optional = EXPERIMENTS[experiment]
    if not any((pathlib.Path(run_dir) / 'tables').glob('*.csv')):
        raise CrosscheckError('%s has no tables/*.csv; run "repronet analyse %s" first'
                              % (run_dir, run_dir))
    out = {name: _read(run_dir, name) for name in required + optional}
    for name in required:
        if out[name] is None:
            raise CrosscheckError('%s has no tables/%s.csv; run "repronet analyse %s" first'
                                  % (run_dir, name, run_dir))
    return out


def link_lateness_us(run_dir):
    """Mean lateness (us) of an emulated run's delay daemons in releasing held packets,
    weighted by the held packets each let go (``released``, what its mean is over; logs
    without it: ``accepted``) (the last stats record of each, logs/linkdelay-*.jsonl: the
    daemon's stats are cumulative), or None."""
    finals = []
    for path in sorted(pathlib.Path(run_dir, 'logs').glob('linkdelay-*.jsonl')):
        last = None
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get('event') == 'stats' and rec.get('late_us_mean') is not None:
                    last = rec
        if last is not None:
            finals.append((last.get('released', last.get('accepted')), last['late_us_mean']))
    return weighted_mean(finals)


def load(emu_dir, sim_dir):
    """Return (emu manifest, sim manifest, emu tables, sim tables), or raise CrosscheckError."""
    emu = _manifest(emu_dir, 'emu', 'EMU_DIR')
    sim = _manifest(sim_dir, 'sim', 'SIM_DIR')
    if emu['experiment'] != sim['experiment']:
        raise CrosscheckError('%s is a %s run and %s a %s run; cross-check two runs of the '
                              'same experiment' % (emu_dir, emu['experiment'], sim_dir,
                                                   sim['experiment']))
    if emu['experiment'] not in EXPERIMENTS:
        raise CrosscheckError('crosscheck knows %s, not %s (the experiment of %s)' % (
            ' and '.join(sorted(EXPERIMENTS)), emu['experiment'], emu_dir))
    return emu, sim, _tables(emu_dir, emu['experiment']), _tables(sim_dir, sim['experiment'])


def tables(emu_dir, sim_dir):
    """Return {'experiment', 'manifests', and each crosscheck table by name}."""
    emu, sim, emu_t, sim_t = load(emu_dir, sim_dir)
    data = {'experiment': emu['experiment'], 'manifests': (emu, sim),
            'dirs': (str(emu_dir), str(sim_dir)), 'lateness_us': link_lateness_us(emu_dir)}
    if emu['experiment'] == 'dht8':
        data['crosscheck_dht8'], data['crosscheck_dht8_unmatched'] = \
            crosscheck_tables.dht8_table(emu_t['points'], sim_t['points'],
                                         (sim.get('params') or {}).get('sim_costs') or {})
    else:
        data['crosscheck_fidelity'] = crosscheck_tables.fidelity_table(
            {k: v for k, v in emu_t.items() if v is not None},
            {k: v for k, v in sim_t.items() if v is not None})
    return data


def _plottable(df, emu, sim):
    """Rows with both values positive (the figures use log axes)."""
    if df.empty:
        return df
    both = pd.to_numeric(df[emu], errors='coerce').gt(0) & \
        pd.to_numeric(df[sim], errors='coerce').gt(0)
    return df[both]


def draw(data, figures_dir):
    """Draw the simulated-against-emulated figures; return {name: figures.Saved}."""
    drawn = {}
    band = crosscheck_tables.TARGET
    if 'crosscheck_dht8' in data:
        df = data['crosscheck_dht8']
        df = df.assign(what='part ' + df['part'].astype(str),
                       bound=df['section'] == crosscheck_tables.CPU_BOUND) if len(df) else df
        for name, emu, sim, title in (
                ('crosscheck_time_per_op', 'emu_time_per_op_ms', 'sim_time_per_op_ms',
                 'Time per operation'),
                ('crosscheck_lat_p50', 'emu_lat_p50_ms', 'sim_lat_p50_ms',
                 'Median operation latency')):
            rows = _plottable(df, emu, sim)
            if len(rows):
                drawn[name] = figures.sim_against_emu(
                    rows, emu, sim, figures_dir, name, title, 'emulated (ms)',
                    'simulated (ms)', hue='what', marked='bound',
                    marked_label='emulation CPU-bound', band=band)
    if 'crosscheck_fidelity' in data:
        rows = _plottable(data['crosscheck_fidelity'], 'emu', 'sim')
        if len(rows):
            drawn['crosscheck_fidelity'] = figures.sim_against_emu(
                rows, 'emu', 'sim', figures_dir, 'crosscheck_fidelity',
                'Link model against link emulation', 'emulated (each in its unit)',
                'simulated (each in its unit)', hue='measure', band=band)
    return drawn


def build(emu_dir, sim_dir, out_dir):
    """Write DIR/tables/crosscheck_*.csv, DIR/figures/ and DIR/report.md; return the tables
    (and under 'figures' what each figure drew)."""
    out_dir = pathlib.Path(out_dir)
    for run_dir in (emu_dir, sim_dir):
        if out_dir.resolve() == pathlib.Path(run_dir).resolve():
            raise CrosscheckError('--out %s is one of the two runs; give a folder of its own '
                                  'so their report.md stays theirs' % out_dir)
    data = tables(emu_dir, sim_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_tables(out_dir, {k: v for k, v in data.items() if k.startswith('crosscheck_')},
                 FLOAT)
    data['figures'] = draw(data, out_dir / 'figures')
    (out_dir / 'report.md').write_text(crosscheck_report.report(data))
    return data


def main(argv=None):
    """Command line: cross-check, print the summary; exit 1 with one sentence on refusal."""
    parser = UsageParser(
        tool='analysis.crosscheck',
        prog='python -m analysis.crosscheck',
        description='Simulated run against emulated run of one experiment (dht8, fidelity): '
                    'tables, figures and report.md in --out.')
    parser.add_argument('emu_dir', metavar='EMU_DIR', help='results folder of the emulation')
    parser.add_argument('sim_dir', metavar='SIM_DIR', help='results folder of the simulation')
    parser.add_argument('--out', required=True, metavar='DIR',
                        help='folder for tables/, figures/ and report.md')
    args = parser.parse_args(argv)
    try:
        data = build(args.emu_dir, args.sim_dir, args.out)
    except CrosscheckError as e:
        print('crosscheck: %s' % e, file=sys.stderr)
        return 1
    print(crosscheck_report.summary(data))
    print('crosscheck: tables, figures and report.md in %s' % args.out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
