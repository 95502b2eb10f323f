"""The simulator's processing cost (repronet.sim.cpu): a charge per callback and per byte
received, parsed from --sim-cost, paid by the real node programs in a simulated run."""

import json

import pytest

from nodes.dht import codec
from repronet.sim import cpu
from tests.test_dht_sim import Net

PER_BYTE = 1e-6


def test_per_byte_costs_are_parsed_and_checked_like_per_callback_ones():
    assert cpu.parse_costs('nodes.dht.server=1e-4, nodes.dht.server/byte=2e-7') == {
        'nodes.dht.server': 1e-4, 'nodes.dht.server/byte': 2e-7}
    for text, why in (('nodes.dht.server/bytes=1e-7', 'is not a module'),
                      ('nodes.dht.sever/byte=1e-7', 'is not a module'),
                      ('nodes.dht.server/byte=x', 'MODULE/byte=SECONDS'),
                      ('nodes.dht.server/byte=-1', 'MODULE/byte=SECONDS')):
        with pytest.raises(ValueError, match=why):
            cpu.parse_costs(text)


def _register(tmp_path, costs):
    """One batched register of p1's files over four servers; its op records."""
    net = Net(tmp_path, replicas=0, costs=costs)
    net.servers()
    client = net.client('p1', 'register-p1', 'register', barrier=False)
    assert client.wait(60) == 0, net.err(client)
    return net, net.records(client, 'op')


def test_an_index_server_is_charged_per_byte_of_each_register_it_receives(tmp_path):
    """With only a per-byte charge on the server, each REGISTER's round trip grows by
    exactly that charge times the frame's size (window 1: nothing else waits)."""
    net, free = _register(tmp_path / 'free', None)
    _, paid = _register(tmp_path / 'paid', {'nodes.dht.server/byte': PER_BYTE})
    addr = '%s:8000' % net.ip['p1']
    assert [r['name'] for r in paid] == [r['name'] for r in free] and len(free) > 1
    for a, b in zip(free, paid):
        size = codec.frame_size(codec.Register(0, addr, (a['name'],) * a['files']))
        assert b['latency'] - a['latency'] == pytest.approx(PER_BYTE * size, rel=1e-3,
                                                            abs=2e-7)
    assert net.backend.cpu is None      # the free run has no model at all


def test_the_model_records_both_charges_and_charges_nothing_unnamed(tmp_path):
    net, _ = _register(tmp_path, {'nodes.dht.server': 1e-4, 'nodes.dht.server/byte': 2e-7})
    assert net.backend.cpu.record() == {
        'cores': 2, 'seconds_per_callback': {'nodes.dht.server': 1e-4},
        'seconds_per_byte_received': {'nodes.dht.server': 2e-7}}
    client = [p for p in net.backend.nodes if p.kind == 'nodes.dht.client'][0]
    assert net.backend.cpu.claim(client, 10 ** 6) is None


def test_bytes_that_arrive_at_a_paused_server_are_charged_when_it_resumes(tmp_path):
    """SIGSTOP holds a callback; SIGCONT runs it with its per-byte charge, so the model
    charges the same in all as in a run without the pause."""
    costs = {'nodes.dht.server/byte': PER_BYTE}
    plain, _ = _register(tmp_path / 'plain', costs)
    net = Net(tmp_path / 'paused', replicas=0, costs=costs)
    servers = net.servers()
    for proc in servers.values():
        proc.pause()
    client = net.client('p1', 'register-p1', 'register', barrier=False)
    net.backend.run_until(lambda: False, 0.5)
    assert client.returncode is None and net.backend.cpu.busy == 0      # all held
    for proc in servers.values():
        proc.resume()
    assert client.wait(60) == 0, net.err(client)
    assert net.backend.cpu.busy == pytest.approx(plain.backend.cpu.busy, rel=1e-9)
    assert net.backend.cpu.busy > 0


def test_a_free_callback_waits_for_the_charged_ones_its_node_has_not_finished():
    """A node's callbacks run in order on its one thread: a connection's end (free) must not
    overtake the data before it (charged per byte), or the node sees the end first."""
    from repronet.sim.engine import Engine

    class Proc:
        kind = 'nodes.dht.server'
    engine, proc = Engine(), Proc()
    model = cpu.CpuModel(engine, 2, {'nodes.dht.server/byte': PER_BYTE})
    assert model.claim(proc, 1000) == pytest.approx(1000 * PER_BYTE)
    assert model.claim(proc, 0) == pytest.approx(1000 * PER_BYTE)
    engine.at(0.5, lambda: None)
    engine.run()
    assert model.claim(proc, 0) is None


# -- a charge per read (KIND/read): a stream's train seen as its packets ---------------------
class _Server:
    kind = 'nodes.dht.server'


def _at(t, costs):
    """An engine advanced to virtual time t and a two-core model of costs on it."""
    from repronet.sim.engine import Engine
    engine = Engine()
    model = cpu.CpuModel(engine, 2, costs)
    engine.at(t, lambda: None)
    engine.run()
    return engine, model


