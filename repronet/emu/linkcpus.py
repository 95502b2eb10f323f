"""CPUs set apart for the link delay daemons (``--link-cpus N``, issue 15).

Why: on this kernel (PREEMPT_NONE, a nested VM) a delay daemon woken by a packet gets its
CPU only when the task there reaches a preemption point: the node process whose send
delivered the packet has to finish its system call first (and the softirq work in it), or
the other CPU has to pull the daemon, which its reschedule interrupt makes take about
100 us here. ``perf`` over dht8's seed load (sched_waking to sched_switch of the daemons)
showed waits of 105-120 us each time a daemon woken on a busy CPU ran on the other one, and
the daemons' lateness is that tail (half of all packets under 1 us late, 1-2 % of them
0.3-2 ms). A SCHED_FIFO priority cannot help where the kernel does not preempt. What does
help is a CPU where nothing but the daemons runs: it idles in the POLL state
(``repronet.emu.cpuidle``), so a woken daemon is running within microseconds, and no node
process holds it. Measured (dht8 ``--scale seed --parts I``, the daemons' own stats): 10.7 us
mean lateness with the daemons on CPU 1 and everything else on CPU 0, against 24.5-32.8 us
shared. The price is the CPUs taken from the hosts, which the report states.

How: the last N of the CPUs this process may use go to the daemons (``os.sched_setaffinity``
on each daemon's PID once started); every thread of the runner moves to the others before
Mininet builds anything, so the host shells, node processes, controller and tools it starts
inherit them. ``release()`` gives the runner back its CPUs. Affinity belongs to processes,
so nothing outlives the run, even after SIGKILL. Processes not started by the run (an Open
vSwitch daemon started beforehand) keep their own CPUs, and interrupt and softirq work runs
where the kernel puts it: the record says so. The CPU monitor judges the run by the other
CPUs (``repronet.run.cpu``), since the daemons' CPU being busy says nothing about the hosts.
"""

import os


class LinkCpuError(ValueError):
    """--link-cpus cannot be met on this machine (one sentence)."""


def usable_cpus():
    """The CPUs this process may run on, in order (the one place that asks: the runner's
    provenance records their count, ``repronet.run.provenance``).

    PyPy 3.9 has no ``os.sched_getaffinity``: then the kernel's ``Cpus_allowed_list``
    (/proc/self/status), which says the same, and failing that every CPU."""
    if hasattr(os, 'sched_getaffinity'):
        return sorted(os.sched_getaffinity(0))
    try:
        with open('/proc/self/status') as handle:
            for line in handle:
                if line.startswith('Cpus_allowed_list:'):
                    return allowed_list(line.split(':', 1)[1])
    except (OSError, ValueError):
        pass
    return list(range(os.cpu_count() or 0))


def allowed_list(text):
    """The CPUs of a kernel CPU list ('0-2,5' -> [0, 1, 2, 5]); ValueError if malformed."""
    cpus = set()
    for part in text.strip().split(','):
        first, _, last = part.partition('-')
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


def _threads():
    """The thread IDs of this process (affinity is per thread)."""
    try:
        return [int(t) for t in os.listdir('/proc/self/task')]
    except OSError:
        return [0]


def _set_all(cpus):
    for tid in _threads():
        try:
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError):
            pass        # a thread that ended meanwhile


class LinkCpus:
    """Which CPUs the daemons get and which the rest of the run keeps."""

    def __init__(self, count, usable=None):
        usable = sorted(usable) if usable is not None else usable_cpus()
        if not isinstance(count, int) or count < 0:
            raise LinkCpuError('--link-cpus takes a whole number of CPUs, 0 or more')
        if count and count >= len(usable):
            raise LinkCpuError(
                f'--link-cpus {count} leaves no CPU for the hosts: this run may use '
                f'{len(usable)} CPU(s) ({ranges(usable)}), so ask for at most {len(usable) - 1}')
        self.count = count
        self.usable = usable
        self.daemons = usable[len(usable) - count:] if count else []
        self.rest = usable[:len(usable) - count] if count else list(usable)
        self._saved = None
        self.placed = {}            # {daemon name: CPUs it was given}

    @property
    def active(self):
        return bool(self.count)

    def confine(self):
        """Move every thread of this process to the rest (children inherit it)."""
        if self.active and self._saved is None:
            self._saved = os.sched_getaffinity(0)
            _set_all(self.rest)

    def place(self, name, pid):
        """Give one daemon process the daemons' CPUs."""
        if self.active:
            os.sched_setaffinity(pid, self.daemons)
            self.placed[name] = sorted(os.sched_getaffinity(pid))

    def release(self):
        """Give the runner back the CPUs it had (idempotent)."""
        if self._saved is not None:
            _set_all(self._saved)
            self._saved = None

    def record(self):
        """For the manifest (``mechanisms.link_cpus``)."""
        if not self.active:
            return {'reserved': 0, 'daemons': None, 'rest': ranges(self.rest),
                    'note': 'the daemons share every CPU with the hosts'}
        return {'reserved': self.count, 'daemons': ranges(self.daemons),
                'rest': ranges(self.rest),
                'placed': {n: ranges(c) for n, c in sorted(self.placed.items())},
                'note': 'hosts, node processes, controller and tools on "rest"; processes '
                        'started before the run (an Open vSwitch daemon) and interrupt work '
                        'where the kernel puts them'}


def ranges(numbers, sep=','):
    """'0-2,5' for [0, 1, 2, 5] (CPU lists as the kernel writes them; dht8's report lists
    its CPU-bound points the same way, with sep ', ')."""
    out, numbers = [], sorted(numbers)
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        out.append(str(numbers[i]) if i == j else f'{numbers[i]}-{numbers[j]}')
        i = j + 1
    return sep.join(out)
