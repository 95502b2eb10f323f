"""Per-path delay, jitter and loss from per-link parameters (for the linkdelay fallback).

Without ``sch_netem`` the delay is applied once, at the receiving host's ingress, keyed by the
packet's source address (see :mod:`repronet.emu.linkemu`). That needs, for every ordered host
pair ``(src, dst)``, the list of link directions a packet crosses. The topology graph must
therefore give one path per pair: it must be a forest (no loops, no parallel links), and a
path may cross switches only, never another host (a host that forwards between two links
would see the packet in its own PREROUTING and the rest of the path would be lost).

The composition follows netem's per-link semantics: one-way delay is the sum of the link
delays; each link adds its own jitter, drawn uniformly in [-jitter, +jitter] as netem does
without a distribution table, so the daemon draws one sample per link and sums them; loss
compounds, ``1 - prod(1 - p_i)``.

Link rates (``bw``) are kept per hop too: HTB keeps each rate over time, and the daemon
sends each packet through the rated links of its path, one clock per link direction (see
``repronet/emu/linkdelay/linkdelay_wire.c``), so a packet also takes the time its bits need.
Once a topology has daemons at all, a path with a rate counts as active even without delay.
"""

import collections
import dataclasses


@dataclasses.dataclass(frozen=True)
class PathSpec:
    """What the daemon at ``dst`` does to packets from ``src``."""

    src: str
    dst: str
    hops: tuple        # ((delay_us, jitter_us), ...) one per link direction crossed
    loss: float        # probability 0..1, compounded over the hops
    links: tuple       # ('h1->s1', 's1->h2', ...) for records and messages
    rates: tuple = ()  # bits/s of each hop, 0 where the link direction has no bw

    @property
    def delay_ms(self):
        """Sum of the configured link delays in milliseconds."""
        return sum(d for d, _ in self.hops) / 1000.0

    @property
    def active(self):
        """True when the daemon must hold or drop anything on this path."""
        return self.loss > 0 or any(d > 0 or j > 0 for d, j in self.hops) or any(self.rates)

    def rated(self):
        """[(link name, bits/s)] of the hops with a rate, in path order."""
        return [(name, r) for name, r in zip(self.links, self.rates) if r]


