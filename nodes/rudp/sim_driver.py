"""The reliable-UDP programs inside the simulator (`repronet.sim`), and the part of driving a
core that the asyncio driver shares with them.

`Driving` is what both drivers do with a core: hand it each datagram and the time, send what
it queued (the receiver's first answers to whoever sent, afterwards only to its peer), keep
one timer at its ``get_timer()`` and notice when it ends. `nodes.rudp.driver.CoreProtocol`
supplies a UDP socket and ``time.monotonic()``; `SimDriving` here supplies the simulated
host's datagrams (``env.bind_udp``/``env.sendto``) and virtual time, so a simulated transfer
runs the same cores through the same steps.

`SimSend` and `SimReceive` are what `send.simulate` and `recv.simulate` hand their parsed
flags to: the same ``ready``/``done``/``error`` records (``t`` in virtual seconds) and exit
statuses as the asyncio programs. What differs, and why:

* the session id and the sender's UDP port come from ``env.rng`` (the node's seeded random
  source), not ``os.urandom`` and the kernel, so a seed repeats a run byte for byte;
* no timer is rounded to ``SPIN``: virtual time has no scheduling delay to avoid;
* port 0 (any free port) is not simulated for the receiver: one line and status 1.

Nothing here reads a clock or a random source of its own or opens a socket
(`tests/test_rudp_sim.py` checks the imports).
"""

from nodes.rudp.receiver_core import Receiver
from nodes.rudp.sender_core import Sender

SIM_PORTS = (32768, 60999)      # Linux's default ip_local_port_range


class Driving:
    """Runs one core: subclasses give ``clock()``, ``transmit(raw, addr)``, ``arm(due,
    now)`` (returns a handle with ``cancel()`` that calls ``fire()``) and ``finish(state)``."""

    def __init__(self, core, after=None, peer=None):
        self.core, self.after, self.peer = core, after, peer
        self.timer = None

    def datagram_received(self, data, addr):
        if self.peer is not None and addr != self.peer:
            self.core.stats['dropped_other_address'] += 1
            return
        self.core.receive(data, self.clock())
        if self.peer is None:
            # the receiver binds to the address whose META it accepted, not to whatever
            # arrived first; an answer before that (a refusal) goes back to its sender
            if getattr(self.core, 'session', None) is not None:
                self.peer = addr
            for raw in self.core.datagrams_to_send(self.clock()):
                self.transmit(raw, addr)
        self.pump()

    def pump(self):
        """After an input: file events, sends, the next timer, or the end."""
        now = self.clock()
        if self.after is not None:
            self.after(now)
        if self.peer is not None:
            for raw in self.core.datagrams_to_send(now):
                self.transmit(raw, self.peer)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.core.state in ('done', 'failed'):
            self.finish(self.core.state)
            return
        due = self.core.get_timer()
        if due is not None:
            self.timer = self.arm(due, now)

    def fire(self, spin=0.0):
        """The timer is due: the core handles it unless it is more than spin early."""
        self.timer = None
        now = self.clock()
        due = self.core.get_timer()
        if due is not None and due <= now + spin:
            self.core.handle_timer(now)
        self.pump()


class SimDriving(Driving):
    """`Driving` over the simulated host's UDP port: ``ended(state)`` is called once."""

    def __init__(self, env, port, core, ended, after=None, peer=None):
        super().__init__(core, after, peer)
        self.env, self.port, self.ended = env, port, ended
        self.over = False
        env.bind_udp(port, self.datagram_received)

    def clock(self):
        return self.env.now()

    def transmit(self, raw, addr):
        self.env.sendto(raw, addr, self.port)

    def arm(self, due, now):
        return self.env.call_at(due, self.fire)

    def finish(self, state):
        if not self.over:
            self.over = True
            self.ended(state)

    def stop(self):
        """SIGTERM: the core fails as the asyncio programs make it fail."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not self.over:
            self.core._fail('stopped by a signal')
            self.finish(self.core.state)


class SimSend:
    """One sender node: ``load(path) -> (data, sha256, close)`` maps and hashes the file;
    ``report(sender, args, digest, log) -> status`` logs the end as send.py does."""

    def __init__(self, env, args, load, report):
        self.env, self.args, self.report = env, args, report
        self.data, self.digest, self.close = load(args.file)
        session = env.rng.getrandbits(64)
        self.sender = Sender(session, memoryview(self.data), self.digest, args.name,
                             env.now(), block=args.block, payload=args.payload,
                             window=args.window, rate_mbps=args.rate, timeout=args.timeout)
        self.drive = SimDriving(env, env.rng.randint(*SIM_PORTS), self.sender, self._ended,
                                peer=(args.dst, args.port))

    def start(self):
        self.env.on_stop(self.drive.stop)
        if self.args.barrier:
            self.env.barrier(self._go)
        else:
            self.env.call_soon(self._go)

    def _go(self):
        now = self.env.now()
        self.sender.started = now
        self.sender.start(now)
        self.drive.pump()

    def _ended(self, state):
        status = self.report(self.sender, self.args, self.digest, self.env.log)
        del self.sender.data
        self.close()
        self.env.exit(status)


class SimReceive:
    """The receiver node: one transfer after another (or one, with --once) on its port;
    ``sink(out, core)`` is recv.FileSink, ``report(core, sink, log) -> ok`` its record."""

    def __init__(self, env, args, sink, report):
        self.env, self.args, self.sink, self.report = env, args, sink, report
        self.drive = self.files = None
        self.stopping = False

    def start(self):
        if self.args.port == 0:
            self.env.error('rudp.recv: port 0 (any free port) is not simulated; give --port '
                           'a port')
            self.env.exit(1)
            return
        self.env.on_stop(self._stop)
        self.env.log.write('ready', flush=True, port=self.args.port)
        self._next()

    def _next(self):
        a = self.args
        core = Receiver(self.env.now(), timeout=a.timeout, linger=a.linger,
                        max_size=a.max_bytes, reorder_wait=a.reorder_wait)
        self.files = self.sink(a.out, core)
        self.drive = SimDriving(self.env, a.port, core, self._ended, after=self.files)

    def _stop(self):
        self.stopping = True
        self.drive.stop()

    def _ended(self, state):
        ok = self.report(self.drive.core, self.files, self.env.log)
        self.files.close()
        if self.args.once or self.stopping:
            self.env.exit(0 if ok else 1)
        else:
            self._next()
