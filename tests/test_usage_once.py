"""repronet.usage.UsageParser refuses an option given twice in one sentence, in every program.

argparse lets the last of ``--scale smoke --scale seed`` win without a word; a person who
pasted two command lines together then runs something they did not read. The parser every
repronet program uses refuses it (exit 2 or UsageError, nothing started), while options
that gather (append, count) still take several.
"""

import argparse
import os
import subprocess
import sys

import pytest

from repronet.usage import UsageError, UsageParser

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _parser(tool=None):
    p = UsageParser(prog='prog', tool=tool)
    p.add_argument('--scale', default='default')
    p.add_argument('--count', type=int)
    p.add_argument('--flag', action='store_true')
    p.add_argument('--quiet', action='store_false', dest='loud')
    p.add_argument('--mode', action='store_const', const='fast')
    p.add_argument('--gso', action=argparse.BooleanOptionalAction, default=None)
    p.add_argument('--add', action='append')
    p.add_argument('-v', action='count', default=0)
    p.add_argument('name', nargs='?')
    return p


@pytest.mark.parametrize('argv,said', [
    (['--scale', 'smoke', '--scale', 'seed'], '--scale is given twice'),
    (['--scale=smoke', '--scale', 'smoke'], '--scale is given twice'),
    (['--count', '1', 'x', '--count', '2'], '--count is given twice'),
    (['--flag', '--flag'], '--flag is given twice'),
    (['--quiet', '--quiet'], '--quiet is given twice'),
    (['--mode', '--mode'], '--mode is given twice'),
    (['--gso', '--no-gso'], '--gso and --no-gso set the same option; give one of them'),
    (['--no-gso', '--no-gso'], '--no-gso is given twice'),
])
def test_a_second_appearance_is_one_sentence(argv, said):
    with pytest.raises(UsageError) as e:
        _parser().parse_args(argv)
    assert str(e.value) == said + '; prog --help lists the options'


def test_each_once_and_gathering_options_parse_as_argparse_does():
    ns = _parser().parse_args(['--scale', 'seed', '--count', '3', '--flag', '--quiet',
                               '--mode', '--no-gso', '--add', 'a', '--add', 'b', '-v', '-v',
                               'n'])
    assert vars(ns) == {'scale': 'seed', 'count': 3, 'flag': True, 'loud': False,
                        'mode': 'fast', 'gso': False, 'add': ['a', 'b'], 'v': 2, 'name': 'n'}
    # The bookkeeping leaves nothing behind, and one parser parses again from scratch.
    p = _parser()
    p.parse_args(['--scale', 'seed'])
    assert vars(p.parse_args(['--scale', 'smoke']))['scale'] == 'smoke'


def test_a_tool_exits_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        _parser(tool='prog').parse_args(['--flag', '--flag'])
    assert e.value.code == 2
    assert capsys.readouterr().err == 'prog: --flag is given twice.\n'


def test_a_subcommand_refuses_its_own_repeats(capsys):
    p = UsageParser(prog='prog', tool='prog')
    p.add_argument('--out')
    run = p.add_subparsers(dest='cmd').add_parser('run')
    run.add_argument('--n', type=int)
    assert vars(p.parse_args(['--out', 'o', 'run', '--n', '2'])) == \
        {'out': 'o', 'cmd': 'run', 'n': 2}
    with pytest.raises(SystemExit):
        p.parse_args(['run', '--n', '2', '--n', '3'])
    assert capsys.readouterr().err == 'prog: --n is given twice.\n'


def _run(argv):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE='1')
    return subprocess.run([sys.executable] + argv, capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=120)


def test_an_experiment_script_refuses_a_repeated_flag_before_anything():
    proc = _run(['topologies/dht8.py', '--backend', 'sim', '--scale', 'smoke', '--dry-run',
                 '--scale', 'seed'])
    assert proc.returncode == 2 and proc.stdout == ''
    assert proc.stderr.strip().splitlines() == [
        'dht8: --scale is given twice; dht8.py --help lists the options']


def test_a_node_program_refuses_a_repeated_flag_and_starts_nothing():
    proc = _run(['-m', 'nodes.kv.server', '--port', '7000', '--port', '7001'])
    assert (proc.returncode, proc.stdout) == (2, '')
    assert proc.stderr.endswith(': --port is given twice.\n') and proc.stderr.count('\n') == 1


def test_options_in_groups_refuse_repeats_too():
    p = UsageParser(prog='prog')
    shared = p.add_argument_group('shared options')
    shared.add_argument('--scale')
    either = shared.add_mutually_exclusive_group()
    either.add_argument('--fast', action='store_true')
    either.add_argument('--slow', action='store_true')
    alone = p.add_mutually_exclusive_group()
    alone.add_argument('--out')
    for argv, flag in ((['--scale', 'a', '--scale', 'b'], '--scale'),
                       (['--fast', '--fast'], '--fast'), (['--out', 'a', '--out', 'b'], '--out')):
        with pytest.raises(UsageError, match='^%s is given twice; ' % flag):
            p.parse_args(argv)
    assert vars(p.parse_args(['--scale', 'a', '--slow', '--out', 'o'])) == \
        {'scale': 'a', 'fast': False, 'slow': True, 'out': 'o'}
