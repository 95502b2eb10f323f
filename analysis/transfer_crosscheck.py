"""The transfer experiment simulated against emulated, per point:
``python -m analysis.transfer_crosscheck EMU_DIR SIM_DIR [--csv FILE]``.

Reads only each run's ``manifest.json`` and ``tables/points.csv`` (``analysis.transfer``
wrote them), as ``analysis.crosscheck`` does for dht8 and fidelity, and prints one markdown
row per configuration (kind, file size, packet, connections, path delay and loss; the
emulation's cold reads are left out, the simulator has no disk): the emulated rate as the
mean over repetitions with its range, the simulated one, sim / emu, whether that is within
issue 13's 15 %, how many emulated repetitions were CPU-bound, and iperf3's rate in the same
emulated points beside it (what the emulated network carries with a C sender). Rates: R_x
(first to last read), T_x (first to last write) and the request-to-last-byte rate; for load
points the aggregate over all connections. The ``why`` column gives the reasons that can be
seen mechanically; docs/simulation.md, "transfer in the simulator", says what they mean.
"""

import pathlib
import sys

import pandas as pd

from analysis import crosscheck, inputs
from analysis.crosscheck_tables import beyond_spread, groups, ratio, stats, within
from analysis.tables import cell, nan
from repronet.usage import UsageParser

KEY = ('kind', 'size', 'packet', 'conns', 'delay_ms', 'loss')
MEASURES = ('rx_mbps', 'tx_mbps', 'total_mbps', 'aggregate_mbps')
SHOWN = ('kind', 'size', 'packet', 'conns', 'delay_ms', 'loss', 'emu_repeats',
         'emu_total_mbps', 'emu_total_min', 'emu_total_max', 'sim_total_mbps',
         'total_sim_over_emu', 'within_15pc', 'emu_rx_mbps', 'sim_rx_mbps', 'rx_sim_over_emu',
         'emu_tx_mbps', 'sim_tx_mbps', 'emu_iperf_mbps', 'sim_over_iperf', 'emu_cpu_bound',
         'why')


def _points(run_dir, want, option):
    """points.csv of a run of backend want (warm reads only), or CrosscheckError."""
    try:
        manifest = inputs.read_manifest(run_dir)
    except inputs.InputError as e:
        raise crosscheck.CrosscheckError(str(e)) from None
    if manifest.get('experiment') != 'transfer':
        raise crosscheck.CrosscheckError('%s is a %s run, not a transfer run' % (
            run_dir, manifest.get('experiment')))
    found = inputs.backend(manifest)
    if found != want:
        raise crosscheck.CrosscheckError('%s is %s, but %s must be %s' % (
            run_dir, crosscheck.BACKEND_NAMES[found], option, crosscheck.BACKEND_NAMES[want]))
    path = pathlib.Path(run_dir) / 'tables' / 'points.csv'
    if not path.exists():
        raise crosscheck.CrosscheckError('%s has no tables/points.csv; run "repronet analyse '
                                         '%s" first' % (run_dir, run_dir))
    table = pd.read_csv(path)
    return table[table['cold'].astype(str) != 'True'] if 'cold' in table else table


def _why(key, emu, sim, bound, r):
    """The reasons a row differs that the tables show, as one line."""
    kind, size, packet, _conns, _delay, loss = key
    reasons = []
    if bound:
        reasons.append('emulation CPU-bound in %d repetition(s): it measured the machine' % bound)
    if kind == 'path' and loss:
        reasons.append('loss: the stream model has no congestion control, a loss costs only '
                       'its retransmission')
    if nan(sim['tx_mbps']) and not nan(emu['tx_mbps']):
        reasons.append('the file fits the simulated send buffer: every write at one instant, '
                       'no T_x')
    small = size is not None and size <= 100000
    if not small and not nan(r) and r > 1.15 and not nan(emu['iperf']) and \
            emu['iperf'] > emu['total_mbps'] * 1.15:
        reasons.append('iperf3 (C) carried %.0f Mbit/s in the same emulated point: the '
                       'Python sender, not the network, set the emulated rate' % emu['iperf'])
    if small:
        reasons.append('small file: a few round trips and the start-up are all of it')
    return '; '.join(reasons)


