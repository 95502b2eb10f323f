"""Every way a run ends: signals in teardown and analysis, late failures, --keep-going,
--dry-run, a bad --out, and results handed to the user who ran sudo.

Each case runs a tiny real experiment (two hosts on a Linux bridge) as a subprocess and
reads what a user would: its exit status, its output and the results folder."""

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from repronet.run.results import read_manifest
from tests import nobody

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY = '''
import functools, os, sys, time
from mininet.topo import Topo
from repronet.emu.process import LogReady
from repronet.run import leftovers
from repronet.run.runner import Experiment

if os.environ.get('TINY_LOCK'):     # a lock of the test's own, not the machine's
    leftovers.machine_lock = functools.partial(leftovers.machine_lock, os.environ['TINY_LOCK'])

STUBBORN = ("import json, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print(json.dumps({'event': 'ready'}), flush=True); time.sleep(60)")

class Two(Topo):
    def build(self, loss=0):
        s1 = self.addSwitch('s1')
        self.addLink(self.addHost('h1'), s1, **({'loss': loss} if loss else {}))
        self.addLink(self.addHost('h2'), s1)

class Tiny(Experiment):
    """Ends the way --mode says."""
    name = 'tiny'
    def add_arguments(self, parser):
        parser.add_argument('--mode', default='ok')
    def topology(self, params):
        return Two(loss=30 if params.mode == 'lossy' else 0)
    def points(self, params):
        if params.mode == 'lossy':
            return [{'point': i, 'seed': s} for i, s in enumerate((5, 9, 5))]
        return [{'point': i} for i in range(3 if params.mode in ('keep', 'opsfail') else 1)]
    def estimate(self, params, point):
        return 1.5
    def setup(self, ctx):
        if ctx.params.mode == 'exit':
            sys.exit('a late check failed')
    def run_point(self, ctx, point):
        if ctx.params.mode == 'lossy':
            out = ctx.host('h1').cmd('ping -n -c 60 -i 0.01 -W 1', ctx.host('h2').IP())
            return {'replied': [int(w.split('=')[1]) for w in out.split()
                                if w.startswith('icmp_seq=')]}
        if ctx.params.mode == 'teardown':
            ctx.start_node('h1', 'stubborn', [sys.executable, '-c', STUBBORN],
                           ready=LogReady())
        if ctx.params.mode == 'opsfail' and point['point'] == 1:
            self.operations_failed(point, 'two GETs lost')
        if ctx.params.mode == 'keep' and point['point'] == 1:
            ctx.start_node('h1', 'left-running', ['sleep', '60'])
            raise RuntimeError('point one breaks')
        return {'ping': ctx.net.ping([ctx.host('h1'), ctx.host('h2')], timeout=2)}
    def analyse(self, run_dir):
        if self.params_mode == 'incomplete':
            raise ValueError('client summary missing for 1 of 2 clients in point 0')
        if self.params_mode == 'analysis':
            print('ANALYSING', flush=True)
            time.sleep(30)
        with open(str(run_dir) + '/report.md', 'w') as f:
            f.write('analysed\\n')
    def targets_text(self, run_dir):
        return 'TINY TARGETS of %s' % run_dir
    def main(self, argv=None):
        self.params_mode = (sys.argv + ['ok'])[sys.argv.index('--mode') + 1] \\
            if '--mode' in sys.argv else 'ok'
        return super().main(argv)

sys.exit(Tiny().main())
'''


def _start(tmp_path, *args, env=None):
    script = tmp_path / 'tiny.py'
    script.write_text(textwrap.dedent(TINY))
    return subprocess.Popen(['/usr/bin/python3', str(script)] + list(args),
                            env=dict(os.environ, PYTHONPATH=REPO, **(env or {})),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(tmp_path))


