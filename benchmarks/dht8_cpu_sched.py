#!/usr/bin/python3
"""Who ran on the cores while dht8's clients were registering: a scheduler trace of a
``benchmarks/dht8_cpu_split.py`` run, cut to each point's active span.

Why (issue 13): ``dht8_cpu_split`` reads each process's CPU around a point's timed part,
but the runner's timed part ends when the last client has *exited*, while the time per
operation the tables report ends at each client's last reply. A client that is done tears
its interpreter down while the others still register, and the snapshot cannot tell those
apart. A trace of every context switch can: this script charges each slice of a core to
the task (or softirq) that had it, and splits it by the clients' own log times.

Record the run with the trace around it (monotonic clock; the split run's records give the
offset to the logs' wall-clock times and the PID of every node and link daemon)::

    sudo perf record -e sched:sched_switch -e irq:softirq_entry -e irq:softirq_exit -a \\
        -k mono -o DIR.perf -- /usr/bin/python3 benchmarks/dht8_cpu_split.py ... --out DIR
    /usr/bin/python3 benchmarks/dht8_cpu_sched.py DIR DIR.perf

Not daemon_waits.parse: it needs each line's comm and pid, which -F cpu,time,event,trace drops.

Per point, the span runs from the first client's first REGISTER sent to the last client's
summary record (its last reply). In it, per configuration (mean over repetitions, ms of
CPU): the index servers; the clients before their first send, while registering, and after
their summary (exiting); the link-delay daemons; softirqs by kind (no IRQ time accounting
on this kernel, so without the trace they count to whoever they interrupted); idle; the
rest by command name. Nothing is asserted.
"""

import bisect
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from repronet.usage import UsageParser  # noqa: E402

_SWITCH = re.compile(r'\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch:.*prev_pid=(\d+).*'
                     r'next_comm=(.*) next_pid=(\d+)')
_SOFT = re.compile(r'\[(\d+)\]\s+([\d.]+):\s+irq:softirq_(entry|exit): vec=\d+ '
                   r'\[action=(\w+)\]')


def windows(run_dir):
    """[(start, end, point, {pid: (kind, first send, summary)})] in monotonic seconds, one
    per point of the split run, sorted by start."""
    with open(os.path.join(run_dir, 'logs', 'cpu_split.jsonl')) as f:
        recs = {r['point']: r for r in map(json.loads, f)}
    out = []
    for point, rec in recs.items():
        offset = rec['realtime_minus_monotonic']
        pids = {int(p): name for p, name in rec['pids'].items()}
        by_name = {name: pid for pid, name in pids.items()}
        clients = {}
        for path in glob.glob(os.path.join(run_dir, 'logs', 'p%03d-client-*.jsonl' % point)):
            name = os.path.basename(path)[:-len('.jsonl')]
            with open(path) as f:
                logged = [json.loads(line) for line in f]
            ops = [r for r in logged if r.get('event') == 'op']
            summary = [r['t'] for r in logged if r.get('event') == 'summary']
            if ops and summary and name in by_name:
                clients[by_name[name]] = (ops[0]['t'] - ops[0]['latency'] - offset,
                                          summary[0] - offset)
        if clients:
            start = min(a for a, _ in clients.values())
            end = max(b for _, b in clients.values())
            out.append((start, end, point, pids, clients))
    return sorted(out)


def kind_of(pid, comm, pids, clients, t):
    """What a slice of pid at time t is charged to."""
    if pid == 0:
        return 'idle'
    name = pids.get(pid)
    if name is None:
        return 'other:' + comm
    if pid in clients:
        first, last = clients[pid]
        return 'client before' if t < first else 'client active' if t <= last \
            else 'client exiting'
    if '-server-' in name or name == 'server':
        return 'server'
    return 'linkdelay' if name.startswith('linkdelay') or name == 'linkdelay' else name


