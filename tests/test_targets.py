"""The one format of tables/targets.csv (analysis.targets): every experiment's analysis
writes it, over its hand-made folder here and over its simulated smoke run in its own
*_sim test file (:func:`assert_one_format`)."""

import pandas as pd
import pytest

from analysis import dht8, fidelity, kvload, kvscale, rudp, seeds, targets, transfer
from tests import dht8_folder, kvload_folder, kvscale_folder, transfer_folder
from tests.test_analysis_rudp import make_run as rudp_run
from tests.test_fidelity import _write_run as fidelity_logs


def assert_one_format(run_dir):
    """tables/targets.csv of run_dir has the five columns, numbers (or nothing) as measured
    and a verdict from the fixed list on every row; return it."""
    path = run_dir / 'tables' / 'targets.csv'
    assert path.read_text().splitlines()[0] == ','.join(targets.COLUMNS)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    assert len(df) and set(df['verdict']) <= set(targets.VERDICTS), df.to_string()
    for value in df['measured']:
        if value:
            float(value)            # a sentence raises ValueError here
    return df


def _fidelity_run(tmp_path):
    fidelity_logs(tmp_path, lost=200, median_ms=40.3, tcp_mbps=9.5)
    return tmp_path


@pytest.mark.parametrize('make, module', [
    (dht8_folder.make_run, dht8), (kvload_folder.make_run, kvload),
    (kvscale_folder.make_run, kvscale), (transfer_folder.make_run, transfer),
    (rudp_run, rudp), (_fidelity_run, fidelity)],
    ids=['dht8', 'kvload', 'kvscale', 'transfer', 'rudp', 'fidelity'])
def test_every_experiment_writes_the_one_format(tmp_path, make, module):
    run = make(tmp_path)
    module.build(run)
    df = assert_one_format(run)
    # what the reproduce report stacks is that table, row for row
    assert [r['verdict'] for r in seeds.read_targets(run)] == list(df['verdict'])


def test_a_row_refuses_a_sentence_as_measured_and_a_verdict_off_the_list():
    with pytest.raises(ValueError, match='must be a number'):
        targets.row('t', 'worst 1.100 over 3 points', '<= 1.1', 'met')
    with pytest.raises(ValueError, match='must be one of met, not met, no data, reported'):
        targets.row('t', 1.0, '<= 1.1', 'not met: operations failed')
    with pytest.raises(ValueError, match='must be a number'):
        targets.row('t', True, '<= 1.1', 'met')
    assert targets.row('t', None, '-', 'no data', ['a', '', 'b']) == {
        'target': 't', 'measured': None, 'goal': '-', 'verdict': 'no data', 'notes': 'a; b'}


def test_judge_never_meets_a_target_with_failures_and_says_why():
    assert targets.judge(1.2, True) == ('met', '')
    assert targets.judge(1.2, True, failed=3, bound=True) == (
        'not met', '3 failed operations; CPU-bound')
    assert targets.judge(None, True) == ('no data', '')


def test_an_older_format_is_named_not_misread(tmp_path):
    (tmp_path / 'tables').mkdir()
    (tmp_path / 'tables' / 'targets.csv').write_text('target,measured,met\nx,4 failed,False\n')
    with pytest.raises(ValueError, match='older format.*repronet analyse'):
        targets.read(tmp_path)
    assert seeds.read_targets(tmp_path) is None
    assert seeds.read_targets(tmp_path / 'absent') == []
