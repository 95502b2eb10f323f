"""The report of ``repronet reproduce``: every seed's experiment in one page.

A reproduce folder holds one results folder per seed experiment (``dht8/``, ``kvload/``,
...) and its own manifest (experiment ``seeds``: the flags, each experiment's command,
exit status and times). This reads only those, like every analysis, and writes:

- ``tables/runs.csv``: one row per experiment (seed, status, exit, seconds against the
  estimate, points done);
- ``tables/targets.csv``: every experiment's ``tables/targets.csv`` stacked (the one format
  of ``analysis.targets``: target, measured, goal, verdict, notes) behind its seed and name;
  an experiment folder written before that format says so and is left out until
  ``repronet analyse ROOT/NAME`` rebuilds it;
- ``report.md``: the machine and revision once, a table of the experiments with their
  targets counted, then per seed its report's opening lines (status, machine, CPU-bound
  points) and its targets table as the experiment's own report prints them.

A target counts as met only where the experiment said so; an experiment that failed or was
interrupted is counted apart and its targets say what its own analysis could conclude.
``repronet analyse ROOT`` rebuilds this page; each experiment's folder is rebuilt by
``repronet analyse ROOT/NAME``.
"""

import pathlib

import pandas as pd

from analysis import inputs, machine, targets as shared
from analysis.tables import write_tables
from repronet.run import sweep

VERDICTS = shared.VERDICTS


def read_targets(run_dir):
    """Return the experiment's targets as a list of dicts ([] when it wrote none), or None
    when its targets.csv is in a format older than analysis.targets'."""
    try:
        df = shared.read(run_dir, dtype=str)
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        return None if (pathlib.Path(run_dir) / 'tables' / 'targets.csv').exists() else []
    return [{c: row[c] for c in shared.COLUMNS} for row in df.to_dict('records')]


def sections(report_text):
    """Return (opening lines after the title, the Targets section's lines) of a report."""
    lines = report_text.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith('## ')]
    opening = lines[1:heads[0] if heads else len(lines)]
    targets = []
    for n, i in enumerate(heads):
        if lines[i].strip() == '## Targets':
            end = heads[n + 1] if n + 1 < len(heads) else len(lines)
            targets = lines[i + 1:end]
    return [line for line in opening], targets


def experiment_rows(root, manifest):
    """Return [(run record, child manifest or None, targets, report text or None)]."""
    found = []
    for run in manifest.get('runs') or []:
        if not isinstance(run, dict) or not isinstance(run.get('out'), str):
            continue
        child = root / run['out']
        try:
            child_manifest = inputs.read_manifest(child)
        except inputs.InputError:
            child_manifest = None
        try:
            text = (child / 'report.md').read_text(encoding='utf-8')
        except OSError:
            text = None
        found.append((run, child_manifest, read_targets(child), text))
    return found


def _clock(seconds):
    return sweep.format_duration(seconds) if inputs.is_number(seconds) else '-'


def _status(run, child):
    """The experiment's status as its manifest says, unless its exit status says otherwise."""
    code = run.get('exit')
    if child is None:
        return 'not run' if code is None else 'no results folder (exit %s)' % code
    status = str(inputs.run_status(child))
    if child.get('status') == 'running' and code is not None:
        return 'ended without a status (exit %s)' % code
    if code not in (0, None) and status == 'ok':
        return 'failed (exit %s)' % code        # e.g. its analysis failed after the points
    return status


def _cpu(child):
    """'saturated', 'no', 'modelled' (a simulation) or '-' from the experiment's manifest."""
    if child is None:
        return '-'
    if inputs.simulated(child):
        return 'modelled'
    saturated = inputs.as_dict(child.get('cpu')).get('saturated')
    return {True: 'saturated', False: 'no'}.get(saturated, '-')


def _whole(value):
    return int(value) if inputs.is_number(value) else None


def build(run_dir):
    """Write tables/runs.csv, tables/targets.csv and report.md of a reproduce folder."""
    root = pathlib.Path(run_dir)
    manifest = inputs.read_manifest(root)
    found = experiment_rows(root, manifest)
    runs, targets = [], []
    for run, child, rows, _ in found:
        runs.append({'seed': run.get('seed'), 'experiment': run.get('name'),
                     'status': _status(run, child), 'exit': _whole(run.get('exit')),
                     'seconds': run.get('seconds'), 'estimated_s': _whole(run.get('estimated_s')),
                     'points': _whole((child or {}).get('points')),
                     'points_ok': _whole((child or {}).get('points_ok')), 'cpu': _cpu(child)})
        targets += [dict(seed=run.get('seed'), experiment=run.get('name'), **row)
                    for row in rows or []]
    write_tables(root, {
        'runs': pd.DataFrame(runs, columns=['seed', 'experiment', 'status', 'exit', 'seconds',
                                            'estimated_s', 'points', 'points_ok', 'cpu']).astype(
            {'exit': 'Int64', 'estimated_s': 'Int64', 'points': 'Int64', 'points_ok': 'Int64'}),
        'targets': pd.DataFrame(targets, columns=['seed', 'experiment'] + shared.COLUMNS)},
        '%.1f')
    (root / 'report.md').write_text(report(manifest, found), encoding='utf-8')
    return root / 'report.md'


