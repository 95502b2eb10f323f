"""analysis.sim_cost: the processing cost per callback and per byte received, fitted on the
one-client points of an emulated run against a simulated one."""

import json

import pytest

from analysis import sim_cost

THETA = (4e-4, 4e-7, 3e-8)          # per callback, per server byte, per client byte
NAME = 'p1-part1-000000.bin'        # 19 characters, as dht8's names


def _ops(variant):
    """The op records one client of a configuration logs."""
    if variant == 'search':
        return [{'op': 'search', 'name': NAME, 'holders': 1}] * 20
    if variant == 'register batched':
        return [{'op': 'register', 'name': NAME, 'files': 250}] * 8
    if variant == 'register unbatched':
        return [{'op': 'register', 'name': NAME, 'files': 1}] * 20
    return [{'op': 'download', 'name': NAME, 'holders': 1, 'bytes': 6000 + 1000 * i}
            for i in range(20)]


def _folder(path, rows, backend='emu', experiment='dht8', costs=None, theta=THETA):
    """A results folder; rows (point, part, variant, clients, sim ms/op): an emulated
    folder's time is that plus what theta charges for the variant's ops."""
    (path / 'tables').mkdir(parents=True)
    (path / 'logs').mkdir()
    (path / 'manifest.json').write_text(json.dumps({
        'experiment': experiment, 'params': {'backend': backend, 'sim_costs': costs or {}}}))
    lines = ['point,part,variant,servers,concurrent_clients,time_per_op_ms,ops_per_client']
    for point, part, variant, clients, ms in rows:
        ops = _ops(variant)
        count = sum(r.get('files', 1) for r in ops)
        if backend == 'emu':
            with open(path / 'logs' / ('p%03d-client-p1.jsonl' % point), 'w') as f:
                for r in ops:
                    f.write(json.dumps(dict(r, event='op', ok=True)) + '\n')
            charged = sum(sum(a * b for a, b in zip(sim_cost.op_features(r), theta))
                          for r in ops)
            ms += 1000 * charged / count
        lines.append('%d,%s,%s,8,%d,%r,%d' % (point, part, variant, clients, ms, count))
    (path / 'tables' / 'points.csv').write_text('\n'.join(lines) + '\n')
    return path


VARIANTS = ('search', 'register batched', 'register unbatched', 'download')


def _pair(tmp_path, extra=()):
    sim_rows = [(i, 'I', v, 1, 0.25) for i, v in enumerate(VARIANTS)]
    emu = _folder(tmp_path / 'emu', sim_rows + list(extra))
    sim = _folder(tmp_path / 'sim', sim_rows + [(9, 'I', 'search', 4, 0.3)], 'sim')
    return emu, sim


def test_op_features_count_the_frames_on_a_requests_path():
    # SEARCH: 10 header + 2 + 19; FOUND: 10 + 21 + 4 + 2 + 13 (one holder '10.0.0.1:8000')
    assert sim_cost.op_features({'op': 'search', 'name': NAME, 'holders': 1}) == (2, 31, 50)
    # REGISTER of 3 names: 10 + 2 + 13 + 4 + 3 * 21; ACK: 10 + 8
    assert sim_cost.op_features({'op': 'register', 'name': NAME, 'files': 3}) == (2, 92, 18)
    # a download: its search, the peer's GET, the FILE header (10 + 48) and the bytes
    assert sim_cost.op_features({'op': 'download', 'name': NAME, 'holders': 1,
                                 'bytes': 70000}) == (6, 31, 50 + 58 + 70000)


def test_the_fit_finds_the_charges_the_emulated_times_were_made_with(tmp_path):
    emu, sim = _pair(tmp_path)
    rows = sim_cost.fit_rows(emu, sim)
    assert list(rows['variant']) == sorted(VARIANTS)
    assert sim_cost.fit(rows) == pytest.approx(THETA, rel=1e-6)
    assert sim_cost.predicted_ms(rows, THETA) == pytest.approx(list(rows['emu_ms']))
    assert sim_cost.flag(THETA) == (
        'nodes.dht.server=0.0004,nodes.dht.client=0.0004,nodes.dht.peer=0.0004,'
        'nodes.dht.server/byte=4e-07,nodes.dht.client/byte=3e-08')


