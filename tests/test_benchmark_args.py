"""benchmarks/args.whole: a wrong number is one sentence, not argparse's list of every choice."""

import subprocess
import sys

import pytest

from benchmarks.args import whole

REPO = __file__.rsplit('/tests/', 1)[0]


def test_whole_numbers_in_range_pass_and_others_say_why():
    parse = whole(10, 100000)
    assert parse('10') == 10 and parse('100000') == 100000
    for text in ('9', '100001', '1.5', 'x', ''):
        with pytest.raises(Exception, match='is not a whole number from 10 to 100000'):
            parse(text)


def test_a_script_answers_a_bad_count_in_one_line():
    proc = subprocess.run([sys.executable, 'benchmarks/lan_latency.py', '--count', '5'],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == \
        'lan_latency.py: argument --count: 5 is not a whole number from 10 to 100000.\n'
