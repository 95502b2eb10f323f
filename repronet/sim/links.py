"""The simulated network: the topology's links as queues, wires and coin flips.

The model (DESIGN.md, "Simulation backend", states it for users):

* Every link is two directions, each read from the same TCLink keywords the emulator gets
  (``repronet.emu.linkemu_params.link_directions``: ``bw``, ``delay``, ``jitter``, ``loss``,
  ``max_queue_size``, ``params1``/``params2``), so a topology script needs no change.
* A direction is a port: a drop-tail FIFO of at most ``max_queue_size`` packets (default
  1,000, an interface's txqueuelen), serialised at ``bw`` (unshaped: no serialisation
  time), then ``delay`` plus one uniform draw in [-jitter, +jitter] of propagation (netem's
  default distribution, and the emulator's daemon's), with loss drawn per packet at the
  port where it is enqueued. Packets that share a port queue behind each other, so
  bandwidth sharing and queueing delay exist.
* A packet goes hop by hop along the shortest path (fewest links; ties broken by node
  names, so the route is the same in every run). Switches forward at no cost.
* A *train* is k back-to-back packets of one stream write (up to 64 KiB, like a TSO
  segment): it takes k slots of the queue and k packets' bytes of serialisation; each of
  its packets is lost with the port's probability, and the rest go on (the stream model
  resends only what was lost; a datagram of several fragments is lost with any). A port forwards a
  train packet by packet: it starts when the first packet is in and finishes no earlier
  than one packet after the last arrived, and jitter is one draw for the whole train. One
  event per train per hop, not per packet, keeps large transfers cheap.
* Randomness: one ``random.Random`` for the whole network, seeded from the run's seed and
  reseeded per point (as the emulator's delay daemons are), drawn in event order, so the
  same seed gives the same drops and jitter.
"""

import collections
import operator
import random

from repronet.emu.linkemu_params import link_directions

DEFAULT_QUEUE = 1000        # packets: an interface's default txqueuelen


def _refitting(slot, doc):
    """A Port property kept in slot whose every change sets the port's fits again (reads
    of it are a C attrgetter; the port's own paths read the slot)."""
    def put(port, value):
        setattr(port, slot, value)
        port._refit()
    return property(operator.attrgetter(slot), put, doc=doc)


class Port:
    """One direction of one link: queue, serialisation, propagation, loss."""

    __slots__ = ('src', 'dst', '_rate', 'delay', '_jitter', '_loss', '_limit', '_up', 'fits',
                 'busy_until', 'backlog', 'queued', 'sent', 'dropped', 'overflow', 'bytes',
                 'params')

    def __init__(self, src, dst, params):
        self.src, self.dst, self.params = src, dst, params
        self._rate = params.bw * 1e6 / 8 if params.bw else None    # bytes per second
        self.delay = params.delay_ms / 1000.0
        self._jitter = params.jitter_ms / 1000.0
        self._loss = params.loss / 100.0
        self._limit = params.max_queue_size or DEFAULT_QUEUE
        self.up = True                          # and fits
        self.busy_until = 0.0
        self.backlog = collections.deque()      # (time its last byte leaves, packets); queue()
        self.queued = 0                         # packets waiting or being serialised
        self.sent = self.dropped = self.overflow = self.bytes = 0

    def _refit(self):
        """fits from what decides it (Network.forward's short path): every one of up, rate,
        loss, jitter and limit sets it again when it changes (a fault step, a test), so that
        the short path never runs on a port that became down, unshaped, lossy or jittered,
        nor takes a train its queue no longer holds."""
        plain = self._up and self._rate is not None and not self._loss and not self._jitter
        self.fits = self._limit if plain else -1

    up = _refitting('_up', 'False while the link is down: everything offered is dropped.')
    rate = _refitting('_rate', 'Bytes per second, or None: unshaped.')
    loss = _refitting('_loss', 'The probability that a packet is lost here.')
    jitter = _refitting('_jitter', 'Seconds: the propagation delay varies by up to this.')
    limit = _refitting('_limit', 'Packets the queue holds.')

    def enqueue(self, first, last, nbytes, packets, rng):
        """Offer a train whose first packet arrives at time first and last at last; return
        (first, last, packets, bytes) at dst (fewer packets and bytes when some of the
        train's packets were lost here), or None if all of it was dropped.

        Packets are forwarded one by one (cut-through per train): the port starts sending
        when the first packet is here and cannot finish before the last one has arrived
        and been sent, so a 64 KiB train is not delayed by its own length at every hop.
        ``Network.forward`` has a short path of its own for an idle port (``fits``)."""
        if not self._up:
            self.dropped += packets
            return None
        backlog = self.backlog
        if backlog is None:
            backlog = self.backlog = collections.deque(self.queue())
        while backlog and backlog[0][0] <= first:
            self.queued -= backlog.popleft()[1]
        if self.queued + packets > self._limit:
            self.overflow += packets
            return None
        lost = 0
        if self._loss:
            lost = sum(1 for _ in range(packets) if rng.random() < self._loss)
            if lost == packets:
                self.dropped += packets
                return None
            self.dropped += lost
            nbytes -= nbytes * lost // packets
            packets -= lost
        start, finish = max(first, self.busy_until), last
        if self._rate is not None:
            one = nbytes / packets / self._rate
            finish = max(start + nbytes / self._rate, last + one)
            start += one
            self.busy_until = finish
            backlog.append((finish, packets))
            self.queued += packets
        self.sent += packets
        self.bytes += nbytes
        delay = self.delay
        if self._jitter:
            delay = max(0.0, delay + rng.uniform(-self._jitter, self._jitter))
        return start + delay, finish + delay, packets, nbytes

    def queue(self):
        """The trains queued or being sent, as [(time its last byte leaves, packets)] (some
        may have left by now). Network.forward's short path leaves backlog None for its
        train alone (busy_until, queued), which all before it have left, rather than
        empty a deque and fill it again for every train."""
        if self.backlog is None:
            return [(self.busy_until, self.queued)]
        return list(self.backlog)

    def record(self):
        """The port's counters for the manifest and tables."""
        return {'src': self.src, 'dst': self.dst, 'packets': self.sent,
                'dropped': self.dropped, 'overflow': self.overflow, 'bytes': self.bytes}


