"""repronet.run.compare on hand-made results folders: matching, spread, flags, refusals."""

import json
import math
import subprocess
import sys

import pytest

from repronet.run import compare

REPO = __file__.rsplit('/tests/', 1)[0]


def make_run(root, name, tables, experiment='smoke', params=None, points=None):
    """Write a minimal results folder: manifest, tables/*.csv, logs/points.jsonl."""
    run = root / name
    (run / 'tables').mkdir(parents=True)
    (run / 'logs').mkdir()
    manifest = {'experiment': experiment, 'status': 'ok',
                'params': params if params is not None else {'bw': 20.0, 'out': str(run)}}
    (run / 'manifest.json').write_text(json.dumps(manifest))
    for table, text in tables.items():
        (run / 'tables' / ('%s.csv' % table)).write_text(text)
    with open(run / 'logs' / 'points.jsonl', 'w') as f:
        for point in points or []:
            f.write(json.dumps({'event': 'point', 'point': point}) + '\n')
    return run


GOODPUT_A = ('point,repetition,configured_mbps,goodput_mbps,retransmits\n'
             '0,0,20.0,19.0,0\n1,1,20.0,19.2,2\n2,2,20.0,19.1,1\n')
# goodput moves by 1.5 Mbit/s (sd ~0.1 each side): flagged; retransmits stay within spread
GOODPUT_B = ('point,repetition,configured_mbps,goodput_mbps,retransmits\n'
             '0,0,20.0,17.5,1\n1,1,20.0,17.7,0\n2,2,20.0,17.6,2\n')


def by(result, column, table=None):
    """Return the single Figure for column (in table)."""
    found = [f for f in result.figures if f.column == column
             and (table is None or f.table == table)]
    assert len(found) == 1, found
    return found[0]


def test_means_spread_ratio_and_flags(tmp_path):
    a = make_run(tmp_path, 'a', {'goodput': GOODPUT_A})
    b = make_run(tmp_path, 'b', {'goodput': GOODPUT_B})
    result = compare.compare(a, b)
    good = by(result, 'goodput_mbps')
    assert good.key == 'configured_mbps=20.0'
    assert good.n_a == good.n_b == 3
    assert good.mean_a == pytest.approx(19.1) and good.mean_b == pytest.approx(17.6)
    assert good.sd_a == pytest.approx(0.1) and good.sd_b == pytest.approx(0.1)
    assert good.ratio == pytest.approx(17.6 / 19.1)
    assert good.flagged is True
    retr = by(result, 'retransmits')
    assert retr.flagged is False      # 1.0 vs 1.0
    assert {f.column for f in result.figures} == {'goodput_mbps', 'retransmits'}
    text = compare.format_comparison(result)
    assert 'sample standard deviation' in text and 'goodput.csv' in text
    line = next(l for l in text.splitlines() if 'goodput_mbps' in l)
    assert line.rstrip().endswith('*') and '0.9215' in line
    assert '2 figure(s) compared, 1 differ by more than their spread' in text


def test_keys_are_text_columns_and_parameters(tmp_path):
    # delay_ms is a sweep value (in the point dicts), kind is text: both are keys
    table_a = ('point,repetition,kind,delay_ms,rtt_ms\n'
               '0,0,delay,5,10.1\n1,0,delay,20,40.2\n2,1,delay,5,10.3\n3,1,delay,20,40.0\n'
               '4,0,loss,5,10.0\n')
    table_b = ('point,repetition,kind,delay_ms,rtt_ms\n'
               '0,0,delay,5,10.2\n1,0,delay,20,40.1\n2,1,delay,5,10.2\n3,1,delay,20,40.1\n'
               '4,0,jitter,5,10.0\n')
    points = [{'point': 0, 'repetition': 0, 'seed': 1, 'delay_ms': 5}]
    a = make_run(tmp_path, 'a', {'rtt': table_a}, points=points)
    b = make_run(tmp_path, 'b', {'rtt': table_b}, points=points)
    result = compare.compare(a, b)
    keys = sorted(f.key for f in result.figures)
    assert keys == ['kind=delay delay_ms=20', 'kind=delay delay_ms=5']
    five = next(f for f in result.figures if f.key.endswith('=5'))
    assert five.mean_a == pytest.approx(10.2) and five.mean_b == pytest.approx(10.2)
    assert five.flagged is False
    assert result.only_a == {'rtt': ['kind=loss delay_ms=5']}
    assert result.only_b == {'rtt': ['kind=jitter delay_ms=5']}
    text = compare.format_comparison(result)
    assert 'only in A, not compared: rtt.csv' in text and 'kind=loss' in text


