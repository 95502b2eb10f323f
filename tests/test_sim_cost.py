"""analysis.sim_cost: the processing cost per callback from an emulated and a simulated run."""

import json

import pytest

from analysis import sim_cost


def _folder(path, rows, backend='emu', experiment='dht8', costs=None):
    (path / 'tables').mkdir(parents=True)
    (path / 'manifest.json').write_text(json.dumps({
        'experiment': experiment, 'params': {'backend': backend, 'sim_costs': costs or {}}}))
    lines = ['part,variant,concurrent_clients,time_per_op_ms']
    lines += ['%s,%s,%d,%s' % row for row in rows]
    (path / 'tables' / 'points.csv').write_text('\n'.join(lines) + '\n')
    return path


def test_half_the_difference_of_the_one_client_searches_per_callback(tmp_path):
    emu = _folder(tmp_path / 'emu', [('I', 'search', 1, 1.2), ('I', 'search', 1, 1.4),
                                     ('I', 'search', 2, 9.0), ('III', 'search', 1, 7.0),
                                     ('I', 'register batched', 1, 0.5)])
    sim = _folder(tmp_path / 'sim', [('I', 'search', 1, 0.3), ('I', 'search', 2, 0.3)], 'sim')
    seconds, emu_ms, sim_ms, n = sim_cost.measure(emu, sim)
    assert (emu_ms, sim_ms, n) == (pytest.approx(1.3), 0.3, 2)
    assert seconds == pytest.approx(0.0005)
    assert sim_cost.flag(seconds) == ('nodes.dht.server=0.0005,nodes.dht.client=0.0005,'
                                      'nodes.dht.peer=0.0005')


def test_refusals_are_one_sentence(tmp_path, capsys):
    emu = _folder(tmp_path / 'emu', [('I', 'search', 1, 0.2)])
    sim = _folder(tmp_path / 'sim', [('I', 'search', 1, 0.3)], 'sim')
    with pytest.raises(ValueError, match='not slower'):
        sim_cost.measure(emu, sim)
    none = _folder(tmp_path / 'none', [('III', 'search', 1, 0.3)])
    with pytest.raises(ValueError, match='no one-client Part I search'):
        sim_cost.measure(none, sim)
    assert sim_cost.main([str(tmp_path / 'missing'), str(sim)]) == 1
    assert 'not a results folder' in capsys.readouterr().err


def test_the_folders_must_be_an_emulated_and_an_uncharged_simulated_dht8_run(tmp_path):
    rows = [('I', 'search', 1, 1.0)]
    emu = _folder(tmp_path / 'emu', rows)
    sim = _folder(tmp_path / 'sim', [('I', 'search', 1, 0.3)], 'sim')
    with pytest.raises(ValueError, match='first folder must be an emulated one'):
        sim_cost.measure(sim, sim)
    with pytest.raises(ValueError, match='second folder must be a simulated one'):
        sim_cost.measure(emu, emu)
    charged = _folder(tmp_path / 'charged', rows, 'sim', costs={'nodes.dht.server': 1e-4})
    with pytest.raises(ValueError, match='was run with --sim-cost'):
        sim_cost.measure(emu, charged)
    fid = _folder(tmp_path / 'fid', rows, 'sim', experiment='fidelity')
    with pytest.raises(ValueError, match='sim_cost reads dht8 runs'):
        sim_cost.measure(emu, fid)
