#!/usr/bin/python3
"""Link-emulation fidelity: configured vs measured delay, jitter, loss and goodput.

Whatever mechanism ``repronet.emu.linkemu`` picked (netem, or the linkdelay fallback), this
benchmark measures what the links really do. One network holds one small component per
configuration, so configurations never share a link and the network is built once:

- ``two-host``: ``a - s - b``, the configured one-way values split over the two links;
- ``multi-hop``: ``a - s1 - s2 - s3 - b``, split over four links (bandwidth on s1-s2 only).

Each point measures one configuration (kinds):

- ``delay``: ``workloads.probe`` UDP echo, RTT per packet with the application's clock; plus
  ``ping`` and ``ping -U`` (kernel vs user timestamps) for comparison;
- ``jitter``: the same with jitter on every link, probes 1 ms apart (reordering expected);
- ``loss``: ``--loss-packets`` probes at 10,000/s; one-way loss from the reflector's count;
- ``goodput``: ``iperf3`` TCP, then UDP at the configured rate, ``--duration`` seconds each;
  UDP probes every 10 ms during the TCP transfer measure the loaded RTT (queueing delay at
  the bottleneck adds to the configured delay).

Every point records the CPU seconds the linkdelay daemons used and the machine's busy
fraction while it ran. ``analysis/fidelity.py`` turns the logs into tables, "configured vs
measured" figures and a report listing each target with its measured ratio and PASS/MISS.

With ``--backend sim`` the same points measure the simulator's link model (``repronet.sim``)
in virtual time: the UDP probe runs there as it is (``workloads.probe.simulate``), and TCP
goodput comes from ``workloads.bulk`` (iperf3 cannot run there). ping, ``ping -U``, iperf3's
UDP test and the daemons' CPU exist only on real hosts: they are skipped, said once, and the
analysis reports them as not measured. The script asks the backend what it has rather than
which backend it is: ``backends.runs`` (can ping and iperf3 run?), ``ctx.sysctls``,
``ctx.cost_meter`` and ``ctx.link_report`` (None or nothing where hosts are simulated).

    sudo /usr/bin/python3 topologies/fidelity.py --scale smoke
    /usr/bin/python3 topologies/fidelity.py --backend sim --scale smoke
"""

import json
import math
import os
import sys

if __package__ in (None, ''):       # run as a script: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mininet.topo import Topo  # noqa: E402

from repronet.emu.process import LogReady, TcpListening  # noqa: E402
from repronet.emu.linkemu_params import BW_MAX_MBIT  # noqa: E402
from repronet.run.backends import runs  # noqa: E402
from repronet.run.options import UsageError  # noqa: E402
from repronet.run.runner import Experiment  # noqa: E402
from repronet.run.sweep import derive_seed  # noqa: E402

SHAPES = ('two-host', 'multi-hop')
SETTING = ('kind', 'shape', 'delay_ms', 'jitter_ms', 'loss', 'bw')   # what a point measures
PROBE_PORT = 9000
IPERF_PORT = 5201
PING, IPERF3 = ['ping'], ['iperf3']     # what runs only where hosts are real
SYSCTLS = ('net.ipv4.tcp_rmem', 'net.ipv4.tcp_wmem', 'net.core.rmem_max', 'net.core.wmem_max',
           'net.ipv4.tcp_congestion_control')
SKIPS = ('fidelity: --backend %s skips ping, ping -U, iperf3 UDP and the linkdelay '
         'daemons\' CPU (they need real hosts) and measures TCP goodput with '
         'workloads.bulk')


def _floats(text):
    """Parse '1,5,20' into a list of floats."""
    return [float(x) for x in str(text).split(',') if x.strip()]


def _list(params, flag, parse):
    """Parse a comma-separated flag; UsageError in one sentence if it does not parse."""
    try:
        return parse(getattr(params, flag))
    except ValueError:
        raise UsageError('--%s %r is not a comma-separated list of numbers'
                         % (flag, getattr(params, flag))) from None


def _us(ms):
    """A delay in ms as a tc-style string with microseconds."""
    return '%dus' % round(ms * 1000)


