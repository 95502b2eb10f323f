"""The receiving side of a transfer on a real socket: read, count, hash, write.

One loop for both ends that receive (the client of a GET, the server of a PUT): every
read goes to :class:`nodes.transfer.core.Receiver` with the time it returned, then to
the open temporary file. Reads are up to ``read_size`` bytes into one reused buffer,
so memory stays bounded whatever the file size.
"""

import asyncio
import os
import time

from nodes.transfer.sending import Stalled

READ_SIZE = 64 << 10


async def receive_into(loop, sock, receiver, f, rest, timeout, progress,
                       read_size=READ_SIZE):
    """Feed `rest` (bytes that came with the header line) and then the socket's bytes
    to receiver and file f until the announced size arrived or the peer closed.

    progress['bytes'] follows the count for the caller's error record."""
    if rest:
        receiver.receive(rest, time.monotonic())
        f.write(rest)
        progress['bytes'] = receiver.bytes
    buf = bytearray(read_size)
    view = memoryview(buf)
    while not receiver.complete:
        try:
            n = await asyncio.wait_for(loop.sock_recv_into(sock, buf), timeout)
        except asyncio.TimeoutError:
            raise Stalled('no data from the peer for %g s after %d of %d bytes' % (
                timeout, receiver.bytes, receiver.size)) from None
        if n == 0:
            break               # Receiver.finish says how short it is
        receiver.receive(view[:n], time.monotonic())
        f.write(view[:n])
        progress['bytes'] = receiver.bytes


def unlink_quietly(path):
    """Remove a temporary file if it exists (what a failed receive leaves)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
