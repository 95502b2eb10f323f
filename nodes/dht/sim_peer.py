"""The peer's file server inside the simulator: `transfer.ServeConnection` per connection and
the `Catalog` of the real `--share` folder, the records of `peer.py` in virtual time.

The folder is scanned (every file hashed) at start, in zero virtual time. `SendFile` reads
the file's bytes from disk in pieces of `PIECE`, keeping at most `BUFFER` bytes queued on
the stream (the kernel's send buffer a `sendfile(2)` fills), and looks again every `POLL`
seconds while a long body drains; `HashFile` hashes the file at once (zero virtual
time). Progress for the stall timer is the stream's acknowledged bytes, as TCP_INFO's are.
Lines about single connections are all written: virtual time makes a flood of them cost
nothing, so they are not rate-limited (`error_lines_left_out` is 0).

See `sim_drivers` for what the simulated drivers share and what the stream model leaves
out.
"""

import os
from collections import deque

from . import transfer
from .catalog import Catalog
from .sim_drivers import Reading, Serving, listen_on

PIECE = 64 * 1024           # bytes of a body read from disk and queued at once
BUFFER = 4 * 1024 * 1024    # bytes of a body queued on the stream at most (a send buffer)
POLL = 0.005                # seconds between looks at a draining body (4 MiB in 5 ms: 6 Gb/s)
LINGER = 10.0               # seconds a closing connection may flush before it is aborted


class _ServeStream:
    """One downloader connection of a simulated peer: the core's actions, in order."""

    def __init__(self, node, stream):
        self.node, self.env, self.stream = node, node.env, stream
        self.core = transfer.ServeConnection(
            node.catalog, idle_timeout=node.args.idle_timeout,
            frame_timeout=node.args.frame_timeout, stall_timeout=node.args.stall_timeout,
            now=self.env.now())
        self.actions = deque()
        self.reading = Reading(self.env, self._received)
        self.timer = self.timer_at = None
        self.acked = 0
        self.body = None            # [SendFile, bytes queued so far] while a body drains
        self.work = None            # the scheduled turn of _work (or of _drain)
        self.busy = False
        self.ended = False

    # the protocol repronet.sim calls
    def connection_made(self, stream):
        if not self.node.room():
            self.node.refused += 1
            self.ended = True
            stream.abort()
            return
        self.node.protocols[self] = None
        self.node.connections += 1
        self._arm()

    def data_received(self, stream, data):
        if not self.ended:
            self.reading.arrived(data)

    def connection_lost(self, stream, why):
        self._finish()

    # what the asyncio driver's protocol and task do, in order
    def _received(self, data):
        self._take(self.core.receive(data, self.env.now()))

    def _take(self, actions):
        """Queue a batch of the core's actions; read on only if no request waits in it."""
        if actions:
            self.core.pause_output()
            self.actions.extend(actions)
            if self.work is None and not self.busy and self.body is None:
                self.work = self.env.call_soon(self._work)
        if self.core.waiting:
            self.reading.pause()
        else:
            self.reading.resume()
        self._arm()

    def _work(self):
        """Carry out queued actions until a body must drain, the connection ends or the core
        has nothing more to do."""
        self.work = None
        self.busy = True
        try:
            while not self.ended and self.body is None:
                if not self.actions:
                    self._take(self.core.resume_output(self.env.now()))
                    if not self.actions:
                        return
                self._do(self.actions.popleft())
        finally:
            self.busy = False

    def _do(self, action):
        kind, now = type(action), self.env.now()
        if kind is transfer.SendFrame:
            self.stream.send(action.data)
            self.core.written(action, now)
        elif kind is transfer.HashFile:
            digest = self.node.catalog.digest(action.source)
            if digest is not None:
                self.node.catalog.remember(action.source, digest)
            self.actions.extendleft(reversed(self.core.hashed(action, digest, now)))
            self._arm()
        elif kind is transfer.SendFile:
            self.body = [action, 0]
            self._drain()
        else:
            self._close(action.reason)

    def _drain(self):
        """Queue the body's next pieces; when all are queued (or the file ended short), tell
        the core and go on with the next action, else look again in POLL seconds."""
        self.work = None
        if self.ended:
            return
        action, queued = self.body
        short = False
        try:
            while queued < action.count and self.stream.queued < BUFFER:
                want = min(PIECE, action.count - queued)
                data = os.pread(action.source.fileno(), want, action.offset + queued)
                self.stream.send(data)
                queued += len(data)
                if len(data) < want:
                    short = True
                    break
        except OSError as exc:
            self.node.line('%s: send to %s failed: %s' % (self.node.args.name,
                                                          self.stream.remote, exc))
            self.stream.abort()
            self._finish()
            return
        self.body[1] = queued
        if queued < action.count and not short:
            self.work = self.env.call_at(self.env.now() + POLL, self._drain)
            return
        self.body = None
        self.node.catalog.close(action.source)
        for close in self.core.file_sent(action, queued, self.env.now()):
            self._close(close.reason)
            return
        if not self.busy:
            self._work()

    def _arm(self):
        """Have _fire called at the core's next deadline (a timer set later is replaced)."""
        when = self.core.get_timer()
        if when is None or self.ended or (self.timer is not None and self.timer_at <= when):
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = when
        self.timer = self.env.call_at(when, self._fire)

    def _fire(self):
        self.timer = None
        now = self.env.now()
        acked, self.acked = self.acked, self.stream.bytes_sent - self.stream.inflight
        if self.core.output_paused and acked != self.acked:
            self.core.progress(now)         # the downloader took bytes
        for close in self.core.handle_timer(now):
            self.node.line('%s: closing the connection from %s: %s' % (
                self.node.args.name, self.stream.remote, close.reason))
            self.stop()
            return
        self._arm()

    def stop(self):
        """Reset the connection (nothing to flush to a downloader that stopped reading)."""
        self.stream.abort()
        self._finish()

    def _close(self, reason):
        """Close as the core said: flush what is written, but not for longer than LINGER."""
        self.node.line('%s: closing the connection from %s: %s' % (
            self.node.args.name, self.stream.remote, reason))
        self.stream.close()
        self.env.call_at(self.env.now() + LINGER, self.stream.abort)
        self._finish()

    def _finish(self):
        """The connection ended: close the files its actions held, count its GETs."""
        if self.ended:
            return
        self.ended = True
        self.node.protocols.pop(self, None)
        for handle in (self.timer, self.work):
            if handle is not None:
                handle.cancel()
        self.reading.cancel()
        held = [self.body[0]] if self.body is not None else []
        held += [a for a in self.actions if type(a) in (transfer.SendFile, transfer.HashFile)]
        for action in held:
            self.node.catalog.close(action.source)
        self.body = None
        self.actions.clear()
        self.core.closed('shutdown' if self.node.closing else 'lost', self.env.now())
        for k, v in self.core.counters.items():
            self.node.totals[k] += v


