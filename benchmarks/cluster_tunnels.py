"""What a link across servers costs: iperf3 and RTT over VXLAN and ssh tunnels vs a local link.

    sudo /usr/bin/python3 benchmarks/cluster_tunnels.py [--seconds 5] [--pings 50]

Makes a namespace server (``repronet.cluster.nsserver``) and, for each tunnel kind, builds
with the cluster backend's own network class (``ClusterNetwork``) h1 and h2 here and h3 on
the second server, all on one Linux bridge here, links without emulation (so the figures
are the mechanisms' own ceilings). Then it measures h1 -> h2 (a local veth path) and
h1 -> h3 (across the tunnel): ``ping`` RTT (avg of --pings at 50 ms intervals) and one
iperf3 TCP transfer of --seconds. It prints a table with the load average before and
after: on a shared 2-core machine the ceilings are the CPU's, so compare the rows of one
run with each other, not with another run's.

Holds the machine lock (``/run/repronet.lock``) like a run does.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mininet.topo import Topo  # noqa: E402

from repronet.cluster.network import ClusterNetwork  # noqa: E402
from repronet.cluster.nsserver import NamespaceServer  # noqa: E402
from repronet.cluster.ssh import Machine  # noqa: E402
from repronet.emu import capabilities  # noqa: E402
from repronet.emu.process import stop_popen  # noqa: E402
from repronet.run import leftovers  # noqa: E402
from repronet.usage import UsageParser  # noqa: E402

PORT = 5201


class _Three(Topo):
    def build(self):
        switch = self.addSwitch('s1')
        for name in ('h1', 'h2', 'h3'):
            self.addLink(self.addHost(name), switch)


def _rtt_ms(src, dst, count):
    out = src.cmd('ping -n -q -c %d -i 0.05 -W 2 %s' % (count, dst.IP()))
    line = [x for x in out.splitlines() if 'min/avg/max' in x]
    return float(line[0].split('=')[1].split('/')[1]) if line else float('nan')


def _iperf_mbps(src, dst, seconds):
    """One iperf3 TCP transfer src -> dst; a client refused before the server listens
    retries (a refused connection does not use up ``-s -1``)."""
    server = dst.popen(['iperf3', '-s', '-1', '-p', str(PORT)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            out = src.cmd('iperf3 -J -c %s -p %d -t %g' % (dst.IP(), PORT, seconds))
            try:
                report = json.loads(out[out.index('{'):])
            except ValueError:
                report = {'error': out}
            if 'error' not in report:
                return report['end']['sum_received']['bits_per_second'] / 1e6
            time.sleep(0.2)
        return float('nan')
    finally:
        stop_popen(server, grace=3)


def _measure(server, tunnel, seconds, pings):
    machines = {'localhost': Machine('localhost'), server.name: Machine(server.name)}
    net = ClusterNetwork(_Three(), machines, {'h1': 'localhost', 'h2': 'localhost',
                                              'h3': server.name}, tunnel=tunnel,
                         caps=capabilities.probe())
    rows = []
    try:
        net.start()
        h1, h2, h3 = net.net.get('h1', 'h2', 'h3')
        for label, dst in (('%s net: local veth' % tunnel, h2), ('%s net: across' % tunnel, h3)):
            rows.append((label, _rtt_ms(h1, dst, pings), _iperf_mbps(h1, dst, seconds)))
    finally:
        net.stop()
    return rows


def main(argv=None):
    parser = UsageParser(tool='cluster_tunnels.py', description=__doc__.split('\n\n')[0])
    parser.add_argument('--seconds', type=float, default=5.0)
    parser.add_argument('--pings', type=int, default=50)
    args = parser.parse_args(argv)
    if not 0.5 <= args.seconds <= 600 or not 1 <= args.pings <= 10000:
        parser.error('--seconds must be 0.5..600 and --pings 1..10000')
    if os.geteuid() != 0:
        parser.error('needs root (it builds Mininet networks); run with sudo')
    with leftovers.machine_lock():
        leftovers.clean()
        load = open('/proc/loadavg').read().split()[:3]
        with NamespaceServer() as server:
            os.environ.update(server.environ())
            rows = []
            for tunnel in ('vxlan', 'ssh'):     # each network measures its local path too
                rows += _measure(server, tunnel, args.seconds, args.pings)
    after = open('/proc/loadavg').read().split()[:3]
    print('path                      RTT avg ms   iperf3 TCP Mbit/s')
    for label, rtt, mbps in rows:
        print('%-25s %10.3f   %10.1f' % (label, rtt, mbps))
    print('load average before %s, after %s (2 cores; shared machine)'
          % (' '.join(load), ' '.join(after)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
