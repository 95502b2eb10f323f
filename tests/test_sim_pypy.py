"""A simulated run under PyPy is the same run: ``--sim-interpreter pypy3`` against python3.

``topologies/dht8.py --backend sim --scale smoke`` runs once with its points in a pypy3
child and once in this CPython, same seed, different string-hash seeds; their logs and
tables must be byte-identical (what issue 13 asks of the faster interpreter: nothing in
the simulation may depend on the interpreter, its hashing, its float formatting or its
generator), the manifest must say which interpreter ran the points, and the analysis
(numpy, pandas) must have run on CPython all the same. Skipped where pypy3 is not
installed (vagrant/provision.sh installs it).
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.sim_runs import REPO, digests

needs_pypy = pytest.mark.skipif(shutil.which('pypy3') is None, reason='pypy3 not installed')


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    from tests.sim_runs import run_sim
    base = tmp_path_factory.mktemp('pypy')
    pypy = run_sim('dht8.py', base / 'pypy', base / 'work', 1, '--scale', 'smoke', '--seed',
                   5, '--sim-interpreter', 'pypy3')
    run_sim('dht8.py', base / 'cpython', base / 'work', 2, '--scale', 'smoke', '--seed', 5,
            '--sim-interpreter', 'python3')
    return base / 'pypy', base / 'cpython', pypy


@needs_pypy
@pytest.mark.timeout(900)
def test_pypy3_and_cpython_give_byte_identical_logs_and_tables(runs):
    pypy, cpython, _ = runs
    assert digests(pypy, 'logs') == digests(cpython, 'logs')
    assert digests(pypy, 'tables') == digests(cpython, 'tables')
    assert (pypy / 'report.md').read_text() == (cpython / 'report.md').read_text()


@needs_pypy
def test_the_manifest_names_the_interpreter_that_ran_the_points(runs):
    pypy, cpython, proc = runs
    names = [json.loads((d / 'manifest.json').read_text())['mechanisms']['interpreter']
             for d in (pypy, cpython)]
    assert [n['name'] for n in names] == ['pypy3', 'python3']
    assert [(n['asked'], n['reason']) for n in names] == [('pypy3', 'asked for'),
                                                          ('python3', 'asked for')]
    assert names[0]['implementation'] == 'PyPy' and names[1]['implementation'] == 'CPython'
    assert json.loads((pypy / 'manifest.json').read_text())['status'] == 'ok'
    assert 'dht8: ok, results in' in proc.stdout and 'targets' in proc.stdout.lower()


@pytest.mark.parametrize('script, flags, words', [
    ('kvload.py', ['--backend', 'sim', '--sim-interpreter', 'pypy3'], 'cannot run under pypy3'),
    ('dht8.py', ['--sim-interpreter', 'pypy3'], 'need --backend sim'),
])
def test_an_interpreter_that_cannot_run_the_points_is_one_sentence(tmp_path, script, flags,
                                                                   words):
    proc = subprocess.run([sys.executable, str(REPO / 'topologies' / script), '--dry-run',
                           '--out', str(tmp_path / 'x')] + flags, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert proc.stderr.strip().count('\n') == 0 and not (tmp_path / 'x').exists()


def test_python3_is_the_default_and_auto_takes_pypy3_only_where_the_experiment_runs():
    from types import SimpleNamespace as Params
    from repronet.run import sim_interpreter
    both = Params(name='both', sim_interpreters=('python3', 'pypy3'))
    cpython_only = Params(name='cpython', sim_interpreters=('python3',))
    assert sim_interpreter.resolve(both, Params(sim_interpreter=None)) is None  # here
    assert sim_interpreter.resolve(cpython_only, Params(sim_interpreter='auto')) is None
    assert sim_interpreter.resolve(both, Params(sim_interpreter='auto')) == shutil.which('pypy3')


class _Timed:
    """An experiment whose points are estimated at point['s'] emulated seconds each."""
    name = 'timed'
    sim_interpreters = ('python3', 'pypy3')
    pypy_pays_from_s = 30.0
    fixed_s = point_wall = {}

    def estimate(self, params, point):
        return point['s']


@needs_pypy
def test_auto_takes_pypy3_only_for_points_long_enough_for_the_jit_to_pay():
    from types import SimpleNamespace as Params
    from repronet.run import run_time, sim_interpreter
    auto = Params(sim_interpreter='auto')
    emu_s = 30.0 / run_time.POINT_WALL['sim']           # 30 s simulated
    short, long = _Timed(), _Timed()
    assert sim_interpreter.resolve(short, auto, [{'s': emu_s / 3}] * 2) is None
    assert short.sim_interpreter_choice[:2] == ('python3', 'auto')
    assert 'estimated at 20 s, under the 30 s' in short.sim_interpreter_choice[2]
    assert sim_interpreter.resolve(long, auto, [{'s': emu_s / 3}] * 3) == \
        shutil.which('pypy3')
    assert long.sim_interpreter_choice[:2] == ('pypy3', 'auto')
    assert 'estimated at 30 s, at least the 30 s' in long.sim_interpreter_choice[2]
    record = sim_interpreter.describe(long.sim_interpreter_choice)
    assert record['asked'] == 'auto' and record['reason'] == long.sim_interpreter_choice[2]
    asked = _Timed()        # a named interpreter is taken whatever the estimate
    assert sim_interpreter.resolve(asked, Params(sim_interpreter='pypy3'), []) == \
        shutil.which('pypy3')
    assert asked.sim_interpreter_choice == ('pypy3', 'pypy3', 'asked for')
    never = _Timed()
    never.pypy_pays_from_s = None
    assert sim_interpreter.resolve(never, auto, [{'s': 1e9}]) is None
    assert 'not faster under pypy3' in never.sim_interpreter_choice[2]


@needs_pypy
@pytest.mark.parametrize('scale, chosen', [('smoke', 'python3'), ('default', 'python3')])
def test_auto_keeps_dht8_on_python3_where_pypy3_was_not_measured_faster(scale, chosen):
    from repronet.run import options, sim_interpreter
    from topologies import dht8 as script
    dht8 = script.Dht8()
    params = options.parse(dht8, ['--backend', 'sim', '--sim-interpreter', 'auto', '--scale',
                                  scale])
    found = sim_interpreter.resolve(dht8, params, dht8.points(params))
    assert found == (None if chosen == 'python3' else shutil.which('pypy3'))
    assert dht8.sim_interpreter_choice[:2] == (chosen, 'auto')


# fidelity opts in too (its simulation is workloads.probe and workloads.bulk); the others do
# not gain (transfer, rudp) or cannot run there (kvload, kvscale: numpy, hiredis):
# docs/simulation.md, "Under PyPy". A small run, not the smoke scale: this test adds to every
# CI run.
FIDELITY = ['--scale', 'smoke', '--delays', '5', '--rtt-packets', 50, '--loss-packets', 2000,
            '--duration', 1, '--seed', 4]


def _fidelity(out, interpreter, hashseed):
    env = dict(os.environ, PYTHONHASHSEED=str(hashseed))
    proc = subprocess.run([sys.executable, str(REPO / 'topologies' / 'fidelity.py'),
                           '--backend', 'sim', '--out', str(out), '--sim-interpreter',
                           interpreter] + [str(f) for f in FIDELITY],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((out / 'manifest.json').read_text())


@needs_pypy
def test_fidelity_under_pypy3_is_the_same_run(tmp_path):
    pypy = _fidelity(tmp_path / 'pypy', 'auto', 1)          # auto: pypy3 for fidelity
    cpython = _fidelity(tmp_path / 'cpython', 'python3', 2)
    assert pypy['mechanisms']['interpreter']['name'] == 'pypy3'
    assert cpython['mechanisms']['interpreter']['name'] == 'python3'
    assert pypy['status'] == cpython['status'] == 'ok'
    assert len(digests(tmp_path / 'pypy', 'logs')) > 20
    assert digests(tmp_path / 'pypy', 'logs') == digests(tmp_path / 'cpython', 'logs')
    assert digests(tmp_path / 'pypy', 'tables') == digests(tmp_path / 'cpython', 'tables')
