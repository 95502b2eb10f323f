"""Processing cost for the simulator, measured from an emulation run: a charge per callback
and per byte received, fitted on some points and then judged on the others.

``python -m analysis.sim_cost EMU_DIR SIM_DIR`` prints the ``--sim-cost`` flag that makes a
simulated dht8 run charge what the emulated one spent on processing. Both folders are dht8
runs of the same points, analysed (``tables/points.csv``): EMU_DIR emulated, SIM_DIR
simulated with no cost (the network alone).

The model (``repronet.sim.cpu``): every callback into a DHT node costs ``base`` seconds,
plus ``server_byte`` per byte an index server receives (a REGISTER of n names is about 21n
bytes, so this is the per-name cost) and ``client_byte`` per byte a client receives (a
download's file). Why these three: the one-client points of Part I show a search costing
about 0.76 ms more emulated than simulated whatever the server, a batched REGISTER costing
about 8.5 us more per name, and a download about 27 ns more per byte of file than its
search and GET alone; one figure per callback (the earlier model) cannot give all three.

How it is fitted: only the points run with one client (``--fit-clients``) of the parts in
``--fit-parts`` (default Part I). There nothing queues for a CPU (window 1: one request in
flight), so a client's emulated time is the simulated network time plus the sum of the
charges on its path. The charges on the path are counted from the emulated client's own log
(one ``op`` record per request: its kind, names, bytes), with the frame sizes of
``nodes.dht.codec``: a search or a REGISTER is 2 callbacks (the server receiving the request,
the client the reply), a download 3 more (the peer receiving GET, the client receiving the
file, one more per 64 KiB). The three figures minimise the squared relative error of the
per-operation time over those points, kept non-negative. Every other point (more clients,
other parts) is not used, so ``analysis.crosscheck`` on a run with the flag judges the model
there. The emulated time includes the delay daemons' own lateness in releasing held packets
(the emulator's error, not the system's, ~one hold per callback on the path): it is printed
beside the fit and left inside ``base``, so the flag predicts the emulation; the system alone
would be ``base`` minus that lateness.

Two charges are measured, not fitted (``--warmth``, the default; ``analysis.sim_warmth``):
a request whose index server or peer sat idle over 1 ms (cold) and the first request on a
connection cost more, as differences of medians between such requests inside the same
one-client points. They are charged to the serving kinds (``MODULE/cold``,
``MODULE/first``) and subtracted before the fit, so the per-byte figure no longer carries
the eight first requests Part I's batched REGISTERs make per 2,000 names (Part III's make
one). A one-client repetition the emulation marked CPU-bound is left out of the fit when
another repetition of its configuration was not.

Two background charges (``--background``, the default) take a core without delaying the
request they follow, for what the emulation's 2 cores run beside the nodes' request paths
(measured on Part I's batched registers with ``benchmarks/dht8_cpu_split.py`` and
``dht8_cpu_sched.py``): ``packet``, the delay daemons' CPU seconds (the manifest's
``link_holds``) over the packets the uncharged simulation delivered to hosts (its
manifest's ``cpu.packets_delivered``), and ``nodes.dht.client/exit``, a client process's
teardown after its summary record: the median over the emulated one-client points of the
runner's ``finished`` less the client's summary time, less half the runner's 5 ms poll.
Neither changes a one-client point (the other core is free), so the fit above stands.
"""

import argparse
import glob
import json
import math
import pathlib
import sys

import numpy as np
import pandas as pd

from analysis import crosscheck, inputs, sim_warmth
from nodes.dht import codec
from repronet.usage import UsageParser

KINDS = ('nodes.dht.server', 'nodes.dht.client', 'nodes.dht.peer')
SERVING = ('nodes.dht.server', 'nodes.dht.peer')    # charged per cold and first request
FEATURES = ('callbacks', 'server_bytes', 'client_bytes')
WARMTH = ('cold', 'first')          # measured by analysis.sim_warmth, not fitted
POLL_S = 0.005                      # the runner's wait_any poll (repronet.run.context)
TRAIN = 65536                       # the simulator's stream train: one callback per train
_DIGEST = b'\0' * 32


