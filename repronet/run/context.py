"""RunContext: what an experiment's ``run_point`` sees of the machine.

This is the surface a backend implements (docs/DESIGN.md, "Backends"): hosts by name,
tracked node processes, the barrier, timed parts and heartbeats, and what a point does to
time and faults: ``clock()``, ``sleep()``, ``kill``/``pause``/``resume`` of a node,
``link_status`` and ``packets_sent``. This class is the emulation backend's
(``repronet.emu``: wall clock, signals, ``ip link``, interface counters);
``repronet.sim.context.SimContext`` provides the same calls in virtual time.
"""

import contextlib
import os
import signal
import time

from repronet.emu.process import NodeProcess, stop_all
from repronet.run import cpu, sweep


class RunContext:
    """What run_point sees: the network, parameters, results and nodes."""

    def __init__(self, network, params, results_folder, state, monitor=None,
                 guard=None, progress=None):
        self.network = network
        self.net = network.net
        self.caps = network.caps
        self.params = params
        self.results = results_folder
        self.point = None
        self.nodes = []
        self.progress = progress or sweep.Progress(0)
        self._monitor = monitor
        self._names = set()
        self._state = state
        self._guard = guard

    def host(self, name):
        """Return the Mininet host called name."""
        return self.net.get(name)

    def start_node(self, host, name, argv, ready=None, barrier=False,
                   suffix='.jsonl', timeout=30, env=None, wait=True):
        """Start a tracked NodeProcess; wait for readiness unless barrier
        or wait=False (start many, then node.wait_ready() each).

        A signal that arrives while the process starts waits until its PID is
        recorded, so Ctrl-C can never orphan it."""
        if name in self._names:
            raise ValueError('node name %r already used in this run' % name)
        if isinstance(host, str):
            host = self.host(host)
        cls = getattr(host, 'process_class', NodeProcess)   # a host of another server's
        node = cls(host, name, argv, self.results.logs, ready=ready,
                   barrier=barrier, suffix=suffix, env=env)
        self._names.add(name)
        with self._guard.held() if self._guard else contextlib.nullcontext():
            try:
                node.start()
            finally:
                if node.pid is not None:
                    self.nodes.append(node)
                    self._state.add_pid(node.pid)
        if wait and not barrier:
            node.wait_ready(timeout)
        return node

    @contextlib.contextmanager
    def timed(self):
        """Mark the timed part of a point: the CPU verdict is taken over these
        parts only (not file generation, hashing or process start-up).  An
        experiment that never calls it is judged over whole points."""
        if self._monitor is not None:
            self._monitor.set_phase(cpu.MEASURE)
        try:
            yield
        finally:
            if self._monitor is not None:
                self._monitor.set_phase(None)

    def heartbeat(self, done, total=None, unit=''):
        """Say how far a long point is (e.g. bytes of a 1 GB download); prints
        at most every HEARTBEAT_S seconds, so it is cheap to call often."""
        self.progress.heartbeat(done, total, unit)

    def release(self, nodes, timeout=30):
        """Barrier: wait until all nodes are ready, then send go to each."""
        deadline = time.monotonic() + timeout
        for node in nodes:
            node.wait_ready(max(deadline - time.monotonic(), 0.1))
        for node in nodes:
            node.go()

    def stop_nodes(self, nodes=None):
        """Stop the given nodes (default all) with one shared grace period."""
        nodes = list(self.nodes if nodes is None else nodes)
        return stop_all(list(reversed(nodes)))

    # -- time and faults (SimContext has the same calls in virtual time) ------------------
    def clock(self):
        """Wall-clock time in seconds (what node logs' ``t`` use)."""
        return time.time()

    def sleep(self, seconds):
        time.sleep(seconds)

    def wait_any(self, nodes, seconds):
        """Wait up to seconds, less if one of nodes ends meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and all(n.poll() is None for n in nodes):
            time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))

    def kill(self, node):
        """SIGKILL the node's process."""
        os.kill(node.pid, signal.SIGKILL)

    def pause(self, node):
        """SIGSTOP: its connections stay up and nothing answers."""
        os.kill(node.pid, signal.SIGSTOP)

    def resume(self, node):
        os.kill(node.pid, signal.SIGCONT)

    def link_status(self, a, b, up):
        """Bring the link between nodes a and b down or up."""
        self.net.configLinkStatus(a, b, 'up' if up else 'down')

    def packets_sent(self, hosts, switch):
        """Packets the hosts have sent into switch so far (its ports' receive counters)."""
        total, sw = 0, self.net.get(switch)
        for name in hosts:
            for _, port in self.host(name).connectionsTo(sw):
                with open('/sys/class/net/%s/statistics/rx_packets' % port.name) as f:
                    total += int(f.read())
        return total
