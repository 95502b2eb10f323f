"""analysis.crosscheck: a simulated run against an emulated one, on hand-made folders.

Both dht8 folders come from tests/dht8_folder.py (the emulated one as it is, the simulated
one with a manifest saying sim and client logs rewritten to known times) and are analysed by
analysis.dht8 first, as ``repronet analyse`` would. The numbers, worked out by hand:

- register batched, 1 client: emulated 4 operations in 4 ms and 6 ms -> 1.0 and 1.5 ms per
  operation (mean 1.25, sd sqrt(0.125) = 0.35355, range 1.0..1.5); the CPU samples at
  t = 1000.5 and 1001.0 (busy 0.9) fall inside repetition 0, so it is CPU-bound.
  Simulated 4 ms both times -> 1.0 ms, ratio 0.8: outside 15 %, but inside the range.
- search, 2 clients: emulated 8 ms for 4 -> 2.0 ms in both repetitions (no CPU verdict: the
  timed part is shorter than a sample); simulated 9.6 ms -> 2.4 ms, ratio 1.2: outside
  15 % and outside the emulation's (zero-width) range, with no reason this module can see.
  p50 latency 1 ms emulated, 1.2 ms simulated.
The fidelity folders are tables written by hand (crosscheck reads only tables).
"""

import hashlib
import json
import pathlib
import subprocess
import sys

import pandas as pd
import pytest

from analysis import crosscheck, crosscheck_report, crosscheck_tables, dht8, inputs
from analysis.tables import write_tables
from tests import dht8_folder

REPO = pathlib.Path(__file__).resolve().parent.parent

SIM_HOST = {'cpus': 2, 'cpus_usable': 2, 'memory_bytes': 4 * 2 ** 30, 'cpu_model': 'Sim CPU'}


def _analyse(run):
    """The tables `repronet analyse` writes (crosscheck reads nothing else; no figures)."""
    write_tables(run, dht8.tables(run), dht8.FLOAT)
    return run


def _client(run, point, peer, op, elapsed, t0, **kwargs):
    dht8_folder.client_log(run / 'logs', 'p%03d-client-%s' % (point, peer), op, 4, elapsed,
                           t0, **kwargs)


def _emu(tmp_path):
    """The hand-made folder, as an emulation run from before --backend (no backend key)."""
    run = tmp_path / 'emu'
    run.mkdir()
    dht8_folder.make_run(run)
    manifest = dht8_folder.manifest()
    manifest['provenance']['git'] = {'revision': 'a' * 40, 'dirty': True}
    (run / 'manifest.json').write_text(json.dumps(manifest))
    return run


def _sim(tmp_path, search_s=0.0096, register_s=0.004, name='sim', **client):
    """The simulated twin: backend sim, other times, no CPU monitor."""
    run = tmp_path / name
    run.mkdir()
    dht8_folder.make_run(run)
    base = dht8_folder.manifest()
    manifest = dht8_folder.manifest(
        params=dict(base['params'], backend='sim', sim_cost=None),
        mechanisms={'backend': 'sim', 'links': [],
                    'network_model': {'processing': 'none (zero cost)'}},
        provenance={'host': SIM_HOST, 'git': {'revision': 'b' * 40, 'dirty': False}})
    (run / 'manifest.json').write_text(json.dumps(manifest))
    for point, t in ((1, 1010.0), (3, 1030.0)):
        for peer in ('p1', 'p2'):
            _client(run, point, peer, 'search', search_s, t, latency=0.0012)
    for point, t in ((0, 1000.0), (2, 1020.0)):
        _client(run, point, 'p1', 'register', register_s, t, **client)
    (run / 'logs' / 'cpu.jsonl').unlink()
    return run


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    """The two analysed folders (crosscheck only reads them)."""
    tmp = tmp_path_factory.mktemp('runs')
    return _analyse(_emu(tmp)), _analyse(_sim(tmp))


@pytest.fixture(scope='module')
def built(runs, tmp_path_factory):
    """(what crosscheck.build returned, its output folder)."""
    out = tmp_path_factory.mktemp('crosscheck') / 'out'
    return crosscheck.build(*runs, out), out


