"""``repronet reproduce``: wrong flags refused before anything runs, real experiments run
(simulated without root; one emulated with root), their folders and one combined report, and a
signal that stops the running experiment cleanly, even when the command itself is SIGKILLed."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from analysis import seeds
from repronet.run import reproduce

REPO = pathlib.Path(__file__).resolve().parents[1]


def command(*args):
    """Return the argv of `python -m repronet reproduce ARGS` from this checkout."""
    return [sys.executable, '-P', '-m', 'repronet', 'reproduce'] + list(args)


def run(*args, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE='1')
    return subprocess.run(command(*args), capture_output=True, text=True, cwd='/', env=env,
                          timeout=timeout)


@pytest.mark.parametrize('args, said', [
    (['--only', 'dht9'], "argument --only: takes experiments from dht8, kvload, transfer, "
                         "kvscale, rudp, each once, not 'dht9'; repronet reproduce --help"),
    (['--only', 'dht8,,rudp'], 'argument --only: takes experiments from '),
    (['--only', 'rudp,rudp'], 'argument --only: takes experiments from '),
    (['--only', 'dht8', '--only', 'rudp'], '--only is given twice'),
    (['--out', '--dry-run'], 'argument --out: expected one argument; repronet reproduce --help '
                             'lists the options'),
    (['--', '--out', '/tmp/x'], "--out is reproduce's own flag: give it before --, not after"),
    (['--', '--scale=seed'], "--scale is reproduce's own flag"),
    (['--', '--dry-run'], "--dry-run is reproduce's own flag"),
    (['--scale', 'huge'], "argument --scale: invalid choice: 'huge' (choose from 'smoke', "
                          "'default', 'seed')"),
    (['--backend', 'ns3'], "argument --backend: invalid choice: 'ns3' (choose from 'emu', "
                           "'sim')"),
    (['--seed', 'x'], "argument --seed: must be a whole number, not 'x'; repronet reproduce "
                      "--help lists the options"),
    (['--seed=-1'], "argument --seed: must be a whole number, not '-1'"),
    (['--scale', 'smoke', '--scale=seed'], '--scale is given twice; repronet reproduce --help'),
    (['--', '-h'], "-h is reproduce's own flag"),
    (['--frob'], 'unrecognized arguments: --frob; repronet reproduce --help lists the options'),
    (['--sc', 'smoke'], 'unrecognized arguments: --sc smoke'),     # no abbreviations
    (['--dry-run', '--dry-run'], '--dry-run is given twice'),
    (['--out'], 'argument --out: expected one argument'),
    (['--backend', 'sim', '--only', 'rudp', '--', '--repeat', 'abc'], 'rudp refused the flags: '),
])
def test_wrong_arguments_are_one_sentence_and_build_nothing(tmp_path, args, said):
    out = tmp_path / 'r'
    done = run('--out', str(out), *args) if '--out' not in args else run(*args)
    assert done.returncode == 2, done
    assert done.stdout == '' and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith('repronet reproduce: ' + said), done.stderr
    assert not out.exists()


def test_emulation_without_root_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(os, 'geteuid', lambda: 1000)
    with pytest.raises(reproduce.UsageError, match='needs root'):
        reproduce.parse(['--out', str(tmp_path / 'r')])
    assert reproduce.parse(['--out', str(tmp_path / 'r'), '--backend', 'sim'])['backend'] == 'sim'


def test_flags_parse_as_argparse_does_on_the_scripts_one_sentence_parser(tmp_path):
    """reproduce's flags are read by repronet.run.options' parser: --flag=value works as in
    every topology script (the hand-made parser called --scale=smoke an unknown argument)."""
    opts = reproduce.parse(['--out=%s' % (tmp_path / 'r'), '--backend=sim', '--scale=smoke',
                            '--only', 'rudp,dht8', '--seed=3', '--', '--repeat', '2'])
    assert {k: opts[k] for k in ('scale', 'backend', 'only', 'seed', 'dry_run', 'extra')} == {
        'scale': 'smoke', 'backend': 'sim', 'only': ['dht8', 'rudp'], 'seed': '3',
        'dry_run': False, 'extra': ['--repeat', '2']}
    with pytest.raises(reproduce.UsageError, match='^--backend is given twice; '):
        reproduce.parse(['--backend=sim', '--backend', 'emu'])


@pytest.mark.parametrize('args, said', [
    (['--seed', '1e3'], "^argument --seed: must be a whole number, not '1e3'; "),
    (['--dry-run', '--dry-run'], '^--dry-run is given twice; '),
    (['--out', 'a', '--out', 'b'], '^--out is given twice; '),
    (['--only', 'rudp,dht9'], '^argument --only: takes experiments from dht8, '),
])
def test_the_parser_itself_refuses_what_argparse_can_check(args, said):
    """A wrong --seed or --only and a flag given twice are refused by reproduce's argparse
    parser (types and an action), not by checks written beside it: the parser alone says
    the sentence (the old one took --seed 1e3, --dry-run twice and --only rudp,dht9)."""
    with pytest.raises(reproduce.UsageError, match=said):
        reproduce._parser().parse_args(args)
    assert reproduce._parser().parse_args(['--only', 'rudp,dht8']).only == ['dht8', 'rudp']


@pytest.mark.parametrize('args', [['--help'], ['--backend', 'sim', '-h']])
def test_help_anywhere_prints_the_usage_and_help_and_exits_0(args):
    done = run(*args, timeout=60)
    assert done.returncode == 0 and done.stderr == '', done.stderr
    assert done.stdout == reproduce.USAGE + '\n' + reproduce.HELP + '\n'


def test_the_estimate_is_read_from_the_plan_the_dry_run_writes(tmp_path):
    """The runner's --dry-run writes its plan as JSON where REPRONET_DRY_RUN_PLAN says (a
    contract: reproduce reads it, not the text, which stays as it was)."""
    plan, out = tmp_path / 'plan.json', tmp_path / 'r'
    done = subprocess.run(
        reproduce.command('rudp', {'scale': 'smoke', 'backend': 'sim', 'seed': None,
                                   'extra': []}, out, dry_run=True),
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO), REPRONET_DRY_RUN_PLAN=str(plan)))
    assert done.returncode == 0, done.stderr
    said = json.loads(plan.read_text())
    assert said['out'] == str(out) and said['unestimated'] == 0 and said['disk']
    assert '%d points, estimated %s; results in %s' % (
        said['points'], reproduce.clock(said['estimated_s']), out) in done.stdout
    assert reproduce.estimate('rudp', {'scale': 'smoke', 'backend': 'sim', 'seed': None,
                                       'extra': []}, out) == round(said['estimated_s'])
    assert not out.exists()


def test_eta_adds_what_the_finished_took_beyond_their_estimates():
    # the first emulated smoke run of all five (d249cd8): estimates and what each took
    plan = [{'name': n, 'estimated_s': e} for n, e in (
        ('dht8', 19), ('kvload', 69), ('transfer', 9), ('kvscale', 74), ('rudp', 18))]
    took = {'dht8': 41, 'kvload': 23, 'transfer': 27, 'kvscale': 99, 'rudp': 29}
    assert reproduce.left(plan, {}) == 189
    assert reproduce.left(plan, {'dht8': 41}) == 170 + 4 * 22          # 2:58 were left
    assert reproduce.left(plan, {n: took[n] for n in ('dht8', 'kvload')}) == 101  # median < 0
    assert reproduce.left(plan, {n: took[n] for n in ('dht8', 'kvload', 'transfer')}) == \
        92 + 2 * 18                                                     # 2:08 were left


def test_simulated_seeds_run_into_one_folder_and_one_report(tmp_path):
    root = tmp_path / 'seeds'
    done = run('--backend', 'sim', '--scale', 'smoke', '--only', 'rudp,kvload',
               '--out', str(root))
    assert done.returncode == 0, done.stderr[-2000:]
    assert '[1/2] seed 001 kvload' in done.stdout and '[2/2] seed 004 rudp' in done.stdout
    manifest = json.loads((root / 'manifest.json').read_text())
    assert manifest['experiment'] == 'seeds' and manifest['status'] == 'ok'
    assert [r['name'] for r in manifest['runs']] == ['kvload', 'rudp']
    assert all(r['exit'] == 0 and r['seconds'] > 0 for r in manifest['runs'])
    assert manifest['provenance']['git']['revision']
    children = [json.loads((root / n / 'manifest.json').read_text()) for n in ('kvload', 'rudp')]
    assert [c['status'] for c in children] == ['ok', 'ok']
    assert all(c['params']['backend'] == 'sim' and c['params']['scale'] == 'smoke'
               for c in children)
    stacked = pd.read_csv(root / 'tables' / 'targets.csv', dtype=str, keep_default_na=False)
    for name in ('kvload', 'rudp'):
        own = pd.read_csv(root / name / 'tables' / 'targets.csv', dtype=str,
                          keep_default_na=False)
        mine = stacked[stacked.experiment == name]
        assert list(mine.target) == list(own.target) and len(own) > 0
        assert list(mine.verdict) == list(own.verdict)
    text = (root / 'report.md').read_text()
    assert '## Seed 001: ' in text and '## Seed 004: ' in text
    rudp_targets = (root / 'rudp' / 'report.md').read_text().split('## Targets\n')[1]
    assert rudp_targets.split('\n## ')[0].strip() in text
    counts = stacked[stacked.experiment == 'rudp'].verdict.value_counts()
    row = [l for l in text.splitlines() if l.startswith('| 004 | rudp | ok |')][0].split(' | ')
    assert row[5] == 'modelled' and row[4] == '5 of 5'
    assert int(row[6]) == counts.get('met', 0) and int(row[8]) == counts.get('no data', 0)
    assert 'Simulated: every time and rate is the model' in text
    runs = (root / 'tables' / 'runs.csv').read_text().splitlines()
    assert runs[0] == 'seed,experiment,status,exit,seconds,estimated_s,points,points_ok,cpu'
    assert runs[2].startswith('004,rudp,ok,0,') and runs[2].endswith(',5,5,modelled'), runs
    before = (root / 'report.md').read_bytes()
    rebuilt = subprocess.run([sys.executable, '-m', 'analysis', str(root)], cwd=str(REPO),
                             capture_output=True, text=True, timeout=120)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (root / 'report.md').read_bytes() == before


def _start(root, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE='1')
    return subprocess.Popen(command('--backend', 'sim', '--scale', 'smoke', '--only',
                                    'kvscale,rudp', '--out', str(root), *args),
                            cwd='/', env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait_running(root, proc):
    """Wait until kvscale's points run (its first point is logged); return its runner pid."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        points = root / 'kvscale' / 'logs' / 'points.jsonl'
        if points.exists() and points.stat().st_size > 0:
            return json.loads((root / 'manifest.json').read_text())
        time.sleep(0.2)
    raise AssertionError('kvscale never started its points')


