"""Link bandwidth, delay, jitter, loss and queue size on any kernel, never silently wrong.

Links carry Mininet's TCLink keywords (``bw`` Mbit/s, ``delay``/``jitter`` strings with a unit,
``loss`` percent, ``max_queue_size`` packets, per direction through ``params1``/``params2``).
:func:`plan` checks every link before anything starts and picks a mechanism:

``netem`` (kernel has ``sch_netem``)
    Mininet's own :class:`TCLink`: HTB for ``bw`` with a netem leaf for delay, jitter, loss and
    the queue limit, on each interface's egress. Only change: a ``tc`` error raises instead of
    being printed and ignored.

``linkdelay`` (no ``sch_netem``: the development kernel, CI, WSL2, minimal cloud kernels)
    Bandwidth stays HTB on each interface's egress (a ``pfifo`` leaf carries ``max_queue_size``).
    Delay, jitter and loss are applied once per path, at the *receiving* host's ingress: the
    ``repronet/emu/linkdelay`` daemon in each host namespace gets the packets arriving on the
    host's interface from one ``iptables -t raw PREROUTING -i IFACE -j NFQUEUE`` rule, looks
    the source address up in its table, holds each packet for the sum of the link delays on
    the path source -> this host (plus one uniform jitter draw per link, netem's default
    distribution), and drops with the compounded loss ``1 - prod(1 - p_i)`` from a
    generator of the source's own, seeded from the run's or the point's seed
    (:meth:`LinkEmulation.reseed`). Queueing delay at an HTB bottleneck adds to the held
    time, as it does with netem under HTB.

Why this mechanism (each choice was measured on a kernel without netem; the figures the
project stands by, with the command and commit that produced them, are in
docs/link-emulation.md, headlined in the README's "Link emulation", and
``topologies/fidelity.py`` is the benchmark):

* where to hold: holding a sender's own packets in its OUTPUT hook throttles its TCP far below
  the link rate (TCP small queues count the held packets against the socket; netem avoids
  that with ``skb_orphan_partial``, userspace cannot). A first prototype, a Python NFQUEUE
  loop holding at the receiver's raw PREROUTING instead, did not throttle it that way. So
  the hold is at the receiver, keyed by source address, once per path;
* who holds: that Python loop slowed TCP even with no hold at all and slept with about a
  millisecond's granularity. The C daemon copies 40 bytes per packet and sleeps in ``ppoll``
  with 1 ns timer slack, so a packet waits for its release time, not for a scheduler tick,
  and the per-packet work is small (docs/link-emulation.md gives how late the daemons release
  packets, the RTT error and the daemons' CPU, as measured). For LAN-scale holds (tens of us,
  issue 15) a hold counts from the kernel's arrival stamp, and the daemons run SCHED_FIFO and
  busy-poll the last 100 us before a deadline, both bounded (``linkemu_daemon``,
  docs/link-emulation.md, "LAN-scale holds");
* loss: ``iptables -m statistic`` and the daemon were equally accurate in an early comparison
  (1 % configured, 20,000 probes each); the daemon wins because its generator is seeded
  (reproducible drop pattern for a given packet order), its drop counts are logged next to its
  packet counts, and a receiving host needs one rule whatever the number of sources;
* start-up grows linearly with the number of hosts: one rule and one ``iptables-restore`` per
  receiving host, every daemon started before any is waited for, a path table computed per
  receiver when its daemon starts (never all N^2 pairs at once), and per-receiver summaries
  of the paths instead of N^2 records (``benchmarks/startup.py`` measures it against plain
  Mininet; docs/link-emulation.md, "Start-up time", has its figures);
* the development kernel has no ``sch_fq`` either, so BPF EDT timestamps cannot delay; TUN
  or AF_XDP would move every byte through userspace, NFQUEUE moves 40 bytes and a verdict.

Limits of ``linkdelay`` (``plan`` refuses topologies that break the first two):
the graph must be loop-free with hosts as leaves (one path per host pair, no host forwarding);
only IPv4 between emulated hosts is delayed (ARP, IPv6 and traffic to the root namespace are
not); a receiving host with a daemon queues every IPv4 packet arriving on its interface, so
packets from a host whose own path to it has nothing to emulate still make the round trip
through the daemon (released at once); cross-traffic from sources with different path delays
meets at a shared bottleneck in a different interleaving than with per-link delay, since every
packet is delayed only at the end of its path; ``max_queue_size`` bounds the HTB queue only
(netem's ``limit`` in Mininet also bounds packets in flight on the delayed link, a common
surprise there). Kernel receive timestamps (SO_TIMESTAMP: ``ping`` by default, ``tcpdump``
inside the receiving host) are taken before the hold, so plain ``ping`` shows only the
request's path delay; ``ping -U``, TCP's own RTT estimate and every application clock see the
full delay (the benchmark reports both).
"""

