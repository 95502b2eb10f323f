"""The install path: options parsed before anything changes; a second run changes nothing."""

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, 'vagrant', 'provision.sh')


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


def test_second_run_changes_nothing():
    if os.geteuid() != 0:
        if os.environ.get('CI', '').lower() in ('true', '1', 'yes'):
            pytest.fail('CI=true but not root: provision.sh cannot be checked')
        pytest.skip('provision.sh needs root')
    site = subprocess.run(['/usr/bin/python3', '-c',
                           'import site; print(site.getsitepackages()[0])'],
                          capture_output=True, text=True, check=True).stdout.strip()
    pth = os.path.join(site, 'repronet.pth')
    first = provision()
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    before = os.stat(pth).st_mtime_ns
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
