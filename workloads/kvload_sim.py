"""kvload inside the simulator (`repronet.sim`): the same clients, the same records, in
virtual time.

`kvload.simulate` parses the real command line (a bad flag fails the same way, exit 2) and
hands it here with kvload's `_Run` (phase lines, timeouts, summary, exit sentence). Each
logical client is the real `kvload_client.KvClient` (requests built, replies parsed by
hiredis and judged, ``--pipeline`` requests in flight), given a `_Link` where asyncio gives
it a socket transport, and virtual time where asyncio gives it ``perf_counter_ns`` and
``time.time``: latencies, ``start``/``end`` and ``total_ms`` are virtual.

What differs from the asyncio program, and why:

* ``loop`` is ``sim`` in its records; ``cpu_s``, ``run_cpu_s`` and ``connect_cpu_s`` are
  null (the process's CPU is not the simulated host's; ``--sim-cost`` models that);
* ``latencies`` in the summary is the file's name, not its path (the file sits in the run's
  ``logs/``, and the results folder's path would make two runs of one seed differ);
* a refused connection is reported as soon as it is refused, not after every client tried;
* the barrier is the runner's (``env.barrier``), not a ``go`` line on stdin.

Nothing here reads a clock or a random source or opens a socket (`tests/test_kv_sim.py`).
"""

import os

from workloads.kvload_client import KvClient


class Done:
    """The part of an asyncio future a load generator's client uses: ``done()``,
    ``set_result()``; ``ended()`` hears each client's end."""

    def __init__(self, ended):
        self.ended, self.is_done = ended, False

    def done(self):
        return self.is_done

    def set_result(self, reason):
        self.is_done = True
        self.ended()


class Link:
    """One connection of a load generator's client: the simulated stream's protocol on one
    side, the asyncio transport operations the client (an asyncio Protocol: KvClient,
    kvmix's ServerConn) uses on the other: write, close, get_extra_info. ``opened()`` once
    connected, ``refused(why)`` if it never was."""

    def __init__(self, client, opened, refused):
        self.client, self.opened, self.refused = client, opened, refused
        self.conn = None

    def connection_made(self, conn):
        self.conn = conn
        self.client.connection_made(self)
        self.opened()

    def data_received(self, conn, data):
        self.client.data_received(data)

    def connection_lost(self, conn, why):
        if self.conn is None:
            self.refused(why)
        else:
            self.client.connection_lost(None if why is None else ConnectionResetError(why))

    def write(self, data):
        self.conn.send(data)

    def close(self):
        self.conn.close()

    def get_extra_info(self, name, default=None):
        return default          # no socket: nothing to set TCP_NODELAY on


class SimLoad:
    """What a simulated load generator's node (kvload's, kvmix's) does around its clients,
    once for both: the records say ``loop: sim`` and name the latencies file alone; SIGTERM
    ends the run; once connected it waits at the runner's barrier (``--barrier``) or logs
    ready, then ``_go()``; the run ends once (``_end``): the pending timeout (``timer``) is
    cancelled, ``_summarise(problem, error)`` logs the summary and gives the exit status."""

    def __init__(self, env, args):
        args.loop = 'sim'
        if args.latencies is not None:
            args.latencies = os.path.basename(args.latencies)
        self.env, self.args = env, args
        self.timer = None           # the pending timeout, cancelled at the end
        self.over = False

    def clock_ns(self):
        """The virtual time in integer nanoseconds (the clients' clock)."""
        return round(self.env.now() * 1e9)

    def _end_on_sigterm(self):
        self.env.on_stop(lambda: self._end('interrupted by SIGTERM'))

    def _ready(self, fields):
        """Every connection is open: the barrier, or the ready line; then _go()."""
        if self.args.barrier:
            self.env.barrier(self._go, **fields)
        else:
            self.env.log.write('ready', flush=True, **fields)
            self._go()

    def _end(self, problem):
        """End the run once (problem: why, or None): summary, then the exit status."""
        if self.over:
            return
        self.over = True
        if self.timer is not None:
            self.timer.cancel()
        self.env.exit(self._summarise(problem, self.env.error))


class SimKvload(SimLoad):
    """One load-generator node: connect all, (barrier), run, summary, exit."""

    def __init__(self, env, args, run_class):
        super().__init__(env, args)
        self.run = run_class(args, env.log)
        self.links = []
        self.opened = 0

    def start(self):
        env, a = self.env, self.args
        self._end_on_sigterm()
        for n in range(a.clients):
            client = KvClient(a.client_base + n, self.run._workload, a.ops, a.requests,
                              a.pipeline, self.run.phase_ended, Done(self._client_ended),
                              clock_ns=self.clock_ns, wall=env.now)
            self.run.clients.append(client)
            link = Link(client, self.connected, self.refused)
            self.links.append(link)
            env.connect(a.host, a.port, link)
        self.timer = env.call_at(env.now() + a.timeout, self._connect_timeout)

    def connected(self):
        self.opened += 1
        if self.opened < len(self.links) or self.over:
            return
        self.timer.cancel()
        self._ready(self.run.ready_fields())

    def refused(self, why):
        self._end('cannot connect to %s:%d: %s' % (self.args.host, self.args.port, why))

    def _connect_timeout(self):
        self._end('cannot connect to %s:%d: no connection within %g s' % (
            self.args.host, self.args.port, self.args.timeout))

    def _go(self):
        for c in self.run.clients:
            c.start()
        self._watch()

    def _watch(self):
        self.run.overdue(self.clock_ns())
        if not self.over:
            self.timer = self.env.call_at(self.env.now() + self.run.every(), self._watch)

    def _client_ended(self):
        if all(c.done.done() for c in self.run.clients):
            self._end(None)

    def _summarise(self, problem, error):
        return self.run.end(problem, error)