def configurations(params):
    """Return the list of configurations (dicts) measured by this run, in order."""
    out = []
    for shape in SHAPES:
        for d in _floats(params.delays):
            out.append({'kind': 'delay', 'shape': shape, 'delay_ms': d, 'jitter_ms': 0.0,
                        'loss': 0.0, 'bw': None})
        out.append({'kind': 'jitter', 'shape': shape, 'delay_ms': params.jitter_delay,
                    'jitter_ms': params.jitter, 'loss': 0.0, 'bw': None})
        for p in _floats(params.losses):
            out.append({'kind': 'loss', 'shape': shape, 'delay_ms': 0.0, 'jitter_ms': 0.0,
                        'loss': p, 'bw': None})
        for pair in str(params.rates).split(','):
            bw, d = (float(x) for x in pair.split('@'))
            out.append({'kind': 'goodput', 'shape': shape, 'delay_ms': d, 'jitter_ms': 0.0,
                        'loss': 0.0, 'bw': bw})
    for i, c in enumerate(out):
        c['comp'] = i
        c.update(_expected(c))
    return out


def _hops(c):
    """Link parameter dicts along the component's path a -> b (Mininet keywords)."""
    n = 2 if c['shape'] == 'two-host' else 4
    links = [{} for _ in range(n)]
    for link in links:
        if c['delay_ms'] or c['jitter_ms']:
            link['delay'] = _us(c['delay_ms'] / n)
        if c['jitter_ms']:
            link['jitter'] = _us(c['jitter_ms'])
    if c['loss']:
        lossy = [0] if n == 2 else [0, 2]
        per_link = 100.0 * (1.0 - (1.0 - c['loss'] / 100.0) ** (1.0 / len(lossy)))
        for i in lossy:
            links[i]['loss'] = round(per_link, 9)
    if c['bw']:
        for i in ([0, 1] if n == 2 else [1]):
            links[i]['bw'] = c['bw']
    return links


def _expected(c):
    """Configured round-trip values of a configuration (netem semantics, per link)."""
    hops = _hops(c)
    jitter_var = sum((c['jitter_ms'] ** 2) / 3.0 for h in hops if 'jitter' in h)
    return {'rtt_ms': 2.0 * c['delay_ms'], 'rtt_std_ms': math.sqrt(2.0 * jitter_var),
            'nlinks': len(hops)}


class FidelityTopo(Topo):
    """One disconnected component per configuration."""

    def build(self, configs=()):
        """Add a, b and the switches of every configuration."""
        for c in configs:
            i = c['comp']
            a, b = self.addHost('a%d' % i), self.addHost('b%d' % i)
            hops = _hops(c)
            switches = [self.addSwitch('s%d' % (100 * (i + 1) + k))
                        for k in range(len(hops) - 1)]
            chain = [a] + switches + [b]
            for k, params in enumerate(hops):
                self.addLink(chain[k], chain[k + 1], **params)


