"""Analysis of the link-emulation fidelity benchmark: configured vs measured, and targets.

Reads only ``manifest.json`` and ``logs/`` of a run of ``topologies/fidelity.py`` and writes:

- ``tables/rtt.csv``: per delay/jitter point: configured RTT (twice the one-way delay) and
  RTT std, the probe's median/mean/std/p99 RTT, one-way and echo reordering counts;
- ``tables/ping.csv``: ``ping`` (kernel receive timestamp) vs ``ping -U`` (user clock);
- ``tables/loss.csv``: per loss point: probes sent, one-way received, measured loss, the 99 %
  binomial interval of the lost count around the configured rate. Sends the sender's kernel
  refused (``send_failed``: EAGAIN, ENOBUFS, ...) never reached the link, so they are neither
  sent nor lost; the tables and the report show how many there were;
- ``tables/goodput.csv``: TCP and UDP goodput per configured rate and delay, with the ratio,
  and the median RTT of probes sent during the TCP transfer (configured delay + queueing);
- ``tables/cpu.csv``: per point: seconds, CPU seconds of the linkdelay daemons, machine busy;
- ``tables/targets.csv`` (``analysis.targets``' columns) and ``report.md``: each target of
  issue 3 with the measured figure and ratio, PASS/MISS in the report; figures ``rtt``,
  ``loss``, ``goodput`` (configured vs measured),
  ``rtt_ratio``, ``tcp_ratio`` (measured / configured per setting), ``cpu``.

A run of the simulation backend (``--backend sim``) gives the same tables: TCP goodput then
comes from ``workloads.bulk`` (the receiver's bytes over its seconds), and what exists only
on real hosts (ping, ``ping -U``, iperf3's UDP test, the daemons' CPU and the machine's busy
share) is reported as "not measured (simulation)", never as zeros.

Targets: median RTT within 3 % + 0.2 ms of the configured RTT at every delay; one-way loss
inside the 99 % binomial interval; TCP goodput >= 90 % of bw for 10 and 100 Mbit/s with 10 ms,
>= 80 % for 500 Mbit/s with 1 ms; no reordering without jitter; RTT std within 20 % of the
configured jitter's (netem's uniform jitter per link: variance jitter^2/3 per link direction).
"""

import json
import math
import pathlib
import re

import numpy as np
import pandas as pd

from analysis import figures, inputs, machine, targets as shared
from analysis.inputs import simulated
from analysis.tables import write_tables
from repronet.run.results import read_jsonl, read_manifest, read_points

FLOAT = '%.4f'
NOT_SIMULATED = 'not measured (simulation)'
_PING_RTT = re.compile(r'= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms')


def _base(point):
    """Columns every table starts with."""
    return {'point': point['point'], 'repetition': point['repetition'], 'kind': point['kind'],
            'shape': point['shape']}


def sent_counts(summary):
    """(datagrams sent, sends that failed) from a probe summary.

    Probes before ``send_failed`` existed counted a failed send in ``sent`` too (and in
    ``send_errors``); those are taken out here, since they never reached the link.
    """
    if 'send_failed' in summary:
        return summary['sent'], summary['send_failed']
    failed = summary.get('send_errors') or 0
    return summary['sent'] - failed, failed


def rtt_rows(logs, point):
    """One rtt.csv row from a probe point's sender and reflector logs."""
    p = point['point']
    records = read_jsonl(logs / ('probe-p%d.jsonl' % p))
    rtts = np.array([r['rtt_us'] for r in records if r['event'] == 'echo']) / 1000.0
    summary = next(r for r in records if r['event'] == 'summary')
    sent, failed = sent_counts(summary)
    stream = [r for r in read_jsonl(logs / ('reflect-p%d.jsonl' % p)) if r['event'] == 'stream']
    oneway = stream[0] if stream else {}
    return {**_base(point), 'delay_ms': point['delay_ms'], 'jitter_ms': point['jitter_ms'],
            'loss': point['loss'], 'nlinks': point['nlinks'],
            'configured_rtt_ms': point['rtt_ms'], 'configured_rtt_std_ms': point['rtt_std_ms'],
            'sent': sent, 'send_failed': failed, 'echoed': summary['echoed'],
            'oneway_received': oneway.get('received'),
            'median_rtt_ms': float(np.median(rtts)) if len(rtts) else None,
            'mean_rtt_ms': float(rtts.mean()) if len(rtts) else None,
            'std_rtt_ms': float(rtts.std()) if len(rtts) else None,
            'p99_rtt_ms': float(np.percentile(rtts, 99)) if len(rtts) else None,
            'reordered_oneway': oneway.get('reordered'),
            'reordered_echoes': summary['reordered_echoes']}