def test_one_repetition_has_no_spread(tmp_path):
    a = make_run(tmp_path, 'a', {'g': 'point,repetition,x\n0,0,1.0\n'})
    b = make_run(tmp_path, 'b', {'g': 'point,repetition,x\n0,0,2.0\n'})
    fig = by(compare.compare(a, b), 'x')
    assert math.isnan(fig.sd_a) and fig.spread is None and fig.flagged is None
    assert fig.key == '(all rows)' and fig.ratio == pytest.approx(2.0)
    assert 'n/a' in compare.format_comparison(compare.compare(a, b))


def test_table_in_one_run_only_and_param_difference(tmp_path):
    a = make_run(tmp_path, 'a', {'g': 'x\n1\n', 'port_stats': 'x\n1\n'},
                 params={'bw': 20.0, 'switch': 'osken'})
    b = make_run(tmp_path, 'b', {'g': 'x\n1\n'}, params={'bw': 20.0, 'switch': 'lxbr'})
    result = compare.compare(a, b)
    assert result.only_a == {'port_stats': ['*']}
    assert result.param_diffs == {'switch': ('osken', 'lxbr')}
    text = compare.format_comparison(result)
    assert 'parameter switch differs: A osken, B lxbr' in text
    assert 'port_stats.csv, the whole table' in text


@pytest.mark.parametrize('case', ['no-manifest', 'list-manifest', 'other-experiment',
                                  'no-tables'])
def test_refusals_are_one_sentence(tmp_path, case):
    a = make_run(tmp_path, 'a', {'g': 'x\n1\n'})
    if case == 'no-manifest':
        b = tmp_path / 'empty'
        b.mkdir()
        expect = 'is not a results folder'
    elif case == 'list-manifest':
        b = make_run(tmp_path, 'b', {'g': 'x\n1\n'})
        (b / 'manifest.json').write_text('[1, 2]')
        expect = 'is not a results folder'
    elif case == 'other-experiment':
        b = make_run(tmp_path, 'b', {'g': 'x\n1\n'}, experiment='fidelity')
        expect = 'is a smoke run and'
    else:
        b = make_run(tmp_path, 'b', {})
        expect = 'has no tables/*.csv; run "repronet analyse'
    with pytest.raises(compare.CompareError, match='.*') as err:
        compare.compare(a, b)
    assert expect in str(err.value)
    cli = subprocess.run([sys.executable, '-m', 'repronet', 'compare', str(a), str(b)],
                         capture_output=True, text=True, cwd=REPO)
    assert cli.returncode == 2 and cli.stdout == ''
    assert cli.stderr.count('\n') == 1 and expect in cli.stderr, cli.stderr


def test_cli_prints_the_table(tmp_path):
    a = make_run(tmp_path, 'a', {'goodput': GOODPUT_A})
    b = make_run(tmp_path, 'b', {'goodput': GOODPUT_B})
    cli = subprocess.run([sys.executable, '-m', 'repronet', 'compare', str(a), str(b)],
                         capture_output=True, text=True, cwd=REPO)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == compare.format_comparison(compare.compare(a, b)) + '\n'


def test_descriptions_are_not_keys(tmp_path):
    # fidelity's targets table: a label, a free-text measurement that differs per run, a bool
    a = make_run(tmp_path, 'a', {'targets': 'target,measured,pass\n'
                                 'rtt 5 ms,median 10.4 ms,True\nloss 1 %,0.98 %,True\n'})
    b = make_run(tmp_path, 'b', {'targets': 'target,measured,pass\n'
                                 'rtt 5 ms,median 10.6 ms,True\nloss 1 %,1.31 %,False\n'})
    result = compare.compare(a, b)
    assert sorted(f.key for f in result.figures) == ['target=loss 1 %', 'target=rtt 5 ms']
    loss = next(f for f in result.figures if f.key == 'target=loss 1 %')
    assert (loss.column, loss.mean_a, loss.mean_b) == ('pass', 1.0, 0.0)
    assert result.texts == {'targets': ['measured']} and not result.only_a
    assert 'text, not compared: targets.csv measured' in compare.format_comparison(result)


def test_renamed_columns_are_named_not_silently_skipped(tmp_path):
    # An old run analysed by an older analysis: failover_ms became recovery_ms.
    a = make_run(tmp_path, 'a', {'failover': 'fault,failover_ms\nkill,2.5\n'})
    b = make_run(tmp_path, 'b', {'failover': 'fault,recovery_ms\nkill,3.9\n'})
    result = compare.compare(a, b)
    assert result.columns_a == {'failover': ['failover_ms']}
    assert result.columns_b == {'failover': ['recovery_ms']}
    text = compare.format_comparison(result)
    assert 'columns only in A, not compared: failover.csv failover_ms' in text
    assert 'columns only in B, not compared: failover.csv recovery_ms' in text
