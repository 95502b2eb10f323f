"""Every experiment refuses a bad value in one sentence, exit 2, before anything is built.

Each case runs the real script (as a user would) with one bad flag; none of them may take
the machine lock, clean up or make a results folder."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BAD = [
    ('smoke', ['--pings', '0'], '--pings 0 must be a whole number from 1 to 10000'),
    ('smoke', ['--duration', '0'], '--duration 0.0 must be seconds from 1 to 3600'),
    ('smoke', ['--duration', 'nan'], '--duration nan must be seconds from 1 to 3600'),
    ('smoke', ['--bw', '-1'], '--bw -1.0 must be Mbit/s from 0.1 to 10000'),
    ('smoke', ['--repeat', '100000000'], '--repeat 100000000 must be a whole number'),
    ('smoke', ['--out', ''], None),     # root: '--out must name a folder'; else needs root
    ('fidelity', ['--duration', '0'], '--duration 0.0 must be seconds from 1 to 3600'),
    ('fidelity', ['--delays', '5,x'], "--delays '5,x' is not a comma-separated list"),
    ('fidelity', ['--delays', '-1'], '--delays -1 must be one-way delays in ms from 0'),
    ('fidelity', ['--losses', '100'], '--losses 100 must be loss rates in percent'),
    ('fidelity', ['--rates', '10'], '--rates 10 must be MBIT@MS pairs'),
    ('fidelity', ['--rates', '5000@1'], '--rates 5000@1 must be MBIT@MS pairs'),
    ('fidelity', ['--rtt-packets', '0'], '--rtt-packets 0 must be a whole number'),
    ('fidelity', ['--jitter', '30'], '--jitter 30 is more than --jitter-delay 20'),
    ('dht8', ['--timeout', 'nan'], '--timeout nan must be seconds'),
    ('dht8', ['--files', '1000000000000'], '--files 1000000000000 must be'),
    ('kvload', ['--clients', '0'], '--clients 0 must be a whole number from 1 to 16'),
    ('kvload', ['--requests', '0'], '--requests 0 must be a whole number from 1 to'),
    ('kvload', ['--servers', 'ours,foo'],
     "--servers must list distinct values among ours,redis, not 'ours,foo'"),
    ('kvload', ['--layouts', 'lan,lan'],
     "--layouts must list distinct values among local,lan, not 'lan,lan'"),
    ('kvload', ['--lan-delay', '5'], "--lan-delay='5' is not a time with a unit"),
    ('kvload', ['--lan-delay', '500ms'], "--lan-delay='500ms' is more than 0.1 s"),
    ('kvload', ['--workdir', 'relative/dir'],
     "--workdir must be an absolute path, not 'relative/dir'"),
    ('transfer', ['--sizes', '1000,x'],
     "--sizes must list whole numbers from 1 to 2147483648, not '1000,x'"),
    ('transfer', ['--packets', '0'], "--packets must list whole numbers from 1 to"),
    ('transfer', ['--losses', '60'], "--losses must list numbers from 0 to 50, not '60'"),
    ('transfer', ['--conns', '17'], '--conns 17 must be a whole number from 1 to 16'),
    ('transfer', ['--bw', '-5'], '--bw -5.0 must be Mbit/s (0: no shaping) from 0 to 10000'),
    ('transfer', ['--delay', '5'], "--delay='5' is not a time with a unit"),
    ('transfer', ['--workdir', 'rel'], "--workdir must be an absolute path, not 'rel'"),
]


@pytest.mark.parametrize('name, argv, sentence', BAD)
def test_bad_value_is_one_sentence_before_anything(name, argv, sentence, tmp_path):
    out = subprocess.run(['/usr/bin/python3', os.path.join(REPO, 'topologies', name + '.py')]
                         + argv, capture_output=True, text=True, timeout=60, cwd=str(tmp_path),
                         env=dict(os.environ, PYTHONPATH=REPO))
    if sentence is None:
        sentence = ('--out must name a folder' if os.geteuid() == 0 else 'needs root')
    assert out.returncode in (1, 2) and out.stdout == ''
    assert out.stderr.count('\n') == 1 and sentence in out.stderr, out.stderr
    assert out.stderr.startswith(name + ': ')
    assert list(tmp_path.iterdir()) == []       # no results folder, nothing written
