"""Per-callback processing cost for the simulator, measured from an emulation run.

``python -m analysis.sim_cost EMU_DIR SIM_DIR`` prints the ``--sim-cost`` flag that makes a
simulated dht8 run charge what the emulated one spent on processing. Both folders are dht8
runs of the same points, analysed (``tables/points.csv``): EMU_DIR emulated, SIM_DIR
simulated with no cost (the network alone).

How: in the one-client search points of Part I (one request in flight, so nothing queues
for a CPU), the emulated time per operation is the path's round trip plus processing; the
simulated one is the round trip alone, so the difference is the processing of one search.
A search is two callbacks (the index server receiving the request, the client receiving
the reply), so each callback costs half of it, charged alike to the index server, the
client and the peer (all three are one-threaded asyncio programs over the same frames).
The same figure is then charged to every other operation: whether a batched REGISTER of a
thousand names or a download costs the same per callback is exactly what the
cross-check (``analysis.crosscheck``) then shows. Kernel and delay-daemon work per packet
is inside the figure, not modelled apart.
"""

import argparse
import json
import math
import pathlib
import sys

import pandas as pd

from analysis import crosscheck

KINDS = ('nodes.dht.server', 'nodes.dht.client', 'nodes.dht.peer')
CALLBACKS_PER_SEARCH = 2


def _search_ms(run_dir):
    """Mean time per operation (ms) of the one-client Part I search points of a run."""
    path = pathlib.Path(run_dir) / 'tables' / 'points.csv'
    try:
        points = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise ValueError('%s: no readable tables/points.csv (%s); run "repronet analyse %s" '
                         'first' % (run_dir, e, run_dir)) from None
    rows = points[(points['part'] == 'I') & (points['variant'] == 'search')
                  & (points['concurrent_clients'] == 1)]['time_per_op_ms'].dropna()
    if rows.empty:
        raise ValueError('%s has no one-client Part I search point (run dht8 with --parts I)'
                         % run_dir)
    return float(rows.mean()), len(rows)


def _check(emu_dir, sim_dir):
    """Refuse (ValueError, one sentence) unless EMU_DIR is an emulated dht8 run and SIM_DIR
    a simulated one charged no processing cost."""
    for run_dir, want in ((emu_dir, 'emu'), (sim_dir, 'sim')):
        try:
            manifest = json.loads((pathlib.Path(run_dir) / 'manifest.json').read_text())
        except (OSError, ValueError):
            raise ValueError('%s is not a results folder (no readable manifest.json)'
                             % run_dir) from None
        params = manifest.get('params') or {}
        backend = crosscheck.backend(manifest)
        if manifest.get('experiment') != 'dht8':
            raise ValueError('%s is a %s run; sim_cost reads dht8 runs'
                             % (run_dir, manifest.get('experiment')))
        if backend != want:
            raise ValueError('%s is %s run; the %s folder must be %s one' % (
                run_dir, 'an emulated' if backend == 'emu' else 'a simulated',
                'first' if want == 'emu' else 'second',
                'an emulated' if want == 'emu' else 'a simulated'))
        if want == 'sim' and params.get('sim_costs'):
            raise ValueError('%s was run with --sim-cost; the cost is measured against a '
                             'simulated run without one' % run_dir)


def measure(emu_dir, sim_dir):
    """Return (seconds per callback, emulated ms, simulated ms, points used)."""
    _check(emu_dir, sim_dir)
    emu, n = _search_ms(emu_dir)
    sim, _ = _search_ms(sim_dir)
    per_op = (emu - sim) / 1000.0
    if not math.isfinite(per_op) or per_op <= 0:
        raise ValueError('the emulated search (%.4f ms) is not slower than the simulated one '
                         '(%.4f ms): no processing cost to charge' % (emu, sim))
    return per_op / CALLBACKS_PER_SEARCH, emu, sim, n


def flag(seconds):
    """The --sim-cost value charging seconds per callback to every DHT node kind."""
    return ','.join('%s=%.3g' % (kind, seconds) for kind in KINDS)


def main(argv=None):
    p = argparse.ArgumentParser(prog='python -m analysis.sim_cost',
                                description=__doc__.split('\n')[0])
    p.add_argument('emu_dir', help='an emulated dht8 results folder (analysed)')
    p.add_argument('sim_dir', help='a simulated dht8 results folder of the same points, '
                   'run without --sim-cost')
    args = p.parse_args(argv)
    try:
        seconds, emu, sim, n = measure(args.emu_dir, args.sim_dir)
    except ValueError as e:
        print('sim_cost: %s' % e, file=sys.stderr)
        return 1
    print('one-client search: emulated %.4f ms, simulated %.4f ms per operation (%d point(s)):'
          ' %.1f us of processing per callback' % (emu, sim, n, seconds * 1e6))
    print('--sim-cost %s' % flag(seconds))
    return 0


if __name__ == '__main__':
    sys.exit(main())