def ping_row(logs, point):
    """ping (kernel timestamps) vs ping -U (user clock) averages of a delay point."""
    row = {**_base(point), 'delay_ms': point['delay_ms'], 'configured_rtt_ms': point['rtt_ms']}
    for label in ('kernel', 'user'):
        path = logs / ('ping-%s-p%d.txt' % (label, point['point']))
        match = _PING_RTT.search(path.read_text()) if path.exists() else None
        row['ping_%s_avg_ms' % label] = float(match.group(2)) if match else None
    return row


def binom_quantiles(n, p, low, high):
    """(smallest k with P[X <= k] >= low, same for high) for X ~ Binomial(n, p)."""
    if p <= 0 or p >= 1:
        return (0, 0) if p <= 0 else (n, n)
    log_p, log_q = math.log(p), math.log1p(-p)
    cdf, out = 0.0, []
    for k in range(n + 1):
        cdf += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                        + k * log_p + (n - k) * log_q)
        while len(out) < 2 and cdf >= (low, high)[len(out)]:
            out.append(k)
        if len(out) == 2:
            return tuple(out)
    return tuple(out + [n] * (2 - len(out)))


def loss_row(rtt, point):
    """loss.csv row: measured one-way loss and the 99 % binomial interval of the count."""
    n, received = rtt['sent'], rtt['oneway_received'] or 0
    p = point['loss'] / 100.0
    lo, hi = binom_quantiles(n, p, 0.005, 0.995)
    lost = n - received

    def share(k):
        return 100.0 * k / n if n else float('nan')
    return {**_base(point), 'configured_loss_pct': point['loss'], 'sent': n,
            'send_failed': rtt['send_failed'], 'received': received, 'lost': lost,
            'measured_loss_pct': share(lost), 'lost_lo99': int(lo), 'lost_hi99': int(hi),
            'inside_99': bool(n and lo <= lost <= hi),
            'echo_loss_pct': share(n - rtt['echoed']),
            'configured_echo_loss_pct': 100.0 * (1 - (1 - p) ** 2)}


def goodput_rows(logs, point):
    """goodput.csv rows (tcp, udp) from the iperf3 client JSON of a goodput point, or the
    tcp row from workloads.bulk's logs (simulation)."""
    rows = []
    for proto in ('tcp', 'udp'):
        path = logs / ('iperf-%s-client-p%d.json' % (proto, point['point']))
        if not path.exists():
            continue
        end = json.loads(path.read_text())['end']
        received = end['sum_received']
        rows.append(_goodput_row(logs, point, proto, received['bits_per_second'],
                                 end.get('sum_sent', {}).get('retransmits'),
                                 received.get('lost_percent')))
    done = read_jsonl(logs / ('bulk-server-p%d.jsonl' % point['point']), event='done')
    if done and done[0]['seconds'] > 0:
        sent = read_jsonl(logs / ('bulk-client-p%d.jsonl' % point['point']), event='summary')
        rows.append(_goodput_row(logs, point, 'tcp', 8 * done[0]['bytes'] / done[0]['seconds'],
                                 sent[0].get('retransmits') if sent else None, None))
    return rows


def _goodput_row(logs, point, proto, bits_per_second, retransmits, udp_lost_pct):
    """One goodput.csv row; a tcp row gets the median RTT of the probes sent during it."""
    mbps = bits_per_second / 1e6
    loaded = logs / ('loaded-probe-p%d.jsonl' % point['point'])
    rtts = [r['rtt_us'] / 1000.0 for r in read_jsonl(loaded) if r['event'] == 'echo'] \
        if proto == 'tcp' and loaded.exists() else []
    return {**_base(point), 'proto': proto, 'bw': point['bw'],
            'delay_ms': point['delay_ms'], 'goodput_mbps': mbps,
            'ratio': mbps / point['bw'], 'retransmits': retransmits,
            'udp_lost_pct': udp_lost_pct, 'configured_rtt_ms': point['rtt_ms'],
            'loaded_rtt_median_ms': float(np.median(rtts)) if rtts else None}


