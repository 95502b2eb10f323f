"""Processing cost in the simulator: a charge per callback, per byte received and per byte
sent, and a wait per delivery, on a machine of N cores.

Zero by default: the simulated nodes answer instantly, which is what the emulation
approaches only while the machine has idle CPU. With ``--sim-cost KIND=SECONDS,...``
(``KIND`` is the node program's module, e.g. ``nodes.dht.server``) every callback into a
node of that kind (a message batch arriving, a timer, a connection event) takes that long;
``KIND/byte=SECONDS`` adds that much per byte the callback received (a REGISTER of 2,000
names is 42 KB, a search 31 bytes: one figure per byte covers both, where one per callback
undercharged the batch by 4x). ``python -m analysis.sim_cost EMU SIM`` measures both from an
emulation run. A charged callback waits for the node's own single thread and for one of
``--sim-cores`` cores (default: this machine's count, what the emulation had), then its
effects happen when the charge is paid. So the simulator can predict where the emulation
becomes CPU-bound: the cores' busy share is recorded per timed part, as the emulation's CPU
monitor does.

``KIND/sent=SECONDS`` charges a node of that kind per byte it sends (a client encoding a
REGISTER, a peer reading and sending a file), on its own thread and a core, when the bytes
reach the receiving node and before the receiver's own charge. On an idle machine a message
then costs what it costs in the real system (encode, wire, decode, in a different order,
the same sum), and under load the sender's share is paid by the sender: one index server
serving eight clients encoding 2,000-name REGISTERs is not charged their encoding.

``KIND/wait=SECONDS`` delays every delivery of bytes to a node of that kind by that long
before its charge, on no thread and no core: time a message loses outside any CPU. In the
emulation the delay daemons release each held packet late (their own stats: 214 us on
average in a dht8 run), once per message on a request's path; as part of the per-callback
charge that lateness would occupy the one thread of a busy server and queue its clients
behind time nobody computed.
"""

import importlib.util

PER_BYTE = '/byte'
PER_SENT = '/sent'
WAIT = '/wait'


class CpuModel:
    """Cores shared by every node, one thread per node, a cost per callback, per byte
    received and per byte sent by node kind."""

    def __init__(self, engine, cores, costs):
        self.engine = engine
        self.free = [0.0] * max(1, int(cores))      # when each core is next idle
        self.costs = {k: v for k, v in costs.items() if '/' not in k}
        self.per_byte = _suffixed(costs, PER_BYTE)
        self.per_sent = _suffixed(costs, PER_SENT)
        self.wait = _suffixed(costs, WAIT)
        self.thread = {}                            # node -> when its thread is next idle
        self.busy = 0.0                             # core-seconds charged so far

    def claim(self, proc, nbytes=0, sender=None):
        """Charge one callback of proc that received nbytes from the node sender (None:
        unknown or gone): proc's wait for a delivery, the sender's per byte sent, then
        proc's own charge; return the time its effects happen, or None (free)."""
        now = ready = self.engine.now
        kind = getattr(proc, 'kind', None)
        if nbytes:
            ready += self.wait.get(kind, 0.0)
        if nbytes and sender is not None:
            sent = self.per_sent.get(getattr(sender, 'kind', None), 0.0) * nbytes
            if sent:
                ready = self._use(sender, ready, sent)
        cost = self.costs.get(kind, 0.0)
        if nbytes:
            cost += self.per_byte.get(kind, 0.0) * nbytes
        if cost:
            return self._use(proc, ready, cost)
        return ready if ready > now else None

    def _use(self, proc, after, cost):
        """Run cost seconds of proc's thread on the first free core, not before after;
        return when it ends."""
        i = min(range(len(self.free)), key=self.free.__getitem__)
        start = max(after, self.free[i], self.thread.get(proc, 0.0))
        end = start + cost
        self.free[i] = self.thread[proc] = end
        self.busy += cost
        return end

    def record(self):
        """What the manifest keeps about the model."""
        out = {'cores': len(self.free), 'seconds_per_callback': self.costs,
               'seconds_per_byte_received': self.per_byte}
        if self.per_sent:
            out['seconds_per_byte_sent'] = self.per_sent
        if self.wait:
            out['seconds_waited_per_delivery'] = self.wait
        return out


def _suffixed(costs, suffix):
    """{kind: seconds} of the costs named KIND + suffix."""
    return {k[:-len(suffix)]: v for k, v in costs.items() if k.endswith(suffix)}


def parse_costs(text):
    """'nodes.dht.server=40e-6,nodes.dht.server/byte=4e-7,nodes.dht.client/sent=1e-7' ->
    {key: seconds}; ValueError."""
    costs = {}
    for item in filter(None, (part.strip() for part in (text or '').split(','))):
        kind, sep, value = item.partition('=')
        kind = kind.strip()
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not sep or not kind or not 0 <= seconds < 1:
            raise ValueError('--sim-cost takes MODULE=SECONDS, MODULE/byte=SECONDS, '
                             'MODULE/sent=SECONDS or MODULE/wait=SECONDS,... with each cost '
                             'in [0, 1) s, not %r' % item)
        costs[kind] = seconds
    for kind in costs:
        module = next((kind[:-len(x)] for x in (PER_BYTE, PER_SENT, WAIT)
                       if kind.endswith(x)), kind)
        if not _is_module(module):
            raise ValueError('--sim-cost names %s, which is not a module (a node program, '
                             'e.g. nodes.dht.server), so it would charge nothing' % module)
    return costs


def _is_module(name):
    """True if name is an importable module (a mistyped one would be charged nothing)."""
    if '/' in name:
        return False
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):      # its parent package is missing, or an empty part
        return False
