"""RunContext.runs_programs and hosts: an experiment asks the backend what it can do, not
which backend it is (the review's leftover: kvload and transfer tested backend == 'sim').
Both answers are exercised for real by the experiments' end-to-end runs: kvload and transfer
with --backend sim (tests/test_kvload_experiment_sim.py, tests/test_transfer_sim.py: no programs: no redis-cli, no iperf3, the TCP model's
settings) and at --scale smoke on Mininet (root tests: redis-cli's DBSIZE, iperf3, sysctl)."""

import pathlib

import pytest

from repronet.run.context import RunContext

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_the_base_leaves_both_to_the_backend():
    ctx = RunContext.__new__(RunContext)
    for call in (ctx.hosts, ctx.runs_programs):
        with pytest.raises(NotImplementedError):
            call()


def test_no_workload_or_topology_asks_for_the_backend_by_name():
    """The experiments' code (topologies/, workloads/) branches on what the context can do."""
    offenders = [str(path.relative_to(REPO)) for folder in ('topologies', 'workloads')
                 for path in sorted((REPO / folder).glob('*.py'))
                 if "backend == 'sim'" in path.read_text() or
                 "backend != 'sim'" in path.read_text()]
    assert offenders == []
