"""The simulator's processing cost (repronet.sim.cpu): a charge per callback, per byte
received and per byte sent, parsed from --sim-cost, paid by the real node programs in a
simulated run."""

import pytest

from nodes.dht import codec
from repronet.sim import cpu
from tests.test_dht_sim import Net

PER_BYTE = 1e-6


def test_per_byte_costs_are_parsed_and_checked_like_per_callback_ones():
    assert cpu.parse_costs('nodes.dht.server=1e-4, nodes.dht.server/byte=2e-7') == {
        'nodes.dht.server': 1e-4, 'nodes.dht.server/byte': 2e-7}
    assert cpu.parse_costs('nodes.dht.client/sent=1e-7,nodes.dht.peer/wait=2e-4') == {
        'nodes.dht.client/sent': 1e-7, 'nodes.dht.peer/wait': 2e-4}
    for text, why in (('nodes.dht.clint/sent=1e-7', 'is not a module'),
                      ('nodes.dht.client/sent=2', 'MODULE/sent=SECONDS'),('nodes.dht.server/bytes=1e-7', 'is not a module'),
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


def _charged_per_byte(tmp_path, costs):
    """Register uncharged and charged; check each REGISTER's round trip grew by exactly
    PER_BYTE times its frame's size (window 1: nothing else waits); return (the charged
    run, its REGISTER frames' bytes)."""
    net, free = _register(tmp_path / 'free', None)
    charged, paid = _register(tmp_path / 'paid', costs)
    addr = '%s:8000' % net.ip['p1']
    assert [r['name'] for r in paid] == [r['name'] for r in free] and len(free) > 1
    sizes = [codec.frame_size(codec.Register(0, addr, (a['name'],) * a['files']))
             for a in free]
    for a, b, size in zip(free, paid, sizes):
        assert b['latency'] - a['latency'] == pytest.approx(PER_BYTE * size, rel=1e-3,
                                                            abs=2e-7)
    assert net.backend.cpu is None      # the free run has no model at all
    return charged, sum(sizes)


def test_an_index_server_is_charged_per_byte_of_each_register_it_receives(tmp_path):
    """With only a per-byte charge on the server, each REGISTER's round trip grows by
    exactly that charge times the frame's size."""
    _charged_per_byte(tmp_path, {'nodes.dht.server/byte': PER_BYTE})


def test_a_client_is_charged_per_byte_it_sends_on_its_own_thread(tmp_path):
    """With only a per-byte-sent charge on the client, each REGISTER's round trip grows by
    that charge times the frame's size, as a per-byte charge on the server makes it grow,
    but the time is the client's: no index server's thread is charged."""
    sent, size = _charged_per_byte(tmp_path, {'nodes.dht.client/sent': PER_BYTE})
    model = sent.backend.cpu
    assert [p.kind for p in model.thread] == ['nodes.dht.client']
    assert model.busy == pytest.approx(PER_BYTE * size)
    assert model.record()['seconds_per_byte_sent'] == {'nodes.dht.client': PER_BYTE}


def test_a_wait_per_delivery_delays_each_request_and_busies_no_core(tmp_path):
    """With only a wait on the server, each REGISTER's round trip grows by exactly that
    wait (one delivery to the server per request) and no core is ever busy."""
    _, free = _register(tmp_path / 'free', None)
    net, paid = _register(tmp_path / 'paid', {'nodes.dht.server/wait': 3e-4})
    assert len(paid) == len(free) > 1
    for a, b in zip(free, paid):
        assert b['latency'] - a['latency'] == pytest.approx(3e-4, abs=2e-7)
    assert net.backend.cpu.busy == 0 and not net.backend.cpu.thread
    assert net.backend.cpu.record()['seconds_waited_per_delivery'] == {
        'nodes.dht.server': 3e-4}


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
