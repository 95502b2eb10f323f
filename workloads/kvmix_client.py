"""The clients of ``workloads.kvmix``: slot routing, one logical client, its server connections.

Routing (``SlotMap``) follows Redis Cluster's client rules (cluster spec, "Redirection
and resharding"): the map slot -> server comes from ``CLUSTER SLOTS``; a request goes to
the owner of its key's slot (``nodes.kv.cluster.key_slot``: CRC16 mod 16384, {hash
tags}); a ``-MOVED <slot> <host>:<port>`` reply means the map is stale: that slot's entry
is updated (for every client of the process: the map is shared) and the request is sent
again to the new owner, at most ``MAX_REDIRECTS`` times (then it counts as a ``MOVED``
error).  ``-ASK`` (a slot half migrated) is not followed: it counts as an ``ASK`` error.
A plain server (no cluster) is a map whose every slot belongs to it.

A logical client (``MixClient``) is a closed loop with ``depth`` requests in flight (1:
send, wait for the reply, send the next) over its own connection to each server
(``ServerConn``), opened before the run starts, so connecting is not timed; a MOVED to a
server not yet known opens one then.  As in ``workloads.kvload_client``, the loop runs in
``data_received`` callbacks with no task or future per request, and replies are parsed
by ``hiredis``.  Each connection keeps its requests in flight in send order (RESP answers
in order), so the reply parsed belongs to the head of that deque.

Replies are judged, never raised: SET -> ``OK`` is ok; GET -> a value of that key
(``Keyspace.is_value``, any version) is ok, nil is ``miss``; anything else is ``wrong``,
and an error reply counts under its first word.  A latency runs from the first send of a
request to its final reply (a redirect's extra round trip included), in 100 ns ticks,
appended to the process's uint32 array of that operation.
"""

import asyncio
import collections

import hiredis

from nodes.dht.common import nodelay
from nodes.dht.ring import parse_addr
from nodes.kv.cluster import SLOTS, key_slot
from workloads.loadgen import MAX_TICKS, TICK_NS, count_error

MAX_REDIRECTS = 5             # MOVED replies followed for one request
MAX_SERVERS = 1000            # addresses a map may name (Redis Cluster's suggested limit)
OPS = ('set', 'get')          # index 0 / 1: is_get is the index


class RouteError(ValueError):
    """A server named an address or slot that cannot be used (one sentence)."""


class SlotMap:
    """Owner (an index into ``addrs``) of each of the 16384 slots; shared by a process's clients."""

    def __init__(self, addrs, owners):
        self.addrs = list(addrs)            # 'host:port' strings
        self.owners = owners                # list of SLOTS indices into addrs
        self.moved = 0

    @classmethod
    def single(cls, addr):
        """Every slot on one server (a plain Redis, or a node without a cluster)."""
        return cls([addr], [0] * SLOTS)

    @classmethod
    def from_cluster_slots(cls, reply, asked_host):
        """The map of a CLUSTER SLOTS reply: [[start, end, [host, port, id...], replicas...]...].

        An empty host (the node does not know its address) is the host that was asked."""
        if not isinstance(reply, list) or not reply:
            raise RouteError('it answered CLUSTER SLOTS with no slots')
        owners, addrs = [None] * SLOTS, []
        for entry in reply:
            try:
                start, end, (host, port) = int(entry[0]), int(entry[1]), entry[2][:2]
                addr = _address(host.decode('utf-8', 'replace'), int(port), asked_host)
            except (TypeError, ValueError, IndexError, AttributeError) as exc:
                raise RouteError('its CLUSTER SLOTS reply has an entry that is not '
                                 'start, end, [host, port]: %s' % str(exc)[:80]) from None
            if not 0 <= start <= end < SLOTS:
                raise RouteError('its CLUSTER SLOTS reply has the range %d-%d' % (start, end))
            if addr not in addrs:
                addrs.append(addr)
            owners[start:end + 1] = [addrs.index(addr)] * (end - start + 1)
        missing = owners.count(None)
        if missing:
            raise RouteError('its CLUSTER SLOTS reply leaves %d of %d slots without an owner'
                             % (missing, SLOTS))
        if len(addrs) > MAX_SERVERS:
            raise RouteError('its CLUSTER SLOTS reply names more than %d servers' % MAX_SERVERS)
        return cls(addrs, owners)

    def redirect(self, text, asked_host):
        """Apply a MOVED error's text ('MOVED <slot> <host>:<port>'); return the owner's index."""
        parts = text.split()
        if len(parts) != 3 or not parts[1].isdigit() or not int(parts[1]) < SLOTS:
            raise RouteError('a server sent the malformed redirect %r' % text[:80])
        host, _, port = parts[2].rpartition(':')
        addr = _address(host, port, asked_host)
        if addr not in self.addrs:
            if len(self.addrs) >= MAX_SERVERS:
                raise RouteError('redirects named more than %d servers' % MAX_SERVERS)
            self.addrs.append(addr)
        index = self.addrs.index(addr)
        self.owners[int(parts[1])] = index
        self.moved += 1
        return index

    def slot_counts(self):
        """{addr: slots it owns}."""
        counts = collections.Counter(self.owners)
        return {addr: counts.get(i, 0) for i, addr in enumerate(self.addrs)}


