"""A node program inside the simulator: what its ``simulate(env, argv)`` gets, and what the
runner tracks in place of an operating-system process.

Why this shape: in emulation a node is ``python -m nodes.x ARGS`` on a host, with a JSON-lines
log on stdout, errors on stderr, a ``ready`` line, a barrier on stdin and signals. The same
``argv`` reaches the simulator; the module's ``simulate(env, argv)`` parses it with the
program's own parser (so a bad flag fails the same way) and runs the program's sans-I/O core
through ``env``, which offers the same things in virtual time:

* ``env.now()``, ``env.call_at(when, fn, *args)`` / ``env.call_soon`` (a handle with
  ``cancel()``; ``env.retime(handle, when, fn, *args)`` moves one), ``env.rng`` (a
  ``random.Random`` of the node's own, seeded from the run's seed and the node's name);
* ``env.listen(port, accept)``, ``env.connect(ip, port, protocol, mss=None)``, ``env.bind_udp(port,
  received)``, ``env.sendto(data, addr, sport)``: the host's simulated stack
  (``repronet.sim.streams``);
* ``env.log`` (a ``JsonLog``-like writer: ``write(event, t=None, flush=False, **fields)``,
  ``t`` defaulting to the virtual time) into ``logs/<name>.jsonl``; ``env.error(text)`` into
  ``logs/<name>.err``;
* ``env.ready(**fields)`` (the readiness line), ``env.barrier(fn, **fields)`` (ready, then
  fn() at the runner's ``go``), ``env.on_stop(fn)`` (what SIGTERM does: fn() must end with
  ``env.exit(code)``), ``env.exit(code)``.

Every callback into the program goes through ``_call``: none runs after the node exited or
was killed, callbacks wait while the node is paused (SIGSTOP: its connections stay up and
nothing answers) and run in order on ``resume``, and, with a processing-cost model
(``repronet.sim.cpu``), each waits for the node's one thread and one of the machine's cores.
"""

import os
import random
import zlib

from repronet import logline


class SimNodeError(RuntimeError):
    """A simulated node did not become ready or did not end in time (one sentence)."""


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


class _Log:
    """JsonLog's interface and lines (``repronet.logline``), in virtual time, into a file that is open only while written:
    a simulation of 11,000 nodes would otherwise hold 11,000 descriptors. Lines wait in
    memory until 64 KiB, a flush=True record or the node's exit."""

    LIMIT = 65536

    def __init__(self, proc, path):
        self.proc, self.path = proc, path
        self.lines, self.size = [], 0
        os.close(os.open(path, _CREATE, 0o666))     # open(path, 'w').close(), less

    def write(self, event, t=None, flush=False, **fields):
        self.text(logline.line(self.proc.engine.now if t is None else t, event, fields), flush)
        if event == 'ready':
            self.proc.is_ready = True

    def records(self, recs):
        """write(**rec) of each of recs, records that hold their own t and event (a client's
        op records at its end), as one text (``logline.records``)."""
        self.text(logline.records(recs))

    def text(self, line, flush=False):
        """Append a line (it ends with a newline)."""
        self.lines.append(line)
        self.size += len(line)
        if flush or self.size >= self.LIMIT:
            self.spill()

    def spill(self):
        """Write what waits to the file."""
        if self.lines:
            with open(self.path, 'a') as f:
                f.write(''.join(self.lines))
            self.lines, self.size = [], 0


class _Guarded:
    """A protocol whose callbacks pass through the node's _call (paused, dead, CPU)."""

    __slots__ = ('proc', 'inner', 'fresh')

    def __init__(self, proc, inner):
        self.proc, self.inner = proc, inner
        self.fresh = True           # no bytes received yet (the CPU model's first request)

    def connection_made(self, conn):
        self.proc.conns[conn] = None
        self.proc._call(self.inner.connection_made, conn)

    def data_received(self, conn, data):
        proc = self.proc
        if proc.direct:
            self.inner.data_received(conn, data)        # _call's common case, inlined
        elif proc.cpu is not None:
            first, self.fresh = self.fresh, False
            proc._call_sized(len(data), self.inner.data_received, conn, data, first=first)
        else:
            proc._call_sized(0, self.inner.data_received, conn, data)

    def connection_lost(self, conn, why):
        self.proc.conns.pop(conn, None)
        self.proc._call(self.inner.connection_lost, conn, why)


