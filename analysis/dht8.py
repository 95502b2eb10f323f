"""Analysis of the dht8 experiment: the seed's tables, next to ours, from logs only.

Reads ``manifest.json`` and ``logs/`` of a run (``topologies/dht8.py`` says what produced
them: ``points.jsonl`` names every point, ``<tag>-client-<peer>.jsonl`` holds each client's
``op`` records and ``summary``, ``<tag>-capture-<server>.jsonl`` each wire capture,
``cpu.jsonl`` the machine's CPU samples (``points.jsonl``'s ``cpu`` a precise reading
of each point's timed part), ``linkdelay-<host>.jsonl`` each delay daemon's
counters) and writes:

- ``tables/clients.csv``: one row per client per point (the raw material of all others);
- ``tables/points.csv``: one row per point: the seed's columns (servers, concurrent
  clients, total time = mean of the clients' timed parts, time per operation = a client's
  timed part / its successful operations, as the seed divides 1.85 s by 10K, averaged over
  clients), bytes/s, latency percentiles of all the point's operations pooled, and the CPU
  during the point (busy fraction, share of samples over the bar, CPU-bound or not; by the
  samples inside the timed part or, when it is shorter than a sample, by the runner's
  precise reading of it, ``cpu_verdict``);
- ``tables/part1.csv``, ``part2.csv``, ``part3.csv``: those rows averaged over
  ``--repeat`` with their spread (sd, min, max) and the seed's numbers beside them;
- ``tables/ping.csv``, ``capture.csv`` (REGISTER messages per peer seen on the wire against
  K servers and N files), ``failover.csv`` (one row per fault: kill, hang or cut),
  ``targets.csv``, ``linkdelay.csv`` (how late the delay daemons released packets),
  ``linkdelay_points.csv`` (the same by point) and
  ``inputs.csv`` (inputs that were missing, log lines that could not be read);
- ``figures/`` (``analysis.dht8_figures``) and ``report.md`` (``analysis.dht8_report``).

The raw logs are read one point at a time by ``analysis.dht8_logs``, the summary tables
are ``analysis.dht8_tables``, the seed's numbers ``analysis.dht8_seed``. Rows have a fixed
order and floats a fixed format, so the same logs always give byte-identical tables.
When inputs were missing, everything is still written and ``build`` then raises
``analysis.inputs.IncompleteInputs`` naming them.
"""

import pathlib

import pandas as pd

from analysis import dht8_figures, dht8_logs, dht8_report, inputs, targets
from analysis.dht8_logs import node_names, variant  # noqa: F401  (the experiment's names)
from analysis.dht8_seed import SEED_PART1, SEED_PART2, SEED_SOURCE  # noqa: F401
from analysis.dht8_tables import (part1_table, part2_table, part3_table, ping_table,
                                  seed_figures, targets_table)
from analysis.tables import link_late_points, write_tables

FLOAT = '%.6g'


def tables(run_dir):
    """Return every table as a DataFrame, from logs and manifest only."""
    run_dir = pathlib.Path(run_dir)
    manifest = inputs.read_manifest(run_dir)
    params = manifest['params']
    found = inputs.Inputs(run_dir / 'logs')
    points = dht8_logs.read_points(found)
    samples, interval = dht8_logs.read_cpu(found, manifest)
    bar = dht8_logs.cpu_bar(manifest)
    hosts = {str(k): v for k, v in inputs.as_dict(manifest.get('hosts')).items()}
    clients, rows, failover, capture = [], [], [], []
    for point, result, span in points:
        failing = point['part'] == 'failover'
        mine, latencies, ops, summaries = dht8_logs.read_clients(found, point, failing)
        clients += mine
        figures = dht8_logs.point_cpu(samples, interval, result.get('released'),
                                      result.get('finished'), span, bar)
        rows.append(dht8_logs.point_row(point, result, mine, latencies, figures,
                                        span.get('busy')))
        if failing:
            row = dht8_logs.failover_row(found, point, result, ops, summaries)
            failover += [row] if row else []
        if point['part'] == 'capture':
            capture += dht8_logs.capture_rows(found, point, mine, hosts)
    pts = pd.DataFrame(rows)
    data = {'clients': pd.DataFrame(clients), 'points': pts}
    none = pd.DataFrame()
    data['part1'] = part1_table(pts) if len(pts) else none
    data['part2'] = part2_table(pts, _sizes(manifest), inputs.number(params.get('bw'))) \
        if len(pts) else none
    data['part3'] = part3_table(pts) if len(pts) else none
    data['ping'] = ping_table(pts) if len(pts) else none
    data['targets'] = targets_table(params, data['part1'], data['part2'])
    data['capture'] = pd.DataFrame(capture)
    data['failover'] = pd.DataFrame(failover)
    data['linkdelay'] = pd.DataFrame(dht8_logs.linkdelay_rows(found))
    keys = [c for c in ('point', 'part', 'op', 'variant', 'concurrent_clients') if c in pts]
    data['linkdelay_points'] = link_late_points(manifest, pts[keys] if keys else None)
    data['inputs'] = found.table()
    return data


def _sizes(manifest):
    """Return {fileset key: file size in bytes} from the manifest's file sets."""
    sizes = {k: inputs.as_dict(inputs.as_dict(v).get('spec')).get('size')
             for k, v in inputs.as_dict(manifest.get('filesets')).items()}
    return {k: v for k, v in sizes.items() if inputs.is_number(v)}


def build(run_dir):
    """Rewrite tables/, figures/ and report.md of a dht8 run; return the tables
    (and under 'figures' what each figure drew).

    Raises IncompleteInputs (after writing everything) when inputs were missing."""
    run_dir = pathlib.Path(run_dir)
    manifest = inputs.read_manifest(run_dir)
    data = tables(run_dir)
    write_tables(run_dir, data, FLOAT)
    data['figures'] = dht8_figures.draw(run_dir, manifest, data)
    (run_dir / 'report.md').write_text(dht8_report.report(manifest, data))
    problem = inputs.incomplete(data['inputs'])
    if problem is not None:
        raise problem
    return data


def targets_text(run_dir):
    """Return the target summary printed at the end of a run."""
    params = inputs.as_dict(inputs.read_manifest(run_dir).get('params'))
    df = targets.read(run_dir)
    lines = ['dht8 targets (seed: %s; they apply at --scale seed, this run: %s)'
             % (SEED_SOURCE, params.get('scale') or '?')]
    for r, (seed, ratio) in zip(df.itertuples(), seed_figures(df)):
        measured = 'n/a' if r.measured == '' else '%.4g' % float(r.measured)
        ratio = 'n/a' if ratio is None or pd.isna(ratio) else '%.2fx' % ratio
        verdict = {'met': 'MET', 'not met': 'not met'}.get(r.verdict, 'not run')
        lines.append('  %-62s seed %-8.4g measured %-9s ratio %-7s %s%s' % (
            r.target, seed, measured, ratio, verdict, ' (%s)' % r.notes if r.notes else ''))
    return '\n'.join(lines)
