"""Links whose two ends are on different servers: a VXLAN tunnel (default) or an ssh tap tunnel.

A link between nodes of one server is Mininet's veth pair, as always. A link that crosses
servers is one interface on each server, made in that server's root namespace, then moved
into its node's namespace under the name Mininet gave it (``ip link set dev TMP netns PID
name FINAL``, one step); the end at a switch (a Linux bridge of the root namespace) is made
under its final name. Both link kinds keep Mininet's ``Link`` API, so the link emulation's
interface classes (HTB for ``bw``, the pfifo queue; ``repronet.emu.linkemu``) configure the
tunnel ends as they configure veth ends, on whichever server the end lives.

``vxlan`` (``VxlanLink``): ``ip link add TMP type vxlan id K local A remote B dstport 4789``
on each side, K one VNI per link of the run, A and B the two servers' addresses (this
machine's source address towards the other server). The encapsulation costs 50 bytes
(outer IPv4 20, UDP 8, VXLAN 8, inner Ethernet 14), so the tunnel's MTU is the underlay's
minus 50, and :func:`lower_mtu` gives every host and switch interface that MTU: a bridge does
not fragment, so a 1,500-byte frame from a host with the default MTU would be dropped at the
tunnel port. The kernel does the work; it needs VXLAN on both kernels and UDP 4789 open
between the servers. Mininet's cluster edition has ``RemoteGRELink`` instead; this kernel
has no GRE.

``ssh`` (``SshTunnelLink``): a tap device on each side (``ip tuntap add dev tapN mode
tap``), joined by ``ssh -o Tunnel=ethernet -w N:M SERVER`` on a connection of its own
(sshd needs ``PermitTunnel yes``); the '@' the server echoes once the session runs says the
tunnel is up. Every frame crosses two user-space ssh processes and a TCP connection:
encrypted and firewall-friendly, slower than VXLAN (the benchmark measures both). Unlike
Mininet's ``RemoteSSHLink`` the tap numbers are chosen free per link (it always uses tap9),
the ssh process is recorded as a leftover and ended with the link.
"""

import itertools
import subprocess

from mininet.link import Link, Intf

from repronet.cluster.ssh import ClusterError, route_to, spawn
from repronet.emu.process import stop_popen

VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50
TUNNELS = ('vxlan', 'ssh')


def machine_of(node):
    """The Machine a node lives on (None: this machine)."""
    return getattr(node, 'machine', None)


def _run_on(machine, script):
    """Run a shell script as root in the root namespace of machine (None: here)."""
    if machine is None or machine.local:
        proc = subprocess.run(['sh', '-c', script], capture_output=True, text=True)
        if proc.returncode != 0:
            raise ClusterError('here: %s failed: %s' % (script[:100], proc.stderr.strip()))
        return proc.stdout
    return machine.run(['sh', '-c', script])


def _move(tmp, node, final):
    """The commands that give interface tmp (root namespace) to node under its final name."""
    if not node.inNamespace:        # a switch of the root namespace: already final
        return ''
    return ' && ip link set dev %s netns %d name %s' % (tmp, node.pid, final)


class _CrossLink(Link):
    """A Link that tunnels when its nodes are on different servers."""

    intf_class = Intf           # the link emulation's interface class (see cluster_link)
    _serial = itertools.count(1)

    def __init__(self, node1, node2, **kwargs):
        kwargs.setdefault('cls1', self.intf_class)
        kwargs.setdefault('cls2', self.intf_class)
        self.tunnel = None          # the ssh process of an ssh tunnel
        self.crosses = False
        Link.__init__(self, node1, node2, **kwargs)

    def makeIntfPair(self, intfname1, intfname2, addr1=None, addr2=None, node1=None,
                     node2=None, deleteIntfs=True):
        """A veth pair on one server, else a tunnel."""
        m1, m2 = machine_of(node1), machine_of(node2)
        if m1 is m2:
            return Link.makeIntfPair(intfname1, intfname2, addr1, addr2, node1, node2,
                                     deleteIntfs=deleteIntfs)
        if m2 is None:      # keep the remote end second
            node1, node2, intfname1, intfname2 = node2, node1, intfname2, intfname1
            m1, m2 = m2, m1
        self.crosses = True
        self.make_tunnel(node1, intfname1, node2, intfname2, m2, next(self._serial))
        return None

    def record(self):
        """What the manifest keeps about this link's tunnel (None if it stays on a server)."""
        if not self.crosses:
            return None
        return {'node1': self.intf1.node.name, 'intf1': self.intf1.name,
                'node2': self.intf2.node.name, 'intf2': self.intf2.name,
                'tunnel': self.kind, 'mtu': self.mtu}

    def stop(self):
        """Delete both ends (and end the tunnel's ssh)."""
        if self.tunnel is not None:
            stop_popen(self.tunnel, grace=5)
        Link.stop(self)


