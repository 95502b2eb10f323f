"""The DHT node programs inside the simulator (`repronet.sim`): the same sans-I/O cores the
asyncio drivers run, the same log records, in virtual time.

`server.simulate`, `peer.simulate` and `client.simulate` parse their own command line and
hand over to `SimIndexServer` and `SimClient` here and to `sim_peer.SimPeer`. Each moves
bytes and time between a core and the simulated host's streams (``env``:
`repronet.sim.process`) exactly where its asyncio twin moves them between the core and a
socket, so that `analysis.dht8` reads a simulated run as it reads an emulated one:

* index server: `index_serving` holds the per-connection policy both drivers share; this
  driver supplies the stream's operations. "Stop reading" holds what arrives in the driver
  (a kernel's receive buffer) until the core asks for more. `ready` and, at stop, `summary`
  as `common.serve_until_stopped` logs them.
* peer: see `sim_peer`;
* client: `client_driving` holds the action loop and the download files both drivers
  share; `--barrier` is the runner's barrier; `elapsed` is virtual seconds from the release.

Nothing here or in `sim_peer` reads a clock or a random source or opens a socket
(`tests/test_dht_sim.py` checks their imports as `tests/test_sans_io.py` checks the
cores'), and neither iterates over a set, so a run with the same seed repeats itself byte
for byte.

What the stream model leaves out shows here: a connection closed by the other side is
closed both ways (no half-close: a client that shuts its sending side without waiting for
its replies gets none), and nothing pauses writing (no receive-window flow control).
"""

from .client_driving import ClientDriving, lost_reason, report, setup
from .client_ops_core import Close
from .index_serving import IndexBook, IndexLink, ready_fields
from .ring import parse_addr, shared_ring


def listen_on(env, kind, name, addr, accept):
    """Listen on addr's port; return its 'IP:PORT', or None after ending the program with
    one line (status 1) as the real one ends on an OSError."""
    host, port = addr
    try:
        if port == 0:
            raise OSError('port 0 (any free port) is not simulated; give --listen a port')
        env.listen(port, accept)
    except OSError as exc:
        env.error('%s %s: %s' % (kind, name, exc))
        env.exit(1)
        return None
    return '%s:%d' % (host, port)


class Reading:
    """Stop and resume reading a simulated stream: what arrives meanwhile waits here (the
    kernel's receive buffer) and is handed on, all at once, on a later turn."""

    def __init__(self, env, deliver):
        self.env, self.deliver = env, deliver
        self.on, self.unread, self.soon = True, [], None

    def arrived(self, data):
        if self.on and not self.unread:
            self.deliver(data)
        else:
            self.unread.append(data)

    def pause(self):
        self.on = False

    def resume(self):
        self.on = True
        if self.unread and self.soon is None:
            self.soon = self.env.call_soon(self._hand_on)

    def cancel(self):
        if self.soon is not None:
            self.soon.cancel()
            self.soon = None

    def _hand_on(self):
        self.soon = None
        if self.on and self.unread:
            data = b''.join(self.unread)
            self.unread.clear()
            self.deliver(data)


# -- index server -------------------------------------------------------------------------
class _IndexStream(IndexLink):
    """One client connection: `IndexLink` over a simulated stream."""

    def __init__(self, node, stream):
        env = node.env
        super().__init__(node, env.now())
        self.env, self.stream = env, stream
        self.reading = Reading(env, self.received)
        self.gone = False
        # The transport's operations that only forward, as IndexLink names them: bound
        # here rather than forwarded by a method, a Python call less each (several on every
        # request the connection answers).
        self.now, self.write, self.call_soon, self.call_at = (env.now, stream.send,
                                                              env.call_soon, env.call_at)
        self.resume_reading = self.reading.resume

    # the protocol repronet.sim calls
    def connection_made(self, stream):
        self.opened()

    def data_received(self, stream, data):
        if not self.gone:
            self.reading.arrived(data)

    def connection_lost(self, stream, why):
        if why is None and not self.reading.unread:
            self.eof()          # counts a frame the client cut short; nothing can be sent
        self._gone()

    # the transport's other operations, as IndexLink names them
    def close(self):
        self.stream.close()
        self._gone()

    def abort(self):
        self.stream.abort()
        self._gone()

    stop = abort

    def closing(self):
        return self.gone

    def pause_reading(self):
        self.reading.pause()

    def peername(self):
        return self.stream.remote

    def _gone(self):
        """The stream closed (a simulated end that closes hears nothing more of it)."""
        if not self.gone:
            self.gone = True
            self.reading.cancel()
            self.ended()


