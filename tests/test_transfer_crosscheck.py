"""analysis.transfer_crosscheck on two small hand-made results folders (a manifest and a
points.csv each): one row per configuration both runs have, in the emulated run's order,
sim / emu of the request-to-last-byte rate (the aggregate for load points), the 15 % verdict,
CPU-bound repetitions and the reasons it can see; folders of the wrong backend or experiment
are refused in one sentence."""

import json

import pandas as pd
import pytest

from analysis import transfer_crosscheck as tc

COLUMNS = ['point', 'repetition', 'kind', 'size', 'packet', 'cold', 'conns', 'delay_ms',
           'loss', 'bw', 'tx_mbps', 'rx_mbps', 'total_mbps', 'aggregate_mbps', 'cpu_bound',
           'iperf_mbps']


def _folder(path, backend, rows, experiment='transfer'):
    (path / 'tables').mkdir(parents=True)
    (path / 'manifest.json').write_text(json.dumps({'experiment': experiment,
                                                    'params': {'backend': backend}}))
    pd.DataFrame(rows, columns=COLUMNS).to_csv(path / 'tables' / 'points.csv', index=False)
    return path


EMU = [  # two repetitions of a packet point (one CPU-bound), a cold size point, a load point
    [0, 0, 'packet', 2000000, 30, False, 1, None, None, None, 700, 60, 60, 60, True, 270],
    [1, 1, 'packet', 2000000, 30, False, 1, None, None, None, 700, 70, 70, 70, False, 280],
    [2, 0, 'size', 100000, 1000, True, 1, None, None, None, 400, 500, 500, 500, False, None],
    [3, 0, 'load', 2000000, 1000, False, 2, None, None, None, 480, 450, 440, 860, False, 900],
    [4, 0, 'path', 2000000, 1000, False, 1, 1.0, 1.0, 100, 30, 30, 30, 30, False, 40],
]
SIM = [
    [0, 0, 'load', 2000000, 1000, False, 2, None, None, None, 480, 470, 460, 900, False, None],
    [1, 0, 'packet', 2000000, 30, False, 1, None, None, None, 900, 890, 880, 880, False, None],
    [2, 0, 'path', 2000000, 1000, False, 1, 1.0, 1.0, 100, 95, 94, 93, 93, False, None],
]


def test_one_row_per_shared_configuration_with_its_ratio_and_reasons(tmp_path):
    df = tc.table(tc._points(_folder(tmp_path / 'e', 'emu', EMU), 'emu', 'EMU_DIR'),
                  tc._points(_folder(tmp_path / 's', 'sim', SIM), 'sim', 'SIM_DIR'))
    assert list(df['kind']) == ['packet', 'load', 'path']        # the cold point left out
    packet, load, path = (df.iloc[i] for i in range(3))
    assert packet['emu_total_mbps'] == 65 and packet['total_sim_over_emu'] == \
        pytest.approx(880 / 65) and not packet['within_15pc']
    assert packet['emu_cpu_bound'] == 1 and 'CPU-bound' in packet['why']
    assert 'the Python sender, not the network' in packet['why']
    assert load['total_sim_over_emu'] == pytest.approx(900 / 860) and load['within_15pc']
    assert load['why'] == ''
    assert 'no congestion control' in path['why']
    assert '| packet | 2000000 | 30 | 1 |' in tc.markdown(df)


@pytest.mark.parametrize('swap, words', [(True, 'must be an emulation run'),
                                         (False, 'not a transfer run')])
def test_wrong_folders_are_refused_in_one_sentence(tmp_path, capsys, swap, words):
    emu = _folder(tmp_path / 'e', 'emu', EMU, 'transfer' if swap else 'dht8')
    sim = _folder(tmp_path / 's', 'sim', SIM)
    assert tc.main([str(sim), str(emu)] if swap else [str(emu), str(sim)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.strip().count('\n') == 0