class VxlanLink(_CrossLink):
    """A link across servers over VXLAN (see the module docstring)."""

    kind = 'vxlan'
    mtu = None

    def make_tunnel(self, node1, name1, node2, name2, remote, vni):
        """One VXLAN device per side, same VNI, each pointing at the other server."""
        local_address = route_to(remote.address)[0]
        underlay = _underlay_mtu(remote.address)
        self.mtu = underlay - VXLAN_OVERHEAD
        for node, name, machine, here, there in (
                (node1, name1, None, local_address, remote.address),
                (node2, name2, remote, remote.address, local_address)):
            tmp = name if not node.inNamespace else 'rnvx%d' % vni
            _run_on(machine, 'ip link add %s type vxlan id %d local %s remote %s dstport %d '
                             '&& ip link set dev %s mtu %d%s' % (
                                 tmp, vni, here, there, VXLAN_PORT, tmp, self.mtu,
                                 _move(tmp, node, name)))


class SshTunnelLink(_CrossLink):
    """A link across servers over an ssh tap tunnel (see the module docstring)."""

    kind = 'ssh'
    mtu = 1500

    def make_tunnel(self, node1, name1, node2, name2, remote, serial):
        """Free tap numbers on both sides, the ssh joining them, then the moves."""
        local_tap = _free_tap(None, serial)
        remote_tap = _free_tap(remote, serial)
        _run_on(None, 'ip tuntap add dev tap%d mode tap' % local_tap)
        try:
            _run_on(remote, 'ip tuntap add dev tap%d mode tap' % remote_tap)
            argv = remote.ssh_prefix(mux=False)
            argv[1:1] = ['-n', '-o', 'Tunnel=ethernet', '-w', '%d:%d' % (local_tap, remote_tap)]
            self.tunnel = spawn(argv + ['--', 'echo @'], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if self.tunnel.stdout.read(1) != b'@':
                self.tunnel.kill()
                why = self.tunnel.stderr.read().decode(errors='replace').strip()
                raise ClusterError('the ssh tunnel to %s did not come up (%s); the server\'s '
                                   'sshd needs PermitTunnel yes' % (remote.name, why or
                                                                    'no message'))
            _run_on(None, 'true' + _move('tap%d' % local_tap, node1, name1))
        except BaseException:
            subprocess.run(['ip', 'link', 'del', 'tap%d' % local_tap], capture_output=True)
            raise
        _run_on(remote, 'true' + _move('tap%d' % remote_tap, node2, name2))
        if not node1.inNamespace:   # a bridge port: rename the local tap in place
            _run_on(None, 'ip link set dev tap%d name %s' % (local_tap, name1))

    def leftover_pids(self):
        return [self.tunnel.pid] if self.tunnel is not None else []


def _free_tap(machine, serial):
    """A tap number not in use in machine's root namespace."""
    existing = _run_on(machine, 'ls /sys/class/net').split()
    for n in itertools.count(100 + serial):
        if 'tap%d' % n not in existing:
            return n


def _underlay_mtu(remote_address):
    """The MTU of the interface that carries traffic to the other server."""
    with open('/sys/class/net/%s/mtu' % route_to(remote_address)[1]) as f:
        return int(f.read())


def cluster_link(tunnel, intf_class):
    """The Mininet link class for a run: the tunnel kind, the emulation's interfaces."""
    if tunnel not in TUNNELS:
        raise ClusterError('unknown tunnel %r (vxlan or ssh)' % (tunnel,))
    base = VxlanLink if tunnel == 'vxlan' else SshTunnelLink
    return type('%sEmulated' % base.__name__, (base,), {'intf_class': intf_class})


def lower_mtu(net, mtu):
    """Give every host and switch interface of net the tunnel's MTU (bridges do not fragment)."""
    for node in net.hosts + net.switches:
        for intf in node.intfList():
            if intf.name != 'lo':
                out = node.cmd('ip link set dev %s mtu %d' % (intf.name, mtu))
                if out.strip():
                    raise ClusterError('cannot set the MTU of %s to %d: %s'
                                       % (intf.name, mtu, out.strip()))