def _wait_child_ended(root):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        child = json.loads((root / 'kvscale' / 'manifest.json').read_text())
        if child['status'] != 'running':
            return child
        time.sleep(0.2)
    raise AssertionError('kvscale still says running')


def test_sigterm_stops_the_running_experiment_and_starts_no_other(tmp_path):
    root = tmp_path / 'seeds'
    proc = _start(root)
    _wait_running(root, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert 'left' not in out.splitlines()[-3], out[-500:]     # no ETA once stopping
    assert 'SIGTERM: stopping the running experiment' in err
    assert json.loads((root / 'kvscale' / 'manifest.json').read_text())['status'] == 'interrupted'
    assert not (root / 'rudp').exists()
    manifest = json.loads((root / 'manifest.json').read_text())
    assert manifest['status'] == 'interrupted'
    assert '| 003 | kvscale | interrupted |' in (root / 'report.md').read_text()
    assert '| 004 | rudp | not run |' in (root / 'report.md').read_text()


def test_sigkill_of_the_command_still_stops_the_experiment(tmp_path):
    root = tmp_path / 'seeds'
    proc = _start(root)
    _wait_running(root, proc)
    proc.kill()
    proc.communicate(timeout=60)
    assert _wait_child_ended(root)['status'] == 'interrupted'


def test_report_of_a_folder_whose_experiment_never_wrote_one(tmp_path):
    (tmp_path / 'manifest.json').write_text(json.dumps({
        'experiment': 'seeds', 'params': {'scale': 'smoke', 'backend': 'sim'},
        'status': 'failed', 'error': 'dht8 exited non-zero', 'argv': ['repronet', 'reproduce'],
        'runs': [{'seed': '000', 'name': 'dht8', 'what': 'DHT', 'out': 'dht8', 'exit': 2,
                  'argv': ['py', 'dht8.py']},
                 {'seed': '004', 'name': 'rudp', 'what': 'RUDP', 'out': 'rudp'}]}))
    seeds.build(tmp_path)
    text = (tmp_path / 'report.md').read_text()
    assert '- status: failed (dht8 exited non-zero)' in text
    assert '| 000 | dht8 | no results folder (exit 2) | - (-) | - | - |' in text
    assert '| 004 | rudp | not run |' in text and text.count('| none |') == 2
    assert 'No report.md in `dht8/`: no results folder (exit 2).' in text
    assert 'indicative' in text
    assert (tmp_path / 'tables' / 'targets.csv').read_text().startswith(
        'seed,experiment,target,measured,goal,verdict,notes\n')


def test_the_table_follows_the_exit_status_and_a_killed_command(tmp_path):
    """An experiment whose manifest says ok but whose script exited 1 (its analysis failed
    after the points) is not 'ok'; a command SIGKILLed before its end says so, not 'running'."""
    child = tmp_path / 'rudp'
    child.mkdir()
    (child / 'manifest.json').write_text(json.dumps({
        'experiment': 'rudp', 'params': {'backend': 'emu', 'scale': 'smoke'}, 'status': 'ok',
        'points': 11, 'points_ok': 11, 'cpu': {'saturated': True}}))
    (tmp_path / 'manifest.json').write_text(json.dumps({
        'experiment': 'seeds', 'params': {'scale': 'seed', 'backend': 'emu'},
        'status': 'running', 'ended_at': None, 'argv': ['repronet', 'reproduce'],
        'runs': [{'seed': '004', 'name': 'rudp', 'what': 'RUDP', 'out': 'rudp', 'exit': 1,
                  'argv': ['py', 'rudp.py'], 'seconds': 30.0, 'estimated_s': 18}]}))
    seeds.build(tmp_path)
    text = (tmp_path / 'report.md').read_text()
    assert '| 004 | rudp | failed (exit 1) | 0:00:30 (0:00:18) | 11 of 11 | saturated |' in text
    assert ('- status: no end recorded (each experiment\'s own folder says how it ended)'
            in text)      # no process record: whether it still runs cannot be known
    assert 'indicative' not in text


@pytest.mark.root
def test_emulated_seed_runs_under_the_machine_lock(tmp_path):
    root = tmp_path / 'seeds'
    done = run('--scale', 'smoke', '--only', 'rudp', '--out', str(root), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    child = json.loads((root / 'rudp' / 'manifest.json').read_text())
    assert child['status'] == 'ok' and child['params']['backend'] == 'emu'
    assert child['mechanisms']['backend'] == 'emu'
    assert '| 004 | rudp | ok |' in (root / 'report.md').read_text()