class SimProcess:
    """One node: its program's environment (``env``) and its runner-side handle."""

    def __init__(self, backend, host, name, argv, log_dir, suffix='.jsonl'):
        self.backend, self.engine = backend, backend.engine
        self.host, self.name, self.argv = host, name, list(argv)
        self.stack = backend.stacks[host.name]
        self.pid = None
        self.returncode = None
        self.is_ready = False
        self.wants_ready = True     # False: started without a readiness condition
        self.paused = False
        self.held = []
        self.conns = {}             # open connections in the order they opened (a dict:
                                    # closing them in a set's order could differ per run)
        self.ports = []
        self.udp_ports = []
        self.released = None        # barrier callback, until go()
        self._events = []           # its timers, cancelled when it ends (a pending one
        self._prune_at = 64         # would keep the whole node alive until it was due)
        self.stop_fn = None
        self.log_path = log_dir / (name + suffix)
        self.err_path = log_dir / (name + '.err')
        self.log = _Log(self, self.log_path)
        self._err = _Log(self, self.err_path)
        seed = zlib.crc32(name.encode()) ^ (backend.seed & 0xffffffff)
        self.rng = random.Random(seed)
        self.cpu = backend.cpu
        self._redirect()

    # -- the program's side (env) -------------------------------------------------------
    def now(self):
        return self.engine.now

    def call_at(self, when, fn, *args):
        return self._track(self.engine.at(when, self._call, fn, *args))

    def retime(self, event, when, fn, *args):
        """The same as ``event.cancel()`` (event: call_at's, or None) then
        ``call_at(when, fn, *args)``, which it must have been made with; cheaper for a
        timer moved after every reply (``Engine.retime``). Returns the handle to keep."""
        if event is None or not event.alive:
            return self.call_at(when, fn, *args)
        moved = self.engine.retime(event, when)
        return moved if moved is event else self._track(moved)

    def _track(self, event):
        self._events.append(event)
        if len(self._events) > self._prune_at:      # keep only the pending ones
            self._events = [e for e in self._events if e.alive]
            self._prune_at = max(64, 2 * len(self._events))
        return event                # cancel() before it fires and it never runs

    def call_soon(self, fn, *args):
        return self.call_at(self.engine.now, fn, *args)

    def listen(self, port, accept):
        """accept(conn) -> protocol for each connection to this host's port."""
        self.stack.listen(port, lambda conn: _Guarded(self, accept(conn)))
        self.ports.append(port)

    def connect(self, ip, port, protocol, mss=None):
        conn = self.stack.connect(ip, port, _Guarded(self, protocol), mss)
        self.conns[conn] = None
        return conn

    def bind_udp(self, port, received):
        self.stack.bind_udp(port, lambda data, src: self._call_sized(len(data), received,
                                                                    data, src))
        self.udp_ports.append(port)

    def sendto(self, data, addr, sport=0):
        if self.returncode is None:
            self.stack.sendto(data, addr, sport)

    def error(self, text):
        self._err.text(text.rstrip() + '\n', flush=True)

    def ready(self, **fields):
        self.log.write('ready', **fields)

    def barrier(self, fn, **fields):
        """Log ready (with fields); call fn() when the runner releases the barrier (go)."""
        self.released = fn
        self.log.write('ready', **fields)

    def on_stop(self, fn):
        self.stop_fn = fn

    def exit(self, code=0):
        """The program ends: close its sockets and files; nothing of it runs again."""
        if self.returncode is not None:
            return
        self.returncode = code
        self._redirect()
        self.engine.signal()        # a stop condition waiting for this may be true now
        if self.cpu is not None:
            self.cpu.exited(self)
        for event in self._events:
            event.cancel()
        self._events = []
        self.held = []
        self._release_sockets()
        self.log.spill()
        self._err.spill()

    # -- the runner's side (like repronet.emu.process.NodeProcess) -----------------------
    def start(self, simulate):
        """Run the program's simulate(env, argv) now; a usage error ends it with 2."""
        import contextlib
        import io
        buf = io.StringIO()
        try:
            with contextlib.redirect_stderr(buf), contextlib.redirect_stdout(buf):
                simulate(self, self.argv)
        except SystemExit as e:
            self.error(buf.getvalue())
            self.exit(e.code if isinstance(e.code, int) else 2)
            return
        if buf.getvalue():
            self.error(buf.getvalue())

    def wait_ready(self, timeout=60):
        """Run the simulation until the node logged ready (virtual timeout); at once for a
        node started without a readiness condition (as NodeProcess does)."""
        if not self.wants_ready:
            return
        self.backend.run_until(lambda: self.is_ready or self.returncode is not None, timeout)
        if not self.is_ready:
            raise SimNodeError('%s did not become ready within %g s of virtual time%s' % (
                self.name, timeout, '' if self.returncode is None
                else ' (it exited with %s; see %s)' % (self.returncode, self.err_path)))

    def go(self):
        """Release this node's barrier."""
        fn, self.released = self.released, None
        if fn is not None and self.returncode is None:
            self.call_soon(fn)

    def wait(self, timeout=None):
        """Run the simulation until the node ended; return its exit status (None if not)."""
        self.backend.run_until(lambda: self.returncode is not None, timeout)
        return self.returncode

    def poll(self):
        return self.returncode

    def stop(self, grace=5.0):
        """SIGTERM: the program's stop handler runs (or it just ends); then wait."""
        if self.returncode is not None:
            return self.returncode
        self.resume()
        if self.stop_fn is None:
            self.exit(-15)
        else:
            self._call(self.stop_fn)
            self.wait(grace)
            if self.returncode is None:
                self.kill()
        return self.returncode

    def kill(self):
        """SIGKILL: the node ends now; its connections are reset by the host's kernel."""
        if self.returncode is None:
            self.held.clear()
            self.exit(-9)

    def pause(self):
        """SIGSTOP: nothing of the node runs; what arrives waits."""
        self.paused = True
        self._redirect()

    def resume(self):
        """SIGCONT: what waited runs now, in order."""
        self.paused = False
        self._redirect()
        held, self.held = self.held, []
        for nbytes, first, fn, args in held:     # charged then, bytes and all
            self.engine.at(self.engine.now, self._call_held, nbytes, first, fn, args)

    # -- internals ----------------------------------------------------------------------
    def _redirect(self):
        """Set direct: True when a callback of the program runs at once, as it is (no CPU
        model, not ended, not paused), so that _call and a connection's data_received read
        one attribute rather than three. Called wherever one of those changes: cpu is set
        once, returncode by exit(), paused by pause() and resume()."""
        self.direct = self.cpu is None and self.returncode is None and not self.paused

    def _call(self, fn, *args):
        """Run a callback of the program unless it ended; hold it while paused; charge CPU."""
        if self.direct:
            fn(*args)                       # the common case, without a second call
        else:
            self._call_sized(0, fn, *args)

    def _call_sized(self, nbytes, fn, *args, first=False):
        """_call for a callback that received nbytes (charged per byte as well); first: the
        first bytes of a connection."""
        if self.returncode is not None:
            return
        if self.paused:
            self.held.append((nbytes, first, fn, args))
            return
        if self.cpu is not None:
            start = self.cpu.claim(self, nbytes, first)
            if start is not None:           # run once a core and this node's thread are free
                self.engine.at(start, self._run_charged, fn, args)
                return
        fn(*args)

    def _call_held(self, nbytes, first, fn, args):
        self._call_sized(nbytes, fn, *args, first=first)

    def _run_charged(self, fn, args):
        if self.returncode is None and not self.paused:
            fn(*args)
        elif self.paused:
            self.held.append((0, False, fn, args))

    def _release_sockets(self):
        for port in self.ports:
            self.stack.unlisten(port)
        for port in self.udp_ports:
            self.stack.udp.pop(port, None)
        for conn in list(self.conns):
            conn.abort()
        self.conns.clear()


def stop_all(nodes, grace=5.0):
    """Stop nodes in this order (as repronet.emu.process.stop_all); return {name: status}.
    Each stop runs virtual time until that node ended, so the grace is each node's."""
    return {node.name: node.stop(grace=grace) for node in nodes}
