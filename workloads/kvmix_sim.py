"""kvmix inside the simulator (`repronet.sim`): the same clients, routing and records, in
virtual time.

`kvmix.simulate` parses the real command line (a bad flag fails the same way, exit 2) and
hands it here. `SimKvmix` is `kvmix_run.Shared` (the slot map, latencies, timeouts, the
end, the summary) driven by simulated streams: discovery asks the entry points for
``CLUSTER SLOTS`` in order (`_Probe`), then every logical client (the real
`kvmix_client.MixClient`: plan, routing, ``-MOVED`` followed, replies judged by hiredis)
opens its connection to every server (the real ``ServerConn`` over a `kvload_sim.Link`),
logs ready (or waits at the runner's barrier), runs for ``--duration`` virtual seconds or
``--requests``, and logs the same summary.

What differs from the asyncio program, and why:

* ``loop`` is ``sim``; ``cpu_s``, ``run_cpu_s`` and ``connect_cpu_s`` are null (the
  process's CPU is not the simulated host's; ``--sim-cost`` models that);
* ``latencies`` in the summary is the prefix's file name, not its path (the results
  folder's path would make two runs of one seed differ);
* no open-file limit: a simulated host has none;
* a refused connection is reported as soon as it is refused.

Nothing here reads a clock or a random source or opens a socket (`tests/test_kvmix_sim.py`).
"""

import hiredis

from nodes.dht.ring import parse_addr
from workloads.kvload_sim import Done, Link, SimLoad
from workloads.kvmix_client import MixClient, RouteError, SlotMap
from workloads.kvmix_run import CLUSTER_SLOTS, MAX_DISCOVERY_REPLY, Shared


class _Probe:
    """One CLUSTER SLOTS over a connection of its own: ``answered(reply)`` or
    ``skipped(reason)``, once."""

    def __init__(self, answered, skipped):
        self.answered, self.skipped = answered, skipped
        self.parser, self.received = hiredis.Reader(), 0
        self.conn, self.over = None, False

    def connection_made(self, conn):
        self.conn = conn
        conn.send(CLUSTER_SLOTS)

    def data_received(self, conn, data):
        self.received += len(data)
        if self.received > MAX_DISCOVERY_REPLY:
            self.give_up('sent more than %d bytes' % MAX_DISCOVERY_REPLY)
            return
        self.parser.feed(data)
        try:
            reply = self.parser.gets()
        except hiredis.ProtocolError as exc:
            self.give_up(str(exc))
            return
        if reply is not False and not self.over:
            self.over = True
            conn.close()
            self.answered(reply)

    def connection_lost(self, conn, why):
        self.conn = None
        self.give_up(why or 'closed the connection')

    def give_up(self, reason):
        """Stop waiting: the connection goes, skipped(reason) is told (once)."""
        if not self.over:
            self.over = True
            if self.conn is not None:
                self.conn.abort()
            self.skipped(reason)


class SimKvmix(SimLoad, Shared):
    """One kvmix node: discover, connect every client to every server, (barrier), run,
    summary, exit. Its ``timer`` is the discovery's or the connections' deadline."""

    def __init__(self, env, args, plan):
        SimLoad.__init__(self, env, args)
        Shared.__init__(self, args, env.log)
        self.plan = plan
        self.stage = 'discover'         # discover | connect | run
        self.conns, self.opened = [], 0
        self.reasons = []

    # what MixClient asks of its run (and clock_ns(), SimLoad's)
    def new_done(self):
        return Done(self._client_ended)

    def open(self, conn, addr, failed):
        """Connect conn (a ServerConn); failed(reason) and, before the run, the end."""
        def refused(why):
            failed(why)
            if self.stage == 'connect':
                self._end('cannot connect to %s: %s' % (addr, why))
        host, port = parse_addr(addr)
        self.env.connect(host, port, Link(conn, self._opened, refused))

    # the steps
    def start(self):
        self._end_on_sigterm()
        self._discover(0)

    def _discover(self, i):
        entries, timeout = self.args.entries, self.args.timeout
        if i == len(entries):
            self._end('no server of --servers answered (%s)' % '; '.join(self.reasons))
            return
        host, port = parse_addr(entries[i])

        def skipped(reason):
            self.timer.cancel()
            self.reasons.append('%s: %s' % (entries[i], reason))
            self._discover(i + 1)
        probe = _Probe(lambda reply: self._discovered(entries[i], host, reply), skipped)
        self.env.connect(host, port, probe)
        self.timer = self.env.call_at(self.env.now() + timeout, probe.give_up,
                                         'no reply within %g s' % timeout)

    def _discovered(self, entry, host, reply):
        self.timer.cancel()
        if isinstance(reply, hiredis.ReplyError):
            self.slots, self.mode = SlotMap.single(entry), 'single'
        else:
            try:
                self.slots, self.mode = SlotMap.from_cluster_slots(reply, host), 'cluster'
            except RouteError as exc:
                self._end('cannot route by %s: %s' % (entry, exc))
                return
        self._connect()

    def _connect(self):
        a = self.args
        self.stage = 'connect'
        for n in range(a.clients):
            plan, requests = self.plan(a, a.keyspace, a.client_base + n)
            self.clients.append(MixClient(a.client_base + n, a.keyspace, plan, requests,
                                          a.pipeline, self, versioned=a.phase == 'mix'))
        self.conns = [c.conn(i) for c in self.clients for i in range(len(self.slots.addrs))]
        self.timer = self.env.call_at(self.env.now() + a.timeout, self._connect_timeout)

    def _connect_timeout(self):
        late = next(c for c in self.conns if c.transport is None)
        self._end('cannot connect to %s: no connection within %g s' % (
            late.addr, self.args.timeout))

    def _opened(self):
        self.opened += 1
        if self.stage != 'connect' or self.opened < len(self.conns) or self.over:
            return
        self.timer.cancel()
        self.stage = 'ready'
        self._ready(self.ready_fields(dataset=self.args.dataset, **self.args.dataset_info))

    def _go(self):
        self.stage = 'run'
        for c in self.clients:
            c.start()
        self._watch()
        if self.args.duration is not None:
            self.env.call_at(self.env.now() + self.args.duration, setattr, self,
                             'stopping', True)
        self._client_ended()

    def _watch(self):
        if not self.over:
            self._timer = self.env.call_at(self.env.now() + self.check(self.clock_ns()),
                                           self._watch)

    def _client_ended(self):
        if self.stage == 'run' and not self.over and all(c.done.done() for c in self.clients):
            self._end(None)

    def _summarise(self, problem, error):
        return self.finish(problem, error)