def _row(table, variant):
    return table[table['variant'] == variant].iloc[0]


def test_ratios_spread_and_target_worked_out_by_hand(built):
    data, out = built
    table = data['crosscheck_dht8']
    assert len(table) == 2          # capture and failover points are not compared
    reg, search = _row(table, 'register batched'), _row(table, 'search')
    assert (reg['emu_time_per_op_ms'], reg['emu_time_per_op_ms_min'],
            reg['emu_time_per_op_ms_max']) == pytest.approx((1.25, 1.0, 1.5))
    assert reg['emu_time_per_op_ms_sd'] == pytest.approx(0.125 ** 0.5)
    assert reg['sim_time_per_op_ms'] == pytest.approx(1.0)
    assert reg['sim_over_emu'] == pytest.approx(0.8)
    assert [reg['within_target'], reg['beyond_emu_spread']] == [False, False]
    assert search['sim_over_emu'] == pytest.approx(1.2)
    assert [search['within_target'], search['beyond_emu_spread']] == [False, True]
    assert (search['emu_lat_p50_ms'], search['sim_lat_p50_ms'],
            search['lat_p50_sim_over_emu']) == pytest.approx((1.0, 1.2, 1.2))
    assert (search['emu_repeats'], search['sim_repeats']) == (2, 2)
    csv = pd.read_csv(out / 'tables' / 'crosscheck_dht8.csv')
    assert list(csv['sim_over_emu']) == pytest.approx([1.2, 0.8])


def test_cpu_bound_rows_are_set_apart_and_left_out_of_the_target(built):
    data, out = built
    table = data['crosscheck_dht8']
    assert list(zip(table['section'], table['variant'])) == [
        ('uncongested', 'search'), ('cpu-bound', 'register batched')]
    assert _row(table, 'register batched')['emu_cpu_bound_repeats'] == 1
    summary = crosscheck_report.summary(data)
    assert summary.startswith('dht8: 0 of 1 uncongested configuration(s) meet the target')
    assert 'worst ratio sim/emu 1.200 (part I, search, 2 server(s), 2 client(s), part1)' \
        in summary and '1 CPU-bound configuration(s) set apart' in summary
    assert '1 of the uncongested without a CPU verdict' in summary
    report = (out / 'report.md').read_text()
    free, rest = report.split('## Uncongested configurations')[1].split(
        '## CPU-bound in the emulation (set apart)')
    bound = rest.split('## Outside the target')[0]
    assert '| I | search |' in free and 'register batched' not in free
    assert '| I | register batched |' in bound and '| I | search |' not in bound


def test_report_names_both_runs_and_says_why_rows_miss(built):
    _, out = built
    report = (out / 'report.md').read_text()
    assert '| commit | `aaaaaaaaaaaa` (uncommitted changes) | `bbbbbbbbbbbb` |' in report
    assert '| machine | 6 CPUs, 8.0 GiB memory, Test CPU | 2 CPUs, 4.0 GiB memory, ' \
        'Sim CPU |' in report
    assert 'Simulated processing cost: none (zero cost).' in report
    assert 'Parameters that differ: none' in report
    why = report.split('## Outside the target: why')[1].split('##')[0]
    reg = next(line for line in why.splitlines() if 'register batched' in line)
    assert "sim/emu 0.8, within the emulation's spread." in reg
    assert 'CPU-bound in 1 of 2 repetition(s)' in reg
    assert "within the emulation's own range over its repetitions (1..1.5 ms, 40 % of " \
        "their mean)" in reg
    assert crosscheck_report.LEAD not in reg
    search = next(line for line in why.splitlines() if ', search,' in line)
    assert search.endswith("sim/emu 1.2, beyond the emulation's spread. %s."
                           % crosscheck_report.LEAD)
    for name in ('crosscheck_time_per_op', 'crosscheck_lat_p50'):
        assert '](figures/%s.png)' % name in report
        assert (out / 'figures' / (name + '.png')).stat().st_size > 1000


