"""RunContext: what an experiment's ``run_point`` sees of the machine, on any backend.

This is the surface a backend implements (docs/DESIGN.md, "Backends"), written once so that
an experiment sees the same calls whichever backend runs it. What does not depend on the
backend lives here: the parameters, the results folder, the current point, the nodes
started so far and their unique names, starting a node and waiting for its readiness, the
barrier, stopping nodes, timed parts and heartbeats. What does is the backend's part, the
methods below that raise ``NotImplementedError``: a host by name, every host, whether a node
may be any program (``runs_programs``), starting and stopping
node programs, the clock, what a point does to time and faults (``sleep``, ``wait_any``,
``kill``/``pause``/``resume`` of a node, ``link_status``, ``packets_sent``), and what only
real hosts have (``sysctls``, ``cost_meter``, ``link_report``: None or nothing elsewhere),
so an experiment asks the backend rather than which backend it is.

``repronet.emu.context.EmuContext`` is the emulation's part (wall clock, signals, ``ip
link``, interface counters; ``repronet.cluster.network.ClusterContext`` extends it to nodes
on other servers), ``repronet.sim.context.SimContext`` the simulation's (virtual time).
"""

import contextlib

from repronet.run import cpu, sweep


class RunContext:
    """What run_point sees: the network, parameters, results and nodes."""

    def __init__(self, network, params, results_folder, monitor=None, progress=None):
        self.network = network          # what was built; its .links reseed per point
        self.net = network.net          # the Mininet object (None in simulation)
        self.caps = network.caps        # the kernel's capabilities (None in simulation)
        self.params = params
        self.results = results_folder
        self.point = None
        self.nodes = []                 # every node started, in order (the manifest's nodes)
        self.progress = progress or sweep.Progress(0)
        self._monitor = monitor         # the CPU monitor, if the backend has one
        self._names = set()

    # -- the same on every backend --------------------------------------------------------
    def start_node(self, host, name, argv, ready=None, barrier=False,
                   suffix='.jsonl', timeout=30, env=None, wait=True):
        """Start a tracked node program on host (a host or its name); wait for readiness
        unless barrier or wait=False (start many, then node.wait_ready() each).

        Node names are unique per run: they name the log files."""
        if name in self._names:
            raise ValueError('node name %r already used in this run' % name)
        if isinstance(host, str):
            host = self.host(host)
        self._names.add(name)
        node = self._start(host, name, argv, ready, barrier, suffix, env)
        if wait and not barrier:
            node.wait_ready(timeout)        # at once for a node without a ready condition
        return node

    def release(self, nodes, timeout=30):
        """Barrier: wait until all nodes are ready (timeout for them all), then send go to
        each."""
        deadline = self._monotonic() + timeout
        for node in nodes:
            node.wait_ready(max(deadline - self._monotonic(), 0.1))
        for node in nodes:
            node.go()

    def stop_nodes(self, nodes=None):
        """Stop the given nodes (default all), the last started first, with one shared
        grace period; return {name: exit status}."""
        nodes = list(self.nodes if nodes is None else nodes)
        return self._stop_all(list(reversed(nodes)))

    @contextlib.contextmanager
    def timed(self):
        """Mark the timed part of a point: the CPU verdict is taken over these parts only
        (not file generation, hashing or process start-up). An experiment that never calls
        it is judged over whole points; a backend without a CPU monitor measures nothing."""
        if self._monitor is not None:
            self._monitor.set_phase(cpu.MEASURE)
        try:
            yield
        finally:
            if self._monitor is not None:
                self._monitor.set_phase(None)

    def heartbeat(self, done, total=None, unit=''):
        """Say how far a long point is (e.g. bytes of a 1 GB download); prints at most every
        HEARTBEAT_S seconds, so it is cheap to call often."""
        self.progress.heartbeat(done, total, unit)

    # -- the backend's part ---------------------------------------------------------------
    def host(self, name):
        """Return the host called name: it has ``.name`` and ``.IP()``."""
        raise NotImplementedError

    def hosts(self):
        """Every host of the topology, in the backend's order (each has ``.name`` and ``.IP()``)."""
        raise NotImplementedError

    def runs_programs(self):
        """True where a node may be any program on its host (iperf3, redis-cli, ethtool: the
        emulation's hosts run real executables); False where nodes are repronet's node programs
        that the backend drives in virtual time (simulation). An experiment asks this, not
        which backend it is, before it starts a tool nobody here wrote."""
        raise NotImplementedError

    def _start(self, host, name, argv, ready, barrier, suffix, env):
        """Start one node program, add it to self.nodes and return it (not yet ready)."""
        raise NotImplementedError

    def _stop_all(self, nodes):
        """Stop nodes in this order, one grace period for all; return {name: status}."""
        raise NotImplementedError

    def _monotonic(self):
        """Seconds on a clock that never goes back (the barrier's deadline)."""
        return self.clock()

    def clock(self):
        """The time node logs' ``t`` use, in seconds."""
        raise NotImplementedError

    def sleep(self, seconds):
        """Let seconds pass."""
        raise NotImplementedError

    def wait_any(self, nodes, seconds):
        """Wait up to seconds, less if one of nodes ends meanwhile."""
        raise NotImplementedError

    def kill(self, node):
        """SIGKILL the node: it ends now, its connections are reset."""
        raise NotImplementedError

    def pause(self, node):
        """SIGSTOP: its connections stay up and nothing answers."""
        raise NotImplementedError

    def resume(self, node):
        """SIGCONT: a paused node runs again."""
        raise NotImplementedError

    def link_status(self, a, b, up):
        """Bring the link between nodes a and b down or up."""
        raise NotImplementedError

    def packets_sent(self, hosts, switch):
        """Packets the hosts have sent into switch so far (its ports' receive counters)."""
        raise NotImplementedError

    # -- what only some backends have: None or nothing where this one has none -----------
    def sysctls(self, host, names):
        """What ``sysctl NAME...`` prints in host's namespace, or None where a host has no
        kernel of its own (simulation: the TCP model's constants are in the manifest)."""
        raise NotImplementedError

    def cost_meter(self, hosts):
        """A meter started now of what the run costs the machine: its ``measure()`` returns
        the link delay daemons' CPU seconds on hosts and the machine's busy share since
        then (``daemon_cpu_s``, ``machine_busy``), or {} where nothing is measured."""
        raise NotImplementedError

    def link_report(self):
        """The link emulation's own state for a log file (mechanism, daemons' counters,
        composed paths), or None where the links are a model (the manifest has it)."""
        raise NotImplementedError
