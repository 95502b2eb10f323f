"""dht8: analysis on the hand-made results folder of tests/dht8_folder.py, and the smoke
run end to end (with a failover check per fault kind read from the raw logs). The plan,
seeds and parameter checks are in test_dht8_plan.py; the analysis' honesty and robustness
in test_analysis_dht8.py and test_analysis_cli.py."""

import json
import os
import pathlib
import subprocess

import pandas as pd
import pytest

from analysis import dht8 as analysis
from analysis.dht8_tables import seed_figures
from repronet.run import cpu_span, pids
from tests import dht8_folder
from workloads import dht8_points, scratch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def run_dir(tmp_path):
    return dht8_folder.make_run(tmp_path)


def test_analysis_tables_from_a_hand_made_folder(run_dir):
    data = analysis.build(run_dir)
    p1 = data['part1']
    reg = p1[p1['variant'] == 'register batched'].iloc[0]
    assert reg['repeats'] == 2
    assert reg['total_time_s'] == pytest.approx(0.005)
    assert reg['time_per_op_ms'] == pytest.approx(1.25)       # 5 ms / 4 operations
    assert reg['time_per_op_ms_min'] == pytest.approx(1.0)
    assert reg['time_per_op_ms_max'] == pytest.approx(1.5)
    assert reg['seed_time_per_op_ms'] == 0.185
    search = p1[p1['variant'] == 'search'].iloc[0]
    assert search['concurrent_clients'] == 2 and search['time_per_op_ms'] == pytest.approx(2)
    points = data['points']
    first = points[points['point'] == 0].iloc[0]
    assert first['cpu_busy'] == pytest.approx(0.9) and first['cpu_over_fraction'] == 1.0
    assert pd.isna(points[points['point'] == 1].iloc[0]['cpu_busy'])   # too short
    cap = data['capture']
    assert list(cap['peer']) == ['p1', 'p2']
    assert list(cap['register_messages']) == [4, 4]
    assert list(cap['expected_messages']) == [4, 4] and cap['matches'].all()
    fo = data['failover'].iloc[0]
    assert fo['fault'] == 'kill' and fo['server'] == 's2'
    assert fo['failed'] == 0 and fo['in_flight_at_fault'] == 1
    assert fo['recovery_ms'] == pytest.approx(20.0)
    assert fo['answered_by_faulty_after_fault'] == 0
    targets = data['targets']
    row = targets[targets['target'].str.startswith('register batched')].iloc[0]
    ratio = dict(zip(targets['target'], seed_figures(targets)))[row['target']][1]
    assert row['verdict'] == 'not met' and ratio == pytest.approx(0.185 / 1.25)
    report = (run_dir / 'report.md').read_text()
    assert 'register batched' in report and '0.185' in report
    assert 'confirmed' in report and 'CPU was the bottleneck' in report
    text = analysis.targets_text(run_dir)
    assert 'not met' in text and 'smoke' in text
    assert (run_dir / 'figures' / 'part1_time_vs_operations.png').exists()


def test_analysis_is_deterministic(run_dir):
    analysis.build(run_dir)
    first = {p.name: p.read_bytes() for p in (run_dir / 'tables').iterdir()}
    first_report = (run_dir / 'report.md').read_text()
    analysis.build(run_dir)
    again = {p.name: p.read_bytes() for p in (run_dir / 'tables').iterdir()}
    assert first == again and first_report == (run_dir / 'report.md').read_text()


def _leftover_processes(marker):
    """Return cmdlines of running processes that mention marker."""
    found = [' '.join(argv) for argv in pids.cmdlines().values()]
    return [cmd for cmd in found if marker in cmd and 'pytest' not in cmd]


