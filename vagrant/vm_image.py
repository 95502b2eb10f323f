"""The VM image: Debian 12 with the stock kernel, built from Debian packages alone.

Why this shape (measured on the development machine, see ENVIRONMENT.md): its kernel has no
``sch_netem`` and no Open vSwitch module, Debian's stock kernel has both, and a root file
system from ``mmdebstrap`` plus ``mke2fs -d`` needs neither a box download nor a loop mount.

- The package list is provision.sh's ``PACKAGES`` (read from that file, so there is one list),
  minus what only the machine that runs the VM needs (its ``VM_HOST_ONLY``), plus the kernel
  and what the VM itself needs (``VM_EXTRA``). So provision.sh inside the VM finds everything installed
  and never needs the network.
- The image is cached outside the checkout under a key that hashes that list, the suite, the
  apt sources, the init script and ``BUILDER_VERSION`` (bump it when the build changes); it
  is rebuilt only when the key changes, and a new build removes the outdated ones. The disk
  is a sparse raw ext4 file made read-only; runs boot a qcow2 overlay on it.
- The image boots straight into ``INIT`` (no systemd): it mounts what Mininet needs, mounts the
  run's 9p share, runs the share's ``job.sh`` and powers off. What a run does lives in that job
  (vagrant/vm_job.py), not in the image, so changing it needs no rebuild.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

BUILDER_VERSION = 3
SUITE = 'bookworm'
CACHE = os.environ.get('REPRONET_VM_CACHE', '/var/cache/repronet/vm')
PROVISION = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'provision.sh')
VM_EXTRA = ('linux-image-amd64', 'initramfs-tools', 'e2fsprogs', 'iproute2', 'kmod', 'mount',
            # only for the Vagrant box (vagrant/vm_box.py), which boots systemd, not INIT:
            'systemd-sysv', 'openssh-server', 'sudo', 'rsync')
DISK_SIZE = '6G'
SOURCES = ('/etc/apt/sources.list.d/debian.sources', '/etc/apt/sources.list')
INIT_PATH = '/usr/local/sbin/repronet-vm-init'
BASE = 'base.raw'       # sparse; runs boot a qcow2 overlay on it, so it is never written

# PID 1 of the VM. The initramfs has already moved /dev, /proc, /sys and /run onto the root.
INIT = r'''#!/bin/bash
# repronet VM init (written by vagrant/vm_image.py): mount, run the host's job, power off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs dev /dev
mountpoint -q /run || mount -t tmpfs run /run
mkdir -p /dev/pts /dev/shm /run/lock /mnt/xfer
mount -t devpts devpts /dev/pts
mount -t tmpfs shm /dev/shm
mount -t tmpfs tmp /tmp
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
hostname repronet-vm
ip link set lo up
touch /run/repronet-vm
modprobe 9pnet_virtio; modprobe 9p
rc=99
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 xfer /mnt/xfer; then
    mkdir -p /mnt/xfer/out
    bash /mnt/xfer/job.sh; rc=$?
    echo "$rc" > /mnt/xfer/out/rc.tmp && mv /mnt/xfer/out/rc.tmp /mnt/xfer/out/rc
    sync; umount /mnt/xfer
else
    echo "repronet-vm: could not mount the 9p share xfer"
fi
echo "repronet-vm: job finished with exit code $rc; powering off"
sync
echo o > /proc/sysrq-trigger
sleep 60
'''

# For the Vagrant box only: the user Vagrant logs in as (password vagrant, which Vagrant
# replaces with a key pair of its own on the first `vagrant up`), and DHCP on eth0 through
# systemd-networkd. vm.py boots INIT instead and has no network device, so none of it runs
# there.
BOX_HOOK = ' && '.join([
    'chroot "$1" useradd -m -s /bin/bash vagrant',
    'echo vagrant:vagrant | chroot "$1" chpasswd',
    'echo "vagrant ALL=(ALL) NOPASSWD:ALL" > "$1/etc/sudoers.d/vagrant"',
    'printf "[Match]\\nName=eth0\\n[Network]\\nDHCP=yes\\n" > '
    '"$1/etc/systemd/network/eth0.network"',
    'mkdir -p "$1/etc/systemd/system/multi-user.target.wants"',
    'ln -sf /lib/systemd/system/systemd-networkd.service '
    '"$1/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"',
    'echo "/dev/vda / ext4 rw 0 1" > "$1/etc/fstab"'])


class ImageError(RuntimeError):
    """Building the image failed; the message is one sentence."""


def packages(provision=PROVISION):
    """The VM's package list: provision.sh's PACKAGES minus its VM_HOST_ONLY plus VM_EXTRA,
    sorted."""
    with open(provision) as handle:
        text = handle.read()
    match = re.search(r'^PACKAGES=\((.*?)^\)', text, re.S | re.M)
    host_only = re.search(r'^VM_HOST_ONLY="([^"]*)"', text, re.M)
    if not match or not host_only:
        raise ImageError('%s has no PACKAGES=( ... ) list or no VM_HOST_ONLY="..." line'
                         % provision)
    listed = [w for line in match.group(1).splitlines()
              for w in line.split('#', 1)[0].split()]
    return sorted((set(listed) - set(host_only.group(1).split())) | set(VM_EXTRA))


def sources_file():
    """The host's apt sources file mmdebstrap reads (the first of SOURCES that has content)."""
    for path in SOURCES:
        if os.path.isfile(path) and os.path.getsize(path) > 0:
            return path
    raise ImageError('this machine has no apt sources (%s); the image is built from them'
                     % ' or '.join(SOURCES))


