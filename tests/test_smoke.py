"""End-to-end: topologies/smoke.py on every switch kind this host has.

Each run is a real Mininet network under the machine-wide lock (held by the
conftest fixture; the runner sees that its ancestor holds it).  Checks:

- exit status 0 and a complete manifest (status ok, params, provenance,
  capabilities, mechanisms, cpu, nodes, timestamps);
- receiver goodput within 10 % of the configured rate (the ceiling is 95.6 %:
  1448 payload bytes per 1514-byte frame), 0 % ping loss;
- with osken: the bytes the switch sent on the receiver's port over the
  iperf3 payload received is between 1.0 (cannot carry less than the payload)
  and 1.10.  Headers alone give 1514/1448 = 1.046; pings, ARP, the iperf3
  control connection and the learning switch's flooded first packets add well
  under 1 % in a 2 s transfer, and more than 10 % would mean counters that do
  not match the traffic;
- the figures show the tables' numbers (one goodput line per repetition with every interval,
  the configured rate as the reference, a bar at the mean goodput with one dot per transfer),
  read back from what was drawn, and drawing them again gives the same bytes;
- ``python -m analysis RUN_DIR`` regenerates byte-identical tables;
- nothing left: no ``*-eth*`` interfaces, OVS bridges, Mininet shells, state
  file, or node processes still alive;
- a run interrupted with SIGINT or SIGTERM while a transfer runs exits with
  130/143, says ``interrupted`` in its manifest and leaves nothing behind.
"""

import hashlib
import os
import signal
import subprocess
import time

import pandas as pd
import pytest

from analysis import smoke as analysis
from repronet.emu import capabilities
from repronet.run import leftovers
from repronet.run.results import read_manifest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, 'topologies', 'smoke.py')
PYTHON = '/usr/bin/python3'
CLEAN = {'intfs': [], 'ovs_bridges': [], 'mininet_shells': [],
         'state_file': False}
NEEDS = {'lxbr': None, 'ovs': 'ovs_user', 'osken': 'osken_manager'}


def _require(switch):
    """Skip when this host cannot run the switch kind."""
    feature = NEEDS[switch]
    if feature:
        caps = capabilities.probe()
        if not getattr(caps, feature):
            pytest.skip(capabilities.explain(feature, caps))


def _started(pid):
    """Start time of pid in clock ticks since boot (proc(5): field 22 of /proc/PID/stat),
    or None when there is no such process."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return int(f.read().rsplit(')', 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _smoke(switch, out):
    """Run the smoke experiment at --scale smoke into out; assert it exited 0."""
    proc = subprocess.run([PYTHON, SCRIPT, '--scale', 'smoke', '--switch',
                           switch, '--out', str(out)], capture_output=True,
                          text=True, timeout=140)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _below(out, bar):
    """The goodput ratios (with retransmits) of a finished run's repetitions below bar."""
    goodput = pd.read_csv(out / 'tables' / 'goodput.csv')
    return ['%.3f (%d retransmits)' % (row.ratio, row.retransmits)
            for row in goodput.itertuples() if row.ratio < bar]


def _hashes(folder):
    """Return {file name: sha256} of a folder's files."""
    return {name: hashlib.sha256(open(os.path.join(folder, name), 'rb')
                                 .read()).hexdigest()
            for name in sorted(os.listdir(folder))}


def _assert_nothing_left(manifest):
    """No Mininet leftovers and no node process of the run alive."""
    assert leftovers.find() == CLEAN
    for node in manifest.get('nodes', []):
        assert node['returncode'] is not None, node
        try:
            with open('/proc/%d/cmdline' % node['pid'], 'rb') as f:
                cmd = f.read().split(b'\0')[0].decode()
        except OSError:
            continue
        assert os.path.basename(cmd) != os.path.basename(node['argv'][0]), \
            'node %s (pid %d) still running' % (node['name'], node['pid'])
    pid = manifest.get('mechanisms', {}).get('controller_pid')
    if pid:
        assert not os.path.exists('/proc/%d' % pid) or \
            b'osken' not in open('/proc/%d/cmdline' % pid, 'rb').read()