class Outcomes:
    """What Network.send calls when a train of packets arrives, is lost or partly lost."""

    __slots__ = ('arrived', 'lost', 'partial', 'packets')

    def __init__(self, arrived, lost, partial, packets):
        self.arrived, self.lost, self.partial = arrived, lost, partial
        self.packets = packets


class Network:
    """Hosts, switches and ports built from a mininet Topo; moves trains between hosts."""

    def __init__(self, engine, topo, seed=0):
        self.engine = engine
        self.rng = random.Random(seed)
        self.hosts = list(topo.hosts())
        self.switches = list(topo.switches())
        self.ports = {}             # (src, dst) -> Port
        self.neighbours = collections.defaultdict(list)
        for n1, n2, info in topo.links(withInfo=True):
            forward, backward = link_directions(info, n1, n2)
            self.ports[(n1, n2)] = Port(n1, n2, forward)
            self.ports[(n2, n1)] = Port(n2, n1, backward)
            self.neighbours[n1].append(n2)
            self.neighbours[n2].append(n1)
        for names in self.neighbours.values():
            names.sort()
        self._routes = {}
        self._switch_routes = {}
        self._host_set = set(self.hosts)
        self.stack_by_ip = {}       # ip -> stack.Stack (each Stack adds itself)
        self.delivered = 0          # packets that reached a host (the manifest's cpu record)
        self.on_delivery = None     # fn(packets) as they start the last hop (--sim-cost packet)
        self._forward = self.forward    # bound once: a train's every hop posts it

    def reseed(self, seed):
        """Draw this point's losses and jitter from its own seed."""
        self.rng.seed(seed)

    def route(self, src, dst):
        """The ports from host src to host dst (fewest hops, ties by name), or None."""
        key = (src, dst)
        if key not in self._routes:
            self._routes[key] = self._search(src, dst)
        return self._routes[key]

    def _search(self, src, dst):
        """Breadth-first search over the links; hosts do not forward.

        Between two hosts that each hang off one switch (the usual case), the search runs
        over the switches alone and the two host links are added: a star of 11,000 hosts
        would otherwise visit every host for every route. The path is the one the full
        search finds (same order of neighbours)."""
        hosts = self._host_set
        a, b = self.neighbours[src], self.neighbours[dst]
        if len(a) == 1 and len(b) == 1 and a[0] not in hosts and b[0] not in hosts \
                and src != dst:
            middle = self._switch_path(a[0], b[0])
            if middle is None:
                return None
            return [self.ports[(src, a[0])]] + middle + [self.ports[(b[0], dst)]]
        return self._bfs(src, dst, hosts)

    def _switch_path(self, a, b):
        """Ports from switch a to switch b through switches only (cached), or None."""
        key = (a, b)
        if key not in self._switch_routes:
            path = self._bfs(a, b, self._host_set, through_hosts=False)
            self._switch_routes[key] = path
        return self._switch_routes[key]

    def _bfs(self, src, dst, hosts, through_hosts=True):
        """Fewest-hop path src -> dst (neighbours in name order); hosts are never passed
        through, and not even entered when through_hosts is False."""
        parent = {src: None}
        frontier = collections.deque([src])
        while frontier:
            node = frontier.popleft()
            if node == dst:
                break
            if node != src and node in hosts:
                continue
            for nxt in self.neighbours[node]:
                if nxt not in parent and (through_hosts or nxt not in hosts or nxt == dst):
                    parent[nxt] = node
                    frontier.append(nxt)
        if dst not in parent:
            return None
        path, node = [], dst
        while parent[node] is not None:
            path.append(self.ports[(parent[node], node)])
            node = parent[node]
        return path[::-1]

    def send(self, src, dst, nbytes, packets, arrived, lost=None, partial=None):
        """Start a train of packets (nbytes on the wire) from host src to host dst;
        call arrived(time) when its last packet reaches dst whole, lost(time) where all of
        it is dropped, and partial(time, missing) when only some packets arrived (without
        partial, a train that lost any packet counts as lost: a datagram's fragments)."""
        self.send_train(src, dst, nbytes, Outcomes(arrived, lost, partial, packets))

    def send_train(self, src, dst, nbytes, train):
        """send() with the callbacks as an object's: train.arrived(time), train.lost(time)
        and train.partial(time, missing) (each may be None but arrived), and train.packets.
        A stream's train is one such object, where three closures per train cost more than
        moving it."""
        self.send_path(self.route(src, dst), nbytes, train)

    def send_path(self, path, nbytes, train):
        """send_train() along path, route()'s answer for its two hosts (None: no route),
        which a connection asks for once rather than once per train."""
        if not path:
            if train.lost is not None:
                self.engine.at(self.engine.now, train.lost, self.engine.now)
            return
        now = self.engine.now
        self.forward(path, 0, now, now, nbytes, train.packets, train)

    def forward(self, path, i, first, last, nbytes, packets, train):
        """Enqueue the train at port i of its path (``Port.enqueue``); schedule the next hop
        or the end (posted: nothing cancels them, ``Engine.post``). send_path(path, nbytes,
        train) is forward(path, 0, now, now, nbytes, train.packets, train) for a path
        that is not empty: what a connection's write calls, one call less (``Conn.send``).

        The common case takes a short path here rather than enqueue: a shaped port that
        is up, without loss or jitter, idle (everything queued before has left: its
        backlog empties, as enqueue would pop it entry by entry) and a train its queue
        holds. Whether the port is such is read once, ``Port.fits``: the most packets a
        train may have to take it (the queue's limit), or -1 when none may (down,
        unshaped, lossy or jittered). It skips the backlog walk, the loss and jitter
        draws, two max() calls and enqueue's call and answer; the port keeps its one train
        as backlog None (``Port.queue``). 99 % of a DHT search's trains find their port
        idle, and the port was a third of the network's cost. Same state and answer as
        enqueue's (tests/test_sim_links_idle.py)."""
        engine, port = self.engine, path[i]
        if packets > port.fits or port.busy_until > first:
            times = port.enqueue(first, last, nbytes, packets, self.rng)
            if times is None:
                if train.lost is not None:
                    train.lost(engine.now)
                return
            first, last, packets, nbytes = times
        else:                           # idle: the short path
            rate = port._rate
            one = nbytes / packets / rate
            finish = first + nbytes / rate
            if finish < last + one:
                finish = last + one
            port.backlog = None
            port.busy_until, port.queued = finish, packets
            port.sent += packets
            port.bytes += nbytes
            delay = port.delay
            first, last = first + one + delay, finish + delay
        i += 1
        if i < len(path):
            engine.post(first, self._forward, (path, i, first, last, nbytes, packets, train))
            return
        self.delivered += packets
        if self.on_delivery is not None:
            self.on_delivery(packets)
        if packets == train.packets:
            engine.post(last, train.arrived, (last,))
        elif train.partial is not None:
            engine.post(last, train.partial, (last, train.packets - packets))
        elif train.lost is not None:
            engine.post(last, train.lost, (last,))

    def one_way(self, src, dst):
        """Propagation delay src -> dst without queueing or jitter (seconds), or None."""
        path = self.route(src, dst)
        return None if path is None else sum(p.delay for p in path)

    def link_status(self, a, b, up):
        """Bring both directions of the link a-b down or up (packets on it are dropped)."""
        for key in ((a, b), (b, a)):
            if key not in self.ports:
                raise ValueError('no link %s-%s in the topology' % (a, b))
            self.ports[key].up = up

    def records(self):
        """Every port's configuration and counters (manifest: mechanisms.links)."""
        out = []
        for (src, dst), port in sorted(self.ports.items()):
            rec = {'src': src, 'dst': dst, 'mechanism': 'sim'}
            rec.update(port.params.as_record())
            out.append(rec)
        return out
