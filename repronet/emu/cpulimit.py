"""Per-host CPU limits on cgroup v2 and v1: slow and fast hosts on one machine.

A host asks for CPU with ``addHost('s1', cores=0.2)``: 0.2 of ONE core, whatever the machine
(CPU seconds per wall-clock second, the unit a "700 MHz Pi 1 against a 1.2 GHz Pi 3" class
of host is easiest to state in).  Mininet's own ``cpu=f`` (a fraction of the WHOLE machine,
``CPULimitedHost``) is accepted too and converted to ``cores = f * cpu_count``, so Mininet
topologies keep working; ``cpu=-1`` is Mininet's "no limit".  Mininet's ``cores=`` is a list
of CPUs to pin to (a cpuset); repronet's is an amount, and a list is refused with a sentence.

Mechanism: a CFS bandwidth limit (a quota of CPU time per period) on a cgroup of the host's
own, ``repronet/<host>`` (``repronet.emu.cpulimit_cgroups`` writes the files): ``cpu.max`` on
cgroup v2, ``cpu.cfs_quota_us``/``cpu.cfs_period_us`` on v1, whichever the capability probe
found working (``Capabilities.cgroup_cpu_mechanism``).  Mininet 2.3.0's ``CPULimitedHost``
knows only v1 (through cgcreate), which is why this module exists.

Period: CFS lets a group run its whole quota and then stalls it until the period ends, so with
Mininet's 100 ms period a server at 0.2 core answers within 20 ms or stalls 80 ms.  The period
here is 10 ms (a slow host is slow rather than stalled), grown for small limits so the quota
stays at the kernel's minimum of 1 ms (0.05 core -> 1 ms per 20 ms); the manifest records both.

What runs inside the limit: the host's shell is moved into the group right after it starts,
so every command run through it (``host.cmd``) inherits the group; ``host.popen`` (node
processes) joins the group in the child before it execs.  A ``popen`` given its own
``mncmd`` (the link-delay daemons, which emulate the network, not the host's work) stays out,
as with Mininet's class.  Groups are removed when the host terminates (processes still in
them are killed: the host is gone) and again by ``Network.stop()``; a SIGKILLed run's are
removed by ``repronet clean``.
"""

import dataclasses
import functools
import math
import numbers
import os

from mininet.node import Host

from repronet.emu import capabilities
from repronet.emu.cpulimit_cgroups import CgroupError, Group, find, remove_parent

DEFAULT_PERIOD_US = 10000
MIN_QUOTA_US = 1000         # CFS refuses a quota below 1 ms
MAX_PERIOD_US = 1000000     # and a period above 1 s
MIN_CORES = MIN_QUOTA_US / MAX_PERIOD_US


class CpuLimitError(ValueError):
    """A host's CPU limit is malformed or cannot be set (one clear sentence)."""


def quota_and_period(cores, period_us=DEFAULT_PERIOD_US):
    """Return (quota_us, period_us) giving `cores` of one core: the period grown so the
    quota is at least MIN_QUOTA_US."""
    if not MIN_CORES <= cores:
        raise CpuLimitError('%g core is below the smallest CFS limit, %g core (1 ms per '
                            'second)' % (cores, MIN_CORES))
    if cores * period_us < MIN_QUOTA_US:
        period_us = min(math.ceil(MIN_QUOTA_US / cores), MAX_PERIOD_US)
    return max(round(cores * period_us), MIN_QUOTA_US), period_us


def _number(value):
    """True for an int or float that is finite (bool is no number here)."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value))


@dataclasses.dataclass(frozen=True)
class HostLimit:
    """One host's limit: cores of one core, as quota_us per period_us; asked: as written."""

    name: str
    cores: float
    quota_us: int
    period_us: int
    asked: str


def host_limit(name, params, cpu_count, period_us=DEFAULT_PERIOD_US):
    """Return the HostLimit a host's parameters ask for, or None (no limit).

    cores=x: x of one core; cpu=f: Mininet's fraction of the machine, f * cpu_count cores."""
    cores, cpu = params.get('cores'), params.get('cpu')
    if cores is not None and cpu is not None:
        raise CpuLimitError('host %s: give cores= (of one core) or cpu= (fraction of the '
                            'machine), not both' % name)
    if params.get('sched', 'cfs') != 'cfs':
        raise CpuLimitError('host %s: sched=%r is not supported; repronet limits CPU with '
                            'CFS bandwidth only (drop sched=)' % (name, params['sched']))
    period_us = params.get('period_us', period_us)
    if not isinstance(period_us, int) or isinstance(period_us, bool) \
            or not MIN_QUOTA_US <= period_us <= MAX_PERIOD_US:
        raise CpuLimitError('host %s: period_us=%r must be a whole number of microseconds '
                            'from %d to %d' % (name, period_us, MIN_QUOTA_US, MAX_PERIOD_US))
    if cores is not None:
        if not _number(cores):
            raise CpuLimitError('host %s: cores=%r must be a number of cores (e.g. '
                                'cores=0.5 for half of one core), not a list of CPUs to pin '
                                'to as in Mininet' % (name, cores))
        asked = 'cores=%g' % cores
    elif cpu is None or (_number(cpu) and cpu == -1):
        return None
    else:
        if not _number(cpu) or not 0 < cpu <= 1:
            raise CpuLimitError('host %s: cpu=%r must be a fraction of the whole machine '
                                'above 0 and at most 1 (or use cores= for cores of one '
                                'core)' % (name, cpu))
        cores, asked = cpu * cpu_count, 'cpu=%g' % cpu
    if not MIN_CORES <= cores <= cpu_count:
        raise CpuLimitError('host %s: %s asks for %g core, but a limit must be from %g core '
                            'to this machine\'s %d cores' % (name, asked, cores, MIN_CORES,
                                                              cpu_count))
    quota, period = quota_and_period(cores, period_us)
    return HostLimit(name, cores, quota, period, asked)


