"""What this host's kernel and packages can do, found by trying it.

Emulation features differ between kernels: the machine repronet is developed on has no
``sch_netem`` and no Open vSwitch kernel module, the stock Debian kernel in the Vagrant VM has
both. Reading ``/proc/config.gz`` is not enough (it may be absent, modules may be missing on
disk), so :func:`probe` tries each feature for real, in a throwaway network namespace with a
veth pair, so the live network is never touched:

* ``netem``, ``htb``, ``tbf``: ``tc qdisc add`` of that qdisc on the veth;
* ``nfqueue``, ``iptables_statistic``: an ``iptables -t raw`` rule with ``-j NFQUEUE`` and one
  with ``-m statistic`` (rules live in the namespace and die with it);
* ``vxlan``: ``ip link add ... type vxlan``;
* ``ovs_kernel``: a generic-netlink query for the ``ovs_datapath`` family (the kernel loads
  the ``openvswitch`` module on that query when it can), so no bridge is created;
* ``ovs_user``: ``ovs-vswitchd`` answers and offers the ``netdev`` (userspace) datapath;
* ``cgroup_cpu``: a CFS quota on a throwaway cgroup (``rncap-*``), set and read back through
  the cgroup files and deleted again, on the hierarchy that has the cpu controller;
  ``cgroup_cpu_mechanism`` says which: ``'v2'`` (``cpu.max``; the trial enables ``+cpu`` at
  the v2 root, as a run would), ``'v1'`` (``cpu.cfs_quota_us``) or None
  (``repronet.emu.cpulimit`` uses it for per-host limits);
* ``osken_manager``: path of the os-ken application manager, or None;
* ``systemd``: systemd is PID 1 (``/run/systemd/system`` exists, as sd_booted() checks).

The namespace probes need root; ``root`` records whether they could run at all. Probing costs
about a dozen short commands, so the result is cached per process. :func:`explain` turns a
missing feature into one sentence saying what to use instead, and :func:`require` raises
:class:`CapabilityError` with that sentence.

``python -m repronet.emu.capabilities [--json]`` prints the report.
"""

import dataclasses
import functools
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import uuid

from repronet.emu import cpulimit_cgroups
from repronet.usage import UsageParser

_TIMEOUT = 10
_OVS_CTL = '/usr/share/openvswitch/scripts/ovs-ctl'

FEATURES = ('netem', 'htb', 'tbf', 'ovs_kernel', 'ovs_user', 'cgroup_cpu',
            'nfqueue', 'iptables_statistic', 'vxlan', 'osken_manager', 'systemd')


class CapabilityError(RuntimeError):
    """A feature the experiment needs is missing on this host."""


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """Result of one probe: True where the feature worked when tried."""

    netem: bool
    htb: bool
    tbf: bool
    ovs_kernel: bool
    ovs_user: bool
    cgroup_cpu: bool
    nfqueue: bool
    iptables_statistic: bool
    vxlan: bool
    osken_manager: object  # str path or None
    systemd: bool
    root: bool
    cgroup_cpu_mechanism: object = None  # 'v2', 'v1' or None: how cgroup_cpu works

    def as_dict(self):
        """Plain dict for the manifest (JSON-serializable)."""
        return dataclasses.asdict(self)


