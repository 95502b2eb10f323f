"""A manifest left at ``running`` by a SIGKILL is read as killed, not as running forever
(repronet.run.results.run_status): the first manifest records the writer's PID, its start
time and the boot id, and every reader (the reports, the seeds table) says ``running`` only
while that very process lives."""

import json
import signal
import subprocess
import sys

import pytest

from analysis import inputs, seeds
from repronet.run import results
from tests.kv_proc import ROOT

# writes a run's first manifest through the real code path, says so, then waits to be killed
WRITER = ('import sys, time\n'
          'from repronet.run import results\n'
          'folder = results.ResultsFolder(sys.argv[1])\n'
          "folder.start('rudp', {'backend': 'sim', 'scale': 'smoke'}, 1, ['rudp.py'])\n"
          "print('started', flush=True)\n"
          'time.sleep(120)\n')


@pytest.fixture
def writer(tmp_path):
    """A child process that wrote tmp_path/rudp/manifest.json and is still running."""
    proc = subprocess.Popen([sys.executable, '-c', WRITER, str(tmp_path / 'rudp')], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == 'started\n'
        yield proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def _manifest(folder):
    return json.loads((folder / 'manifest.json').read_text())


def test_running_while_the_writer_lives_killed_once_it_is_sigkilled(writer, tmp_path):
    manifest = _manifest(tmp_path / 'rudp')
    assert manifest['process']['pid'] == writer.pid
    assert manifest['process']['boot_id'] == results.boot_id()
    assert results.run_status(manifest) == 'running'
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    manifest = _manifest(tmp_path / 'rudp')
    assert manifest['status'] == 'running'          # nothing could rewrite it
    assert results.run_status(manifest) == 'killed (no end recorded)'
    assert inputs.status(manifest) == 'killed (no end recorded)'


def test_the_seeds_table_and_report_say_killed(writer, tmp_path):
    """repronet reproduce's folder: the command and its experiment both SIGKILLed."""
    root = _manifest(tmp_path / 'rudp')     # the writer stands in for the command, too
    root.update(experiment='seeds', params={'scale': 'smoke', 'backend': 'sim'},
                runs=[{'seed': '004', 'name': 'rudp', 'what': 'RUDP', 'out': 'rudp',
                       'argv': ['py', 'rudp.py'], 'estimated_s': 18}])
    (tmp_path / 'manifest.json').write_text(json.dumps(root))
    seeds.build(tmp_path)
    assert '| 004 | rudp | running |' in (tmp_path / 'report.md').read_text()
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    seeds.build(tmp_path)
    text = (tmp_path / 'report.md').read_text()
    assert '| 004 | rudp | killed (no end recorded) |' in text
    assert '- status: killed (no end recorded) (each experiment' in text
    assert 'killed (no end recorded)' in (tmp_path / 'tables' / 'runs.csv').read_text()


def _running(**process):
    return {'status': 'running', 'ended_at': None, 'process': process}


def test_a_reused_pid_is_not_the_run():
    """This test's own PID with another start time: the run's process is gone."""
    me = results.process_record()
    assert results.run_status(_running(**me)) == 'running'
    assert results.run_status(_running(**dict(me, start_time=me['start_time'] - 1))) == \
        'killed (no end recorded)'


def test_another_boot_or_no_record_cannot_be_known():
    me = results.process_record()
    assert results.run_status(_running(**dict(me, boot_id='another-boot'))) == 'no end recorded'
    assert results.run_status({'status': 'running'}) == 'no end recorded'   # before the record
    assert results.run_status(_running(pid='7')) == 'no end recorded'


@pytest.mark.parametrize('status', ['ok', 'failed', 'interrupted'])
def test_a_finished_run_is_what_it_says(status):
    assert results.run_status({'status': status, 'process': {'pid': 1}}) == status
