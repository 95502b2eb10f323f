"""The KV server inside the simulator (`repronet.sim`): the same core, the same connection
policy, the same log records, in virtual time.

`server.simulate` parses the real command line (so a bad flag fails the same way, exit 2)
and hands it to `SimKVServer`. Each client connection is the real
`connection.ClientProtocol` (slices, high-water mark, ``--max-pending-bytes``,
``--max-input-bytes``, ``--idle-timeout``, ``-ERR max number of clients reached``, the
replies held for an fdatasync), given a `_Stream` where the asyncio driver gives it a
socket transport; `serving.KVBook` is the server's state in both. So bad input (malformed
RESP, oversized keys or values, too many arguments) gets byte for byte the errors the real
server sends: the core decides them, not a driver.

Durability: ``--log PATH`` is a real append-only file, written by the same
`durable.AppendLog` (recovered at start-up, a bad tail moved aside, ``recovery`` logged);
a kvload point puts it in its scratch folder under ``--workdir``, as in emulation. The
``appendfsync`` rules are the same `durable.SyncPolicy` (``always`` holds each
acknowledging reply until an fdatasync that started after the write has returned, group
commit; ``everysec`` once a virtual second), but a simulated fdatasync takes no virtual time
and no real one is issued: no disk is modelled, so ``always`` changes the order of events,
not the time a reply takes (emulation measures that).

What the stream model leaves out shows here (``repronet.sim.streams``): nothing pauses
writing (no receive window: a client that stops reading is never the server's problem), and
a client that closes its side closes both (no half-close: replies still held for an
fdatasync are not sent). ``--profile`` (cProfile of a real process) is refused.

Nothing here reads a clock or a random source or opens a socket (`tests/test_kv_sim.py`
checks the imports as `tests/test_sans_io.py` checks the cores').
"""

from nodes.dht.sim_drivers import Reading

from .connection import ClientProtocol
from .durable import SyncPolicy
from .serving import KVBook, open_log, ready_fields


class _Loop:
    """What ClientProtocol asks of ``node.loop``, in virtual time."""

    def __init__(self, env):
        self.env = env

    def time(self):
        return self.env.now()

    def call_later(self, delay, fn, *args):
        return self.env.call_at(self.env.now() + delay, fn, *args)


class _Stream:
    """One client connection: the simulated stream's protocol on one side, the asyncio
    transport operations ClientProtocol uses on the other."""

    def __init__(self, node):
        self.node, self.env = node, node.env
        self.client = ClientProtocol(node)
        self.reading = Reading(node.env, self._deliver)
        self.conn = None
        self.closing = self.gone = False

    # the protocol repronet.sim calls
    def connection_made(self, conn):
        self.conn = conn
        self.client.connection_made(self)

    def data_received(self, conn, data):
        if not self.closing:
            self.reading.arrived(data)

    def connection_lost(self, conn, why):
        self.lost(None if why is None else ConnectionResetError(why))

    def _deliver(self, data):
        if not self.closing:
            self.client.data_received(data)

    def lost(self, exc):
        """The client hears connection_lost once (asyncio: soon after close or abort)."""
        if not self.gone:
            self.gone = self.closing = True
            self.reading.cancel()
            self.client.connection_lost(exc)

    # the transport's operations, as ClientProtocol calls them
    def write(self, data):
        if not self.closing:
            self.conn.send(data)

    def close(self):
        """Send what is written, then end the connection."""
        if not self.closing:
            self.closing = True
            self.conn.close()
            self.env.call_soon(self.lost, None)

    def abort(self):
        """End the connection now (the client hears a reset)."""
        if not self.gone:
            self.closing = True
            self.conn.abort()
            self.env.call_soon(self.lost, None)

    def is_closing(self):
        return self.closing

    def pause_reading(self):
        self.reading.pause()

    def resume_reading(self):
        self.reading.resume()

    def get_write_buffer_size(self):
        return self.conn.queued

    def set_write_buffer_limits(self, high=None, low=None):
        """Nothing pauses writing here: the stream model has no receive window."""

    def get_extra_info(self, name, default=None):
        return self.conn.remote if name == 'peername' else default


class SimSyncer(SyncPolicy):
    """`SyncPolicy` in virtual time: an fdatasync returns on the next turn (no disk)."""

    def __init__(self, env, log, policy, on_synced, on_error):
        self.env = env
        super().__init__(log, policy, _Loop(env).call_later, on_synced, on_error)

    def _begin(self, target):
        return self.env.call_soon(self._done, target, None)

    def close(self):
        """The clean shutdown: no timer, everything counted as synced once more."""
        self._stop_timer()
        if self._running is not None:
            self._running.cancel()
            self._running = None
        if self.log.end > self.synced:
            self.fsyncs += 1
            self.synced = self.log.end


class SimKVServer(KVBook):
    """One KV server in the simulator; SIGTERM (the runner's stop) logs the summary."""

    def __init__(self, env, args, max_connections):
        self.env, self.args = env, args
        self.loop = _Loop(env)
        self.opened = None
        try:
            self.opened = open_log(args, env.log, self.error)
        except OSError as exc:          # LogInUse, LogTooLarge, or the file itself
            self.error('kv server: %s' % exc)
            env.exit(1)
            return
        log, recovery, _ = self.opened
        super().__init__(args.config, log, recovery, args.appendfsync, max_connections,
                         args.max_pending_bytes, args.idle_timeout, args.max_input_bytes)
        if log is not None:
            self.syncer = SimSyncer(env, log, args.appendfsync, self.synced, self.fail)

    def wall(self):
        return self.env.now()

    def error(self, text):
        self.env.error(text)

    def on_failure(self):
        self.env.call_soon(self.stop)

    def start(self):
        """Listen on --port and log ready; or end with one line (status 1 or 2)."""
        env, args = self.env, self.args
        if self.opened is None:
            return
        if args.profile:
            env.error('kv server: --profile (cProfile of a real process) does not run in '
                      'the simulator')
            env.exit(2)
            return
        try:
            if args.port == 0:
                raise OSError('port 0 (any free port) is not simulated; give --port a port')
            env.listen(args.port, lambda conn: _Stream(self))
        except OSError as exc:
            env.error('kv server: %s' % exc)
            env.exit(1)
            return
        env.on_stop(self.stop)
        env.log.write('ready', flush=True, **ready_fields(args, self, self.opened[2],
                                                          args.host, args.port, 'sim', None))

    def stop(self):
        """What SIGTERM does: drop every client in the order they came, sync and close the
        log, log the summary, exit (1 if the log failed)."""
        if self.closing:
            return
        self.closing = True
        for client in list(self.clients):
            client.transport.abort()
            client.transport.lost(None)
        if self.syncer is not None:
            self.syncer.close()
        if self.log is not None:
            self.log.close()
        self.env.log.write('summary', flush=True, loop='sim', **self.summary())
        self.env.exit(1 if self.failure is not None else 0)