def tables(run_dir):
    """Return all fidelity tables as DataFrames, from logs and manifest only."""
    logs = pathlib.Path(run_dir) / 'logs'
    sim = simulated(read_manifest(run_dir))
    rtt, ping, loss, goodput, cpu = [], [], [], [], []
    for point, result in read_points(run_dir):
        daemon_s = result.get('daemon_cpu_s')
        cpu.append({**_base(point), 'delay_ms': point['delay_ms'], 'loss': point['loss'],
                    'bw': point['bw'], 'seconds': result.get('elapsed_s'),
                    'daemon_cpu_s': daemon_s,
                    'daemon_cpu_fraction': None if sim and daemon_s is None else
                    (daemon_s or 0) / max(result.get('elapsed_s') or 1e-9, 1e-9),
                    'machine_busy': result.get('machine_busy')})
        if point['kind'] == 'goodput':
            goodput += goodput_rows(logs, point)
            continue
        row = rtt_rows(logs, point)
        if point['kind'] == 'loss':
            loss.append(loss_row(row, point))
        else:
            rtt.append(row)
        if point['kind'] == 'delay' and not sim:
            ping.append(ping_row(logs, point))
    rtt = _with_baseline(pd.DataFrame(rtt))
    return {'rtt': rtt, 'ping': pd.DataFrame(ping), 'loss': pd.DataFrame(loss),
            'goodput': pd.DataFrame(goodput), 'cpu': pd.DataFrame(cpu)}


def _with_baseline(rtt):
    """Add the 0-delay median of the same shape and repetition (the switches' own RTT)."""
    if not len(rtt):
        return rtt
    zero = rtt[(rtt['kind'] == 'delay') & (rtt['delay_ms'] == 0)]
    base = {(r['shape'], r['repetition']): r['median_rtt_ms'] for _, r in zero.iterrows()}
    rtt['baseline_rtt_ms'] = [base.get((r['shape'], r['repetition'])) for _, r in rtt.iterrows()]
    rtt['error_net_ms'] = rtt['median_rtt_ms'] - rtt['configured_rtt_ms'] - \
        rtt['baseline_rtt_ms'].astype(float)
    return rtt


def targets(t):
    """One row per target (analysis.targets' table): the worst case measured, met or not."""
    rows = []
    rtt = t['rtt']
    delay = rtt[rtt['kind'] == 'delay'] if len(rtt) else rtt
    for _, r in delay.iterrows():
        tol = 0.03 * r['configured_rtt_ms'] + 0.2
        err = r['median_rtt_ms'] - r['configured_rtt_ms']
        ratio = ('ratio %.4f, ' % (r['median_rtt_ms'] / r['configured_rtt_ms'])
                 if r['configured_rtt_ms'] else '')
        rows.append(shared.row(
            'median RTT within 3%% + 0.2 ms of %g ms (%s)' % (r['configured_rtt_ms'], r['shape']),
            r['median_rtt_ms'], '%g +- %.3f ms' % (r['configured_rtt_ms'], tol),
            shared.met_word(bool(abs(err) <= tol)),
            '%serror %+.3f ms, allowed %.3f' % (ratio, err, tol)))
    for _, r in t['loss'].iterrows():
        rows.append(shared.row(
            'one-way loss %g%% inside 99%% binomial interval (%s, n=%d)'
            % (r['configured_loss_pct'], r['shape'], r['sent']),
            r['measured_loss_pct'], '%d..%d lost' % (r['lost_lo99'], r['lost_hi99']),
            shared.met_word(bool(r['inside_99'])),
            'ratio %.3f; lost %d%s' % (
                r['measured_loss_pct'] / r['configured_loss_pct'], r['lost'],
                '; %d failed sends not counted' % r['send_failed'] if r['send_failed'] else '')))
    need = {(10.0, 10.0): 0.9, (100.0, 10.0): 0.9, (500.0, 1.0): 0.8}
    gp = t['goodput']
    for _, r in (gp[gp['proto'] == 'tcp'].iterrows() if len(gp) else []):
        floor = need.get((r['bw'], r['delay_ms']))
        if floor is None:
            continue
        rows.append(shared.row(
            'TCP goodput >= %d%% of %g Mbit/s with %g ms one way (%s)'
            % (floor * 100, r['bw'], r['delay_ms'], r['shape']),
            r['goodput_mbps'], '>= %g Mbit/s' % (floor * r['bw']),
            shared.met_word(bool(r['ratio'] >= floor)), 'ratio %.3f' % r['ratio']))
    plain = rtt[rtt['kind'] == 'delay'] if len(rtt) else rtt
    if len(plain):
        reordered = int(plain['reordered_oneway'].fillna(0).sum() +
                        plain['reordered_echoes'].sum())
        rows.append(shared.row(
            'no reordering without jitter (%d delay points)' % len(plain), reordered, '0',
            shared.met_word(reordered == 0)))
    jit = rtt[rtt['kind'] == 'jitter'] if len(rtt) else rtt
    for _, r in jit.iterrows():
        ratio = r['std_rtt_ms'] / r['configured_rtt_std_ms']
        rows.append(shared.row(
            'RTT std within 20%% of configured %.3f ms (%s)'
            % (r['configured_rtt_std_ms'], r['shape']),
            r['std_rtt_ms'], '%.3f +- 20 %% ms' % r['configured_rtt_std_ms'],
            shared.met_word(bool(abs(ratio - 1) <= 0.2)), 'ratio %.3f' % ratio))
    return shared.frame(rows)


