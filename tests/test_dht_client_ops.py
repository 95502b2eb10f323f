"""The real client core (`ClientOps`) against real index-server and peer cores, in memory
(tests/memnet.py): failover, write-to-all, window, timeouts and resume, on a virtual clock."""

import hashlib

from nodes.dht import codec
from tests.memnet import MemNet, register_all

NAMES = ['f%04d.txt' % i for i in range(200)]
PEER1, PEER2 = '10.0.1.1:8000', '10.0.1.2:8000'


def searches(net, names):
    return net.run([('search', n) for n in names])


def test_register_then_search_through_cores():
    net = MemNet(n=4, replicas=1)
    recs = register_all(net, NAMES, PEER1)
    assert all(r['ok'] for r in recs) and len(recs) == 4      # one message per server
    assert sum(r['files'] for r in recs) == 2 * len(NAMES)    # each name on 2 servers
    recs = searches(net, NAMES[:20])
    assert all(r['ok'] and r['holders'] == 1 for r in recs)
    assert [r['server'] for r in recs] == [net.ring.owner(n) for n in NAMES[:20]]
    assert all(r['latency'] == 0 and r['t'] == 0 for r in recs)     # the core's clock


def test_search_fails_over_when_owner_is_dead_and_later_skips_it():
    net = MemNet(n=4, replicas=1)
    register_all(net, NAMES, PEER1)
    victim = net.ring.owner(NAMES[0])
    net.core.handle_timer(0)
    # The owner's connection breaks (it died) and reconnecting is refused.
    net.dead.add(net.addr(victim))
    net.core.connection_lost(('index', victim), 'reset', net.now)
    (rec,) = searches(net, NAMES[:1])
    assert rec['ok'] and rec['server'] == net.ring.replicas(NAMES[0], 1)[1]
    assert victim in net.routing.down
    theirs = [n for n in NAMES if net.ring.owner(n) == victim][1:10]
    sent = net.sent.get(net.addr(victim), 0)
    recs = searches(net, theirs)
    assert all(r['ok'] and r['server'] != victim for r in recs)
    assert net.sent.get(net.addr(victim), 0) == sent          # not asked again


def test_owner_dying_with_requests_in_flight_fails_them_all_over():
    net = MemNet(n=2, replicas=1, window=4, limit=8)
    register_all(net, NAMES, PEER1)
    victim = 's1'
    net.dies.add(net.addr(victim))
    mine = [n for n in NAMES if net.ring.owner(n) == victim][:8]
    recs = net.run([('search', n) for n in mine])
    assert len(recs) == 8 and all(r['ok'] and r['server'] == 's2' for r in recs)
    assert victim in net.routing.down and net.now == 0.0      # no timeout was needed


def test_hung_owner_costs_one_timeout_then_the_replica_answers():
    net = MemNet(n=4, replicas=1, timeout=2.0)
    register_all(net, NAMES, PEER1)
    victim = net.ring.owner(NAMES[0])
    net.hung.add(net.addr(victim))
    (rec,) = searches(net, NAMES[:1])
    assert rec['ok'] and rec['server'] != victim
    assert rec['latency'] == 2.0 and net.now == 2.0           # exactly one timeout


def test_an_idle_connection_closed_by_the_server_is_reopened_not_marked_down():
    net = MemNet(n=2)
    register_all(net, NAMES[:10], PEER1)
    owner = net.ring.owner(NAMES[0])
    net.core.connection_lost(('index', owner), 'idle close', net.now)
    assert owner not in net.routing.down
    (rec,) = searches(net, NAMES[:1])
    assert rec['ok'] and rec['server'] == owner


def test_search_without_replicas_fails_clearly_when_owner_is_down():
    net = MemNet(n=4, replicas=0)
    net.dead.add(net.addr(net.ring.owner('lonely')))
    (rec,) = searches(net, ['lonely'])
    assert not rec['ok'] and rec['server'] is None
    assert 'no index server answered' in rec['error'] and 'refused' in rec['error']


def test_write_is_acknowledged_only_when_every_replica_stored_it():
    net = MemNet(n=4, replicas=1, timeout=1.5)
    name = NAMES[0]
    owner, replica = net.ring.replicas(name, 1)
    net.hung.add(net.addr(replica))
    (rec,) = register_all(net, [name], PEER1, batch=False)
    assert not rec['ok'] and replica in rec['error'] and 'no reply' in rec['error']
    assert rec['latency'] == 1.5
    assert net.servers[net.addr(owner)].store.holders(name) == (PEER1,)
    net.hung.clear()
    (rec,) = register_all(net, [NAMES[1]], PEER1, batch=False)
    assert rec['ok'] and 'error' not in rec