def test_read_charges_are_parsed_and_checked_like_the_others():
    assert cpu.parse_costs('nodes.dht.server/read=3e-5') == {'nodes.dht.server/read': 3e-5}
    for text in ('nodes.dht.sever/read=1e-5', 'nodes.dht.server/reads=1e-5'):
        with pytest.raises(ValueError, match='is not a module'):
            cpu.parse_costs(text)


def test_an_idle_node_reads_each_packet_and_waits_only_for_the_last_read():
    """Five packets 100 us apart, a read of 10 us: five reads, the first four while the
    train was still arriving, so the callback ends one read after the last packet."""
    _, model = _at(4e-4, {'nodes.dht.server/read': 1e-5})
    assert model.claim(_Server(), 7000, 5, 1e-4) == pytest.approx(4e-4 + 1e-5)
    assert model.reads == 5 and model.busy == pytest.approx(5e-5)


def test_packets_that_arrive_during_a_read_share_the_next_one():
    """Reads of 250 us, packets at 0, 100 ... 400 us: reads at 0 (packet 0), 250 (1, 2) and
    500 us (3, 4: the callback itself), which ends at 750 us."""
    _, model = _at(4e-4, {'nodes.dht.server/read': 2.5e-4})
    assert model.claim(_Server(), 7000, 5, 1e-4) == pytest.approx(7.5e-4)
    assert model.reads == 3


def test_a_busy_node_takes_a_whole_train_in_one_read():
    """The thread is busy (1 ms callback) while the train arrives: one read when it is free."""
    engine, model = _at(0.0, {'nodes.dht.server': 1e-3, 'nodes.dht.server/read': 1e-5})
    server = _Server()
    assert model.claim(server, 1) == pytest.approx(1.01e-3)
    engine.at(4e-4, lambda: None)
    engine.run()
    assert model.claim(server, 7000, 5, 1e-4) == pytest.approx(2.02e-3)
    assert model.reads == 2


def test_timers_and_connections_are_not_reads_and_without_the_charge_a_train_is_one_call():
    _, model = _at(4e-4, {'nodes.dht.server': 1e-3, 'nodes.dht.server/read': 1e-5})
    assert model.claim(_Server(), 0, 5, 1e-4) == pytest.approx(4e-4 + 1e-3)
    assert model.reads == 0
    _, model = _at(4e-4, {'nodes.dht.server': 1e-3})
    assert model.claim(_Server(), 7000, 5, 1e-4) == pytest.approx(4e-4 + 1e-3)
    assert model.busy == pytest.approx(1e-3) and 'seconds_per_read' not in model.record()


def _sink_run(tmp_path, costs, nbytes=42000):
    """p1 writes nbytes once to a sink on s1 over 100 Mbit/s links; (when the sink got
    them, the backend)."""
    from repronet.sim.backend import SimBackend
    from tests.test_dht_sim import PY, Star
    (tmp_path / 'logs').mkdir(parents=True)
    backend = SimBackend(Star(), 1, log_dir=tmp_path / 'logs', costs=costs, cores=2)
    sink = backend.start_node(backend.hosts['s1'], 'sink', [PY, '-m', 'tests.sim_sink',
                                                             'sink'])
    backend.start_node(backend.hosts['p1'], 'send', [
        PY, '-m', 'tests.sim_sink', 'send', backend.hosts['s1'].ip, str(nbytes)])
    backend.run_until(lambda: False, 1.0)
    backend.arrivals = [c.arrival(nbytes) for c in backend.stacks['s1'].conns]
    sink.exit()
    got = [json.loads(line) for line in sink.log_path.read_text().splitlines()]
    got = [r for r in got if r['event'] == 'got']
    assert [r['bytes'] for r in got] == [nbytes]            # one train, one callback
    return got[0]['t'], backend


def test_a_charged_stream_train_is_read_per_packet_at_the_slowest_links_rate(tmp_path):
    """42,000 bytes are 30 segments of 1,448; at 100 Mbit/s one 1,514-byte packet takes
    121.12 us, more than a 10 us read, so the idle sink reads 30 times and the delivery is
    one read later than free. With 300 us reads (worked by hand): reads start at 0, 300,
    ... 3,600 us after the first packet (13), each taking what arrived by then, and the
    last ends at 3,900 us, 387.5 us after the last packet arrived."""
    free, _ = _sink_run(tmp_path / 'free', {'tests.sim_sink/byte': 0.0})
    paid, backend = _sink_run(tmp_path / 'paid', {'tests.sim_sink/read': 1e-5})
    assert backend.arrivals == [(30, pytest.approx(1514 / 12.5e6))]
    assert backend.cpu.reads == 30
    assert paid - free == pytest.approx(1e-5, abs=2e-6)     # logs round t to 1 us
    slow_t, slow = _sink_run(tmp_path / 'slow', {'tests.sim_sink/read': 3e-4})
    assert slow.cpu.reads == 13
    assert slow_t - free == pytest.approx(3.9e-3 - 29 * 1514 / 12.5e6, abs=2e-6)