def _root_status(manifest):
    """The command's status line; a manifest still 'running' with no end says why that may be."""
    if manifest.get('status') == 'running' and not manifest.get('ended_at'):
        return ('%s (each experiment\'s own folder says how it ended)'
                % inputs.run_status(manifest))
    return inputs.status(manifest)


def _caveats(manifest):
    """What the verdicts of this run can and cannot say, from its scale and backend."""
    said = []
    scale = inputs.as_dict(manifest.get('params')).get('scale')
    if scale != 'seed':
        said.append('This run is at `--scale %s`: the seeds\' targets are set for the seeds\' '
                    'sizes (`--scale seed`), so its verdicts are indicative.' % scale)
    if inputs.simulated(manifest):
        said.append('Simulated: every time and rate is the model\'s (no processing cost '
                    'unless --sim-cost was given, no congestion control), not measured.')
    return said


def _points(child):
    if child is None or not inputs.is_number(child.get('points')):
        return '-'
    return '%s of %d' % (_whole(child.get('points_ok')) if inputs.is_number(
        child.get('points_ok')) else '-', child['points'])


def report(manifest, found):
    """Return report.md's text."""
    params = inputs.as_dict(manifest.get('params'))
    git = inputs.as_dict(inputs.as_dict(manifest.get('provenance')).get('git'))
    revision = str(git.get('revision') or 'unknown')[:12] + (' (uncommitted changes)'
                                                             if git.get('dirty') else '')
    lines = ['# Every seed report, reproduced (repronet reproduce)', '',
             'Command: `%s`. Scale `%s`, backend `%s`, revision %s; started %s, ended %s '
             '(%s).' % (' '.join(str(a) for a in manifest.get('argv') or []),
                        params.get('scale'), inputs.backend(manifest), revision,
                        manifest.get('started_at'), manifest.get('ended_at') or '-',
                        _clock(manifest.get('seconds'))), '',
             '- status: %s' % _root_status(manifest),
             '- machine (from the manifest): %s' % machine.describe(manifest), '',
             '| seed | experiment | status | time (estimated) | points ok | CPU | targets met | '
             'not met | no data | reported | report |',
             '|---|---|---|---|---|---|---|---|---|---|---|']
    for run, child, rows, text in found:
        counts = [sum(1 for r in rows or [] if r['verdict'] == v) for v in VERDICTS]
        other = len(rows or []) - sum(counts)
        link = '[%s](%s/report.md)' % (run.get('out'), run.get('out')) if text else 'none'
        lines.append('| %s | %s | %s | %s (%s) | %s | %s | %d | %d%s | %d | %d | %s |' % (
            run.get('seed'), run.get('name'), _status(run, child), _clock(run.get('seconds')),
            _clock(run.get('estimated_s')), _points(child), _cpu(child),
            counts[0], counts[1], ' (+%d other)' % other if other else '', counts[2], counts[3],
            link))
    lines += [''] + _caveats(manifest) + [
        'A target is met only where the experiment\'s own analysis says so (none counts a '
        'target met when operations failed); "reported" rows state a figure with no bar. CPU: '
        '"saturated" when the machine was the bottleneck during the experiment\'s points (its '
        'report marks which points). Each experiment\'s report has the tables beside the seed\'s.']
    for run, child, rows, text in found:
        code = run.get('exit')
        lines += ['', '## Seed %s: %s (%s)' % (run.get('seed'), run.get('what'), run.get('name')),
                  '', 'Command: `%s`; %s.' % (
                      ' '.join(str(a) for a in (run.get('argv') or [])[1:]),
                      'not run' if code is None else 'exit status %s' % code)]
        error = (child or {}).get('error')
        if error:
            lines += ['', 'Its manifest says: %s' % error]
        if rows is None:
            lines += ['', 'Its `tables/targets.csv` is in an older format (not counted above): '
                      '`repronet analyse` of `%s/` rebuilds it.' % run.get('out')]
        if text is None:
            lines += ['', 'No report.md in `%s/`: %s.' % (run.get('out'), _status(run, child))]
            continue
        opening, table = sections(text)
        lines += opening + ['### Targets'] + (table or ['', '(this report has no targets table)'])
    return '\n'.join(lines).rstrip('\n') + '\n'
