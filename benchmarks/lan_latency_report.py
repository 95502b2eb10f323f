"""The printed half of ``benchmarks/lan_latency.py``: its header, the daemons' figures of each
row (``lateness``), its table and issue 15's targets.

Apart so the measuring script stays one screenful per job; the targets' figures live here,
next to the lines that judge them (never asserted: the benchmark prints, the reader judges).
Pure functions of the figures a run measured: tests/test_lan_latency_report.py feeds them
recorded ones.
"""

import json
import statistics

from repronet.emu import linkemu_holds
from repronet.emu.linkemu_holds import late_bound_us, weighted_mean

IDLE_LATE_US = 5.0          # issue 15: idle mean lateness at most 5 us
SATURATED_LATE_US = 15.0    # issue 15: saturated mean lateness at most 15 us
RTT_SHARE = 0.05            # issue 15: within 5 % of floor + configured RTT at 0.05 ms/link
TCP_MBIT = 500              # issue 15: TCP at 500 Mbit/s with 1 ms still at 0.95 of the rate
TCP_SHARE = 0.95
PAYLOAD_SHARE = 1448 / 1514   # TCP payload (timestamps on) in a 1,514-byte frame HTB counts


def lateness(stats):
    """Over the daemons' counters: the lateness figures the manifest's ``link_holds`` gives
    (``linkemu_holds.record``: mean weighted by released packets, the worst, bounds of the
    median and 99th percentile from the summed histograms), and beside them the mean time
    packets waited to be read, the share of packets with a kernel stamp, the verdicts' mean
    time, CPU s, the largest learned spin window and wake-up overshoot quantile, and how many
    daemons left SCHED_FIFO or were made to sleep."""
    counters = [record.get('counters') or {} for record in stats.values()]
    holds = linkemu_holds.record(
        [{'host': name, 'hold_us_min': None, 'hold_us_max': None,
          'cpu_s': record.get('cpu_s', 0.0), 'server': None} for name, record in stats.items()],
        counters, late_share=0)
    stamped = sum(c.get('stamped') or 0 for c in counters)
    unstamped = sum(c.get('unstamped') or 0 for c in counters)
    rows = holds['daemons']
    spin = [r['spin_us'] for r in rows if r['spin_us'] is not None]
    wake = [r['wake_overshoot_us_q'] for r in rows if r['wake_samples']]
    return {'verdict_us': weighted_mean((r['released'], r['verdict_us_mean']) for r in rows),
            'spin_us': max(spin) if spin else None, 'wake_us_q': max(wake) if wake else None,
            'rt_demoted': len(holds['rt_demoted']),
            'forced_sleeps': sum(r['forced_sleeps'] or 0 for r in rows),
            'late_us_mean': holds['late_us_mean'], 'late_us_max': holds['late_us_max'],
            'late_us_p50': late_bound_us(holds['late_hist_log2_us'], 0.5),
            'late_us_p99': late_bound_us(holds['late_hist_log2_us'], 0.99),
            'queued_us_mean': weighted_mean((c.get('stamped'), c.get('queued_us_mean'))
                                            for c in counters),
            'stamped_share': stamped / (stamped + unstamped) if stamped + unstamped else None,
            'daemon_cpu_s': sum(r['cpu_s'] for r in rows)}


def print_header(git, cores, kernel, uptime, daemon=None):
    """The first line: commit, cores, kernel, load, and the daemon build when not ours."""
    print('commit %s%s, %d cores, kernel %s; %s%s' % (
        (git['revision'] or '?')[:12], ' (dirty)' if git['dirty'] else '', cores, kernel,
        uptime, '; daemon %s' % daemon if daemon else ''), flush=True)


def print_schedule(rows, cpu_idle, split=None):
    """How the daemons were scheduled (the first row's record), the CPU idle states and the
    CPUs set apart for the daemons (split: LinkCpus.record() with --link-cpus, else None)."""
    schedule = next((r['schedule'] for r in rows if r['schedule']), None)
    print('daemons scheduled: %s; CPU idle states: %s; %s' % (
        json.dumps(schedule) if schedule else 'not recorded', cpu_idle,
        'CPUs %s set apart for the daemons, hosts on %s' % (split['daemons'], split['rest'])
        if split else 'daemons and hosts share every CPU'))


