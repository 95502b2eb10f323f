"""kvmix in the simulator (repronet.sim) against the simulated KV server: a two-server
cluster is discovered with CLUSTER SLOTS, preloaded and then mixed 80/20 with every reply
right and every request sent straight to its slot's owner; --duration runs in virtual
seconds; no server answering is one sentence and exit 1; a seed repeats the logs byte for
byte. No root, no sockets."""

import hashlib

import pytest

from tests.test_kv_sim import ROOT, Sim
from tests.test_sans_io import violations

PORTS = (7001, 7002)


def _cluster(sim):
    spec = ','.join('s%d=%s:%d' % (i, sim.ip, port) for i, port in enumerate(PORTS, 1))
    for i in (1, 2):
        sim.start('b', 's%d' % i, 'nodes.kv.server', ['--cluster', spec, '--node-id',
                                                      's%d' % i])
    sim.backend.run_until(lambda: False, 0.01)
    return spec


def _kvmix(sim, name, *flags):
    return sim.start('a', name, 'workloads.kvmix', [
        '--servers', '%s:%d' % (sim.ip, PORTS[0]), '--keys', 300, '--timeout', 2]
        + [str(f) for f in flags])


def _run_cluster(tmp_path):
    sim = Sim(tmp_path)
    _cluster(sim)
    pre = _kvmix(sim, 'pre', '--phase', 'preload', '--clients', 2, '--pipeline', 8,
                 '--seed', 5)
    assert pre.wait(60) == 0
    mix = _kvmix(sim, 'mix', '--clients', 3, '--requests', 200, '--seed', 5,
                 '--latencies', tmp_path / 'logs' / 'mix')
    assert mix.wait(60) == 0
    return sim


def test_sim_modules_do_no_io():
    assert violations(ROOT / 'workloads/kvmix_sim.py') == []
    assert violations(ROOT / 'workloads/kvcluster_admin_sim.py') == []


def test_a_cluster_is_preloaded_and_mixed_with_every_reply_right(tmp_path):
    sim = _run_cluster(tmp_path)
    pre = sim.records('pre')[-1]
    assert pre['mode'] == 'cluster' and pre['ops']['set']['ok'] == 300
    ready, mix = sim.records('mix')[0], sim.records('mix')[-1]
    assert ready['event'] == 'ready' and ready['loop'] == 'sim'
    assert sum(ready['slots'].values()) == 16384 and len(ready['slots']) == 2
    ops = mix['ops']
    assert ops['get']['ok'] + ops['set']['ok'] == mix['requests'] == 600
    assert ops['get']['miss'] == ops['get']['wrong'] == ops['set']['wrong'] == 0
    assert ops['get']['errors'] == ops['set']['errors'] == {}
    assert mix['moved'] == 0 and len(mix['per_server']) == 2
    assert mix['cpu_s'] is None and mix['latencies'] == 'mix'
    assert (tmp_path / 'logs' / 'mix.get.u32').stat().st_size == ops['get']['count'] * 4
    # a request crosses four 0.1 ms link hops at least
    assert ops['get']['p50_us'] >= 400


def test_duration_is_virtual_seconds(tmp_path):
    sim = Sim(tmp_path)
    sim.server()
    start = sim.backend.engine.now
    mix = sim.start('a', 'timed', 'workloads.kvmix', [
        '--servers', '%s:6379' % sim.ip, '--keys', 100, '--duration', 1.5])
    assert mix.wait(60) == 0
    summary = sim.records('timed')[-1]
    assert summary['mode'] == 'single' and summary['requests'] > 1000
    assert 1.5 <= sim.backend.engine.now - start < 1.6
    assert summary['ops']['get']['wrong'] == 0


def test_no_server_is_one_sentence_and_exit_1(tmp_path):
    sim = Sim(tmp_path)
    proc = _kvmix(sim, 'alone')
    assert proc.wait(30) == 1
    err = (sim.logs / 'alone.err').read_text()
    assert err.strip() == ('kvmix: no server of --servers answered (%s:%d: connection '
                           'refused).' % (sim.ip, PORTS[0]))


def test_the_same_seed_repeats_the_logs(tmp_path):
    digests = []
    for run in ('one', 'two'):
        sim = _run_cluster(tmp_path / run)
        digests.append({name: hashlib.sha256((sim.logs / name).read_bytes()).hexdigest()
                        for name in ('pre.jsonl', 'mix.jsonl', 'mix.get.u32', 's1.jsonl')})
    assert digests[0] == digests[1]


@pytest.mark.parametrize('flags, says', [(['--clients', 0], '--clients'),
                                         (['--phase', 'x'], '--phase')])
def test_bad_flags_exit_2(tmp_path, flags, says):
    sim = Sim(tmp_path)
    proc = _kvmix(sim, 'bad', *flags)
    assert proc.returncode == 2 and says in (sim.logs / 'bad.err').read_text()


@pytest.mark.parametrize('module', ['workloads.kvload', 'workloads.kvmix'])
def test_both_generators_wait_at_the_barrier_and_end_on_sigterm(tmp_path, module):
    """What kvload_sim.SimLoad does for both: ready at the runner's barrier and nothing
    sent before go; SIGTERM mid-run ends the run once, with the summary and one sentence."""
    from tests.test_kv_sim import PORT
    sim = Sim(tmp_path)
    sim.server()
    where = ['--host', sim.ip, '--port', PORT] if module == 'workloads.kvload' else \
        ['--servers', '%s:%d' % (sim.ip, PORT), '--keys', 300]
    node = sim.start('a', 'load', module, [str(f) for f in where + [
        '--clients', 2, '--requests', 10 ** 6, '--timeout', 2, '--barrier']])
    node.wants_ready = True                 # as ctx.start_node(..., barrier=True) sets it
    node.wait_ready(10)
    engine = sim.backend.engine
    events = engine.events
    sim.backend.run_until(lambda: False, 0.5)
    assert node.is_ready and engine.events - events < 10        # nobody sends before go
    node.go()
    sim.backend.run_until(lambda: False, 0.2)
    assert engine.events - events > 1000
    assert node.stop() == 1
    records = sim.records('load')
    ready, summary = records[0], records[-1]
    assert ready['event'] == 'ready' and ready['loop'] == 'sim'
    assert summary['event'] == 'summary' and summary['loop'] == 'sim'
    assert [r['event'] for r in records].count('summary') == 1
    assert summary.get('done', summary.get('requests')) > 100
    err = (sim.logs / 'load.err').read_text()
    assert 'interrupted by SIGTERM' in err and err.strip().count('\n') == 0