def _address(host, port, asked_host):
    """'host:port' checked by parse_addr; an empty or '?' host is asked_host."""
    if host in ('', '?'):
        host = asked_host
    text = '[%s]:%s' % (host, port) if ':' in host and not host.startswith('[') \
        else '%s:%s' % (host, port)
    try:
        parse_addr(text, port_zero=False)
    except ValueError as exc:
        raise RouteError(str(exc)) from None
    return text


class Tally:
    """What one client's replies were, per operation, and its requests per server."""

    def __init__(self):
        self.ok = [0, 0]
        self.miss = [0, 0]
        self.wrong = [0, 0]
        self.errors = [{}, {}]
        self.moved = 0
        self.sent = collections.defaultdict(lambda: [0, 0])     # addr -> [sets, gets]

    def done(self, op):
        """Requests of op (0 set, 1 get) that got their final reply."""
        return self.ok[op] + self.miss[op] + self.wrong[op] + sum(self.errors[op].values())


class ServerConn(asyncio.Protocol):
    """One logical client's connection to one server; requests in flight in send order."""

    def __init__(self, client, index, addr):
        self.client = client
        self.index = index
        self.addr = addr
        self.host = parse_addr(addr)[0]
        self.pending = collections.deque()      # (is_get, i, data, t0, hops, slot)
        self.out = []
        self.transport = None
        self.opening = None                     # the create_connection task
        self.sent = client.tally.sent[addr]
        self._reader = hiredis.Reader()

    def connection_made(self, transport):
        self.transport = transport
        nodelay(transport)
        self.flush()

    def send(self, request):
        """Queue one request (written by flush)."""
        self.pending.append(request)
        self.out.append(request[2])
        self.sent[request[0]] += 1

    def flush(self):
        """Write the queued requests in one write (once connected)."""
        if self.out and self.transport is not None:
            data = self.out[0] if len(self.out) == 1 else b''.join(self.out)
            self.out.clear()
            self.transport.write(data)

    def data_received(self, data):
        reader, client, pending = self._reader, self.client, self.pending
        reader.feed(data)
        try:
            reply = reader.gets()
            while reply is not False:
                if not pending:
                    client.fail('%s sent a reply nobody asked for' % self.addr)
                    return
                client.answered(self, pending.popleft(), reply)
                reply = reader.gets()
        except hiredis.ProtocolError as exc:
            client.fail('%s sent malformed RESP (%s)' % (self.addr, exc))
            return
        client.refill()

    def eof_received(self):
        return False            # close our side too; connection_lost says the rest

    def connection_lost(self, exc):
        self.transport = None
        if exc is None:
            self.client.fail('%s closed the connection' % self.addr)
        else:
            self.client.fail('the connection to %s was lost (%s)'
                             % (self.addr, getattr(exc, 'strerror', None) or exc))

    def oldest(self):
        """perf_counter_ns of the first send of the oldest request in flight, or None."""
        return self.pending[0][3] if self.pending else None


