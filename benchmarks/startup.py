"""Start-up time of a large topology: repronet's builder beside plain Mininet, in the same run.

The topology is a tree: one core switch, one leaf switch per ``--per-leaf`` hosts, every link
100 Mbit/s and 1 ms, Linux bridges. repronet builds it with ``repronet.emu.network.Network``
(link checks, HTB, and on a kernel without ``sch_netem`` the linkdelay daemons with their
iptables rules); plain Mininet builds the same tree as ``Mininet(topo, link=TCLink,
switch=LinuxBridge)`` with ``bw`` only, because Mininet cannot delay without netem (it prints an
error and runs undelayed). So the comparison charges repronet for all of its delay emulation.

Timed, for each: from handing over the Topo to a network ready for traffic (build, start, link
emulation installed); no ping. Not timed: the capability probe (once per run) and the stop,
which is printed beside. The benchmark holds the machine-wide lock and cleans what a crashed
run left before it starts, as the runner does (``repronet.run.leftovers``), records what it
builds so the next run can clean up after a SIGKILL, and stops each network on every exit path
(Ctrl-C and SIGTERM included, through ``repronet.run.signals``).

With ``--repeat N`` both are built N times per size, alternately, and the medians are printed
(the machine is shared; alternating spreads its other load over both).

    sudo /usr/bin/python3 benchmarks/startup.py --sizes 50,100,200,400 [--repeat 3]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from repronet.run import leftovers, provenance  # noqa: E402
from repronet.run.signals import Interrupted, SignalGuard  # noqa: E402
from benchmarks.args import whole  # noqa: E402
from repronet.usage import UsageParser  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_HOSTS = 2000


def tree(hosts, per_leaf, delay):
    """The benchmark's tree as a Mininet Topo (delay=None: bandwidth only)."""
    from mininet.topo import Topo
    link = {'bw': 100}
    if delay:
        link['delay'] = delay

    class Tree(Topo):
        def build(self):
            core = self.addSwitch('s1')
            for i in range(hosts):
                if i % per_leaf == 0:
                    leaf = self.addSwitch('s%d' % (i // per_leaf + 2))
                    self.addLink(leaf, core, **link)
                self.addLink(self.addHost('h%d' % (i + 1)), leaf, **link)
    return Tree()


class _Plain:
    """What a crash would leave of a plain Mininet network, in the form State.record reads."""

    def __init__(self, net):
        self.net = net

    def leftovers(self):
        """PIDs of host shells, switch-side interfaces and bridges."""
        nodes = self.net.hosts + self.net.switches
        return {'pids': [n.pid for n in nodes if n.pid],
                'intfs': sorted({i.name for s in self.net.switches for i in s.intfList()
                                 if i.name != 'lo'}),
                'bridges': [s.name for s in self.net.switches], 'ovs_bridges': []}


def time_plain(hosts, per_leaf, state, guard):
    """Seconds plain Mininet takes to build and start the tree, and to stop it."""
    from mininet.link import TCLink
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge
    net = Mininet(topo=tree(hosts, per_leaf, None), switch=LinuxBridge, link=TCLink,
                  controller=None, autoSetMacs=True, build=False, waitConnected=False)
    started = time.monotonic()
    try:
        try:
            net.build()
        finally:
            state.record(_Plain(net))
        net.start()
        ready = time.monotonic() - started
    finally:
        with guard.held():
            stopped = time.monotonic()
            net.stop()
            state.clear()
    return ready, time.monotonic() - stopped


def time_repronet(hosts, per_leaf, caps, state, guard):
    """Seconds repronet's builder takes to build and start the tree, and to stop it."""
    from repronet.emu import network
    with tempfile.TemporaryDirectory(prefix='repronet-startup-') as logs:
        started = time.monotonic()
        net = network.Network(tree(hosts, per_leaf, '1ms'), 'lxbr', 'auto', caps,
                              on_built=state.record, seed=1, log_dir=logs)
        try:
            net.start()
            ready = time.monotonic() - started
            mechanism = net.links.mechanism
        finally:
            with guard.held():
                stopped = time.monotonic()
                net.stop()
                state.clear()
    return ready, time.monotonic() - stopped, mechanism


def _medians(runs):
    """[(ready, stop), ...] -> (median ready, median stop)."""
    return tuple(statistics.median(column) for column in zip(*runs))


def sizes(text):
    """'50,100' -> [50, 100] (argparse type)."""
    try:
        out = [int(v) for v in text.split(',') if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError('--sizes takes whole numbers like 50,100,200')
    if not out or any(not 2 <= n <= MAX_HOSTS for n in out):
        raise argparse.ArgumentTypeError('every size must be 2..%d hosts' % MAX_HOSTS)
    return out


def main(argv=None):
    """Measure every size; print one line each and return the exit status."""
    parser = UsageParser(tool='startup.py', description=__doc__.split('\n')[0])
    parser.add_argument('--sizes', type=sizes, default=[50, 100, 200, 400],
                        help='host counts, comma-separated (default 50,100,200,400)')
    parser.add_argument('--per-leaf', type=whole(1, 100), default=10,
                        metavar='1..100', help='hosts per leaf switch (default 10)')
    parser.add_argument('--repeat', type=whole(1, 20), default=1,
                        metavar='1..20', help='builds of each per size; medians (default 1)')
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print('startup: Mininet needs root; run with sudo /usr/bin/python3', file=sys.stderr)
        return 1
    from mininet.log import setLogLevel
    from repronet.emu import capabilities
    setLogLevel('critical')   # plain TCLink warns per interface about HTB quantum
    git = provenance.git_state(REPO)
    print('commit %s%s, %d cores, kernel %s' % (
        (git['revision'] or '?')[:12], ' (dirty)' if git['dirty'] else '',
        os.cpu_count(), os.uname().release), flush=True)
    with SignalGuard() as guard:
        try:
            with leftovers.machine_lock():
                leftovers.clean()
                caps = capabilities.probe()
                print('%6s %12s %12s %7s %10s %10s  %s' % (
                    'hosts', 'repronet_s', 'mininet_s', 'ratio', 'stop_rn_s', 'stop_mn_s',
                    'link mechanism'), flush=True)
                for n in args.sizes:
                    state, plain, ours = leftovers.State(), [], []
                    for _ in range(args.repeat):
                        plain.append(time_plain(n, args.per_leaf, state, guard))
                        *times, mech = time_repronet(n, args.per_leaf, caps, state, guard)
                        ours.append(times)
                    ours, plain = _medians(ours), _medians(plain)
                    print('%6d %12.2f %12.2f %7.2f %10.2f %10.2f  %s' % (
                        n, ours[0], plain[0], ours[0] / plain[0], ours[1], plain[1], mech),
                        flush=True)
        except Interrupted as e:
            print('startup: interrupted (%s); networks stopped' % e, file=sys.stderr)
            return 128 + e.signum
    return 0


if __name__ == '__main__':
    sys.exit(main())