class Serving:
    """The runner's stop for a simulated node that serves (index server, peer): what
    SIGTERM does to the real one. Needs env, args.name, protocols, closing, summary()."""

    def stop(self):
        """Drop every connection (in the order they came), log the summary, exit 0."""
        self.closing = True
        for link in list(self.protocols):
            link.stop()
        self.env.log.write('summary', flush=True, name=self.args.name, **self.summary())
        self.env.exit(0)


class SimIndexServer(Serving, IndexBook):
    """One index server in the simulator."""

    def __init__(self, env, args):
        self.env, self.args = env, args
        self.ring = shared_ring(args.servers, args.vnodes)
        super().__init__(args.name, self.ring, args.replicas, args.max_frame, env.error,
                         max_entries=args.max_entries, max_connections=args.max_connections)

    def start(self):
        """Listen, log ready; stop() at the runner's stop."""
        args = self.args
        listen = listen_on(self.env, 'server', args.name, args.listen,
                         lambda stream: _IndexStream(self, stream))
        if listen is not None:
            self.env.on_stop(self.stop)
            self.env.ready(listen=listen, **ready_fields(args.name, self.ring, args.replicas))


# -- client -------------------------------------------------------------------------------
class _ClientStream:
    """One connection a simulated client's core asked for."""

    def __init__(self, driver, cid, addr):
        self.driver, self.cid, self.addr = driver, cid, addr
        self.stream = None
        self.open = False

    def connection_made(self, stream):
        d = self.driver
        if d.links.get(self.cid) is not self:       # the core gave up meanwhile
            stream.abort()
            return
        self.open = True
        d.opened(self.cid)

    def data_received(self, stream, data):
        if self.driver.links.get(self.cid) is self:
            self.driver.feed(self.cid, data)

    def connection_lost(self, stream, why):
        d = self.driver
        if d.links.get(self.cid) is self:
            del d.links[self.cid]
            d.failed(self.cid, lost_reason(self.cid, why) if self.open
                     else 'connect to %s: %s' % (self.addr, why))


class SimClient(ClientDriving):
    """One client in the simulator: connect, (barrier), run the operations, report, exit."""

    def __init__(self, env, args):
        self.env, self.args = env, args
        self.routing, self.ops, core = setup(args)
        super().__init__(core, args.downloads, args.name, env.error)
        self.now = env.now          # bound, not forwarded by a method: asked on every reply
        self.links = {}             # connection id -> _ClientStream
        self.timer = None
        self.phase = 'connecting'   # connecting | connected | running | ended
        self.t0 = None

    def start(self):
        """Open every index-server connection (before the timed part)."""
        self.env.on_stop(self.stop)
        if self.args.connect == 'all':
            self.core.connect_all(self.now())
        self.pump()

    def arm(self, when):
        if when is None:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = None
        else:               # moved, not replaced: it is re-armed after every reply
            self.timer = self.env.retime(self.timer, when, self._fire)
        if self.phase == 'connecting' and not self.core.connecting():
            self.phase = 'connected'
            if self.args.barrier:
                self.env.barrier(self._go)
            else:
                self.env.call_soon(self._go)
        elif self.phase == 'running' and self.core.finished():
            self._finish(True)

    def _fire(self):
        self.timer = None
        self.fire()

    def _go(self):
        self.phase, self.t0 = 'running', self.now()
        self.core.submit(self.ops, self.t0)
        self.pump()

    def _connect(self, act):
        link = self.links[act.conn] = _ClientStream(self, act.conn, act.addr)
        try:
            host, port = parse_addr(act.addr, port_zero=False)
        except (ValueError, UnicodeError) as exc:       # a bad holder address: refused
            self.env.call_soon(self._refused, link, str(exc) or type(exc).__name__)
            return
        link.stream = self.env.connect(host, port, link)

    def _refused(self, link, reason):
        if self.links.get(link.cid) is link:
            del self.links[link.cid]
            self.failed(link.cid, reason)

    def _send(self, act):
        link = self.links.get(act.conn)
        if link is not None and link.open:  # else the link broke and the core hears of it
            link.stream.send(act.data)

    def _close(self, act):
        link = self.links.pop(act.conn, None)
        if link is not None and link.stream is not None:
            link.stream.abort()

    def stop(self):
        """The runner's stop: before the release, one line and status 1; after it, the
        records so far and a summary marked interrupted."""
        if self.phase == 'running':
            self._finish(False)
            return
        self.env.error('%s: interrupted before the operations started' % self.args.name)
        self.env.exit(1)

    def _finish(self, done):
        self.phase = 'ended'
        if self.timer is not None:
            self.timer.cancel()
        for cid in list(self.links):
            self._close(Close(cid))
        removed = self.discard()
        self.env.exit(report(self.env.log, self.env.error, self.args, self.routing,
                             self.core, self.ops, self.now() - self.t0, done, removed))
