"""Every node program and workload tool with a main answers a wrong command line in one
sentence on stderr with exit status 2, and starts nothing (repronet.usage.UsageParser);
``--help`` still prints the full usage. The analysis commands and the benchmark scripts
answer an unknown flag the same way.

The programs are found by their ``if __name__ == '__main__':`` line, so a new one without
a wrong value below fails here until it has one. Each wrong value is one the program
cannot act on (a port out of range, a negative count, a missing or unreadable file); none
sends anything anywhere (the addresses are 127.0.0.1 and are refused before use).
"""

import glob
import os
import subprocess
import sys

import pytest

from tests.kv_proc import ROOT

NO_ARGUMENTS = {'nodes.kv.cluster'}     # prints its ring table; takes no command line
# A path that does not exist, made per test under its own tmp_path (missing(tmp)): a fixed one
# such as /nonexistent-x can be created by a program run as root (CI runs these as root), and
# every later run that expects it missing then starts a server instead of refusing.
MISSING = '{missing}'


def missing(tmp, argv):
    """argv with MISSING replaced by a path under tmp that does not exist."""
    return [a.replace(MISSING, os.path.join(str(tmp), 'missing', 'x')) for a in argv]


def _wrong_values(tmp):
    """module -> argv with one wrong value (tmp: a folder that exists; tmp/text: a text file)."""
    return {
        'nodes.dht.client': ['--name', 'c', '--servers', 's1=127.0.0.1:1', '--op', 'search',
                             '--names', tmp + '/text', '--vnodes', '0'],
        'nodes.dht.peer': ['--name', 'p', '--listen', '127.0.0.1:70000', '--share', tmp],
        'nodes.dht.server': ['--name', 's1', '--listen', '127.0.0.1:0',
                             '--servers', 's1=127.0.0.1:1', '--replicas', '-1'],
        'nodes.kv.server': ['--port', '70000'],
        'nodes.rudp.recv': ['--port', '0', '--out', MISSING],
        'nodes.rudp.send': ['--dst', '127.0.0.1', '--port', '1', '--file', MISSING],
        'nodes.transfer.client': ['get', '--server', '127.0.0.1', '--port', '70000',
                                  '--name', 'x', '--out', tmp],
        'nodes.transfer.server': ['--root', MISSING],
        'workloads.bulk': ['client', '--dst', '127.0.0.1', '--port', '1', '--duration', '-1'],
        'workloads.capture': ['--port', '1', '--pcap', tmp + '/text'],
        'workloads.dht_bench_localhost': ['--files', '-1', '--keep', tmp + '/bench'],
        'workloads.kvcluster_admin': ['info', '--cluster', 'a=127.0.0.1:1', '--vnodes', '4',
                                      '--timeout', '-1'],
        'workloads.kvload': ['--port', '70000'],
        'workloads.kvmix': ['--servers', '127.0.0.1:1', '--clients', '-1'],
        'workloads.probe': ['send', '--dst', '127.0.0.1', '--port', '70000'],
    }


def _has_main(path):
    with open(path, encoding='utf-8') as f:
        return "if __name__ == '__main__':" in f.read()


def _modules(*patterns):
    """Modules (``python -m`` names) of the files matching patterns that run as programs."""
    found = []
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, '.')
            module = module[:-len('.__main__')] if module.endswith('.__main__') else module
            if _has_main(path) and module not in NO_ARGUMENTS:
                found.append(module)
    return found


PROGRAMS = _modules('nodes/**/*.py', 'workloads/*.py')
# the other programs a user runs: the analysis commands (-m) and the benchmark scripts
OTHERS = ['-m ' + m for m in _modules('analysis/*.py')] + [
    os.path.relpath(path, ROOT) for path in sorted(glob.glob(os.path.join(ROOT, 'benchmarks',
                                                                          '*.py')))
    if _has_main(path)] + ['-m repronet.emu.capabilities']