def test_failed_operations_missing_rows_and_differing_parameters_are_reported(tmp_path):
    emu = _emu(tmp_path)
    points = dht8_folder.read_points(emu)
    extra = dht8_folder.point(len(points), 0, 'III', 'search', 1, servers=1)
    _client(emu, extra['point'], 'p1', 'search', 0.004, 1100.0)
    dht8_folder.rewrite_points(emu, points + [(extra, {'released': 1100.0,
                                                       'finished': 1100.01})])
    manifest = json.loads((emu / 'manifest.json').read_text())
    manifest['params']['files'] = 2000
    (emu / 'manifest.json').write_text(json.dumps(manifest))
    sim = _sim(tmp_path, register_s=0.003, fail=1)    # 3 of 4 ok in 3 ms: 1.0 ms per op
    data = crosscheck.build(_analyse(emu), _analyse(sim), tmp_path / 'out')
    reg = _row(data['crosscheck_dht8'], 'register batched')
    assert reg['sim_time_per_op_ms'] == pytest.approx(1.0) and reg['sim_failed'] == 2
    assert '2 operation(s) failed in the simulation' in reg['why']
    unmatched = data['crosscheck_dht8_unmatched']
    assert unmatched.to_dict('records') == [
        {'only_in': 'emulation', 'part': 'III', 'variant': 'search', 'servers': 1.0,
         'concurrent_clients': 1.0, 'fileset': 'part1'}]
    report = (tmp_path / 'out' / 'report.md').read_text()
    assert '| emulation | III | search | 1 | 1 | part1 |' in report
    assert 'Parameters that differ: files emulation 2000, simulation None.' in report


def test_rebuild_is_byte_identical(runs, built):
    def digests(out):
        files = sorted((out / 'tables').glob('*.csv')) + [out / 'report.md']
        return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    first = digests(built[1])
    crosscheck.build(*runs, built[1])
    assert digests(built[1]) == first
    assert sorted(first) == ['crosscheck_dht8.csv', 'crosscheck_dht8_unmatched.csv',
                             'report.md']


def test_the_figure_marks_cpu_bound_points_and_draws_the_band(built):
    drawn = built[0]['figures']
    fig = drawn['crosscheck_time_per_op'].drawn
    assert (fig.xlabel, fig.ylabel) == ('emulated (ms)', 'simulated (ms)')
    free = fig.get('part I', 'points')
    assert free.x + free.y == pytest.approx((2.0, 2.4))
    bound = fig.get('part I, emulation CPU-bound', 'points')
    assert bound.x + bound.y == pytest.approx((1.25, 1.0))
    identity = fig.get('simulated = emulated', 'line')
    assert identity.x == identity.y
    band = fig.get('±15 %', 'line')
    low, high = identity.x
    assert (band.y[0], band.y[1], band.y[3], band.y[4]) == pytest.approx(
        (low * 1.15, high * 1.15, low * 0.85, high * 0.85))


def test_target_boundary():
    assert crosscheck_tables.within(0.85) and crosscheck_tables.within(1.15)
    assert not crosscheck_tables.within(0.849) and not crosscheck_tables.within(1.151)
    assert crosscheck_tables.within(float('nan')) is None


def _points(rows):
    """A points.csv table of (variant, repetition's ms per operation) rows, 1 client."""
    return pd.DataFrame([{'part': 'I', 'variant': v, 'servers': 8, 'concurrent_clients': 1,
                          'fileset': 'part1', 'time_per_op_ms': ms} for v, ms in rows])


def test_the_emulations_spread_is_given_beside_each_ratio_and_counted_in_the_summary():
    # search: emulated 1.0 and 1.5 (spread 0.5 / 1.25 = 40 %), simulated 1.5: ratio 1.2,
    # a miss inside the range; download: emulated 1.0 twice (spread 0 %), simulated 1.3:
    # a miss beyond it; register: emulated 2.0 once (no spread), simulated 2.1: met
    emu = _points([('search', 1.0), ('search', 1.5), ('download', 1.0), ('download', 1.0),
                   ('register', 2.0)])
    sim = _points([('search', 1.5), ('download', 1.3), ('register', 2.1)])
    table, _ = crosscheck_tables.dht8_table(emu, sim)
    rows = {r['variant']: r for _, r in table.iterrows()}
    assert rows['search']['emu_spread_pct'] == pytest.approx(40.0)
    assert rows['download']['emu_spread_pct'] == pytest.approx(0.0)
    assert pd.isna(rows['register']['emu_spread_pct'])
    assert 'noise here is wider than the miss' in rows['search']['why']
    assert 'noise' not in rows['download']['why']
    summary = crosscheck_tables.dht8_summary(table)
    assert "of the 2 miss(es), 1 lie within the emulation's own range over its " \
        "repetitions (which spans 40-40 % of their mean there" in summary
    met = crosscheck_tables.dht8_table(emu, _points([('search', 1.25), ('download', 1.0),
                                                     ('register', 2.0)]))[0]
    assert 'miss' not in crosscheck_tables.dht8_summary(met)