class Fidelity(Experiment):
    """Configured vs measured link delay, jitter, loss and goodput."""

    name = 'fidelity'
    analysis_module = 'analysis.fidelity'
    backends = ('emu', 'sim')   # sim: the probe and workloads.bulk in virtual time
    sim_interpreters = ('python3', 'pypy3')     # auto: pypy3 (default scale: 7.6-8.6 s, not
                                                # 11.7-12.7; tests/test_sim_pypy.py)
    scales = {'smoke': {'delays': '0,5,20', 'losses': '1', 'rates': '10@10,100@0',
                        'rtt_packets': 200, 'loss_packets': 20000, 'duration': 2.0},
              'default': {'delays': '0,1,5,20,50,100', 'losses': '0.1,1,5',
                          'rates': '10@0,10@10,100@0,100@10,500@0,500@1',
                          'rtt_packets': 1000, 'loss_packets': 20000, 'duration': 5.0},
              'seed': {'delays': '0,1,5,20,50,100', 'losses': '0.1,1,5,10',
                       'rates': '10@0,10@10,100@0,100@10,500@0,500@1',
                       'rtt_packets': 3000, 'loss_packets': 100000, 'duration': 10.0},
              'defaults': {'jitter': 2.0, 'jitter_delay': 20.0, 'rtt_interval': 0.005}}
    limits = {'jitter': (0.01, 1000, 'ms'), 'jitter_delay': (0, 10000, 'ms'),
              'rtt_packets': (10, 1000000, 'a whole number'),
              'rtt_interval': (0.0001, 10, 'seconds'),
              'loss_packets': (100, 10000000, 'a whole number'),
              'duration': (1, 3600, 'seconds')}

    def add_arguments(self, parser):
        """Add the sweep lists and probe sizes."""
        parser.add_argument('--delays', default=None, metavar='MS,MS',
                            help='one-way path delays to measure; 0 measures the switches\' own '
                            'RTT (default 0,1,5,20,50,100)')
        parser.add_argument('--losses', default=None, metavar='PCT,PCT',
                            help='one-way path loss rates in percent (default 0.1,1,5)')
        parser.add_argument('--rates', default=None, metavar='MBIT@MS,...',
                            help='bandwidth@one-way delay pairs for goodput '
                            '(default 10@0,10@10,100@0,100@10,500@0,500@1)')
        parser.add_argument('--jitter', type=float, default=None, metavar='MS',
                            help='jitter of every link in the jitter points (default 2)')
        parser.add_argument('--jitter-delay', type=float, default=None, metavar='MS',
                            help='one-way path delay of the jitter points (default 20)')
        parser.add_argument('--rtt-packets', type=int, default=None, metavar='N',
                            help='probes per delay/jitter point (default 1000)')
        parser.add_argument('--rtt-interval', type=float, default=None, metavar='S',
                            help='seconds between delay probes (default 0.005)')
        parser.add_argument('--loss-packets', type=int, default=None, metavar='N',
                            help='probes per loss point (default 20000)')
        parser.add_argument('--duration', type=float, default=None, metavar='S',
                            help='seconds per iperf3 transfer (default 5)')

    def check(self, params):
        """Check the sweep lists (each value one sentence); the flags' bounds are in limits."""
        lists = (('delays', 0, 10000, 'one-way delays in ms'),
                 ('losses', 0.001, 99, 'loss rates in percent'))
        for flag, low, high, what in lists:
            values = _list(params, flag, _floats)
            if not values or any(not low <= v <= high for v in values):
                raise UsageError('--%s %s must be %s from %g to %g, comma-separated'
                                 % (flag, getattr(params, flag), what, low, high))
        for pair in _list(params, 'rates', lambda text: [
                tuple(float(x) for x in p.split('@')) for p in str(text).split(',')]):
            if len(pair) != 2 or not (0.1 <= pair[0] <= BW_MAX_MBIT and 0 <= pair[1] <= 10000):
                raise UsageError('--rates %s must be MBIT@MS pairs with 0.1 to %g Mbit/s and '
                                 '0 to 10000 ms, like 10@5,100@0' % (params.rates, BW_MAX_MBIT))
        if params.jitter > params.jitter_delay:
            raise UsageError('--jitter %g is more than --jitter-delay %g: the fallback cannot '
                             'send packets before they were sent' % (params.jitter,
                                                                      params.jitter_delay))
        if not runs(params, PING):
            print(SKIPS % params.backend, flush=True)

    def topology(self, params):
        """Return one component per configuration."""
        return FidelityTopo(configs=configurations(params))

    def points(self, params):
        """One point per configuration and repetition.

        A point's seed comes from --seed, its setting and its repetition only, so adding or
        removing other points leaves it unchanged.
        """
        points = []
        for rep in range(params.repeat):
            for c in configurations(params):
                setting = {k: c[k] for k in SETTING}
                points.append(dict(c, point=len(points), repetition=rep,
                                   seed=derive_seed(params.seed, setting, rep)))
        return points

    def setup(self, ctx):
        """Record the TCP buffer sysctls the transfers ran with (where hosts have them)."""
        text = ctx.sysctls(ctx.host('a0'), SYSCTLS)
        if text is not None:
            with open(ctx.results.log_path('sysctl', '.txt'), 'w') as f:
                f.write(text)

    def run_point(self, ctx, point):
        """Measure one configuration; return its seconds and (where measured) what the
        daemons and the CPU cost."""
        a, b = ctx.host('a%d' % point['comp']), ctx.host('b%d' % point['comp'])
        cost = ctx.cost_meter((a.name, b.name))
        started = ctx.clock()
        if point['kind'] != 'goodput':
            self._probe(ctx, point, a, b)
        elif runs(ctx.params, IPERF3):
            self._goodput(ctx, point, a, b)
        else:
            self._bulk(ctx, point, a, b)
        return dict({'elapsed_s': round(ctx.clock() - started, 3)}, **cost.measure())

    def _probe(self, ctx, point, a, b):
        """UDP echo probe (and ping for delay points) from a to b."""
        p = point['point']
        reflector = ctx.start_node(b, 'reflect-p%d' % p,
                                   [sys.executable, '-m', 'workloads.probe', 'reflect',
                                    '--port', PROBE_PORT], ready=LogReady())
        if point['kind'] == 'loss':
            count, interval = ctx.params.loss_packets, 0.0001
        elif point['kind'] == 'jitter':
            count, interval = ctx.params.rtt_packets, 0.001
        else:
            count, interval = ctx.params.rtt_packets, ctx.params.rtt_interval
        drain = 1.0 + 4 * point['rtt_ms'] / 1000.0
        sender = ctx.start_node(a, 'probe-p%d' % p,
                                [sys.executable, '-m', 'workloads.probe', 'send',
                                 '--dst', b.IP(), '--port', PROBE_PORT, '--count', count,
                                 '--interval', interval, '--stream', p + 1,
                                 '--drain', drain])
        sender.wait(timeout=count * interval * 3 + drain + 30)
        reported = LogReady('stream')
        deadline = ctx.clock() + 5
        while not reported.check(reflector) and ctx.clock() < deadline:
            ctx.sleep(0.02)
        ctx.stop_nodes([reflector])
        if sender.returncode != 0:
            raise RuntimeError('%s exited with %s; see %s'
                               % (sender.name, sender.returncode, sender.err_path))
        if point['kind'] == 'delay' and runs(ctx.params, PING):
            for flag, label in ((None, 'kernel'), ('-U', 'user')):
                argv = ['ping', '-n', '-q', '-c', 20, '-i', 0.02]
                argv += [flag] if flag else []
                node = ctx.start_node(a, 'ping-%s-p%d' % (label, p), argv + [b.IP()],
                                      suffix='.txt')
                node.wait(timeout=30 + 40 * point['rtt_ms'] / 1000.0)

    def _goodput(self, ctx, point, a, b):
        """iperf3 TCP (with RTT probes alongside), then UDP at the configured rate, a to b.

        The probes during the TCP transfer show queueing delay at the HTB bottleneck adding
        to the configured delay, as it does with netem under HTB.
        """
        p = point['point']
        for proto in ('tcp', 'udp'):
            port = IPERF_PORT + (p % 1000)
            server = ctx.start_node(b, 'iperf-%s-server-p%d' % (proto, p),
                                    ['iperf3', '-s', '-1', '-J', '-p', port],
                                    ready=TcpListening(port), suffix='.json')
            loaded = self._loaded(ctx, p, a, b) if proto == 'tcp' else []
            argv = ['iperf3', '-c', b.IP(), '-p', port, '-J', '-t', ctx.params.duration]
            if proto == 'udp':
                argv += ['-u', '-b', '%gM' % point['bw']]
            client = ctx.start_node(a, 'iperf-%s-client-p%d' % (proto, p), argv,
                                    suffix='.json')
            client.wait(timeout=ctx.params.duration + 30)
            server.wait(timeout=15)
            if loaded:
                loaded[1].wait(timeout=ctx.params.duration + 30)
                ctx.stop_nodes(loaded[:1])
            if client.returncode != 0:
                raise RuntimeError('%s exited with %s; see %s' % (
                    client.name, client.returncode, client.log_path))

    def _loaded(self, ctx, p, a, b):
        """Start the reflector and the sender of RTT probes every 10 ms during a transfer."""
        return [ctx.start_node(b, 'loaded-reflect-p%d' % p,
                               [sys.executable, '-m', 'workloads.probe', 'reflect',
                                '--port', PROBE_PORT], ready=LogReady()),
                ctx.start_node(a, 'loaded-probe-p%d' % p,
                               [sys.executable, '-m', 'workloads.probe', 'send',
                                '--dst', b.IP(), '--port', PROBE_PORT,
                                '--count', int(ctx.params.duration / 0.01),
                                '--interval', 0.01, '--stream', p + 1, '--drain', 2.0])]

    def _bulk(self, ctx, point, a, b):
        """Simulated goodput: workloads.bulk TCP from a to b with RTT probes alongside, as
        iperf3's TCP test in emulation (its UDP test has no simulated counterpart)."""
        p = point['point']
        port = IPERF_PORT + (p % 1000)
        server = ctx.start_node(b, 'bulk-server-p%d' % p,
                                [sys.executable, '-m', 'workloads.bulk', 'server',
                                 '--port', port], ready=LogReady())
        loaded = self._loaded(ctx, p, a, b)
        client = ctx.start_node(a, 'bulk-client-p%d' % p,
                                [sys.executable, '-m', 'workloads.bulk', 'client', '--dst',
                                 b.IP(), '--port', port, '--duration', ctx.params.duration])
        server.wait(timeout=ctx.params.duration + 30)
        loaded[1].wait(timeout=ctx.params.duration + 30)
        ctx.stop_nodes([loaded[0], client])
        if server.returncode != 0 or client.returncode != 0:
            raise RuntimeError('%s exited with %s and %s with %s; see %s' % (
                server.name, server.returncode, client.name, client.returncode,
                server.err_path))

    def finish(self, ctx):
        """Save the link emulation's final counters and composed paths (where it has
        them)."""
        record = ctx.link_report()
        if record is not None:
            with open(ctx.results.log_path('linkemu', '.json'), 'w') as f:
                json.dump(record, f, indent=1, sort_keys=True)


if __name__ == '__main__':
    sys.exit(Fidelity().main())
