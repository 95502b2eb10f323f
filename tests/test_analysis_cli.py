"""``python -m analysis``: bad manifests and broken logs give one sentence on stderr and
exit status 1, never a traceback; where the report can still be written, it is, and it
says which inputs were missing."""

import json
import os
import subprocess
import sys

import pytest

from analysis import __main__ as cli
from tests import dht8_folder

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _one_sentence(capsys):
    """Return the single stderr line of the last main() call."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and 'Traceback' not in err, err
    return lines[0]


@pytest.mark.parametrize('manifest, words', [
    ([1, 2], 'JSON object'),
    (dht8_folder.manifest(params=[1, 2]), 'params'),
    ({k: v for k, v in dht8_folder.manifest().items() if k != 'params'}, 'params'),
    (dht8_folder.manifest(experiment='nosuch'), "'nosuch', which has no analysis"),
    (dht8_folder.manifest(experiment='figures'), "'figures', which has no analysis"),
    (dht8_folder.manifest(experiment=5), 'experiment'),
    (dht8_folder.manifest(experiment='../etc'), 'experiment'),
])
def test_a_bad_manifest_is_one_sentence_and_status_1(tmp_path, capsys, manifest, words):
    run = dht8_folder.make_run(tmp_path)
    (run / 'manifest.json').write_text(json.dumps(manifest))
    assert cli.main([str(run)]) == 1
    line = _one_sentence(capsys)
    assert words in line and str(run) in line


def test_an_unreadable_or_missing_manifest_is_one_sentence(tmp_path, capsys):
    (tmp_path / 'manifest.json').write_text('{"experiment": "dht8", ')
    assert cli.main([str(tmp_path)]) == 1
    assert 'manifest.json' in _one_sentence(capsys)
    (tmp_path / 'empty').mkdir()
    assert cli.main([str(tmp_path / 'empty')]) == 1
    assert 'manifest.json' in _one_sentence(capsys)
    assert cli.main([str(tmp_path / 'nowhere')]) == 2       # a usage error, as in compare
    assert 'does not exist' in _one_sentence(capsys)


def test_the_command_line_itself_prints_no_traceback(tmp_path):
    (tmp_path / 'manifest.json').write_text('[]')
    proc = subprocess.run([sys.executable, '-m', 'analysis', str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_truncated_client_summaries_still_give_a_report_that_names_them(tmp_path, capsys):
    run = dht8_folder.make_run(tmp_path)
    capture = [p for p, _ in dht8_folder.read_points(run) if p['part'] == 'capture'][0]
    for peer in ('p1', 'p2'):      # both clients killed while writing their summaries
        log = run / 'logs' / ('p%03d-client-%s.jsonl' % (capture['point'], peer))
        text = log.read_text()
        log.write_text(text[:text.rindex('{"t"') + 20])
    assert cli.main([str(run)]) == 1
    line = _one_sentence(capsys)
    sentence = 'client summary missing for 2 of 2 clients in point %d' % capture['point']
    assert sentence in line
    report = (run / 'report.md').read_text()
    assert sentence in report
    assert 'unreadable log lines dropped: 2' in report


def test_an_empty_names_file_gives_a_report_and_status_1(tmp_path, capsys):
    run = dht8_folder.make_run(tmp_path)
    logs = run / 'logs'
    points = dht8_folder.read_points(run)
    search = [p for p, _ in points if p['op'] == 'search' and p['part'] == 'I'][0]
    t = 5000.0    # every client of the point had an empty names file: count 0
    for peer in ('p1', 'p2'):
        dht8_folder.client_log(logs, 'p%03d-client-%s' % (search['point'], peer), 'search',
                               0, 0.0001, t)
    assert cli.main([str(run)]) == 1
    line = _one_sentence(capsys)
    sentence = 'no operations in 2 of 2 client summaries in point %d' % search['point']
    assert sentence in line and sentence in (run / 'report.md').read_text()


def test_a_complete_folder_rebuilds_with_status_0(tmp_path, capsys):
    run = dht8_folder.make_run(tmp_path)
    assert cli.main([str(run)]) == 0
    assert capsys.readouterr().err == ''


def test_odd_field_types_in_a_complete_folder_still_give_a_report(tmp_path, capsys):
    run = dht8_folder.make_run(tmp_path)
    m = dht8_folder.manifest(hosts={'p1': ['10.0.0.3']}, cpu='x', mechanisms=[1],
                             filesets={'part2A': {'spec': {'size': 'big'}}, 'x': 3})
    m['params']['bw'] = 'fast'
    (run / 'manifest.json').write_text(json.dumps(m))
    points = dht8_folder.read_points(run)
    points[-1][1]['kill']['after_release'] = 'soon'
    part2 = dht8_folder.point(len(points), 0, 'II', 'download', 1)
    part2['fileset'] = 'part2A'
    dht8_folder.write(run / 'logs' / ('p%03d-client-p1.jsonl' % part2['point']), [
        {'t': 2000.5, 'event': 'summary', 'op': 'download', 'count': 2, 'ok': 2,
         'failed': 0, 'elapsed': 0.5, 'bytes': 2000, 'messages_sent': 2, 'down': []}])
    dht8_folder.rewrite_points(run, points + [(part2, {'released': 2000.0,
                                                        'finished': 2000.5})])
    assert cli.main([str(run)]) == 0, capsys.readouterr().err
    assert '## Part II' in (run / 'report.md').read_text()
