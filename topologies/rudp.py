#!/usr/bin/python3
"""Reliable UDP in blocks against TCP and an existing reliable-UDP tool (seed 004).

The seed (ADEN) sent a 190 MB file over a 300 Mbit/s home wireless network in blocks of
B datagrams of 1,472 bytes, each block repaired before the next: B = 1, 2, 4, 8, 16, 32,
64 took 794, 492, 389, 268, 168, 80 and 72 s, and TCP with 92 KB buffers and 92 KB writes
took 160 s.

Here the sender ``ra<i>`` and receiver ``rb<i>`` of each link configuration sit on a
switch of their own; configuration 0 is the wireless-like link (``--bw 100`` Mbit/s, about
what TCP gets from a 300 Mbit/s 802.11n link, ``--delay 3ms`` one way on the sender's
side so a round trip is about the seed's 6 ms per B = 1 datagram, ``--jitter 0.5ms``,
``--loss 0.1`` %), and one configuration per ``--delays`` x ``--losses`` pair follows at
the same rate. Points (``workloads.rudp_points``), each one transfer of the file:

- configuration 0: our protocol in the seed's mode for every ``--blocks`` value; TCP as
  the seed ran it (``iperf3 -w 92K -l 92K``) and with the kernel's buffers; the windowed
  mode; ``uftp`` (Debian's reliable multicast/unicast UDP tool); ``iperf3 -u``;
- every sweep configuration: the seed's mode at B = 32, windowed, TCP and ``uftp``.

    sudo /usr/bin/python3 topologies/rudp.py --scale smoke   # about a minute
    sudo /usr/bin/python3 topologies/rudp.py                 # 5 MB files
    sudo /usr/bin/python3 topologies/rudp.py --scale seed    # the seed's 190 MB
    /usr/bin/python3 topologies/rudp.py --backend sim --scale smoke   # no root, seconds

With ``--backend sim`` our sender and receiver run in the simulator (``repronet.sim``;
``nodes.rudp.sim_driver``) on the same topology, points and analysis; the iperf3 TCP/UDP
and uftp points need real hosts and are left out (said once, before anything runs).
"""

import os
import shutil
import sys

if __package__ in (None, ''):       # run as a script: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))

from mininet.topo import Topo  # noqa: E402

from repronet.emu.linkemu_params import LinkEmulationError, parse_time_ms  # noqa: E402
from repronet.run.options import UsageError, list_text as _csv, number_list as _list  # noqa: E402,E501
from repronet.run.runner import Experiment  # noqa: E402
from repronet.run.sweep import derive_seed  # noqa: E402
from workloads import rudp_points as rp  # noqa: E402
from workloads.transfer_points import FileSet  # noqa: E402
from workloads.scratch import default_workdir  # noqa: E402

MODES = ('seed', 'window', 'tcp92k', 'tcp', 'uftp', 'udp')
WORKDIR = default_workdir('rudp', '/var/tmp')     # a run not as root adds its uid
SWEEP_MODES = ('seed', 'window', 'tcp', 'uftp')
SIM_MODES = ('seed', 'window')     # the modes whose programs have simulate()
# seconds a uftp point takes beyond 1 s and the file's time on the link (its announce and
# close phases): the emulated smoke run of 2026-11-27 (CI's root tests,
# tests/test_rudp_experiment.py) took 8.2 s for each of its two uftp points of a 300 KB
# file, which the 2.5 s this was put at 3.6
UFTP_START_S = 7.0
SIM_SKIPS = ('rudp: --backend sim runs our protocol only and skips the iperf3 (TCP, UDP) and '
             'uftp points, which need real hosts')