def _set(run, **fields):
    manifest = json.loads((run / 'manifest.json').read_text())
    manifest.update(fields)
    (run / 'manifest.json').write_text(json.dumps(manifest))


@pytest.mark.parametrize('case, words', [
    ('swapped', 'is a simulated run (backend sim in its manifest), but EMU_DIR must be an '
                'emulation run'),
    ('two emulations', 'is an emulation run (backend emu in its manifest), but SIM_DIR must '
                       'be a simulated run'),
    ('experiments', 'is a dht8 run and'),
    ('unknown experiment', 'crosscheck knows dht8 and fidelity, not kvload'),
    ('unanalysed', 'has no tables/*.csv; run "repronet analyse'),
    ('no points table', 'has no tables/points.csv; run "repronet analyse'),
    ('not a folder', 'has no manifest.json'),
    ('out is a run', 'is one of the two runs'),
])
def test_refusals_are_one_sentence(tmp_path, case, words):
    emu, sim = _emu(tmp_path), _sim(tmp_path)
    _analyse(emu)
    _analyse(sim)
    out = tmp_path / 'out'
    if case == 'swapped':
        emu, sim = sim, emu
    elif case == 'two emulations':
        sim = emu
    elif case == 'experiments':
        _set(sim, experiment='kvload')
    elif case == 'unknown experiment':
        _set(emu, experiment='kvload')
        _set(sim, experiment='kvload')
    elif case == 'unanalysed':
        sim = _sim(tmp_path, name='raw')
    elif case == 'no points table':
        (emu / 'tables' / 'points.csv').unlink()
    elif case == 'not a folder':
        emu = tmp_path / 'empty'
        emu.mkdir()
    else:
        out = sim
    with pytest.raises(crosscheck.CrosscheckError) as e:
        crosscheck.build(emu, sim, out)
    text = str(e.value)
    assert words in text and '\n' not in text and '. ' not in text, text
    if case != 'out is a run':
        assert not out.exists()


def test_a_simulated_run_known_by_its_mechanisms_alone(runs):
    manifest = json.loads((runs[1] / 'manifest.json').read_text())
    del manifest['params']['backend']
    assert inputs.backend(manifest) == 'sim'
    assert inputs.backend(dht8_folder.manifest()) == 'emu'


def test_command_line(runs, tmp_path):
    def run(*argv):
        return subprocess.run([sys.executable, '-m', 'analysis.crosscheck'] + list(map(str, argv)),
                              capture_output=True, text=True, cwd=REPO, timeout=120)
    done = run(runs[0], runs[1], '--out', tmp_path / 'out')
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('dht8: 0 of 1 uncongested configuration(s)')
    refused = run(runs[1], runs[0], '--out', tmp_path / 'out2')
    assert refused.returncode == 1 and refused.stdout == ''
    assert refused.stderr.count('\n') == 1 and refused.stderr.startswith('crosscheck: ')


RTT = ('point,repetition,kind,shape,delay_ms,jitter_ms,loss,nlinks,configured_rtt_ms,'
       'configured_rtt_std_ms,median_rtt_ms,std_rtt_ms\n')


