"""The simulator's charges for a node's recent past (repronet.sim.cpu, issue 13): a
callback into a node whose thread sat idle longer than cold_after costs KIND/cold more (a
node's first callback is cold), and a connection's first bytes cost KIND/first more."""

import pytest

from repronet.sim import cpu
from repronet.sim.engine import Engine
from tests.test_dht_sim import Net

SERVER = 'nodes.dht.server'


class Proc:
    kind = SERVER


def _claims(costs, times, nbytes=0):
    """The end of each of one server's callbacks, claimed at the given virtual times."""
    engine = Engine()
    model = cpu.CpuModel(engine, 2, costs)
    proc, ends = Proc(), []
    for t in times:
        engine.at(t, lambda: ends.append(model.claim(proc, nbytes)))
    engine.run()
    return ends, model


def test_cold_and_first_charges_and_the_threshold_are_parsed_and_checked():
    assert cpu.parse_costs('%s/cold=1e-4, cold_after=0.002, %s/first=3e-4'
                           % (SERVER, SERVER)) == {
        SERVER + '/cold': 1e-4, 'cold_after': 0.002, SERVER + '/first': 3e-4}
    for text, why in (('nodes.dht.sever/cold=1e-4', 'is not a module'),
                      ('nodes.dht.sever/first=1e-4', 'is not a module'),
                      ('%s/first=x' % SERVER, 'MODULE/first=SECONDS'),
                      ('%s/cold=2' % SERVER, 'MODULE/cold=SECONDS'),
                      ('cold_after=-1', 'cold_after=SECONDS')):
        with pytest.raises(ValueError, match=why):
            cpu.parse_costs(text)


def test_the_first_callback_and_those_after_an_idle_spell_are_cold():
    """0.1 ms per callback, 1 ms more when cold (idle over 1 ms since the last one ended):
    the first is cold, the next two follow within 1 ms, the fourth comes 2 ms later."""
    ends, model = _claims({SERVER: 1e-4, SERVER + '/cold': 1e-3}, (0.0, 0.0015, 0.002, 0.0041))
    assert ends == pytest.approx([0.0011, 0.0016, 0.0021, 0.0052])
    assert model.busy == pytest.approx(4e-4 + 2e-3)


def test_a_callback_waiting_for_its_busy_thread_is_warm():
    ends, _ = _claims({SERVER: 1e-4, SERVER + '/cold': 1e-3}, (0.0, 0.0005))
    assert ends == pytest.approx([0.0011, 0.0012])


def test_the_threshold_is_cold_after():
    costs = {SERVER: 1e-4, SERVER + '/cold': 1e-3}
    times = (0.0, 0.003)                    # 1.9 ms idle in between
    assert _claims(costs, times)[0][1] == pytest.approx(0.0041)
    assert _claims(dict(costs, cold_after=0.002), times)[0][1] == pytest.approx(0.0031)


def test_a_free_warm_callback_keeps_the_node_warm():
    """With no charge per callback, a warm callback is free, yet it counts as the node
    running: callbacks every 0.8 ms stay warm after the first."""
    ends, model = _claims({SERVER + '/cold': 1e-4}, (0.0, 0.0009, 0.0017, 0.0025))
    assert ends == [pytest.approx(1e-4), None, None, None]
    assert model.busy == pytest.approx(1e-4)


def test_without_a_cold_charge_nothing_changes():
    ends, model = _claims({SERVER: 1e-4}, (0.0, 0.005))
    assert ends == pytest.approx([1e-4, 0.0051])
    assert 'seconds_per_cold_callback' not in model.record()


def _ops(tmp, costs, op='register', names=None):
    """One client connects to four servers (after p1's files were registered, for a search),
    waits at its barrier 0.1 s as dht8's clients wait for the release, then does op with
    window 1; (net, its op records)."""
    net = Net(tmp, replicas=0, costs=costs)
    net.servers()
    if op == 'search':
        net.register()
    client = net.client('p2', op + '-p2', op, names=names, source='p1')
    net.backend.run_until(lambda: False, net.backend.engine.now + 0.1)
    client.go()
    assert client.wait(60) == 0, net.err(client)
    return net, net.records(client, 'op')


def test_a_register_to_a_server_that_sat_idle_pays_the_cold_charge(tmp_path):
    """p1's files registered one message per server, each after its server sat idle: each
    round trip grows by exactly the cold charge; the manifest's record says so."""
    _, warm = _ops(tmp_path / 'warm', {SERVER: 1e-4})
    net, cold = _ops(tmp_path / 'cold', {SERVER: 1e-4, SERVER + '/cold': 1e-3})
    assert len(warm) == len(cold) > 1
    for a, b in zip(warm, cold):
        assert b['latency'] - a['latency'] == pytest.approx(1e-3, abs=2e-7)
    assert net.backend.cpu.record()['seconds_per_cold_callback'] == {SERVER: 1e-3}
    assert net.backend.cpu.record()['cold_after_seconds'] == cpu.COLD_AFTER_S


def test_only_a_connections_first_request_pays_the_first_charge(tmp_path):
    """Searches of p1's names, one at a time over four servers: the first search on each
    connection takes exactly the first charge longer, every later one the same time."""
    net = Net(tmp_path / 'names', replicas=0)
    names = net.names('p1')[:40]
    _, free = _ops(tmp_path / 'free', {SERVER: 1e-4}, 'search', names)
    net, paid = _ops(tmp_path / 'paid', {SERVER: 1e-4, SERVER + '/first': 1e-3}, 'search',
                     names)
    assert [r['name'] for r in paid] == [r['name'] for r in free] and len(free) == 40
    seen, firsts = set(), 0
    for a, b in zip(free, paid):
        extra = 1e-3 if a['server'] not in seen else 0.0
        firsts += a['server'] not in seen
        seen.add(a['server'])
        assert b['latency'] - a['latency'] == pytest.approx(extra, abs=2e-7), a
    assert firsts == 4
    assert net.backend.cpu.record()['seconds_per_first_request'] == {SERVER: 1e-3}
