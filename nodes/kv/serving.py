"""What both drivers of the KV server do the same way, whatever moves their bytes.

Two drivers run `core.KVCore`: the asyncio one (`server.KVServer`: real sockets, the wall
clock, fdatasync on a worker thread) and the simulated one (`sim_server.SimKVServer`:
`repronet.sim` streams, virtual time). What they must agree on is policy, not I/O, so it
lives here once:

* `KVBook`: the core, the bounds and counters every client connection
  (`connection.ClientProtocol`) reads and updates, the log records handed to the append-only
  file (`log_written`), a failure of that file (`fail`: fatal, once), the clients shed over
  ``--max-input-bytes`` and the ``summary``. A driver supplies ``wall()`` (the time the core
  is given), ``loop`` (``time()``, ``call_later()``), ``error(text)`` (one stderr line) and
  ``on_failure()`` (stop serving), and sets ``syncer`` when it has a log;
* `open_log`: the append-only file opened, locked and recovered at start-up, with its
  ``recovery`` record; `ready_fields`: what the ``ready`` line says.

Clients and replies waiting for an fdatasync are kept in dicts (insertion order), not sets:
closing or releasing them in a set's order could differ from run to run, and a simulated run
must repeat itself byte for byte.
"""

from . import durable
from .connection import HIGH_WATER, slice_bytes
from .core import KVCore

MAX_PENDING_BYTES = 64 << 20    # unsent replies per client before it is closed
MAX_INPUT_BYTES = 256 << 20     # unfinished input of all clients together
IDLE_TIMEOUT = 300.0


class KVBook:
    """One KV server's core, bounds and counters (the driver adds listening and the clock)."""

    def __init__(self, cfg, log=None, recovery=None, appendfsync='everysec',
                 max_connections=10000, max_pending=MAX_PENDING_BYTES,
                 idle_timeout=IDLE_TIMEOUT, max_input=MAX_INPUT_BYTES):
        read = log.read if log is not None and cfg.storage == 'log' else None
        self.core = KVCore(cfg, recovery=recovery, read=read)
        self.log = log
        self.appendfsync = appendfsync
        self.max_connections = max_connections
        self.max_pending = max_pending
        self.high_water = min(HIGH_WATER, max_pending // 2)
        self.slice = slice_bytes(max_pending, cfg.max_value_bytes, self.core.largest_reply())
        self.idle_timeout = idle_timeout
        self.max_input = max_input
        self.input_bytes = 0            # unfinished requests and backlogs of all clients
        self.counters = dict(rejected_connections=0, slow_closed=0,
                             idle_closed=0, closed_by_core=0, input_closed=0)
        self.clients = {}               # ClientProtocol -> None, in the order they came
        self.waiting = {}               # clients holding replies until an fdatasync
        self.closing = False
        self.failure = None             # why the log cannot be trusted any more
        self._bad_lines = 0
        self.syncer = None              # the driver's durable.SyncPolicy, with a log

    def log_written(self):
        """Append the core's new log records; return the log end the replies must wait
        for (appendfsync always) or None."""
        data = self.core.take_log()
        if self.log is None or not data:
            return None
        if self.failure is not None:
            return float('inf')         # never acknowledged: the log is not trusted
        try:
            self.log.append(data)
        except OSError as exc:
            self.fail('cannot write the log file %s: %s' % (self.log.path, exc))
            return float('inf')
        self.syncer.written()
        return self.log.end if self.appendfsync == 'always' else None

    def fail(self, reason):
        """The log cannot be made durable: say so once and stop the server (exit 1)."""
        if self.failure is None:
            self.failure = reason
            self.error(reason)
            self.on_failure()

    def bad_client(self, transport, why):
        """One stderr line about a client closed for misbehaving (the first 20 only)."""
        self._bad_lines += 1
        if self._bad_lines <= 20:
            self.error('closing client %s: %s' % (transport.get_extra_info('peername'), why))

    def shed_input(self):
        """Over --max-input-bytes: close the clients holding the most input until under."""
        while self.input_bytes > self.max_input and self.clients:
            victim = max(self.clients, key=_input_held)
            if victim.input_held <= 0:
                return
            self.counters['input_closed'] += 1
            self.bad_client(victim.transport, 'the unfinished input of all clients '
                            'exceeds --max-input-bytes')
            victim.drop_input()

    def synced(self, upto):
        """The log is on disk up to byte upto: release the replies that waited for it."""
        for client in list(self.waiting):
            client.release(upto)

    def summary(self):
        """The core's counters and this driver's."""
        info = dict(self.core.info())
        info.update(self.counters, input_bytes=self.input_bytes)
        if self.syncer is not None:
            info.update(appendfsync=self.appendfsync, fsyncs=self.syncer.fsyncs,
                        log_file_bytes=self.log.end)
        return info


def _input_held(client):
    return client.input_held


def open_log(args, out, error):
    """(log, recovery, recovered) for --log: open, lock and recover the file, reporting a bad
    tail on stderr and as a ``recovery`` record; (None, None, {}) without --log. Raises
    OSError (LogInUse, LogTooLarge) as AppendLog does."""
    if not args.log:
        return None, None, {}
    log = durable.AppendLog(args.log)
    log.open()
    recovery, bad_tail = log.recover(args.storage, args.config.max_payload())
    recovered = dict(records=recovery.records, valid_bytes=recovery.valid_bytes,
                     total_bytes=recovery.total_bytes, problem=recovery.problem,
                     bad_tail=bad_tail)
    if bad_tail is not None:
        error('log file %s: %s; kept its first %d bytes, moved the other %d to %s'
              % (args.log, recovery.problem or 'bytes after the last record',
                 recovery.valid_bytes, recovery.total_bytes - recovery.valid_bytes, bad_tail))
        out.write('recovery', flush=True, **recovered)
    return log, recovery, recovered


def ready_fields(args, node, recovered, host, port, loop, pid):
    """The fields of the ``ready`` line once the server listens."""
    recovered['keys'] = node.core.info().get('keys')
    return dict(host=host, port=port, loop=loop, pid=pid,
                appendfsync=args.appendfsync if node.log is not None else None,
                storage=args.storage, cache=args.cache, cache_size=args.cache_size,
                recovered=recovered, **node.core.cluster_info())
