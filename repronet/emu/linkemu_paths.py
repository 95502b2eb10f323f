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
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class PathSpec:
    """What the daemon at ``dst`` does to packets from ``src``."""

    src: str
    dst: str
    hops: tuple        # ((delay_us, jitter_us), ...) one per link direction crossed
    loss: float        # probability 0..1, compounded over the hops
    links: tuple       # ('h1->s1', 's1->h2', ...) for records and messages

    @property
    def delay_ms(self):
        """Sum of the configured link delays in milliseconds."""
        return sum(d for d, _ in self.hops) / 1000.0

    @property
    def active(self):
        """True when the daemon must hold or drop anything on this path."""
        return self.loss > 0 or any(d > 0 or j > 0 for d, j in self.hops)


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


def host_paths(edges, directions, hosts):
    """All ordered host pairs joined by a switch-only path -> PathSpec.

    ``edges`` is a list of (a, b); ``directions[(a, b)]`` is the DirectionParams of a -> b.
    """
    adjacent = {}
    for a, b in edges:
        adjacent.setdefault(a, []).append(b)
        adjacent.setdefault(b, []).append(a)
    host_set = set(hosts)
    paths = {}
    for src in hosts:
        # Depth-first walk; in a forest every reached node has exactly one path from src.
        stack = [(src, ())]
        seen = {src}
        while stack:
            node, route = stack.pop()
            if node in host_set and node != src:
                paths[(src, node)] = _spec(src, node, route, directions)
                continue
            for nxt in adjacent.get(node, ()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, route + ((node, nxt),)))
    return paths


def _spec(src, dst, route, directions):
    """Compose the link directions of one route into a PathSpec."""
    hops, keep, names = [], 1.0, []
    for a, b in route:
        p = directions[(a, b)]
        hops.append((int(round(p.delay_ms * 1000)), int(round(p.jitter_ms * 1000))))
        keep *= 1.0 - p.loss / 100.0
        names.append(f'{a}->{b}')
    return PathSpec(src, dst, tuple(hops), 1.0 - keep, tuple(names))