def _points(run_dir):
    path = pathlib.Path(run_dir) / 'tables' / 'points.csv'
    try:
        return pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise ValueError('%s: no readable tables/points.csv (%s); run "repronet analyse %s" '
                         'first' % (run_dir, e, run_dir)) from None


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
        backend = inputs.backend(manifest)
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


def op_features(rec):
    """(callbacks, bytes an index server receives, bytes a client receives) on the path of
    one emulated client's op record."""
    name, op = str(rec.get('name', '')), rec.get('op')
    search = codec.frame_size(codec.Search(0, name))
    found = codec.frame_size(codec.Found(0, name, ('10.0.0.1:8000',) * int(
        rec.get('holders') or 1)))
    if op == 'search':
        return 2, search, found
    if op in ('register', 'unregister'):
        names = (name,) * int(rec.get('files') or 1)     # the names of a set are one length
        return 2, codec.frame_size(codec.Register(0, '10.0.0.1:8000', names)), \
            codec.frame_size(codec.Ack(0, len(names)))
    if op == 'download':
        size = int(rec.get('bytes') or 0)
        file_bytes = codec.frame_size(codec.FileHeader(0, size, 0, _DIGEST)) + size
        return 5 + size // TRAIN, search, found + file_bytes
    return 0, 0, 0


def point_features(emu_dir, point):
    """Mean over the point's clients of the summed op_features of each client's log, then
    its cold and first requests (sim_warmth.counts)."""
    sums = []
    for path in sorted(glob.glob(str(pathlib.Path(emu_dir) / 'logs' /
                                     ('p%03d-client-*.jsonl' % int(point))))):
        total = np.zeros(len(FEATURES) + len(WARMTH))
        ops = []
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get('event') == 'op' and rec.get('ok'):
                    total[:len(FEATURES)] += op_features(rec)
                    ops.append(rec)
        total[len(FEATURES):] = sim_warmth.counts(ops)
        sums.append(total)
    if not sums:
        raise ValueError('%s has no client log of point %s (logs/p%03d-client-*.jsonl)'
                         % (emu_dir, point, int(point)))
    return np.mean(sums, axis=0)


def fit_rows(emu_dir, sim_dir, parts=('I',), clients=1):
    """One row per fitted configuration: emulated and simulated ms per operation (means over
    repetitions), operations per client and the mean features of a client. A repetition the
    emulation marked CPU-bound (``cpu_bound``: something else had the cores) is left out
    when another repetition of its configuration was not."""
    _check(emu_dir, sim_dir)
    emu, sim = _points(emu_dir), _points(sim_dir)
    key = ['part', 'variant', 'servers', 'concurrent_clients']
    pick = emu[emu['part'].astype(str).isin(parts) & (emu['concurrent_clients'] == clients)
               & emu['time_per_op_ms'].notna()]
    if pick.empty:
        raise ValueError('%s has no %d-client point in part(s) %s to fit on'
                         % (emu_dir, clients, ','.join(parts)))
    rows = []
    for k, group in pick.groupby(key, sort=True):
        if 'cpu_bound' in group and (group['cpu_bound'] != True).any():  # noqa: E712
            group = group[group['cpu_bound'] != True]                   # noqa: E712
        other = sim[(sim[key] == pd.Series(k, index=key)).all(axis=1)]['time_per_op_ms']
        if other.dropna().empty:
            raise ValueError('%s has no simulated point of %s' % (sim_dir, ' '.join(map(str, k))))
        feats = np.mean([point_features(emu_dir, p) for p in group['point']], axis=0)
        rows.append(dict(zip(key, k), emu_ms=group['time_per_op_ms'].mean(),
                         sim_ms=other.mean(), ops=group['ops_per_client'].mean(),
                         **dict(zip(FEATURES + WARMTH, feats))))
    return pd.DataFrame(rows)


