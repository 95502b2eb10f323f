"""Unit tests of analysis.portstats on small hand-made controller logs."""

import json
import math

import pytest

from analysis import portstats


def _stat(t, dpid, port, rx, tx, duration=None, name=None):
    """One port_stats record as the controller writes it."""
    record = {'t': t, 'event': 'port_stats', 'dpid': dpid, 'port': port, 'name': name,
              'rx_packets': rx // 1000, 'tx_packets': tx // 1000, 'rx_bytes': rx,
              'tx_bytes': tx, 'rx_dropped': 0, 'tx_dropped': 1, 'rx_errors': 0, 'tx_errors': 0}
    if duration is not None:
        record['duration'] = duration
    return record


def _write(run_dir, name, lines):
    """Write log lines (dicts become JSON, strings are written as they are)."""
    logs = run_dir / 'logs'
    logs.mkdir(exist_ok=True)
    with open(logs / name, 'w', encoding='utf-8') as out:
        for line in lines:
            out.write((json.dumps(line) if isinstance(line, dict) else line) + '\n')


def test_rates_use_switch_duration_and_rows_are_sorted(tmp_path):
    """Rates come from byte deltas over the switch's own interval, rows sorted by dpid, port, t."""
    _write(tmp_path, 'c0.jsonl', [
        {'t': 100.0, 'event': 'controller_started'},
        _stat(100.30, 2, 1, 0, 0, duration=1.0, name='s2-eth1'),
        _stat(100.25, 1, 2, 500, 0, duration=1.0, name='s1-eth2'),
        _stat(100.20, 1, 1, 1000, 2000, duration=1.0, name='s1-eth1'),
        # the controller received this reply late (t gap 1.5 s), the switch's gap is 1.0 s
        _stat(101.70, 1, 1, 1000 + 1250000, 2000 + 125000, duration=2.0, name='s1-eth1'),
        _stat(101.25, 1, 2, 500, 0, duration=2.0, name='s1-eth2'),
    ])
    table = portstats.port_stats_table(str(tmp_path))
    assert list(table.columns) == list(portstats.COLUMNS)
    assert list(zip(table.dpid, table.port)) == [(1, 1), (1, 1), (1, 2), (1, 2), (2, 1)]
    first, second = table.iloc[0], table.iloc[1]
    assert math.isnan(first.rx_mbps) and math.isnan(first.interval)
    assert second.interval == pytest.approx(1.0)
    assert second.rx_mbps == pytest.approx(10.0)   # 1.25e6 bytes in 1 s = 10 Mbit/s
    assert second.tx_mbps == pytest.approx(1.0)
    assert table.iloc[3].rx_mbps == 0.0
    assert second.port_name == 's1-eth1' and second.tx_dropped == 1


def test_falls_back_to_controller_time_without_duration(tmp_path):
    """Without the switch's duration the interval is the controller's receive-time gap."""
    _write(tmp_path, 'c0.jsonl', [_stat(10.0, 1, 1, 0, 0), _stat(12.0, 1, 1, 2500000, 0)])
    table = portstats.port_stats_table(str(tmp_path))
    assert table.iloc[1].interval == pytest.approx(2.0)
    assert table.iloc[1].rx_mbps == pytest.approx(10.0)


def test_counter_reset_and_zero_interval_give_nan_not_numbers(tmp_path):
    """A counter going backwards or a non-positive interval yields NaN rates."""
    _write(tmp_path, 'c0.jsonl', [
        _stat(1.0, 1, 1, 5000, 5000, duration=5.0),
        _stat(2.0, 1, 1, 100, 6000, duration=0.5),    # port recreated: duration and rx reset
        _stat(3.0, 1, 1, 200, 7000, duration=0.5),    # same duration: zero interval
    ])
    table = portstats.port_stats_table(str(tmp_path))
    assert math.isnan(table.iloc[1].interval) and math.isnan(table.iloc[1].rx_mbps)
    assert math.isnan(table.iloc[2].rx_mbps) and math.isnan(table.iloc[2].tx_mbps)


def test_skips_bad_lines_and_reads_every_log(tmp_path):
    """Truncated, non-JSON and incomplete records are skipped; other logs are read too."""
    good = _stat(1.0, 3, 1, 10, 20, duration=1.0)
    missing = dict(good)
    del missing['rx_bytes']
    _write(tmp_path, 'c0.jsonl', [good, 'not json "port_stats"', missing,
                                  '{"t": 2.0, "event": "port_stats", "dpid": 3, "po'])
    _write(tmp_path, 'other.jsonl', [_stat(2.0, 3, 1, 30, 40, duration=2.0)])
    _write(tmp_path, 'ignored.err', [_stat(3.0, 3, 1, 50, 60, duration=3.0)])
    table = portstats.port_stats_table(str(tmp_path))
    assert list(table.t) == [1.0, 2.0]
    assert table.iloc[1].rx_mbps == pytest.approx(20 * 8 / 1e6)


def test_identical_logs_give_identical_tables(tmp_path):
    """Determinism: the same log read twice gives equal tables."""
    _write(tmp_path, 'c0.jsonl', [_stat(t, d, p, int(t * 1000), int(t * 10), duration=t)
                                  for t in (3.0, 1.0, 2.0) for d in (2, 1) for p in (2, 1)])
    first = portstats.port_stats_table(str(tmp_path))
    second = portstats.port_stats_table(str(tmp_path))
    assert first.equals(second)
    assert list(first.t[:3]) == [1.0, 2.0, 3.0]


def test_empty_run_gives_empty_table_with_columns(tmp_path):
    """No logs: an empty table that still has every column and type."""
    table = portstats.port_stats_table(str(tmp_path))
    assert table.empty and list(table.columns) == list(portstats.COLUMNS)
    assert str(table.rx_bytes.dtype) == 'int64'


def test_counter_delta(tmp_path):
    """counter_delta spans from the last sample before to the first sample after."""
    _write(tmp_path, 'c0.jsonl', [_stat(t, 1, 1, int(t) * 100, 0, duration=t)
                                  for t in (1.0, 2.0, 3.0, 4.0)])
    table = portstats.port_stats_table(str(tmp_path))
    assert portstats.counter_delta(table, 1, 1, 'rx_bytes', 2.5, 3.5) == 200
    assert portstats.counter_delta(table, 1, 1, 'rx_bytes', 0.5, 3.5) is None
    assert portstats.counter_delta(table, 1, 1, 'rx_bytes', 2.0, 9.0) is None
