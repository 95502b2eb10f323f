"""SimContext: the RunContext surface (``repronet.run.context``) on the simulation backend.

``run_point`` code calls the same methods in both backends; here they act in virtual time:
``start_node`` runs a node program's ``simulate()``, waiting (``wait_ready``, ``wait``,
``sleep``) advances the engine instead of the wall clock, ``clock()`` is the virtual time,
and the fault operations (``kill``, ``pause``/``resume``, ``link_status``) and
``packets_sent`` act on the simulated hosts and ports instead of signals, ``ip link`` and
``/sys`` counters. There is no CPU monitor: a timed part is just a mark. What does not
depend on the backend (names, the barrier, stopping, heartbeats) is ``RunContext``'s.
"""

from repronet.run.context import RunContext
from repronet.sim.process import SimNodeError, stop_all


class _Links:
    """ctx.network.links as the runner uses it (reseed per point)."""

    def __init__(self, net):
        self.net = net

    def reseed(self, seed):
        self.net.reseed(seed)


class SimNetwork:
    """ctx.network: what was built (the backend) and its links."""

    def __init__(self, backend):
        self.backend = backend
        self.links = _Links(backend.net)
        self.net = None
        self.caps = None

    def mechanisms(self):
        return self.backend.mechanisms()

    def stop(self):
        """The runner's network.stop(): every simulated node still running is killed."""
        for node in self.backend.nodes:
            if node.returncode is None:
                node.kill()


class SimContext(RunContext):
    """What run_point sees when the run is simulated."""

    backend_name = 'sim'

    def __init__(self, backend, params, results_folder, progress=None):
        super().__init__(SimNetwork(backend), params, results_folder, progress=progress)
        self.backend = backend

    def host(self, name):
        """Return the simulated host called name."""
        try:
            return self.backend.hosts[name]
        except KeyError:
            raise ValueError('no host %r in the topology' % name) from None

    def hosts(self):
        return list(self.backend.hosts.values())

    def runs_programs(self):
        return False

    def _start(self, host, name, argv, ready, barrier, suffix, env):
        """Run the node program's simulate(); readiness is its ready log line, whatever
        ``ready`` says (``env`` has no meaning here)."""
        node = self.backend.start_node(host, name, argv, suffix)
        node.wants_ready = ready is not None or barrier
        self.nodes.append(node)
        return node

    def _stop_all(self, nodes):
        return stop_all(nodes)

    # -- what run_point may use instead of the wall clock, signals and /sys ---------------
    def clock(self):
        """The virtual time in seconds."""
        return self.backend.engine.now

    def sleep(self, seconds):
        """Let seconds of virtual time pass."""
        self.backend.run_until(lambda: False, seconds)

    def wait_any(self, nodes, seconds):
        """Let up to seconds pass, less if one of nodes ends meanwhile."""
        self.backend.run_until(lambda: any(n.returncode is not None for n in nodes), seconds)

    def kill(self, node):
        node.kill()

    def pause(self, node):
        node.pause()

    def resume(self, node):
        node.resume()

    def link_status(self, a, b, up):
        self.backend.net.link_status(a, b, up)

    def packets_sent(self, hosts, switch):
        """Packets the hosts have sent into switch so far."""
        ports = self.backend.net.ports
        return sum(ports[(h, switch)].sent + ports[(h, switch)].dropped
                   for h in hosts if (h, switch) in ports)

    # -- what only real hosts have ------------------------------------------------------
    def sysctls(self, host, names):
        return None

    def cost_meter(self, hosts):
        return _NoCost()

    def link_report(self):
        return None


class _NoCost:
    """A simulated run's cost meter: the model's links cost no CPU, and the machine running
    the simulator is not the simulated one (``--sim-cost`` models processing)."""

    @staticmethod
    def measure():
        return {}


__all__ = ['SimContext', 'SimNodeError']
