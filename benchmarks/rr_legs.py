#!/usr/bin/python3
"""Where a request-response probe's round trip goes: its two legs, read from a scheduler and
system-call trace of benchmarks/lan_latency.py (issue 15).

Why: with the delay daemons releasing on time (2 us late on average), the idle round trip at
0.05 ms per link still came out 15-20 us over the no-delay floor plus the configured holds.
The daemons' own counters cannot say where, since the time is spent after their verdict. This
script splits each round trip into the request leg (the client's ``sendto`` to the server's
``recvfrom`` returning the data), the server's turn-around, and the reply leg (the server's
``sendto`` to the client's ``recvfrom`` returning), and says how many of the two processes'
wake-ups crossed CPUs (waker's CPU not the target's). With daemons in the trace, each leg's
last part is also given from the daemon's verdict (``sendmsg``) to the data in the process.
Take the trace as root while the benchmark runs, e.g. for the floor and 0.05 ms::

    T=/sys/kernel/tracing; mount -t tracefs nodev $T 2>/dev/null; echo 262144 > $T/buffer_size_kb
    for f in raw_syscalls/sys_enter raw_syscalls/sys_exit; do
        echo 'comm == "python3" || comm == "linkdelay"' > $T/events/$f/filter; done
    for e in sched/sched_waking sched/sched_switch raw_syscalls/sys_enter raw_syscalls/sys_exit
        do echo 1 > $T/events/$e/enable; done
    echo 1 > $T/tracing_on
    /usr/bin/python3 benchmarks/lan_latency.py --loads idle --delays 0,0.05 --rounds 1 \\
        --count 3000 --tcp 0
    echo 0 > $T/tracing_on; cat $T/trace > RR.txt    # then disable the events again
    /usr/bin/python3 benchmarks/rr_legs.py RR.txt

Each probe pair is found by itself: a client is a process that sends, receives and waits in
``select`` (``pselect6``), a server one that sends and receives without; each client goes with
the server whose activity overlaps its own most; ``linkdelay`` processes are the daemons.
Nothing is asserted; docs/link-emulation.md ("Step 12") has what it showed.
"""

import bisect
import collections
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.daemon_waits import parse  # noqa: E402
from repronet.usage import UsageParser  # noqa: E402

SENDTO, RECVFROM, SENDMSG, SELECT, PSELECT6 = 44, 45, 46, 23, 270
MIN_CALLS = 50              # sends and receives a probe process makes at the least
MAX_RTT_US = 5000           # a round trip longer than this is a lost packet's, not counted
EDGE = 20                   # round trips skipped at each end (start-up, the end marker)
_EXIT = re.compile(r'NR (\d+) = (-?\d+)')
_FIELD = re.compile(r'(\w+)=(\S+)')


class Trace:
    """The events of the trace that the legs need, by process."""

    def __init__(self, lines):
        self.sends = collections.defaultdict(list)      # pid: sendto entries (us)
        self.recvs = collections.defaultdict(list)      # pid: recvfrom exits with data (us)
        self.wakes = collections.defaultdict(list)      # pid: (us, waker CPU, target CPU)
        self.selects = collections.Counter()            # pid: select/pselect6 calls
        self.verdicts = []                              # a daemon's sendmsg entries (us)
        for comm, pid, cpu, t, event, fields in parse(lines):
            if event == 'sys_enter':
                nr = int(fields.split()[1])
                if comm == 'linkdelay' and nr == SENDMSG:
                    self.verdicts.append(t)
                elif nr == SENDTO:
                    self.sends[pid].append(t)
                elif nr in (SELECT, PSELECT6):
                    self.selects[pid] += 1
            elif event == 'sys_exit':
                m = _EXIT.match(fields)
                if m and int(m[1]) == RECVFROM and int(m[2]) > 0:
                    self.recvs[pid].append(t)
            elif event == 'sched_waking':
                f = dict(_FIELD.findall(fields))
                if 'pid' in f and 'target_cpu' in f:
                    self.wakes[int(f['pid'])].append((t, cpu, int(f['target_cpu'])))
        self.verdicts.sort()

    def pairs(self):
        """[(client, server)] of the probe processes, by overlap of their activity."""
        busy = [p for p in self.sends
                if len(self.sends[p]) >= MIN_CALLS and len(self.recvs[p]) >= MIN_CALLS]
        clients = [p for p in busy if self.selects[p] >= MIN_CALLS]
        servers = [p for p in busy if p not in clients]

        def overlap(a, b):
            lo = max(self.sends[a][0], self.sends[b][0])
            return min(self.sends[a][-1], self.sends[b][-1]) - lo
        out = []
        for c in clients:
            best = max(servers, key=lambda s: overlap(c, s), default=None)
            if best is not None and overlap(c, best) > 0:
                out.append((c, best))
        return sorted(out, key=lambda cs: self.sends[cs[0]][0])


def _after(values, t):
    i = bisect.bisect_left(values, t)
    return values[i] if i < len(values) else None


def legs(trace, client, server):
    """{name: [us...]} of every matched round trip of one pair, and the wakes' CPU crossing."""
    out = collections.defaultdict(list)
    for t0 in trace.sends[client][EDGE:-EDGE]:
        got = _after(trace.recvs[server], t0)
        sent = _after(trace.sends[server], got) if got is not None else None
        back = _after(trace.recvs[client], sent) if sent is not None else None
        if back is None or back - t0 > MAX_RTT_US:
            continue
        out['request'].append(got - t0)
        out['server'].append(sent - got)
        out['reply'].append(back - sent)
        out['round trip'].append(back - t0)
        for name, t in (('request from verdict', got), ('reply from verdict', back)):
            i = bisect.bisect_right(trace.verdicts, t) - 1
            if i >= 0 and trace.verdicts[i] > (t0 if name.startswith('request') else sent):
                out[name].append(t - trace.verdicts[i])
    cross = {}
    for name, pid in (('server', server), ('client', client)):
        wakes = trace.wakes.get(pid, [])
        cross[name] = (sum(1 for _, w, target in wakes if w != target), len(wakes))
    return out, cross


def report(trace):
    lines = []
    for client, server in trace.pairs():
        got, cross = legs(trace, client, server)
        lines.append('client %d, server %d: %d round trips; wake-ups across CPUs: server %d '
                     'of %d, client %d of %d' % (client, server, len(got['round trip']),
                                                 *cross['server'], *cross['client']))
        for name in ('request', 'server', 'reply', 'round trip', 'request from verdict',
                     'reply from verdict'):
            v = sorted(got.get(name, []))
            if v:
                lines.append('  %-21s median %7.1f us  mean %7.1f  p90 %7.1f  (n %d)' % (
                    name, statistics.median(v), statistics.mean(v), v[int(0.9 * len(v))],
                    len(v)))
    return '\n'.join(lines)


def main(argv=None):
    p = UsageParser(tool='rr_legs.py', description=__doc__.split('\n')[0])
    p.add_argument('trace', help='the text of /sys/kernel/tracing/trace (or of perf script) '
                   'with the events above')
    args = p.parse_args(argv)
    if not os.path.isfile(args.trace):
        p.error('%s is not a file' % args.trace)
    with open(args.trace, errors='replace') as f:
        trace = Trace(f)
    if not trace.pairs():
        p.error('%s has no probe pair (a client and a server each sending and receiving at '
                'least %d times, the client in select)' % (args.trace, MIN_CALLS))
    print(report(trace))
    return 0


if __name__ == '__main__':
    sys.exit(main())
