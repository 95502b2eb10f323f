"""The install path: options parsed before anything changes; a second run changes nothing;
the repronet command it installs runs this checkout."""

import os
import subprocess

import pytest

from tests import nobody

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, 'vagrant', 'provision.sh')
BIN = '/usr/local/bin/repronet'


def provision(*args):
    """Run provision.sh non-interactively; return the finished process."""
    env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
    return subprocess.run(['bash', SCRIPT] + list(args), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env, timeout=900)


def test_script_parses():
    assert subprocess.run(['bash', '-n', SCRIPT]).returncode == 0


def test_help_and_bad_option_change_nothing():
    shown = provision('--help')
    assert shown.returncode == 0 and '--test' in shown.stdout and '--run' in shown.stdout
    bad = provision('--frobnicate')
    assert bad.returncode == 2 and "unknown option '--frobnicate'" in bad.stderr


@pytest.mark.root
def test_second_run_changes_nothing():
    site = subprocess.run(['/usr/bin/python3', '-c',
                           'import site; print(site.getsitepackages()[0])'],
                          capture_output=True, text=True, check=True).stdout.strip()
    pth = os.path.join(site, 'repronet.pth')
    first = provision()
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    before = os.stat(pth).st_mtime_ns
    wrapper_before = os.stat(BIN).st_mtime_ns
    second = provision()
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    out = second.stdout
    assert 'packages already installed' in out and 'installing:' not in out
    assert '%s already points to %s' % (pth, REPO) in out
    assert 'import repronet -> %s' % REPO in out
    assert 'repronet capability report' in out
    if os.path.exists(os.path.join(REPO, 'repronet', 'emu', 'linkdelay', 'Makefile')):
        assert 'is up to date' in out or 'Nothing to be done' in out
    assert os.stat(pth).st_mtime_ns == before
    assert '%s already runs %s' % (BIN, REPO) in out
    assert os.stat(BIN).st_mtime_ns == wrapper_before


@pytest.mark.root
def test_installs_the_repronet_command(tmp_path):
    if os.path.exists(BIN):
        os.unlink(BIN)
    done = provision()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert 'wrote %s -> %s' % (BIN, REPO) in done.stdout
    assert os.access(BIN, os.X_OK)
    # from another directory, as another user, with another checkout's repronet/ in the
    # current directory: still this checkout's command line
    (tmp_path / 'repronet').mkdir()
    (tmp_path / 'repronet' / '__init__.py').write_text('raise SystemExit("wrong checkout")\n')
    os.chmod(tmp_path, 0o755)
    # (as 'nobody' where it can read this checkout; a clone in a private folder is readable
    # by root alone, and then root runs it: the other checkout in cwd is still the point)
    user = nobody.AS_NOBODY if nobody.can_read(os.path.join(REPO, 'repronet')) else []
    shown = subprocess.run(user + [BIN, '--help'], capture_output=True, text=True, cwd=tmp_path,
                           env={'PATH': '/usr/bin:/bin'})
    assert shown.returncode == 0, shown.stderr
    assert 'compare RUN_A RUN_B' in shown.stdout
    listed = subprocess.run([BIN, 'list'], capture_output=True, text=True, cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout.startswith('dht8 '), listed.stderr


def test_the_vm_test_that_test_runs_in_the_background_is_a_root_test():
    """--test runs the VM test beside the tests without root, then `-m root` without it: a
    renamed or unmarked VM test would run twice or beside the other root tests."""
    import importlib
    import re
    text = open(SCRIPT).read()
    node = re.search(r'^\s*vm_test=(\S+)$', text, re.M).group(1)
    path, name = node.split('::')
    assert os.path.isfile(os.path.join(REPO, path))
    module = importlib.import_module(path[:-len('.py')].replace('/', '.'))
    marks = [m.name for m in getattr(getattr(module, name), 'pytestmark', [])]
    assert 'root' in marks
    assert "-m 'not root'" in text and '-m root --deselect "$vm_test"' in text
