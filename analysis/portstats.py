"""Per-port switch counters from the controller's log, as one tidy table.

The OpenFlow controller (``nodes/osken_switch.py``) writes a ``port_stats`` JSON line per switch
port every statistics interval, holding the switch's cumulative counters. This module turns
those lines into a pandas DataFrame with one row per (sample, switch, port):

``t, dpid, port, port_name, duration, rx_packets, tx_packets, rx_bytes, tx_bytes, rx_dropped,
tx_dropped, rx_errors, tx_errors, interval, rx_mbps, tx_mbps``

``rx_mbps``/``tx_mbps`` are the rates over the interval since the previous sample of the same
port, in Mbit/s (10^6 bits per second). The ``interval`` (seconds) is measured on the switch's own
clock (``duration``, the port's age when the switch read the counters) when both samples carry
it, since the controller's receive time ``t`` also contains the request/reply latency of a busy
controller; it falls back to ``t`` otherwise. The first sample of a port, a non-positive
interval, and a counter that went backwards (the port was recreated) give NaN rates, never a
made-up number. ``rx``/``tx`` are from the switch's point of view: ``rx`` is what entered the
switch on that port.

The table is read from ``RUN_DIR/logs/*.jsonl`` alone (any log that holds ``port_stats``
records, so it does not depend on what the controller node was named); lines that are not
valid JSON, such as a last line cut short by a crash, are skipped. Rows are sorted by
``dpid, port, t`` so identical logs give identical tables.
"""

import glob
import os

import numpy as np
import pandas as pd

from repronet.run.results import read_jsonl

COUNTERS = ('rx_packets', 'tx_packets', 'rx_bytes', 'tx_bytes', 'rx_dropped', 'tx_dropped',
            'rx_errors', 'tx_errors')
COLUMNS = (('t', 'dpid', 'port', 'port_name', 'duration') + COUNTERS
           + ('interval', 'rx_mbps', 'tx_mbps'))
LOCAL_PORT = 0xfffffffe  # OFPP_LOCAL: the switch's own internal interface


def read_records(run_dir):
    """All port_stats records of RUN_DIR/logs/*.jsonl, in file and line order."""
    records = []
    for path in sorted(glob.glob(os.path.join(run_dir, 'logs', '*.jsonl'))):
        records += read_jsonl(path, event='port_stats')
    return records


def port_stats_table(run_dir):
    """Tidy DataFrame of every port sample with per-interval rates in Mbit/s."""
    rows = [_row(record) for record in read_records(run_dir)]
    rows = [row for row in rows if row is not None]
    if not rows:
        return pd.DataFrame({column: pd.Series(dtype=_dtype(column)) for column in COLUMNS})
    table = pd.DataFrame(rows, columns=COLUMNS[:-3])
    table = table.sort_values(['dpid', 'port', 't'], kind='mergesort').reset_index(drop=True)
    return _with_rates(table)


def _row(record):
    """One table row from a record, or None when a required field is missing or not a number."""
    try:
        row = {'t': float(record['t']), 'dpid': int(record['dpid']), 'port': int(record['port']),
               'port_name': record.get('name'), 'duration': _float_or_nan(record.get('duration'))}
        for counter in COUNTERS:
            row[counter] = int(record[counter])
    except (KeyError, TypeError, ValueError):
        return None
    return row


def _float_or_nan(value):
    """A float, or NaN when the value is absent or not numeric."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float('nan')


def _with_rates(table):
    """Add the interval and the rx/tx rates between consecutive samples of each port."""
    groups = table.groupby(['dpid', 'port'], sort=False)
    d_duration = groups['duration'].diff()
    d_t = groups['t'].diff()
    dt = d_duration.where(d_duration.notna(), d_t)
    dt = dt.where(dt > 0)
    table['interval'] = dt
    for side in ('rx', 'tx'):
        delta = groups[side + '_bytes'].diff()
        delta = delta.where(delta >= 0)
        table[side + '_mbps'] = delta * 8 / dt / 1e6
    return table


def _dtype(column):
    """Column type of the empty table."""
    if column == 'port_name':
        return object
    if column in ('dpid', 'port') or column in COUNTERS:
        return np.int64
    return float


def counter_delta(table, dpid, port, counter, since, until):
    """Counter growth from the last sample at/before `since` to the first at/after `until`."""
    samples = table[(table.dpid == dpid) & (table.port == port)]
    before = samples[samples.t <= since]
    after = samples[samples.t >= until]
    if before.empty or after.empty:
        return None
    return int(after[counter].iloc[0]) - int(before[counter].iloc[-1])
