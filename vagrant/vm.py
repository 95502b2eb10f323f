#!/usr/bin/python3
"""Run a command in a Debian 12 VM whose stock kernel has sch_netem and the OVS module.

    vagrant/vm.py run [--keep-image] [--out HOSTDIR] [--accel auto|kvm|tcg] [--cpus N]
                      [--memory MIB] [--timeout S] [--vms 1|2] -- COMMAND...
    vagrant/vm.py build [--force]      build (or reuse) the image and say where it is
    vagrant/vm.py box                  make a libvirt Vagrant box of the image (vm_box.py)
    vagrant/vm.py clean                remove images, kept runs and what killed runs left

``run`` builds or reuses the image (vagrant/vm_image.py: Debian packages only, from this
machine's apt sources; cached under /var/cache/repronet/vm, keyed by the package list),
boots an overlay of it with QEMU (KVM if a probe shows it works, else software emulation;
vagrant/vm_boot.py), copies this checkout in over a 9p share, runs vagrant/provision.sh
(offline) and COMMAND as root in the checkout (vagrant/vm_job.py), copies the checkout's
results/ back to HOSTDIR (default results/vm-<UTC time>) with vm.json (acceleration, kernel,
image, timings, exit code) and the VM's console log, and powers the VM off. Its exit code is
COMMAND's; 2 for bad arguments, 124 when --timeout ran out, 125 when the VM ended before
COMMAND did, 130/143 after Ctrl-C/SIGTERM. The VM is removed on every exit path; a run
killed with SIGKILL is cleaned up by the next one. Needs root (mmdebstrap, 9p passthrough).

``run --vms 2`` boots two VMs of the image joined by a private link (vagrant/vm_pair.py):
COMMAND runs in the first once the second answers ssh, with ``REPRONET_VM2`` set to the
second's address, e.g. ``-- sh -c 'topologies/dht8.py --machines localhost,$REPRONET_VM2'``;
--cpus and --memory are each VM's. Both VMs are removed on every exit path.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from repronet.run.signals import Interrupted, SignalGuard  # noqa: E402  (after the path fix)
from vagrant import vm_boot, vm_box, vm_image, vm_job, vm_pair  # noqa: E402


class Progress:
    """Progress lines with the elapsed time since the command started."""

    def __init__(self):
        self.started = time.monotonic()

    def elapsed(self):
        return time.monotonic() - self.started

    def say(self, text):
        seconds = int(self.elapsed())
        print('[vm %d:%02d] %s' % (seconds // 60, seconds % 60, text), flush=True)


def parser():
    """The command line: run | build | clean."""
    top = argparse.ArgumentParser(prog='vm.py', description=__doc__.split('\n\n')[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest='verb', metavar='run|build|box|clean')
    run = sub.add_parser('run', help='run COMMAND (after --) in the VM, as root in the checkout')
    run.add_argument('--out', metavar='HOSTDIR', help='where results/ comes back (default '
                     'results/vm-<UTC time> in this checkout); must not exist or be empty')
    run.add_argument('--keep-image', action='store_true', help="keep this run's overlay "
                     'disk and console log (under the cache\'s kept/) for inspection')
    run.add_argument('--accel', choices=('auto', 'kvm', 'tcg'), default='auto',
                     help='auto: KVM where a probe boots with it, else TCG (default auto)')
    run.add_argument('--cpus', type=int, default=2, help='virtual CPUs (default 2)')
    run.add_argument('--memory', type=int, default=4096, metavar='MIB',
                     help='memory in MiB (default 4096)')
    run.add_argument('--timeout', type=float, default=3600, metavar='S',
                     help='stop the VM after S seconds of running (default 3600)')
    run.add_argument('--vms', type=int, default=1, metavar='N',
                     help='1, or 2: a second VM on a private link serves ssh, for '
                     '--machines localhost,$REPRONET_VM2 (default 1)')
    run.add_argument('command', nargs=argparse.REMAINDER, help='-- COMMAND...')
    build = sub.add_parser('build', help='build the image unless it is cached')
    build.add_argument('--force', action='store_true', help='rebuild even if cached')
    sub.add_parser('box', help='make a Vagrant box (libvirt) of the image')
    sub.add_parser('clean', help='remove images, kept runs and leftovers of killed runs')
    return top


def problem(args):
    """One sentence saying what is wrong with args or this machine, or None."""
    if args.verb is None:
        return 'say what to do: run, build, box or clean (see --help)'
    if os.geteuid() != 0:
        return 'needs root (mmdebstrap builds as root, QEMU shares the checkout with 9p)'
    if args.verb == 'run':
        command = args.command[1:] if args.command[:1] == ['--'] else args.command
        if not command:
            return 'give the command to run in the VM after --, e.g. -- topologies/smoke.py'
        args.command = command
        for name, value, low, high in (('--cpus', args.cpus, 1, 64),
                                       ('--memory', args.memory, 512, 262144),
                                       ('--timeout', args.timeout, 10, 86400)):
            if not low <= value <= high:
                return '%s %s must be from %s to %s' % (name, value, low, high)
        if args.vms not in (1, 2):
            return '--vms %d: give 1 or 2 (two VMs is the largest pair this link joins)' \
                % args.vms
        if args.out and os.path.isdir(args.out) and os.listdir(args.out):
            return '--out %s already holds files; give a new or empty folder' % args.out
        if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
            return '--out %s is a file, not a folder' % args.out
        for tool, package in ((vm_boot.QEMU, 'qemu-system-x86'), ('qemu-img', 'qemu-utils')):
            if shutil.which(tool) is None:
                return 'needs %s (Debian package %s; bash vagrant/provision.sh installs ' \
                       'it)' % (tool, package)
    if args.verb in ('run', 'build', 'box'):
        try:
            vm_image.packages()
            vm_image.sources_file()
        except (OSError, vm_image.ImageError) as e:
            return str(e)
    return None


def main(argv=None):
    args = parser().parse_args(argv)
    why = problem(args)
    if why:
        print('vm.py: %s' % why, file=sys.stderr)
        return 2
    progress = Progress()
    with SignalGuard() as guard:        # SIGINT and SIGTERM raise Interrupted
        try:
            if args.verb == 'clean':
                return clean(progress)
            vm_boot.clean_leftovers(vm_image.CACHE, progress.say)
            image = vm_image.build(progress.say, force=getattr(args, 'force', False))
            if args.verb == 'build':
                progress.say('image ready: %s' % image)
                return 0
            if args.verb == 'box':
                vm_box.build(image, progress.say)
                return 0
            return run(args, image, progress, guard)
        except Interrupted as e:
            progress.say('interrupted (%s); nothing is left running' % e)
            return 128 + e.signum
        except (OSError, vm_image.ImageError, subprocess.CalledProcessError) as e:
            print('vm.py: %s' % e, file=sys.stderr)
            return 1


def run(args, image, progress, guard):
    """Boot, run the job, bring results back; return the exit code."""
    out = os.path.abspath(args.out or os.path.join(
        REPO, 'results', 'vm-' + time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())))
    accel, why = vm_boot.choose_accel(image, vm_image.CACHE, args.accel, progress.say)
    progress.say('acceleration: %s (%s)' % (accel, why))
    vms = [vm_boot.Vm(image, vm_image.CACHE, accel, args.cpus, args.memory)] \
        if args.vms == 1 else vm_pair.make_vms(image, vm_image.CACHE, accel, args.cpus,
                                               args.memory)
    vm = vms[0]
    record = {'accel': accel, 'accel_reason': why, 'qemu': vm_boot.qemu_version(),
              'cpus': args.cpus, 'memory_mib': args.memory, 'command': args.command,
              'image': _image_record(image),
              'started_at': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
              'seconds': {}}
    if len(vms) == 2:
        record['pair'] = vm_pair.describe()
        record['seconds_vm2'] = {}
    timed = record['seconds']
    code, keep = 125, None
    try:
        for each in vms:
            each.prepare()
        env = {'CI': os.environ['CI']} if 'CI' in os.environ else {}
        env['REPRONET_VM'] = accel
        if len(vms) == 1:
            record['revision'] = vm_job.stage(REPO, vm.xfer, args.command, env)
        else:
            record['revision'] = vm_pair.stage(REPO, vms, args.command, env, vm_job.stage)
        progress.say('booting %s%s with %s, %d CPUs, %d MiB' % (
            'two VMs of ' if len(vms) == 2 else '', record['image']['kernel'], accel,
            args.cpus, args.memory))
        last = _last_timings()
        if last:
            progress.say('the last run here booted in %s s and provisioned in %s s' % (
                last.get('boot', '?'), last.get('provision', '?')))
        booted = time.monotonic()
        with guard.held():          # QEMU started and recorded, or not started at all
            if len(vms) == 1:
                vm.boot()
            else:
                vm_pair.boot(vms)
        if len(vms) == 1:
            ended = 'done' if vm.follow(_printer(progress, timed, booted), args.timeout) \
                else 'timeout'
        else:
            ended = vm_pair.follow(vms, [
                _printer(progress, timed, booted),
                _printer(progress, record['seconds_vm2'], booted, 'vm2: ', '  2| ')],
                args.timeout)
        timed['vm'] = round(time.monotonic() - booted, 1)
        if ended == 'timeout':
            progress.say('--timeout %g s ran out; stopping the VM' % args.timeout)
            code = 124
        elif ended == 'vm2':
            progress.say('VM 2 ended before VM 1\'s command did (%s); see %s' % (
                vms[1].qemu_error() or 'its console', os.path.join(out, 'console-vm2.log')))
        else:
            rc = vm_boot.read(os.path.join(vm.xfer, 'out', 'rc')).strip()
            if rc.lstrip('-').isdigit():
                code = int(rc)
            else:
                progress.say('the VM ended before the command did (%s); see %s' % (
                    vm.qemu_error() or 'no exit code written', os.path.join(
                        out, 'console.log')))
    except Interrupted as e:
        progress.say('interrupted (%s); stopping the VM' % e)
        code = 128 + e.signum
    except subprocess.CalledProcessError as e:
        progress.say('%s failed (exit %d); stopping the VM' % (e.cmd[0], e.returncode))
    except vm_pair.PairError as e:
        progress.say('%s; stopping the VMs' % e)
    finally:
        guard.hold()        # a second Ctrl-C or SIGTERM waits: the clean-up is not cut short
        for each in vms:
            each.halt()
        keep = os.path.join(vm_image.CACHE, 'kept', os.path.basename(out)) \
            if args.keep_image else None
        try:
            code = _bring_back(vms, out, record, code, progress)
        finally:
            for each in vms:
                each.remove(keep_to=keep and keep + each.suffix)
        if keep:
            progress.say('kept the overlay disk and console in %s' % keep)
    late = guard.release()
    return 128 + late if late and code < 128 else code


def _printer(progress, timed, booted, label='', echo='  | '):
    """A console-line handler: job markers become progress lines (and timings), the rest is
    echoed (label and echo tell a pair's second VM apart)."""
    marks = {}

    def on_line(line):
        if not line.startswith(vm_job.MARK):
            if line.strip():
                print(echo + line, flush=True)
            return
        text = line[len(vm_job.MARK):]
        now = round(time.monotonic() - booted, 1)
        step = text.split()[0].rstrip(':')
        marks[step] = now
        if step == 'booted':
            timed['boot'] = now
            text += ' (%.0f s after QEMU started)' % now
        for name, start, ends in (('provision', 'provisioning', ('waiting', 'serving', 'running')),
                                  ('wait', 'waiting', ('ssh',)),      # a pair's VM 1 only
                                  ('command', 'running', ('command',))):
            if step in ends and start in marks and name not in timed:
                timed[name] = round(now - marks[start], 1)
        progress.say(label + text)
    return on_line


def _last_timings():
    """The boot and provision seconds of the last finished run (cache/timings.json)."""
    try:
        with open(os.path.join(vm_image.CACHE, 'timings.json')) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _bring_back(vms, out, record, code, progress):
    """Copy out/results, the logs and vm.json to out; return code (unchanged). A pair's
    second VM brings back its console and provision logs only (as NAME-vm2.log)."""
    record['exit_code'] = code
    record['ended_at'] = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
    os.makedirs(out, exist_ok=True)
    vm = vms[0]
    back = os.path.join(vm.xfer, 'out', 'results')
    names = sorted(os.listdir(back)) if os.path.isdir(back) else []
    for name in names:
        shutil.move(os.path.join(back, name), os.path.join(out, name))
    for index, each in enumerate(vms, 1):
        tail = '' if index == 1 else '-vm%d' % index
        for source in (os.path.join(each.folder, 'console.log'),
                       os.path.join(each.xfer, 'out', 'provision.log')):
            if os.path.exists(source):
                name = os.path.basename(source)
                shutil.copyfile(source, os.path.join(out, name.replace('.log', tail + '.log')))
    record['results'] = names
    if 'provision' in record['seconds'] and len(vms) == 1:      # a pair boots slower
        with open(os.path.join(vm_image.CACHE, 'timings.json'), 'w') as handle:
            json.dump(record['seconds'], handle)
    with open(os.path.join(out, 'vm.json'), 'w') as handle:
        json.dump(record, handle, indent=1)
    progress.say('exit %d; %d results folder(s), vm.json and console.log in %s' % (
        code, len(names), out))
    return code


def _image_record(image):
    """What the run's vm.json says about the image."""
    with open(os.path.join(image, 'image.json')) as handle:
        info = json.load(handle)
    return {'folder': image, 'kernel': info.get('kernel'), 'suite': info.get('suite'),
            'builder': info.get('builder'), 'packages': len(info.get('packages', []))}


def clean(progress):
    """Remove every image, kept run and leftover under the cache."""
    vm_boot.clean_leftovers(vm_image.CACHE, progress.say)
    if os.path.isdir(vm_image.CACHE):
        shutil.rmtree(vm_image.CACHE)
        progress.say('removed %s' % vm_image.CACHE)
    else:
        progress.say('nothing to remove (%s does not exist)' % vm_image.CACHE)
    return 0


if __name__ == '__main__':
    sys.exit(main())
