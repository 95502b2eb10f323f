"""A stream's train (``streams._Train``, a tuple since stop 41) calls its connection back
with its own fields: the peer takes what arrived, a lost train is resent, a partial one
repaired, and the network reads its packets."""

from repronet.sim.streams import _Train


class _Recorder:
    """A connection stand-in that records what the train calls on it."""

    def __init__(self):
        self.calls = []
        self.peer = self

    def _arrive(self, *args):
        self.calls.append(('arrive',) + args)

    def _retransmit_later(self, *args):
        self.calls.append(('later',) + args)

    def _repair(self, *args):
        self.calls.append(('repair',) + args)


def test_a_train_hands_each_callback_its_own_fields():
    for seq, data, losses, sent_at, packets, missing in [(0, b'x', 0, 0.0, 1, 0),
                                                       (5, b'abc' * 900, 2, 1.25, 3, 2),
                                                       (9, b'q' * 70000, 7, 3.5, 49, 45)]:
        conn = _Recorder()
        train = _Train((conn, seq, data, losses, sent_at, packets))
        assert train.packets == packets
        train.arrived(9.0)
        train.lost(9.5)
        train.partial(10.0, missing)
        assert conn.calls == [('arrive', conn, seq, data),
                              ('later', seq, data, losses, sent_at),
                              ('repair', seq, data, losses, sent_at, 10.0, packets - missing,
                               missing)]


def test_an_arrival_makes_no_closure_cell():
    """Conn._arrive runs for every train; a lambda over its sender would make the sender a
    closure cell, one made on every call under CPython 3.11 (stop 41 moved it to _tell_lost, which abort uses too)."""
    from repronet.sim.streams import Conn
    assert Conn._arrive.__code__.co_cellvars == ()
