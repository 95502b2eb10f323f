"""The two-VM variant's parts that need no VM: link arguments, address plan, keys, job script.

The pair itself (two QEMU processes, sshd, a cluster run across them) is a documented command,
not a test: ``vagrant/vm.py run --vms 2 -- ...`` (docs/cluster.md, "Two VMs"); two
software-emulated VMs take minutes and CI has none to spare.
"""

import ipaddress
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from repronet.cluster import nsserver
from vagrant import vm_boot, vm_job, vm_pair

needs_keygen = pytest.mark.skipif(subprocess.run(['which', 'ssh-keygen'], capture_output=True)
                                  .returncode != 0, reason='needs ssh-keygen (openssh-client)')


def _pair(tmp_path):
    return vm_pair.make_vms('/nonexistent/image', str(tmp_path), 'tcg', 2, 1024)


def test_vm2_listens_and_vm1_connects_on_one_loopback_port_with_distinct_macs(tmp_path):
    first, second = _pair(tmp_path)
    assert first.network[0] == second.network[0] == '-netdev'
    port = int(second.network[1].rsplit(':', 1)[1])
    assert second.network[1] == 'socket,id=pair,listen=127.0.0.1:%d' % port
    assert first.network[1] == 'socket,id=pair,connect=127.0.0.1:%d' % port
    macs = [vm.network[3].rsplit('mac=', 1)[1] for vm in (first, second)]
    assert len(set(macs)) == 2 and all(m.startswith('52:54:00:') for m in macs)
    for vm in (first, second):          # the NIC is on QEMU's command line, with its netdev
        argv = vm.argv()
        at = argv.index('-netdev')
        assert argv[at:at + 4] == vm.network
    assert os.path.basename(second.folder) == os.path.basename(first.folder) + '-vm2'
    single = vm_boot.Vm('/nonexistent/image', str(tmp_path), 'tcg', 2, 1024)
    assert '-netdev' not in single.argv() and single.folder == first.folder


def test_address_plan_avoids_mininet_and_the_namespace_server():
    addresses = [ipaddress.ip_address(vm_pair.address(i)) for i in (1, 2)]
    assert addresses[0] != addresses[1] and all(a in vm_pair.SUBNET for a in addresses)
    assert not vm_pair.SUBNET.overlaps(ipaddress.ip_network('10.0.0.0/8'))     # Mininet's
    assert not vm_pair.SUBNET.overlaps(nsserver.POOL)
    assert vm_pair.hostname(1) != vm_pair.hostname(2)


def test_listening_sees_a_listener_and_not_a_closed_port():
    with socket.socket() as server:
        server.bind(('127.0.0.1', 0))
        port = server.getsockname()[1]
        assert not vm_pair.listening(port)          # bound, not yet listening
        server.listen()
        assert vm_pair.listening(port)
    assert not vm_pair.listening(port)


@needs_keygen
def test_keys_pin_vm2s_host_key_and_authorize_vm1s_key(tmp_path):
    vms = _pair(tmp_path)
    for vm in vms:
        os.makedirs(vm.xfer)
    vm_pair.make_keys(vms)
    first, second = (os.path.join(vm.xfer, vm_pair.KEYS) for vm in vms)

    def public(path):
        return ' '.join(subprocess.run(['ssh-keygen', '-y', '-f', path], capture_output=True,
                                       text=True, check=True).stdout.split()[:2])

    known = open(os.path.join(first, 'known_hosts')).read().split()
    assert known[0] == vm_pair.address(2)
    assert ' '.join(known[1:3]) == public(os.path.join(second, 'host_ed25519'))
    authorized = ' '.join(open(os.path.join(second, 'authorized_keys')).read().split()[:2])
    assert authorized == public(os.path.join(first, 'id_ed25519'))
    assert sorted(os.listdir(first)) == ['id_ed25519', 'id_ed25519.pub', 'known_hosts']
    assert sorted(os.listdir(second)) == ['authorized_keys', 'host_ed25519']
    for folder in (first, second):
        for name in os.listdir(folder):
            assert os.stat(os.path.join(folder, name)).st_mode & 0o077 == 0, name
    assert not os.path.exists(os.path.join(vms[0].folder, 'keygen'))


