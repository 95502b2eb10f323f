"""Random runs of the DHT client core (`ClientOps`) against in-memory index servers, for the
tests that check something after every call the driver makes (`test_dht_client_timer.py`,
`test_dht_client_paths.py`).

A run submits searches, downloads and writes over five servers (half the names held, one
replica), then connects, refuses, answers (whole, cut in two, two answers at once, a byte
damaged), breaks and times out in a random order, with the clock moving on; holder peers
never answer (their downloads fail or time out)."""

from nodes.dht import codec
from nodes.dht.client_core import ClientCore
from nodes.dht.client_ops_core import ClientOps
from nodes.dht.ring import Ring
from nodes.dht.server_core import ServerConnection, ServerCore

SERVERS = ['s%d' % i for i in range(1, 6)]
NAMES = ['f%02d' % i for i in range(30)] + ['\u00e9t\u00e9', '../up']


def random_run(rng, check, steps=300):
    """Drive one core at random; check(core, actions) after every call (actions: what the
    core asked for then, carried out after check returns). Return how many SEARCH frames
    reached a server."""
    addrs = {s: ('10.0.0.%d' % i, 7000) for i, s in enumerate(SERVERS, 1)}
    ring = Ring(SERVERS)
    stores = {s: ServerCore(s) for s in SERVERS}
    for name in NAMES[::2]:
        for s in ring.replicas(name, 1):
            stores[s].store.add(name, '10.0.1.1:8000')
    core = ClientOps(ClientCore(ring, 1), addrs, rng.choice([1, 1, 2, 4]), 2.0,
                     rng.choice([1, 1, 3, 8]))
    now, sent = 0.0, 0
    connecting, ends, replies = [], {}, []

    def after():
        nonlocal sent
        acts = core.actions()
        check(core, acts)
        for act in acts:
            kind = type(act).__name__
            if kind == 'Connect':
                connecting.append(act.conn)
            elif kind == 'Send' and act.conn in ends:
                sent += act.conn[0] == 'index' and act.data[5] == codec.Search.TYPE
                out, _ = ends[act.conn].receive(act.data, now)
                if out:
                    replies.append((act.conn, out))
            elif kind == 'Close':
                ends.pop(act.conn, None)

    ops = [(rng.choice(['search', 'search', 'download']), rng.choice(NAMES))
           for _ in range(rng.randrange(1, 30))]
    ops += [('register', codec.Register, (n,), tuple(ring.replicas(n, 1)), '10.0.1.2:8000',
             False) for n in rng.sample(NAMES, rng.randrange(3))]
    rng.shuffle(ops)
    core.submit(ops, now)
    after()
    for _ in range(steps):
        step = rng.random()
        now += rng.choice([0.0, 0.0, 0.01, 0.5])
        if connecting and step < 0.3:
            conn = connecting.pop(rng.randrange(len(connecting)))
            if conn[0] == 'index' and rng.random() < 0.9:
                ends[conn] = ServerConnection(stores[conn[1]])
                core.connected(conn, now)
            else:
                core.connection_lost(conn, 'refused', now)
        elif replies and step < 0.8:
            conn, data = replies.pop(rng.randrange(len(replies)))
            how = rng.random()
            if how < 0.1 and replies and replies[0][0] == conn:
                data += replies.pop(0)[1]                       # two answers at once
            elif how < 0.2:
                data = bytearray(data)
                data[rng.randrange(len(data))] = rng.randrange(256)     # a byte changed
            cut = rng.randrange(len(data) + 1) if how > 0.8 else len(data)
            for piece in (data[:cut], data[cut:]):
                if piece and conn in ends:
                    core.receive(conn, bytes(piece), now)
                    after()
        elif ends and step < 0.84:
            conn = rng.choice(sorted(ends))
            del ends[conn]
            core.connection_lost(conn, 'reset', now)
        elif step < 0.92:
            when = core.get_timer()
            if when is None:
                if core.finished():
                    break
                continue
            now = max(now, when)
            core.handle_timer(now)
        else:
            core.submit([('search', rng.choice(NAMES))], now)
        after()
    return sent