def _check_figures(out, manifest, scratch):
    """The run's figures show its tables; drawing them again gives the same files."""
    data = analysis.tables(out)
    saved = analysis.draw(scratch, manifest, data)
    expect = ['goodput_over_time', 'goodput']
    if manifest['params']['switch'] == 'osken':
        expect.append('port_utilization')
    assert sorted(saved) == sorted(expect)
    for name, files in saved.items():
        for path in files:
            ext = os.path.splitext(path)[1]
            assert open(path, 'rb').read() == \
                (out / 'figures' / (name + ext)).read_bytes(), name + ext
    bw, repeat = manifest['params']['bw'], manifest['params']['repeat']
    label = 'configured %g Mbit/s' % bw
    over_time = saved['goodput_over_time'].drawn
    assert over_time.ylabel == 'goodput (Mbit/s)'
    assert over_time.get(label, 'reference').y == (bw,)
    intervals = data['goodput_intervals']
    for rep in range(repeat):
        mine = intervals[intervals['repetition'] == rep].sort_values('t_end')
        line = over_time.get('rep %d' % rep, 'line')
        assert len(line.x) == len(mine) > 0
        assert line.x == tuple(mine['t_end']) and line.y == tuple(mine['goodput_mbps'])
    bars = saved['goodput'].drawn
    goodput = data['goodput']['goodput_mbps']
    assert bars.get('mean ± sd', 'bars').x == ('h1 -> h2',)
    assert bars.get('mean ± sd', 'bars').y == pytest.approx((goodput.mean(),))
    assert sorted(bars.get('repetitions', 'points').y) == sorted(goodput)
    assert bars.get(label, 'reference').y == (bw,)
    if 'port_utilization' in saved:
        ports = saved['port_utilization'].drawn
        assert ports.get('shaped link %g Mbit/s' % bw, 'reference').y == (bw,)
        lines = [s for s in ports.series if s.kind == 'line']
        assert lines and all(len(s.x) >= 2 for s in lines)
        assert max(max(s.y) for s in lines) > 0.5 * bw      # the transfer shows


def test_report_describes_the_machine_from_the_manifest():
    """The report names the machine the manifest recorded (CPUs, memory), no fixed count."""
    manifest = {'status': 'ok', 'params': {'switch': 'lxbr', 'bw': 10.0, 'duration': 2.0,
                                           'repeat': 1, 'scale': 'smoke'},
                'provenance': {'host': {'cpus': 6, 'cpus_usable': 6,
                                        'memory_bytes': 3 * 2 ** 30, 'cpu_model': None}}}
    empty = {name: pd.DataFrame() for name in ('goodput', 'ping')}
    text = analysis.report(manifest, empty)
    assert '- machine: 6 CPUs, 3.0 GiB memory' in text.splitlines()
    del manifest['provenance']
    assert '- machine: machine not recorded in the manifest' in \
        analysis.report(manifest, empty).splitlines()


@pytest.mark.parametrize('mechanisms, line', [
    ({'switch': 'ovs', 'datapath': 'user', 'links': [{'mechanism': 'linkdelay'}]},
     '- switch: ovs, datapath: user, link mechanism: linkdelay'),
    ({'switch': 'lxbr', 'datapath': None, 'links': [{'mechanism': 'netem'}]},
     '- switch: lxbr, link mechanism: netem'),
    ({'backend': 'sim', 'switch': 'sim', 'links': [{'mechanism': 'sim'}]},
     '- switch: sim, link mechanism: sim'),
    (None, '- switch: lxbr, link mechanism: '),
])
def test_report_says_the_datapath_only_when_the_manifest_does(mechanisms, line):
    """A Linux bridge has no datapath and a simulated run no switch: the report printed
    'datapath: None' for both (a new user's simulated smoke run); now the switch the run
    recorded, and its datapath only when there is one; a simulated run's CPU line says it had
    no monitor instead of 'mean None'."""
    manifest = {'status': 'ok', 'mechanisms': mechanisms,
                'params': {'switch': 'lxbr', 'bw': 10.0, 'duration': 2.0, 'repeat': 1,
                           'scale': 'smoke'}}
    text = analysis.report(manifest, {name: pd.DataFrame() for name in ('goodput', 'ping')})
    assert line in text.splitlines() and 'datapath: None' not in text, text
    if mechanisms and mechanisms.get('backend') == 'sim':
        assert 'None' not in text and '- CPU over the run: no monitor' in text, text


