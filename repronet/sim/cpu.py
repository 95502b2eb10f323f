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
effects happen when the charge is paid. So the simulator can predict where the emulation
becomes CPU-bound: the cores' busy share is recorded per timed part, as the emulation's CPU
monitor does.

``KIND/read=SECONDS`` adds a charge per read(): what a real server pays each time it wakes
and reads its socket (``benchmarks/dht_read_cost.py`` measures it on the real index server).
A read takes every packet that has arrived, so an idle node reads about once per packet a
shaped link delivers and a busy one takes many in one. Only for kinds given a read charge,
a stream's train (up to 64 KiB, one event) is seen as its packets arriving back to back at
the path's slowest link (``streams.Conn.arrival``): each packet that finds the node's thread
idle starts a read (charged then, on the thread and a core), packets that arrive while it
is busy wait for the next read, and the read that takes the train's last packet is the
callback itself (charged per callback, per byte and per read). Without a read charge nothing
of this runs, so such runs are unchanged.
"""

import importlib.util

PER_BYTE = '/byte'
PER_READ = '/read'


class CpuModel:
    """Cores shared by every node, one thread per node, a cost per callback, per byte
    received and per read by node kind."""

    def __init__(self, engine, cores, costs):
        self.engine = engine
        self.free = [0.0] * max(1, int(cores))      # when each core is next idle
        self.costs = {k: v for k, v in costs.items() if '/' not in k}
        self.per_byte = _suffixed(costs, PER_BYTE)
        self.per_read = _suffixed(costs, PER_READ)
        self.thread = {}                            # node -> when its thread is next idle
        self.busy = 0.0                             # core-seconds charged so far
        self.reads = 0                              # reads charged (kinds with /read)

    def claim(self, proc, nbytes=0, packets=1, spacing=0.0):
        """Charge one callback of proc that received nbytes (the last of packets that
        arrived spacing seconds apart, ending now); return the time its effects happen, or
        None (free)."""
        kind = getattr(proc, 'kind', None)
        cost = self.costs.get(kind, 0.0)
        if nbytes:
            cost += self.per_byte.get(kind, 0.0) * nbytes
        read = self.per_read.get(kind, 0.0) if self.per_read and nbytes else 0.0
        if read:                # a delivery of bytes is a read; a timer or a connection not
            self._earlier_reads(proc, read, packets, spacing)
            cost += read
            self.reads += 1
        now = self.engine.now
        if not cost:        # free, but not before what the node's thread is still doing
            busy = self.thread.get(proc, 0.0)
            return busy if busy > now else None
        return self._occupy(proc, now, cost)

    def _occupy(self, proc, at, cost):
        """Run cost seconds of proc from at, once its thread and a core are free; the end."""
        i = min(range(len(self.free)), key=self.free.__getitem__)
        start = max(at, self.free[i], self.thread.get(proc, 0.0))
        end = start + cost
        self.free[i] = self.thread[proc] = end
        self.busy += cost
        return end

    def _earlier_reads(self, proc, read, packets, spacing):
        """Charge the reads before the one that takes the last of packets: packet k arrived
        at now - (packets - 1 - k) x spacing; a read starts when a packet waits and the
        thread is free, and takes every packet arrived by then."""
        last = packets - 1
        first = self.engine.now - last * spacing
        k = 0
        while True:
            start = max(first + k * spacing, self.thread.get(proc, 0.0))
            taken = last if spacing <= 0 else max(k, min(last, int((start - first) / spacing)))
            if taken >= last:
                return
            self._occupy(proc, start, read)
            self.reads += 1
            k = taken + 1

    def record(self):
        """What the manifest keeps about the model."""
        out = {'cores': len(self.free), 'seconds_per_callback': self.costs,
               'seconds_per_byte_received': self.per_byte}
        if self.per_read:
            out.update(seconds_per_read=self.per_read,
                       reads_model='a read per packet that finds the thread idle; packets '
                                   'arriving while it is busy share the next read')
        return out


def _suffixed(costs, suffix):
    """{kind: seconds} of the costs named KIND + suffix."""
    return {k[:-len(suffix)]: v for k, v in costs.items() if k.endswith(suffix)}


def parse_costs(text):
    """'nodes.dht.server=40e-6,nodes.dht.server/byte=4e-7' -> {key: seconds}; ValueError."""
    costs = {}
    for item in filter(None, (part.strip() for part in (text or '').split(','))):
        kind, sep, value = item.partition('=')
        kind = kind.strip()
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not sep or not kind or not 0 <= seconds < 1:
            raise ValueError('--sim-cost takes MODULE=SECONDS, MODULE/byte=SECONDS or '
                             'MODULE/read=SECONDS,... with each cost in [0, 1) s, not %r'
                             % item)
        costs[kind] = seconds
    for kind in costs:
        module = kind
        for suffix in (PER_BYTE, PER_READ):
            if kind.endswith(suffix):
                module = kind[:-len(suffix)]
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
