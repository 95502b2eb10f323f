"""The simulator's background charges (repronet.sim.cpu): a cost per packet delivered to a
host and per node exit, which take a core without holding a node's thread (issue 13: the
emulation's delay daemons and a client's teardown run on the same 2 cores as the nodes)."""

import hashlib

import pytest

from repronet.sim import cpu
from repronet.sim.engine import Engine
from tests.test_dht_sim import Net

SERVER = 'nodes.dht.server'
CLIENT = 'nodes.dht.client'


class Proc:
    kind = SERVER


def test_exit_and_packet_charges_are_parsed_and_checked():
    assert cpu.parse_costs('%s/exit=0.015, packet=8e-5' % CLIENT) == {
        CLIENT + '/exit': 0.015, 'packet': 8e-5}
    for text, why in (('nodes.dht.clint/exit=0.01', 'is not a module'),
                      ('packets=1e-5', 'is not a module'),
                      ('packet=x', 'packet=SECONDS'),
                      ('%s/exit=2' % CLIENT, 'MODULE/exit=SECONDS')):
        with pytest.raises(ValueError, match=why):
            cpu.parse_costs(text)


def test_a_background_charge_delays_a_callback_only_when_every_core_is_taken():
    for cores, start in ((1, 0.3), (2, 0.0)):
        engine = Engine()
        model = cpu.CpuModel(engine, cores, {SERVER: 0.1})
        model.background(0.3)
        assert model.claim(Proc(), 0) == pytest.approx(start + 0.1)
        assert model.busy == pytest.approx(0.4)


def test_a_background_charge_does_not_hold_any_node_thread():
    engine = Engine()
    model = cpu.CpuModel(engine, 2, {SERVER: 0.1})
    model.background(0.5)
    assert model.thread == {}
    assert model.claim(Proc(), 0) == pytest.approx(0.1)     # the other core, at once


def _register_two(tmp, costs, cores=1):
    """Two clients registering p1's and p2's files at once; (net, their op records)."""
    net = Net(tmp, replicas=0, costs=costs, cores=cores)
    net.servers()
    clients = [net.client(p, 'register-' + p, 'register', source=p) for p in ('p1', 'p2')]
    for c in clients:
        c.go()
    for c in clients:
        assert c.wait(60) == 0, net.err(c)
    return net, [net.records(c, 'op') for c in clients]


def test_packets_are_counted_and_charged_once_each_without_delaying_free_callbacks(tmp_path):
    """With only a per-packet charge nothing a node does takes a core, so the records are
    those of the free run; the model's busy time is the packets delivered times the charge."""
    free, free_ops = _register_two(tmp_path / 'free', None)
    paid, paid_ops = _register_two(tmp_path / 'paid', {'packet': 1e-4})
    assert paid_ops == free_ops
    assert free.backend.net.delivered == paid.backend.net.delivered > 0
    assert paid.backend.cpu.busy == pytest.approx(1e-4 * paid.backend.net.delivered)
    assert paid.backend.cpu.record()['seconds_per_packet_delivered'] == 1e-4


def test_charged_packets_slow_charged_callbacks_on_a_busy_core(tmp_path):
    _, base = _register_two(tmp_path / 'base', {SERVER: 2e-4})
    _, paid = _register_two(tmp_path / 'paid', {SERVER: 2e-4, 'packet': 1e-4})
    slower = [b['latency'] - a['latency'] for x, y in zip(base, paid) for a, b in zip(x, y)]
    assert min(slower) >= 0 and max(slower) > 1e-4


def test_an_exit_charge_slows_the_client_still_running_not_the_one_that_exits(tmp_path):
    """On one core, the first client to end pays its exit there, and the other client's
    last reply (a charged callback) waits for it; the first client's records are unchanged
    (it exits after its last op)."""
    costs = {SERVER: 2e-4, CLIENT: 1e-4}
    base_net, base = _register_two(tmp_path / 'base', costs)
    net, paid = _register_two(tmp_path / 'paid', dict(costs, **{CLIENT + '/exit': 0.01}))
    assert net.backend.cpu.busy == pytest.approx(base_net.backend.cpu.busy + 0.02)
    ends = [ops[-1]['t'] for ops in base]
    first = ends.index(min(ends))
    assert paid[first] == base[first]
    assert paid[1 - first][-1]['t'] - base[1 - first][-1]['t'] > 0.005


def test_the_same_seed_gives_the_same_bytes_with_the_background_charges(tmp_path):
    costs = {SERVER: 2e-4, CLIENT + '/exit': 0.01, 'packet': 5e-5}
    digests = []
    for run in ('a', 'b'):
        net, _ = _register_two(tmp_path / run, costs)
        digests.append(sorted(hashlib.sha256(p.read_bytes()).hexdigest()
                              for p in (tmp_path / run / 'logs').iterdir()))
    assert digests[0] == digests[1]


def test_a_callback_waiting_for_its_thread_leaves_the_other_core_free():
    """A server's second callback waits for its first; it must not reserve the idle core
    meanwhile, so a client's callback runs there at once (it waited for the server's
    whole queue when each claim took the core idle first)."""
    engine = Engine()
    model = cpu.CpuModel(engine, 2, {SERVER: 1.0, CLIENT: 0.1})

    class Client:
        kind = CLIENT
    server = Proc()
    assert model.claim(server, 0) == pytest.approx(1.0)
    assert model.claim(server, 0) == pytest.approx(2.0)
    assert model.claim(Client(), 0) == pytest.approx(0.1)