def _failover_from_logs(out, timeout):
    """Check each failover point from the raw logs; return the fault kinds seen.

    At the fault some searches must be in flight (started before it, finished after it),
    searches must go on succeeding after it, none answered by the failed server after it,
    and a hung or cut server must cost the search waiting on it the client's timeout (one
    in flight at the fault, or the first one after it that asks that server)."""
    seen = []
    for line in (out / 'logs' / 'points.jsonl').read_text().splitlines():
        record = json.loads(line)
        point, result = record['point'], record['result']
        if point['part'] != 'failover':
            continue
        fault = result['kill']
        assert fault['fault'] == point['fault']
        victim = fault['server'].rsplit('-', 1)[-1]
        ops = []
        for name in dht8_points.node_names(point)['clients'].values():
            ops += [r for r in map(json.loads, (out / 'logs' / (name + '.jsonl'))
                                   .read_text().splitlines()) if r.get('event') == 'op']
        assert ops and all(r['ok'] for r in ops), (point['fault'], ops)
        spanning = [r for r in ops if r['t'] - r['latency'] <= fault['t'] <= r['t']]
        after = [r for r in ops if r['t'] - r['latency'] > fault['t']]
        assert spanning, 'no search in flight at the %s fault' % point['fault']
        assert after and not [r for r in after if r['server'] == victim]
        if point['fault'] in ('hang', 'cut'):
            # the first search that asks the silent server waits out the timeout
            assert max(r['latency'] for r in spanning + after) >= timeout * 0.9
            assert 'ended' in fault           # SIGCONT sent / link back up
        seen.append(point['fault'])
    return seen


