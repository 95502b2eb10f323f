"""The VM image's package list comes from provision.sh alone: its PACKAGES less its
VM_HOST_ONLY, so a package only the host needs (QEMU, mmdebstrap, pytest-xdist for --test's
parallel phase) neither goes into the image nor changes the image's cache key."""

import pytest

from vagrant import vm_image


def test_the_image_has_provisions_packages_less_the_host_only_ones():
    pkgs = vm_image.packages()
    for host_only in ('qemu-system-x86', 'qemu-utils', 'mmdebstrap', 'python3-pytest-xdist'):
        assert host_only not in pkgs
    for wanted in ('mininet', 'openvswitch-switch', 'python3-pytest', 'linux-image-amd64'):
        assert wanted in pkgs
    assert pkgs == sorted(set(pkgs))


def test_a_host_only_name_leaves_the_list_and_the_key_with_it(tmp_path):
    text = open(vm_image.PROVISION).read()
    both = tmp_path / 'both.sh'
    both.write_text(text.replace('VM_HOST_ONLY=" ', 'VM_HOST_ONLY=" iperf3 ', 1))
    assert 'iperf3' in vm_image.packages() and 'iperf3' not in vm_image.packages(str(both))
    sources = 'Types: deb\n'
    assert vm_image.key(vm_image.packages(str(both)), sources) != \
        vm_image.key(vm_image.packages(), sources)


def test_a_provision_script_without_the_host_only_line_is_one_sentence(tmp_path):
    text = open(vm_image.PROVISION).read()
    script = tmp_path / 'provision.sh'
    script.write_text(text.replace('VM_HOST_ONLY=', 'HOST_ONLY=', 1))
    with pytest.raises(vm_image.ImageError, match='no VM_HOST_ONLY="..." line'):
        vm_image.packages(str(script))
