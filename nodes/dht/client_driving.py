"""What every driver of the DHT client core does the same way, whatever moves its bytes.

Two drivers run `client_ops_core.ClientOps`: `connections.Driver` (asyncio, real sockets,
wall clock) and `sim_drivers.SimClient` (`repronet.sim` streams, virtual time). They share
the client's set-up (`setup`: routing, the operations of `--op`, the core), its closing
records (`report`: the op records, the `summary`, the exit status) and, in `ClientDriving`,
how the core's actions are carried out except opening, writing and closing connections and
the timer: the loop over `actions()`, the lines of `Notice`, and the downloads, each
written to a temporary name in the downloads folder and renamed only once the core says it
ended with a good digest (a failed or interrupted one is removed, never left under its
name).

No asyncio, socket or clock here: a driver supplies `now()`, `error(text)` and its
transport's operations.
"""

import os

from . import codec
from .client_core import ClientCore
from .client_ops_core import ClientOps
from .ring import shared_ring


def plan(core, args):
    """The operations of args.op as ClientOps specs, and how many may run at once."""
    w = args.window
    if args.op in ('register', 'unregister'):
        kind = codec.Register if args.op == 'register' else codec.Unregister
        names = args.names_list
        if args.batch:
            groups = core.batches(names)
            return ([(args.op, kind, group, (server,), args.advertise, True)
                     for server, group in groups], len(groups) if w > 1 else 1)
        return ([(args.op, kind, (name,), servers, args.advertise, False)
                 for name, servers in core.unbatched(names)],
                w * len(args.servers) if w > 1 else 1)
    if args.op == 'search':
        return [('search', n) for n in args.names_list], w * len(args.servers) if w > 1 else 1
    return [('download', n) for n in args.names_list], w


def totals(records, ops=None, results=None):
    """(files, files ok, bytes). With every result: a file is ok when every write naming it
    was (batched writes with replicas name a file twice); else count the op records."""
    if ops is not None and len(results) == len(ops) and ops and len(ops[0]) == 6:
        names = set(n for spec in ops for n in spec[2])
        bad = set(n for i, ok in results.items() if not ok for n in ops[i - 1][2])
        nbytes = sum(r['bytes'] for r in records if r['ok'])
        return len(names), len(names) - len(bad), nbytes
    count = ok = nbytes = 0
    for r in records:           # one pass: the simulator's clients end with 2,000 each
        files = r.get('files', 1)
        count += files
        if r['ok']:
            ok += files
            nbytes += r['bytes']
    return count, ok, nbytes


def setup(args):
    """(routing, operations, core) of a client's parsed command line."""
    routing = ClientCore(shared_ring(args.servers, args.vnodes), args.replicas)
    ops, limit = plan(routing, args)
    return routing, ops, ClientOps(routing, args.servers, args.window, args.timeout,
                                   max(1, limit))


def report(log, error, args, routing, core, ops, elapsed, done, removed=0):
    """Log the op records and the summary (elapsed: seconds from the release; done: every
    operation ended) and say what failed on stderr; return the exit status."""
    if not done:
        error('%s: interrupted after %d of %d operations%s' % (
            args.name, len(core.records), len(ops),
            ', removed %d unfinished download(s)' % removed if removed else ''))
    count, ok, nbytes = totals(core.records, ops, core.results)
    log.records(core.records)
    log.write('summary', flush=True, name=args.name, op=args.op, batch=args.batch,
              window=args.window, replicas=routing.replicas, count=count, ok=ok,
              failed=count - ok, elapsed=round(elapsed, 6), bytes=nbytes,
              messages_sent=core.messages_sent, servers=len(args.servers),
              down=sorted(routing.down), **({} if done else {'interrupted': True}))
    if not done:
        return 1
    if ok != count:
        error('%s: %d of %d %s operations failed' % (args.name, count - ok, count, args.op))
        return 1
    return 0