@pytest.mark.root
@pytest.mark.timeout(900)    # includes waiting for the machine lock; the run takes ~20 s
def test_smoke_run_end_to_end(tmp_path):
    out = tmp_path / 'run'
    work = tmp_path / 'work'
    proc = subprocess.run(['/usr/bin/python3', 'topologies/dht8.py', '--scale', 'smoke',
                           '--out', str(out), '--workdir', str(work)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'dht8 targets' in proc.stdout
    manifest = json.loads((out / 'manifest.json').read_text())
    assert manifest['status'] == 'ok' and manifest['experiment'] == 'dht8'
    assert set(manifest['filesets']) == {'part1', 'ping', 'part2A', 'part2B', 'part2C'}
    points = pd.read_csv(out / 'tables' / 'points.csv')
    assert len(points) == manifest['points']
    assert points['failed'].sum() == 0 and points['missing_clients'].sum() == 0
    assert (points['ok'] == points['total_ops']).all() and points['ok'].sum() > 0
    part1 = pd.read_csv(out / 'tables' / 'part1.csv')
    assert set(part1['variant']) == set(analysis.SEED_PART1)
    assert set(part1['concurrent_clients']) == {1, 2}
    assert len(pd.read_csv(out / 'tables' / 'part2.csv')) == 4
    assert set(pd.read_csv(out / 'tables' / 'part3.csv')['servers']) == {1, 4}
    assert len(pd.read_csv(out / 'tables' / 'ping.csv')) == 2
    capture = pd.read_csv(out / 'tables' / 'capture.csv')
    assert capture['matches'].all() and len(capture) == 4
    assert (capture['kernel_drops'] == 0).all()
    failover = pd.read_csv(out / 'tables' / 'failover.csv')
    assert len(failover) == 3 and (failover['failed'] == 0).all()
    assert sorted(_failover_from_logs(out, float(manifest['params']['timeout']))) == [
        'cut', 'hang', 'kill']
    assert (out / 'report.md').exists()
    assert not _leftover_processes(str(work))
    assert subprocess.run(['ip', 'link', 'show', 'sw1-eth1'], capture_output=True
                          ).returncode != 0
    assert not list((work / 'names').iterdir())
    # --downloads-in auto: a smoke run's downloads fit in memory (a tmpfs on Debian), and
    # the run removed its memory folder when it ended
    downloads = points[points['op'] == 'download']
    memory = scratch.memory_workdir('dht8')
    assert memory and len(downloads) and (downloads['downloads_fs'] == 'tmpfs').all()
    assert not pathlib.Path(memory).exists()
    assert not (work / 'downloads').exists()
    assert 'Downloads were written on tmpfs in %d points (`--downloads-in auto`' % len(
        downloads) in (out / 'report.md').read_text()
    # the CPU verdict covers the timed parts only: a 'measure' sample's whole interval lies
    # between a point's release and its last client's exit
    step = manifest['cpu']['interval']
    windows = [(json.loads(line)['result']['released'], json.loads(line)['result']['finished'])
               for line in (out / 'logs' / 'points.jsonl').read_text().splitlines()]
    measured = [r['t'] for r in map(json.loads, (out / 'logs' / 'cpu.jsonl').read_text()
                                    .splitlines()) if r.get('phase') == 'measure']
    assert measured and all(any(a - 0.05 <= t - step and t <= b + 0.05 for a, b in windows)
                            for t in measured)
    if os.path.exists(cpu_span.USAGE):  # and the runner read each timed part precisely
        records = [json.loads(line) for line in
                   (out / 'logs' / 'points.jsonl').read_text().splitlines()]
        assert all(r['cpu']['seconds'] >= r['result']['finished'] - r['result']['released']
                   - 0.001 and 0 < r['cpu']['busy'] for r in records)
        assert points['cpu_verdict'].isin(['samples', 'timed part']).all()


@pytest.mark.root
@pytest.mark.timeout(900)    # includes waiting for the machine lock; the run takes ~15 s
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason='needs two CPUs to split')
def test_smoke_run_with_a_cpu_for_the_link_daemons(tmp_path):
    """--link-cpus 1 through the runner: every daemon placed on the last CPU, the run judged
    by the hosts' CPUs (sampler and each timed part), the report's machine line says so."""
    out = tmp_path / 'run'
    proc = subprocess.run(['/usr/bin/python3', 'topologies/dht8.py', '--scale', 'smoke',
                           '--parts', 'I', '--link-cpus', '1', '--out', str(out),
                           '--workdir', str(tmp_path / 'work')],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    manifest = json.loads((out / 'manifest.json').read_text())
    usable = sorted(os.sched_getaffinity(0))
    split = manifest['mechanisms']['link_cpus']
    assert split['reserved'] == 1 and split['daemons'] == str(usable[-1])
    assert split['placed'] and set(split['placed'].values()) == {str(usable[-1])}
    assert manifest['cpu']['judged_cpus'] == usable[:-1]
    records = [json.loads(line) for line in
               (out / 'logs' / 'points.jsonl').read_text().splitlines()]
    if os.path.exists(cpu_span.USAGE):
        assert all(r['cpu']['judged_cpus'] == usable[:-1] for r in records)
    assert 'set apart for the link delay daemons' in (out / 'report.md').read_text()


@pytest.mark.root
@pytest.mark.timeout(900)    # includes waiting for the machine lock; the run takes ~20 s
def test_a_killed_runs_memory_folder_goes_with_repronet_clean(tmp_path):
    """An emulated run marks its memory folder (/dev/shm/repronet-dht8) as guarded by the
    machine lock; SIGKILLed, it cannot remove it, and `repronet clean` does (before, it
    stayed, downloads and all, until the next dht8 run)."""
    import signal
    import time
    from repronet.run import memory_folders
    memory = pathlib.Path(scratch.memory_workdir('dht8'))
    mark = memory / memory_folders.MACHINE
    run = subprocess.Popen(['/usr/bin/python3', 'topologies/dht8.py', '--scale', 'smoke',
                            '--parts', 'I', '--out', str(tmp_path / 'run'),
                            '--workdir', str(tmp_path / 'work')], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600          # the machine lock may be busy first
    try:
        while not mark.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mark.exists(), 'the run never marked its memory folder'
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    assert memory.exists()                      # nobody removed it after the kill
    clean = subprocess.run(['/usr/bin/python3', '-m', 'repronet', 'clean'], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert 'memory folder %s (of an emulated run)' % memory in clean.stdout + clean.stderr
    assert not memory.exists()
