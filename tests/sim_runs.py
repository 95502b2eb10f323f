"""Running a topology script with ``--backend sim`` as a separate process, for the tests
that check a simulated experiment end to end and byte for byte (``PYTHONHASHSEED`` differs
per run, so nothing may depend on string hashing)."""

import json
import os
import subprocess
import sys

from tests.test_dht8_sim import REPO, _digests as digests  # noqa: F401 (digests: the tests')


def run_sim(script, out, workdir, hashseed, *flags):
    """Run topologies/<script> --backend sim to the end; assert it exited 0; return it."""
    env = dict(os.environ, PYTHONHASHSEED=str(hashseed))
    proc = subprocess.run(
        [sys.executable, str(REPO / 'topologies' / script), '--backend', 'sim',
         '--out', str(out), '--workdir', str(workdir)] + [str(f) for f in flags],
        capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


def two_runs(tmp_path_factory, tag, run):
    """run(out, workdir, hashseed) twice under a new folder (one workdir, other string
    hashes); return (first folder, second folder, the first CompletedProcess)."""
    base = tmp_path_factory.mktemp(tag)
    first = run(base / 'a', base / 'work', 1)
    run(base / 'b', base / 'work', 2)
    return base / 'a', base / 'b', first


def points_of_ok_run(folder):
    """The points.jsonl records of a simulated run whose manifest says it ended ok."""
    manifest = json.loads((folder / 'manifest.json').read_text())
    assert manifest['status'] == 'ok' and manifest['mechanisms']['backend'] == 'sim'
    return [json.loads(line) for line in (folder / 'logs' / 'points.jsonl').open()]


def assert_no_cpu_monitor(folder):
    """The report of a simulated run without --sim-cost says it had no CPU monitor: kvload,
    kvscale and rudp said 'mean busy -, saturated: False' (analysis.stats.run_cpu_line)."""
    report = (folder / 'report.md').read_text()
    line = [ln for ln in report.splitlines() if ln.startswith('- CPU over the run')]
    assert line == ['- CPU over the run: no monitor (a simulated run: the load of the machine '
                    'that ran the simulator does not enter its times); no --sim-cost, so the '
                    'model charged no CPU time'], line
    assert 'mean busy' not in report
