#!/usr/bin/python3
"""What the DHT's sans-I/O cores spend per message and per name, in this process: the
Python share of the processing cost the simulator charges (issue 13, ``--sim-cost``).

``analysis.sim_cost`` fits the cost of a REGISTER from an emulated run: a figure per byte an
index server receives, which covers every name's whole cost on the request's path (the
client encoding the names, the kernel, the delay daemons, asyncio, the server decoding and
storing them). This script measures the part of it that is the cores' own Python work,
with no sockets, kernel or link emulation, and who pays it:

* client: ``Channel.send`` of a REGISTER of n names (build and encode the frame);
* server: ``ServerConnection.receive`` of that frame on a fresh index server (split,
  decode, check every name and its owner on the ring, store, answer), with 8 servers and
  no replica, 8 servers and one replica, and 1 server (dht8's Parts I and III);
* one SEARCH on a server holding 2,000 entries, for scale.

Printed: median microseconds per call over ``--repeat`` fresh cores, per name from a least-
squares line over n = 1, 250, 500, 2000, and the client's share of the per-name cost.
Nothing is asserted; the machine's load average is printed beside the figures (the medians
move by several times on a loaded machine: compare figures taken together).

    /usr/bin/python3 benchmarks/dht_core_cost.py [--repeat 30]
"""

import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from nodes.dht import codec                                     # noqa: E402
from nodes.dht.client_core import Channel                       # noqa: E402
from nodes.dht.ring import Ring                                 # noqa: E402
from nodes.dht.server_core import ServerConnection, ServerCore  # noqa: E402
from repronet.usage import UsageParser  # noqa: E402

SIZES = (1, 250, 500, 2000)
ADDR = '10.0.0.1:8000'
RINGS = (('8 servers, no replica', 8, 0), ('8 servers, 1 replica', 8, 1),
         ('1 server', 1, 0))


def names(n, peer=1):
    """n file names as dht8 makes them (19 characters)."""
    return tuple('p%d-part1-%06d.bin' % (peer, i) for i in range(n))


def _median(fn, repeat):
    """Median seconds of fn(i) over i in range(repeat); fn returns its own timing."""
    return statistics.median(fn(i) for i in range(repeat))


def server_register(servers, replicas, n, repeat):
    """Median seconds a fresh index server takes to answer one REGISTER of n names."""
    ring = Ring(['s%d' % i for i in range(1, servers + 1)])

    def once(i):
        conn = ServerConnection(ServerCore('s1', ring=ring, replicas=replicas))
        frame = codec.encode(codec.Register(1, ADDR, names(n, i + 1)))
        t0 = time.perf_counter()
        reply, _ = conn.receive(frame, 0.0)
        took = time.perf_counter() - t0
        assert isinstance(codec.Decoder().feed(reply)[0], codec.Ack)
        return took
    return _median(once, repeat)


def client_register(n, repeat):
    """Median seconds a client's channel takes to build and encode a REGISTER of n names."""
    batch = names(n)

    def once(_):
        channel = Channel('s1')
        t0 = time.perf_counter()
        channel.send(codec.Register, 0.0, (ADDR, batch))
        return time.perf_counter() - t0
    return _median(once, repeat)


def server_search(repeat):
    """Median seconds an index server holding 2,000 entries takes to answer one SEARCH."""
    conn = ServerConnection(ServerCore('s1', ring=Ring(['s1'])))
    conn.receive(codec.encode(codec.Register(1, ADDR, names(2000))), 0.0)
    frames = [codec.encode(codec.Search(i + 2, name))
              for i, name in enumerate(names(max(repeat, 100)))]

    def once(i):
        t0 = time.perf_counter()
        conn.receive(frames[i], 0.0)
        return time.perf_counter() - t0
    return _median(once, len(frames))


def slope(seconds):
    """Seconds per name of a least-squares line through (SIZES, seconds)."""
    mx, my = statistics.fmean(SIZES), statistics.fmean(seconds)
    return sum((x - mx) * (y - my) for x, y in zip(SIZES, seconds)) / \
        sum((x - mx) ** 2 for x in SIZES)


def main(argv=None):
    p = UsageParser(tool='dht_core_cost.py', description=__doc__.split('\n')[0])
    p.add_argument('--repeat', type=int, default=30, help='fresh cores per figure (median)')
    args = p.parse_args(argv)
    if not 1 <= args.repeat <= 10000:
        p.error('--repeat must be 1 to 10000')
    print('load average %s (os.getloadavg, before)' % ' '.join(
        '%.2f' % v for v in os.getloadavg()))
    client = [client_register(n, args.repeat) for n in SIZES]
    print('client encodes a REGISTER: %s us; %.2f us per name' % (
        ', '.join('%d names %.1f' % (n, t * 1e6) for n, t in zip(SIZES, client)),
        slope(client) * 1e6))
    per_name = {}
    for label, servers, replicas in RINGS:
        times = [server_register(servers, replicas, n, args.repeat) for n in SIZES]
        per_name[label] = slope(times)
        print('server answers it (%s): %s us; %.2f us per name' % (
            label, ', '.join('%d names %.1f' % (n, t * 1e6) for n, t in zip(SIZES, times)),
            per_name[label] * 1e6))
    print('server answers a SEARCH (2,000 entries held): %.1f us'
          % (server_search(args.repeat) * 1e6))
    for label, b in per_name.items():
        print('client share of the per-name cost (%s): %.2f' % (label, slope(client) /
                                                                (slope(client) + b)))
    print('load average %s (after)' % ' '.join('%.2f' % v for v in os.getloadavg()))
    return 0


if __name__ == '__main__':
    sys.exit(main())
