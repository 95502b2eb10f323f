"""Keep the CPUs out of sleeping idle states while an emulated network runs (issue 15).

Why: at LAN delays the time a CPU takes to leave a sleeping idle state is larger than the
link delays. When a delay daemon holds a packet for 100 us, both CPUs go idle; on this
machine (a guest whose ``haltpoll`` idle driver halts at once) the daemon's verdict then
has to wake the receiving process on a halted CPU, which costs 20-30 us per packet, and
the no-delay floor the targets are measured against never pays it (its CPUs never sleep
between a request and its reply). Measured with ``benchmarks/lan_latency.py`` on an idle
machine: request-response over 0.05 ms links +30 % over floor + configured RTT with the
CPUs allowed to sleep, -2 % with them kept awake, and the verdicts took 27 us against 6.5.

How: a PM QoS request on ``/dev/cpu_dma_latency`` (the kernel's documented interface,
Documentation/power/pm_qos_interface.rst) asking for 0 us of wake-up latency, which
leaves each CPU only the idle states with no exit latency (``POLL``). The request lives as
long as the file stays open: the kernel drops it when the descriptor closes, so even a
SIGKILLed runner leaves nothing behind. An idle CPU still counts as idle in /proc/stat (the
CPU monitor is unchanged), and a runnable task takes the CPU at once; the cost is power,
and on a virtual machine the host sees the vCPUs busy.

``mode`` is ``poll`` (the request) or ``os`` (none: the kernel's own choice). The record
(manifest ``mechanisms.cpu_idle``) names the idle driver, the states, how often each was
entered during the run, and whether the request was in force, so a run whose CPUs slept
anyway says so.
"""

import glob
import json
import os
import struct
import sys

MODES = ('poll', 'os')
PATH = '/dev/cpu_dma_latency'
SYSFS = '/sys/devices/system/cpu'


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def idle_states():
    """{state name: (exit latency us, entries summed over the CPUs)} from sysfs."""
    states = {}
    for state in sorted(glob.glob(os.path.join(SYSFS, 'cpu[0-9]*', 'cpuidle', 'state[0-9]*'))):
        name, latency, usage = (_read(os.path.join(state, key))
                                for key in ('name', 'latency', 'usage'))
        if name is None or latency is None or usage is None:
            continue
        old = states.get(name, (int(latency), 0))
        states[name] = (old[0], old[1] + int(usage))
    return states


class IdleHold:
    """The PM QoS request for one run: start() before the network, stop() after it."""

    def __init__(self, mode='poll'):
        if mode not in MODES:
            raise ValueError('cpu idle mode must be one of %s, not %r' % (', '.join(MODES), mode))
        self.mode = mode
        self._file = None
        self._before = {}
        self._after = None
        self.problem = None
        self.in_force_us = None

    def start(self):
        """Open the request (poll mode); a kernel without the interface is recorded, not fatal."""
        if self.mode == 'poll' and self._file is None:
            try:
                self._file = open(PATH, 'r+b', buffering=0)
                self._file.write(struct.pack('i', 0))
                self.in_force_us = struct.unpack('i', self._file.read(4))[0]
            except OSError as e:
                self.close()
                self.problem = 'cannot hold %s: %s' % (PATH, e.strerror or e)
        self._before = idle_states()     # after the request: a sleep begun before it is not counted
        return self

    def close(self):
        """Drop the request (idempotent); the kernel restores its own choice at once."""
        if self._file is not None:
            try:
                self._file.close()
            finally:
                self._file = None

    def stop(self):
        """Count the idle states entered during the run, then drop the request."""
        if self._after is None:
            self._after = idle_states()
        self.close()

    def record(self):
        """What the manifest keeps: mode, driver, states, entries during the run."""
        now = self._after if self._after is not None else idle_states()
        entered = {name: now[name][1] - self._before.get(name, (0, 0))[1] for name in now}
        driver = _read(os.path.join(SYSFS, 'cpuidle', 'current_driver'))
        sleeping = sorted(name for name, (latency, _) in now.items() if latency > 0)
        if self.mode == 'os':
            effect = 'none asked: the kernel chose idle states'
        elif self.problem:
            effect = 'not in force: ' + self.problem
        elif not now:
            effect = 'no cpuidle driver here: the request changes nothing'
        else:
            effect = 'in force: only idle states with no exit latency (%s kept out)' % (
                ', '.join(sleeping) or 'none to keep out')
        return {'mode': self.mode, 'request': PATH + ' = 0 us' if self.mode == 'poll' else None,
                'in_force_us': self.in_force_us, 'effect': effect, 'driver': driver,
                'states': {name: {'exit_latency_us': latency, 'entered_during_run': entered[name]}
                           for name, (latency, _) in sorted(now.items())},
                'scope': 'this machine (not remote servers of --machines)'}


def hold_until_eof(mode, stdin, stdout):
    """``python3 -m repronet.emu.cpuidle MODE``: hold the request until stdin ends, then print
    the record. The cluster backend runs this on each other server over an ssh connection of
    its own (``repronet.cluster.idle``): the runner closes stdin at teardown, and if the runner
    or its ssh dies, sshd closes stdin too, so the request never outlives the run."""
    hold = IdleHold(mode).start()
    stdout.write(json.dumps({'event': 'held', 'in_force_us': hold.in_force_us,
                             'problem': hold.problem}) + '\n')
    stdout.flush()
    stdin.read()
    hold.stop()
    stdout.write(json.dumps(dict(hold.record(), event='record')) + '\n')
    stdout.flush()


def main(argv):
    """``python3 -m repronet.emu.cpuidle MODE``: MODE on the one-sentence parser, then
    hold_until_eof."""
    from repronet.usage import UsageParser
    parser = UsageParser(
        prog='python3 -m repronet.emu.cpuidle', tool='repronet.emu.cpuidle',
        about="the cluster backend's idle-state holder, run over ssh on another server: it "
              'holds MODE until its stdin ends, then prints the record',
        description=hold_until_eof.__doc__.split('\n')[0])
    parser.add_argument('mode', choices=MODES, metavar='MODE', help=' or '.join(MODES))
    hold_until_eof(parser.parse_args(argv).mode, sys.stdin, sys.stdout)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
