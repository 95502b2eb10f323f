"""benchmarks/dht_read_cost.py refuses bad arguments in one sentence before it builds
anything (it makes namespaces as root; its figures are printed, not asserted)."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / 'benchmarks' / 'dht_read_cost.py'


@pytest.mark.parametrize('argv, says', [
    (['--names', 'x'], 'comma-separated whole numbers'),
    (['--clients', '11'], '--clients 1 to 10'),
    (['--arrivals', 'whole,tcp'], '--arrivals takes a comma list'),
    (['--gap', '0'], '--gap in (0, 100000] us'),
    (['--dht-share', '/nonexistent/share'], 'is not a folder'),
])
def test_bad_arguments_are_refused_in_one_sentence(argv, says):
    done = subprocess.run([sys.executable, str(SCRIPT)] + argv, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2 and says in done.stderr
