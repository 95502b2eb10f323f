"""Processing cost in the simulator: a charge per callback and per byte received, on a
machine of N cores.

Zero by default: the simulated nodes answer instantly, which is what the emulation
approaches only while the machine has idle CPU. With ``--sim-cost KIND=SECONDS,...``
(``KIND`` is the node program's module, e.g. ``nodes.dht.server``) every callback into a
node of that kind (a message batch arriving, a timer, a connection event) takes that long;
``KIND/byte=SECONDS`` adds that much per byte the callback received (a REGISTER of 2,000
names is 42 KB, a search 31 bytes: one figure per byte covers both, where one per callback
undercharged the batch by 4x). ``python -m analysis.sim_cost EMU SIM`` measures both from an
emulation run. A charged callback waits for the node's own single thread and for one of
``--sim-cores`` cores (default: this machine's count, what the emulation had), then its
effects happen when the charge is paid. A core is one "next idle" time, so a callback that
waits for its node's thread takes, of the cores idle by then, the one idle last: taking the
one idle first left it reserved while the thread was still busy, and a single busy server
then held both cores (dht8 Part III, one index server, 2-8 clients). So the simulator can predict where the emulation
becomes CPU-bound: the cores' busy share is recorded per timed part, as the emulation's CPU
monitor does.

Two charges take a core without holding any node's thread or delaying what they follow,
for work the emulation's cores do beside the nodes (issue 13: measured by
``benchmarks/dht8_cpu_split.py`` and ``dht8_cpu_sched.py`` on Part I's batched registers):
``packet=SECONDS`` per packet delivered to a host (the emulator's own: its link-delay
daemon's verdict and the kernel's forwarding, fitted by ``analysis.sim_cost`` from the
daemons' CPU seconds), and ``KIND/exit=SECONDS`` once when a node of that kind ends (a
client's interpreter teardown, 18-53 ms of CPU in the measured runs, which the other clients
wait for).

A callback into a node whose thread has sat idle longer than ``cold_after`` (default 1 ms)
costs ``KIND/cold=SECONDS`` more (issue 13, measured on dht8's emulated logs): in Part I's
one-client searches the same request took 0.10-0.13 ms longer when its index server had sat
idle 8-16 ms than when it had been busy under 0.5 ms before (the process, its delay daemon
and their caches are woken cold), and Part III's one server, asked again every 0.5 ms,
never cools. A node's first callback is cold. ``cold_after=SECONDS`` sets the threshold.
``KIND/first=SECONDS`` is charged on the first bytes a connection brings to a node of that
kind (a request on a new connection took 0.3-0.5 ms longer than a cold one in the same
runs). ``analysis.sim_warmth`` measures both.
"""

import importlib.util

PER_BYTE = '/byte'
PER_EXIT = '/exit'
PER_COLD = '/cold'
PER_FIRST = '/first'
PER_PACKET = 'packet'
COLD_AFTER = 'cold_after'
COLD_AFTER_S = 0.001                # default: idle longer than this, a callback is cold
_SUFFIXES = (PER_BYTE, PER_EXIT, PER_COLD, PER_FIRST)