def _wait_for_line(proc, text, timeout=180):
    """Read the run's stdout until a line contains text; return what was read.

    Reads the pipe's descriptor itself: a buffered readline() can hold the line
    we wait for while select() says the pipe is empty."""
    seen, deadline = b'', time.monotonic() + timeout
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            seen += chunk
            complete = seen[:seen.rfind(b'\n') + 1].decode(errors='replace')
            if text in complete:
                return complete
    pytest.fail('no line with %r in: %s' % (text, seen.decode(errors='replace')))


def _finish(proc):
    out, err = proc.communicate(timeout=180)
    return proc.returncode, out.decode(errors='replace'), err.decode(errors='replace')


@pytest.mark.root
def test_ctrl_c_during_teardown_makes_the_run_interrupted(tmp_path):
    # Before: noted, then ignored; the run said ok, exited 0 and ran the analysis.
    run = tmp_path / 'run'
    proc = _start(tmp_path, '--mode', 'teardown', '--out', str(run))
    _wait_for_line(proc, '[1/1]')           # the point is done: teardown starts
    time.sleep(1.0)                         # the stubborn node holds teardown ~5 s
    proc.send_signal(signal.SIGINT)
    code, out, err = _finish(proc)
    manifest = read_manifest(run)
    assert code == 130, err
    assert manifest['status'] == 'interrupted' and manifest['signal'] == signal.SIGINT
    assert 'SIGINT during teardown' in manifest['error']
    assert not (run / 'report.md').exists()     # no analysis of an interrupted run
    stubborn = {n['name']: n for n in manifest['nodes']}['stubborn']
    assert stubborn['returncode'] == -signal.SIGKILL
    assert 'Traceback' not in err


@pytest.mark.root
def test_ctrl_c_during_the_analysis_is_one_line(tmp_path):
    run = tmp_path / 'run'
    proc = _start(tmp_path, '--mode', 'analysis', '--out', str(run))
    _wait_for_line(proc, 'ANALYSING')
    proc.send_signal(signal.SIGINT)
    code, out, err = _finish(proc)
    assert code == 130, (out, err)
    assert 'Traceback' not in err and 'KeyboardInterrupt' not in err
    assert err.strip().splitlines()[-1].startswith('tiny: analysis interrupted (SIGINT)')
    assert read_manifest(run)['status'] == 'ok'    # the run itself was complete


@pytest.mark.root
def test_the_lock_is_held_until_the_analysis_is_done(tmp_path):
    """A run queued behind this one must not time its points beside this one's analysis.
    (Fails on the runner before c81914a, which let the lock go before analysing.)"""
    lock = tmp_path / 'lock'
    proc = _start(tmp_path, '--mode', 'analysis', '--out', str(tmp_path / 'run'),
                  env={'TINY_LOCK': str(lock)})
    _wait_for_line(proc, 'ANALYSING')
    during = subprocess.run(['flock', '-n', str(lock), 'true']).returncode
    proc.send_signal(signal.SIGINT)
    code, out, err = _finish(proc)
    assert code == 130, (out, err)
    assert during != 0, 'the lock was free while the analysis ran'
    assert subprocess.run(['flock', '-n', str(lock), 'true']).returncode == 0


@pytest.mark.root
def test_an_analysis_that_names_missing_inputs_is_one_line(tmp_path):
    run = tmp_path / 'run'
    code, out, err = _finish(_start(tmp_path, '--mode', 'incomplete', '--out', str(run)))
    assert code == 1 and 'Traceback' not in err
    assert err.strip().splitlines()[-1].startswith(
        'tiny: client summary missing for 1 of 2 clients in point 0 (the run itself is '
        'complete; "repronet analyse ')


@pytest.mark.root
def test_a_late_exit_leaves_a_failed_manifest_with_the_reason(tmp_path):
    run = tmp_path / 'run'
    code, out, err = _finish(_start(tmp_path, '--mode', 'exit', '--out', str(run)))
    manifest = read_manifest(run)
    assert code == 1
    assert manifest['status'] == 'failed'
    assert manifest['error'] == 'SystemExit: a late check failed'