def key(pkgs, sources_text):
    """The cache key: what the image is made of and how."""
    blob = json.dumps({'packages': pkgs, 'suite': SUITE, 'sources': sources_text,
                       'builder': BUILDER_VERSION, 'init': INIT, 'disk': DISK_SIZE},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def image_dir(cache=CACHE, provision=PROVISION):
    """The folder the current package list's image lives (or would live) in."""
    with open(sources_file()) as handle:
        sources_text = handle.read()
    return os.path.join(cache, 'image-' + key(packages(provision), sources_text))


def is_built(path):
    """True when path holds a finished image (image.json is written last)."""
    return all(os.path.isfile(os.path.join(path, f))
               for f in ('image.json', BASE, 'vmlinuz', 'initrd.img'))


def missing_tools():
    """The build tools this machine lacks (names of Debian packages)."""
    need = {'mmdebstrap': 'mmdebstrap', 'qemu-img': 'qemu-utils', 'mke2fs': 'e2fsprogs'}
    return [pkg for tool, pkg in need.items() if shutil.which(tool) is None]


def build(say, cache=CACHE, provision=PROVISION, force=False):
    """Build the image unless it is cached; return its folder. say(text) prints progress."""
    path = image_dir(cache, provision)
    if is_built(path) and not force:
        say('image %s is cached (package list and builder unchanged)' % path)
        return path
    lacking = missing_tools()
    if lacking:
        raise ImageError('building the VM image needs %s (bash vagrant/provision.sh installs '
                         'them)' % ', '.join(lacking))
    os.makedirs(cache, exist_ok=True)
    pkgs = packages(provision)
    last = _last_build_seconds(cache)
    say('building image %s: Debian %s with %d packages from %s%s' % (
        os.path.basename(path), SUITE, len(pkgs), sources_file(),
        '; the last build took %.0f s' % last if last else '; about 2-4 min on 2 cores'))
    work = tempfile.mkdtemp(prefix='build-', dir=cache)
    started = time.monotonic()
    try:
        root = os.path.join(work, 'root')
        _bootstrap(root, pkgs, say)
        _install_init(root)
        say('making the ext4 disk (%s, sparse) from the tree' % DISK_SIZE)
        _run(['mke2fs', '-q', '-F', '-t', 'ext4', '-L', 'repronet', '-d', root,
              os.path.join(work, BASE), DISK_SIZE], 'mke2fs')
        for name in ('vmlinuz', 'initrd.img'):
            shutil.copyfile(os.path.realpath(os.path.join(root, name)),
                            os.path.join(work, name))
        kernel = os.path.basename(os.path.realpath(os.path.join(root, 'vmlinuz')))
        shutil.rmtree(root)
        seconds = time.monotonic() - started
        with open(os.path.join(work, 'image.json'), 'w') as handle:
            json.dump({'suite': SUITE, 'packages': pkgs, 'builder': BUILDER_VERSION,
                       'kernel': kernel, 'sources': sources_file(),
                       'build_seconds': round(seconds, 1),
                       'built_at': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())},
                      handle, indent=1)
        os.chmod(os.path.join(work, BASE), 0o444)
        if os.path.exists(path):
            shutil.rmtree(path)
        os.rename(work, path)
        _remove_stale(cache, path, say)
        # Write the new disk out before a VM boots from it: the kernel's writeback of its
        # gigabytes otherwise runs beside the first boot's emulated CPU (the one CI run that
        # followed a fresh build measured a 100 ms RTT on a 20 ms netem link; runs on a
        # cached image measured 20-30 ms).
        say('writing the image to disk (sync)')
        os.sync()
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    say('image built in %.0f s (%s)' % (seconds, kernel))
    return path


