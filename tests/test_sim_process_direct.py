"""SimProcess.direct (stop 41): whether a node's callbacks run at once, as they are, which
_call and a connection's data_received read rather than asking three things. It must
follow the CPU model, pause, resume and the node's end."""

import random

from tests.test_dht_sim import Net


def _expected(proc):
    return proc.cpu is None and proc.returncode is None and not proc.paused


def test_direct_follows_pause_resume_and_the_end_with_and_without_a_cpu_model(tmp_path):
    for costs in (None, {'nodes.dht.server': 1e-4}):
        net = Net(tmp_path / ('cpu' if costs else 'free'), replicas=0, costs=costs)
        procs = list(net.servers().values())
        rng = random.Random(41)
        assert all(p.direct == (costs is None) for p in procs)
        for _ in range(200):
            proc = rng.choice(procs)
            getattr(proc, rng.choice(['pause', 'resume', 'pause', 'resume', 'kill']))()
            if rng.random() < 0.2:
                net.backend.run_until(lambda: False, net.backend.engine.now + 0.01)
            assert [p.direct for p in procs] == [_expected(p) for p in procs]


def test_a_paused_server_without_a_cpu_model_answers_only_after_it_resumes(tmp_path):
    net = Net(tmp_path, replicas=0)
    servers = net.servers()
    for proc in servers.values():
        proc.pause()
    client = net.client('p1', 'register-p1', 'register', barrier=False)
    net.backend.run_until(lambda: False, 0.5)
    assert client.returncode is None            # every request held by its paused server
    assert any(p.held for p in servers.values())     # held, not run
    for proc in servers.values():
        proc.resume()
    assert client.wait(60) == 0, net.err(client)
