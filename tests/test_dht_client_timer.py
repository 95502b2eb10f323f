"""The client core's timer (`ClientOps.get_timer`) asks only the index-server links it keeps
in `_timed`; here it is compared with a scan of every link and peer after every call the
driver makes, in random runs (`tests/dht_client_runs.py`) where connects, replies, breaks
and timeouts come in any order."""

import random

from tests.dht_client_runs import random_run


def _scan(core):
    """The earliest deadline of every server link (connect and reply) and peer, or None."""
    times = [t for s in core.servers.values()
             for t in (s.deadline, s.channel.next_deadline()) if t is not None]
    times += [p['deadline'] for p in core.peers.values() if p['deadline'] is not None]
    return min(times, default=None)


def test_the_timer_of_the_links_kept_is_the_timer_of_every_link():
    rng = random.Random(39)
    asked = 0

    def check(core, acts):
        nonlocal asked
        assert core.get_timer() == _scan(core)
        asked += core.get_timer() is not None

    for _ in range(400):
        random_run(rng, check, steps=200)
    assert asked > 10000
