"""The client core's timer (`ClientOps.get_timer`) asks only the index-server links it keeps
in `_timed`; here it is compared with a scan of every link and peer after every call the
driver makes, in random runs where connects, replies, breaks and timeouts come in any order."""

import random

from nodes.dht import codec
from nodes.dht.client_core import ClientCore
from nodes.dht.client_ops_core import ClientOps
from nodes.dht.ring import Ring
from nodes.dht.server_core import ServerConnection, ServerCore

SERVERS = ['s%d' % i for i in range(1, 6)]
NAMES = ['f%02d' % i for i in range(30)]


def _scan(core):
    """The earliest deadline of every server link (connect and reply) and peer, or None."""
    times = [t for s in core.servers.values()
             for t in (s.deadline, s.channel.next_deadline()) if t is not None]
    times += [p['deadline'] for p in core.peers.values() if p['deadline'] is not None]
    return min(times, default=None)


def _run(rng):
    """One random run; return how many times the timer was asked with a deadline due."""
    addrs = {s: ('10.0.0.%d' % i, 7000) for i, s in enumerate(SERVERS, 1)}
    ring = Ring(SERVERS)
    stores = {s: ServerCore(s) for s in SERVERS}
    for name in NAMES[::2]:
        for s in ring.replicas(name, 1):
            stores[s].store.add(name, '10.0.1.1:8000')
    core = ClientOps(ClientCore(ring, 1), addrs, rng.choice([1, 2, 4]), 2.0,
                     rng.choice([1, 3, 8]))
    now, asked = 0.0, 0
    connecting, ends, replies = [], {}, []

    def check():
        nonlocal asked
        assert core.get_timer() == _scan(core)
        asked += core.get_timer() is not None
        for act in core.actions():
            kind = type(act).__name__
            if kind == 'Connect':
                connecting.append(act.conn)
            elif kind == 'Send' and act.conn in ends:
                out, _ = ends[act.conn].receive(act.data, now)
                if out:
                    replies.append((act.conn, out))
            elif kind == 'Close':
                ends.pop(act.conn, None)

    ops = [('search', rng.choice(NAMES)) for _ in range(rng.randrange(1, 20))]
    ops += [('register', codec.Register, (n,), tuple(ring.replicas(n, 1)), '10.0.1.2:8000',
             False) for n in rng.sample(NAMES, rng.randrange(3))]
    rng.shuffle(ops)
    core.submit(ops, now)
    check()
    for _ in range(200):
        step = rng.random()
        if connecting and step < 0.3:
            conn = connecting.pop(rng.randrange(len(connecting)))
            if rng.random() < 0.85:
                ends[conn] = ServerConnection(stores[conn[1]])
                core.connected(conn, now)
            else:
                core.connection_lost(conn, 'refused', now)
        elif replies and step < 0.75:
            conn, data = replies.pop(rng.randrange(len(replies)))
            if conn in ends:
                cut = rng.randrange(len(data) + 1)
                for piece in (data[:cut], data[cut:]):
                    if piece and conn in ends:
                        core.receive(conn, piece, now)
                        check()
        elif ends and step < 0.8:
            conn = rng.choice(sorted(ends))
            del ends[conn]
            core.connection_lost(conn, 'reset', now)
        elif step < 0.9:
            when = core.get_timer()
            if when is None:
                if core.finished():
                    break
                continue
            now = max(now, when)
            core.handle_timer(now)
        else:
            core.submit([('search', rng.choice(NAMES))], now)
        check()
    return asked


def test_the_timer_of_the_links_kept_is_the_timer_of_every_link():
    rng = random.Random(39)
    asked = sum(_run(rng) for _ in range(400))
    assert asked > 10000
