"""analysis.sim_warmth: cold and first requests told apart in an emulated client's log, and
their extra cost measured as differences of medians; analysis.sim_cost fits the other
charges around them."""

import json

import pandas as pd
import pytest

from analysis import sim_cost, sim_warmth

WARM, COLD, FIRST = 0.0005, 0.0006, 0.0010      # latency of each kind of request, s


def _rec(t, latency, server, op='search', holder=None):
    rec = {'event': 'op', 'ok': True, 'op': op, 'name': 'p1-part1-000000.bin', 't': t,
           'latency': latency, 'server': server, 'holders': 1}
    if holder:
        rec.update(holder=holder, bytes=1000)
    return rec


def test_requests_are_labelled_by_what_their_node_did_before():
    """s1 first, s1 again 0.5 ms after its reply (warm), s2 first, s1 2 ms after (cold);
    a download labels its holder peer too."""
    recs = [_rec(0.0010, 0.0005, 's1'), _rec(0.0020, 0.0005, 's1'),
            _rec(0.0030, 0.0005, 's2'), _rec(0.0045, 0.0005, 's1'),
            _rec(0.0070, 0.0010, 's1', 'download', '10.0.0.2:8000'),
            _rec(0.0080, 0.0005, 's1', 'download', '10.0.0.2:8000')]
    assert sim_warmth.label(recs) == [['first'], ['warm'], ['first'], ['cold'],
                                      ['cold', 'first'], ['warm', 'warm']]
    assert sim_warmth.counts(recs) == (2 + 3, 3)
    assert sim_warmth.label(recs, after=0.0001)[1] == ['cold']
    untimed = [{'op': 'search', 'server': 's1'}] * 3
    assert sim_warmth.label(untimed) == [['first'], ['warm'], ['warm']]


def _emu(tmp_path, points):
    """An emulated folder; points: (point, variant, clients, records of its one client)."""
    (tmp_path / 'tables').mkdir(parents=True)
    (tmp_path / 'logs').mkdir()
    lines = ['point,part,variant,servers,concurrent_clients,time_per_op_ms,ops_per_client']
    for point, variant, clients, recs in points:
        lines.append('%d,I,%s,8,%d,1.0,%d' % (point, variant, clients, len(recs)))
        for c in range(clients):
            with open(tmp_path / 'logs' / ('p%03d-client-p%d.jsonl' % (point, c + 1)), 'w') as f:
                f.writelines(json.dumps(r) + '\n' for r in recs)
    (tmp_path / 'tables' / 'points.csv').write_text('\n'.join(lines) + '\n')
    return tmp_path


def _requests(n=40):
    """A client asking s1..s4 in turn, back to back: each server idles 3 requests' time,
    1.8 ms (cold), then s1 six times more at once (cold once, then warm)."""
    recs, t = [], 0.0
    for i in range(n + 6):
        server = 's%d' % (i % 4 + 1) if i < n else 's1'
        latency = FIRST if i < 4 else COLD if i <= n else WARM
        t += latency
        recs.append(_rec(t, latency, server))
    return recs


def test_the_cold_and_first_charges_are_differences_of_medians(tmp_path):
    recs = _requests()
    assert [x[0] for x in sim_warmth.label(recs)] == ['first'] * 4 + ['cold'] * 37 + \
        ['warm'] * 5
    emu = _emu(tmp_path, [(0, 'search', 1, recs), (1, 'register unbatched', 1, recs),
                          (2, 'search', 2, [_rec(0.01, 0.009, 's1')] * 3),
                          (3, 'register batched', 1, [_rec(0.01, 0.009, 's1')] * 3)])
    cold, first, used = sim_warmth.measure(emu)
    assert (cold, first) == (pytest.approx(COLD - WARM), pytest.approx(FIRST - COLD))
    assert used == 2                # the batched and the two-client points are not used
    assert sim_warmth.measure(emu, parts=('III',)) == (None, None, 0)


def test_the_fit_of_the_other_charges_leaves_the_measured_ones_out():
    """Emulated times made with theta plus (cold, first) charges: fit() given the same
    (cold, first) finds theta again, and predicted_ms reproduces the times."""
    theta, warmth = (2e-4, 4e-7, 1e-7), (7e-5, 4e-4)
    rows = pd.DataFrame({
        'callbacks': [4000, 16, 16, 4000, 10000], 'server_bytes': [6e4, 4.2e4, 8.4e4, 1e5, 6e4],
        'client_bytes': [1e5, 144, 144, 3.6e4, 1.2e7], 'cold': [1500, 8, 8, 1500, 3700],
        'first': [8, 8, 8, 8, 9], 'ops': [2000] * 5, 'sim_ms': [0.23, 0.003, 0.005, 0.23, 1.08]})
    charges = rows[list(sim_cost.FEATURES)].to_numpy() @ theta + \
        rows[list(sim_cost.WARMTH)].to_numpy() @ warmth
    rows['emu_ms'] = rows['sim_ms'] + charges / rows['ops'] * 1000
    assert sim_cost.fit(rows, warmth) == pytest.approx(theta, rel=1e-6)
    assert sim_cost.predicted_ms(rows, theta, warmth) == pytest.approx(rows['emu_ms'])
    assert sim_cost.fit(rows) != pytest.approx(theta, rel=1e-3)   # without them: another fit
    assert sim_cost.flag(theta, warmth=warmth).endswith(
        'nodes.dht.server/cold=7e-05,nodes.dht.peer/cold=7e-05,'
        'nodes.dht.server/first=0.0004,nodes.dht.peer/first=0.0004')