class RudpTopo(Topo):
    """ra<i> - sw<i> - rb<i> per link configuration; delay, jitter and loss on ra's link."""

    def build(self, configs=()):
        """One pair per configuration (bw, delay, jitter, loss)."""
        for i, (bw, delay, jitter, loss) in enumerate(configs):
            sw = self.addSwitch('rs%d' % i)
            shaped = {'bw': bw, 'delay': delay}
            if jitter:
                shaped['jitter'] = jitter
            if loss:
                shaped['loss'] = loss
            self.addLink(self.addHost('ra%d' % i), sw, **shaped)
            self.addLink(self.addHost('rb%d' % i), sw, bw=bw)


class Rudp(Experiment):
    """Seed 004: transfer time against block size, beside TCP and uftp, and under loss."""

    name = 'rudp'
    analysis_module = 'analysis.rudp'
    targets_module = 'analysis.rudp'
    timed_parts = True
    backends = ('emu', 'sim')   # sim: our sender and receiver in virtual time
    scales = {
        'smoke': {'size': 300000, 'blocks': '1,32', 'delays': '5', 'losses': '1',
                  'repeat': 1},
        'default': {'size': 5000000, 'blocks': '1,2,4,8,16,32,64', 'delays': '1,5',
                    'losses': '0,0.1,1,5', 'repeat': 1},
        'seed': {'size': 190000000, 'blocks': '1,2,4,8,16,32,64', 'delays': '1,5,20',
                 'losses': '0,0.1,1,5', 'repeat': 3},
        'defaults': {'bw': 100.0, 'delay': '3ms', 'jitter': '0.5ms', 'loss': 0.1,
                     'window': 16, 'rate': None, 'timeout': 10.0, 'reorder_wait': 0.001,
                     'congestion_control': 'cubic',
                     'workdir': WORKDIR},
    }
    limits = {'size': (1, 1 << 34, 'bytes'), 'bw': (1, 1000, 'Mbit/s'),
              'loss': (0, 50, 'percent'), 'window': (1, 4096, 'a whole number'),
              'rate': (0.1, 1000, 'Mbit/s'), 'timeout': (0.5, 600, 'seconds'),
              'reorder_wait': (0, 1, 'seconds')}

    def add_arguments(self, parser):
        """Add the experiment's flags (defaults per --scale in the help)."""
        a = parser.add_argument
        a('--size', type=int, metavar='BYTES', help='file size (seed 190 MB)')
        a('--blocks', metavar='LIST', help='block sizes B of the seed-mode sweep')
        a('--bw', type=float, metavar='MBIT', help='rate of every link (default 100)')
        a('--delay', metavar='DELAY', help='one-way delay of the wireless-like link')
        a('--jitter', metavar='DELAY', help='its jitter (default 0.5ms)')
        a('--loss', type=float, metavar='PERCENT', help='its loss (default 0.1)')
        a('--delays', metavar='LIST', help='one-way ms of the sweep configurations')
        a('--losses', metavar='LIST', help='loss percent of the sweep configurations')
        a('--window', type=int, metavar='W', help='blocks in flight, windowed mode')
        a('--rate', type=float, metavar='MBIT', help='pacing of the windowed mode and '
          'uftp (default 0.95 x --bw: the payload rate a bw link can carry)')
        a('--timeout', type=float, metavar='S', help='silence before a transfer fails')
        a('--reorder-wait', type=float, metavar='S', help='our receiver waits this long '
          'after a round\'s last datagram before naming the missing ones, so what jitter '
          'reordered is not resent (default 0.001; 0: at once)')
        a('--congestion-control', choices=('cubic', 'reno', 'bbr', 'machine'),
          help='TCP congestion control of iperf3 (default cubic: loss-based, as TCP was '
          'in the seed; machine: the namespace default, bbr here)')
        a('--workdir', metavar='DIR',
          help='the file and received copies (default %s; with --backend sim %s-sim)' % (WORKDIR, WORKDIR))

    def check(self, params):
        """Reject parameters the experiment cannot run, with one sentence."""
        params.blocks = _csv(_list(params.blocks, 'blocks', int, 1, 4096))
        params.delays = _csv(_list(params.delays, 'delays', float, 0, 1000))
        params.losses = _csv(_list(params.losses, 'losses', float, 0, 50))
        for flag in ('delay', 'jitter'):
            try:
                parse_time_ms(getattr(params, flag), '--' + flag, 'rudp', high=1000.0)
            except LinkEmulationError as e:
                raise UsageError(str(e).split(': ', 1)[-1]) from None
        if params.rate is None:
            params.rate = round(0.95 * params.bw, 3)
        if not os.path.isabs(params.workdir):
            raise UsageError('--workdir must be an absolute path, not %r' % params.workdir)
        if getattr(params, 'backend', 'emu') == 'sim':
            print(SIM_SKIPS, flush=True)

    def _configs(self, params):
        """[(bw, delay, jitter, loss)]: the wireless-like link, then the sweep."""
        configs = [(params.bw, params.delay, params.jitter, params.loss)]
        configs += [(params.bw, '%gms' % d, None, l)
                    for d in _list(params.delays, 'delays', float, 0, 1000)
                    for l in _list(params.losses, 'losses', float, 0, 50)]
        return configs

    def topology(self, params):
        """Return one sender/receiver pair per configuration."""
        return RudpTopo(self._configs(params))

    def points(self, params):
        """Return the points: configuration 0's modes, then the sweep's, repetitions outermost
        (simulated: our protocol's modes only)."""
        values = []
        for i, (bw, delay, _jitter, loss) in enumerate(self._configs(params)):
            base = {'config': i, 'size': params.size, 'bw': bw, 'loss': loss,
                    'delay_ms': parse_time_ms(delay, '--delay', 'rudp'), 'rate': params.rate}
            if i == 0:
                values += [dict(base, mode='seed', block=b)
                           for b in _list(params.blocks, 'blocks', int, 1, 4096)]
                values += [dict(base, mode=m, block=32) for m in MODES[1:]]
            else:
                values += [dict(base, mode=m, block=32) for m in SWEEP_MODES]
        if getattr(params, 'backend', 'emu') == 'sim':
            values = [v for v in values if v['mode'] in SIM_MODES]
        points = []
        for repetition in range(params.repeat):
            for v in values:
                points.append(dict(v, point=len(points), repetition=repetition,
                                   seed=derive_seed(params.seed, v, repetition)))
        return points

    def estimate(self, params, point):
        """Rough seconds of a point: the file at the link rate, plus a round trip per
        block in the seed's mode, plus start-up (uftp's announcing and closing:
        UFTP_START_S)."""
        moved = point['size'] * 8 / (0.8 * point['bw'] * 1e6)
        if point['mode'] == 'seed':
            moved += point['size'] / (1472.0 * point['block']) * (
                2 * point['delay_ms'] / 1000.0 + 0.0015)
        return 1.0 + moved + (UFTP_START_S if point['mode'] == 'uftp' else 0)

    def disk(self, params):
        """The file and one received copy, under --workdir."""
        return [(params.workdir, 2 * params.size)]

    def setup(self, ctx):
        """Write the file; record the hosts."""
        os.makedirs(ctx.params.workdir, exist_ok=True)
        self.files = FileSet(os.path.join(ctx.params.workdir, 'files'), ctx.params.seed)
        self.files.make([ctx.params.size])
        names = [h for i in range(len(self._configs(ctx.params)))
                 for h in rp.hosts({'config': i})]
        ctx.results.update(hosts={h: ctx.host(h).IP() for h in names},
                           files={FileSet.name(s): h for s, h in self.files.sha256.items()})

    def finish(self, ctx):
        """Remove the file (data, not results)."""
        shutil.rmtree(self.files.folder, ignore_errors=True)

    def run_point(self, ctx, point):
        """Run one point (workloads.rudp_points); note what failed."""
        result = rp.Point(ctx, point, self.files).run()
        if result['problems']:
            self.operations_failed(point, '; '.join(result['problems']))
        return result


if __name__ == '__main__':
    sys.exit(Rudp().main())