def print_flood(row):
    """The UDP flood: did a daemon leave SCHED_FIFO under it?"""
    print('UDP flood, 0.05 ms one way, unshaped: %.1f Mbit/s sent, daemons %.2f of a core, '
          'late %s us on average, %s us at most; %d daemon(s) left SCHED_FIFO, %d forced '
          'sleeps' % (row['mbit'], row['daemon_cpu'], _fmt(row['late_us_mean']),
                      _fmt(row['late_us_max'], '%.0f'), row['rt_demoted'],
                      row['forced_sleeps']))


def print_tcp(rows):
    """The TCP rows and issue 15's no-throughput-loss target, read two ways: the payload iperf3
    received (at most PAYLOAD_SHARE of the rate: 1,448 bytes of every 1,514-byte frame the
    shaper counts) and the bytes the shaper sent (how full the transfer kept the link)."""
    for r in rows:
        print('TCP at %d Mbit/s, %g ms one way: %.1f Mbit/s (%.3f of the rate), link %s, '
              'daemons %.2f of a core%s' % (
                  TCP_MBIT, r['one_way_ms'], r['mbit'], r['mbit'] / TCP_MBIT,
                  '-' if r.get('wire_mbit') is None else '%.1f Mbit/s (%.3f of the rate)' % (
                      r['wire_mbit'], r['wire_mbit'] / TCP_MBIT),
                  r['daemon_cpu'], '' if r['late_us_mean'] is None else
                  ', late %.1f us on average, %d daemon(s) left SCHED_FIFO' % (
                      r['late_us_mean'], r['rt_demoted'])))
    held = [r for r in rows if r['one_way_ms'] > 0]
    free = [r for r in rows if r['one_way_ms'] == 0]
    if held:
        ratio = held[-1]['mbit'] / TCP_MBIT
        print('  TCP payload at %d Mbit/s with 1 ms >= %.2f of the rate: %.3f: %s (its ceiling '
              'here is %.3f, %.3f of it reached)%s' % (
                  TCP_MBIT, TCP_SHARE, ratio, 'met' if ratio >= TCP_SHARE else 'NOT met',
                  PAYLOAD_SHARE, ratio / PAYLOAD_SHARE,
                  '; %.3f of the same transfer with no delay, no daemon' % (
                      held[-1]['mbit'] / free[0]['mbit']) if free and free[0]['mbit'] else ''))
        if held[-1].get('wire_mbit') is not None:
            wire = held[-1]['wire_mbit'] / TCP_MBIT
            print('  TCP bytes on the link at %d Mbit/s with 1 ms >= %.2f of the rate: %.3f: %s' % (
                TCP_MBIT, TCP_SHARE, wire, 'met' if wire >= TCP_SHARE else 'NOT met'))


def _fmt(value, spec='%.1f'):
    """A number or '-'."""
    return '-' if value is None else spec % value


def _median(values, pick=statistics.median):
    values = [v for v in values if v is not None]
    return pick(values) if values else None