import dataclasses

from mininet.link import Link, TCIntf

from repronet.emu.linkemu_params import LinkEmulationError, link_directions
from repronet.emu.linkemu_paths import PathTable, check_forest

MAX_HOPS = 64       # link directions per path: linkdelay.c's LD_MAX_HOPS

__all__ = ['LinkEmulationError', 'LinkEmulation', 'plan']

MECHANISMS = ('auto', 'netem', 'linkdelay')


def htb_quantum(bw):
    """The HTB class quantum in bytes at bw Mbit/s: the kernel's own (rate / r2q 10, clamped
    to 1000..200000), named explicitly so tc does not warn."""
    return min(max(int(bw * 1e6 / 8 / 10), 1000), 200000)


class _ExplicitQuantumIntf(TCIntf):
    """TCIntf whose HTB class names its quantum, so tc prints no 'quantum is big' warning.

    Without a quantum the kernel computes rate / r2q (r2q 10), clamps it to 1000..200000
    bytes and warns, which Mininet prints as '*** Error' for every shaped interface. Passing
    the clamped value explicitly gives the same class, silently.
    """

    def bwCmds(self, bw=None, **params):
        """Mininet's commands, with the kernel's own quantum on the HTB class."""
        cmds, parent = TCIntf.bwCmds(self, bw=bw, **params)
        if bw:
            cmds = [c + ' quantum %d' % htb_quantum(bw) if ' htb rate ' in c else c
                    for c in cmds]
        return cmds, parent


class CheckedTCIntf(_ExplicitQuantumIntf):
    """Mininet's TCIntf, but a failing tc command raises instead of printing '*** Error'."""

    def config(self, **params):
        """Configure like TCIntf and raise LinkEmulationError if tc complained."""
        result = TCIntf.config(self, **params)
        _raise_on_tc_error(self, result)
        return result


class ShapedIntf(_ExplicitQuantumIntf):
    """HTB shaping and a pfifo queue bound only; delay, jitter and loss go to linkdelay."""

    def config(self, bw=None, delay=None, jitter=None, loss=None, max_queue_size=None,
               **params):
        """Configure bw (HTB) and max_queue_size (pfifo leaf); ignore netem's keywords."""
        result = TCIntf.config(self, bw=bw, **params)
        _raise_on_tc_error(self, result)
        if max_queue_size is not None:
            parent = 'parent 5:1' if bw is not None else 'root'
            out = self.tc(f'%s qdisc replace dev %s {parent} handle 10: pfifo '
                          f'limit {int(max_queue_size)}')
            if out.strip():
                raise LinkEmulationError(
                    f'interface {self}: tc could not set the pfifo queue of '
                    f'{max_queue_size} packets: {out.strip()}')
        return result


# Mininet deletes the root qdisc first unless it is pfifo_fast ("priomap") or noqueue; a
# kernel's default root qdisc (Debian's fq_codel, e.g. on an ssh tap tunnel's end) has handle
# 0 and cannot be deleted, and the root qdisc Mininet adds next replaces it anyway.
HARMLESS_TC = ('Cannot delete qdisc with handle of zero',)


def _raise_on_tc_error(intf, result):
    """Raise if any tc output of a TCIntf.config result looks like an error."""
    outputs = (result or {}).get('tcoutputs', []) if isinstance(result, dict) else []
    bad = [o.strip() for o in outputs if o.strip() and
           ('rror' in o or 'unknown' in o.lower() or 'illegal' in o.lower())
           and not any(h in o for h in HARMLESS_TC)]
    if bad:
        raise LinkEmulationError(f'interface {intf}: tc refused the configuration: {bad[0]}')


