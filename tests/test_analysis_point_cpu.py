"""Every experiment's report marks its CPU-bound points from the runner's own reading of each
point's timed parts (``points.jsonl``'s ``cpu``, ``repronet.run.cpu_span``) when no CPU sample
lies inside them, as dht8's does (``analysis.stats.PointJudge``); a simulated run says its CPU
was modelled. The folders are the hand-made ones of the experiments' own analysis tests, with
the samples moved out of every point and a reading written into each point's record.

Tables and report text only: no figure is drawn (``report(manifest, data, {})``)."""

import json

import pytest

from analysis import kvload, kvload_report, kvscale, kvscale_report, rudp, transfer, \
    transfer_report
from analysis.tables import nan
from tests import kvload_folder, kvscale_folder, transfer_folder
from tests.test_analysis_rudp import make_run as rudp_run

# experiment: (make the folder under a tmp path, tables, report, per-point table, hot point,
# how the report's table row holding the hot point starts)
CASES = {
    'kvload': (lambda tmp: kvload_folder.make_run(tmp), kvload.tables, kvload_report.report,
               'cpu', 0, '| ours | local | 1 |'),
    'kvscale': (lambda tmp: kvscale_folder.make_run(tmp), kvscale.tables,
                kvscale_report.report, 'points', 3, '| redis | mixed |'),
    'transfer': (transfer_folder.make_run, transfer.tables, transfer_report.report, 'points',
                 3, '| 100 |'),
    'rudp': (rudp_run, rudp.tables, rudp.report, 'transfers', 0, '| B=1 |'),
}


def _rewrite(run, hot, manifest=None):
    """Give each point record a reading of its timed parts (0.9 busy for point hot, 0.1 for
    the others) and leave one CPU sample, long before any point; with manifest, replace
    the manifest's fields by it."""
    path = run / 'logs' / 'points.jsonl'
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        busy = 0.9 if r['point']['point'] == hot else 0.1
        r['cpu'] = {'source': 'cpuacct', 'seconds': 0.2, 'busy': busy, 'bound': busy > 0.65}
    path.write_text(''.join(json.dumps(r) + '\n' for r in records))
    (run / 'logs' / 'cpu.jsonl').write_text(json.dumps({'t': 1.0, 'busy': 0.1}) + '\n')
    if manifest is not None:
        fields = json.loads((run / 'manifest.json').read_text())
        fields.update(manifest)
        (run / 'manifest.json').write_text(json.dumps(fields))
        (run / 'logs' / 'cpu.jsonl').unlink()
    return len(records)


def _build(case, tmp_path, manifest=None):
    make, tables, report, table, hot, row = CASES[case]
    run = make(tmp_path)
    points = _rewrite(run, hot, manifest)
    data = tables(run)
    text = report(json.loads((run / 'manifest.json').read_text()), data, {})
    rows = [ln for ln in text.splitlines() if ln.startswith(row)]
    assert rows, 'no report row starts with %r' % row
    return data[table], text, rows, points, hot


@pytest.mark.parametrize('case', sorted(CASES))
def test_a_point_without_samples_is_judged_by_the_runners_reading(case, tmp_path):
    points, text, rows, count, hot = _build(case, tmp_path)
    assert set(points['cpu_verdict']) == {'timed part'}
    assert [str(b) for b in points.loc[points['point'] == hot, 'cpu_bound']] == ['True']
    assert set(points.loc[points['point'] != hot, 'cpu_bound'].astype(str)) == {'False'}
    assert all(r.endswith('| CPU-bound |') for r in rows), rows
    assert '- CPU verdict per point: 0 by the samples wholly inside its timed part, %d ' \
        '(timed part shorter than a sample) by the runner\'s own reading' % len(points) in text
    assert len(points) <= count


@pytest.mark.parametrize('case', sorted(CASES))
def test_a_simulated_run_says_its_cpu_was_modelled(case, tmp_path):
    points, text, rows, _, _ = _build(case, tmp_path, manifest={
        'cpu': {'backend': 'sim', 'monitored': False, 'saturated': False}})
    assert set(points['cpu_verdict']) == {'modelled'}
    assert all(nan(b) for b in points['cpu_bound'])
    assert all(r.endswith('| modelled |') for r in rows), rows
    assert '- CPU per point: modelled' in text
