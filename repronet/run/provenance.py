"""Where a run came from: software versions, kernel, git revision, host.

A result is only reproducible if its manifest says which code and which tools produced it
(Flent records the kernel and tool versions in every result file for the same reason).
:func:`collect` gathers that once per run, cheaply: package versions come from installed
metadata (``importlib.metadata``, falling back to ``dpkg-query``), never by importing numpy,
pandas or seaborn; tools are asked for ``--version`` with a short timeout. Nothing here may
fail a run: a missing tool, a folder that is no git checkout or a missing ``git`` binary is
recorded as ``None`` plus a one-line ``error``, never raised.

Keys (stable; the manifest stores them as they are): ``kernel``, ``os``, ``python``,
``versions``, ``git``, ``host``.
"""

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys

from repronet.emu.linkcpus import usable_cpus

_TIMEOUT = 10

# Manifest key -> (Python distribution names, Debian package) for Python packages.
_PYTHON_PACKAGES = {
    'mininet': (('mininet',), 'mininet'),
    'os_ken': (('os-ken', 'os_ken'), 'python3-os-ken'),
    'numpy': (('numpy',), 'python3-numpy'),
    'pandas': (('pandas',), 'python3-pandas'),
    'seaborn': (('seaborn',), 'python3-seaborn'),
    'matplotlib': (('matplotlib',), 'python3-matplotlib'),
    'scapy': (('scapy',), 'python3-scapy'),
}

# Manifest key -> argv whose first output line names the version.
_TOOLS = {
    'openvswitch': ['ovs-vsctl', '--version'],
    'iperf3': ['iperf3', '--version'],
    'iproute2': ['ip', '-V'],
    'iptables': ['iptables', '--version'],
}


def _first_line(argv):
    """First non-empty output line of argv, or None when it cannot run."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    for line in (proc.stdout + proc.stderr).splitlines():
        if line.strip():
            return line.strip()
    return None


def _package_version(dists, debian):
    """Installed version of a Python distribution, else of its Debian package."""
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    line = _first_line(['dpkg-query', '-W', '-f', '${Status} ${Version}\n', debian])
    if line and line.startswith('install ok installed '):
        return line.split()[-1]
    return None


def versions():
    """Versions of the Python packages and tools repronet relies on (None: missing)."""
    found = {key: _package_version(*spec) for key, spec in _PYTHON_PACKAGES.items()}
    found.update({key: _first_line(argv) for key, argv in _TOOLS.items()})
    return found


def _git(repo_dir, *args):
    """(returncode, stdout) of a git command in repo_dir; (None, reason) if git cannot run."""
    argv = ['git', '-c', 'safe.directory=*', '-C', repo_dir] + list(args)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT,
                              check=False)
    except FileNotFoundError:
        return None, 'git is not installed'
    except (OSError, subprocess.SubprocessError) as exc:
        return None, 'git failed: %s' % exc
    if proc.returncode != 0:
        return proc.returncode, proc.stderr.strip().splitlines()[-1:] or ['']
    return 0, proc.stdout


def git_state(repo_dir):
    """Revision, dirty flag (tracked changes) and untracked count of the checkout."""
    state = {'revision': None, 'dirty': None, 'untracked': None, 'error': None}
    code, out = _git(repo_dir, 'rev-parse', 'HEAD')
    if code != 0:
        state['error'] = out if code is None else (
            '%s is no git checkout (or has no commit): %s' % (repo_dir, out[0]))
        return state
    state['revision'] = out.strip()
    code, out = _git(repo_dir, 'status', '--porcelain', '--untracked-files=all')
    if code != 0:
        state['error'] = 'git status failed'
        return state
    lines = [line for line in out.splitlines() if line]
    state['untracked'] = sum(1 for line in lines if line.startswith('??'))
    state['dirty'] = any(not line.startswith('??') for line in lines)
    return state


def _os_release():
    """PRETTY_NAME, ID and VERSION_ID from /etc/os-release (empty dict if absent)."""
    fields = {}
    try:
        with open('/etc/os-release') as handle:
            for line in handle:
                key, sep, value = line.strip().partition('=')
                if sep and key in ('PRETTY_NAME', 'ID', 'VERSION_ID'):
                    fields[key.lower()] = value.strip('"')
    except OSError:
        pass
    return fields


def host():
    """CPU count, usable CPUs, CPU model and memory of this machine."""
    info = {'hostname': socket.gethostname(), 'cpus': os.cpu_count(),
            'cpus_usable': len(usable_cpus()) or None, 'cpu_model': None,
            'memory_bytes': None}
    try:
        with open('/proc/cpuinfo') as handle:
            for line in handle:
                if line.startswith('model name'):
                    info['cpu_model'] = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open('/proc/meminfo') as handle:
            for line in handle:
                if line.startswith('MemTotal:'):
                    info['memory_bytes'] = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    return info


def collect(repo_dir):
    """Everything the manifest records about where a run came from."""
    uname = platform.uname()
    return {
        'kernel': {'release': uname.release, 'version': uname.version,
                   'machine': uname.machine},
        'os': _os_release(),
        'python': {'version': platform.python_version(), 'executable': sys.executable,
                   'implementation': platform.python_implementation()},
        'versions': versions(),
        'git': git_state(os.fspath(repo_dir)),
        'host': host(),
    }


if __name__ == '__main__':
    import json
    from repronet.usage import UsageParser
    UsageParser(prog='python3 -m repronet.run.provenance', tool='repronet.run.provenance',
                about='it takes no arguments and prints, as JSON, the provenance a results '
                      "folder's manifest records for this machine and checkout",
                description='Print this machine\'s and checkout\'s provenance as JSON (what '
                            'a manifest records).').parse_args()
    print(json.dumps(collect(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                     indent=2, sort_keys=True))