@pytest.mark.parametrize('index', [1, 2])
def test_job_script_puts_the_link_first_and_ssh_between_provision_and_command(index):
    argv = ['topologies/dht8.py', '--machines', 'localhost,$REPRONET_VM2']
    script = vm_job.job_script(argv if index == 1 else vm_pair.SERVE, {'REPRONET_VM2': 'x'},
                               'a' * 40, [], vm_pair.setup_lines(index),
                               vm_pair.ready_lines(index))
    check = subprocess.run(['bash', '-n'], input=script, text=True, capture_output=True)
    assert check.returncode == 0, check.stderr
    lines = script.splitlines()

    def at(text):
        return next(i for i, line in enumerate(lines) if text in line)

    assert at('booted:') < at('ip addr add %s/24 dev eth0' % vm_pair.address(index)) \
        < at('copying the checkout') < at('provision.sh') < at('running:')
    if index == 1:
        assert at('provision.sh') < at('until ssh') < at('ssh to VM 2 works') < at('running:')
        assert 'known_hosts' in lines[at('install -m 600')]
    else:
        sshd = lines[at('/usr/sbin/sshd')]
        assert at('provision.sh') < at('/usr/sbin/sshd') < at('running: sleep infinity')
        for option in ('PermitTunnel=yes', 'UseDNS=no', 'MaxSessions=100',
                       'MaxStartups=100:30:200'):
            assert '-o ' + option in sshd


def test_pump_feeds_every_line_once_and_the_last_partial_one_at_exit(tmp_path):
    vm = vm_boot.Vm('/nonexistent/image', str(tmp_path), 'tcg', 2, 1024)
    os.makedirs(vm.folder)
    # the writer is a real process in QEMU's place: pump reads its file and its exit
    vm.proc = subprocess.Popen(['sh', '-c', 'printf "one\\r\\ntw" > %s; sleep 0.3; '
                                'printf "o\\nthree" >> %s' % (vm.console, vm.console)])
    seen = []
    while not vm.pump(seen.append):
        time.sleep(0.01)
    assert seen == ['one', 'two', 'three']
    assert vm.pump(seen.append) and seen == ['one', 'two', 'three']     # nothing twice


def test_vms_must_be_one_or_two():
    if os.geteuid() != 0:
        pytest.skip('vm.py says "needs root" first')
    vm = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      'vagrant', 'vm.py')
    proc = subprocess.run([sys.executable, vm, 'run', '--vms', '3', '--', 'true'],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ''
    assert proc.stderr.strip() == 'vm.py: --vms 3: give 1 or 2 (two VMs is the largest pair ' \
        'this link joins)'


def test_a_pair_that_cannot_boot_leaves_no_vm_and_no_folder(tmp_path, monkeypatch):
    """Real QEMU on an image whose kernel is not one: VM 2 (or VM 1) ends at once, and
    vm.py's run still halts and removes both VMs and writes vm.json with exit 125."""
    import shutil
    from repronet.run.signals import SignalGuard
    from vagrant import vm, vm_image
    if os.geteuid() != 0 or not shutil.which(vm_boot.QEMU) or not shutil.which('qemu-img'):
        pytest.skip('needs root, %s and qemu-img' % vm_boot.QEMU)
    image = tmp_path / 'image'
    image.mkdir()
    (image / 'image.json').write_text('{"kernel": "none"}')
    (image / vm_image.BASE).write_bytes(b'\0' * 65536)
    (image / 'vmlinuz').write_bytes(b'not a kernel')
    (image / 'initrd.img').write_bytes(b'')
    monkeypatch.setattr(vm_image, 'CACHE', str(tmp_path / 'cache'))
    args = vm.parser().parse_args(['run', '--vms', '2', '--accel', 'tcg', '--timeout', '60',
                                   '--out', str(tmp_path / 'out'), '--', 'true'])
    assert vm.problem(args) is None
    with SignalGuard() as guard:
        code = vm.run(args, str(image), vm.Progress(), guard)
    assert code == 125
    assert os.listdir(tmp_path / 'cache' / 'runs') == []
    left = [p for p in os.listdir('/proc') if p.isdigit() and str(tmp_path) in
            vm_boot._cmdline(int(p))]
    assert left == []
    record = json.loads((tmp_path / 'out' / 'vm.json').read_text())
    assert record['exit_code'] == 125 and record['pair']['vms'] == 2
