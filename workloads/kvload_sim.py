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


class SimKvload:
    """One load-generator node: connect all, (barrier), run, summary, exit."""

    def __init__(self, env, args, run_class):
        args.loop = 'sim'
        if args.latencies is not None:
            args.latencies = os.path.basename(args.latencies)
        self.env, self.args = env, args
        self.run = run_class(args, env.log)
        self.links = []
        self.opened = 0
        self.timer = None
        self.over = False

    def start(self):
        env, a = self.env, self.args
        env.on_stop(lambda: self._end('interrupted by SIGTERM'))
        now_ns, wall = self._now_ns, env.now
        for n in range(a.clients):
            client = KvClient(a.client_base + n, self.run._workload, a.ops, a.requests,
                              a.pipeline, self.run.phase_ended, Done(self._client_ended),
                              clock_ns=now_ns, wall=wall)
            self.run.clients.append(client)
            link = Link(client, self.connected, self.refused)
            self.links.append(link)
            env.connect(a.host, a.port, link)
        self.timer = env.call_at(env.now() + a.timeout, self._connect_timeout)

    def _now_ns(self):
        return round(self.env.now() * 1e9)

    def connected(self):
        self.opened += 1
        if self.opened < len(self.links) or self.over:
            return
        self.timer.cancel()
        if self.args.barrier:
            self.env.barrier(self._go, **self.run.ready_fields())
        else:
            self.env.log.write('ready', flush=True, **self.run.ready_fields())
            self._go()

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
        self.run.overdue(self._now_ns())
        if not self.over:
            self.timer = self.env.call_at(self.env.now() + self.run.every(), self._watch)

    def _client_ended(self):
        if all(c.done.done() for c in self.run.clients):
            self._end(None)

    def _end(self, problem):
        if self.over:
            return
        self.over = True
        if self.timer is not None:
            self.timer.cancel()
        self.env.exit(self.run.end(problem, self.env.error))
