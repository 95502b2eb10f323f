"""The one asyncio driver of the reliable-UDP cores: datagrams, time and timers in, datagrams
out. Everything the protocol decides is in the cores; this moves bytes between them and a
UDP socket and keeps one timer armed at the core's ``get_timer()``.

Time is ``time.monotonic()``. After every input (a datagram or a timer) the driver calls
``after()`` (the receiving side handles file events there), sends what the core queued
and re-arms the timer; pacing needs timers shorter than a millisecond, so a due time
closer than ``SPIN`` is not slept for but sent at once (the next ``datagrams_to_send``
holds back what is not yet due).
"""

import asyncio
import socket
import time

SPIN = 0.0002
SOCKET_BUFFER = 4 << 20


class CoreProtocol(asyncio.DatagramProtocol):
    """Runs one core on one UDP socket until it ends; ``ended`` resolves then."""

    def __init__(self, core, after=None, peer=None):
        self.core, self.after, self.peer = core, after, peer
        self.loop = asyncio.get_running_loop()
        self.ended = self.loop.create_future()
        self.transport = None
        self.timer = None
        self.errors = 0

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info('socket')
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
            except OSError:
                pass

    def datagram_received(self, data, addr):
        if self.peer is not None and addr != self.peer:
            self.core.stats['dropped_other_address'] += 1
            return
        self.core.receive(data, time.monotonic())
        if self.peer is None:
            # the receiver binds to the address whose META it accepted, not to whatever
            # arrived first; an answer before that (a refusal) goes back to its sender
            if getattr(self.core, 'session', None) is not None:
                self.peer = addr
            for raw in self.core.datagrams_to_send(time.monotonic()):
                self.transport.sendto(raw, addr)
        self.pump()

    def error_received(self, exc):
        self.errors += 1                # ICMP unreachable: the core's timers decide

    def pump(self):
        """After an input: file events, sends, the next timer, or the end."""
        now = time.monotonic()
        if self.after is not None:
            self.after(now)
        if self.peer is not None:
            for raw in self.core.datagrams_to_send(now):
                self.transport.sendto(raw, self.peer)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.core.state in ('done', 'failed'):
            if not self.ended.done():
                self.ended.set_result(self.core.state)
            return
        due = self.core.get_timer()
        if due is not None:
            if due - now < SPIN:
                self.timer = self.loop.call_soon(self._fire)
            else:
                self.timer = self.loop.call_at(self.loop.time() + (due - now), self._fire)

    def _fire(self):
        self.timer = None
        now = time.monotonic()
        due = self.core.get_timer()
        if due is not None and due <= now + SPIN:
            self.core.handle_timer(now)
        self.pump()
