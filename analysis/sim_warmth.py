"""Two processing charges that depend on a node's recent past, measured from an emulated
dht8 run's client logs (issue 13): a request costs more when the index server or peer
answering it sat idle (cold), and more again when it is the first on its connection.

Why: fitted on Part I only, the per-callback and per-byte charges overcharged both Part III
points the fit did not see (one index server: one-client search 1.24, one 2,000-name
REGISTER 1.285). The emulated client logs of Part I's one-client points say why, request
by request (one client, window 1, so nothing else keeps a server busy):

* a SEARCH or a one-name REGISTER took 60-80 us longer (median) when its server had sat
  idle over 1 ms than when it had answered the same client within 1 ms before; the longer
  the idle spell, the slower (about 20 us per doubling from 0.25 to 16 ms). Part I spreads
  one client's requests over 8 servers, so most of them find their server cold; Part III's
  one server is asked again every half millisecond and never cools;
* the first request on each connection took 0.3-0.5 ms longer again. A batched REGISTER is
  one message per server, each the first on its connection: Part I's client pays that 8
  times for its 2,000 names, Part III's once. Charged per byte, as the fit did, it made
  every name of Part III's one message pay for seven first requests it never made.

`measure` takes both figures from the one-client points of the fitted parts, from requests
of one name (searches, unbatched REGISTERs), as differences of medians within a point, so
what the points share (network, per-callback cost) cancels: ``cold`` is the median cold
request less the median warm one, ``first`` the median first request less the median cold
one. `counts` says how many of each one client's requests were, for the fit of the other
charges (`analysis.sim_cost`) and the simulator charges them (`repronet.sim.cpu`:
``KIND/cold`` when the node sat idle over ``cold_after``, ``KIND/first`` on a connection's
first bytes) to the index servers and peers.
"""

import glob
import json
import pathlib
import statistics

import pandas as pd

from repronet.sim import cpu

SINGLE = ('search', 'register unbatched')   # variants whose every request is one name


def label(records, after=cpu.COLD_AFTER_S):
    """For one client's op records in order: for each, one label per node that answered it
    (its index server; for a download, then its holder peer): 'first' (the client's first
    request to that node), 'cold' (the node sat idle over `after` s since the client's
    previous request to it ended) or 'warm'. Without times, only 'first' or 'warm'."""
    ended, out = {}, []
    for rec in records:
        end = rec.get('t')
        start = None if end is None else end - (rec.get('latency') or 0.0)
        nodes = [('server', rec.get('server'))]
        if rec.get('op') == 'download':
            nodes.append(('peer', rec.get('holder')))
        labels = []
        for node in nodes:
            if node not in ended:
                labels.append('first')
            elif start is not None and ended[node] is not None and start - ended[node] > after:
                labels.append('cold')
            else:
                labels.append('warm')
            ended[node] = end
        out.append(labels)
    return out


def counts(records, after=cpu.COLD_AFTER_S):
    """(cold, first) requests of one client's op records: a first request counts in both
    (a node is idle before its first request, as the simulator sees it)."""
    flat = [x for labels in label(records, after) for x in labels]
    first = flat.count('first')
    return flat.count('cold') + first, first


def _client_ops(emu_dir, point):
    for path in sorted(glob.glob(str(pathlib.Path(emu_dir) / 'logs' /
                                     ('p%03d-client-*.jsonl' % int(point))))):
        with open(path) as f:
            recs = [json.loads(line) for line in f]
        yield [r for r in recs if r.get('event') == 'op' and r.get('ok')]


def point_split(emu_dir, point, after=cpu.COLD_AFTER_S):
    """{label: median latency s} of a point's requests, split as `label` says; {} if the
    point has more than one client (then others may keep a node busy)."""
    logs = list(_client_ops(emu_dir, point))
    if len(logs) != 1:
        return {}
    by = {}
    for rec, labels in zip(logs[0], label(logs[0], after)):
        if rec.get('latency') is not None:
            by.setdefault(labels[0], []).append(rec['latency'])
    return {k: statistics.median(v) for k, v in by.items()}


def measure(emu_dir, parts=('I',), after=cpu.COLD_AFTER_S):
    """(cold_s, first_s, points used): the medians over the one-client points of `parts`
    whose requests are one name of (cold - warm) and (first - cold), each at least 0; None
    for a figure no point measures."""
    table = pd.read_csv(pathlib.Path(emu_dir) / 'tables' / 'points.csv')
    pick = table[table['part'].astype(str).isin(parts) & (table['concurrent_clients'] == 1)
                 & table['variant'].isin(SINGLE)]
    colds, firsts = [], []
    for point in pick['point']:
        split = point_split(emu_dir, point, after)
        if 'cold' in split and 'warm' in split:
            colds.append(split['cold'] - split['warm'])
        if 'first' in split and 'cold' in split:
            firsts.append(split['first'] - split['cold'])
    cold = max(0.0, statistics.median(colds)) if colds else None
    first = max(0.0, statistics.median(firsts)) if firsts else None
    return cold, first, len(pick)
