"""The sending side of a transfer on a real socket: one ``send()`` per packet.

The seed's "packet size" is how many bytes its program handed to each write. To keep that
meaning, the file goes out in ``packet``-byte slices, each through its own ``send()``
system call on a non-blocking socket (a short send sends the rest of that slice next);
only when the kernel's buffer is full does the loop wait, through the event loop, for the
socket to become writable. asyncio's transports would merge writes into large ones, so
they are not used here. The file is read in blocks of at least 256 KiB into one reused
buffer: memory per connection is that buffer, whatever the file size, and the time spent
reading (``read_s``) is part of the sender's time, as in the seed.
"""

import asyncio
import os
import socket
import time

from nodes.transfer.core import SendClock, rate_mbps

READ_BLOCK = 256 << 10


class Stalled(Exception):
    """The peer took nothing for the whole timeout; the message is one sentence."""


async def _writable(loop, sock, timeout):
    """Wait until sock can take more bytes, at most timeout seconds."""
    ready = loop.create_future()
    fd = sock.fileno()
    loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await asyncio.wait_for(ready, timeout)
    except asyncio.TimeoutError:
        raise Stalled('the peer took no data for %g s' % timeout) from None
    finally:
        loop.remove_writer(fd)


def set_nodelay(sock, on):
    """Turn Nagle's algorithm off (on=True) or on for a TCP socket."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if on else 0)


def set_congestion_control(sock, name):
    """Use congestion control `name` on this socket (None: keep the namespace default) and
    return the one in use. Per socket, because a network namespace other than the first may
    only default to the algorithms in tcp_allowed_congestion_control; as root a socket may
    use any the kernel has. OSError (one sentence) when the kernel refuses it."""
    if name:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
        except OSError as e:
            raise OSError(e.errno, 'congestion control %r refused: %s' % (
                name, e.strerror)) from None
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(
        b'\0')[0].decode()


async def send_file(sock, path, packet, timeout, dropcache=False, size=None):
    """Send a file's bytes over a non-blocking socket in packet-sized send() calls and
    return the sender's record (T_x from first to last write, and from the open).

    OSError from the socket (a peer that went away) and Stalled propagate; the record so
    far is on the exception as ``.record``."""
    loop = asyncio.get_running_loop()
    clock = SendClock()
    read_s = 0.0
    t_open = time.monotonic()
    fd = os.open(path, os.O_RDONLY)
    try:
        if dropcache:           # evict the file so the reads below come from the disk
            os.fsync(fd)        # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        buf = bytearray(max(packet, READ_BLOCK) // packet * packet)
        view = memoryview(buf)
        left = os.fstat(fd).st_size if size is None else size
        while left > 0:
            t0 = time.monotonic()
            n = os.readv(fd, [view[:min(len(buf), left)]])
            read_s += time.monotonic() - t0
            if n == 0:
                raise OSError('the file ended %d bytes early' % left)
            left -= n
            off = 0
            while off < n:
                end = min(off + packet, n)
                while off < end:
                    try:
                        sent = sock.send(view[off:end])
                    except BlockingIOError:
                        await _writable(loop, sock, timeout)
                        continue
                    clock.wrote(sent, time.monotonic())
                    off += sent
    except (OSError, Stalled) as e:
        e.record = clock.record()
        raise
    finally:
        os.close(fd)
    record = clock.record()
    record.update(t_open=t_open, read_s=round(read_s, 6), packet=packet,
                  tx_open_mbps=rate_mbps(clock.bytes, t_open, clock.t_last_write))
    return record
