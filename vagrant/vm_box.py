"""A Vagrant box (libvirt provider) made from the VM image, so `vagrant up` needs no download.

A libvirt box is a tar of ``metadata.json`` (provider, disk format, size in GB), a
``Vagrantfile`` of box defaults and the disk ``box.img`` (qcow2). The image has no boot
loader (vm.py boots its kernel directly), so the box carries ``vmlinuz`` and ``initrd.img``
too and its Vagrantfile points libvirt at copies of them (QEMU under libvirt runs as a user
that cannot read ~/.vagrant.d); with no ``init=`` on that command line the
kernel starts systemd, which brings up DHCP on eth0 and sshd for the ``vagrant`` user the
image has (vagrant/vm_image.py, BOX_HOOK). The domain type is plain ``qemu`` (software
emulation): KVM hangs on this nested machine; where KVM works, set ``libvirt.driver = "kvm"``
in the project Vagrantfile.
"""

import json
import os
import subprocess
import tarfile

from vagrant import vm_image

BOX_NAME = 'repronet/debian12'      # what the project Vagrantfile's config.vm.box names
STABLE = 'repronet-debian12.box'    # its config.vm.box_url, under the cache
BOX_VAGRANTFILE = '''# Written by vagrant/vm_box.py: defaults of the box %(name)s.
# The image has no boot loader: libvirt boots the kernel and initrd shipped in the box. QEMU
# runs as libvirt's own user, which cannot read the box folder under ~/.vagrant.d, so they
# are copied to a world-readable folder first.
require "digest"
require "fileutils"
require "tmpdir"
box_dir = File.dirname(__FILE__)
boot = File.join(Dir.tmpdir, "repronet-box-" + Digest::SHA256.file(File.join(box_dir, "vmlinuz")).hexdigest[0, 12])
unless File.exist?(File.join(boot, "initrd.img"))
  FileUtils.mkdir_p(boot, mode: 0755)
  ["vmlinuz", "initrd.img"].each do |name|
    FileUtils.install(File.join(box_dir, name), boot, mode: 0644)
  end
end
Vagrant.configure("2") do |config|
  config.ssh.username = "vagrant"
  config.ssh.password = "vagrant"   # Vagrant puts a key pair of its own in on the first up
  config.vm.provider :libvirt do |libvirt|
    libvirt.driver = "qemu"         # software emulation; "kvm" where KVM works
    libvirt.cpu_mode = "maximum"    # TCG's default CPU model lacks what NumPy needs
    libvirt.kernel = File.join(boot, "vmlinuz")
    libvirt.initrd = File.join(boot, "initrd.img")
    libvirt.cmd_line = "root=/dev/vda rw console=ttyS0 net.ifnames=0"
    libvirt.disk_bus = "virtio"
  end
end
'''


def build(image, say):
    """Write the box of the image folder beside it; return the stable name (STABLE)."""
    box = os.path.join(os.path.dirname(image), 'repronet-debian12-%s.box'
                       % os.path.basename(image)[len('image-'):])
    if os.path.exists(box):
        say('box %s is already made from this image' % box)
        return _link(box)
    work = box + '.parts'
    os.makedirs(work, exist_ok=True)
    try:
        say('converting the disk to qcow2 for the box')
        subprocess.run(['qemu-img', 'convert', '-O', 'qcow2',
                        os.path.join(image, vm_image.BASE), os.path.join(work, 'box.img')],
                       check=True)
        size_gb = int(vm_image.DISK_SIZE.rstrip('G'))
        with open(os.path.join(work, 'metadata.json'), 'w') as handle:
            json.dump({'provider': 'libvirt', 'format': 'qcow2', 'virtual_size': size_gb},
                      handle)
        with open(os.path.join(work, 'Vagrantfile'), 'w') as handle:
            handle.write(BOX_VAGRANTFILE % {'name': BOX_NAME})
        with tarfile.open(box + '.tmp', 'w') as tar:
            for name in ('metadata.json', 'Vagrantfile', 'vmlinuz', 'initrd.img', 'box.img'):
                folder = image if name in ('vmlinuz', 'initrd.img') else work
                tar.add(os.path.join(folder, name), arcname=name)
        os.replace(box + '.tmp', box)
    finally:
        for name in os.listdir(work):
            os.unlink(os.path.join(work, name))
        os.rmdir(work)
        if os.path.exists(box + '.tmp'):
            os.unlink(box + '.tmp')
    say('box written: %s' % box)
    return _link(box)


def _link(box):
    """Point the stable name the project Vagrantfile's box_url reads at box; return it."""
    link = os.path.join(os.path.dirname(box), STABLE)
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(os.path.basename(box), link)
    return link
