"""The client core's short paths for a search (`ClientOps.direct`) against its general paths.

A client with one search out at a time (every client of the simulator's scale runs) sends
each SEARCH at once and reads each answer alone; `ClientOps` does both without the general
queue-and-pump and frame loop. Here random runs (searches, downloads and writes; replies
whole, cut in two or two at once; breaks, refusals and timeouts in any order) are driven
twice from one seed, short paths on and off, and everything the core says and keeps is
compared after every call."""

import random

import pytest

from nodes.dht.client_ops_core import ClientOps
from tests.dht_client_runs import random_run


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
    trace = []

    def check(core, acts):
        trace.append(([(type(a).__name__, tuple(getattr(a, f) for f in a.__slots__))
                       for a in acts], _state(core)))

    sent = random_run(random.Random(seed), check)
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
