"""The one asyncio driver of the reliable-UDP cores: datagrams, time and timers in, datagrams
out. Everything the protocol decides is in the cores; this moves bytes between them and a
UDP socket and keeps one timer armed at the core's ``get_timer()``. The steps themselves
(`sim_driver.Driving`) are shared with the simulator's driver.

Time is ``time.monotonic()``. After every input (a datagram or a timer) the driver calls
``after()`` (the receiving side handles file events there), sends what the core queued
and re-arms the timer; pacing needs timers shorter than a millisecond, so a due time
closer than ``SPIN`` is not slept for but sent at once (the next ``datagrams_to_send``
holds back what is not yet due).
"""

import asyncio
import socket
import time

from nodes.rudp.sim_driver import Driving

SPIN = 0.0002
SOCKET_BUFFER = 4 << 20


class CoreProtocol(Driving, asyncio.DatagramProtocol):
    """Runs one core on one UDP socket until it ends; ``ended`` resolves then."""

    def __init__(self, core, after=None, peer=None):
        super().__init__(core, after, peer)
        self.loop = asyncio.get_running_loop()
        self.ended = self.loop.create_future()
        self.transport = None
        self.errors = 0

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info('socket')
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
            except OSError:
                pass

    def error_received(self, exc):
        self.errors += 1                # ICMP unreachable: the core's timers decide

    def clock(self):
        return time.monotonic()

    def transmit(self, raw, addr):
        self.transport.sendto(raw, addr)

    def arm(self, due, now):
        if due - now < SPIN:
            return self.loop.call_soon(self.fire, SPIN)
        return self.loop.call_at(self.loop.time() + (due - now), self.fire, SPIN)

    def finish(self, state):
        if not self.ended.done():
            self.ended.set_result(state)
