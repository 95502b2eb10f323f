"""Boot the image with QEMU for one run, and end that VM on every exit path.

- Acceleration: KVM where a short probe boots the kernel with it, else software emulation
  (TCG). On the development machine (itself a nested guest) KVM either fails at once or
  hangs after the boot loader, so the probe waits for the kernel's "Freeing unused kernel"
  line for at most ``PROBE_SECONDS`` and its verdict is cached per host kernel, QEMU and
  image. TCG needs ``-cpu max`` (NumPy dies with "Illegal instruction" on QEMU's default CPU).
- The base image is never written: each run boots a qcow2 overlay on it, in its own folder
  ``runs/<pid>`` under the cache, with the 9p share, the console log and two pid files
  (``owner``: this process and its start time; ``qemu.pid``).
- ``Vm.stop`` kills QEMU and removes the folder; the caller runs it in ``finally`` and turns
  SIGTERM into an exception, so success, failure, Ctrl-C and SIGTERM all end there. A run
  killed with SIGKILL cannot clean up; ``clean_leftovers`` (called by every next run) kills
  the QEMU such a run left (checked by its command line) and removes its folder.
- No network device for one VM: it needs none (the checkout and results cross the 9p share).
  A pair (``vm.py run --vms 2``, vagrant/vm_pair.py) gives each VM one NIC on a link between
  the two QEMU processes over loopback; ``Vm(network=...)`` takes those QEMU arguments, and
  the second VM's folder is ``runs/<pid>-vm2`` (same owner record, so the same clean-up).
"""

import json
import os
import shutil
import signal
import subprocess
import time

from vagrant import vm_image

QEMU = 'qemu-system-x86_64'
PROBE_SECONDS = 15
KERNEL_ARGS = ('console=ttyS0 root=/dev/vda rw init=%s panic=-1 quiet loglevel=3 '
               'net.ifnames=0' % vm_image.INIT_PATH)


def runs_dir(cache):
    """Where each run's folder lives."""
    return os.path.join(cache, 'runs')


def qemu_version():
    """QEMU's first --version line ('' if it does not run)."""
    try:
        out = subprocess.run([QEMU, '--version'], capture_output=True, text=True,
                             check=False).stdout
    except OSError:
        return ''
    return out.splitlines()[0].strip() if out else ''


def choose_accel(image, cache, wanted, say):
    """(accel, why): 'kvm' or 'tcg' for wanted in auto|kvm|tcg; auto probes KVM (cached)."""
    if wanted == 'tcg':
        return 'tcg', 'asked for (--accel tcg)'
    if not os.access('/dev/kvm', os.R_OK | os.W_OK):
        if wanted == 'kvm':
            raise OSError('--accel kvm needs a usable /dev/kvm, which this machine lacks')
        return 'tcg', 'no usable /dev/kvm'
    if wanted == 'kvm':
        return 'kvm', 'asked for (--accel kvm)'
    key = '%s | %s | %s' % (os.uname().release, qemu_version(), os.path.basename(image))
    path = os.path.join(cache, 'accel.json')
    try:
        with open(path) as handle:
            known = json.load(handle)
    except (OSError, ValueError):
        known = {}
    if key not in known:
        say('probing KVM (at most %d s, once per host kernel, QEMU and image)'
            % PROBE_SECONDS)
        known[key] = _probe_kvm(image)
        with open(path + '.tmp', 'w') as handle:
            json.dump(known, handle, indent=1)
        os.replace(path + '.tmp', path)
    works, why = known[key]
    return ('kvm' if works else 'tcg'), why


def _probe_kvm(image):
    """[works, why]: boot the image's kernel under KVM and wait for it to reach init."""
    log = os.path.join(os.path.dirname(image), 'kvm-probe-%d.log' % os.getpid())
    argv = [QEMU, '-accel', 'kvm', '-cpu', 'host', '-m', '512', '-nodefaults',
            '-display', 'none', '-no-reboot', '-kernel', os.path.join(image, 'vmlinuz'),
            '-append', 'console=ttyS0 panic=-1', '-chardev', 'file,id=c,path=' + log,
            '-serial', 'chardev:c']
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + PROBE_SECONDS
    verdict = [False, 'KVM did not boot the kernel within %d s' % PROBE_SECONDS]
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors='replace').strip().splitlines()
                verdict = [False, 'QEMU with KVM exited: %s' % (err[-1] if err else
                                                               proc.returncode)]
                break
            if 'Freeing unused kernel' in read(log):
                verdict = [True, 'a KVM probe booted the kernel']
                break
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if os.path.exists(log):
            os.unlink(log)
    return verdict


def read(path):
    """The text of path ('' if it does not exist yet)."""
    try:
        with open(path, errors='replace') as handle:
            return handle.read()
    except OSError:
        return ''


def clean_leftovers(cache, say):
    """Kill the QEMU and remove the folder of every run whose owner is gone."""
    top = runs_dir(cache)
    for name in sorted(os.listdir(top)) if os.path.isdir(top) else []:
        folder = os.path.join(top, name)
        if _alive(read(os.path.join(folder, 'owner')).split(), 'vm.py'):
            continue
        pid = read(os.path.join(folder, 'qemu.pid')).strip()
        if pid.isdigit() and folder in _cmdline(int(pid)):
            os.kill(int(pid), signal.SIGKILL)
            say('killed QEMU %s left by an earlier run' % pid)
        shutil.rmtree(folder, ignore_errors=True)
        say('removed %s, left by an earlier run' % folder)