@pytest.mark.root
def test_failed_operations_fail_the_run_after_its_last_point_and_targets_print(tmp_path):
    run = tmp_path / 'run'
    code, out, err = _finish(_start(tmp_path, '--mode', 'opsfail', '--out', str(run)))
    manifest = read_manifest(run)
    assert code == 1, err
    assert manifest['status'] == 'failed' and manifest['points_ok'] == 3
    assert 'operations failed in 1 point(s): p001: two GETs lost' in manifest['error']
    assert len(open(run / 'logs' / 'points.jsonl').readlines()) == 3
    assert (run / 'report.md').read_text() == 'analysed\n'
    assert 'TINY TARGETS of %s' % run in out


@pytest.mark.root
def test_keep_going_records_the_failed_point_and_runs_the_rest(tmp_path):
    run = tmp_path / 'run'
    code, out, err = _finish(_start(tmp_path, '--mode', 'keep', '--keep-going',
                                    '--out', str(run)))
    manifest = read_manifest(run)
    assert code == 1
    assert manifest['status'] == 'failed' and manifest['points_ok'] == 2
    assert manifest['error'].startswith('1 of 3 points failed (--keep-going): point 1: ')
    records = [json.loads(x) for x in open(run / 'logs' / 'points.jsonl')]
    assert [(r['point']['point'], r.get('status', 'ok')) for r in records] == \
        [(0, 'ok'), (1, 'failed'), (2, 'ok')]
    assert records[2]['result']['ping'] == 0.0
    left = {n['name']: n for n in manifest['nodes']}['left-running']
    assert left['returncode'] == -signal.SIGTERM   # stopped with its point
    assert [l for l in out.splitlines() if l.startswith('[2/3]')][0].split()[1:4] == [
        'point', '1:', 'FAILED']
    assert (run / 'report.md').read_text() == 'analysed\n'


@pytest.mark.root
def test_a_points_loss_draws_depend_on_its_seed_not_on_the_points_before(tmp_path):
    run = tmp_path / 'run'
    code, out, err = _finish(_start(tmp_path, '--mode', 'lossy', '--out', str(run)))
    assert code == 0, err
    replied = [json.loads(x)['result']['replied'] for x in open(run / 'logs' / 'points.jsonl')]
    assert 10 < len(replied[0]) < 55             # 30 % each way: about half come back
    assert replied[0] == replied[2]              # same seed, same packets: same drops
    assert replied[1] != replied[0]


@pytest.mark.root
def test_results_made_under_sudo_belong_to_the_user_who_ran_it(tmp_path):
    os.chmod(tmp_path, 0o777)
    run = tmp_path / 'results' / 'run'
    code, out, err = _finish(_start(tmp_path, '--out', str(run),
                                    env={'SUDO_UID': '65534', 'SUDO_GID': '65534'}))
    assert code == 0, err
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in [run.parent] + list(run.rglob('*'))}
    assert owners == {(65534, 65534)}


def test_bad_out_is_one_sentence_and_writes_nothing(tmp_path):
    for out, words in (('', 'must name a folder'), (str(tmp_path / 'tiny.py' / 'x'),
                                                     'is not a folder')):
        code, stdout, err = _finish(_start(tmp_path, '--out', out))
        if os.geteuid() != 0:
            assert 'needs root' in err
            continue
        assert code == 2 and err.count('\n') == 1 and words in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == ['tiny.py']


def test_dry_run_lists_points_time_and_needs_no_root(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(nobody.checkout()))
    argv = ['/usr/bin/python3', '-c', textwrap.dedent(TINY), '--mode', 'keep', '--dry-run']
    if os.geteuid() == 0:
        argv = nobody.AS_NOBODY + argv
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                         cwd='/')
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:3] == ['[0] ~0:00:02', '[1] ~0:00:02', '[2] ~0:00:02']
    # the points' 4.5 s and what a run costs beyond them (repronet.run.run_time)
    assert lines[3].startswith('3 points, estimated 0:00:10; results in results/tiny-')
    assert lines[4] == ('of which the points ~0:00:04, the rest (start-up, network, teardown, '
                        'analysis) ~0:00:05')