def _run(module, argv):
    """Run a program (a module, '-m MODULE' or a script's path) with argv."""
    if module.endswith('.py'):
        head = [module]
    else:
        head = ['-m', module.split()[-1]]
    return subprocess.run([sys.executable] + head + argv, cwd=ROOT, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def _one_sentence(proc):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stdout == ''
    assert proc.stderr.count('\n') == 1 and proc.stderr.endswith('\n'), proc.stderr
    assert 'usage:' not in proc.stderr and 'Traceback' not in proc.stderr, proc.stderr


def test_every_program_has_a_wrong_value_here():
    assert PROGRAMS and sorted(_wrong_values('/tmp')) == PROGRAMS


@pytest.mark.parametrize('module', PROGRAMS + OTHERS)
def test_an_unknown_flag_is_one_sentence(module):
    proc = _run(module, ['--no-such-flag'])
    _one_sentence(proc)


@pytest.mark.parametrize('module', PROGRAMS)
def test_a_wrong_value_is_one_sentence(module, tmp_path):
    (tmp_path / 'text').write_text('not a pcap file, one name\n')
    proc = _run(module, missing(tmp_path, _wrong_values(str(tmp_path))[module]))
    _one_sentence(proc)
    assert not (tmp_path / 'bench').exists()     # nothing started, nothing written


@pytest.mark.parametrize('module', PROGRAMS + OTHERS)
def test_help_is_still_the_full_usage(module):
    proc = _run(module, ['--help'])
    assert proc.returncode == 0 and proc.stdout.startswith('usage: '), proc.stderr
    assert '--help' in proc.stdout


def test_the_runners_own_child_started_by_hand_says_so_in_one_sentence():
    """repronet.run.sim_interpreter is started by the runner (SCRIPT CLASS OUT ARGV...); by
    hand without them it was an IndexError traceback."""
    for argv in ([], ['--no-such-flag']):
        proc = _run('-m repronet.run.sim_interpreter', argv)
        _one_sentence(proc)
        assert '--sim-interpreter' in proc.stderr


# repronet's own programs, found by a ``__main__`` line at the start of a line (runner.py's
# is an example in its docstring): each wrong command line is one the program refuses before
# it does anything, so none acts even as root (no signal, no cgroup, no namespace, no fork).
INTERNAL_WRONG = {
    'repronet.cluster.agent': [[], ['frob'], ['signal', MISSING, 't'],
                               ['signal', MISSING, 't', 'TERM'],
                               ['listening', MISSING, 't', 'port'],
                               ['cgroup', MISSING, 'create', 'n', '1']],
    'repronet/cluster/launch.py': [[], ['--dir', MISSING, '--token', 't'],
                                   ['--dir', MISSING, '--', 'true'],
                                   ['--frob', '1', '--dir', MISSING, '--token', 't', '--',
                                    'true']],
    # without arguments it serves (as root): only wrong ones here
    'repronet.cluster.nsserver': [['--frob'], ['serve'], ['--']],
    'repronet.emu.capabilities': [['--no-such-flag']],
    'repronet.emu.cpuidle': [[], ['sleep'], ['poll', 'x']],
    'repronet.run.provenance': [['--frob']],
    'repronet.run.sim_interpreter': [[], ['--no-such-flag']],
}


def _repronet_programs():
    """python -m names (or, for launch.py, run as a script by path) of repronet's programs."""
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, 'repronet', '**', '*.py'), recursive=True)):
        with open(path, encoding='utf-8') as f:
            if not any(line.startswith("if __name__ == '__main__':") for line in f):
                continue
        relative = os.path.relpath(path, ROOT)
        module = relative[:-3].replace(os.sep, '.')
        if module == 'repronet.__main__':
            continue        # the repronet command: tests/test_cli.py
        found.append(relative if module == 'repronet.cluster.launch' else module)
    return found


def test_every_repronet_program_has_wrong_command_lines_here():
    assert sorted(INTERNAL_WRONG) == sorted(_repronet_programs())


@pytest.mark.parametrize('program, argv', [
    (program, argv) for program, argvs in sorted(INTERNAL_WRONG.items()) for argv in argvs])
def test_a_repronet_program_started_wrongly_says_what_it_is_in_one_sentence(program, argv,
                                                                           tmp_path):
    """The agent, the launcher, the namespace server and the idle-state holder are started by
    the cluster backend, not by people; started by hand with no or wrong arguments, each
    names itself and what it wants in one sentence, exit 2, no traceback (the agent without
    a command was an IndexError, the launcher and cpuidle a usage line with exit 1, the
    provenance printer ignored what it was given)."""
    proc = _run(program, missing(tmp_path, argv))
    _one_sentence(proc)
    name = program.split('/')[-1] if program.endswith('.py') else program
    assert proc.stderr.startswith(name + ': '), proc.stderr


@pytest.mark.parametrize('program', sorted(set(INTERNAL_WRONG) - {
    'repronet.run.sim_interpreter'}))       # the runner's child: SCRIPT CLASS OUT ARGV..., no flags
def test_a_repronet_program_still_prints_its_full_usage_on_help(program):
    proc = _run(program, ['--help'])
    assert proc.returncode == 0 and proc.stdout.startswith('usage: '), proc.stderr


@pytest.mark.parametrize('argv, called', [
    (['probe'], ('probe',)),
    (['signal', 'D', '1-2', 'SIGTERM', 'group'], ('send_signal', 'D', '1-2', 'SIGTERM', 'group')),
    (['signal', 'D', '1-2', 'SIGKILL'], ('send_signal', 'D', '1-2', 'SIGKILL', 'group')),
    (['cpu', 'D', '1-2', '1-3'], ('cpu', 'D', ['1-2', '1-3'])),
    (['listening', 'D', '1-2', '5001', 'udp'], ('listening', 'D', '1-2', 5001, True)),
    (['listening', 'D', '1-2', '5001'], ('listening', 'D', '1-2', 5001, False)),
    (['cgroup', 'D', 'create', 'h1', '50000', '100000', '42'],
     ('cgroup', 'D', 'create', 'h1', 50000, 100000, 42)),
    (['cgroup', 'D', 'remove', 'h1'], ('cgroup', 'D', 'remove', 'h1')),
    (['clear', 'D'], ('clear', 'D')),
])
def test_the_agent_still_does_what_the_backend_asks(monkeypatch, capsys, argv, called):
    """Every command line repronet.cluster sends the agent (nodes.py, network.py,
    placement.py) reaches the same function as before its parser, with the same values
    (ports and cgroup numbers now as ints, which those functions converted themselves);
    the first parser refused `cgroup DIR remove NAME`, which the backend sends."""
    from repronet.cluster import agent
    seen = []

    def record_call(name):
        def fake(*args, **kwargs):
            seen.append((name,) + args + tuple(kwargs.values()))
            return {}
        return fake

    monkeypatch.setattr(agent, 'probe', record_call('probe'))
    for name in ('send_signal', 'cpu', 'listening', 'cgroup', 'clear'):
        monkeypatch.setattr(agent, name, record_call(name))
    assert agent.main(argv) == 0
    assert seen == [called] and capsys.readouterr().out == '{}\n'
