"""Topo -> a started Mininet network, and a teardown that leaves nothing behind.

The builder chooses the classes Mininet is handed (dependency injection by
class, as Mininet itself is designed) and records every choice for the
manifest, so a results folder says which switch, datapath, controller and link
mechanism produced its numbers:

- switch: ``lxbr`` -> ``LinuxBridge`` (no controller, fastest on a small
  machine); ``ovs`` -> ``OVSBridge`` (OVS in standalone mode, its own MAC
  learning, no controller); ``osken`` -> ``OVSSwitch`` speaking OpenFlow 1.3 to
  our os-ken controller (``repronet.emu.controller.OsKenController``), which
  also logs per-port counters.
- datapath (OVS only): ``auto`` picks the kernel datapath when the host has the
  openvswitch module, else the userspace (netdev) one; asking for ``kernel``
  where it is missing fails with the sentence from ``capabilities.explain``.
- userspace datapath + veth: TCP breaks unless checksum/segmentation offload
  is off on the hosts' interfaces (packets leave the veth with partial
  checksums that nothing completes), so the builder turns ``tx``, ``tso`` and
  ``gso`` off on every host interface right after start and records it.
- shaped links (``bw``): with segmentation offload on, a host's TCP hands HTB
  packets of up to 64 KiB, split into segments only after the qdisc, so a message
  sent after an idle spell leaves in one burst at veth speed, not at the link's
  rate (a 42 KB message over 100 Mbit/s: 0.2-2.9 ms instead of 3.4). The builder
  caps each shaped host interface's ``gso_max_size`` at what its rate carries in
  GSO_WINDOW_S (200 us: 2,500 bytes at 100 Mbit/s, so one segment; 12,500 at 500; never
  under one 1,500-byte frame), so
  a burst leaves at most that much before a real link would have sent its last
  byte (3.4-3.7 ms for that message), while fast links keep some batching: each GSO
  packet is one packet for a delay daemon to hold, and turning GSO off cost a 500
  Mbit/s TCP transfer with 1 ms 15 % of its rate, a 100 us window 1.2 cores of daemon
  CPU against 0.6-0.8 at 200 us and 0.3 uncapped (benchmarks/lan_latency.py, load 2-2.6).
  Recorded as ``gso_caps``. Where link-delay daemons run (linkdelay without netem), they
  time every packet's bits on its path's rated links themselves, GSO packets as the frames
  they become (``linkdelay_wire.c``), so there the cap is not set: whole GSO packets mean
  fewer verdicts, and the timing is right without it.
- hosts: ``repronet.emu.cpulimit.CPULimitedHost`` as soon as any host asks for a
  CPU limit (``cores=`` of one core, or Mininet's ``cpu=`` fraction of the machine), on
  cgroup v2 or v1 as the capability probe found; the limits are checked (and the
  capability required) in the constructor, before anything starts, and recorded as
  ``cpu_limits``.
- links: ``repronet.emu.linkemu.plan`` validates every link before anything
  starts; its ``link_class`` goes to Mininet and ``install(net)`` runs after
  ``net.start()``.
- CPU idle states: ``cpu_idle='poll'`` (the default) keeps this machine's CPUs out of
  sleeping idle states from start() to stop(), since waking a halted CPU costs more than
  a LAN link's delay (``repronet.emu.cpuidle`` says why and what it costs); ``os`` leaves
  them to the kernel. Recorded as ``cpu_idle``.
- CPUs for the link daemons: ``link_cpus=N`` sets the last N CPUs apart for the delay
  daemons and runs everything the network starts on the others, from start() to stop()
  (``repronet.emu.linkcpus`` says why). Recorded as ``link_cpus``.

``Network.stop()`` is idempotent and tolerant: each teardown step runs even if
an earlier one failed, and the errors are collected and re-raised at the end.
"""

import functools
import os

from mininet.net import Mininet
from mininet.node import Host, OVSBridge, OVSSwitch
from mininet.nodelib import LinuxBridge

from repronet.emu import capabilities, cpuidle, cpulimit, linkcpus, linkemu

