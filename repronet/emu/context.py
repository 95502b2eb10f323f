"""EmuContext: the emulation backend's part of ``repronet.run.context.RunContext``.

Hosts are Mininet's, a node is a real process (``NodeProcess``) whose PID is recorded for
the cleanup of a crashed run, and time and faults are the machine's: the wall clock,
signals, ``ip link`` (Mininet's ``configLinkStatus``) and the switch ports' counters in
``/sys``. A signal that arrives while a process starts waits until its PID is recorded
(the run's ``SignalGuard``), so Ctrl-C can never orphan it. Only here do hosts have
sysctls, and the link emulation costs CPU (its delay daemons) and keeps its own counters.
"""

import contextlib
import os
import signal
import time

from repronet.emu.process import NodeProcess, stop_all
from repronet.run import cpu
from repronet.run.context import RunContext


class EmuContext(RunContext):
    """What run_point sees when the run is emulated (Mininet)."""

    def __init__(self, network, params, results_folder, state, monitor=None,
                 guard=None, progress=None):
        super().__init__(network, params, results_folder, monitor=monitor, progress=progress)
        self._state = state
        self._guard = guard

    def host(self, name):
        """Return the Mininet host called name."""
        return self.net.get(name)

    def hosts(self):
        return list(self.net.hosts)

    def runs_programs(self):
        return True

    def _start(self, host, name, argv, ready, barrier, suffix, env):
        """Start a NodeProcess; track it (and record its PID) as soon as it has one."""
        cls = getattr(host, 'process_class', NodeProcess)   # a host of another server's
        node = cls(host, name, argv, self.results.logs, ready=ready,
                   barrier=barrier, suffix=suffix, env=env)
        with self._guard.held() if self._guard else contextlib.nullcontext():
            try:
                node.start()
            finally:
                if node.pid is not None:
                    self.nodes.append(node)
                    self._state.add_pid(node.pid)
        return node

    def _stop_all(self, nodes):
        return stop_all(nodes)

    def _monotonic(self):
        return time.monotonic()

    def clock(self):
        """Wall-clock time in seconds (what node logs' ``t`` use)."""
        return time.time()

    def sleep(self, seconds):
        time.sleep(seconds)

    def wait_any(self, nodes, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and all(n.poll() is None for n in nodes):
            time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))

    def kill(self, node):
        os.kill(node.pid, signal.SIGKILL)

    def pause(self, node):
        os.kill(node.pid, signal.SIGSTOP)

    def resume(self, node):
        os.kill(node.pid, signal.SIGCONT)

    def link_status(self, a, b, up):
        self.net.configLinkStatus(a, b, 'up' if up else 'down')

    def packets_sent(self, hosts, switch):
        total, sw = 0, self.net.get(switch)
        for name in hosts:
            for _, port in self.host(name).connectionsTo(sw):
                with open('/sys/class/net/%s/statistics/rx_packets' % port.name) as f:
                    total += int(f.read())
        return total

    def sysctls(self, host, names):
        return host.cmd('sysctl ' + ' '.join(names))

    def cost_meter(self, hosts):
        return _CostMeter(self.network.links, hosts)

    def link_report(self):
        links = self.network.links
        return {'mechanism': links.mechanism, 'daemons': links.daemon_stats(),
                'paths': links.path_records()}


class _CostMeter:
    """CPU seconds of the linkdelay daemons of some hosts and the machine's busy share
    (/proc/stat, as the CPU monitor reads it) from its creation to measure()."""

    def __init__(self, links, hosts):
        self.links, self.hosts = links, hosts
        self.daemons = links.daemon_cpu_seconds()
        self.stat = cpu.read_stat()['cpu']

    def measure(self):
        """{'daemon_cpu_s', 'machine_busy'} since creation."""
        (total, idle, _), after = self.stat, cpu.read_stat()['cpu']
        now = self.links.daemon_cpu_seconds()
        daemon_s = sum(now.get(h, 0.0) - self.daemons.get(h, 0.0) for h in self.hosts)
        ticks = after[0] - total
        busy = ticks - (after[1] - idle)
        return {'daemon_cpu_s': round(daemon_s, 3),
                'machine_busy': round(busy / max(1, ticks), 4)}
