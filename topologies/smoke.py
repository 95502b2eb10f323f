#!/usr/bin/python3
"""Smoke experiment: is the emulated network what the topology says?

Three hosts on one switch; the link h1-s1 is shaped to ``--bw`` Mbit/s, the
others are not, so every transfer from h1 crosses exactly one bottleneck.
Each point (one per ``--repeat``):

1. ping h1 -> h2 and h1 -> h3 (``ping -c``), expecting 0 % loss; this also
   resolves ARP before the transfer;
2. an ``iperf3`` TCP transfer h1 -> h2 for ``--duration`` seconds; client and
   server both write ``-J`` JSON, saved untouched as raw logs; the server's
   per-interval numbers are the receiver's goodput over time.

The measured goodput should be close to the configured rate: payload is
1448 of the 1514 bytes HTB counts per full-size frame, so about 95.6 % of
``--bw`` is the ceiling.  With ``--switch osken`` the controller's per-port
counters are logged too, and the run waits for one statistics poll after the
last transfer so the counters cover all of it.

    sudo /usr/bin/python3 topologies/smoke.py --scale smoke --switch osken
"""

import json
import os
import sys
import time

if __package__ in (None, ''):       # run as a script: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))

from mininet.topo import Topo  # noqa: E402

from repronet.emu.process import TcpListening  # noqa: E402
from repronet.run.runner import Experiment  # noqa: E402

PORT = 5201


class SmokeTopo(Topo):
    """h1, h2, h3 on s1; h1-s1 shaped to bw Mbit/s."""

    def build(self, bw=20):
        """Add three hosts, one switch and the shaped link."""
        s1 = self.addSwitch('s1')
        for i in (1, 2, 3):
            host = self.addHost('h%d' % i)
            if i == 1:
                self.addLink(host, s1, bw=bw)
            else:
                self.addLink(host, s1)


class Smoke(Experiment):
    """Three hosts, one switch, one shaped link: ping and an iperf3 transfer."""

    name = 'smoke'
    analysis_module = 'analysis.smoke'
    scales = {'smoke': {'repeat': 2, 'duration': 2},
              'default': {'repeat': 3, 'duration': 10},
              'seed': {'repeat': 5, 'duration': 30},
              'defaults': {'bw': 20.0, 'pings': 5, 'interval': 0.5}}
    limits = {'bw': (0.1, 10000, 'Mbit/s'), 'duration': (1, 3600, 'seconds'),
              'pings': (1, 10000, 'a whole number'), 'interval': (0.1, 60, 'seconds')}
    stats_interval = 0.5

    def add_arguments(self, parser):
        """Add --bw, --duration, --pings and --interval."""
        parser.add_argument('--bw', type=float, default=None, metavar='MBIT',
                            help='rate of the shaped link h1-s1 in Mbit/s '
                            '(default 20)')
        parser.add_argument('--duration', type=float, default=None,
                            metavar='S', help='seconds per iperf3 transfer '
                            '(smoke 2, default 10, seed 30)')
        parser.add_argument('--pings', type=int, default=None, metavar='N',
                            help='pings per host pair and point (default 5)')
        parser.add_argument('--interval', type=float, default=None,
                            metavar='S', help='iperf3 report interval in '
                            'seconds (default 0.5)')

    def topology(self, params):
        """Return the three-host topology."""
        return SmokeTopo(bw=params.bw)

    def run_point(self, ctx, point):
        """Ping, then one iperf3 transfer h1 -> h2; return the summary."""
        p = point['point']
        h1, h2 = ctx.host('h1'), ctx.host('h2')
        pings = [ctx.start_node(h1, 'ping-h1-%s-p%d' % (dst, p),
                                ['ping', '-n', '-c', ctx.params.pings,
                                 '-i', '0.2', '-W', '2', ctx.host(dst).IP()],
                                suffix='.txt')
                 for dst in ('h2', 'h3')]
        for node in pings:
            node.wait(timeout=ctx.params.pings * 0.2 + 10)
        port = PORT + p
        server = ctx.start_node(h2, 'iperf-server-p%d' % p,
                                ['iperf3', '-s', '-1', '-J', '-p', port,
                                 '-i', ctx.params.interval],
                                ready=TcpListening(port), suffix='.json')
        client = ctx.start_node(h1, 'iperf-client-p%d' % p,
                                ['iperf3', '-c', h2.IP(), '-p', port, '-J',
                                 '-t', ctx.params.duration,
                                 '-i', ctx.params.interval],
                                suffix='.json')
        client.wait(timeout=ctx.params.duration + 30)
        server.wait(timeout=10)
        for node in pings + [client, server]:
            if node.returncode != 0:
                raise RuntimeError('%s exited with status %s; see %s' % (
                    node.name, node.returncode, node.err_path))
        with open(client.log_path) as f:
            end = json.load(f)['end']['sum_received']
        self.last_transfer_end = time.time()
        return {'goodput_mbps': round(end['bits_per_second'] / 1e6, 3),
                'bw': ctx.params.bw}

    def finish(self, ctx):
        """With osken, wait for a port-statistics poll after the last transfer."""
        if ctx.params.switch != 'osken':
            return
        path = ctx.results.log_path('controller-stats')
        deadline = time.monotonic() + 10 * self.stats_interval + 5
        while time.monotonic() < deadline:
            if _last_t(path) > self.last_transfer_end + self.stats_interval:
                return
            time.sleep(self.stats_interval / 5)
        raise RuntimeError('the controller logged no port statistics after '
                           'the last transfer; see %s' % path)


def _last_t(path):
    """Return the largest 't' in a JSON-lines log (0 if none)."""
    last = 0.0
    try:
        with open(path) as f:
            for line in f:
                try:
                    last = max(last, float(json.loads(line).get('t', 0)))
                except (ValueError, TypeError, AttributeError):
                    continue
    except FileNotFoundError:
        pass
    return last


if __name__ == '__main__':
    sys.exit(Smoke().main())