def table(emu_points, sim_points):
    """One row per configuration both runs have (simulated-only or emulated-only ones are
    left out: capture points, points of other sweeps)."""
    emu_g, sim_g = groups(emu_points, KEY), groups(sim_points, KEY)
    rows = []
    for key in [k for k in emu_g if k in sim_g]:         # in the emulated run's point order
        e, s = emu_g[key], sim_g[key]
        emu = {m: stats(e, m)[0] for m in MEASURES}
        sim = {m: stats(s, m)[0] for m in MEASURES}
        total = 'aggregate_mbps' if key[0] == 'load' else 'total_mbps'
        _mean, _sd, low, high, n = stats(e, total)
        emu['iperf'] = stats(e, 'iperf_mbps')[0]
        bound = sum(str(v) in ('True', '1', '1.0') for v in e.get('cpu_bound', []))
        r = ratio(sim[total], emu[total])
        rows.append(dict(zip(KEY, key), emu_repeats=len(e), emu_total_mbps=emu[total],
                         emu_total_min=low, emu_total_max=high, sim_total_mbps=sim[total],
                         total_sim_over_emu=r, within_15pc=within(r),
                         beyond_emu_spread=beyond_spread(sim[total], low, high, n),
                         emu_rx_mbps=emu['rx_mbps'], sim_rx_mbps=sim['rx_mbps'],
                         rx_sim_over_emu=ratio(sim['rx_mbps'], emu['rx_mbps']),
                         emu_tx_mbps=emu['tx_mbps'], sim_tx_mbps=sim['tx_mbps'],
                         emu_iperf_mbps=emu['iperf'],
                         sim_over_iperf=ratio(sim[total], emu['iperf']),
                         emu_cpu_bound=bound, why=_why(key, emu, sim, bound, r)))
    return pd.DataFrame(rows)


def markdown(df):
    """The table as markdown, numbers with 3 significant digits."""
    cols = [c for c in SHOWN if c in df.columns]
    lines = ['| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)]
    whole = ('size', 'packet', 'conns', 'emu_repeats', 'emu_cpu_bound')
    for row in df[cols].itertuples(index=False):
        lines.append('| ' + ' | '.join(
            '' if nan(v) else v if isinstance(v, str) else ('no', 'yes')[v]
            if isinstance(v, bool) else '%d' % v if c in whole
            else cell(v, '%.3g') for c, v in zip(cols, row)) + ' |')
    return '\n'.join(lines)


def main(argv=None):
    """Print the table (and write it as CSV); exit 2 with one sentence on bad folders."""
    p = UsageParser(tool='analysis.transfer_crosscheck',
                    prog='python -m analysis.transfer_crosscheck',
                    description='Transfer: simulated against emulated, per point.')
    p.add_argument('emu_dir')
    p.add_argument('sim_dir')
    p.add_argument('--csv', metavar='FILE', help='also write the table as CSV')
    args = p.parse_args(argv)
    try:
        df = table(_points(args.emu_dir, 'emu', 'EMU_DIR'),
                   _points(args.sim_dir, 'sim', 'SIM_DIR'))
    except crosscheck.CrosscheckError as e:
        print('transfer_crosscheck: %s' % e, file=sys.stderr)
        return 2
    if df.empty:
        print('transfer_crosscheck: the two runs share no configuration', file=sys.stderr)
        return 2
    if args.csv:
        df.to_csv(args.csv, index=False, float_format='%.6g')
    cpu = inputs.as_dict(inputs.read_manifest(args.emu_dir).get('cpu'))
    print('emulated run: CPU mean busy %s, saturated %s (its CPU monitor)\n' % (
        cell(cpu.get('mean'), '%.2f'), cpu.get('saturated')))
    print(markdown(df))
    return 0


if __name__ == '__main__':
    sys.exit(main())