def _fidelity(path, backend, rtt, loss=None, goodput=None):
    """A fidelity folder holding only what crosscheck reads: manifest and tables."""
    (path / 'tables').mkdir(parents=True)
    params = {'scale': 'smoke', 'repeat': 2}
    if backend == 'sim':
        params['backend'] = 'sim'
    (path / 'manifest.json').write_text(json.dumps({'experiment': 'fidelity', 'status': 'ok',
                                                    'params': params}))
    (path / 'tables' / 'rtt.csv').write_text(rtt)
    for name, text in (('loss', loss), ('goodput', goodput)):
        if text is not None:
            (path / 'tables' / ('%s.csv' % name)).write_text(text)
    return path


def test_fidelity_rows_configured_emu_sim_and_what_the_simulation_lacks(tmp_path):
    emu = _fidelity(tmp_path / 'emu', 'emu', RTT +
                    '0,0,delay,two-host,10,0,0,2,20,0,20.4,0.1\n'
                    '1,1,delay,two-host,10,0,0,2,20,0,20.0,0.1\n'
                    '2,0,delay,two-host,0,0,0,2,0,0,0.05,0.01\n'
                    '3,0,jitter,two-host,20,2,0,2,40,2.3094,40.5,2.2\n',
                    loss='point,repetition,kind,shape,configured_loss_pct,measured_loss_pct\n'
                         '4,0,loss,two-host,5,5.5\n',
                    goodput='point,repetition,kind,shape,proto,bw,delay_ms,goodput_mbps\n'
                            '5,0,goodput,two-host,tcp,10,10,9.1\n')
    sim = _fidelity(tmp_path / 'sim', 'sim',
                    'point,repetition,kind,shape,delay_ms,jitter_ms,configured_rtt_ms,'
                    'median_rtt_ms\n'
                    '0,0,delay,two-host,10,0,20,20.1\n'
                    '1,0,delay,two-host,0,0,0,0.001\n'
                    '2,0,jitter,two-host,20,2,40,40.1\n',
                    loss='point,repetition,kind,shape,configured_loss_pct,measured_loss_pct\n'
                         '3,0,loss,two-host,5,5.0\n')
    data = crosscheck.build(emu, sim, tmp_path / 'out')
    table = data['crosscheck_fidelity'].set_index(['measure', 'kind', 'setting'])
    rtt = table.loc[('median RTT (ms)', 'delay', 'delay_ms 10, jitter_ms 0')]
    assert (rtt['configured'], rtt['emu'], rtt['emu_repeats'], rtt['sim']) == \
        pytest.approx((20.0, 20.2, 2, 20.1))
    assert rtt['sim_over_emu'] == pytest.approx(20.1 / 20.2)
    assert [rtt['beyond_emu_spread'], rtt['note']] == [False, '']
    zero = table.loc[('median RTT (ms)', 'delay', 'delay_ms 0, jitter_ms 0')]
    assert zero['sim_over_emu'] == pytest.approx(0.02)
    assert zero['note'].startswith('configured value is 0')
    loss = table.loc[('one-way loss (%)', 'loss', 'configured_loss_pct 5')]
    assert (loss['emu'], loss['sim'], loss['sim_over_configured']) == \
        pytest.approx((5.5, 5.0, 1.0))
    std = table.loc[('RTT std (ms)', 'jitter', 'delay_ms 20, jitter_ms 2')]
    goodput = table.loc[('goodput (Mbit/s)', 'goodput', 'proto tcp, bw 10, delay_ms 10')]
    for row in (std, goodput):
        assert row['note'] == 'not measured (simulation)' and pd.isna(row['sim'])
    assert goodput['emu_over_configured'] == pytest.approx(0.91)
    report = (tmp_path / 'out' / 'report.md').read_text()
    assert '# Simulation against emulation: fidelity' in report
    assert 'fidelity: 3 of 4 row(s) with both figures within 15 % (sim/emu)' in report
    assert '](figures/crosscheck_fidelity.png)' in report


