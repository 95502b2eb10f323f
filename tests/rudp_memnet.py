"""The reliable-UDP cores wired together in memory on a virtual clock (no sockets).

A ``Link`` carries datagrams each way with a delay, optional jitter, and whatever a test
scripts: drop the n-th datagram of a kind, drop at random with a seeded generator,
duplicate, or inject forged bytes. ``run`` plays events in time order (deliveries and both
cores' timers) until both cores end or the virtual clock passes a limit, and returns the
receiver's reassembled bytes and both cores. The same file then goes through the real
drivers in tests/test_rudp_localhost.py.
"""

import hashlib
import heapq
import random

from nodes.rudp import wire
from nodes.rudp.receiver_core import Complete, Opened, Receiver, Write
from nodes.rudp.sender_core import Sender


class Link:
    """One direction's fate for each datagram: delivered when, how many times."""

    def __init__(self, delay=0.001, jitter=0.0, loss=0.0, duplicate=0.0, seed=1,
                 drop=None):
        self.delay, self.jitter, self.loss, self.duplicate = delay, jitter, loss, duplicate
        self.rng = random.Random(seed)
        self.drop = drop or (lambda kind, n: False)     # scripted: (kind, n-th of kind)
        self.seen = {}
        self.sent = []                                  # (time, kind, copies delivered)

    def fates(self, raw, now):
        """Return the delivery times of one datagram (empty: lost)."""
        msg, _ = wire.decode(raw)
        kind = msg.kind if msg else None
        n = self.seen[kind] = self.seen.get(kind, 0) + 1
        times = []
        if not (self.drop(kind, n) or self.rng.random() < self.loss):
            times.append(now + self.delay + self.rng.uniform(0, self.jitter))
            if self.rng.random() < self.duplicate:
                times.append(times[0] + self.rng.uniform(0, self.delay + self.jitter))
        self.sent.append((now, kind, len(times)))
        return times


def run(data, forward=None, backward=None, limit=120.0, inject=(), reorder_wait=0.0,
        **sender_args):
    """Send data; return (received bytes or None, sender, receiver, events)."""
    forward, backward = forward or Link(), backward or Link(seed=2)
    sha = hashlib.sha256(data).digest()
    sender = Sender(0x1234, memoryview(data), sha, 'f.bin', 0.0, **sender_args)
    receiver = Receiver(0.0, timeout=sender_args.get('timeout', 10.0),
                        reorder_wait=reorder_wait)
    buf, events, heap, seq = None, [], [], 0
    for t, raw in inject:                               # forged or stray datagrams
        heapq.heappush(heap, (t, seq, 'r', raw))
        seq += 1
    sender.start(0.0)
    now = 0.0
    while now <= limit:
        for core, dest, link in ((sender, 'r', forward), (receiver, 's', backward)):
            for raw in core.datagrams_to_send(now):
                for t in link.fates(raw, now):
                    heapq.heappush(heap, (t, seq, dest, raw))
                    seq += 1
        for ev in receiver.pop_events():
            events.append(ev)
            if isinstance(ev, Opened):
                buf = bytearray(ev.size)
            elif isinstance(ev, Write):
                buf[ev.offset:ev.offset + len(ev.data)] = ev.data
            elif isinstance(ev, Complete):
                receiver.verified(hashlib.sha256(buf).digest() == sha, now)
        if receiver.out:                                # verified() answered DONE
            continue
        ends = {'done', 'failed'}
        if sender.state in ends and receiver.state in ends:
            break
        times = [t for t in (sender.get_timer(), receiver.get_timer()) if t is not None]
        if heap:
            times.append(heap[0][0])
        if not times:
            break
        now = max(now, min(times))
        while heap and heap[0][0] <= now:
            _, _, dest, raw = heapq.heappop(heap)
            (receiver if dest == 'r' else sender).receive(raw, now)
        for core in (sender, receiver):
            timer = core.get_timer()
            if timer is not None and timer <= now:
                core.handle_timer(now)
    return (bytes(buf) if buf is not None else None), sender, receiver, events