def check_forest(nodes, edges, hosts, where='topology'):
    """Return None if the graph is a forest with leaf-only transit-free hosts, else a reason."""
    parent = {n: n for n in nodes}

    def find(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra == rb:
            return (f'the {where} has a loop or parallel links through {a}-{b}, so a packet '
                    f'has more than one possible path')
        parent[ra] = rb
    degree = {h: 0 for h in hosts}
    for a, b in edges:
        for n in (a, b):
            if n in degree:
                degree[n] += 1
    multi = sorted(h for h, d in degree.items() if d > 1)
    if multi:
        return (f'host {multi[0]} has {degree[multi[0]]} links, and traffic it forwards '
                f'between them could not be delayed per path')
    return None


class PathTable:
    """The path of every ordered host pair, computed per receiving host when asked.

    There are N^2 host pairs, but each receiving host's daemon needs only its own N paths,
    and at any time only one receiver's are needed: so nothing holds all N^2 at once. A
    breadth-first walk from the receiver reaches every other node once (in a forest each
    has one path) and builds each node's hops from its parent's, O(nodes) per receiver.
    """

    def __init__(self, edges, directions, hosts):
        """``edges``: [(a, b)]; ``directions[(a, b)]``: DirectionParams of a -> b."""
        self.hosts = sorted(hosts)
        self._host_set = set(hosts)
        self._directions = directions
        self._adjacent = {}
        for a, b in edges:
            self._adjacent.setdefault(a, []).append(b)
            self._adjacent.setdefault(b, []).append(a)
        self._receivers = None

    def _walk(self, dst):
        """{node: (next node toward dst, hops to dst, probability to survive, rates)} for dst."""
        reached = {dst: (None, (), 1.0, ())}
        queue = collections.deque([dst])
        while queue:
            node = queue.popleft()
            if node in self._host_set and node != dst:
                continue            # hosts never forward (check_forest)
            _, hops, keep, rates = reached[node]
            for nxt in self._adjacent.get(node, ()):
                if nxt not in reached:
                    p = self._directions[(nxt, node)]
                    hop = (int(round(p.delay_ms * 1000)), int(round(p.jitter_ms * 1000)))
                    rate = int(round(p.bw * 1e6)) if p.bw else 0
                    reached[nxt] = (node, (hop,) + hops, keep * (1.0 - p.loss / 100.0),
                                    (rate,) + rates)
                    queue.append(nxt)
        return reached

    def to(self, dst):
        """PathSpec of every host with a path to dst, sorted by source."""
        reached = self._walk(dst)
        return [self._spec(src, dst, reached) for src in self.hosts
                if src != dst and src in reached]

    def path(self, src, dst):
        """PathSpec src -> dst, or None when no switch-only path joins them."""
        reached = self._walk(dst)
        return self._spec(src, dst, reached) if src != dst and src in reached else None

    @staticmethod
    def _spec(src, dst, reached):
        """Compose src's entry of a walk towards dst into a PathSpec."""
        nxt, hops, keep, rates = reached[src]
        names, node = [], src
        while nxt is not None:
            names.append(f'{node}->{nxt}')
            node, nxt = nxt, reached[nxt][0]
        return PathSpec(src, dst, hops, 1.0 - keep, tuple(names), rates)

    def receivers(self):
        """Hosts with at least one active path to them (a daemon each), sorted."""
        if self._receivers is None:
            self._receivers = []
            for dst in self.hosts:
                reached = self._walk(dst)
                if any(keep < 1.0 or any(d or j for d, j in hops) or any(rates)
                       for h, (_, hops, keep, rates) in reached.items()
                       if h in self._host_set and h != dst):
                    self._receivers.append(dst)
        return self._receivers

    def longest(self):
        """Most link directions on one host-to-host path (two sweeps per tree)."""
        best, done = 0, set()
        for host in self.hosts:
            if host in done:
                continue
            first = self._walk(host)
            done.update(first)
            far = max((h for h in self.hosts if h in first),
                      key=lambda h: len(first[h][1]))
            second = self._walk(far)
            best = max([best] + [len(second[h][1]) for h in self.hosts if h in second])
        return best

    def summary(self):
        """One record per receiving host: how many sources, and the range of their paths.

        The full per-pair list would be N^2 rows; each pair's path follows from the link
        records in the manifest (delay sums, loss compounds), and ``path(src, dst)`` gives one.
        """
        out = []
        for dst in self.receivers():
            specs = self.to(dst)
            active = [p for p in specs if p.active]
            out.append({'dst': dst, 'sources': len(specs), 'active_sources': len(active),
                        'delay_ms_min': min(p.delay_ms for p in active),
                        'delay_ms_max': max(p.delay_ms for p in active),
                        'loss_min': round(100.0 * min(p.loss for p in active), 9),
                        'loss_max': round(100.0 * max(p.loss for p in active), 9),
                        'hops_max': max(len(p.hops) for p in active),
                        'jitter': any(j for p in active for _, j in p.hops),
                        'rated_links': len({n for p in active for n, _ in p.rated()})})
        return out


def daemon_config(specs, addresses):
    """The config of one receiver's linkdelay daemon, from its sources' PathSpecs.

    ``addresses(src)`` gives the source host's IPv4 addresses (one line each). Returns
    (text, sources, simple, holds): sources is the number of source lines; simple is True
    when no path has loss or jitter (the daemon may then hold whole GSO packets); holds is
    the configured delay of each path in us. Each rated
    link direction gets one ``link`` line, numbered in the order the paths first cross it,
    and a path lists its rated links after ``via`` (repronet/emu/linkdelay/linkdelay_wire.c).
    """
    lines, simple, holds, links = [], True, [], {}
    for spec in specs:
        hops = ' '.join(f'{d} {j}' for d, j in spec.hops)
        holds.append(sum(d for d, _ in spec.hops))
        simple = simple and spec.loss == 0 and all(j == 0 for _, j in spec.hops)
        via = [links.setdefault((name, rate), len(links)) for name, rate in spec.rated()]
        if via:
            hops += ' via ' + ' '.join(map(str, via))
        for ip in addresses(spec.src):
            lines.append(f'{ip} {spec.loss:.9f} {len(spec.hops)} {hops}\n')
    head = ['# link ID RATE_BPS, then SRC_IPV4 LOSS NHOPS DELAY_US JITTER_US ... [via ID ...] '
            '(written by repronet/emu/linkemu_paths.py)\n']
    head += [f'# {name}\nlink {i} {rate}\n' for (name, rate), i in links.items()]
    return ''.join(head + lines), len(lines), simple, holds
