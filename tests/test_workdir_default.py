"""The default --workdir names the user unless it is root (``workloads.scratch.default_workdir``).

A run under sudo left /tmp/repronet-dht8 owned by root, and a later simulated run without
root (``topologies/dht8.py --backend sim --scale smoke``) stopped: "--workdir
/tmp/repronet-dht8: /tmp/repronet-dht8 is not writable". The situation is made here in a
folder of the test's own: the root run's folder is one this user cannot write (under root,
the commands run as 'nobody' and the folder is root's). Checked against the code before:
the scripts' help named the shared folder, and there was no per-user default to lock."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests import nobody
from workloads.scratch import default_workdir

REPO = pathlib.Path(__file__).resolve().parents[1]
AS_USER = nobody.AS_NOBODY if os.geteuid() == 0 else []
UID = 65534 if os.geteuid() == 0 else os.geteuid()
# experiment: where its scratch data goes by default (on disk for the transfers)
WORKDIRS = {'dht8': '/tmp', 'kvload': '/tmp', 'kvscale': '/tmp', 'transfer': '/var/tmp',
            'rudp': '/var/tmp'}
LOCK_BOTH = '''
import sys
from repronet.run.leftovers import workdir_lock
from repronet.run.options import UsageError
from workloads.scratch import default_workdir
base = sys.argv[1]
try:
    workdir_lock(base + '/repronet-dht8')
except UsageError as e:
    print(e)
mine = default_workdir('dht8', base)
workdir_lock(mine)
print(mine)
'''


def _run(argv):
    """Run argv as this user, or as 'nobody' under root, from a checkout it can read."""
    env = dict(os.environ, PYTHONPATH=str(nobody.checkout()), PYTHONDONTWRITEBYTECODE='1')
    return subprocess.run(AS_USER + argv, capture_output=True, text=True, env=env, cwd='/',
                          timeout=120)


def test_root_keeps_the_plain_name_and_everyone_else_adds_the_uid():
    assert default_workdir('dht8', uid=0) == '/tmp/repronet-dht8'
    assert default_workdir('dht8', uid=1000) == '/tmp/repronet-dht8-1000'
    assert default_workdir('rudp', '/var/tmp', 7) == '/var/tmp/repronet-rudp-7'


def test_a_folder_a_root_run_left_does_not_stop_a_run_without_root(tmp_path):
    base = tmp_path if not AS_USER else pathlib.Path(tempfile.mkdtemp(dir='/tmp'))
    theirs = base / 'repronet-dht8'
    theirs.mkdir()
    try:
        base.chmod(0o1777)                      # like /tmp
        if not AS_USER:
            theirs.chmod(0o555)                 # a folder this user cannot write
        out = _run([sys.executable, '-c', LOCK_BOTH, str(base)])
        assert out.returncode == 0, out.stderr
        refused, mine = out.stdout.splitlines()
        assert refused.startswith('cannot lock --workdir %s: ' % theirs), refused
        assert mine == '%s/repronet-dht8-%d' % (base, UID)
        assert (pathlib.Path(mine) / '.lock').is_file()
        assert os.listdir(theirs) == []
    finally:
        theirs.chmod(0o755)
        if AS_USER:
            shutil.rmtree(base)


@pytest.mark.parametrize('name', sorted(WORKDIRS))
def test_every_script_defaults_to_the_users_own_workdir(name):
    out = _run([sys.executable, str(nobody.checkout() / 'topologies' / (name + '.py')),
                '--help'])
    assert out.returncode == 0, out.stderr
    text = ' '.join(out.stdout.split()).replace('- ', '-')    # argparse wraps at '-'
    assert '%s/repronet-%s-%d' % (WORKDIRS[name], name, UID) in text, text


@pytest.mark.parametrize('name', sorted(WORKDIRS))
def test_a_simulation_defaults_to_a_workdir_apart_from_the_emulations(name):
    """A simulation takes no machine lock, so it may run beside an emulation of the same
    experiment: with one default workdir the emulated dht8 found it locked (a new user ran
    `repronet reproduce --backend sim` beside `repronet reproduce`) after building its network."""
    script = str(REPO / 'topologies' / (name + '.py'))

    def planned(*extra):
        out = subprocess.run([sys.executable, script, '--scale', 'smoke', '--dry-run'] +
                             list(extra), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    own = default_workdir(name, WORKDIRS[name])
    if name in ('dht8', 'rudp', 'transfer'):        # the ones whose dry run names it
        assert own + '-sim' in planned('--backend', 'sim') and own + '-sim' not in planned()
    import importlib
    from repronet.run import options
    from repronet.run.runner import Experiment
    module = importlib.import_module('topologies.' + name)
    experiment = next(v() for v in vars(module).values() if isinstance(v, type) and
                      issubclass(v, Experiment) and v is not Experiment)
    assert options.parse(experiment, ['--backend', 'sim']).workdir == own + '-sim'
    assert options.parse(experiment, []).workdir == own
    assert options.parse(experiment, ['--backend', 'sim', '--workdir', '/x']).workdir == '/x'
