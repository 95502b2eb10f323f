"""report.md of ``analysis.crosscheck``: the two runs, the target, and why rows miss it.

A cross-validation is only as good as what stands behind each side, so the report first
names both runs as their manifests recorded them (folder, status, commit, machine, scale),
then the parameters in which they differ. For every row outside the target it gives the
reasons ``analysis.crosscheck_tables`` detected mechanically (a CPU-bound emulation, failed
operations, missing client summaries, different operation counts, a difference inside the
emulation's own spread); where it detected none, it leaves one clearly marked line for the
lead to explain, rather than a guess.
"""

import json

from analysis import crosscheck_tables as xt, inputs, machine
from analysis.tables import nan

LEAD = '**[to be explained by the lead]** no mechanical reason detected'
# run parameters that differ between any emulation and any simulation by their nature
_SIDE_PARAMS = {'backend', 'out', 'workdir', 'sim_cost', 'sim_costs', 'sim_cores', 'cli',
                'dry_run', 'keep_going'}
_TIME = (('emu_time_per_op_ms', 'emu ms/op'), ('emu_time_per_op_ms_sd', 'sd'),
         ('emu_time_per_op_ms_min', 'min'), ('emu_time_per_op_ms_max', 'max'),
         ('emu_repeats', 'n emu'), ('sim_time_per_op_ms', 'sim ms/op'),
         ('sim_repeats', 'n sim'), ('sim_over_emu', 'sim/emu'),
         ('emu_spread_pct', 'emu spread %'),
         ('within_target', 'within 15 %'), ('beyond_emu_spread', 'beyond emu spread'),
         ('emu_cpu_bound_repeats', 'emu CPU-bound reps'),
         ('emu_cpu_verdicts', 'emu CPU verdicts'), ('emu_cpu_busy', 'emu CPU busy'))
_KEY = (('part', 'part'), ('variant', 'variant'), ('servers', 'servers'),
        ('concurrent_clients', 'clients'), ('fileset', 'file set'))


def _cell(v):
    """A table cell: 4 significant digits, yes/no, '-' for missing."""
    if isinstance(v, bool):
        return 'yes' if v else 'no'
    if nan(v):
        return '-'
    if isinstance(v, float):
        return '%.4g' % v
    return str(v)


def markdown(df, columns):
    """Return Markdown table lines of df's columns ((name, header) pairs)."""
    if df is None or df.empty:
        return ['(none)']
    lines = ['| %s |' % ' | '.join(h for _, h in columns),
             '|%s|' % '|'.join('---' for _ in columns)]
    for r in df[[c for c, _ in columns]].itertuples(index=False):
        lines.append('| %s |' % ' | '.join(_cell(v) for v in r))
    return lines


def _commit(manifest):
    """'0123456789ab' (+ ' (dirty)') of the manifest's git record."""
    git = inputs.as_dict(inputs.as_dict(manifest.get('provenance')).get('git'))
    revision = git.get('revision')
    if not revision:
        return 'not recorded'
    return '`%s`%s' % (str(revision)[:12], ' (uncommitted changes)' if git.get('dirty') else '')


def _cpu(manifest):
    """'mean busy 0.52, saturated False' from the manifest's CPU record (modelled in sim)."""
    cpu = inputs.as_dict(manifest.get('cpu'))
    if not inputs.is_number(cpu.get('mean')):
        return 'not measured'
    return 'mean busy %.2f, saturated %s' % (cpu['mean'], cpu.get('saturated'))