def test_a_rare_loss_inside_both_intervals_is_called_sampling_noise(tmp_path):
    """0.1 % of 20,000 probes: 16 lost emulated, 29 simulated (sim/emu 1.81, outside 15 %),
    both inside the 99 % interval: the row says sampling noise instead of leaving it for the
    lead. A count outside the interval gets no such phrase."""
    head = ('point,repetition,kind,shape,configured_loss_pct,measured_loss_pct,lost,'
            'lost_lo99,lost_hi99,inside_99\n')
    rtt = RTT + '0,0,delay,two-host,10,0,0,2,20,0,20.4,0.1\n'
    emu = _fidelity(tmp_path / 'emu', 'emu', rtt,
                    loss=head + '1,0,loss,multi-hop,0.1,0.08,16,10,32,True\n'
                                '2,0,loss,two-host,0.1,0.20,40,10,32,False\n')
    sim = _fidelity(tmp_path / 'sim', 'sim', rtt,
                    loss=head + '1,0,loss,multi-hop,0.1,0.145,29,10,32,True\n'
                                '2,0,loss,two-host,0.1,0.10,20,10,32,True\n')
    table = crosscheck.build(emu, sim, tmp_path / 'out')['crosscheck_fidelity']
    table = table.set_index(['measure', 'shape', 'setting'])
    noise = table.loc[('one-way loss (%)', 'multi-hop', 'configured_loss_pct 0.1')]
    assert noise['within_15pct'] == False     # noqa: E712 (numpy bool)
    assert noise['note'].startswith('both lost counts (emulated 16, simulated 29) lie inside '
                                    "the configured loss's 99 % binomial interval (10..32)")
    outside = table.loc[('one-way loss (%)', 'two-host', 'configured_loss_pct 0.1')]
    assert 'sampling noise' not in outside['note']
    assert outside['note'].startswith('the emulation is further from the configured value')
    report = (tmp_path / 'out' / 'report.md').read_text()
    assert 'sampling noise, not the link model' in report


def test_the_model_reasons_name_what_the_simulator_leaves_out():
    """Rows outside the target get the known causes: no processing charged at all, a
    batched message's names, one server's thread overcharged; none for a row within."""
    from analysis.crosscheck_tables import model_reasons
    key = ('I', 'register batched', 8, 1, 'part1')
    assert 'no --sim-cost' in model_reasons(key, 0.2, {})[0]
    cost = {'nodes.dht.server': 3e-4}
    assert 'per name' in model_reasons(key, 0.4, cost)[0]
    assert 'per byte' in model_reasons(('I', 'download', 8, 1, 'part1'), 0.7, cost)[0]
    central = ('III', 'search', 1, 8, 'part1')
    assert 'one index server' in model_reasons(central, 1.8, cost)[0]
    assert model_reasons(('III', 'search', 1, 2, 'part1'), 1.2, cost) == []
    assert model_reasons(key, float('nan'), cost) == []


def test_a_per_byte_cost_gets_the_reasons_of_its_own_model():
    """With --sim-cost per byte (analysis.sim_cost's fit), the reasons name what that model
    leaves out, not the per-callback model's missing per-name charge."""
    from analysis.crosscheck_tables import model_reasons
    cost = {'nodes.dht.server': 4e-4, 'nodes.dht.server/byte': 4e-7}
    assert 'per name' not in ' '.join(model_reasons(
        ('I', 'register batched', 8, 1, 'part1'), 0.4, cost))
    assert '250-500-name' in model_reasons(('III', 'register batched', 1, 4, 'part1'),
                                           1.5, cost)[0]
    assert 'first request' in model_reasons(('III', 'register batched', 1, 1, 'part1'),
                                            1.3, cost)[0]
    assert 'first request' not in model_reasons(('III', 'register batched', 1, 1, 'part1'),
                                                1.3, dict(cost, **{
                                                    'nodes.dht.server/first': 4e-4}))[0]
    assert 'unbatched REGISTER' in model_reasons(('I', 'register unbatched', 8, 1, 'part1'),
                                                 0.8, cost)[0]
    assert 'five callbacks' in model_reasons(('I', 'download', 8, 1, 'part1'), 1.2, cost)[0]
    assert 'peer' in model_reasons(('I', 'download', 8, 4, 'part1'), 0.8, cost)[0]


def test_the_delay_daemons_lateness_is_read_from_their_last_stats_and_reported(runs, built):
    """Each daemon's last (cumulative) stats record, weighted by its packets: p1 3.0 us and
    s1 1.0 us over 1,000 packets each (their earlier 0.5 us records are not counted)."""
    assert crosscheck.link_lateness_us(runs[0]) == pytest.approx(2.0)
    report = (built[1] / 'report.md').read_text()
    assert 'the delay daemons released held packets 2 us late on average' in report


