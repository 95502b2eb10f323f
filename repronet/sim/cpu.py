"""Processing cost in the simulator: a per-callback charge on a machine of N cores.

Zero by default: the simulated nodes answer instantly, which is what the emulation
approaches only while the machine has idle CPU. With ``--sim-cost KIND=SECONDS,...``
(``KIND`` is the node program's module, e.g. ``nodes.dht.server``; costs measured from an
emulation run by ``python -m analysis.sim_cost RUN_DIR``) every callback into a node of that
kind (a message batch arriving, a timer, a connection event) takes that long: it waits for
the node's own single thread and for one of ``--sim-cores`` cores (default: this machine's
count, what the emulation had), then its effects happen when the charge is paid. So the
simulator can predict where the emulation becomes CPU-bound: the cores' busy share is
recorded per timed part, as the emulation's CPU monitor does.
"""

import importlib.util


class CpuModel:
    """Cores shared by every node, one thread per node, a cost per callback by node kind."""

    def __init__(self, engine, cores, costs):
        self.engine = engine
        self.free = [0.0] * max(1, int(cores))      # when each core is next idle
        self.costs = dict(costs)
        self.thread = {}                            # node -> when its thread is next idle
        self.busy = 0.0                             # core-seconds charged so far

    def claim(self, proc):
        """Charge one callback of proc; return the time its effects happen, or None (free)."""
        cost = self.costs.get(getattr(proc, 'kind', None), 0.0)
        if not cost:
            return None
        now = self.engine.now
        i = min(range(len(self.free)), key=self.free.__getitem__)
        start = max(now, self.free[i], self.thread.get(proc, 0.0))
        end = start + cost
        self.free[i] = self.thread[proc] = end
        self.busy += cost
        return end

    def record(self):
        """What the manifest keeps about the model."""
        return {'cores': len(self.free), 'seconds_per_callback': self.costs}


def parse_costs(text):
    """'nodes.dht.server=40e-6,nodes.dht.client=25e-6' -> {kind: seconds}; ValueError."""
    costs = {}
    for item in filter(None, (part.strip() for part in (text or '').split(','))):
        kind, sep, value = item.partition('=')
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not sep or not kind or not 0 <= seconds < 1:
            raise ValueError('--sim-cost takes MODULE=SECONDS,... with each cost in [0, 1) '
                             's, not %r' % item)
        costs[kind.strip()] = seconds
    for kind in costs:
        if not _is_module(kind):
            raise ValueError('--sim-cost names %s, which is not a module (a node program, '
                             'e.g. nodes.dht.server), so it would charge nothing' % kind)
    return costs


def _is_module(name):
    """True if name is an importable module (a mistyped one would be charged nothing)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):      # its parent package is missing, or an empty part
        return False
