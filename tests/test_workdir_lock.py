"""A run's --workdir lock (repronet.run.leftovers.workdir_lock) is taken by the runner before
anything is built, for every experiment with a --workdir: a second run given a workdir
another run holds is refused in one sentence, exit 2, with no results folder made.

Before, only dht8 locked it, in its setup() after the network (Mininet's, or the
simulator's) was built and the results folder written; kvload, kvscale, transfer and rudp
did not lock it at all. The simulated path takes the lock at the same place in
``Experiment.main`` as the emulated one (after the machine lock, which a simulation does not
take), so a run without root shows the order."""

import os
import subprocess
import sys

import pytest

from repronet.run.leftovers import workdir_lock
from repronet.run.options import UsageError
from tests.kv_proc import ROOT

EXPERIMENTS = ('dht8', 'kvload', 'kvscale', 'rudp', 'transfer')
TRY_LOCK = ('import sys\n'
            'from repronet.run.leftovers import workdir_lock\n'
            'try:\n    workdir_lock(sys.argv[1])\nexcept Exception as e:\n'
            '    print(type(e).__name__, e); sys.exit(3)\n')


def test_a_second_holder_is_refused_in_one_sentence(tmp_path):
    held = workdir_lock(str(tmp_path / 'w'))
    other = subprocess.run([sys.executable, '-c', TRY_LOCK, str(tmp_path / 'w')], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert other.returncode == 3
    assert other.stdout == ('UsageError another run (pid %d) is using --workdir %s; give '
                            'this one another --workdir\n' % (os.getpid(),
                                                              tmp_path / 'w'))
    held.close()
    workdir_lock(str(tmp_path / 'w')).close()
    blocked = tmp_path / 'file'
    blocked.write_text('')
    with pytest.raises(UsageError, match='cannot lock --workdir'):
        workdir_lock(str(blocked / 'sub'))


@pytest.mark.parametrize('name', EXPERIMENTS)
def test_a_run_meets_a_held_workdir_before_anything_is_built(name, tmp_path):
    work, out = tmp_path / 'work', tmp_path / 'out'
    held = workdir_lock(str(work))
    try:
        proc = subprocess.run(
            [sys.executable, 'topologies/%s.py' % name, '--backend', 'sim', '--scale', 'smoke',
             '--workdir', str(work), '--out', str(out)],
            cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    finally:
        held.close()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr == '%s: another run (pid %d) is using --workdir %s; give this one ' \
        'another --workdir\n' % (name, os.getpid(), work), proc.stderr
    assert not out.exists()                 # no results folder, nothing built
    assert sorted(p.name for p in work.iterdir()) == ['.lock']