def _runs(data):
    """The table naming both runs, and the simulation's model and processing cost."""
    emu, sim = data['manifests']
    rows = [('folder', '`%s`' % data['dirs'][0], '`%s`' % data['dirs'][1]),
            ('status', inputs.run_status(emu), inputs.run_status(sim)),
            ('commit', _commit(emu), _commit(sim)),
            ('machine', machine.describe(emu), machine.describe(sim)),
            ('scale, repetitions', '%s, %s' % (emu['params'].get('scale'),
                                               emu['params'].get('repeat')),
             '%s, %s' % (sim['params'].get('scale'), sim['params'].get('repeat'))),
            ('CPU over the run', _cpu(emu), _cpu(sim)),
            ('started', emu.get('started_at', '-'), sim.get('started_at', '-'))]
    lines = ['| | emulation | simulation |', '|---|---|---|']
    lines += ['| %s | %s | %s |' % (k, a, b) for k, a, b in rows]
    model = inputs.as_dict(inputs.as_dict(sim.get('mechanisms')).get('network_model'))
    processing = model.get('processing', 'not recorded')
    lines += ['', 'Simulated processing cost: %s.' % (
        json.dumps(processing, sort_keys=True) if isinstance(processing, dict)
        else processing)]
    late = data.get('lateness_us')
    if late is not None:
        lines += ['', 'Emulated links\' own error: the delay daemons released held packets '
                  '%.0f us late on average (their stats over the whole run). The simulator '
                  'does not model it (it is the emulator\'s, not the system\'s); a --sim-cost '
                  'fitted by analysis.sim_cost holds it inside its per-callback figure, so '
                  'the simulation predicts the emulation, lateness included.' % late]
    differ = sorted(k for k in set(emu['params']) | set(sim['params'])
                    if k not in _SIDE_PARAMS and emu['params'].get(k) != sim['params'].get(k))
    lines += ['', 'Parameters that differ: %s.' % ('; '.join(
        '%s emulation %s, simulation %s' % (k, emu['params'].get(k), sim['params'].get(k))
        for k in differ) if differ else 'none (besides the backend and its options)')]
    return lines


def _spread(beyond, n):
    """Whether a row differs by more than the emulation's spread, in words."""
    if nan(beyond):
        return 'no emulation spread to compare with (%s emulated repetition(s))' % n
    return 'beyond the emulation\'s spread' if beyond else 'within the emulation\'s spread'


def _why(rows, name, columns):
    """One bullet per row outside the target: ratio, spread, reasons (or the lead's line).

    columns: (ratio, beyond spread, emulated repetitions, reasons)."""
    lines = []
    for _, r in rows.iterrows():
        ratio, beyond, n, why = (r[c] for c in columns)
        why = why if isinstance(why, str) and why else LEAD
        lines.append('- %s: sim/emu %s, %s. %s.' % (name(r), _cell(ratio),
                                                     _spread(beyond, n), why))
    return lines or ['(none)']


def _dht8(data):
    """The dht8 sections."""
    table = data['crosscheck_dht8']
    free = table[table['section'] == xt.UNCONGESTED] if len(table) else table
    bound = table[table['section'] == xt.CPU_BOUND] if len(table) else table
    outside = table[table['within_target'] != True] if len(table) else table  # noqa: E712
    lines = ['## Target', '', summary(data) + '.', '',
             'Target (issue 13): at the uncongested points (no emulated repetition '
             'CPU-bound: judged by the emulated run\'s CPU samples inside a point\'s timed '
             'part or, when the part is shorter than a sample, by the runner\'s reading of '
             'the CPU nanoseconds at its start and end, with the same bar; "emu CPU busy" is '
             'the mean busy share), simulated time per operation within %g %% of emulated, '
             '|sim/emu - 1| <= %g. The emulation\'s spread is the range of its '
             'repetitions ("emu spread %%": max - min over the mean, beside the ratio); '
             '"beyond emu spread" says whether the simulated mean lies outside '
             'it (- with one repetition): a miss inside it is within the emulation\'s own '
             'noise. Compared: parts %s; capture does not run in '
             'simulation and failover points differ only by a fault kind points.csv does not '
             'carry.' % (xt.TARGET * 100, xt.TARGET, ', '.join(xt.DHT8_PARTS)),
             '', '## Uncongested configurations', '']
    lines += markdown(free, _KEY + _TIME)
    lines += ['', '## CPU-bound in the emulation (set apart)', '',
              'The emulation measured the machine here, not the network; the target does '
              'not apply.', '']
    lines += markdown(bound, _KEY + _TIME)
    lines += ['', '## Outside the target: why', '']
    lines += _why(outside, xt.label, ('sim_over_emu', 'beyond_emu_spread', 'emu_repeats',
                                      'why'))
    lines += ['', '## Median latency (p50 of every operation of a point, mean over '
              'repetitions)', '']
    lines += markdown(table, _KEY + (('emu_lat_p50_ms', 'emu p50 ms'),
                                     ('sim_lat_p50_ms', 'sim p50 ms'),
                                     ('lat_p50_sim_over_emu', 'sim/emu'),
                                     ('emu_failed', 'failed emu'), ('sim_failed', 'failed sim'),
                                     ('emu_missing_clients', 'missing emu'),
                                     ('sim_missing_clients', 'missing sim')))
    lines += ['', '## Configurations in one run only (not compared)', '']
    lines += markdown(data['crosscheck_dht8_unmatched'], (('only_in', 'only in'),) + _KEY)
    return lines


