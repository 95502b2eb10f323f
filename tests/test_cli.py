"""The repronet command line: help, list, run, caps, analyse, clean (without root here;
the root tests are in tests/test_cli_root.py)."""

import ast
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

from repronet.run import leftovers
from tests import nobody

REPO = pathlib.Path(__file__).resolve().parents[1]


def repronet(*args, cwd=None, user=None, timeout=120):
    """Run `python -P -m repronet ARGS` from this checkout (as user 'nobody' if asked)."""
    repo = REPO
    argv = [sys.executable, '-P', '-m', 'repronet'] + list(args)
    if user == 'nobody':
        if os.geteuid() != 0:
            pytest.skip('running as another user needs root')
        argv, repo = nobody.AS_NOBODY + argv, nobody.checkout()
    env = dict(os.environ, PYTHONPATH=str(repo), PYTHONDONTWRITEBYTECODE='1')
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd or '/',
                          env=env, timeout=timeout)


def script(name, *args, user=None):
    """Run topologies/NAME.py ARGS directly, the way the README says."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE='1')
    repo = nobody.checkout() if user == 'nobody' else REPO
    argv = [sys.executable, str(repo / 'topologies' / (name + '.py'))] + list(args)
    if user == 'nobody':
        argv = nobody.AS_NOBODY + argv
    return subprocess.run(argv, capture_output=True, text=True, cwd='/', env=env,
                          timeout=120)


def test_help_lists_every_command():
    out = repronet('--help')
    assert out.returncode == 0 and out.stderr == ''
    for command in ('run', 'list', 'caps', 'clean', 'analyse', 'compare', 'reproduce'):
        lines = [l for l in out.stdout.splitlines() if l.startswith('  %s ' % command)]
        assert len(lines) == 1 and len(lines[0].split()) > 2, out.stdout


def test_no_command_and_unknown_command():
    bare = repronet()
    assert bare.returncode == 2 and 'usage: repronet COMMAND' in bare.stderr
    bad = repronet('frobnicate')
    assert bad.returncode == 2 and bad.stdout == ''
    assert bad.stderr == ("repronet: unknown command 'frobnicate'; commands: run, list, caps, "
                          "clean, analyse, compare, reproduce (see repronet --help)\n")


def test_list_reads_docstrings_without_mininet_or_root(tmp_path):
    code = ('import sys\nfrom repronet.cli import main\nmain(["list"])\n'
            'assert "mininet" not in sys.modules, "list imported mininet"\n')
    inproc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert inproc.returncode == 0, inproc.stderr
    out = repronet('list', user='nobody', cwd=str(tmp_path)) if os.geteuid() == 0 \
        else repronet('list', cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout == inproc.stdout
    names = sorted(p.stem for p in (REPO / 'topologies').glob('*.py')
                   if not p.stem.startswith('_'))
    assert names and {'smoke', 'fidelity', 'dht8'} <= set(names)
    for name in names:
        doc = ast.get_docstring(ast.parse((REPO / 'topologies' / (name + '.py')).read_text()))
        line = next(l for l in out.stdout.splitlines() if l.startswith(name + ' '))
        assert line.split(None, 1)[1] == doc.splitlines()[0]
    assert '--scale smoke sets --repeat 2 --duration 2' in out.stdout
    assert '--scale smoke sets --servers 4 --peers 2 --files 100' in out.stdout


def test_list_says_how_long_the_last_smoke_run_took(tmp_path):
    for name, started, ended, scale in (('smoke-1', '2026-01-01T10:00:00.000Z',
                                         '2026-01-01T10:00:31.000Z', 'smoke'),
                                        ('smoke-2', '2026-01-01T11:00:00.000Z',
                                         '2026-01-01T11:05:00.000Z', 'default')):
        run = tmp_path / 'results' / name
        run.mkdir(parents=True)
        (run / 'manifest.json').write_text(json.dumps(
            {'experiment': 'smoke', 'status': 'ok', 'params': {'scale': scale},
             'started_at': started, 'ended_at': ended}))
    out = repronet('list', cwd=str(tmp_path))
    assert 'last smoke run took 31 s (results/smoke-1)' in out.stdout, out.stdout


def test_run_unknown_experiment_is_one_sentence():
    known = ', '.join(sorted(p.stem for p in (REPO / 'topologies').glob('*.py')
                             if not p.stem.startswith('_')))
    assert known.startswith('dht8, fidelity, ')
    out = repronet('run', 'nosuch', '--scale', 'smoke')
    assert out.returncode == 2 and out.stdout == ''
    assert out.stderr == ("repronet: unknown experiment 'nosuch'; known experiments: %s\n"
                          % known)
    bare = repronet('run')
    assert bare.returncode == 2 and 'known experiments: %s\n' % known in bare.stderr


@pytest.mark.parametrize('args', [['--help'], ['--repeat', '0'], ['--switch', 'nope']])
def test_run_is_the_script(args):
    via_cli = repronet('run', 'smoke', *args)
    direct = script('smoke', *args)
    assert (via_cli.returncode, via_cli.stdout, via_cli.stderr) == \
        (direct.returncode, direct.stdout, direct.stderr)
    assert via_cli.returncode == (0 if args == ['--help'] else 2)


SCRIPTS = sorted(p.stem for p in (REPO / 'topologies').glob('*.py')
                 if not p.stem.startswith('_'))


@pytest.mark.parametrize('name', SCRIPTS)
def test_argparse_refusals_are_one_sentence_in_every_script(name):
    """A wrong choice, a value that is not a number and an unknown flag were argparse's
    15-line usage and then the error; now each is one line naming the flag, exit 2, before
    anything is built (nothing on stdout); --help still prints the usage."""
    for args, words in ((['--scale', 'huge'], "--scale: invalid choice: 'huge'"),
                        (['--repeat', 'abc'], "--repeat: invalid int value: 'abc'"),
                        (['--bogus'], 'unrecognized arguments: --bogus')):
        out = script(name, *args)
        assert (out.returncode, out.stdout) == (2, ''), (args, out.stdout, out.stderr)
        assert out.stderr.startswith(name + ': ') and out.stderr.count('\n') == 1, out.stderr
        assert words in out.stderr and '--help lists the options' in out.stderr, out.stderr
    helped = script(name, '--help')
    assert helped.returncode == 0 and helped.stdout.startswith('usage: %s.py' % name)


def test_run_passes_the_exit_status_without_root():
    if os.geteuid() != 0:
        pytest.skip('already not root: covered by test_run_is_the_script')
    via_cli = repronet('run', 'smoke', '--scale', 'smoke', user='nobody')
    direct = script('smoke', '--scale', 'smoke', user='nobody')
    assert via_cli.returncode == direct.returncode == 1
    assert via_cli.stderr == direct.stderr and 'needs root' in via_cli.stderr


def test_caps_is_the_capability_report():
    via_cli = repronet('caps', '--json')
    direct = subprocess.run([sys.executable, '-m', 'repronet.emu.capabilities', '--json'],
                            capture_output=True, text=True, cwd=str(REPO))
    assert via_cli.returncode == direct.returncode == 0
    assert json.loads(via_cli.stdout) == json.loads(direct.stdout)
    text = repronet('caps')
    assert text.stdout.startswith('repronet capability report')


def test_analyse_bad_folder_is_one_line(tmp_path):
    """A folder that is there but not a results folder cannot be rebuilt: exit 1."""
    out = repronet('analyse', str(tmp_path))
    assert out.returncode == 1 and out.stdout == ''
    assert out.stderr.count('\n') == 1 and 'no manifest.json' in out.stderr


def test_a_missing_or_unreadable_folder_is_a_usage_error_in_analyse_and_compare(tmp_path):
    """analyse said exit 1 where compare said 2 for a folder that is not there: both now
    refuse it as a usage error, exit 2, in the same sentence, before reading anything (a
    good folder named beside it is not rebuilt)."""
    import shutil
    import tempfile
    from tests.dht8_folder import make_run
    user = 'nobody' if os.geteuid() == 0 else None      # root reads any folder
    base = tmp_path if user is None else pathlib.Path(tempfile.mkdtemp(dir='/tmp'))
    try:
        base.chmod(0o755)
        good = base / 'good'
        good.mkdir()
        make_run(good)
        closed = base / 'closed'
        closed.mkdir(mode=0o000)
        for folder, sentence in ((base / 'missing', 'results folder %s does not exist'),
                                 (good / 'manifest.json', '%s is a file, not a results folder'),
                                 (closed, 'cannot read results folder %s (permission denied)')):
            analysed = repronet('analyse', str(good), str(folder), user=user)
            compared = repronet('compare', str(good), str(folder), user=user)
            assert (analysed.returncode, analysed.stdout) == (2, ''), analysed.stderr
            assert analysed.stderr == sentence % folder + '\n'
            assert (compared.returncode, compared.stdout) == (2, '')
            assert compared.stderr == 'repronet: ' + sentence % folder + '\n'
        assert not (good / 'report.md').exists()
    finally:
        if (base / 'closed').exists():
            (base / 'closed').chmod(0o755)
        if base != tmp_path:
            shutil.rmtree(base)


def test_clean_refuses_without_root():
    out = repronet('clean', user='nobody')
    assert out.returncode == 1 and out.stdout == ''
    assert out.stderr == ('repronet clean: needs root (it kills processes and deletes '
                          'interfaces); run it with sudo\n')
    extra = repronet('clean', '--all')
    assert extra.returncode == 2 and 'clean takes no arguments' in extra.stderr


def test_lock_without_waiting_names_the_holder(tmp_path):
    lock = tmp_path / 'lock'
    code = ('import fcntl, os, sys, time\n'
            'fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n'
            'fcntl.flock(fd, fcntl.LOCK_EX)\nprint("held", flush=True)\ntime.sleep(30)\n')
    holder = subprocess.Popen([sys.executable, '-c', code, str(lock)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == 'held\n'
        with pytest.raises(leftovers.LockBusy) as busy:
            with leftovers.machine_lock(str(lock), wait=False):
                pass
        assert busy.value.holders == {holder.pid} and str(lock) in str(busy.value)
    finally:
        holder.kill()
        holder.wait()
    with leftovers.machine_lock(str(lock), wait=False):    # free again: taken at once
        pass


def start_time(pid):
    """Return the start time of pid in clock ticks (field 22 of /proc/PID/stat)."""
    with open('/proc/%d/stat' % pid) as f:
        return int(f.read().rsplit(')', 1)[1].split()[19])


def test_state_knows_whether_its_runner_is_alive(tmp_path):
    child = subprocess.Popen(['sleep', '30'])
    try:
        state = leftovers.State(str(tmp_path / 'state.json'),
                                {'runner': child.pid,
                                 'runner_started': start_time(child.pid),
                                 'pids': [], 'intfs': [], 'bridges': [],
                                 'ovs_bridges': []})
        assert state.runner_alive() == child.pid
        state.data['runner_started'] += 1      # same PID, another process
        assert state.runner_alive() is None
        state.data['runner_started'] -= 1
    finally:
        child.kill()
        child.wait()
    assert state.runner_alive() is None


def test_ctrl_c_in_analyse_is_one_line(tmp_path):
    import signal
    import time
    from tests.dht8_folder import make_run
    dirs = []
    for i in range(40):             # enough folders that the command is still busy
        (tmp_path / ('run%d' % i)).mkdir()
        make_run(tmp_path / ('run%d' % i))
        dirs.append(str(tmp_path / ('run%d' % i)))
    # A Ctrl-C from a terminal: SIGINT at its default in the child even when this test runs
    # as a background job of a script, which starts with SIGINT ignored (POSIX).
    proc = subprocess.Popen([sys.executable, '-m', 'repronet', 'analyse'] + dirs,
                            cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = proc.stdout.readline()          # one folder done: it is working
    assert first.endswith('rebuilt\n'), proc.stderr.read()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip('all 40 folders were rebuilt before the signal arrived')
    assert proc.returncode == 130
    assert err == 'analysis interrupted; run the same command again to rebuild\n'


@pytest.mark.parametrize('command', ['run', 'list', 'clean', 'compare'])
def test_every_command_answers_help(command):
    """A new user's `repronet list --help` was refused ("takes no arguments"): each command
    prints its usage line and what it does, exit 0; run also names the experiments."""
    out = repronet(command, '--help')
    assert out.returncode == 0 and out.stderr == '', out.stderr
    assert out.stdout.startswith('usage: repronet %s' % command)
    if command == 'run':
        assert 'experiments: ' in out.stdout and 'dht8' in out.stdout
    assert repronet(command, '-h').stdout == out.stdout