def combine(rows):
    """One row per (load, delay) out of every round's (``round``): each round's excess over
    its own floor (the same load's 0 ms row of that round); the times and the excess are the
    median round's (by excess; the lower one of an even count), ``excesses`` keeps every
    round's; the mean lateness, queue
    and verdict figures are the mean of the rounds' (each round has the same number of
    requests), the worst and the bounds the largest, CPU seconds and demotions added up. One round gives its own row back with its excess."""
    floors = {(r.get('round', 0), r['load']): r['median_us'] for r in rows
              if r['delay_ms'] == 0}
    groups = {}
    for r in rows:
        floor = floors.get((r.get('round', 0), r['load']))
        expected = floor + 4000.0 * r['delay_ms'] if floor is not None else None
        excess = r['median_us'] / expected - 1 if expected and r['median_us'] else None
        groups.setdefault((r['load'], r['delay_ms']), []).append(dict(
            r, expected_us=expected, excess=excess))
    out = []
    for group in groups.values():
        judged = sorted((g for g in group if g['excess'] is not None),
                        key=lambda g: g['excess'])
        middle = judged[(len(judged) - 1) // 2] if judged else group[0]
        row = dict(middle, rounds=len(group), excesses=[g['excess'] for g in group])
        for key in ('late_us_mean', 'queued_us_mean', 'verdict_us', 'stamped_share'):
            row[key] = _median([g.get(key) for g in group], statistics.fmean)
        for key in ('late_us_max', 'late_us_p50', 'late_us_p99', 'spin_us', 'wake_us_q'):
            row[key] = _median([g.get(key) for g in group], max)
        for key in ('daemon_cpu_s', 'rt_demoted', 'probes'):
            row[key] = sum(g.get(key) or 0 for g in group)
        out.append(row)
    return out


def print_rows(rows):
    """One line per (load, delay) of ``combine``'s rows: measured against floor + configured
    RTT."""
    print('%-5s %8s %9s %9s %9s %11s %7s %9s %8s %8s %9s %9s %7s %7s %7s %6s %6s' % (
        'load', 'ms/link', 'cfg_rtt', 'median', 'mean', 'floor+cfg', 'excess',
        'late_mean', 'late_p50', 'late_p99', 'late_max', 'queued', 'verdict', 'stamped', 'cpu_s', 'spin', 'wake_q'))
    for r in rows:
        configured, expected = 4000.0 * r['delay_ms'], r['expected_us']
        print('%-5s %8g %9.0f %9s %9s %11s %7s %9s %8s %8s %9s %9s %7s %7s %7.2f %6s %6s%s' % (
            r['load'], r['delay_ms'], configured, _fmt(r['median_us']), _fmt(r['mean_us']),
            _fmt(expected), _fmt(r['excess'] and 100 * r['excess'], '%+.1f%%'),
            _fmt(r['late_us_mean'], '%.2f'), _fmt(r.get('late_us_p50'), '<%d'),
            _fmt(r.get('late_us_p99'), '<%d'), _fmt(r['late_us_max']),
            _fmt(r['queued_us_mean'], '%.2f'), _fmt(r['verdict_us'], '%.1f'),
            _fmt(r['stamped_share'], '%.2f'),
            r['daemon_cpu_s'], _fmt(r['spin_us'], '%.0f'), _fmt(r['wake_us_q'], '%.0f'),
            '  %d daemon(s) left SCHED_FIFO' % r['rt_demoted'] if r['rt_demoted'] else ''))


def print_targets(rows):
    """Issue 15's targets that this run measured, each with its verdict."""
    def row(load, delay):
        return next((r for r in rows if r['load'] == load and r['delay_ms'] == delay), None)

    def worst_mean(load):
        means = [r['late_us_mean'] for r in rows if r['load'] == load and r['late_us_mean']
                 is not None]
        return max(means) if means else None
    print('targets (issue 15):')
    idle = worst_mean('idle')
    if idle is not None:
        print('  idle mean lateness <= %g us: worst over the delays %.2f us: %s' % (
            IDLE_LATE_US, idle, 'met' if idle <= IDLE_LATE_US else 'NOT met'))
    r = row('idle', 0.05)
    if r and r.get('excess') is not None:
        print('  idle request-response at 0.05 ms/link within %g %% of floor + configured: '
              '%.1f us against %.1f us (%+.1f %%): %s' % (
                  100 * RTT_SHARE, r['median_us'], r['expected_us'], 100 * r['excess'],
                  'met' if abs(r['excess']) <= RTT_SHARE else 'NOT met')
              + ('; median of %d rounds, each against its own floor: %s' % (
                  len(r['excesses']), ', '.join(_fmt(e and 100 * e, '%+.1f %%')
                                                for e in r['excesses']))
                 if len(r.get('excesses') or ()) > 1 else ''))
    busy = worst_mean('hogs')
    if busy is not None:
        print('  saturated (CPU hogs) mean lateness <= %g us: worst over the delays %.2f us: '
              '%s' % (SATURATED_LATE_US, busy, 'met' if busy <= SATURATED_LATE_US else
                      'NOT met'))