def _per_op_ms(rows, columns):
    return rows[list(columns)].to_numpy(float) / rows[['ops']].to_numpy(float) * 1000.0


def fit(rows, warmth=(0.0, 0.0)):
    """(base, server_byte, client_byte) seconds, >= 0, minimising the squared relative error
    of sim + charges against emu over rows, given the (cold, first) charges measured."""
    x = _per_op_ms(rows, FEATURES)
    y = (rows['emu_ms'] - rows['sim_ms']).to_numpy(float) - _per_op_ms(rows, WARMTH) @ \
        np.asarray(warmth, float)
    w = 1.0 / rows['emu_ms'].to_numpy(float)
    active = list(range(len(FEATURES)))
    theta = np.zeros(len(FEATURES))
    while active:                   # drop a figure that comes out negative, refit the rest
        sol = np.linalg.lstsq(x[:, active] * w[:, None], y * w, rcond=None)[0]
        if (sol >= 0).all():
            theta[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    return tuple(float(v) for v in theta)


def predicted_ms(rows, theta, warmth=(0.0, 0.0)):
    """The linear prediction of each fitted row's ms per operation."""
    return rows['sim_ms'].to_numpy(float) + _per_op_ms(rows, FEATURES) @ np.asarray(theta) \
        + _per_op_ms(rows, WARMTH) @ np.asarray(warmth, float)


def _manifest(run_dir):
    return json.loads((pathlib.Path(run_dir) / 'manifest.json').read_text())


def packet_cost(emu_dir, sim_dir):
    """Seconds per packet delivered: the emulated delay daemons' CPU seconds over the
    packets the simulation of the same points delivered to hosts; None if either is
    missing (no daemons, or a simulated run from before packets were counted)."""
    daemons = ((_manifest(emu_dir).get('link_holds') or {}).get('daemons')) or []
    cpu_s = sum(d.get('cpu_s') or 0.0 for d in daemons)
    packets = (_manifest(sim_dir).get('cpu') or {}).get('packets_delivered')
    return cpu_s / packets if cpu_s and packets else None


def exit_cost(emu_dir, poll=POLL_S):
    """Seconds of a client's teardown: median over one-client points of the runner's
    'finished' less the client's summary time, less half the runner's poll; or None."""
    logs = pathlib.Path(emu_dir) / 'logs'
    try:
        lines = (logs / 'points.jsonl').read_text().splitlines()
    except OSError:
        return None
    lags = []
    for rec in map(json.loads, lines):
        point, result = rec.get('point') or {}, rec.get('result') or {}
        if rec.get('event') != 'point' or point.get('peers') != 1 or 'finished' not in result:
            continue
        ends = []
        for log in glob.glob(str(logs / ('p%03d-client-*.jsonl' % int(point['point'])))):
            with open(log) as f:
                ends += [json.loads(x)['t'] for x in f if '"summary"' in x]
        if len(ends) == 1:
            lags.append(result['finished'] - ends[0] - poll / 2)
    return float(np.median(lags)) if lags else None


def flag(theta, exit_s=None, packet_s=None, warmth=(0.0, 0.0)):
    """The --sim-cost value of (base, server_byte, client_byte), the (cold, first) charges
    of the serving kinds and the background charges."""
    base, server_byte, client_byte = theta
    items = ['%s=%.3g' % (kind, base) for kind in KINDS]
    items += ['%s/byte=%.3g' % (kind, v) for kind, v in
              (('nodes.dht.server', server_byte), ('nodes.dht.client', client_byte)) if v]
    items += ['%s/%s=%.3g' % (kind, what, v) for what, v in zip(WARMTH, warmth) if v
              for kind in SERVING]
    if exit_s:
        items.append('nodes.dht.client/exit=%.3g' % exit_s)
    if packet_s:
        items.append('packet=%.3g' % packet_s)
    return ','.join(items)


def main(argv=None):
    p = UsageParser(tool='analysis.sim_cost', prog='python -m analysis.sim_cost',
                    description=__doc__.split('\n')[0])
    p.add_argument('emu_dir', help='an emulated dht8 results folder (analysed)')
    p.add_argument('sim_dir', help='a simulated dht8 results folder of the same points, '
                   'run without --sim-cost')
    p.add_argument('--fit-parts', default='I', help='parts whose points are fitted '
                   '(default I; the others are left to judge the model)')
    p.add_argument('--fit-clients', type=int, default=1, help='fit the points with this '
                   'many clients (default 1: nothing queues for a CPU)')
    p.add_argument('--background', action=argparse.BooleanOptionalAction, default=True,
                   help='add the per-packet and client-exit charges (default on)')
    p.add_argument('--warmth', action=argparse.BooleanOptionalAction, default=True,
                   help='measure and charge the cold and first requests at index servers '
                   'and peers (analysis.sim_warmth; default on)')
    args = p.parse_args(argv)
    parts = tuple(filter(None, args.fit_parts.split(',')))
    if not parts or args.fit_clients < 1:
        p.error('--fit-parts names at least one part and --fit-clients is at least 1')
    try:
        rows = fit_rows(args.emu_dir, args.sim_dir, parts, args.fit_clients)
    except ValueError as e:
        print('sim_cost: %s' % e, file=sys.stderr)
        return 1
    warmth = (0.0, 0.0)
    if args.warmth:
        cold_s, first_s, _ = sim_warmth.measure(args.emu_dir, parts)
        warmth = (cold_s or 0.0, first_s or 0.0)
        print('measured on the one-client one-name requests of part %s: a cold request %s, '
              'a first request on its connection %s more' % (
                  ','.join(parts), 'not measured' if cold_s is None else
                  '%.1f us' % (cold_s * 1e6), 'not measured' if first_s is None else
                  '%.1f us' % (first_s * 1e6)))
    theta = fit(rows, warmth)
    if not any(theta):
        print('sim_cost: the emulated points are not slower than the simulated ones: no '
              'processing cost to charge', file=sys.stderr)
        return 1
    rows['fitted_ms'] = predicted_ms(rows, theta, warmth)
    print('fitted on %d configuration(s) (part %s, %d client(s)):'
          % (len(rows), ','.join(parts), args.fit_clients))
    for r in rows.itertuples():
        print('  %-4s %-28s emu %8.4f ms/op, sim %8.4f, fitted %8.4f (%.2f of emu)' % (
            r.part, r.variant, r.emu_ms, r.sim_ms, r.fitted_ms, r.fitted_ms / r.emu_ms))
    print('per callback %.1f us, per byte an index server receives %.1f ns, per byte a '
          'client receives %.1f ns' % (theta[0] * 1e6, theta[1] * 1e9, theta[2] * 1e9))
    late = crosscheck.link_lateness_us(args.emu_dir)
    if late is not None and math.isfinite(late):
        print('the delay daemons released held packets %.0f us late on average (their own '
              'stats over the whole run): the emulator\'s error, left inside the %.0f us per '
              'callback' % (late, theta[0] * 1e6))
    exit_s = packet_s = None
    if args.background:
        exit_s, packet_s = exit_cost(args.emu_dir), packet_cost(args.emu_dir, args.sim_dir)
        print('background: a client\'s exit %s, per packet delivered %s' % (
            'not measured' if exit_s is None else '%.1f ms' % (exit_s * 1e3),
            'not measured (no daemons, or the simulated run predates packet counts)'
            if packet_s is None else '%.1f us' % (packet_s * 1e6)))
    print('--sim-cost %s' % flag(theta, exit_s, packet_s, warmth))
    return 0


if __name__ == '__main__':
    sys.exit(main())