class SimPeer(Serving):
    """One peer's file server in the simulator (limits as `peer.PeerServer` computed them);
    at stop, unfinished GETs count as failed_shutdown."""

    def __init__(self, env, args, max_connections, max_open):
        self.env, self.args = env, args
        self.max_connections = max_connections
        self.catalog = Catalog(args.share, max_open, kept=max_connections)
        self.totals = dict.fromkeys(transfer.COUNTERS, 0)
        self.protocols = {}             # open connections, in the order they came
        self.connections = self.refused = 0
        self.closing = False

    def start(self):
        """Hash the shared files, listen, log ready; stop() at the runner's stop."""
        args = self.args
        try:
            files = self.catalog.scan()
        except OSError as exc:
            self.env.error('peer %s: %s' % (args.name, exc))
            self.env.exit(1)
            return
        listen = listen_on(self.env, 'peer', args.name, args.listen,
                         lambda stream: _ServeStream(self, stream))
        if listen is not None:
            self.env.on_stop(self.stop)
            self.env.ready(listen=listen, name=args.name, files=files,
                           max_connections=self.max_connections,
                           max_open_files=self.catalog.max_open)

    def room(self):
        return not self.closing and len(self.protocols) < self.max_connections

    def line(self, text):
        self.env.error(text)

    def summary(self):
        """The counters of this peer, as `peer.PeerServer.summary` names them."""
        c = dict(self.totals)
        c.update(connections=self.connections, refused_connections=self.refused,
                 accept_errors=0, error_lines_left_out=0)
        return c