def test_window_bounds_requests_in_flight_per_connection():
    for window in (1, 3):
        net = MemNet(n=1, window=window, limit=10)
        net.hung.add(net.addr('s1'))
        net.core.submit([('search', n) for n in NAMES[:10]], 0.0)
        while net.core.actions():
            pass
        net.core.connected(('index', 's1'), 0.0)
        sends = [a for a in net.core.actions() if type(a).__name__ == 'Send']
        assert len(sends) == window


def _files():
    big = hashlib.sha256(b'x').digest() * 40000                # 1.28 MB
    return {'big.bin': big, 'empty.bin': b''}


def _download_net(**kw):
    files = _files()
    net = MemNet(n=3, peers={PEER1: files, PEER2: files}, **kw)
    register_all(net, list(files), PEER1)
    register_all(net, list(files), PEER2)
    return net, files


def test_download_resumes_from_the_next_holder_when_one_vanishes():
    net, files = _download_net()
    net.cut[PEER1] = 300000
    (rec,) = net.run([('download', 'big.bin')])
    assert rec['ok'] and rec['resumes'] == 1 and rec['holder'] == PEER2
    assert bytes(net.files['big.bin']) == files['big.bin']
    assert rec['bytes'] == len(files['big.bin'])


def test_download_from_a_silent_holder_times_out_and_resumes():
    net, files = _download_net(timeout=3.0)
    net.hung.add(PEER1)
    (rec,) = net.run([('download', 'big.bin'), ('download', 'empty.bin')])[:1]
    assert rec['ok'] and rec['resumes'] == 1 and rec['latency'] == 3.0
    assert bytes(net.files['big.bin']) == files['big.bin']


def test_download_fails_clearly_when_every_holder_vanishes_and_refuses_bad_names():
    net, files = _download_net()
    net.cut[PEER1] = net.cut[PEER2] = 100000
    (rec,) = net.run([('download', 'big.bin')])
    assert not rec['ok'] and 'failed after' in rec['error'] and 'mid-transfer' in rec['error']
    (rec,) = net.run([('download', '../etc/passwd')])
    assert not rec['ok'] and rec['server'] is None


def test_disk_error_reported_by_the_driver_fails_without_resuming():
    net, files = _download_net()
    net.hung.add(PEER1)          # the transfer is under way when the driver's write fails
    core = net.core
    core.submit([('download', 'big.bin')], 0.0)
    for _ in range(20):
        acts = core.actions()
        for a in acts:
            getattr(net, '_' + type(a).__name__.lower())(a)
        if any(type(a).__name__ == 'Send' and a.conn[0] == 'peer' for a in acts):
            break
    download = max(core.results) + 1        # op ids count submissions: 1, 2, ...
    core.abort(download, 'cannot write: disk full', net.now)
    acts = core.actions()
    (rec,) = [a.record for a in acts if type(a).__name__ == 'OpDone']
    assert not rec['ok'] and rec['error'] == 'cannot write: disk full' and core.finished()
    assert [a.conn[1] for a in acts if type(a).__name__ == 'Close'] == [PEER1]
    assert not any(type(a).__name__ == 'Connect' for a in acts)        # no resume


def test_only_a_write_keeps_a_waiting_set():
    """A search or download asks one server at a time (op.server): it builds no set of
    servers to wait for, as a write does (stop 41: one set made and dropped per search)."""
    net = MemNet(n=4, replicas=1, limit=4)
    register_all(net, NAMES, PEER1)
    net.core.submit([('search', NAMES[0]), ('search', NAMES[1])], net.now)
    ops = list(net.core.active.values())
    assert ops and all(op.kind == 'search' for op in ops)
    assert not any(hasattr(op, 'waiting') for op in ops)
    net.core.submit([('register', codec.Register, (NAMES[2],), ('s1', 's2'), PEER2, False)],
                    net.now)
    (write,) = [op for op in net.core.active.values() if op.kind == 'register']
    assert write.waiting == {'s1', 's2'}
    recs = net.run([])
    assert len(recs) == 3 and all(r['ok'] for r in recs)
