"""Which interpreter runs a simulated run's points: ``--sim-interpreter auto|pypy3|python3``.

Why: the simulator is pure Python doing the same small things millions of times (decode a
frame, run a core, move a train), which PyPy's JIT runs several times faster than CPython
(issue 13: 200,000 events per second with the DHT cores). The analysis needs numpy and
pandas, which exist only for CPython here, so the split is by phase, not by module:

* the runner (CPython) parses and checks the flags, then runs ``_run`` -- results folder,
  network, every point, teardown, manifest -- in a child, ``pypy3 -m
  repronet.run.sim_interpreter SCRIPT CLASS OUT ARGV...``, which imports the topology script as
  a module and calls the experiment's own ``_run`` with the same argv (OUT: the runner's
  ``--out``, whose default names the time);
* the child writes the manifest (``mechanisms.interpreter`` says which one ran) and the
  logs; the runner then reads the manifest and runs the analysis as before.

The two give byte-identical logs and tables for the same seed (``tests/test_sim_pypy.py``):
nothing in the simulation depends on string hashing, and both interpreters share the
Mersenne Twister, float repr and JSON encoding.

The default is python3: PyPy's JIT needs a few hundred thousand events to warm up, so a
short run is slower under it (dht8 ``--scale smoke``: 8.4-9.2 s against 5.8-6.2 s of wall
time at 75f7797). Longer runs gain a little: its search phases run faster
(benchmarks/sim_scale.py, docs/simulation.md, "Under PyPy"), while its download phases are
short runs of code the JIT has not seen, half of whose time is creating the downloaded files,
which costs the same under both ("PyPy's download phase"); dht8 ``--scale default`` took
4-18 % less wall time under pypy3 in four pairs at load 7-12, but 7 % and 0.5 % more in two
quiet pairs (load 1.0-1.1; at load 1.3-3.3, one pair, 10 % more), with three times the
memory, so dht8 stays on python3.
``auto`` is pypy3 when it is installed, the experiment lists it in ``sim_interpreters``
(its simulation imports nothing PyPy lacks, e.g. numpy) and the run is long enough for the
JIT to pay: the points' own estimate (what ``--dry-run`` prints, ``repronet.run.run_time``)
is at least the experiment's ``pypy_pays_from_s`` (measured per experiment; 0: always;
None: never); else this interpreter. The manifest's ``mechanisms.interpreter`` says which
one ran, what was asked and why (``choose``). Signals: Ctrl-C reaches both processes; a SIGTERM to the
runner is passed on, and the child's own teardown records the run as interrupted.
"""

import contextlib
import importlib.util
import io
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import types

from repronet.run.options import SIM_INTERPRETERS as CHOICES  # noqa: F401 (one list)
from repronet.run.options import UsageError
from repronet.run.results import run_status
from repronet.run.signals import Interrupted


# PyPy's default nursery (young generation) is a few MB; the simulation allocates a frame,
# an event and a train per message, and with 64 MB the warm search phase of
# benchmarks/sim_scale.py ran 95,000-125,000 events per CPU second instead of 60,000-80,000.
PYPY_GC_NURSERY = '64M'


def child_env():
    """The environment for a pypy3 child: this one, with a larger nursery unless set."""
    return dict(os.environ, PYPY_GC_NURSERY=os.environ.get('PYPY_GC_NURSERY',
                                                           PYPY_GC_NURSERY))


def current():
    """The name this interpreter has among CHOICES."""
    return 'pypy3' if platform.python_implementation() == 'PyPy' else 'python3'


def describe(choice=None):
    """The manifest's record of the interpreter running the simulation; choice: what
    ``choose`` said (asked, reason), where the runner knows it."""
    record = {'name': current(), 'implementation': platform.python_implementation(),
              'version': platform.python_version(), 'executable': sys.executable}
    if choice is not None:
        record.update(asked=choice[1], reason=choice[2])
    return record


def points_seconds(experiment, params, points):
    """The simulated points' wall seconds as ``--dry-run`` estimates them (under python3)."""
    from repronet.run import dry_run
    return dry_run.estimate(experiment, params, points, backend='sim')[1]


