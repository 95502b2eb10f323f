"""Two VMs joined by a private link, so a cluster run (``--machines``) has a real second kernel.

``vm.py run --vms 2 -- COMMAND`` boots two VMs of the same cached image (vagrant/vm_boot.py)
and runs COMMAND in the first; the second serves ssh, the way "Preparing two real machines"
(docs/cluster.md) asks of a second server. What this module decides:

- The link: one virtio NIC per VM on QEMU's ``socket`` netdev, a TCP connection between the
  two QEMU processes on 127.0.0.1 (the second VM listens, the first connects), so Ethernet
  frames between the VMs never leave this machine and never touch a host interface. TCP, not
  UDP (``dgram``): a frame is never dropped on a loaded host, and every QEMU since 2.x has it.
  The listener must be up before the other QEMU connects (QEMU exits on a refused connect),
  so the second VM boots first and the first waits for its port in ``/proc/net/tcp``.
- The address plan: VM i is ``SUBNET``.i (``172.29.0.1`` and ``.2``, /24) with MAC ``MAC % i``
  (the two must differ: QEMU's default MAC is the same for every VM) and the hostname
  ``repronet-vm<i>`` (the cluster backend keys its records on the other side by hostname).
  172.29/16 lies outside Mininet's 10.0.0.0/8 and the namespace server's 172.30.0.0/16.
- Keys: made on the host for this run only (``ssh-keygen``): root's key pair for the first VM,
  authorized for root on the second, and a host key for the second, pinned in the first VM's
  known_hosts, so ssh there never prompts and checks the host key.
- sshd on the second VM starts after provision.sh, with the options docs/cluster.md gives a
  second machine (``PermitTunnel``, ``UseDNS no``, ``MaxSessions``, ``MaxStartups``), so
  "ssh works" also means "provisioned". The first VM waits (at most ``WAIT_SECONDS``) until
  ``ssh VM2 true`` works, then runs COMMAND with ``REPRONET_VM2`` = the second VM's address.
- The second VM's command is ``sleep infinity``: vm.py ends it when the first VM's command
  ends (or on any other exit path), the way it ends one VM.
"""

import ipaddress
import os
import shutil
import socket
import subprocess
import time

from vagrant import vm_boot

SUBNET = ipaddress.ip_network('172.29.0.0/24')
MAC = '52:54:00:72:29:%02x'
WAIT_SECONDS = 900          # VM 1 waits this long for VM 2's sshd (both boot and provision)
LISTEN_SECONDS = 30         # how long the host waits for VM 2's QEMU to listen
SERVE = ['sleep', 'infinity']
SSHD_OPTIONS = ('PermitRootLogin=prohibit-password', 'PermitTunnel=yes', 'UseDNS=no',
                'MaxSessions=100', 'MaxStartups=100:30:200', 'PasswordAuthentication=no',
                'UsePAM=no')
KEYS = 'keys'               # the folder in each VM's share that holds its keys


class PairError(OSError):
    """The second VM did not come up to take the first's connection (one sentence)."""


def address(index):
    """VM index's (1 or 2) address on the link."""
    return str(SUBNET[index])


def hostname(index):
    """VM index's hostname."""
    return 'repronet-vm%d' % index


def free_port():
    """A TCP port on 127.0.0.1 nobody listens on now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def netdev(index, port):
    """QEMU's arguments for VM index's NIC on the link: VM 2 listens on port, VM 1 connects."""
    way = 'listen' if index == 2 else 'connect'
    return ['-netdev', 'socket,id=pair,%s=127.0.0.1:%d' % (way, port),
            '-device', 'virtio-net-pci,netdev=pair,mac=%s' % (MAC % index)]


def listening(port, tcp_table=None):
    """True when something listens on 127.0.0.1:port (read from /proc/net/tcp, without
    connecting: a connection would be the one the listening QEMU accepts)."""
    if tcp_table is None:
        tcp_table = vm_boot.read('/proc/net/tcp')
    want = '0100007F:%04X' % port
    for line in tcp_table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[1] == want and fields[3] == '0A':     # 0A: LISTEN
            return True
    return False


def make_vms(image, cache, accel, cpus, memory):
    """The two Vm objects, VM 1 first, each with its NIC on a fresh port."""
    port = free_port()
    return [vm_boot.Vm(image, cache, accel, cpus, memory, suffix='' if i == 1 else '-vm2',
                       network=netdev(i, port)) for i in (1, 2)]


def make_keys(vms):
    """Write this run's keys into each VM's share: VM 1 gets root's key pair and VM 2's host
    key as known_hosts, VM 2 gets its host key and VM 1's public key as authorized_keys."""
    made = os.path.join(vms[0].folder, 'keygen')
    os.makedirs(made, mode=0o700, exist_ok=True)
    for name in ('id_ed25519', 'host_ed25519'):
        subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-C',
                        'repronet vm pair', '-f', os.path.join(made, name)], check=True)
    first, second = (os.path.join(vm.xfer, KEYS) for vm in vms)
    for folder in (first, second):
        os.makedirs(folder, mode=0o700, exist_ok=True)
    host_public = ' '.join(_text(made, 'host_ed25519.pub').split()[:2])
    _write(first, 'id_ed25519', _text(made, 'id_ed25519'))
    _write(first, 'id_ed25519.pub', _text(made, 'id_ed25519.pub'))
    _write(first, 'known_hosts', '%s %s\n' % (address(2), host_public))
    _write(second, 'host_ed25519', _text(made, 'host_ed25519'))
    _write(second, 'authorized_keys', _text(made, 'id_ed25519.pub'))
    shutil.rmtree(made)         # each share has its copy; --keep-image keeps no private key