def _fidelity(data):
    """The fidelity sections."""
    table = data['crosscheck_fidelity']
    measured = table[table['sim'].notna()] if len(table) else table
    outside = table[table['within_15pct'] == False] if len(table) else table  # noqa: E712
    lines = ['## Link model against link emulation', '', summary(data) + '.', '',
             'Per measure and configured point: configured, emulated (mean over '
             'repetitions, sd), simulated, and the ratios. A row the simulation did not '
             'measure says "%s".' % xt.NOT_SIMULATED, '']
    lines += markdown(table, (('measure', 'measure'), ('shape', 'shape'), ('kind', 'kind'),
                              ('setting', 'setting'), ('configured', 'configured'),
                              ('emu', 'emu'), ('emu_sd', 'sd'), ('emu_repeats', 'n emu'),
                              ('sim', 'sim'), ('sim_over_emu', 'sim/emu'),
                              ('emu_over_configured', 'emu/conf'),
                              ('sim_over_configured', 'sim/conf'),
                              ('beyond_emu_spread', 'beyond emu spread'), ('note', 'note')))
    lines += ['', '## More than 15 % apart: why', '']
    lines += _why(outside, lambda r: '%s, %s %s, %s' % (r['measure'], r['shape'], r['kind'],
                                                        r['setting']),
                  ('sim_over_emu', 'beyond_emu_spread', 'emu_repeats', 'note'))
    lines += ['', '%d of %d rows measured by the simulation.' % (len(measured), len(table))]
    return lines


def summary(data):
    """The one-line result printed by the command and heading the report."""
    if 'crosscheck_dht8' in data:
        return 'dht8: ' + xt.dht8_summary(data['crosscheck_dht8'])
    table = data['crosscheck_fidelity']
    both = table[table['sim_over_emu'].notna()] if len(table) else table
    return 'fidelity: %d of %d row(s) with both figures within 15 %% (sim/emu)' % (
        int(both['within_15pct'].astype(bool).sum()) if len(both) else 0, len(both))


def report(data):
    """Return report.md text."""
    lines = ['# Simulation against emulation: %s' % data['experiment'], '',
             'Built by `python -m analysis.crosscheck` from the two runs\' manifest.json and '
             'tables/*.csv, and the emulation\'s delay-daemon stats, only.', '']
    lines += _runs(data) + ['']
    lines += _dht8(data) if 'crosscheck_dht8' in data else _fidelity(data)
    lines += ['', '## Figures', '']
    lines += ['![%s](figures/%s.png)' % (name, name) for name in sorted(data['figures'])] \
        or ['(none: no row has both figures above 0)']
    return '\n'.join(lines) + '\n'