def lost_reason(conn, why):
    """The core's reason for an open connection that ended (why: the transport's, or None
    when the other side closed it)."""
    what = ('peer %s closed the connection mid-transfer' if conn[0] == 'peer'
            else '%s closed the connection') % conn[1]
    return what + (': %s' % why if why else '')


class ClientDriving:
    """Carries out a ClientOps core's actions; a driver subclasses it with now(),
    _connect(act), _send(act), _close(act) and arm(when) (the one timer, at when or none)."""

    def __init__(self, core, downloads, tag, error):
        self.core = core
        self.downloads = downloads
        self.tag = tag          # in temporary names: drivers sharing a folder never collide
        self.error = error
        self.files = {}         # op id -> (file object, temporary path)
        self._seq = 0
        self.closed = False     # after discard(), late bytes must not reopen a temporary file
        self._handlers = {}     # action class -> this driver's class's method for it

    def feed(self, conn, data):
        """Bytes arrived on conn."""
        if not self.closed:
            self.core.receive(conn, data, self.now())
            self.pump()

    def failed(self, conn, reason):
        """conn did not open, or broke (reason: the core's text)."""
        if not self.closed:
            self.core.connection_lost(conn, reason, self.now())
            self.pump()

    def opened(self, conn):
        """conn, which the core asked for, is open."""
        self.core.connected(conn, self.now())
        self.pump()

    def fire(self):
        """The timer the driver armed is due."""
        self.core.handle_timer(self.now())
        self.pump()

    def pump(self):
        """Carry out what the core asked for, then re-arm the timer."""
        handlers = self._handlers
        while True:
            acts = self.core.actions()
            if not acts:
                break
            for act in acts:
                handler = handlers.get(type(act))
                if handler is None:         # each action class maps to '_' + its name
                    handler = handlers[type(act)] = getattr(
                        type(self), '_' + type(act).__name__.lower())
                handler(self, act)
        self.arm(self.core.get_timer())

    def discard(self):
        """Stop carrying out actions; remove unfinished temporary files; return how many."""
        self.closed = True
        removed = 0
        for f, tmp in self.files.values():
            f.close()
            removed += _unlink(tmp)
        self.files.clear()
        return removed

    def _notice(self, act):
        self.error(act.text)

    def _temporary(self, name):
        self._seq += 1
        return os.path.join(self.downloads, '.%s.part.%s.%d' % (name, self.tag, self._seq))

    def _filedata(self, act):
        entry = self.files.get(act.op_id)
        try:
            if entry is None:
                tmp = self._temporary(act.name)
                entry = self.files[act.op_id] = (open(tmp, 'wb'), tmp)
            f = entry[0]
            if f.tell() != act.offset:       # resume from a new holder, or a restart
                f.seek(act.offset)
                f.truncate()
            f.write(act.data)
        except OSError as exc:       # e.g. disk full: fatal for this download, never resumed
            self.core.abort(act.op_id, 'cannot write %r: %s' % (act.name, exc), self.now())

    def _opdone(self, act):
        rec = act.record
        if rec['op'] != 'download':         # only a download has a file (see _filedata)
            return
        entry = self.files.pop(act.op_id, None)
        if entry is None and rec['ok']:        # an empty file: nothing arrived to write
            entry = (None, self._temporary(rec['name']))
            open(entry[1], 'wb').close()
        if entry is None:
            return
        f, tmp = entry
        try:
            if f is not None:
                f.close()
            if rec['ok']:
                size = os.stat(tmp).st_size
                if size != rec['bytes']:
                    raise OSError('wrote %d bytes, expected %d' % (size, rec['bytes']))
                os.replace(tmp, os.path.join(self.downloads, rec['name']))
                return
        except OSError as exc:
            rec.update(ok=False, error='%r: %s' % (rec['name'], exc))
        _unlink(tmp)


def _unlink(path):
    """Remove path if it exists; return 1 if it did."""
    try:
        os.unlink(path)
        return 1
    except OSError:
        return 0