def _text(folder, name):
    with open(os.path.join(folder, name)) as handle:
        return handle.read()


def _write(folder, name, text):
    path = os.path.join(folder, name)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 'w') as handle:
        handle.write(text)


def setup_lines(index):
    """Job lines right after boot: hostname, the link's address, this VM's keys."""
    hosts = ' '.join('%s %s' % (address(i), hostname(i)) for i in (1, 2))
    lines = ['hostname %s' % hostname(index),
             'printf "%%s %%s\\n" %s >> /etc/hosts' % hosts,
             'modprobe -a virtio_net tun vxlan 2>/dev/null',
             'for i in $(seq 100); do [ -e /sys/class/net/eth0 ] && break; sleep 0.1; done',
             'ip addr add %s/%d dev eth0 && ip link set eth0 up || '
             '{ say "no eth0 for the link"; exit 96; }' % (address(index), SUBNET.prefixlen),
             'mkdir -p -m 700 /root/.ssh']
    if index == 1:
        lines += ['install -m 600 "$X/%s/id_ed25519" "$X/%s/id_ed25519.pub" '
                  '"$X/%s/known_hosts" /root/.ssh/' % (KEYS, KEYS, KEYS)]
    else:
        lines += ['install -m 600 "$X/%s/authorized_keys" /root/.ssh/' % KEYS,
                  'install -m 600 "$X/%s/host_ed25519" /etc/ssh/repronet_host_ed25519' % KEYS]
    lines.append('say "link up: eth0 %s/%d"' % (address(index), SUBNET.prefixlen))
    return lines


def ready_lines(index):
    """Job lines between provisioning and the command: VM 2 starts sshd, VM 1 waits for it."""
    if index == 2:
        options = ' '.join('-o %s' % o for o in SSHD_OPTIONS)
        return ['mkdir -p /run/sshd',
                '/usr/sbin/sshd -E /var/log/repronet-sshd.log -h '
                '/etc/ssh/repronet_host_ed25519 %s || '
                '{ cat /var/log/repronet-sshd.log; say "sshd failed"; exit 95; }' % options,
                'say "serving ssh at %s until VM 1\'s command ends"' % address(2)]
    probe = 'ssh -o BatchMode=yes -o ConnectTimeout=5 %s true' % address(2)
    return ['say "waiting for ssh to VM 2 (%s; at most %d s)"' % (address(2), WAIT_SECONDS),
            'deadline=$((SECONDS + %d))' % WAIT_SECONDS,
            'until %s 2>/dev/null; do' % probe,
            '    [ $SECONDS -lt $deadline ] || { %s; say "no ssh to VM 2 within %d s"; '
            'exit 98; }' % (probe, WAIT_SECONDS),
            '    sleep 2',
            'done',
            'say "ssh to VM 2 works"']


def stage(repo, vms, command, env, stage_one):
    """Write both VMs' shares (stage_one is vm_job.stage); return VM 1's revision."""
    make_keys(vms)
    env = dict(env, REPRONET_VM2=address(2))
    stage_one(repo, vms[1].xfer, SERVE, env, setup_lines(2), ready_lines(2))
    return stage_one(repo, vms[0].xfer, command, env, setup_lines(1), ready_lines(1))


def boot(vms):
    """Boot VM 2 (the listener), wait until its QEMU listens, then boot VM 1."""
    vms[1].boot()
    port = int(vms[1].network[1].rsplit(':', 1)[1])
    deadline = time.monotonic() + LISTEN_SECONDS
    while not listening(port):
        if vms[1].proc.poll() is not None:
            raise PairError('VM 2 ended before it listened on 127.0.0.1:%d (%s)' % (
                port, vms[1].qemu_error() or 'no message'))
        if time.monotonic() > deadline:
            raise PairError('VM 2 did not listen on 127.0.0.1:%d within %d s' % (
                port, LISTEN_SECONDS))
        time.sleep(0.1)
    vms[0].boot()


def follow(vms, printers, timeout):
    """Feed both consoles to their printers until VM 1 exits. Return 'done', 'timeout', or
    'vm2' when VM 2 ended first (the first VM can then never reach it)."""
    deadline = time.monotonic() + timeout
    while True:
        ended = [vm.pump(on_line) for vm, on_line in zip(vms, printers)]
        if ended[0]:
            return 'done'
        if ended[1]:
            return 'vm2'
        if time.monotonic() > deadline:
            return 'timeout'
        time.sleep(0.2)


def describe():
    """What vm.json records about the pair."""
    return {'vms': 2, 'link': 'QEMU socket netdev over 127.0.0.1 (TCP)',
            'addresses': {hostname(i): address(i) for i in (1, 2)},
            'sshd_options': list(SSHD_OPTIONS)}