def test_points_outside_the_fit_set_do_not_move_it(tmp_path):
    """Part III and the four-client points are left for judging the model."""
    emu, sim = _pair(tmp_path, [(7, 'III', 'search', 1, 50.0), (8, 'I', 'search', 4, 60.0)])
    assert len(sim_cost.fit_rows(emu, sim)) == len(VARIANTS)
    assert sim_cost.fit(sim_cost.fit_rows(emu, sim)) == pytest.approx(THETA, rel=1e-6)


def test_a_figure_that_fits_negative_is_dropped_and_the_rest_refitted(tmp_path):
    emu, sim = _pair(tmp_path)
    rows = sim_cost.fit_rows(emu, sim)
    rows.loc[rows['variant'] == 'download', 'emu_ms'] = 0.26    # downloads cost nothing
    theta = sim_cost.fit(rows)
    assert min(theta) >= 0 and theta[2] == 0
    assert 'client/byte' not in sim_cost.flag(theta)


def test_main_prints_the_fit_and_the_flag(tmp_path, capsys):
    emu, sim = _pair(tmp_path)
    assert sim_cost.main([str(emu), str(sim)]) == 0
    out = capsys.readouterr().out
    assert 'per callback 400.0 us' in out and '(1.00 of emu)' in out
    assert out.rstrip().endswith('nodes.dht.client/byte=3e-08')


def test_refusals_are_one_sentence(tmp_path, capsys):
    emu, sim = _pair(tmp_path)
    with pytest.raises(ValueError, match='no 1-client point in part'):
        sim_cost.fit_rows(emu, sim, parts=('II',))
    assert sim_cost.main([str(tmp_path / 'missing'), str(sim)]) == 1
    assert 'not a results folder' in capsys.readouterr().err
    same = _folder(tmp_path / 'same', [(i, 'I', v, 1, 0.25) for i, v in enumerate(VARIANTS)],
                   theta=(0, 0, 0))
    assert sim_cost.main([str(same), str(sim)]) == 1
    assert 'no processing cost to charge' in capsys.readouterr().err


def test_the_folders_must_be_an_emulated_and_an_uncharged_simulated_dht8_run(tmp_path):
    rows = [(0, 'I', 'search', 1, 1.0)]
    emu = _folder(tmp_path / 'emu', rows)
    sim = _folder(tmp_path / 'sim', rows, 'sim')
    with pytest.raises(ValueError, match='first folder must be an emulated one'):
        sim_cost.fit_rows(sim, sim)
    with pytest.raises(ValueError, match='second folder must be a simulated one'):
        sim_cost.fit_rows(emu, emu)
    charged = _folder(tmp_path / 'charged', rows, 'sim', costs={'nodes.dht.server': 1e-4})
    with pytest.raises(ValueError, match='was run with --sim-cost'):
        sim_cost.fit_rows(emu, charged)
    fid = _folder(tmp_path / 'fid', rows, 'sim', experiment='fidelity')
    with pytest.raises(ValueError, match='sim_cost reads dht8 runs'):
        sim_cost.fit_rows(emu, fid)


def test_a_cpu_bound_repetition_is_left_out_when_another_was_not(tmp_path):
    """Something else had the cores in one repetition: its time does not enter the fit,
    unless every repetition of the configuration was CPU-bound."""
    emu, sim = _pair(tmp_path, extra=[(5, 'I', 'search', 1, 9.0)])
    table = emu / 'tables' / 'points.csv'
    lines = table.read_text().splitlines()
    lines = [lines[0] + ',cpu_bound'] + [x + (',True' if x.startswith('5,') else ',False')
                                         for x in lines[1:]]
    table.write_text('\n'.join(lines) + '\n')
    rows = sim_cost.fit_rows(emu, sim)
    assert sim_cost.fit(rows) == pytest.approx(THETA, rel=1e-6)
    table.write_text(table.read_text().replace(',False', ',True'))
    assert sim_cost.fit(sim_cost.fit_rows(emu, sim)) != pytest.approx(THETA, rel=1e-3)
