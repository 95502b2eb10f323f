#!/usr/bin/python3
"""TCP file transfer: data rate against file size, packet size and load (seed 002).

The seed timed a TCP file transfer between lab workstations and reported the sender's
rate T_x (bytes over first..last write) and the receiver's R_x (first..last read) in
bits per microsecond (= Mbit/s): against file size at 1,000-byte packets (Table 1),
against packet size for a 50 MB file (Table 2), with one to five simultaneous
connections (Table 3), and iperf with one to five streams (Table 4).

Here the server ``srv`` and clients ``c1..cN`` sit on switch ``s1``, every link
``--bw`` Mbit/s with ``--delay`` and ``--loss`` (default 1000 Mbit/s and 0.05 ms: a
switched gigabit LAN, like the seed's lab). Our node (``nodes.transfer``) writes the
file in ``--packet``-byte writes with Nagle off (``--nodelay``) and, with ``--segment``
(default), clamps the MSS so every TCP segment carries exactly one packet's payload.
Every point runs ``iperf3 -R`` between the same hosts with the same sizes beside ours.

Points (``workloads.transfer_points``):
- ``size`` (Table 1): one file per ``--sizes`` value at ``--packet`` bytes;
- ``packet`` (Table 2): a ``--packet-size-file`` file at each ``--packets`` value;
- ``load`` (Tables 3, 4): 1..``--conns`` clients at once, ``--load-size`` each, and
  ``iperf3 -P N``;
- ``path``: what the seed could not vary: one component ``pa<i> - sp<i> - pb<i>`` per
  (``--delays`` x ``--losses``) pair at ``--path-bw``, the file sized to take about
  ``--path-seconds`` at the smaller of the link rate and the Mathis bound;
- ``capture``: a ``--capture-size`` transfer per ``--capture-packets`` value between
  ``ka`` and ``kb`` (segmentation offloads off) with a scapy capture on ``ka``: are the
  segments on the wire one packet each?

    sudo /usr/bin/python3 topologies/transfer.py --scale smoke   # about 15 s
    sudo /usr/bin/python3 topologies/transfer.py                 # about 8 minutes
    sudo /usr/bin/python3 topologies/transfer.py --scale seed    # the seed's sizes
    /usr/bin/python3 topologies/transfer.py --backend sim --scale smoke   # no root, seconds

With ``--backend sim`` our server and clients run in the simulator (``repronet.sim``;
``nodes/transfer/sim_server.py``, ``sim_client.py``) on the same topology, files, points
and analysis: size, packet, load and path points. iperf3 is skipped (no simulated twin),
and so are the capture points (a scapy capture needs a real interface) and the cold size
points (no disk is modelled: a cold read would equal the warm one); said once, before
anything runs. The stream model has no congestion control, so under loss a simulated
transfer loses only its retransmissions' time, not the halved windows Mathis's bound counts.
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
from workloads import transfer_points as tp  # noqa: E402
from workloads.scratch import default_workdir  # noqa: E402

KB, MB = 1000, 1000 * 1000     # the seed's units (its 10 MB file is 10^7 bytes)
SIM_SKIPS = ('transfer: --backend sim runs our server and clients only: it skips iperf3 (no '
             'simulated twin), the capture points (scapy needs a real interface) and the cold '
             'size points (no disk is modelled), and models no congestion control')
WORKDIR = default_workdir('transfer', '/var/tmp')     # a run not as root adds its uid
SEED_SIZES = [1 * KB, 100 * KB, 500 * KB] + [s * MB for s in (10, 20, 30, 40, 50, 60, 70)]


class TransferTopo(Topo):
    """srv + c1..cN on s1; pa<i> - sp<i> - pb<i> per path config; ka - ks - kb."""

    def build(self, conns=5, bw=1000.0, delay='0.05ms', loss=0.0, paths=(),
              path_bw=100.0, capture=True):
        """Add the main component, one component per (delay, loss) and the capture pair."""
        link = {'bw': bw, 'delay': delay} if bw else {'delay': delay}
        if loss:
            link['loss'] = loss
        s1 = self.addSwitch('s1')
        for name in ['srv'] + ['c%d' % i for i in range(1, conns + 1)]:
            self.addLink(self.addHost(name), s1, **link)
        for i, (delay_ms, loss_pc) in enumerate(paths, 1):
            sw = self.addSwitch('sp%d' % i)
            shaped = {'bw': path_bw, 'delay': '%gms' % delay_ms}
            if loss_pc:
                shaped['loss'] = loss_pc
            self.addLink(self.addHost('pa%d' % i), sw, **shaped)
            self.addLink(self.addHost('pb%d' % i), sw, bw=path_bw)
        if capture:
            ks = self.addSwitch('ks1')
            for name in ('ka', 'kb'):
                self.addLink(self.addHost(name), ks, **link)


class Transfer(Experiment):
    """Seed 002: T_x and R_x against file size, packet size and load, beside iperf3."""

    name = 'transfer'
    analysis_module = 'analysis.transfer'
    targets_module = 'analysis.transfer_report'
    timed_parts = True
    backends = ('emu', 'sim')   # sim: our server and clients in virtual time
    scales = {
        'smoke': {'sizes': '1000,100000,2000000', 'packets': '100,1000,1400',
                  'packet_size_file': 2 * MB, 'conns': 2, 'load_size': 2 * MB,
                  'delays': '1', 'losses': '0,1', 'path_seconds': 1.0,
                  'capture_packets': '500,1000', 'iperf_seconds': 1.0, 'repeat': 1},
        'default': {'sizes': '1000,100000,500000,10000000,20000000,50000000',
                    'packets': '30,100,300,500,1000,1400', 'packet_size_file': 10 * MB,
                    'conns': 5, 'load_size': 10 * MB, 'delays': '0.1,1,10,50',
                    'losses': '0,0.1,1,2', 'path_seconds': 3.0,
                    'capture_packets': '100,500,1000,1400', 'iperf_seconds': 3.0,
                    'repeat': 3},
        'seed': {'sizes': _csv(SEED_SIZES),
                 'packets': '30,100,300,500,700,900,1100,1300,1400',
                 'packet_size_file': 50 * MB, 'conns': 5, 'load_size': 50 * MB,
                 'delays': '0.1,0.5,1,5,10,20,50', 'losses': '0,0.1,0.5,1,2',
                 'path_seconds': 5.0, 'capture_packets': '100,500,1000,1400',
                 'iperf_seconds': 5.0, 'repeat': 5},
        'defaults': {'bw': 1000.0, 'delay': '0.05ms', 'loss': 0.0, 'packet': 1000,
                     'path_bw': 100.0, 'capture_size': 256 * 1024, 'nodelay': True,
                     'segment': True, 'dropcache': 'both', 'congestion_control': 'cubic',
                     'timeout': 30.0,
                     'workdir': WORKDIR},
    }
    limits = {'bw': (0, 10000, 'Mbit/s (0: no shaping)'), 'loss': (0, 50, 'percent'),
              'packet': (1, 4 << 20, 'bytes'), 'packet_size_file': (1, 1 << 31, 'bytes'),
              'conns': (1, 16, 'a whole number'), 'load_size': (1, 1 << 31, 'bytes'),
              'path_bw': (1, 10000, 'Mbit/s'), 'path_seconds': (0.1, 600, 'seconds'),
              'capture_size': (1024, 64 << 20, 'bytes'),
              'iperf_seconds': (1, 600, 'seconds'), 'timeout': (1, 3600, 'seconds')}

    def add_arguments(self, parser):
        """Add the experiment's flags (defaults per --scale in the help)."""
        a = parser.add_argument
        a('--bw', type=float, metavar='MBIT', help='rate of every main link (default 1000; '
          '0: unshaped)')
        a('--delay', metavar='DELAY', help='one-way delay of every main link (default 0.05ms)')
        a('--loss', type=float, metavar='PERCENT', help='loss on every main link (default 0)')
        a('--sizes', metavar='LIST', help='file sizes in bytes of the size points')
        a('--packet', type=int, metavar='BYTES', help='write size of size points (default 1000)')
        a('--packets', metavar='LIST', help='write sizes of the packet points')
        a('--packet-size-file', type=int, metavar='BYTES', help='file of the packet points')
        a('--conns', type=int, metavar='N', help='load points 1..N connections (default 5)')
        a('--load-size', type=int, metavar='BYTES', help='file of the load points')
        a('--delays', metavar='LIST', help='one-way ms of the path points (0.1 to 50)')
        a('--losses', metavar='LIST', help='loss percent of the path points (0 to 2)')
        a('--path-bw', type=float, metavar='MBIT', help='rate of the path links (default 100)')
        a('--path-seconds', type=float, metavar='S', help='target length of a path transfer')
        a('--capture-packets', metavar='LIST', help='write sizes of the capture points')
        a('--capture-size', type=int, metavar='BYTES', help='file of the capture points')
        a('--iperf-seconds', type=float, metavar='S', help='iperf3 -t of load/path points')
        a('--nodelay', action='store_true', default=None, help='TCP_NODELAY on (default)')
        a('--no-nodelay', dest='nodelay', action='store_false', help='Nagle on')
        a('--segment', action='store_true', default=None,
          help='clamp the MSS so a segment carries one packet (default)')
        a('--no-segment', dest='segment', action='store_false', help='kernel-chosen MSS')
        a('--dropcache', choices=('off', 'on', 'both'),
          help='the server evicts the file from the page cache before reading it: never, '
          'always, or (default) size points both ways, so the seed\'s disk explanation is '
          'tested: warm and cold reads side by side')
        a('--congestion-control', choices=('cubic', 'reno', 'bbr', 'machine'),
          help='TCP congestion control of every sending socket, ours and iperf3\'s '
          '(default cubic, the Linux default; machine: the namespace default)')
        a('--timeout', type=float, metavar='S', help='a transfer stalled this long fails')
        a('--workdir', metavar='DIR', help='files and received copies (default '
          '%s: on disk, so --dropcache means a disk read; with --backend sim %s-sim)' % (WORKDIR, WORKDIR))

    def check(self, params):
        """Reject parameters the experiment cannot run, with one sentence."""
        params.sizes = _csv(_list(params.sizes, 'sizes', int, 1, 1 << 31))
        params.packets = _csv(_list(params.packets, 'packets', int, 1, 4 << 20))
        params.delays = _csv(_list(params.delays, 'delays', float, 0, 1000))
        params.losses = _csv(_list(params.losses, 'losses', float, 0, 50))
        params.capture_packets = _csv(_list(params.capture_packets, 'capture-packets',
                                            int, 1, 65000))
        try:
            parse_time_ms(params.delay, '--delay', 'transfer', high=1000.0)
        except LinkEmulationError as e:
            raise UsageError(str(e).split(': ', 1)[-1]) from None
        if not os.path.isabs(params.workdir):
            raise UsageError('--workdir must be an absolute path, not %r' % params.workdir)
        if getattr(params, 'backend', 'emu') == 'sim':
            if params.dropcache == 'on':
                raise UsageError('--dropcache on needs a disk, which the simulator does not '
                                 'model; give --dropcache off or both (both: warm reads only)')
            print(SIM_SKIPS, flush=True)

    def _paths(self, params):
        """Return the (delay_ms, loss) pairs of the path sweep."""
        return [(d, l) for d in _list(params.delays, 'delays', float, 0, 1000)
                for l in _list(params.losses, 'losses', float, 0, 50)]

    def topology(self, params):
        """Return the main, path and capture components."""
        return TransferTopo(params.conns, params.bw, params.delay, params.loss,
                            self._paths(params), params.path_bw)

    def points(self, params):
        """Return size, packet, load, path and capture points, repetition outermost
        (simulated: no capture points, warm size points only)."""
        ints = lambda flag: _list(getattr(params, flag), flag, int, 1, 1 << 31)   # noqa: E731
        largest = max(ints('sizes') + [params.load_size, params.packet_size_file])
        sim = getattr(params, 'backend', 'emu') == 'sim'
        colds = {'off': [False], 'on': [True], 'both': [False, True]}[params.dropcache]
        colds = [False] if sim else colds
        values = [{'kind': 'size', 'size': s, 'packet': params.packet, 'cold': cold}
                  for s in ints('sizes') for cold in colds]
        values += [{'kind': 'packet', 'size': params.packet_size_file, 'packet': p}
                   for p in ints('packets')]
        values += [{'kind': 'load', 'size': params.load_size, 'packet': params.packet,
                    'conns': n} for n in range(1, params.conns + 1)]
        values += [{'kind': 'path', 'delay_ms': d, 'loss': l, 'bw': params.path_bw,
                    'config': i, 'packet': params.packet,
                    'size': tp.path_size(params.path_bw, d, l, params.path_seconds,
                                         max(largest, tp.MIN_PATH_SIZE))}
                   for i, (d, l) in enumerate(self._paths(params), 1)]
        values += [{'kind': 'capture', 'size': params.capture_size, 'packet': p}
                   for p in ints('capture_packets') if not sim]
        points = []
        for repetition in range(params.repeat):
            for v in values:
                points.append(dict(v, point=len(points), repetition=repetition,
                                   seed=derive_seed(params.seed, v, repetition)))
        return points

    def estimate(self, params, point):
        """Return a rough length of one point in seconds (weights the ETA): fitted to the
        default run at 01dc572 (start-up about 0.2 s; ours and iperf3 at about 0.9 of the
        link, a lossy path at about 0.6 of its bound, then iperf3's --iperf-seconds)."""
        bw = point.get('bw') or params.bw or 1000.0
        moved = point['size'] * point.get('conns', 1) * 8 / (0.9 * bw * 1e6)
        if point['kind'] == 'path':
            bound = tp.mathis_mbps(point['delay_ms'], point['loss']) or bw
            return 0.5 + point['size'] * 8 / (0.6 * min(bw, bound) * 1e6) + \
                params.iperf_seconds
        if point['kind'] == 'load':
            return 0.3 + moved + params.iperf_seconds
        if point['kind'] == 'capture' or point.get('cold'):
            return 0.2 + moved
        return 0.2 + 2 * moved

    def disk(self, params):
        """The generated files and the received copies, under --workdir."""
        sizes = {p['size'] for p in self.points(params)}
        biggest = max(p['size'] * p.get('conns', 1) for p in self.points(params))
        return [(params.workdir, sum(sizes) + biggest)]

    def setup(self, ctx):
        """Write the file set; record the hosts, TCP settings and the workdir's file system."""
        from nodes.transfer.core import mss_for_payload
        self.files, self.mss = tp.setup(ctx, self.points(ctx.params), mss_for_payload)

    def finish(self, ctx):
        """Remove the generated files (data, not results; the next run writes them anew)."""
        shutil.rmtree(self.files.folder, ignore_errors=True)

    def run_point(self, ctx, point):
        """Run one point (workloads.transfer_points); note what failed."""
        result = tp.Point(ctx, point, self.files, self.mss.get(point['packet'])).run()
        if result['problems']:
            self.operations_failed(point, '; '.join(result['problems']))
        return result


if __name__ == '__main__':
    sys.exit(Transfer().main())