def draw(t, figures_dir):
    """Draw the configured-vs-measured figures and the CPU bars; return {name: figures.Saved}.

    Category labels are padded with spaces so that the figure module's string sort puts them
    in numeric order.
    """
    drawn = {}

    def keep(saved):
        drawn[saved.drawn.name] = saved
    if len(t['rtt']):
        keep(figures.measured_vs_configured(
            t['rtt'], 'configured_rtt_ms', 'median_rtt_ms', figures_dir, 'rtt',
            'Round-trip time', 'configured RTT (ms)', 'median measured RTT (ms)', hue='shape'))
    if len(t['loss']):
        keep(figures.measured_vs_configured(
            t['loss'], 'configured_loss_pct', 'measured_loss_pct', figures_dir, 'loss',
            'One-way loss', 'configured loss (%)', 'measured loss (%)', hue='shape'))
    if len(t['goodput']):
        df = t['goodput'].assign(transfer=lambda d: d['proto'] + ' ' + d['delay_ms'].map(
            lambda x: '%g ms' % x))
        keep(figures.measured_vs_configured(
            df, 'bw', 'goodput_mbps', figures_dir, 'goodput', 'Goodput',
            'configured bandwidth (Mbit/s)', 'measured goodput (Mbit/s)', hue='transfer'))
    if len(t['rtt']):
        delay = t['rtt'][(t['rtt']['kind'] == 'delay') & (t['rtt']['configured_rtt_ms'] > 0)]
        keep(figures.bars_with_spread(
            delay.assign(configured=delay['configured_rtt_ms'].map(lambda x: '%5g ms' % x),
                         ratio=delay['median_rtt_ms'] / delay['configured_rtt_ms']),
            'configured', 'ratio', figures_dir, 'rtt_ratio', 'Median RTT / configured RTT',
            'configured RTT', 'ratio', reference=1.0))
    if len(t['goodput']):
        tcp = t['goodput'][t['goodput']['proto'] == 'tcp']
        labels = ['%4gM %gms' % (bw, d) for bw, d in zip(tcp['bw'], tcp['delay_ms'])]
        keep(figures.bars_with_spread(
            tcp.assign(configured=labels),
            'configured', 'ratio', figures_dir, 'tcp_ratio', 'TCP goodput / configured rate',
            'configured rate (Mbit/s) and one-way delay', 'ratio', reference=1.0))
    if len(t['cpu']) and t['cpu']['daemon_cpu_fraction'].notna().any():
        df = t['cpu'].assign(what=lambda d: d['kind'])
        keep(figures.bars_with_spread(
            df, 'what', 'daemon_cpu_fraction', figures_dir, 'cpu',
            'CPU used by the linkdelay daemons', 'measurement kind',
            'daemon CPU (cores)'))
    return drawn


def _markdown(df, floatfmt='%.3f'):
    """Render a DataFrame as a GitHub markdown table."""
    if not len(df):
        return '(none)\n'
    cols = list(df.columns)
    lines = ['| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)]
    for _, r in df.iterrows():
        cells = [floatfmt % v if isinstance(v, float) else str(v) for v in r]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines) + '\n'


