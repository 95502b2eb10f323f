"""The client core's short paths for a search (`ClientOps.direct`) against its general paths.

A client with one search out at a time (every client of the simulator's scale runs) sends
each SEARCH at once and reads each answer alone; `ClientOps` does both without the general
queue-and-pump and frame loop. Here random runs (searches, downloads and writes; replies
whole, cut in two or two at once; breaks, refusals and timeouts in any order) are driven
twice from one seed, short paths on and off, and everything the core says and keeps is
compared after every call."""

import random

import pytest

from nodes.dht import codec
from nodes.dht.client_core import ClientCore
from nodes.dht.client_ops_core import ClientOps
from nodes.dht.ring import Ring
from nodes.dht.server_core import ServerConnection, ServerCore

SERVERS = ['s%d' % i for i in range(1, 6)]
NAMES = ['f%02d' % i for i in range(30)] + ['\u00e9t\u00e9', '../up']


def _state(core):
    """What the core keeps, in a comparable form."""
    links = [(name, s.state, s.deadline, [(op.id, kind.__name__, fields)
                                           for op, kind, fields in s.queue],
              sorted((req, op.id) for req, op in s.ops.items()),
              list(s.channel.outstanding.items()), s.channel._next_req,
              s.channel.decoder.pending)
             for name, s in sorted(core.servers.items())]
    ops = sorted((op.id, op.kind, op.name, op.server, sorted(getattr(op, 'waiting', ()) or ()),
                  list(getattr(op, 'candidates', ()) or ()))
                 for op in core.active.values())
    peers = sorted((conn, p['state'], p['addr'], p['op'] and p['op'].id, p['deadline'])
                   for conn, p in core.peers.items())
    return (links, ops, len(core.todo), sorted(s.conn for s in core._timed),
            repr(core.records), repr(core.results), core.messages_sent,
            sorted(core.routing.down), peers, core.get_timer())


def _run(seed, direct, monkeypatch):
    """One random run; return its trace (every action and the core's state after every
    call) and how many searches it sent."""
    monkeypatch.setattr(ClientOps, 'direct', direct)
    rng = random.Random(seed)
    addrs = {s: ('10.0.0.%d' % i, 7000) for i, s in enumerate(SERVERS, 1)}
    ring = Ring(SERVERS)
    stores = {s: ServerCore(s) for s in SERVERS}
    for name in NAMES[::2]:
        for s in ring.replicas(name, 1):
            stores[s].store.add(name, '10.0.1.1:8000')
    core = ClientOps(ClientCore(ring, 1), addrs, rng.choice([1, 1, 2, 4]), 2.0,
                     rng.choice([1, 1, 3, 8]))
    now, trace, sent = 0.0, [], 0
    connecting, ends, replies = [], {}, []

    def check():
        nonlocal sent
        acts = core.actions()
        trace.append(([(type(a).__name__, tuple(getattr(a, f) for f in a.__slots__))
                       for a in acts], _state(core)))
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
    check()
    for _ in range(300):
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
                    check()
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
        check()
    return trace, sent


@pytest.mark.parametrize('first', range(0, 300, 50))
def test_a_search_takes_the_short_paths_and_does_what_the_general_paths_do(first,
                                                                           monkeypatch):
    searches = 0
    for seed in range(first, first + 50):
        short, sent = _run(seed, True, monkeypatch)
        general, _ = _run(seed, False, monkeypatch)
        assert short == general, seed
        searches += sent
    assert searches > 300