def _cmdline(pid):
    """The command line of pid, NULs as spaces ('' if it is gone)."""
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            return handle.read().replace(b'\0', b' ').decode(errors='replace')
    except OSError:
        return ''


def _start_time(pid):
    """Field 22 of /proc/PID/stat: when the process started (None if it is gone)."""
    stat = read('/proc/%d/stat' % pid)
    return stat.rsplit(')', 1)[1].split()[19] if ')' in stat else None


def _alive(owner, word):
    """True when owner = [pid, start time] is still that process and runs `word`."""
    if len(owner) != 2 or not owner[0].isdigit():
        return False
    pid = int(owner[0])
    return _start_time(pid) == owner[1] and word in _cmdline(pid)


class Vm:
    """One VM: its folder, overlay, share and QEMU process."""

    def __init__(self, image, cache, accel, cpus, memory, suffix='', network=()):
        self.image, self.accel, self.cpus, self.memory = image, accel, cpus, memory
        self.suffix = suffix
        self.folder = os.path.join(runs_dir(cache), str(os.getpid()) + suffix)
        self.xfer = os.path.join(self.folder, 'xfer')
        self.console = os.path.join(self.folder, 'console.log')
        self.network = list(network)        # QEMU's -netdev/-device arguments, if any
        self.proc = None
        self._read = (0, '')                # console offset read, and the partial last line

    def prepare(self):
        """Make the folder, the owner record, the share and the overlay."""
        shutil.rmtree(self.folder, ignore_errors=True)      # our pid's stale folder
        os.makedirs(self.xfer)
        with open(os.path.join(self.folder, 'owner'), 'w') as handle:
            handle.write('%d %s\n' % (os.getpid(), _start_time(os.getpid())))
        subprocess.run(['qemu-img', 'create', '-q', '-f', 'qcow2', '-F', 'raw', '-b',
                        os.path.join(self.image, vm_image.BASE),
                        os.path.join(self.folder, 'overlay.qcow2')], check=True)

    def argv(self):
        """QEMU's command line for this VM."""
        accel = ['-accel', 'kvm', '-cpu', 'host'] if self.accel == 'kvm' else \
            ['-accel', 'tcg,thread=multi', '-cpu', 'max']
        return [QEMU, '-name', 'repronet-vm', *accel, '-smp', str(self.cpus),
                '-m', str(self.memory), '-nodefaults', '-no-user-config', '-display', 'none',
                '-no-reboot', '-kernel', os.path.join(self.image, 'vmlinuz'),
                '-initrd', os.path.join(self.image, 'initrd.img'), '-append', KERNEL_ARGS,
                '-drive', 'file=%s,format=qcow2,if=virtio,cache=unsafe'
                % os.path.join(self.folder, 'overlay.qcow2'),
                '-virtfs', 'local,path=%s,mount_tag=xfer,security_model=passthrough,id=xfer'
                % self.xfer,
                '-device', 'virtio-rng-pci', *self.network,
                '-chardev', 'file,id=con,path=' + self.console, '-serial', 'chardev:con',
                '-pidfile', os.path.join(self.folder, 'qemu.pid')]

    def boot(self):
        """Start QEMU in its own session (a terminal's Ctrl-C reaches us, not it)."""
        with open(os.path.join(self.folder, 'qemu.err'), 'wb') as err:
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err, start_new_session=True)

    def follow(self, on_line, timeout):
        """Feed console lines to on_line until QEMU exits; False if timeout ran out first."""
        deadline = time.monotonic() + timeout
        while not self.pump(on_line):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def pump(self, on_line):
        """Feed the console lines written since the last call to on_line; True once QEMU
        has exited (and every line, the last partial one too, has been fed)."""
        exited = self.proc.poll() is not None
        offset, partial = self._read
        text = read(self.console)
        lines = (partial + text[offset:]).split('\n')
        self._read = (len(text), lines.pop())
        for line in lines:
            on_line(line.rstrip('\r'))
        if exited and self._read[1]:
            on_line(self._read[1])
            self._read = (len(text), '')
        return exited

    def qemu_error(self):
        """QEMU's own stderr, last line ('' if none)."""
        lines = read(os.path.join(self.folder, 'qemu.err')).strip().splitlines()
        return lines[-1] if lines else ''

    def halt(self):
        """Kill QEMU if it still runs (the overlay is thrown away, nothing to save)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def remove(self, keep_to=None):
        """Move the run's folder to keep_to, or remove it."""
        if keep_to and os.path.isdir(self.folder):
            os.makedirs(os.path.dirname(keep_to), exist_ok=True)
            shutil.rmtree(self.xfer, ignore_errors=True)
            os.unlink(os.path.join(self.folder, 'owner'))
            shutil.move(self.folder, keep_to)
        else:
            shutil.rmtree(self.folder, ignore_errors=True)
