"""CPU sampler: sees a busy core, logs JSON lines, stops cleanly, judges saturation."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from repronet.run import cpu
from repronet.run.cpu import CpuMonitor


def test_read_stat_has_machine_and_cores():
    counters = cpu.read_stat()
    assert 'cpu' in counters
    cores = [name for name in counters if name != 'cpu']
    assert 1 <= len(cores) <= os.cpu_count()
    total, idle, steal = counters['cpu']
    assert total >= idle >= 0 and steal >= 0


def test_busy_loop_raises_its_core(tmp_path):
    core = min(os.sched_getaffinity(0))
    log = tmp_path / 'cpu.jsonl'
    burner = subprocess.Popen([sys.executable, '-c', 'while True: pass'])
    try:
        os.sched_setaffinity(burner.pid, {core})
        time.sleep(0.3)  # let the burner reach its loop before sampling
        with CpuMonitor(interval=0.2, path=str(log)) as monitor:
            time.sleep(1.5)
    finally:
        burner.kill()
        burner.wait()
    summary = monitor.summary()
    index = monitor.core_names.index('cpu%d' % core)
    # A spinning process keeps its core busy whatever else runs there.
    assert summary['core_mean'][index] >= 0.7
    assert summary['samples'] >= 3
    assert summary['mean'] >= 0.5 / os.cpu_count()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == monitor.samples
    assert all(set(s) == {'t', 'busy', 'steal', 'cores', 'core_steal', 'phase'} for s in lines)
    assert all(len(s['core_steal']) == len(s['cores']) for s in lines)


def test_stop_is_clean_and_final():
    monitor = CpuMonitor(interval=0.05).start()
    time.sleep(0.3)
    monitor.stop()
    assert not any(t.name == 'repronet-cpu' and t.is_alive() for t in threading.enumerate())
    count = len(monitor.samples)
    assert count >= 1
    time.sleep(0.2)
    assert len(monitor.samples) == count
    monitor.stop()  # stopping twice is harmless
    monitor.start()
    with pytest.raises(RuntimeError, match='already started'):
        monitor.start()
    monitor.stop()


def test_summary_applies_the_35_percent_idle_bar():
    monitor = CpuMonitor()
    assert monitor.summary()['samples'] == 0 and not monitor.summary()['saturated']
    monitor.samples = [{'t': i, 'busy': b, 'steal': 0.0, 'cores': [b, 0.99 if b > 0.9 else b]}
                       for i, b in enumerate([0.2] * 18 + [0.7, 0.95])]
    summary = monitor.summary()
    assert summary['threshold'] == 0.65
    assert summary['over_fraction'] == pytest.approx(0.1)
    assert summary['saturated'] is True           # 10 % over > 5 % allowed
    assert summary['core_over_fraction'] == pytest.approx(0.05)
    assert summary['max'] == 0.95
    monitor.samples = monitor.samples[:18] + [{'t': 19, 'busy': 0.7, 'steal': 0.0,
                                               'cores': [0.7, 0.7]}] + monitor.samples[:1]
    assert monitor.summary()['saturated'] is False  # 1 of 20 over: exactly 5 %, allowed


def test_summary_keeps_the_worst_steal_per_core():
    """A burst of steal (the hypervisor taking the VM's CPU) is kept as the worst sample per
    core, not only averaged away; samples from before core_steal existed count as none."""
    monitor = CpuMonitor()
    monitor.samples = [{'t': i, 'busy': 0.3, 'steal': s, 'cores': [0.3, 0.3],
                        'core_steal': [s, 0.0]} for i, s in enumerate([0.0] * 9 + [0.3])]
    monitor.samples.append({'t': 10, 'busy': 0.3, 'steal': 0.0, 'cores': [0.3, 0.3]})
    summary = monitor.summary()
    assert summary['steal_mean'] == pytest.approx(0.3 / 11, abs=1e-4)
    assert summary['steal_max'] == 0.3
    assert summary['core_steal_max'] == [0.3, 0.0]
    assert CpuMonitor().summary()['core_steal_max'] == []


def test_sample_at_finds_the_interval_holding_a_moment():
    monitor = CpuMonitor(interval=0.5)
    monitor.samples = [{'t': 10.0 + 0.5 * i, 'busy': 0.1 * i, 'steal': 0.0, 'cores': [0.0]}
                       for i in range(4)]                  # intervals end at 10.0 .. 11.5
    assert monitor.sample_at(10.2)['t'] == 10.5
    assert monitor.sample_at(10.5)['t'] == 10.5            # an end belongs to its interval
    assert monitor.sample_at(9.6)['t'] == 10.0
    assert monitor.sample_at(9.4) is None and monitor.sample_at(11.6) is None


@pytest.mark.parametrize('kwargs', [{'interval': 0}, {'threshold': 1.5}])
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        CpuMonitor(**kwargs)


def test_verdict_is_taken_over_the_measure_phase():
    monitor = CpuMonitor()
    setup = [{'t': i, 'busy': 0.9, 'steal': 0.0, 'cores': [0.9], 'phase': None}
             for i in range(5)]
    measure = [{'t': 5 + i, 'busy': 0.3, 'steal': 0.0, 'cores': [0.3], 'phase': 'measure'}
               for i in range(10)]
    monitor.samples = setup + measure
    summary = monitor.summary()
    assert summary['judged'] == 'measure' and summary['samples'] == 10
    assert summary['samples_total'] == 15 and summary['saturated'] is False
    monitor.samples = setup  # no phases named: every sample counts
    assert monitor.summary()['judged'] == 'all' and monitor.summary()['saturated'] is True


def test_phase_is_recorded_per_sample():
    monitor = CpuMonitor(interval=0.05).start()
    try:
        monitor.set_phase('measure')
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
                s['phase'] == 'measure' for s in monitor.samples):
            time.sleep(0.05)
    finally:
        monitor.stop()
    phases = [s['phase'] for s in monitor.samples]
    assert 'measure' in phases
    # Samples before the change are unlabelled, the one spanning it too.
    assert phases[:phases.index('measure')] == [None] * phases.index('measure')
