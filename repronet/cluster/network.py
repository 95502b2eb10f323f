"""The emulated network spread over several servers: the emulation backend plus placement.

:class:`ClusterNetwork` is ``repronet.emu.network.Network`` with two classes changed: hosts
placed on another server are ``repronet.cluster.nodes.ClusterHost`` (the rest stay Mininet
hosts here), and the link class tunnels the links that cross servers
(``repronet.cluster.links``, carrying the link emulation's interface classes). Switches and
the controller stay on this machine. Everything else (link emulation and its daemons, the
offload fix, the manifest's mechanisms) is the emulation backend's, unchanged; a daemon of a
remote host runs there through the host's ``popen``.

A CPU-limited host (``cores=``/``cpu=``) on another server gets its cgroup there
(``agent cgroup``; its shell and every process launch.py starts for it join it), sized by
that server's CPU count; this machine's ``CpuLimits`` keep only the hosts it runs.

What a crash could leave is recorded on both sides: here (``State``) the ssh clients of the
remote hosts' shells, of node processes and of tunnels, and the control masters; on each
other server (``agent record``) the host shells and their namespaces, beside the PIDs
``launch.py`` records and the cgroups ``agent cgroup`` made. ``stop()`` tears down like the
emulation backend, then clears each server's record (``agent clear``) and ends the control
masters, so nothing of the run is left on any server, whatever the exit path;
``clean_remote`` does the same after a crash. Each other server also holds the run's CPU
idle-state request (``repronet.cluster.idle``), recorded in ``cpu_idle.servers``.

:class:`ClusterContext` is the emulation's ``EmuContext`` with faults (kill, pause, resume)
sent to a remote node's process group on its server.
"""

import json
import signal
import sys

from repronet.cluster import links as cluster_links
from repronet.cluster.idle import RemoteIdle
from repronet.cluster.nodes import ClusterHost, RemoteNodeProcess
from repronet.cluster.ssh import REMOTE_DIR, ClusterError, Machine, remove_stale_sockets
from repronet.emu import cpulimit
from repronet.emu.context import EmuContext
from repronet.emu.network import Network, NetworkError