def _run(argv):
    """Run argv quietly; True when it exits 0 (False if missing or timed out)."""
    try:
        return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=_TIMEOUT, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _output(argv):
    """Stdout of argv, or None when it fails."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _namespace_probes():
    """Try qdiscs, iptables targets and vxlan inside a throwaway namespace."""
    found = dict.fromkeys(('netem', 'htb', 'tbf', 'nfqueue', 'iptables_statistic',
                           'vxlan'), False)
    if os.geteuid() != 0 or not shutil.which('ip'):
        return found
    ns = 'rncap-%s' % uuid.uuid4().hex[:10]
    if not _run(['ip', 'netns', 'add', ns]):
        return found
    try:
        def in_ns(*argv):
            return _run(['ip', 'netns', 'exec', ns] + list(argv))
        if not (in_ns('ip', 'link', 'add', 'p0', 'type', 'veth', 'peer', 'name', 'p1')
                and in_ns('ip', 'link', 'set', 'p0', 'up')):
            return found
        qdiscs = {
            'netem': ['netem', 'delay', '1ms'],
            'htb': ['handle', '1:', 'htb', 'default', '1'],
            'tbf': ['tbf', 'rate', '1mbit', 'burst', '10kb', 'latency', '50ms'],
        }
        for name, spec in qdiscs.items():
            found[name] = in_ns('tc', 'qdisc', 'add', 'dev', 'p0', 'root', *spec)
            in_ns('tc', 'qdisc', 'del', 'dev', 'p0', 'root')
        rule = ['iptables', '-w', '5', '-t', 'raw', '-A', 'PREROUTING', '-i', 'p1']
        found['nfqueue'] = in_ns(*rule, '-j', 'NFQUEUE', '--queue-num', '7',
                                 '--queue-bypass')
        found['iptables_statistic'] = in_ns(*rule, '-m', 'statistic', '--mode',
                                            'random', '--probability', '0.5', '-j', 'DROP')
        found['vxlan'] = in_ns('ip', 'link', 'add', 'vx0', 'type', 'vxlan', 'id', '42',
                               'dstport', '4789', 'local', '127.0.0.1')
    finally:
        _run(['ip', 'netns', 'del', ns])
    return found


def genl_family_exists(name):
    """Ask generic netlink whether family `name` exists (may autoload its module)."""
    genl_id_ctrl, ctrl_cmd_getfamily, ctrl_attr_family_name = 0x10, 3, 2
    payload = name.encode() + b'\0'
    attr = struct.pack('=HH', 4 + len(payload), ctrl_attr_family_name) + payload
    attr += b'\0' * (-len(attr) % 4)
    body = struct.pack('=BBH', ctrl_cmd_getfamily, 1, 0) + attr
    msg = struct.pack('=IHHII', 16 + len(body), genl_id_ctrl, 1, 1, 0) + body
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 16) as sock:
            sock.settimeout(_TIMEOUT)
            sock.send(msg)
            reply = sock.recv(65536)
    except OSError:
        return False
    if len(reply) < 16:
        return False
    msg_type = struct.unpack_from('=H', reply, 4)[0]
    if msg_type == 2:  # NLMSG_ERROR: the family is unknown
        return False
    return msg_type == genl_id_ctrl


def _ovs_user():
    """True when ovs-vswitchd answers and offers the userspace (netdev) datapath."""
    if not shutil.which('ovs-vsctl'):
        return False
    types = _output(['ovs-vsctl', '--timeout=5', 'get', 'Open_vSwitch', '.',
                     'datapath_types'])
    return bool(types and 'netdev' in types
                and _run(['ovs-appctl', '-T', '5', '-t', 'ovs-vswitchd', 'version']))


def _cgroup_cpu():
    """Return 'v2' or 'v1' when a CFS quota can be set on a test cgroup there, else None.

    Without root nothing is tried: the answer is the hierarchy that has the cpu controller.
    """
    for mechanism, root in cpulimit_cgroups.preferred(cpulimit_cgroups.find()):
        if os.geteuid() != 0 or cpulimit_cgroups.trial(
                mechanism, root, 'rncap-%s' % uuid.uuid4().hex[:10]):
            return mechanism
    return None


def _osken_manager():
    """Path of osken-manager, or None."""
    return shutil.which('osken-manager') or (
        '/usr/bin/osken-manager' if os.access('/usr/bin/osken-manager', os.X_OK) else None)


@functools.lru_cache(maxsize=1)
def probe():
    """Probe this host once per process and return its Capabilities."""
    found = _namespace_probes()
    cgroup_cpu = _cgroup_cpu()
    return Capabilities(
        ovs_kernel=(os.path.isdir('/sys/module/openvswitch')
                    or genl_family_exists('ovs_datapath')),
        ovs_user=_ovs_user(),
        cgroup_cpu=cgroup_cpu is not None,
        cgroup_cpu_mechanism=cgroup_cpu,
        osken_manager=_osken_manager(),
        systemd=os.path.isdir('/run/systemd/system'),
        root=os.geteuid() == 0,
        **found)


_MISSING = {
    'netem': 'This kernel has no sch_netem qdisc, so tc cannot add link delay, jitter or '
             'loss; repronet emulates them with its fallback instead (repronet.emu.linkemu: '
             'the repronet/emu/linkdelay NFQUEUE daemon holds and drops packets at the receiving '
             'host; it needs nfqueue).',
    'htb': 'This kernel has no sch_htb qdisc, so link bandwidth (bw=) cannot be shaped; '
           'drop bw= from the links or use a kernel with CONFIG_NET_SCH_HTB.',
    'tbf': 'This kernel has no sch_tbf qdisc, so token-bucket shaping is unavailable; '
           'use HTB shaping (TCLink bw=, the default) instead.',
    'ovs_kernel': 'This kernel has no Open vSwitch kernel datapath (module openvswitch); '
                  'use --switch ovs (userspace datapath) or lxbr.',
    'cgroup_cpu': 'This host mounts no cgroup hierarchy with the cpu controller (neither '
                  'cgroup v2 listing cpu in cgroup.controllers nor a v1 cpu mount), so '
                  'per-host CPU limits (cores=, cpu=) are unavailable; drop them from the '
                  'hosts or use a kernel with CONFIG_CGROUP_SCHED and CONFIG_CFS_BANDWIDTH.',
    'nfqueue': 'This kernel has no iptables NFQUEUE target, so the link-delay fallback '
               'cannot hold packets; drop delay=/jitter= from the links or use a kernel '
               'with sch_netem.',
    'iptables_statistic': 'This kernel has no iptables statistic match; repronet does not '
                          'need it (the link-delay daemon draws loss itself), but ad-hoc '
                          'random-drop rules (-m statistic) will not work here.',
    'vxlan': 'This kernel has no VXLAN support, so topologies cannot span several '
             'machines; run the whole topology on one machine.',
    'osken_manager': 'osken-manager was not found (Debian package python3-os-ken), so the '
                     'OpenFlow controller cannot run; install it or use --switch ovs or lxbr.',
    'systemd': 'systemd is not running here; services such as Open vSwitch are started by '
               'their own scripts (/usr/share/openvswitch/scripts/ovs-ctl start).',
}


def explain(feature, caps=None):
    """One sentence saying why `feature` is missing and what to use instead."""
    if feature not in FEATURES:
        raise ValueError('unknown feature %r; known: %s' % (feature, ', '.join(FEATURES)))
    caps = caps or probe()
    if getattr(caps, feature):
        return '%s is available.' % feature
    if not caps.root and feature in ('netem', 'htb', 'tbf', 'nfqueue',
                                     'iptables_statistic', 'vxlan'):
        return ('%s could not be probed because this process is not root; run as root '
                '(sudo) to probe and use it.' % feature)
    if feature == 'ovs_user':
        if not shutil.which('ovs-vsctl'):
            return ('Open vSwitch is not installed; install openvswitch-switch or use '
                    '--switch lxbr.')
        if not caps.root:
            return ('ovs-vswitchd could not be asked because this process is not root; '
                    'run as root (sudo).')
        return ('Open vSwitch is installed but ovs-vswitchd does not answer; start it with '
                '"%s start" (or "systemctl start openvswitch-switch"), or use --switch lxbr.'
                % _OVS_CTL)
    if feature == 'cgroup_cpu':
        roots = cpulimit_cgroups.preferred(cpulimit_cgroups.find())
        if roots and not caps.root:
            return ('cgroup_cpu could not be probed because this process is not root; run '
                    'as root (sudo) to probe and use per-host CPU limits.')
        if roots:
            mechanism, root = roots[0]
            return ('Setting a CFS quota on a test cgroup under %s (cgroup %s) failed, so '
                    'per-host CPU limits (cores=, cpu=) are unavailable; use a kernel with '
                    'CONFIG_CFS_BANDWIDTH (and, on v2, no real-time process outside the '
                    'root group) or drop cores=/cpu= from the hosts.' % (root, mechanism))
    return _MISSING[feature]


def require(caps, feature):
    """Raise CapabilityError with explain()'s sentence unless `feature` is present."""
    if not getattr(caps, feature):
        raise CapabilityError(explain(feature, caps))


