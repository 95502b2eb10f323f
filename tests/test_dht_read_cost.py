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


def test_the_bench_configures_its_delay_daemon_as_the_emulation_does(tmp_path):
    """The bench's daemon config and command line come from the emulation's own functions
    (the bench once wrote them by hand and asked --spin-permille 500 where the emulation's
    one daemon gets 250): its config is the emulation's for the same two 50 us hops, the C
    parser takes it, and its flags are the emulation's for one receiver."""
    from benchmarks import dht_read_bench
    from repronet.emu import linkemu_daemon
    from repronet.emu.linkemu_paths import PathSpec, daemon_config
    from tests.test_linkdelay_unit import CHECK_C, _compile, run
    conf = tmp_path / 'linkdelay.conf'
    text, argv = dht_read_bench.daemon_setup(conf)
    spec = PathSpec('peer', 'index', ((50, 0), (50, 0)), 0.0, ('peer->s1', 's1->index'))
    assert text.splitlines()[1:] == daemon_config([spec], lambda src: ['10.213.0.2'])[0] \
        .splitlines()[1:] == ['10.213.0.2 0.000000000 2 50 0 50 0']
    conf.write_text(text)
    assert run(_compile(tmp_path / 'check', list(CHECK_C), ['-lm']), 'config', conf) == \
        {'sources': 1, 'min_hold_ns': 100000}
    flags = {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1)}
    assert argv[0] == linkemu_daemon.BINARY and flags['--config'] == str(conf)
    assert flags['--spin-permille'] == str(linkemu_daemon.spin_permille(1)) == '250'
    for flag, value in (('--rt-priority', linkemu_daemon.RT_PRIORITY),
                        ('--rt-budget-ms', linkemu_daemon.RT_BUDGET_MS),
                        ('--spin-us', linkemu_daemon.SPIN_US),
                        ('--queue', linkemu_daemon.QUEUE)):
        assert flags[flag] == str(value), flag
    assert '--gso' in argv and '--control-stdin' in argv