class ClusterNetwork(Network):
    """A Network whose hosts are placed on several servers."""

    def __init__(self, topo, machines, placement, tunnel='vxlan', **kwargs):
        self.machines = machines            # {name: Machine}, from placement.precheck
        self.placement = placement          # {host: server name}
        self.tunnel = tunnel
        super().__init__(topo, **kwargs)
        self._recorded = False
        self.remote_idle = []               # RemoteIdle per other server, from start()
        try:
            self.remote_limits = remote_limits(topo, machines, placement)
        except cpulimit.CpuLimitError as e:
            raise NetworkError(str(e))
        if self.cpu_limits is not None:     # this machine limits only the hosts it runs
            for name in self.remote_limits:
                self.cpu_limits.hosts.pop(name, None)
            if not self.cpu_limits.hosts:
                self.cpu_limits = None

    def remote(self):
        """The Machines other than this one."""
        return [m for m in self.machines.values() if not m.local]

    def start(self):
        """Connect to every server, clear what an earlier crashed run left there, build."""
        for machine in self.remote():
            machine.connect()
            machine.agent('clear', REMOTE_DIR)
            self.remote_idle.append(RemoteIdle(machine, self.cpu_idle.mode).start())
        built = self.on_built
        self.on_built = lambda network: (built and built(network), self._record_remote())
        super().start()
        mtus = [link.mtu for link in self.net.links if getattr(link, 'crosses', False)]
        if mtus and min(mtus) < 1500:
            cluster_links.lower_mtu(self.net, min(mtus))
        return self

    def _host_class(self):
        """Mininet's host class here, ClusterHost for hosts placed elsewhere."""
        local_cls = super()._host_class()

        def make(name, **params):
            machine = self.machines[self.placement.get(name, self._local_name())]
            if machine.local:
                return local_cls(name, **params)
            return ClusterHost(name, machine=machine, cpu_limit=self.remote_limits.get(name),
                               **params)
        return make

    def _local_name(self):
        return next(name for name, m in self.machines.items() if m.local)

    def _link_class(self):
        """The tunnelling link class with the link emulation's interface class."""
        return cluster_links.cluster_link(self.tunnel, _intf_class_of(super()._link_class()))

    def _record_remote(self):
        """Record each remote host's shell and namespace on its server (once, after build)."""
        if self._recorded or self.net is None:
            return
        self._recorded = True
        for machine in self.remote():
            lines = [json.dumps(h.record()) for h in self.net.hosts
                     if getattr(h, 'machine', None) is machine and h.pid]
            if lines:
                machine.agent('record', REMOTE_DIR, input='\n'.join(lines) + '\n')

    def leftovers(self):
        """What a crash would leave here: remote hosts' PIDs are replaced by their ssh."""
        found = super().leftovers()
        if self.net is None:
            return found
        remote = [h for h in self.net.hosts if isinstance(h, ClusterHost)]
        numbers = {h.pid for h in remote}
        found['pids'] = [p for p in found['pids'] if p not in numbers]
        found['pids'] += [h.shell.pid for h in remote if h.shell is not None]
        found['pids'] += [link.tunnel.pid for link in self.net.links
                          if getattr(link, 'tunnel', None) is not None]
        found['pids'] += [m.master.pid for m in self.remote() if m.master is not None]
        found['pids'] += [hold.pid for hold in self.remote_idle if hold.pid]
        return found

    def cpu_idle_record(self):
        """This machine's idle-state record plus each other server's (after stop())."""
        record = super().cpu_idle_record()
        record['servers'] = {hold.machine.name: hold.record for hold in self.remote_idle}
        return record

    def mechanisms(self):
        """The emulation's mechanisms plus where each host ran and how links crossed."""
        record = super().mechanisms()
        record['cluster'] = {
            'machines': [{'name': m.name, 'local': m.local, 'address': m.address,
                          'user': m.user} for m in self.machines.values()],
            'placement': dict(sorted(self.placement.items())),
            'tunnel': self.tunnel,
            'tunnels': [r for r in (link.record() for link in self.net.links
                                    if hasattr(link, 'record')) if r] if self.net else [],
            'cpu_limits': {name: {'server': self.placement[name], 'cores': limit.cores,
                                  'quota_us': limit.quota_us, 'period_us': limit.period_us,
                                  'asked': limit.asked}
                           for name, limit in sorted(self.remote_limits.items())},
        }
        for host in self.net.hosts if self.net else []:
            group = getattr(host, 'cpu_group', None)
            if group and host.name in record['cluster']['cpu_limits']:
                record['cluster']['cpu_limits'][host.name].update(
                    path=group['path'], mechanism=group['mechanism'])
        return record

    def stop(self):
        """The emulation's teardown, then each server's record cleared and ssh ended."""
        if self._stopped:
            return
        errors = []
        try:
            super().stop()
        except NetworkError as e:
            errors.append(str(e))
        for hold in self.remote_idle:
            hold.stop()
        for machine in self.remote():
            try:
                machine.agent('clear', REMOTE_DIR)
            except ClusterError as e:
                errors.append(str(e))
            machine.disconnect()
        if errors:
            raise NetworkError('teardown incomplete: ' + '; '.join(errors))


def remote_limits(topo, machines, placement):
    """{host: HostLimit} of the CPU-limited hosts placed on other servers, each computed with
    its server's CPU count (``cpu=`` is a fraction of that machine); CpuLimitError, one
    sentence, for a limit that server cannot give."""
    out = {}
    for name in topo.hosts():
        machine = machines[placement.get(name, next(n for n, m in machines.items() if m.local))]
        if machine.local:
            continue
        cpus = ((machine.probe or {}).get('provenance', {}).get('host') or {}).get('cpus')
        limit = cpulimit.host_limit(name, topo.nodeInfo(name), cpus or 1)
        if limit is not None:
            out[name] = limit
    return out


def _intf_class_of(link_class):
    """The interface class a link-emulation link class puts on its ends."""
    from repronet.emu import linkemu
    return {linkemu.ShapedLink: linkemu.ShapedIntf,
            linkemu.CheckedTCLink: linkemu.CheckedTCIntf}.get(link_class)


def clean_remote(names):
    """Clear what this machine's runs left on each named server; return what went."""
    remove_stale_sockets()
    done = []
    for name in names:
        try:
            machine = Machine(name)
            if machine.local:
                continue
            answer = machine.agent('clear', REMOTE_DIR)
        except ClusterError as e:
            print('repronet clean: %s' % e, file=sys.stderr, flush=True)
            continue
        done += ['%s: %s' % (name, item) for item in (answer or {}).get('done', [])]
    return done


class ClusterContext(EmuContext):
    """EmuContext whose faults reach a remote node on its server."""

    def kill(self, node):
        self._send(node, signal.SIGKILL) or super().kill(node)

    def pause(self, node):
        self._send(node, signal.SIGSTOP) or super().pause(node)

    def resume(self, node):
        self._send(node, signal.SIGCONT) or super().resume(node)

    @staticmethod
    def _send(node, signum):
        """Signal a remote node's process (only it: EmuContext signals the PID); True if so."""
        if not isinstance(node, RemoteNodeProcess):
            return False
        node.popen.send_signal(signum, group=False)
        return True