def choose(experiment, params, points):
    """Return (name, asked, reason): the interpreter for the points, the --sim-interpreter
    asked for (python3 when none was) and why, in words for the manifest."""
    given = getattr(params, 'sim_interpreter', None)
    asked = given or 'python3'
    if asked != 'auto':
        return asked, asked, 'asked for' if given else 'the default'
    allowed = getattr(experiment, 'sim_interpreters', ('python3',))
    if 'pypy3' not in allowed:
        return current(), asked, '%s\'s simulation needs modules PyPy lacks' % (
            experiment.name)
    if current() != 'pypy3' and not shutil.which('pypy3'):
        return current(), asked, 'no pypy3 on PATH'
    pays_from = getattr(experiment, 'pypy_pays_from_s', 0.0)
    if pays_from is None:
        return current(), asked, ('%s\'s simulation was not faster under pypy3 at any '
                                  'scale measured' % experiment.name)
    if not pays_from:
        return 'pypy3', asked, '%s gains under pypy3 at every scale measured' % (
            experiment.name)
    seconds = points_seconds(experiment, params, points)
    if seconds < pays_from:
        return 'python3', asked, ('the points are estimated at %.0f s, under the %.0f s '
                                  'from which pypy3\'s JIT warm-up pays' % (seconds,
                                                                            pays_from))
    return 'pypy3', asked, ('the points are estimated at %.0f s, at least the %.0f s from '
                            'which pypy3\'s JIT warm-up pays' % (seconds, pays_from))


def resolve(experiment, params, points=()):
    """Return the executable to run the points in, or None for this process; UsageError in
    one sentence for a choice that cannot run. The choice is kept on the experiment
    (``sim_interpreter_choice``) for the manifest."""
    choice = experiment.sim_interpreter_choice = choose(experiment, params, points)
    wanted = choice[0]
    allowed = getattr(experiment, 'sim_interpreters', ('python3',))
    if wanted == current():
        return None
    if wanted not in allowed:
        raise UsageError('%s\'s simulation cannot run under %s (its node programs need '
                         'modules only %s has); use --sim-interpreter %s' % (
                             experiment.name, wanted, current(), current()))
    if current() == 'pypy3':
        raise UsageError('the analysis needs CPython: run the script with /usr/bin/python3, '
                         'not pypy3')
    path = shutil.which(wanted)
    if path is None:
        raise UsageError('--sim-interpreter %s: no %s on PATH (apt-get install pypy3)'
                         % (wanted, wanted))
    return path


def run_in(executable, experiment, params, argv, guard):
    """Run the experiment's points in executable; return (status, folder) as _run does
    (folder: .path and .manifest, or None if the child made no results folder)."""
    script = sys.modules[type(experiment).__module__].__file__
    cmd = [executable, '-m', __name__, script, type(experiment).__name__,
           str(params.out)] + list(argv)
    with guard.held():              # no child left unrecorded
        child = subprocess.Popen(cmd, env=child_env())
    while True:
        try:
            code = child.wait()
            break
        except Interrupted as e:    # the child tears its run down and records it
            child.send_signal(e.signum)
    try:
        with open(pathlib.Path(params.out) / 'manifest.json') as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        print('%s: the %s child ended with %s before it made a results folder' % (
            experiment.name, executable, code), file=sys.stderr)
        return 'failed', None
    folder = types.SimpleNamespace(path=pathlib.Path(params.out), manifest=manifest)
    status = manifest.get('status')
    if status not in ('ok', 'failed', 'interrupted'):
        print('%s: the %s child ended with %s and left the run %s' % (
            experiment.name, executable, code, run_status(manifest)), file=sys.stderr)
        status = 'failed'
    experiment.child_run_dir = folder.path
    return status, folder


def child_main(argv):
    """SCRIPT CLASS OUT ARGV...: run the experiment's _run here and exit 0 (the manifest holds
    the outcome) or 2 (the flags were refused here, where they were accepted before)."""
    from repronet.run import options
    from repronet.run.signals import SignalGuard
    if len(argv) < 3:
        print('repronet.run.sim_interpreter: the runner starts this with SCRIPT CLASS OUT '
              'ARGV...; run the experiment\'s script with --sim-interpreter instead',
              file=sys.stderr)
        return 2
    script, name, out, argv = argv[0], argv[1], argv[2], argv[3:]
    spec = importlib.util.spec_from_file_location('_repronet_experiment', script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    experiment = getattr(module, name)()
    sys.argv = [script] + argv      # what the manifest records as the command
    try:
        params = options.parse(experiment, argv)
        params.out = out            # the runner's (a default one names the time)
        with contextlib.redirect_stdout(io.StringIO()):     # the runner said it already
            options.check_shared(params, experiment.limits)
            experiment.check(params)
            points = experiment.points(params)
        experiment.sim_interpreter_choice = choose(experiment, params, points)  # manifest
    except UsageError as e:
        print('%s: %s' % (experiment.name, e), file=sys.stderr)
        return 2
    with SignalGuard() as guard:
        try:
            experiment._run(params, argv, points, guard)
        except Interrupted:         # before the results folder existed
            return 130
    return 0


if __name__ == '__main__':
    sys.exit(child_main(sys.argv[1:]))
