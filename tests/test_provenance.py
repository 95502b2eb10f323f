"""Provenance: every manifest key present, git state right, no crash without git."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from repronet.run import provenance

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_git = pytest.mark.skipif(shutil.which('git') is None, reason='git is not installed')


def git(repo, *args):
    """Run git in repo with a throwaway identity."""
    subprocess.run(['git', '-c', 'user.name=repronet-test', '-c',
                    'user.email=test@repronet.invalid', '-C', str(repo)] + list(args),
                   check=True, capture_output=True)


def test_collect_has_every_key_and_is_json():
    info = provenance.collect(REPO)
    assert set(info) == {'kernel', 'os', 'python', 'versions', 'git', 'host'}
    assert info['kernel']['release'] == os.uname().release
    assert info['python']['executable'] == sys.executable
    assert info['host']['cpus'] == os.cpu_count()
    assert info['host']['memory_bytes'] > 0
    for key in ('mininet', 'openvswitch', 'os_ken', 'numpy', 'pandas', 'seaborn', 'scapy',
                'iperf3'):
        assert key in info['versions']
    assert json.loads(json.dumps(info)) == info


def test_versions_of_installed_tools_are_found():
    # vagrant/provision.sh installs all three: a version missing here is a real failure.
    found = provenance.versions()
    assert shutil.which('ovs-vsctl') and 'Open vSwitch' in found['openvswitch']
    assert shutil.which('iperf3') and found['iperf3'].startswith('iperf')
    assert found['mininet'][0].isdigit()


@needs_git
def test_git_revision_and_dirty_flag(tmp_path):
    git(tmp_path, 'init', '-q')
    (tmp_path / 'a.txt').write_text('one\n')
    git(tmp_path, 'add', 'a.txt')
    git(tmp_path, 'commit', '-q', '-m', 'first')
    clean = provenance.git_state(str(tmp_path))
    assert clean['error'] is None and len(clean['revision']) == 40
    assert clean['dirty'] is False and clean['untracked'] == 0

    (tmp_path / 'new.txt').write_text('untracked\n')
    untracked = provenance.git_state(str(tmp_path))
    assert untracked['dirty'] is False and untracked['untracked'] == 1

    (tmp_path / 'a.txt').write_text('two\n')
    dirty = provenance.git_state(str(tmp_path))
    assert dirty['dirty'] is True and dirty['revision'] == clean['revision']


@needs_git
def test_folder_that_is_no_checkout(tmp_path):
    state = provenance.git_state(str(tmp_path))
    assert state['revision'] is None and state['dirty'] is None
    assert 'no git checkout' in state['error']


@needs_git
def test_repository_without_commits(tmp_path):
    git(tmp_path, 'init', '-q')
    state = provenance.git_state(str(tmp_path))
    assert state['revision'] is None and state['error']


def test_missing_git_binary(tmp_path, monkeypatch):
    monkeypatch.setenv('PATH', str(tmp_path))
    state = provenance.git_state(REPO)
    assert state == {'revision': None, 'dirty': None, 'untracked': None,
                     'error': 'git is not installed'}
    assert provenance.versions()['openvswitch'] is None