class CheckedTCLink(Link):
    """TCLink with CheckedTCIntf on both ends (the netem mechanism)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault('cls1', CheckedTCIntf)
        kwargs.setdefault('cls2', CheckedTCIntf)
        Link.__init__(self, *args, **kwargs)


class ShapedLink(Link):
    """Link with ShapedIntf on both ends (the linkdelay mechanism's shaping half)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault('cls1', ShapedIntf)
        kwargs.setdefault('cls2', ShapedIntf)
        Link.__init__(self, *args, **kwargs)


@dataclasses.dataclass
class _LinkPlan:
    """One topology link with both directions checked."""

    node1: str
    node2: str
    forward: object    # DirectionParams node1 -> node2
    backward: object   # DirectionParams node2 -> node1


class LinkEmulation:
    """A checked plan: the Mininet link class to use, then install/records/stop."""

    def __init__(self, mechanism, links, paths, seed):
        self.mechanism = mechanism
        self.links = links
        self.paths = paths      # PathTable (linkdelay with delay, jitter or loss) or None
        self.seed = seed
        self.link_class = CheckedTCLink if mechanism == 'netem' else ShapedLink
        self._daemons = None

    @property
    def shaped(self):
        """True when some link direction has a rate (bw): HTB shapes it."""
        return any(p.bw is not None for link in self.links for p in (link.forward, link.backward))

    @property
    def needs_daemons(self):
        """True when some host pair needs delay, jitter or loss from linkdelay."""
        return self.mechanism == 'linkdelay' and self.paths is not None and \
            bool(self.paths.receivers())

    @property
    def serialises(self):
        """True when the daemons time each packet's bits on the rated links (linkdelay_wire.c):
        with daemons at all, every host reached over a link with bw has one."""
        return self.shaped and self.needs_daemons

    def install(self, net, log_dir=None, cpus=None, queues='cpu'):
        """Start what the mechanism needs in the started network and check it is ready
        (``cpus``: a ``linkcpus.LinkCpus`` that places the daemons, or None; ``queues``:
        ``cpu`` or ``one``, see ``linkemu_workers``)."""
        if not self.needs_daemons:
            return
        from repronet.emu.linkemu_daemon import DaemonSet
        self._daemons = DaemonSet(self.paths, self.seed, log_dir, cpus=cpus, queues=queues)
        try:
            self._daemons.start(net)
        except Exception:
            self._daemons.stop()
            raise

    def daemon_stats(self):
        """Per-host daemon counters and CPU seconds so far ({} without daemons)."""
        return self._daemons.stats() if self._daemons else {}

    def daemon_cpu_seconds(self):
        """Per-host CPU seconds the linkdelay daemons used so far ({} without daemons)."""
        return self._daemons.cpu_seconds() if self._daemons else {}

    def daemon_schedule(self):
        """How the linkdelay daemons are scheduled (None without daemons), for the manifest."""
        return self._daemons.schedule() if self._daemons else None

    def daemon_holds(self):
        """After stop: the daemons' lateness next to their holds (None without daemons)."""
        return self._daemons.holds() if self._daemons else None

    def daemon_pids(self):
        """PIDs of the linkdelay daemons started so far (for leftover records)."""
        return self._daemons.pids() if self._daemons else []

    def reseed(self, seed):
        """Reseed every daemon's loss and jitter draws from seed (e.g. a point's own seed).

        Each source's generator restarts from (seed, receiving host, source), so a point's
        drops depend on its seed and its own packets, not on the points run before it.
        netem draws from the kernel's generator and cannot be seeded: a no-op there.
        """
        self.seed = seed
        if self._daemons:
            self._daemons.reseed(seed)

    def path_records(self):
        """One dict per receiving host the daemons act on: its sources and their path range."""
        return self.paths.summary() if self.needs_daemons else []

    def records(self):
        """One dict per link for the manifest: endpoints, configured parameters, mechanism."""
        out = []
        for link in self.links:
            for a, b, p in ((link.node1, link.node2, link.forward),
                            (link.node2, link.node1, link.backward)):
                out.append({'src': a, 'dst': b, **p.as_record(),
                            'mechanism': self._direction_mechanism(p)})
        return out

    def _direction_mechanism(self, p):
        """Name the mechanisms one direction uses, e.g. 'htb+linkdelay'."""
        parts = []
        if p.bw is not None:
            parts.append('htb')
        if p.max_queue_size is not None and self.mechanism == 'linkdelay':
            parts.append('pfifo')
        if p.needs_delay_or_loss or (p.max_queue_size is not None and self.mechanism == 'netem') \
                or (p.bw is not None and self.serialises):   # the daemon times its bits
            parts.append(self.mechanism)
        return '+'.join(parts) or 'none'

    def stop(self):
        """Undo install: remove iptables rules, stop own daemons (idempotent)."""
        if self._daemons:
            self._daemons.stop()


def plan(topo, caps, seed=0, mechanism='auto'):
    """Check every link of topo against caps and return a LinkEmulation, or raise."""
    if mechanism not in MECHANISMS:
        raise LinkEmulationError(f'link mechanism {mechanism!r} is not one of {MECHANISMS}.')
    links = []
    for n1, n2, info in topo.links(sort=True, withInfo=True):
        forward, backward = link_directions(info, n1, n2)
        links.append(_LinkPlan(n1, n2, forward, backward))
    directions = [(lk, p) for lk in links for p in (lk.forward, lk.backward)]
    wants_netem = [lk for lk, p in directions if p.needs_delay_or_loss]
    wants_queue = [lk for lk, p in directions if p.max_queue_size is not None]
    if any(p.bw is not None for _, p in directions) and not getattr(caps, 'htb', False):
        first = next(lk for lk, p in directions if p.bw is not None)
        raise LinkEmulationError(
            f'link {first.node1}-{first.node2} asks for bw but this kernel has no sch_htb; '
            f'remove bw or run on a kernel with HTB (the Vagrant VM has it).')
    if mechanism == 'auto':
        has_netem = getattr(caps, 'netem', False)
        mechanism = 'netem' if has_netem or not (wants_netem or wants_queue) else 'linkdelay'
    if mechanism == 'netem' and (wants_netem or wants_queue) and not getattr(caps, 'netem', False):
        first = (wants_netem or wants_queue)[0]
        raise LinkEmulationError(
            f'link {first.node1}-{first.node2} asks for delay/jitter/loss/max_queue_size with '
            f'mechanism netem but this kernel has no sch_netem; use mechanism auto or linkdelay.')
    paths = None
    if mechanism == 'linkdelay':
        paths = _plan_linkdelay(topo, links, caps, wants_netem)
    return LinkEmulation(mechanism, links, paths, seed)


def _plan_linkdelay(topo, links, caps, wants_netem):
    """Check what linkdelay needs and return its PathTable (None: nothing to delay)."""
    if not wants_netem:
        return None
    first = wants_netem[0]
    for feature in ('nfqueue',):
        if not getattr(caps, feature, False):
            raise LinkEmulationError(
                f'link {first.node1}-{first.node2} asks for delay/jitter/loss, this kernel has '
                f'no sch_netem and no NFQUEUE for the linkdelay fallback; run on a kernel with '
                f'either (the Vagrant VM has netem) or remove delay, jitter and loss.')
    hosts = sorted(topo.hosts())
    edges = [(lk.node1, lk.node2) for lk in links]
    reason = check_forest(topo.nodes(), edges, hosts)
    if reason:
        raise LinkEmulationError(
            f'link {first.node1}-{first.node2} asks for delay/jitter/loss, this kernel has no '
            f'sch_netem, and the linkdelay fallback cannot be used because {reason}; '
            f'run on a kernel with sch_netem or make the topology a tree with hosts as leaves.')
    directions = {}
    for lk in links:
        directions[(lk.node1, lk.node2)] = lk.forward
        directions[(lk.node2, lk.node1)] = lk.backward
    table = PathTable(edges, directions, hosts)
    longest = table.longest()
    if longest > MAX_HOPS:
        raise LinkEmulationError(
            f'link {first.node1}-{first.node2} asks for delay/jitter/loss, this kernel has no '
            f'sch_netem, and a path between two hosts crosses {longest} links, more than the '
            f'{MAX_HOPS} the linkdelay daemon composes; run on a kernel with sch_netem or '
            f'shorten the longest path.')
    return table
