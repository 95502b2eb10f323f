"""One client connection of the KV node: between a transport and the core, whatever moves
the bytes (``server.py`` gives it an asyncio transport and the wall clock, ``sim_server.py`` a
simulated stream and virtual time: ``node.wall()`` is the time the core is given, ``node.loop``
has ``time()`` and ``call_later()``).

It feeds what it reads to its `core.Connection`, hands the log records the core produced to
the server (`KVServer.log_written`) and writes the replies: at once, or, with ``appendfsync
always``, once an fdatasync covering those records has returned (`release`); later replies
on the connection queue behind held ones, so a client sees its replies in order.

Memory per connection is bounded without trusting the client to read its replies:
- input goes to the core in slices small enough that the replies to one slice cannot
  exceed ``--max-pending-bytes`` (`slice_bytes`: a 5-byte inline ``get k`` may answer a
  whole value, so with 1 MiB values a slice is a few hundred bytes), and no further slice
  is fed while the unsent output is above the high-water mark (the transport's
  `pause_writing`, or replies held for an fdatasync); reading from the socket pauses until
  the client has read its replies;
- a client whose unsent replies exceed ``--max-pending-bytes`` anyway is closed;
- across clients, the input held in unfinished requests (the parser's buffered bytes) and
  in backlogs is a running total (`KVServer.input_bytes`, updated after each read and feed);
  when it exceeds ``--max-input-bytes`` the server closes the clients holding the most
  (`KVServer.shed_input`, a scan of all clients only then) with ``-ERR max input buffer
  reached``, so many clients each holding a request just under the per-request limit
  cannot together exhaust memory;
- a connection beyond ``--max-connections`` gets Redis's ``-ERR max number of clients
  reached`` and is closed; one that neither sends nor drains anything for
  ``--idle-timeout`` seconds is closed.

At end of input from the client the connection closes once its held replies are sent
(input not yet fed is dropped, as Redis drops a client that shut its side).
"""

import collections

MAX_CLIENTS_REPLY = b'-ERR max number of clients reached\r\n'
MAX_INPUT_REPLY = b'-ERR max input buffer reached\r\n'
HIGH_WATER = 256 << 10          # unsent replies per client before its input waits
_MIN_REQUEST = 5                # bytes of the shortest request with a reply: b'info\n'
_MIN_REPLY_BOUND = 4096         # a reply that is not a value (INFO's text) fits in this,
                                # except CLUSTER SLOTS/NODES/SHARDS (`largest_reply`)
_SLICE_RANGE = (64, 64 << 10)   # bytes fed to the core at once