@pytest.mark.root
@pytest.mark.parametrize('switch', ['lxbr', 'ovs', 'osken'])
def test_smoke_run(switch, tmp_path):
    _require(switch)
    out = tmp_path / 'run'
    proc = _smoke(switch, out)
    bar = 0.90
    low = _below(out, bar)
    if low:
        # One stall of the shared machine costs a 2 s transfer a tenth (seen once in CI:
        # 0.833 with the CPUs 0.10 busy; 0 retransmits in every reading since). Shaping that
        # is really wrong reads wrong twice; both readings are printed.
        print('%s: repetitions read %s of the rate, below %.2f; running once more'
              % (switch, low, bar))
        out = tmp_path / 'again'
        proc = _smoke(switch, out)
    assert '[2/2]' in proc.stdout and 'ETA' in proc.stdout
    manifest = read_manifest(out)
    assert manifest['status'] == 'ok' and manifest['error'] is None
    for key in ('experiment', 'params', 'seed', 'argv', 'capabilities',
                'provenance', 'mechanisms', 'cpu', 'nodes', 'started_at',
                'ended_at'):
        assert manifest.get(key) is not None, key
    assert manifest['mechanisms']['switch'] == switch
    if switch != 'lxbr':
        assert manifest['mechanisms']['datapath'] in ('user', 'kernel')
    bw = manifest['params']['bw']

    goodput = pd.read_csv(out / 'tables' / 'goodput.csv')
    assert len(goodput) == manifest['params']['repeat']
    for ratio in goodput['ratio']:
        assert bar <= ratio <= 1.0, 'goodput %.1f %% of %g Mbit/s' % (
            100 * ratio, bw)
    ping = pd.read_csv(out / 'tables' / 'ping.csv')
    assert len(ping) == 2 * len(goodput)
    assert (ping['loss_pct'] == 0).all()
    assert 'Goodput' in (out / 'report.md').read_text()
    _check_figures(out, manifest, tmp_path / 'redraw')

    if switch == 'osken':
        counters = pd.read_csv(out / 'tables' / 'port_counters.csv')
        assert len(counters) == 1
        assert 1.0 <= counters['ratio'][0] <= 1.10, counters

    tables = _hashes(out / 'tables')
    again = subprocess.run([PYTHON, '-m', 'analysis', str(out)], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert _hashes(out / 'tables') == tables
    _assert_nothing_left(manifest)


@pytest.mark.root
@pytest.mark.parametrize('signum,switch', [(signal.SIGINT, 'osken'),
                                           (signal.SIGTERM, 'lxbr')])
def test_interrupted_run_leaves_nothing(signum, switch, tmp_path):
    _require(switch)
    out = tmp_path / 'run'
    proc = subprocess.Popen([PYTHON, SCRIPT, '--scale', 'default',
                             '--switch', switch, '--out', str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    client = out / 'logs' / 'iperf-client-p0.json'
    deadline = time.monotonic() + 60
    while not client.exists():              # halfway: a transfer is running
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, 'transfer never started'
        time.sleep(0.05)
    time.sleep(1)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, stdout + stderr
    manifest = read_manifest(out)
    assert manifest['status'] == 'interrupted'
    assert manifest['error'] == signal.Signals(signum).name
    assert manifest['ended_at']
    _assert_nothing_left(manifest)


@pytest.mark.root
def test_next_run_cleans_what_a_killed_run_left(tmp_path):
    _require('osken')
    crashed = tmp_path / 'crashed'
    proc = subprocess.Popen([PYTHON, SCRIPT, '--scale', 'default',
                             '--switch', 'osken', '--out', str(crashed)],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    client = crashed / 'logs' / 'iperf-client-p0.json'
    deadline = time.monotonic() + 60
    while not client.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.kill()                             # no teardown at all
    proc.wait(timeout=10)
    assert read_manifest(crashed)['status'] == 'running'
    state = leftovers.State.load()
    assert state is not None and state.data['pids']
    alive = [pid for pid, started in state.data['pids'] if _started(pid) == started]
    assert alive, 'a SIGKILLed run should leave processes behind'
    assert leftovers.find()['ovs_bridges'] == ['s1']

    out = tmp_path / 'next'
    run = subprocess.run([PYTHON, SCRIPT, '--scale', 'smoke', '--repeat', '1',
                          '--out', str(out)], capture_output=True, text=True,
                         timeout=140)
    assert run.returncode == 0, run.stdout + run.stderr
    assert 'cleaned leftovers of an earlier run' in run.stderr
    for pid, started in state.data['pids']:
        assert _started(pid) != started, 'pid %d survived' % pid
    _assert_nothing_left(read_manifest(out))
