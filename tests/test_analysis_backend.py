"""One answer to "was this run simulated?" (``analysis.inputs.backend``): every report says
so by the same rule, whichever of the manifest's params, mechanisms and cpu records names
the backend (the runner writes all three; a hand-made or half-written manifest may hold one),
and no other module in analysis/ or benchmarks/ reads the backend from a manifest itself.

Checked against the code before the helper: dht8's and transfer's reports read only
``mechanisms.backend`` and the CPU verdict only ``cpu.backend``, so the params and cpu (resp.
params and mechanisms) cases below failed there, and the source scan found six copies."""

import json
import pathlib
import re

import pytest

from analysis import dht8, dht8_report, inputs, stats, transfer, transfer_report
from tests import dht8_folder, transfer_folder

REPO = pathlib.Path(__file__).resolve().parents[1]
RECORDS = ('params', 'mechanisms', 'cpu')


def _named_in(manifest, record, backend='sim'):
    """The manifest with the backend named in record alone."""
    for name in RECORDS:
        if isinstance(manifest.get(name), dict):
            manifest[name].pop('backend', None)
    manifest[record] = dict(inputs.as_dict(manifest.get(record)), backend=backend)
    return manifest


@pytest.mark.parametrize('record', RECORDS)
def test_the_backend_is_read_from_whichever_record_names_it(record):
    assert inputs.simulated(_named_in({}, record))
    assert inputs.backend(_named_in({}, record, 'emu')) == 'emu'
    assert not inputs.simulated(_named_in({}, record, 'nonsense'))


def test_folders_from_before_the_simulator_are_emulations():
    for manifest in ({}, {'params': {}, 'mechanisms': None, 'cpu': []}):
        assert inputs.backend(manifest) == 'emu' and not inputs.simulated(manifest)


@pytest.mark.parametrize('record', RECORDS)
def test_dht8_report_says_simulation_whichever_record_names_it(record, tmp_path):
    run = dht8_folder.make_run(tmp_path)
    data = dht8.tables(run)
    text = dht8_report.report(_named_in(dht8_folder.manifest(), record), data)
    assert '**backend: simulation**' in text
    assert '**backend: simulation**' not in dht8_report.report(dht8_folder.manifest(), data)


@pytest.mark.parametrize('record', RECORDS)
def test_transfer_report_and_cpu_verdict_agree_on_the_backend(record, tmp_path):
    run = transfer_folder.make_run(tmp_path)
    path = run / 'manifest.json'
    manifest = _named_in(json.loads(path.read_text()), record)
    path.write_text(json.dumps(manifest))
    text = transfer_report.report(manifest, transfer.tables(run), {})
    assert '- backend: simulation' in text
    judge = stats.PointJudge(inputs.Inputs(run / 'logs'), manifest)
    assert judge.sim


def test_no_other_module_reads_the_backend_from_a_manifest():
    reads = re.compile(r"""get\(\s*['"]backend['"]\s*\)|\[\s*['"]backend['"]\s*\]""")
    found = [str(p.relative_to(REPO)) for folder in ('analysis', 'benchmarks')
             for p in sorted((REPO / folder).glob('*.py'))
             if p.name != 'inputs.py' and reads.search(p.read_text())]
    assert found == [], 'use analysis.inputs.backend/simulated in %s' % ', '.join(found)
