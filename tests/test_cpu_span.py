"""The precise CPU reading of a timed part (repronet.run.cpu_span): parsing, the verdict
from two readings by the sampler's bar, and a real reading through CpuMonitor's phases.

Figures worked out by hand: 2 CPUs, 20 ms of wall time; 14 + 13 ms of usage is 27 of 40 ms,
busy 0.675, over the 0.65 bar; 13 + 13 ms is exactly 0.65, not over (the sampler's rule is
busy > threshold)."""

import os

import pytest

from repronet.run import cpu, cpu_span

MS = 1_000_000


def _reading(ns, usage, stat=(100, 50, 0)):
    return {'ns': ns, 'usage': list(usage), 'stat': stat}


def test_parse_usage_reads_one_figure_per_cpu_and_rejects_garbage():
    assert cpu_span.parse_usage('29322986919468 32948341600097 \n') == [
        29322986919468, 32948341600097]
    for bad in ('', '\n', '12 -3'):
        with pytest.raises(ValueError):
            cpu_span.parse_usage(bad)


def test_verdict_from_two_readings_uses_the_samplers_bar():
    span = cpu_span.delta(_reading(0, (0, 0)), _reading(20 * MS, (14 * MS, 13 * MS),
                                                         (104, 51, 1)))
    assert span == {'wall_ns': 20 * MS, 'usage_ns': [14 * MS, 13 * MS], 'stat': (4, 1, 1)}
    record = cpu_span.verdict([span], cpu.THRESHOLD)
    assert record['busy'] == pytest.approx(0.675) and record['bound'] is True
    assert record['cores'] == [0.7, 0.65] and record['seconds'] == 0.02
    assert (record['stat_busy'], record['steal']) == (0.75, 0.25)
    assert record['threshold'] == 0.65
    edge = cpu_span.delta(_reading(0, (0, 0)), _reading(20 * MS, (13 * MS, 13 * MS)))
    assert cpu_span.verdict([edge], cpu.THRESHOLD)['bound'] is False


def test_spans_of_one_point_add_up_and_no_span_is_no_verdict():
    a = cpu_span.delta(_reading(0, (0, 0)), _reading(10 * MS, (10 * MS, 10 * MS)))
    b = cpu_span.delta(_reading(50 * MS, (30 * MS, 30 * MS)),
                       _reading(80 * MS, (32 * MS, 32 * MS)))
    record = cpu_span.verdict([a, b], cpu.THRESHOLD)   # 24 of 80 ms: the second's idle wins
    assert record['busy'] == pytest.approx(0.3) and record['bound'] is False
    assert cpu_span.verdict([], cpu.THRESHOLD) is None
    with pytest.raises(ValueError, match='different CPUs'):
        cpu_span.delta(_reading(0, (0, 0)), _reading(1, (0,)))


@pytest.mark.skipif(not os.path.exists(cpu_span.USAGE), reason='no cpuacct cgroup v1 here')
def test_monitor_reads_each_measure_phase_and_hands_it_over_once():
    monitor = cpu.CpuMonitor(interval=5)    # no sample falls inside: only the span judges
    monitor.set_phase(cpu.MEASURE)
    sum(range(2_000_000))   # some tens of ms of CPU: at least one tick
    monitor.set_phase(None)
    record = monitor.take_span()
    assert record['source'] == cpu_span.SOURCE and 0 < record['seconds'] < 5
    assert len(record['cores']) == len(cpu_span.read()['usage'])
    assert 0 < record['busy'] and record['bound'] == (record['busy'] > cpu.THRESHOLD)
    assert monitor.take_span() is None
    monitor.set_phase(None)                 # no measure phase, no reading
    assert monitor.take_span() is None
