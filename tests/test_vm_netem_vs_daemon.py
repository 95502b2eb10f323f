"""analysis.netem_vs_daemon: two fidelity runs' tables side by side, from the tables alone.

The folders are written by hand (the module reads only manifest.json and tables/), so the
expected numbers are known exactly.
"""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from analysis import netem_vs_daemon

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTT = ('point,repetition,kind,shape,delay_ms,jitter_ms,loss,nlinks,configured_rtt_ms,'
       'configured_rtt_std_ms,median_rtt_ms,std_rtt_ms\n')
LOSS = 'point,repetition,kind,shape,configured_loss_pct,measured_loss_pct\n'


def _run(path, mechanism, rtt, loss, experiment='fidelity'):
    """A fidelity folder: a manifest naming the link mechanism, and rtt/loss tables."""
    (path / 'tables').mkdir(parents=True)
    links = [{'node1': 'a', 'node2': 's', 'mechanism': 'htb+' + mechanism, 'delay_ms': 5.0},
             {'node1': 'b', 'node2': 's', 'mechanism': 'none'}]
    (path / 'manifest.json').write_text(json.dumps({
        'experiment': experiment, 'status': 'ok', 'params': {'links': mechanism},
        'mechanisms': {'links': links, 'link_mechanism': mechanism},
        'provenance': {'kernel': {'release': '6.1.0-56-amd64'},
                       'git': {'revision': 'abcdef0123', 'dirty': False}},
        'cpu': {'saturated': mechanism == 'linkdelay'}}))
    (path / 'tables' / 'rtt.csv').write_text(RTT + rtt)
    (path / 'tables' / 'loss.csv').write_text(LOSS + loss)
    return path


@pytest.fixture
def runs(tmp_path):
    netem = _run(tmp_path / 'netem', 'netem',
                 '0,0,delay,two-host,10,0,0,2,20,0,20.4,0.1\n'
                 '1,1,delay,two-host,10,0,0,2,20,0,20.6,0.1\n'
                 '2,0,jitter,two-host,20,2,0,2,40,2.3094,40.5,2.2\n',
                 '3,0,loss,two-host,5,5.5\n')
    daemon = _run(tmp_path / 'daemon', 'linkdelay',
                  '0,0,delay,two-host,10,0,0,2,20,0,21.0,0.1\n'
                  '1,0,jitter,two-host,20,2,0,2,40,2.3094,41.0,2.4\n'
                  '2,0,delay,multi-hop,5,0,0,4,10,0,11.0,0.1\n',
                  '3,0,loss,two-host,5,4.4\n')
    return netem, daemon


def test_rows_give_configured_netem_daemon_and_their_ratios(runs, tmp_path):
    df = netem_vs_daemon.build(*runs, tmp_path / 'out')
    table = df.set_index(['measure', 'shape', 'kind', 'setting'])
    rtt = table.loc[('median RTT (ms)', 'two-host', 'delay', 'delay_ms 10, jitter_ms 0')]
    assert (rtt['configured'], rtt['netem'], rtt['netem_repeats'], rtt['daemon']) == \
        pytest.approx((20.0, 20.5, 2, 21.0))
    assert rtt['daemon_over_netem'] == pytest.approx(21.0 / 20.5)
    assert rtt['daemon_over_configured'] == pytest.approx(1.05)
    std = table.loc[('RTT std (ms)', 'two-host', 'jitter', 'delay_ms 20, jitter_ms 2')]
    assert (std['netem'], std['daemon']) == pytest.approx((2.2, 2.4))
    loss = table.loc[('one-way loss (%)', 'two-host', 'loss', 'configured_loss_pct 5')]
    assert loss['daemon_over_netem'] == pytest.approx(0.8)
    only = table.loc[('median RTT (ms)', 'multi-hop', 'delay', 'delay_ms 5, jitter_ms 0')]
    assert pd.isna(only['netem']) and only['daemon'] == pytest.approx(11.0)
    report = (tmp_path / 'out' / 'report.md').read_text()
    assert 'kernel 6.1.0-56-amd64, commit abcdef0' in report
    assert '| median RTT (ms) | multi-hop | delay | delay_ms 5, jitter_ms 0 | 10 | - | 11 | - |' \
        in report
    again = tmp_path / 'again'
    netem_vs_daemon.build(*runs, again)
    assert (again / 'tables' / 'netem_vs_daemon.csv').read_bytes() == \
        (tmp_path / 'out' / 'tables' / 'netem_vs_daemon.csv').read_bytes()


def test_a_run_with_the_wrong_mechanism_is_refused_in_one_sentence(runs, tmp_path):
    netem, daemon = runs
    with pytest.raises(netem_vs_daemon.ComparisonError) as info:
        netem_vs_daemon.build(daemon, netem, tmp_path / 'out')
    assert str(info.value).endswith('but NETEM_DIR must be a run with --links netem')
    other = _run(tmp_path / 'kv', 'netem', '', '', experiment='kvload')
    with pytest.raises(netem_vs_daemon.ComparisonError, match='must be a fidelity run'):
        netem_vs_daemon.build(other, daemon, tmp_path / 'out')


def test_command_line_prints_the_table_or_one_sentence(runs, tmp_path):
    def run(*argv):
        return subprocess.run([sys.executable, '-m', 'analysis.netem_vs_daemon'] +
                              [str(a) for a in argv], capture_output=True, text=True,
                              cwd=REPO, timeout=120)
    done = run(*runs, '--out', tmp_path / 'out')
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('| measure | shape | kind | setting | configured | netem |')
    refused = run(runs[0], runs[0], '--out', tmp_path / 'out2')
    assert refused.returncode == 1 and refused.stdout == ''
    assert refused.stderr.count('\n') == 1 and refused.stderr.startswith('netem_vs_daemon: ')