def report(caps):
    """Readable multi-line report of `caps`."""
    how = 'probed as root' if caps.root else 'NOT root: kernel probes skipped'
    lines = ['repronet capability report (%s)' % how]
    for feature in FEATURES:
        value = getattr(caps, feature)
        mark = 'yes' if value else 'no'
        if feature == 'osken_manager' and value:
            mark = 'yes (%s)' % value
        if feature == 'cgroup_cpu' and value:
            mark = 'yes (cgroup %s)' % caps.cgroup_cpu_mechanism
        lines.append('  %-19s %s' % (feature, mark))
    missing = [f for f in FEATURES if not getattr(caps, f) and f != 'systemd']
    if missing:
        lines.append('What is missing, and what to use instead:')
        lines.extend('  - %s' % explain(f, caps) for f in missing)
    return '\n'.join(lines)


def main(argv=None):
    """Print the capability report; --json prints the dict instead."""
    parser = UsageParser(prog='python -m repronet.emu.capabilities',
                         description=__doc__.split('\n')[0], tool='repronet.emu.capabilities')
    parser.add_argument('--json', action='store_true', help='print JSON')
    args = parser.parse_args(argv)
    caps = probe()
    if args.json:
        print(json.dumps(caps.as_dict(), indent=2, sort_keys=True))
    else:
        print(report(caps))
    return 0


if __name__ == '__main__':
    sys.exit(main())
