"""The reliable-UDP cores in memory (tests/rudp_memnet.py): the file arrives byte for byte
under loss, duplication, reordering and forged datagrams, in the seed's one-block mode and
windowed, and a vanished peer ends the transfer with one sentence."""

import hashlib
import os

import pytest
from hypothesis import example, given, settings, strategies as st

from nodes.rudp import wire
from nodes.rudp.receiver_core import Receiver
from nodes.rudp.sender_core import PROBES_PER_TIMEOUT
from tests.rudp_memnet import Link, run

DATA = bytes(os.urandom(300_000))


@pytest.mark.parametrize('block', [1, 2, 4, 8, 16, 32, 64])
def test_every_block_size_delivers_the_file(block):
    got, sender, receiver, _ = run(DATA, block=block)
    assert got == DATA and sender.state == 'done' and receiver.state == 'done'
    blocks = -(-len(DATA) // (block * 1472))
    assert sender.stats['blocks'] == blocks and sender.stats['retransmitted'] == 0


def test_one_block_at_a_time_pays_a_round_trip_per_block():
    """The seed's shape: with a 10 ms one-way link, B=1 takes one RTT per datagram."""
    slow = dict(forward=Link(delay=0.01), backward=Link(delay=0.01, seed=2))
    _, one, _, _ = run(DATA, block=1, **slow)
    _, many, _, _ = run(DATA, block=32, **slow)
    datagrams = -(-len(DATA) // 1472)
    assert one.summary()['seconds'] >= datagrams * 0.02
    assert many.summary()['seconds'] < one.summary()['seconds'] / 10


@pytest.mark.parametrize('window, rate', [(1, None), (8, None), (8, 50.0)])
def test_loss_duplication_and_reordering(window, rate):
    fwd = Link(delay=0.002, jitter=0.004, loss=0.1, duplicate=0.1, seed=5)
    back = Link(delay=0.002, jitter=0.004, loss=0.1, duplicate=0.1, seed=6)
    got, sender, receiver, _ = run(DATA, fwd, back, block=16, window=window, rate_mbps=rate)
    assert got == DATA and sender.state == 'done' and receiver.ok is True
    assert sender.stats['retransmitted'] > 0 and receiver.stats['duplicates'] > 0


def test_a_whole_lost_block_a_lost_ack_and_a_lost_last_datagram():
    # DATA datagrams 1..16 (all of block 0's first round) lost, the first ACK lost, and
    # the very last DATA datagram of the first pass lost
    last = -(-len(DATA) // 1472)
    fwd = Link(drop=lambda kind, n: kind == wire.DATA and (n <= 16 or n == last + 16))
    back = Link(drop=lambda kind, n: kind == wire.ACK and n == 1, seed=2)
    got, sender, receiver, _ = run(DATA, fwd, back, block=16)
    assert got == DATA and sender.state == 'done'
    assert sender.stats['polls'] >= 1 and sender.stats['retransmitted'] >= 17


def test_lost_meta_ok_and_lost_done_are_repaired():
    back = Link(drop=lambda kind, n: kind in (wire.META_OK, wire.DONE) and n == 1, seed=2)
    got, sender, receiver, _ = run(DATA, Link(), back, block=32)
    assert got == DATA and sender.state == 'done' and sender.stats['meta_sent'] == 2


def test_forged_truncated_and_stray_datagrams_are_dropped_and_counted():
    session = 0x1234      # META reaches the receiver at 1 ms, data from 3 ms
    forged = [
        (0.0015, wire.data(session, 10 ** 6, 0, b'x' * 1472)),        # block out of range
        (0.0016, wire.data(session, 0, 0, b'short')),                 # wrong length
        (0.0017, wire.data(0x9999, 0, 0, b'x' * 1472)),               # another session
        (0.0018, b'RU\x01'),                                          # truncated
        (0.0019, b'\x00' * 40),                                       # not ours at all
        (0.0020, wire.ack(session, 0, 16, ()) + b'junk'),             # malformed ACK
    ]
    got, sender, receiver, _ = run(DATA, block=16, inject=forged)
    assert got == DATA and sender.state == 'done'
    dropped = {k: v for k, v in receiver.stats.items() if k.startswith('dropped_')}
    assert dropped == {'dropped_out_of_range': 1, 'dropped_wrong_length': 1,
                       'dropped_stray': 1, 'dropped_short': 1, 'dropped_foreign': 1,
                       'dropped_malformed': 1}


def test_a_receiver_that_vanishes_ends_the_sender_with_one_sentence():
    _, sender, receiver, _ = run(DATA, backward=Link(drop=lambda kind, n: kind == wire.ACK
                                                     and n > 3), timeout=2.0)
    assert sender.state == 'failed'
    assert sender.error == 'no answer from the receiver for 2 s'
    assert receiver.state == 'failed' and receiver.error.startswith(
        'no datagram from the sender for 2 s after')


def test_a_path_that_loses_only_data_ends_both_with_one_sentence():
    """The receiver answers every poll, and every answer says the same: no livelock."""
    _, sender, receiver, _ = run(DATA, Link(drop=lambda kind, n: kind == wire.DATA and
                                            n > 40), timeout=2.0)
    assert sender.state == 'failed'
    assert sender.error == ('no progress for 2 s: the receiver answers, but nothing '
                            'resent reaches it')
    assert receiver.state == 'failed' and receiver.error.startswith(
        'no datagram from the sender for 2 s after')


def test_an_empty_file_and_a_one_byte_file():
    for data in (b'', b'z'):
        got, sender, receiver, _ = run(data)
        assert got == data and sender.state == 'done' and receiver.state == 'done'


def test_a_file_over_the_receivers_limit_is_refused():
    receiver = Receiver(0.0, max_size=1000)
    receiver.receive(wire.meta(7, 5000, 32, 1472, b'\0' * 32, 'big'), 0.0)
    (answer,) = receiver.datagrams_to_send(0.0)
    msg, _ = wire.decode(answer)
    assert msg.kind == wire.ERROR and 'over this receiver\'s limit of 1000' in msg.reason
    assert receiver.state == 'waiting'


def test_a_lingering_receiver_answers_done_and_lingers_again_when_the_sender_asks():
    """DONE was lost and the sender polls: like TCP's TIME-WAIT, the linger starts again."""
    receiver = Receiver(0.0, linger=1.0)
    receiver.receive(wire.meta(7, 3, 1, 1472, hashlib.sha256(b'abc').digest(), 'f'), 0.0)
    receiver.receive(wire.data(7, 0, 0, b'abc', last=True), 0.1)
    receiver.verified(True, 0.1)
    receiver.datagrams_to_send(0.1)                     # META_OK, ACK, DONE (lost)
    receiver.receive(wire.poll(7, 1), 0.9)
    (answer,) = receiver.datagrams_to_send(0.9)
    assert wire.decode(answer)[0].kind == wire.DONE
    receiver.handle_timer(1.5)
    assert receiver.state == 'lingering' and receiver.get_timer() == 1.9
    receiver.handle_timer(1.9)
    assert receiver.state == 'done'


def test_windowed_pacing_keeps_to_the_rate():
    got, sender, _, _ = run(DATA, block=16, window=16, rate_mbps=10.0)
    wire_bytes = len(DATA) * 1.01          # payload plus 15 bytes of headers per datagram
    assert got == DATA
    assert sender.summary()['seconds'] >= wire_bytes * 8 / 10e6 * 0.95


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_to_a_datagram_or_a_reason(raw):
    msg, why = wire.decode(raw)
    assert (msg is None) != (why is None)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2 ** 32), st.floats(0, 0.3), st.floats(0, 0.3),
       st.sampled_from([1, 3, 8, 64]), st.sampled_from([1, 4]))
# one block's doubled poll wait grew to 25.6 s and the sender gave up at 30 s of silence
# having asked only twice in it (fixed in sender_core: the wait is capped and reset)
@example(seed=7, loss=0.2817382812500001, dup=0.0, block=1, window=4)
def test_any_loss_pattern_that_lets_data_through_gives_identical_bytes(seed, loss, dup,
                                                                       block, window):
    """The sender ends done with the receiver's bytes identical, or it gives up, and then
    only after asking PROBES_PER_TIMEOUT times in the silence window that ended it (random
    loss can still lose them all; and the receiver may have finished: no linger can make
    sure the last DONE arrives)."""
    data = hashlib.sha256(str(seed).encode()).digest() * 700          # 22,400 bytes
    forward = Link(loss=loss, duplicate=dup, jitter=0.003, seed=seed)
    got, sender, receiver, _ = run(data, forward, Link(loss=loss, duplicate=dup,
                                                       seed=seed + 1),
                                   block=block, window=window, timeout=30.0, limit=600.0)
    if receiver.state == 'done' or sender.state == 'done':
        assert receiver.ok is True and got == data
    if sender.state != 'done':
        assert sender.error.startswith(('no answer from the receiver for 30 s',
                                        'no progress for 30 s'))
        asked = [t for t, _, _ in forward.sent if t > sender.last_progress]
        assert len(asked) >= PROBES_PER_TIMEOUT, (sender.last_progress, asked)


def test_a_reorder_wait_spares_resending_what_jitter_reordered():
    jittery = dict(forward=Link(delay=0.002, jitter=0.002, seed=9),
                   backward=Link(delay=0.002, seed=10))
    _, eager, _, _ = run(DATA, block=2, **jittery)
    got, patient, receiver, _ = run(DATA, block=2, reorder_wait=0.003, **jittery)
    assert got == DATA and patient.state == 'done'
    assert eager.stats['retransmitted'] > 20            # reordered, not lost: resent anyway
    assert patient.stats['retransmitted'] == 0
