"""A dry run's estimate of a whole smoke run (what ``repronet reproduce`` prints before and
during its runs) is within FACTOR of what such runs took, emulated and simulated.

Before repronet.run.run_time the estimate was the points' sum alone: no start-up, network,
teardown or analysis, and for a simulated run the emulated points' seconds (dht8's simulated
smoke run was estimated at 15 s, kvscale's at 32 s, which took 18). kvload's per-point start-up (3 s) put
its emulated smoke run at 69 s for the 16 it took."""

import json
import os
import pathlib
import subprocess

import pytest

from repronet.run import reproduce, run_time, runner

REPO = pathlib.Path(__file__).resolve().parents[1]

FACTOR = 1.5
# (backend, experiment, flags beyond --scale smoke) -> seconds the whole command took.
# emu: /tmp/ci33c.log (the CI run of 2026-11-27 that ended 02:46 UTC), its slowest-durations
# list: tests/test_NAME.py / test_NAME_experiment.py::test_smoke_run_end_to_end, which runs
# the script with these flags (its own checks after it take well under a second).
# sim: kvload and rudp as repronet reproduce timed them (its manifest 'seconds', the
# simulated seeds test's run in /tmp/pytest-of-root/pytest-17); transfer and dht8 from
# /tmp/ci33c.log, the fixtures of tests/test_transfer_sim.py (two runs, --seed 5: 9.77 s)
# and tests/test_dht8_sim.py (three runs, --seed 7, 7, 8: 29.91 s), per run.
RECORDED = {
    ('emu', 'dht8', ()): 25.1,
    ('emu', 'kvload', ()): 16.0,
    ('emu', 'transfer', ()): 18.2,
    ('emu', 'kvscale', ('--duration', '1', '--slow-cores', '0.125')): 51.9,
    ('emu', 'rudp', ()): 27.8,
    ('sim', 'dht8', ('--seed', '7')): 10.0,
    ('sim', 'kvload', ()): 3.2,
    ('sim', 'transfer', ('--seed', '5')): 4.9,
    ('sim', 'rudp', ()): 2.3,
    # measured by running it (2026-11-27 03:59 UTC, load average 3.6: others' work beside it)
    ('sim', 'kvscale', ()): 18.4,
}


@pytest.mark.parametrize('backend, name, flags', sorted(RECORDED))
def test_a_smoke_runs_estimate_is_within_a_factor_of_what_it_took(tmp_path, backend, name,
                                                                    flags):
    opts = {'scale': 'smoke', 'backend': backend, 'seed': None, 'extra': list(flags)}
    plan = tmp_path / 'plan.json'
    done = subprocess.run(reproduce.command(name, opts, tmp_path / 'run', dry_run=True),
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO),
                                   **{runner.PLAN_ENV: str(plan)}))
    assert done.returncode == 0, done.stderr
    estimated = json.loads(plan.read_text())['estimated_s']     # what reproduce rounds
    took = RECORDED[(backend, name, flags)]
    assert took / FACTOR <= estimated <= took * FACTOR, (estimated, took)


def test_the_rest_of_a_run_is_counted_once_per_run():
    """The fixed part does not grow with the points; the points' part does, by backend."""
    assert run_time.parts('emu', 0)[1] == run_time.parts('emu', 100)[1] > 0
    assert run_time.parts('emu', 100)[0] == 100
    assert 0 < run_time.parts('sim', 100)[0] < 10
    assert run_time.parts('sim', 10, {'sim': 9.0}) == (run_time.POINT_WALL['sim'] * 10, 9.0)
    assert run_time.parts('emu', 10, {'sim': 9.0})[1] == run_time.FIXED_S['emu']
    assert run_time.parts('sim', 10, None, {'sim': 0.5})[0] == 5.0