def test_the_delay_daemons_lateness_weighs_each_by_its_packets(tmp_path):
    """p1 3.0 us over 3,000 packets, s1 1.0 us over 1,000: 2.5 us (a plain mean of the two
    says 2.0); without any daemon's stats, None."""
    logs = tmp_path / 'logs'
    logs.mkdir()
    assert crosscheck.link_lateness_us(tmp_path) is None
    dht8_folder.linkdelay_log(logs, 'p1', 3.0, 40.0, accepted=3000)
    dht8_folder.linkdelay_log(logs, 's1', 1.0, 90.0, accepted=1000)
    assert crosscheck.link_lateness_us(tmp_path) == pytest.approx(2.5)


def test_the_delay_daemons_lateness_weighs_by_released_not_accepted(tmp_path):
    """A daemon's late_us_mean is a mean over the held packets it released; accepted also
    counts packets passed without a hold. p1 3.0 us over 1,000 released (3,000 accepted),
    s1 1.0 us over 3,000 (1,000 accepted): 1.5 us (by accepted it would read 2.5)."""
    logs = tmp_path / 'logs'
    logs.mkdir()
    dht8_folder.linkdelay_log(logs, 'p1', 3.0, 40.0, accepted=3000, released=1000)
    dht8_folder.linkdelay_log(logs, 's1', 1.0, 90.0, accepted=1000, released=3000)
    assert crosscheck.link_lateness_us(tmp_path) == pytest.approx(1.5)


def _with_span(run, busy):
    """Give the emulated search points (no sample inside their 10 ms timed parts) the
    runner's precise reading of those parts: busy[repetition]; the register points (judged
    by their samples in repetition 0) a reading of 0.1."""
    records = [json.loads(line) for line in
               (run / 'logs' / 'points.jsonl').read_text().splitlines()]
    for r in records:
        if r['point']['part'] == 'I':
            r['cpu'] = {'busy': busy[r['point']['repetition']]
                        if r['point']['op'] == 'search' else 0.1, 'bound': None}
    dht8_folder.write(run / 'logs' / 'points.jsonl', records)
    return run


def test_a_timed_part_shorter_than_a_sample_is_judged_by_the_runners_reading(tmp_path):
    emu = _with_span(_emu(tmp_path), {0: 0.8, 1: 0.3})
    points = dht8.tables(emu)['points']
    search = points[(points['part'] == 'I') & (points['op'] == 'search')]
    assert list(search['cpu_verdict']) == ['timed part'] * 2
    assert list(search['cpu_bound']) == [True, False]      # 0.8 over the 0.65 bar, 0.3 not
    assert list(search['cpu_timed_busy']) == [0.8, 0.3]
    reg = points[(points['part'] == 'I') & (points['op'] == 'register')]
    # repetition 0 holds samples (0.9 busy): they judge it, not its 0.1 reading; 1 holds none
    assert list(reg['cpu_verdict']) == ['samples', 'timed part']
    assert list(reg['cpu_bound']) == [True, False] and list(reg['cpu_busy']) == [0.9, 0.1]
    table, _ = crosscheck_tables.dht8_table(points, dht8.tables(_sim(tmp_path))['points'])
    row = _row(table, 'search')
    assert row['section'] == 'cpu-bound'
    assert (row['emu_cpu_bound_repeats'], row['emu_cpu_verdicts']) == (1, 2)
    assert row['emu_cpu_busy'] == pytest.approx(0.55)


def test_a_reading_at_the_bar_is_not_over_it(tmp_path):
    emu = _with_span(_emu(tmp_path), {0: 0.65, 1: 0.2})
    table, _ = crosscheck_tables.dht8_table(dht8.tables(emu)['points'],
                                            dht8.tables(_sim(tmp_path))['points'])
    row = _row(table, 'search')
    assert row['section'] == 'uncongested' and row['emu_cpu_verdicts'] == 2
    assert 'without a CPU verdict' not in crosscheck_tables.dht8_summary(table)