def build(run_dir):
    """Rewrite tables/, figures/ and report.md of a fidelity run; return the targets."""
    run_dir = pathlib.Path(run_dir)
    manifest = read_manifest(run_dir)
    t = tables(run_dir)
    goal = targets(t)
    write_tables(run_dir, {**t, 'targets': goal}, FLOAT)
    drawn = draw(t, run_dir / 'figures')
    links = manifest.get('mechanisms', {}).get('links', [])
    mechanisms = sorted({r.get('mechanism') for r in links if isinstance(r, dict)})
    passed = int((goal['verdict'] == 'met').sum())
    gp = t['goodput']
    cpu = t['cpu']
    sim = simulated(manifest)
    text = ['# Link-emulation fidelity\n\n',
            'Run status: %s; link mechanisms: %s; kernel %s; machine: %s.\n\n' % (
                inputs.run_status(manifest), ', '.join(map(str, mechanisms)) or 'none',
                manifest.get('provenance', {}).get('kernel', {}).get('release', '?'),
                machine.describe(manifest)),
            'Backend: simulation (repronet.sim): the link model in virtual time, TCP '
            'goodput from workloads.bulk.\n\n' if sim else '',
            '## Targets: %d of %d PASS\n\n' % (passed, len(goal)),
            _markdown(goal.assign(verdict=goal['verdict'].map(
                {'met': 'PASS', 'not met': 'MISS'}))) if len(goal) else '(none)\n',
            '\n## Round-trip time (UDP probe, application clock)\n\n',
            'baseline_rtt_ms is the median of the 0 ms point of the same shape (the switches\' '
            'and probe\'s own RTT); error_net_ms is the error left after subtracting it.\n\n',
            _markdown(t['rtt'][['shape', 'kind', 'sent', 'send_failed',
                                'configured_rtt_ms', 'median_rtt_ms',
                                'baseline_rtt_ms', 'error_net_ms',
                                'std_rtt_ms', 'configured_rtt_std_ms', 'p99_rtt_ms',
                                'reordered_oneway', 'reordered_echoes']]
                      if len(t['rtt']) else t['rtt']),
            '\n## ping vs ping -U\n\n',
            '%s: ping runs only on real hosts.\n' % NOT_SIMULATED if sim else
            'Without netem the hold happens after the kernel stamps the arriving packet, so '
            "ping's default (kernel receive timestamp) misses the reply's hold; `ping -U` and "
            'every application clock see it.\n\n' +
            _markdown(t['ping'].drop(columns=['point', 'repetition', 'kind'])
                      if len(t['ping']) else t['ping']),
            '\n## Loss (one way, reflector count)\n\n',
            'sent counts the probes the kernel took; send_failed the sends it refused '
            '(EAGAIN, ENOBUFS, ...), which never reached the link and are neither sent nor '
            'lost.\n\n',
            _markdown(t['loss'].drop(columns=['point', 'repetition', 'kind'])
                      if len(t['loss']) else t['loss'], '%.4f'),
            '\n## Goodput (%s, receiver)\n\n' % ('workloads.bulk' if sim else 'iperf3'),
            'UDP goodput (iperf3 -u): %s.\n\n' % NOT_SIMULATED if sim else '',
            'loaded_rtt_median_ms: median RTT of UDP probes every 10 ms during the TCP '
            'transfer; above configured_rtt_ms by the queueing delay at the bottleneck.\n\n',
            _markdown(gp.drop(columns=['point', 'repetition', 'kind']) if len(gp) else gp),
            '\n## CPU cost\n\n',
            'Daemon CPU and machine busy: %s; seconds are virtual seconds.\n\n'
            % NOT_SIMULATED if sim else
            'Daemon CPU is user+system time of the linkdelay processes of the point\'s two '
            'hosts; machine busy is the whole machine (1.0 = every CPU busy; %s).\n\n'
            % machine.describe(manifest),
            _markdown(cpu[['shape', 'kind', 'delay_ms', 'loss', 'bw', 'seconds'] + (
                [] if sim else ['daemon_cpu_s', 'daemon_cpu_fraction', 'machine_busy'])]
                      if len(cpu) else cpu),
            '\n## Figures\n\n',
            ' '.join('![%s](figures/%s.png)' % (name, name) for name in drawn) + '\n']
    (run_dir / 'report.md').write_text(''.join(text))
    return goal
