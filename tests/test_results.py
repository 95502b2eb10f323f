"""ResultsFolder: layout, manifest lifecycle, atomic writes."""

import json

import pytest

from repronet.run import results


def test_folder_layout_and_running_manifest(tmp_path):
    folder = results.ResultsFolder(tmp_path / 'run')
    folder.start('smoke', {'bw': 20.0, 'repeat': 2}, 7,
                 ['smoke.py', '--bw', '20'], extra=1)
    for sub in ('logs', 'tables', 'figures'):
        assert (tmp_path / 'run' / sub).is_dir()
    manifest = json.loads((tmp_path / 'run' / 'manifest.json').read_text())
    assert manifest['status'] == 'running'
    assert manifest['ended_at'] is None
    assert manifest['experiment'] == 'smoke'
    assert manifest['params'] == {'bw': 20.0, 'repeat': 2}
    assert manifest['seed'] == 7
    assert manifest['argv'] == ['smoke.py', '--bw', '20']
    assert manifest['extra'] == 1
    assert manifest['started_at'].endswith('Z')


@pytest.mark.parametrize('status', ['ok', 'failed', 'interrupted'])
def test_finish_records_status_and_error(tmp_path, status):
    folder = results.ResultsFolder(tmp_path)
    folder.start('x', {}, 1, [])
    folder.update(mechanisms={'switch': 'lxbr'})
    folder.finish(status, error='boom' if status != 'ok' else None,
                  cpu={'saturated': False})
    manifest = results.read_manifest(tmp_path)
    assert manifest['status'] == status
    assert manifest['ended_at'] >= manifest['started_at']
    assert manifest['mechanisms'] == {'switch': 'lxbr'}
    assert manifest['cpu'] == {'saturated': False}
    assert manifest['error'] == ('boom' if status != 'ok' else None)
    assert not list(tmp_path.glob('.*.tmp'))


def test_finish_rejects_unknown_status(tmp_path):
    folder = results.ResultsFolder(tmp_path)
    folder.start('x', {}, 1, [])
    with pytest.raises(ValueError):
        folder.finish('running')
    with pytest.raises(ValueError):
        folder.finish('done')


def test_refuses_to_overwrite_a_run(tmp_path):
    results.ResultsFolder(tmp_path).start('x', {}, 1, [])
    with pytest.raises(results.FolderError):
        results.ResultsFolder(tmp_path)


def test_default_out_names_experiment_and_utc_time():
    out = results.default_out('dht8')
    assert out.startswith('results/dht8-') and out.endswith('Z')


def test_log_path(tmp_path):
    folder = results.ResultsFolder(tmp_path)
    assert folder.log_path('n1') == tmp_path / 'logs' / 'n1.jsonl'
    assert folder.log_path('c', '.json') == tmp_path / 'logs' / 'c.json'


def test_read_jsonl_skips_partial_and_foreign_lines(tmp_path):
    log = tmp_path / 'node.jsonl'
    log.write_text('{"t": 1, "event": "ready"}\nnot json\n[1, 2]\n'
                   '{"t": 2, "event": "op"}\n{"t": 3, "ev')  # killed mid-write
    assert [r['t'] for r in results.read_jsonl(log)] == [1, 2]
    assert results.read_jsonl(log, event='op') == [{'t': 2, 'event': 'op'}]
    assert results.read_jsonl(tmp_path / 'missing.jsonl') == []


def test_read_points_in_point_order_with_results(tmp_path):
    (tmp_path / 'logs').mkdir()
    (tmp_path / 'logs' / 'points.jsonl').write_text(
        '{"event": "point", "point": {"point": 1}, "result": {"ok": true}}\n'
        '{"event": "other"}\n'
        '{"event": "point", "point": {"point": 0}, "result": null}\n')
    assert results.read_points(tmp_path) == [({'point': 0}, {}), ({'point': 1}, {'ok': True})]
    assert results.read_points(tmp_path / 'nowhere') == []