class CpuLimits:
    """The CPU limits of one network: which hosts, how much, by which mechanism."""

    def __init__(self, mechanism, root, hosts):
        self.mechanism = mechanism      # 'v2' or 'v1'
        self.root = root                # the hierarchy's mount point
        self.hosts = hosts              # {name: HostLimit}

    def group(self, name):
        """Return the cgroup of host `name`."""
        return Group(self.mechanism, self.root, name)

    def host_class(self):
        """Return the host class to hand to Mininet(host=...)."""
        return functools.partial(CPULimitedHost, cpu_limits=self)

    def record(self):
        """Return what the manifest keeps (mechanisms.cpu_limits); period_us is the
        hosts' common period, None when small limits grew some (see groups)."""
        periods = {h.period_us for h in self.hosts.values()}
        return {'mechanism': self.mechanism,
                'period_us': periods.pop() if len(periods) == 1 else None,
                'hosts': {n: h.cores for n, h in sorted(self.hosts.items())},
                'groups': {n: {'path': self.group(n).path, 'quota_us': h.quota_us,
                               'period_us': h.period_us, 'asked': h.asked}
                           for n, h in sorted(self.hosts.items())}}

    def remove_all(self):
        """Remove every host's group, then the parent; return error sentences (none: [])."""
        errors = []
        for name in sorted(self.hosts):
            try:
                self.group(name).remove()
            except CgroupError as e:
                errors.append(str(e))
        remove_parent(self.root)
        return errors


def plan(topo, caps, cpu_count=None, roots=None):
    """Return the CpuLimits of a Topo, or None when no host asks for one.

    Checks every host before anything is built: a malformed limit, or a machine without
    the capability, raises CpuLimitError with one sentence."""
    cpu_count = cpu_count or os.cpu_count()
    hosts = {}
    for name in topo.hosts():
        limit = host_limit(name, topo.nodeInfo(name), cpu_count)
        if limit is not None:
            hosts[name] = limit
    if not hosts:
        return None
    mechanism = caps.cgroup_cpu_mechanism if caps.cgroup_cpu else None
    root = (roots if roots is not None else find()).get(mechanism)
    if root is None:
        raise CpuLimitError(capabilities.explain('cgroup_cpu', caps))
    return CpuLimits(mechanism, root, hosts)


class CPULimitedHost(Host):
    """A Mininet host whose shell and processes run in a cgroup with a CFS limit.

    The name and role are Mininet's (``cpu=`` works as there); the limit itself comes
    from the network's CpuLimits (``cores=`` is of ONE core).  A host the plan does not
    limit behaves as a plain Host."""

    def __init__(self, name, cpu_limits=None, **params):
        self.cpu_group = None
        Host.__init__(self, name, **params)
        limit = cpu_limits.hosts.get(name) if cpu_limits else None
        if limit is None:
            return
        group = cpu_limits.group(name)
        try:
            group.create(limit.quota_us, limit.period_us)
            group.add(self.pid)
        except CgroupError as e:
            Host.terminate(self)        # Mininet never learns of this host: stop its shell
            try:
                group.remove()
            except CgroupError:
                pass
            raise CpuLimitError('cannot limit the CPU of host %s: %s' % (name, e))
        self.cpu_group = group

    def popen(self, *args, **kwargs):
        """Popen in the host's namespace and, unless mncmd is given, its cgroup."""
        if self.cpu_group is not None and 'mncmd' not in kwargs:
            kwargs['preexec_fn'] = self.cpu_group.joiner(kwargs.get('preexec_fn'))
        return Host.popen(self, *args, **kwargs)

    def terminate(self):
        """Stop the host, then remove its group (Network.stop retries what fails here)."""
        Host.terminate(self)
        if self.cpu_group is not None:
            try:
                self.cpu_group.remove()
                self.cpu_group = None
            except CgroupError:
                pass