def charge(perf_lines, wins):
    """{point: {kind: seconds}} of every slice inside its point's span."""
    starts = [w[0] for w in wins]
    totals = {w[2]: {} for w in wins}
    cur, since, soft, comm = {}, {}, {}, {}

    def add(owner, cpu, t0, t1):
        i = bisect.bisect_right(starts, t1) - 1
        while i >= 0 and wins[i][1] > t0:
            start, end, point, pids, clients = wins[i]
            a, b = max(t0, start), min(t1, end)
            if b > a:
                kind = owner if isinstance(owner, str) else kind_of(
                    owner, comm.get((cpu, owner), '?'), pids, clients, (a + b) / 2)
                totals[point][kind] = totals[point].get(kind, 0.0) + b - a
            i -= 1

    for line in perf_lines:
        m = _SWITCH.search(line)
        if m:
            cpu, t, prev, next_comm, nxt = int(m[1]), float(m[2]), int(m[3]), m[4], int(m[5])
            if cpu in since:
                add(soft.get(cpu) or cur.get(cpu, prev), cpu, since[cpu], t)
            cur[cpu], since[cpu] = nxt, t
            comm[(cpu, nxt)] = next_comm.strip()
            continue
        m = _SOFT.search(line)
        if m and int(m[1]) in since:
            cpu, t = int(m[1]), float(m[2])
            add(soft.get(cpu) or cur[cpu], cpu, since[cpu], t)
            soft[cpu] = 'softirq ' + m[4] if m[3] == 'entry' else None
            since[cpu] = t
    return totals


def table(wins, totals, run_dir):
    """Text: per configuration, mean ms per kind over its repetitions."""
    with open(os.path.join(run_dir, 'logs', 'cpu_split.jsonl')) as f:
        conf = {r['point']: (r['part'], r['replicas'], r['servers'], r['clients'])
                for r in map(json.loads, f)}
    spans = {w[2]: w[1] - w[0] for w in wins}
    groups = {}
    for point in totals:
        groups.setdefault(conf[point], []).append(point)
    fixed = ['idle', 'server', 'client before', 'client active', 'client exiting',
             'linkdelay', 'softirq NET_RX', 'softirq NET_TX', 'softirq TIMER']
    rest = sorted({k for t in totals.values() for k in t} - set(fixed))
    lines = ['ms of CPU in the active span (first REGISTER sent .. last summary), mean over '
             'repetitions; columns after "other" list what "other" held most']
    lines.append('%-14s %3s %7s %7s ' % ('part,repl,srv', 'cli', 'span', '2 cores') +
                 ' '.join('%9s' % k.replace('softirq ', 'si:').replace('client ', 'cl:')
                          for k in fixed) + ' %9s  %s' % ('other', 'biggest other'))
    for key in sorted(groups):
        pts = groups[key]
        n = len(pts)
        span = sum(spans[p] for p in pts) / n * 1e3

        def mean(k):
            return sum(totals[p].get(k, 0.0) for p in pts) / n * 1e3
        other = {k: mean(k) for k in rest}
        top = sorted(other.items(), key=lambda kv: -kv[1])[:3]
        lines.append('%-14s %3d %7.1f %7.1f ' % ('%s,%s,%s' % key[:3], key[3], span, 2 * span)
                     + ' '.join('%9.1f' % mean(k) for k in fixed)
                     + ' %9.1f  %s' % (sum(other.values()),
                                       ', '.join('%s %.1f' % kv for kv in top)))
    return '\n'.join(lines)


def main(argv=None):
    p = UsageParser(tool='dht8_cpu_sched.py', description=__doc__.split('\n')[0])
    p.add_argument('run_dir', help='a results folder written by benchmarks/dht8_cpu_split.py')
    p.add_argument('perf_data', help='perf record output taken around that run (-k mono)')
    args = p.parse_args(argv)
    if not os.path.isfile(os.path.join(args.run_dir, 'logs', 'cpu_split.jsonl')):
        p.error('%s has no logs/cpu_split.jsonl (not a dht8_cpu_split run)' % args.run_dir)
    if not os.path.isfile(args.perf_data):
        p.error('%s is not a file' % args.perf_data)
    wins = windows(args.run_dir)
    script = subprocess.Popen(['perf', 'script', '-i', args.perf_data, '-F',
                               'cpu,time,event,trace'], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    totals = charge(script.stdout, wins)
    script.wait()
    print(table(wins, totals, args.run_dir))
    return 0


if __name__ == '__main__':
    sys.exit(main())