def slice_bytes(max_pending, max_value, largest_reply=0):
    """Bytes of input whose replies cannot exceed max_pending (within _SLICE_RANGE), when no
    reply is larger than a value or `largest_reply` (the core's `largest_reply()`)."""
    worst = max(max_value + 32, _MIN_REPLY_BOUND, largest_reply)
    return max(_SLICE_RANGE[0], min(_SLICE_RANGE[1], max_pending * _MIN_REQUEST // worst))


class ClientProtocol:
    """One client connection (the asyncio driver subclasses it as an asyncio.Protocol)."""

    def __init__(self, node):
        self.node = node
        self.transport = None
        self.conn = None                # None: refused (over --max-connections) or gone
        self.held = collections.deque()     # (log end it waits for, replies) for 'always'
        self.held_bytes = 0
        self.backlog = b''              # input read but not yet fed to the core
        self.pos = 0
        self.input_held = 0             # this client's share of node.input_bytes
        self.out_paused = False
        self.reading = True
        self.close_after = False        # close once the held replies are sent
        self.last_active = node.loop.time()
        self.timer = None

    def connection_made(self, transport):
        self.transport = transport
        node = self.node
        if node.closing:
            transport.abort()
            return
        if len(node.clients) >= node.max_connections:
            node.counters['rejected_connections'] += 1
            transport.write(MAX_CLIENTS_REPLY)
            transport.close()
            return
        transport.set_write_buffer_limits(high=node.high_water, low=node.high_water // 4)
        self.conn = node.core.connect(node.wall())
        node.clients[self] = None
        if node.idle_timeout:
            self.timer = node.loop.call_later(node.idle_timeout, self._idle)

    def connection_lost(self, exc):
        if self.conn is None:
            return
        self.node.clients.pop(self, None)
        self.node.waiting.pop(self, None)
        self.conn.close(self.node.wall())
        self.conn = None
        self.held.clear()
        self.held_bytes = 0
        self.backlog = b''
        self.node.input_bytes -= self.input_held
        self.input_held = 0
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def data_received(self, data):
        if self.conn is None:
            return
        node = self.node
        self.last_active = node.loop.time()
        if self.backlog:
            self.backlog = self.backlog[self.pos:] + data
            self.pos = 0
        elif len(data) > node.slice or self.out_paused or self.close_after \
                or self.held_bytes > node.high_water:
            self.backlog = data
        else:                           # the common case: one slice, room to answer
            self._deliver(self.conn.receive(data, node.wall()))
            if self.held_bytes > node.high_water:
                self._pause()
            if self.conn is not None:
                self._count_input()
            return
        self._feed()

    def eof_received(self):
        if self.held:
            self.close_after = True     # send what waits for fdatasync, then close
            return True
        return False                    # the transport closes after flushing

    def pause_writing(self):
        self.out_paused = True
        self._pause()

    def resume_writing(self):
        self.out_paused = False
        self.last_active = self.node.loop.time()
        if self.conn is not None:
            self._feed()

    def release(self, synced):
        """Send the held replies whose log records are on disk (up to byte `synced`)."""
        parts = []
        while self.held and self.held[0][0] <= synced:
            parts.append(self.held.popleft()[1])
        if parts:
            data = b''.join(parts)
            self.held_bytes -= len(data)
            self.transport.write(data)
        if self.held:
            return
        self.node.waiting.pop(self, None)
        if self.close_after:
            self.transport.close()
        elif self.conn is not None:
            self._feed()

    def _feed(self):
        """Feed the backlog to the core a slice at a time while the output has room."""
        node, data, pos = self.node, self.backlog, self.pos
        step = node.slice
        while pos < len(data):
            if self.out_paused or self.held_bytes > node.high_water or self.close_after:
                break
            piece = data if pos == 0 and len(data) <= step else data[pos:pos + step]
            pos += len(piece)
            self._deliver(self.conn.receive(piece, node.wall()))
            if self.conn is None or self.transport.is_closing():
                return
        self.backlog, self.pos = (data, pos) if pos < len(data) else (b'', 0)
        if self.backlog or self.out_paused or self.held_bytes > node.high_water:
            self._pause()
        elif not self.reading and not self.transport.is_closing():
            self.reading = True
            self.transport.resume_reading()
        self._count_input()

    def _count_input(self):
        """Update this client's share of the server's input total; shed if over budget."""
        held = self.conn.buffered + len(self.backlog) - self.pos
        node = self.node
        node.input_bytes += held - self.input_held
        self.input_held = held
        if node.input_bytes > node.max_input:
            node.shed_input()

    def drop_input(self):
        """Closed over --max-input-bytes: free its input now, send the error, close."""
        node = self.node
        node.input_bytes -= self.input_held
        self.input_held = 0
        self.backlog, self.pos = b'', 0
        self.conn.close(node.wall())    # frees the parser's buffer before the socket goes
        self.held.clear()               # replies waiting for fdatasync are not sent
        self.held_bytes = 0
        node.waiting.pop(self, None)
        self.transport.write(MAX_INPUT_REPLY)
        self.transport.close()

    def _deliver(self, out):
        """Log what the core wrote, then send (or hold) its replies; close if it says so."""
        node = self.node
        wait_for = node.log_written() if out.writes else None
        if wait_for is None and self.held:
            wait_for = self.held[-1][0]     # in order behind replies still held
        if wait_for is not None:
            self.held.append((wait_for, out.replies))
            self.held_bytes += len(out.replies)
            node.waiting[self] = None
            if out.close:
                self.close_after = True
        else:
            if out.replies:
                self.transport.write(out.replies)
            if out.close:
                node.counters['closed_by_core'] += 1
                self.transport.close()
                return
        if self.transport.get_write_buffer_size() + self.held_bytes > node.max_pending:
            node.counters['slow_closed'] += 1
            node.bad_client(self.transport, 'its unsent replies exceed --max-pending-bytes')
            self.transport.abort()

    def _pause(self):
        if self.reading and not self.transport.is_closing():
            self.reading = False
            self.transport.pause_reading()

    def _idle(self):
        """Close the connection when nothing moved for --idle-timeout seconds."""
        left = self.last_active + self.node.idle_timeout - self.node.loop.time()
        if left > 0:
            self.timer = self.node.loop.call_later(left, self._idle)
            return
        self.timer = None
        self.node.counters['idle_closed'] += 1
        self.transport.abort()