class MixClient:
    """One closed-loop logical client: plan -> requests -> routed sends -> judged replies.

    ``plan`` yields (is_get, key index); ``requests`` bounds how many (None: until
    ``run.stopping``); ``version`` is None for the preload (every SET writes version 0).
    ``run`` is shared: ``slots`` (SlotMap), ``latencies`` ([set array, get array] of
    uint32), ``stopping`` (no new requests), and what the driver supplies: ``clock_ns()``
    (latencies), ``new_done()`` (``done``, resolved at the end) and ``open(conn, addr,
    failed)`` (connect a ServerConn; ``failed(reason)`` if that fails)."""

    def __init__(self, cid, keyspace, plan, requests, depth, run, versioned=True):
        self.cid = cid
        self.tally = Tally()
        self.failure = None
        self.done = run.new_done()
        self.start_ns = self.end_ns = None
        self._ks = keyspace
        self._plan = plan
        self._remaining = requests if requests is not None else 1 << 62
        self._depth = depth
        self._run = run
        self._versioned = versioned
        self._sets = 0
        self._in_flight = 0
        self._conns = {}
        self._dirty = []

    def conn(self, index):
        """This client's connection to server index (opened in the background if new)."""
        conn = self._conns.get(index)
        if conn is None:
            addr = self._run.slots.addrs[index]
            conn = self._conns[index] = ServerConn(self, index, addr)
            self._run.open(conn, addr, lambda reason: self.fail(
                'cannot connect to %s: %s' % (addr, reason)))
        return conn

    def start(self):
        """Send the first requests."""
        self.start_ns = self._run.clock_ns()
        self.refill()

    def refill(self):
        """Keep depth requests in flight while the plan lasts; finish when none is left.

        The hot loop of the generator: locals and one inlined send per request."""
        if self.done.done():
            return
        run, dirty = self._run, self._dirty
        now = run.clock_ns()
        owners, conns, key_of, plan = run.slots.owners, self._conns, self._ks.key, self._plan
        while self._in_flight < self._depth and self._remaining and not run.stopping:
            is_get, i = next(plan)
            self._remaining -= 1
            self._in_flight += 1
            key = key_of(i)
            slot = key_slot(key)
            data = b'*2\r\n$3\r\nGET\r\n$%d\r\n%b\r\n' % (len(key), key) if is_get \
                else self._set_request(i, key)
            conn = conns.get(owners[slot]) or self.conn(owners[slot])
            conn.pending.append((is_get, i, data, now, 0, slot))
            conn.out.append(data)
            conn.sent[is_get] += 1
            if conn not in dirty:
                dirty.append(conn)
        for conn in dirty:
            conn.flush()
        dirty.clear()
        if self._in_flight == 0:
            self.end_ns = now
            self._close(None)

    def _set_request(self, i, key):
        """The RESP bytes of SET key i (a new version, or version 0 when preloading)."""
        if self._versioned:
            self._sets += 1
            value = self._ks.value(i, b'c%d.%d' % (self.cid, self._sets))
        else:
            value = self._ks.value(i)
        return b'*3\r\n$3\r\nSET\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n' % (len(key), key, len(value),
                                                                 value)

    def _resend(self, request):
        """Queue a redirected request on the connection to its slot's owner now."""
        conn = self.conn(self._run.slots.owners[request[5]])
        conn.send(request)
        if conn not in self._dirty:
            self._dirty.append(conn)

    def answered(self, conn, request, reply):
        """Judge one reply: follow a MOVED, or count it and record its latency."""
        is_get, i, data, t0, hops, slot = request
        tally = self.tally
        if type(reply) is hiredis.ReplyError:
            text = str(reply)
            if text.startswith('MOVED ') and hops < MAX_REDIRECTS:
                try:
                    self._run.slots.redirect(text, conn.host)
                except RouteError as exc:
                    self.fail(str(exc))
                    return
                tally.moved += 1
                self._resend((is_get, i, data, t0, hops + 1, slot))
                return
            count_error(tally.errors[is_get], reply)
        elif is_get:
            if reply is None:
                tally.miss[1] += 1
            elif type(reply) is bytes and self._ks.is_value(i, reply):
                tally.ok[1] += 1
            else:
                tally.wrong[1] += 1
        elif reply == b'OK':
            tally.ok[0] += 1
        else:
            tally.wrong[0] += 1
        now = self._run.clock_ns()
        ticks = (now - t0) // TICK_NS
        self._run.latencies[is_get].append(ticks if ticks <= MAX_TICKS else MAX_TICKS)
        self._in_flight -= 1
        self.end_ns = now

    def overdue(self, now_ns, limit_ns):
        """True if a request in flight has waited longer than limit_ns since its first send."""
        return any(c.pending and now_ns - c.oldest() > limit_ns for c in self._conns.values())

    def fail(self, reason):
        """Stop now (reason says why) unless already finished."""
        self._close(reason)

    def _close(self, reason):
        """Close every connection and resolve done (once)."""
        if self.done.done():
            return
        self.failure = reason
        for conn in self._conns.values():
            conn.pending.clear()
            if conn.transport is not None:
                conn.transport.close()
        self.done.set_result(reason)