class CpuModel:
    """Cores shared by every node, one thread per node, a cost per callback and per byte
    received by node kind."""

    def __init__(self, engine, cores, costs):
        self.engine = engine
        self.free = [0.0] * max(1, int(cores))      # when each core is next idle
        self.costs = {k: v for k, v in costs.items()
                      if not k.endswith(_SUFFIXES) and k not in (PER_PACKET, COLD_AFTER)}
        self.per_byte = {k[:-len(PER_BYTE)]: v for k, v in costs.items()
                         if k.endswith(PER_BYTE)}
        self.per_exit = {k[:-len(PER_EXIT)]: v for k, v in costs.items()
                         if k.endswith(PER_EXIT)}
        self.per_cold = {k[:-len(PER_COLD)]: v for k, v in costs.items()
                         if k.endswith(PER_COLD)}
        self.per_first = {k[:-len(PER_FIRST)]: v for k, v in costs.items()
                          if k.endswith(PER_FIRST)}
        self.cold_after = costs.get(COLD_AFTER, COLD_AFTER_S)
        self.per_packet = costs.get(PER_PACKET, 0.0)
        self.thread = {}                            # node -> when its thread is next idle
        self.busy = 0.0                             # core-seconds charged so far

    def claim(self, proc, nbytes=0, first=False):
        """Charge one callback of proc that received nbytes (first: a connection's first
        bytes); return the time its effects happen, or None (free)."""
        kind = getattr(proc, 'kind', None)
        cost = self.costs.get(kind, 0.0)
        if nbytes:
            cost += self.per_byte.get(kind, 0.0) * nbytes
        if first:
            cost += self.per_first.get(kind, 0.0)
        now = self.engine.now
        last = self.thread.get(proc)
        if kind in self.per_cold:
            if last is None or now - last > self.cold_after:
                cost += self.per_cold[kind]
            elif not cost and last < now:
                self.thread[proc] = now     # a free callback ran: the node is warm from now
        if not cost:        # free, but not before what the node's thread is still doing
            return last if last is not None and last > now else None
        ready = now if last is None else max(now, last)
        i = self._core(ready)
        start = max(ready, self.free[i])
        end = start + cost
        self.free[i] = self.thread[proc] = end
        self.busy += cost
        return end

    def _core(self, ready):
        """The core to run work that can start at ready: of the cores idle by then, the
        one that became idle last (a core is one 'next idle' time, so the gap before ready
        is lost; the latest leaves the least), else the one idle first."""
        free = self.free
        fits = [i for i in range(len(free)) if free[i] <= ready]
        if fits:
            return max(fits, key=free.__getitem__)
        return min(range(len(free)), key=free.__getitem__)

    def background(self, seconds):
        """Take the first free core for seconds from now, holding no node's thread and
        delaying nothing directly: later charged callbacks find the core busy."""
        i = min(range(len(self.free)), key=self.free.__getitem__)
        self.free[i] = max(self.engine.now, self.free[i]) + seconds
        self.busy += seconds

    def exited(self, proc):
        """proc ended: charge its kind's exit cost, if any, on a core."""
        cost = self.per_exit.get(getattr(proc, 'kind', None))
        if cost:
            self.background(cost)

    def delivered(self, packets):
        """packets reached a host: charge the per-packet cost on a core."""
        self.background(packets * self.per_packet)

    def record(self):
        """What the manifest keeps about the model (the background charges when set)."""
        out = {'cores': len(self.free), 'seconds_per_callback': self.costs,
               'seconds_per_byte_received': self.per_byte}
        if self.per_exit:
            out['seconds_per_exit'] = self.per_exit
        if self.per_cold:
            out['seconds_per_cold_callback'] = self.per_cold
            out['cold_after_seconds'] = self.cold_after
        if self.per_first:
            out['seconds_per_first_request'] = self.per_first
        if self.per_packet:
            out['seconds_per_packet_delivered'] = self.per_packet
        return out


def parse_costs(text):
    """'nodes.dht.server=40e-6,nodes.dht.server/byte=4e-7,nodes.dht.client/exit=0.015,
    nodes.dht.server/cold=1e-4,packet=8e-5,cold_after=0.001' -> {key: seconds}; ValueError."""
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
                             'MODULE/exit=SECONDS, MODULE/cold=SECONDS, MODULE/first=SECONDS, '
                             'packet=SECONDS or cold_after=SECONDS,... with each in [0, 1) s, '
                             'not %r' % item)
        costs[kind] = seconds
    for kind in costs:
        if kind in (PER_PACKET, COLD_AFTER):
            continue
        module = kind.rsplit('/', 1)[0] if kind.endswith(_SUFFIXES) else kind
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