def _bootstrap(root, pkgs, say):
    """mmdebstrap the tree into root from the host's apt sources."""
    argv = ['mmdebstrap', '--variant=apt', '--mode=root', '--format=directory',
            '--include=' + ','.join(pkgs),
            '--customize-hook=echo repronet-vm > "$1/etc/hostname"',
            '--customize-hook=' + BOX_HOOK,
            SUITE, root, '-']
    say('mmdebstrap (downloads the packages with apt; the longest step)')
    tail = []
    with open(sources_file()) as sources:
        proc = subprocess.Popen(argv, stdin=sources, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            for line in proc.stdout:        # its "I: ..." lines are the steps
                tail = (tail + [line.rstrip()])[-15:]
                if line.startswith('I: '):
                    say('mmdebstrap: ' + line[3:].strip())
        except BaseException:               # Ctrl-C, SIGTERM: stop it before the tree goes
            proc.kill()
            raise
        finally:
            proc.wait()
    if proc.returncode != 0:
        raise ImageError('mmdebstrap failed (exit %d); its last lines:\n%s' % (
            proc.returncode, '\n'.join(tail)))


def _install_init(root):
    """Write the VM's PID 1 into the tree."""
    target = root + INIT_PATH
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, 'w') as handle:
        handle.write(INIT)
    os.chmod(target, 0o755)


def _run(argv, what):
    """Run a build step; ImageError with its output if it fails."""
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)
    if proc.returncode != 0:
        raise ImageError('%s failed (exit %d): %s' % (what, proc.returncode,
                                                      proc.stdout.strip()[-500:]))


def _remove_stale(cache, keep, say):
    """Remove the images (and boxes) of other package lists or builders (GBs each)."""
    key = os.path.basename(keep)[len('image-'):]
    for name in sorted(os.listdir(cache)):
        folder = os.path.join(cache, name)
        if name.startswith('repronet-debian12-') and name.endswith('.box') and key not in name:
            os.unlink(folder)                   # vagrant/vm_box.py's box of an old image
            say('removed the outdated box %s' % folder)
        elif name.startswith('image-') and folder != keep:
            shutil.rmtree(folder, ignore_errors=True)
            say('removed the outdated image %s' % folder)


def _last_build_seconds(cache):
    """How long the newest cached image took to build (None if there is none)."""
    best = None
    for name in os.listdir(cache) if os.path.isdir(cache) else []:
        try:
            with open(os.path.join(cache, name, 'image.json')) as handle:
                info = json.load(handle)
        except (OSError, ValueError):
            continue
        if best is None or info.get('built_at', '') > best[0]:
            best = (info.get('built_at', ''), info.get('build_seconds'))
    return best[1] if best else None