OFFLOADS = ('tx', 'tso', 'gso')
GSO_WINDOW_S = 200e-6   # shaped links: a GSO packet carries at most this long at the link's rate
# ... but at least one full frame: a real link sends a frame back to back anyway, and the kernel
# refuses a gso_max_size under its TCP header room (`ip link` said "integer out of range" for
# 125 bytes, 5 Mbit/s, on 6.1 and 6.18: every link under 10 Mbit/s without delay failed to start)
GSO_MIN_BYTES = 1500


class NetworkError(RuntimeError):
    """The network could not be built as asked (one clear sentence)."""


def choose_datapath(switch, datapath, caps):
    """Return 'kernel', 'user' or None (no OVS) for the asked switch/datapath."""
    if switch == 'lxbr':
        return None
    if not caps.ovs_user and not caps.ovs_kernel:
        raise NetworkError(capabilities.explain('ovs_user', caps))
    if datapath == 'kernel' and not caps.ovs_kernel:
        raise NetworkError(capabilities.explain('ovs_kernel', caps))
    if datapath == 'user' and not caps.ovs_user:
        raise NetworkError(capabilities.explain('ovs_user', caps))
    if datapath == 'auto':
        return 'kernel' if caps.ovs_kernel else 'user'
    return datapath


class Network:
    """A started Mininet network plus what was chosen to build it.

    ``link_queues`` defaults to ``cpu`` (a delay daemon worker per CPU) for code that builds
    a Network itself, such as benchmarks/lan_latency.py, since under CPU hogs it measured
    1.5-3.0 us of lateness at 0.01 ms a link against 8.4-20.5 with ``one``
    (docs/link-emulation.md "Step 12"); an experiment's run passes its own
    ``Experiment.link_queues`` instead (repronet.run.backends.link_queues)."""

    def __init__(self, topo, switch='lxbr', datapath='auto', caps=None,
                 controller_log=None, stats_interval=1.0, on_built=None,
                 seed=0, log_dir=None, links='auto', cpu_idle='poll', link_cpus=0,
                 link_queues='cpu'):
        self.topo = topo
        self.cpu_idle = cpuidle.IdleHold(cpu_idle)
        self.switch = switch
        self.caps = caps or capabilities.probe()
        self.datapath = choose_datapath(switch, datapath, self.caps)
        self.controller_log = controller_log
        self.stats_interval = stats_interval
        self.on_built = on_built
        self.log_dir = log_dir
        self.links = linkemu.plan(topo, self.caps, seed=seed, mechanism=links)
        self.link_queues = link_queues
        try:    # only where there are daemons to place (netem links have none)
            self.link_cpus = linkcpus.LinkCpus(link_cpus if self.links.needs_daemons else 0)
        except linkcpus.LinkCpuError as e:
            raise NetworkError(str(e))
        try:
            self.cpu_limits = cpulimit.plan(topo, self.caps)
        except cpulimit.CpuLimitError as e:
            raise NetworkError(str(e))
        self.net = None
        self.controller = None
        self.offloads_off = []
        self.gso_caps = {}          # {host interface: gso_max_size bytes}
        self._installed = False
        self._stopped = False

    def start(self):
        """Build and start the network, then install link emulation."""
        self.cpu_idle.start()
        self.link_cpus.confine()    # before Mininet starts anything: its children inherit it
        switch_cls, controller = self._switch_classes()
        self.net = Mininet(topo=self.topo, switch=switch_cls, host=self._host_class(),
                           link=self._link_class(), controller=controller,
                           autoSetMacs=True, build=False, waitConnected=False)
        try:
            self.net.build()
        except cpulimit.CpuLimitError as e:
            raise NetworkError(str(e))
        finally:
            if self.on_built:
                self.on_built(self)
        self.controller = self.net.controllers[0] if self.net.controllers \
            else None
        self.net.start()
        if self.on_built:
            self.on_built(self)     # the controller has a PID only now
        if self.switch == 'osken' and not self.net.waitConnected(timeout=30):
            raise NetworkError('the OVS switches did not connect to the os-ken '
                               'controller within 30 s; see its log in logs/')
        if self.datapath == 'user':
            self._offloads_off()
        elif self.links.shaped and not self.links.serialises:
            self._cap_gso()
        try:
            self.links.install(self.net, log_dir=self.log_dir, cpus=self.link_cpus,
                               queues=self.link_queues)
        finally:
            if self.on_built:
                self.on_built(self)     # link daemons have PIDs now
        self._installed = True
        return self

    def _host_class(self):
        """The host class Mininet gets (repronet.cluster places hosts on servers here)."""
        return self.cpu_limits.host_class() if self.cpu_limits else Host

    def _link_class(self):
        """The link class Mininet gets (repronet.cluster tunnels links across servers)."""
        return self.links.link_class

    def _switch_classes(self):
        """Return (switch class, controller) for the chosen switch kind."""
        if self.switch == 'lxbr':
            return LinuxBridge, None
        if self.switch == 'ovs':
            return functools.partial(OVSBridge, datapath=self.datapath), None
        if self.switch == 'osken':
            if not self.caps.osken_manager:
                raise NetworkError(capabilities.explain('osken_manager',
                                                        self.caps))
            from repronet.emu.controller import OsKenController
            log_dir = (os.path.dirname(str(self.controller_log))
                       if self.controller_log else None)
            controller = functools.partial(
                OsKenController, stats_log=self.controller_log,
                stats_interval=self.stats_interval, log_dir=log_dir,
                on_start=self._controller_started)
            switch = functools.partial(OVSSwitch, datapath=self.datapath,
                                       protocols='OpenFlow13')
            return switch, controller
        raise NetworkError('unknown switch kind %r (lxbr, ovs or osken)'
                           % (self.switch,))

    def _controller_started(self, controller):
        """Record the controller's PID the moment it exists (see on_built)."""
        if self.on_built:
            self.controller = controller
            self.on_built(self)

    def _cap_gso(self):
        """Cap gso_max_size on each host interface with a rate (see the module docstring)."""
        done = self._on_host_intfs(
            lambda intf: ['ip', 'link', 'set', 'dev', intf.name, 'gso_max_size',
                          str(_gso_size(intf))] if _gso_size(intf) else None,
            'cap gso_max_size')
        self.gso_caps = {intf.name: _gso_size(intf) for intf in done}

    def _offloads_off(self):
        """Turn off checksum/segmentation offload on every host interface."""
        done = self._on_host_intfs(
            lambda intf: ['ethtool', '-K', intf.name] + [w for f in OFFLOADS for w in (f, 'off')],
            'turn offloads off')
        self.offloads_off = [intf.name for intf in done]

    def _on_host_intfs(self, argv_for, what):
        """Run argv_for(intf) in its host for every host interface but lo that it gives a
        command for; NetworkError saying what failed where. Returns the interfaces done."""
        done = []
        for host in self.net.hosts:
            for intf in host.intfList():
                argv = argv_for(intf) if intf.name != 'lo' else None
                if not argv:
                    continue
                out, err, code = host.pexec(argv)
                if code != 0:
                    raise NetworkError('cannot %s on %s: %s' % (what, intf.name, err.strip()))
                done.append(intf)
        return done

    def mechanisms(self):
        """Return what was chosen, for the manifest."""
        return {
            'switch': self.switch,
            'switch_class': {'lxbr': 'LinuxBridge', 'ovs': 'OVSBridge',
                             'osken': 'OVSSwitch'}[self.switch],
            'datapath': self.datapath,
            'controller': type(self.controller).__name__
            if self.controller else None,
            'controller_pid': getattr(getattr(self.controller, 'process',
                                              None), 'pid', None),
            'stats_interval': self.stats_interval
            if self.switch == 'osken' else None,
            'hosts': 'CPULimitedHost' if self.cpu_limits else 'Host',
            'cpu_limits': self.cpu_limits.record() if self.cpu_limits else None,
            'offloads_off': {'features': list(OFFLOADS),
                             'interfaces': list(self.offloads_off)}
            if self.offloads_off else None,
            'gso_caps': {'window_us': GSO_WINDOW_S * 1e6, 'max_size': dict(self.gso_caps)}
            if self.gso_caps else None,
            'link_mechanism': self.links.mechanism,
            'serialisation': ('linkdelay: each packet timed on its path\'s rated links, '
                              'GSO packets as their MTU frames' if self.links.serialises else
                              'htb' + (' with the gso cap' if self.gso_caps else ''))
            if self.links.shaped else None,
            'links': self.links.records(),
            'link_daemons': self.links.daemon_schedule(),
            'ports': self.ports(),
            'bridge_nf_call': _bridge_nf_call()
            if self.switch == 'lxbr' else None,
            'cpu_idle': self.cpu_idle.record(),
            'link_cpus': self.link_cpus.record() if self.links.needs_daemons else None,
        }

    def cpu_idle_record(self):
        """The idle-state record with the states entered during the run (after stop())."""
        return self.cpu_idle.record()

    def ports(self):
        """Return which interface ends each link, e.g. h2-eth0 <-> s1-eth2."""
        if self.net is None:
            return []
        return sorted(({'node1': link.intf1.node.name,
                        'intf1': link.intf1.name,
                        'node2': link.intf2.node.name,
                        'intf2': link.intf2.name}
                       for link in self.net.links),
                      key=lambda r: (r['intf1'], r['intf2']))

    def leftovers(self):
        """Return what a crash would leave: pids, interfaces, bridges."""
        if self.net is None:
            return {'pids': [], 'intfs': [], 'bridges': [], 'ovs_bridges': []}
        pids = [n.pid for n in self.net.hosts + self.net.switches if n.pid]
        for c in self.net.controllers:
            process = getattr(c, 'process', None)   # OsKenController's
            pids += [p for p in (getattr(c, 'pid', None),
                                 getattr(process, 'pid', None)) if p]
        pids += self.links.daemon_pids()    # linkdelay
        intfs = sorted({i.name for n in self.net.switches
                        for i in n.intfList() if i.name != 'lo'})
        names = [s.name for s in self.net.switches]
        ovs = names if self.switch in ('ovs', 'osken') else []
        bridges = names if self.switch == 'lxbr' else []
        return {'pids': pids, 'intfs': intfs, 'bridges': bridges,
                'ovs_bridges': ovs}

    def stop(self):
        """Undo start(): link emulation, then the network; safe to repeat."""
        if self._stopped:
            return
        self._stopped = True
        errors = []
        try:
            self.links.stop()
        except Exception as e:   # keep tearing down; report at the end
            errors.append('link emulation: %s' % e)
        if self.net is not None:
            for node in self.net.hosts + self.net.switches:
                # A signal during node.cmd() leaves the shell 'waiting';
                # Mininet's stop would then refuse to talk to it.
                if getattr(node, 'waiting', False):
                    node.waiting = False
            try:
                self.net.stop()
            except Exception as e:
                errors.append('mininet: %s' % e)
        if self.cpu_limits is not None:     # what host termination could not remove
            errors += ['cpu limits: %s' % e for e in self.cpu_limits.remove_all()]
        self.cpu_idle.stop()
        self.link_cpus.release()
        if errors:
            raise NetworkError('teardown incomplete: ' + '; '.join(errors))


def _gso_size(intf):
    """The gso_max_size cap of a host interface: its rate's bytes in GSO_WINDOW_S, but at
    least GSO_MIN_BYTES (0: no rate)."""
    bw = (getattr(intf, 'params', None) or {}).get('bw')
    return max(int(bw * 1e6 / 8 * GSO_WINDOW_S), GSO_MIN_BYTES) if bw else 0


def _bridge_nf_call():
    """Return the bridge-nf-call sysctls: 1 means bridged frames traverse
    the root namespace's iptables/arptables, which a manifest must show."""
    values = {}
    for table in ('arptables', 'iptables', 'ip6tables'):
        path = '/proc/sys/net/bridge/bridge-nf-call-%s' % table
        try:
            with open(path) as f:
                values[table] = int(f.read())
        except (OSError, ValueError):
            values[table] = None    # br_netfilter not loaded: no traversal
    return values
