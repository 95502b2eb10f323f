"""The simulator's processing cost (repronet.sim.cpu): a charge per callback and per byte
received, parsed from --sim-cost, paid by the real node programs in a simulated run."""

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
