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
    echo global > $T/trace_clock    # one clock for all CPUs: the legs cross them
    echo 'name ~ "h*-eth0"' > $T/events/net/netif_receive_skb/filter
    for f in raw_syscalls/sys_enter raw_syscalls/sys_exit; do
        echo 'comm == "python3" || comm == "linkdelay"' > $T/events/$f/filter; done
    for e in sched/sched_waking sched/sched_switch raw_syscalls/sys_enter raw_syscalls/sys_exit \\
        net/netif_receive_skb; do echo 1 > $T/events/$e/enable; done
    echo 1 > $T/tracing_on
    /usr/bin/python3 benchmarks/lan_latency.py --loads idle --delays 0,0.05 --rounds 1 \\
        --count 3000 --tcp 0
    echo 0 > $T/tracing_on; cat $T/trace > RR.txt    # then disable the events, clear the filters
    /usr/bin/python3 benchmarks/rr_legs.py RR.txt

Each probe pair is found by itself: a client is a process that sends, receives and waits in
``select`` (``pselect6``), a server one that sends and receives without; each client goes with
the server whose activity overlaps its own most; ``linkdelay`` processes are the daemons.

Two more tables per pair. The server's turn-around: which other tasks the scheduler switched
in on the server's CPU between its ``recvfrom`` returning and its ``sendto`` (``nothing``: it
kept the CPU). And, when the trace has ``net/netif_receive_skb`` on the hosts' interfaces,
each leg split at the receiving host's ingress; every column is the time from the event
before it (median, mean and 90th percentile, us):

- ``ingress``: the sender's ``sendto`` to the packet's ``netif_receive_skb`` on the receiving
  host's interface;
- ``verdict``: to the daemon's ``sendmsg`` (the hold; ``-`` without daemons);
- ``wake-up``: from the verdict (without one, the ingress) to the receiver's ``sched_waking``;
- ``running``: to the receiver's switch-in (0 when it had not left its CPU);
- ``data``: to the receiver's ``recvfrom`` returning the data;
- ``leg``: the whole, ``sendto`` to the data.

A leg is split only when the receiver was woken inside it (one still running when the data
came is left out: ``n`` counts the split legs). The receiving interfaces are found by the
trace (the one that received inside most request legs is the server's, of the reply legs
the client's); ``--ingress CLIENT_DEV,SERVER_DEV`` names them instead. Nothing is asserted;
docs/link-emulation.md ("Step 12", "Step 13") has what it showed.
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
SPLIT = ('ingress', 'verdict', 'wake-up', 'running', 'data', 'leg')
_EXIT = re.compile(r'NR (\d+) = (-?\d+)')
_FIELD = re.compile(r'(\w+)=(\S+)')


class Trace:
    """The events of the trace that the legs need, by process (each list in time order)."""

    def __init__(self, lines):
        self.sends = collections.defaultdict(list)      # pid: sendto entries (us)
        self.recvs = collections.defaultdict(list)      # pid: recvfrom exits with data (us)
        self.recv_cpu = {}                              # (pid, us) of a recvs entry: its CPU
        self.wakes = collections.defaultdict(list)      # pid: (us, waker CPU, target CPU)
        self.selects = collections.Counter()            # pid: select/pselect6 calls
        self.verdicts = []                              # a daemon's sendmsg entries (us)
        self.ingress = collections.defaultdict(list)    # interface: netif_receive_skb (us)
        self.switch_ins = collections.defaultdict(list)  # pid: switched in on a CPU (us)
        self.switches = collections.defaultdict(list)   # CPU: (us, next pid, next comm)
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
                    self.recv_cpu[(pid, t)] = cpu
            elif event == 'sched_waking':
                f = dict(_FIELD.findall(fields))
                if 'pid' in f and 'target_cpu' in f:
                    self.wakes[int(f['pid'])].append((t, cpu, int(f['target_cpu'])))
            elif event == 'sched_switch':
                f = dict(_FIELD.findall(fields))
                if 'next_pid' in f:
                    self.switch_ins[int(f['next_pid'])].append(t)
                    self.switches[cpu].append((t, int(f['next_pid']), f.get('next_comm', '?')))
            elif event == 'netif_receive_skb':
                f = dict(_FIELD.findall(fields))
                if 'dev' in f:
                    self.ingress[f['dev']].append(t)
        for table in (self.sends, self.recvs, self.wakes, self.ingress, self.switch_ins,
                      self.switches):
            for events in table.values():
                events.sort()
        self.verdicts.sort()
        self.woken = {pid: [w[0] for w in wakes] for pid, wakes in self.wakes.items()}

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


def round_trips(trace, client, server, edge=EDGE):
    """Yield (client's sendto, server's data, server's sendto, client's data) in us for each
    round trip of one pair, the first and last ``edge`` of the client's sends skipped and a
    round trip over MAX_RTT_US (a lost packet's) left out."""
    sends = trace.sends.get(client, [])
    for t0 in sends[edge:len(sends) - edge]:
        got = _after(trace.recvs.get(server, []), t0)
        sent = _after(trace.sends.get(server, []), got) if got is not None else None
        back = _after(trace.recvs.get(client, []), sent) if sent is not None else None
        if back is not None and back - t0 <= MAX_RTT_US:
            yield t0, got, sent, back


def legs(trace, client, server):
    """{name: [us...]} of every matched round trip of one pair, and the wakes' CPU crossing."""
    out = collections.defaultdict(list)
    for t0, got, sent, back in round_trips(trace, client, server):
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


def turn_around(trace, client, server, edge=EDGE):
    """Counter of what the scheduler switched in on the server's CPU during each of its
    turn-arounds (data to ``sendto``), other than the server: a sorted tuple of task names,
    () when nothing was."""
    during = collections.Counter()
    for _, got, sent, _ in round_trips(trace, client, server, edge):
        switches = trace.switches.get(trace.recv_cpu.get((server, got)), [])
        first = bisect.bisect_left(switches, (got,))
        last = bisect.bisect_left(switches, (sent,))
        during[tuple(sorted({comm for _, pid, comm in switches[first:last]
                             if pid != server}))] += 1
    return during


def ingress_devices(trace, client, server, edge=EDGE):
    """(client's, server's) receiving interface: the one with a ``netif_receive_skb`` inside
    most reply legs, and inside most request legs; None without such events in the legs."""
    inside = {'request': collections.Counter(), 'reply': collections.Counter()}
    for t0, got, sent, back in round_trips(trace, client, server, edge):
        for leg, start, end in (('request', t0, got), ('reply', sent, back)):
            for dev, times in trace.ingress.items():
                t = _after(times, start)
                if t is not None and t <= end:
                    inside[leg][dev] += 1
    if not inside['request'] or not inside['reply']:
        return None
    return inside['reply'].most_common(1)[0][0], inside['request'].most_common(1)[0][0]


def _leg_parts(trace, start, end, dev, pid):
    """{SPLIT column: us} of one leg (sendto at start, data in pid at end, received at dev),
    or None when pid was not woken inside it."""
    rx = _after(trace.ingress.get(dev, []), start)
    if rx is None or rx > end:
        return None
    verdict = _after(trace.verdicts, rx)
    base = verdict if verdict is not None and verdict < end else rx
    woken = _after(trace.woken.get(pid, []), base)
    if woken is None or woken > end:
        return None
    running = _after(trace.switch_ins.get(pid, []), woken)
    if running is None or running > end:
        running = woken
    parts = {'ingress': rx - start, 'wake-up': woken - base, 'running': running - woken,
             'data': end - running, 'leg': end - start}
    if base != rx:
        parts['verdict'] = base - rx
    return parts


def split(trace, client, server, devices, edge=EDGE):
    """{'request', 'reply': {SPLIT column: [us...]}} of one pair's legs split at the receiving
    host's ingress; devices: (client's interface, server's)."""
    out = {'request': collections.defaultdict(list), 'reply': collections.defaultdict(list)}
    for t0, got, sent, back in round_trips(trace, client, server, edge):
        for leg, start, end, dev, pid in (('request', t0, got, devices[1], server),
                                          ('reply', sent, back, devices[0], client)):
            parts = _leg_parts(trace, start, end, dev, pid)
            for name, us in (parts or {}).items():
                out[leg][name].append(us)
    return out


def _figures(values):
    """(median, mean, 90th percentile) of a non-empty list."""
    v = sorted(values)
    return statistics.median(v), statistics.mean(v), v[int(0.9 * len(v))]


def _split_lines(got, devices):
    lines = ['  legs split at the receiving host\'s ingress (request at %s, reply at %s), us '
             'from the event before:' % (devices[1], devices[0]),
             '    %-8s %6s  %-6s' % ('leg', 'n', 'stat') + ''.join('%9s' % c for c in SPLIT)]
    for leg in ('request', 'reply'):
        parts = got[leg]
        columns = [_figures(parts[c]) if parts.get(c) else None for c in SPLIT]
        for k, stat in enumerate(('median', 'mean', 'p90')):
            head = (leg, str(len(parts.get('leg', [])))) if k == 0 else ('', '')
            lines.append('    %-8s %6s  %-6s' % (head + (stat,)) + ''.join(
                '%9s' % ('-' if c is None else '%.1f' % c[k]) for c in columns))
    return lines


def report(trace, ingress=None):
    """The printed tables of every pair; ingress: (client's, server's) interface, or None to
    find them in the trace."""
    lines = []
    for client, server in trace.pairs():
        got, cross = legs(trace, client, server)
        lines.append('client %d, server %d: %d round trips; wake-ups across CPUs: server %d '
                     'of %d, client %d of %d' % (client, server, len(got['round trip']),
                                                 *cross['server'], *cross['client']))
        for name in ('request', 'server', 'reply', 'round trip', 'request from verdict',
                     'reply from verdict'):
            if got.get(name):
                lines.append('  %-21s median %7.1f us  mean %7.1f  p90 %7.1f  (n %d)' % (
                    name, *_figures(got[name]), len(got[name])))
        if trace.switches:
            during = turn_around(trace, client, server).most_common()
            lines.append('  switched in on the server\'s CPU during its turn-around: %s' %
                         ', '.join('%s %d' % (' + '.join(names) or 'nothing', n)
                                   for names, n in during))
        devices = ingress or ingress_devices(trace, client, server)
        if devices:
            lines += _split_lines(split(trace, client, server, devices), devices)
        else:
            lines.append('  legs not split at the ingress: no net/netif_receive_skb of the '
                         'hosts\' interfaces inside them')
    return '\n'.join(lines)


def main(argv=None):
    p = UsageParser(tool='rr_legs.py', description=__doc__.split('\n')[0])
    p.add_argument('trace', help='the text of /sys/kernel/tracing/trace (or of perf script) '
                   'with the events above')
    p.add_argument('--ingress', metavar='CLIENT_DEV,SERVER_DEV',
                   help='the client\'s and the server\'s receiving interface for the split '
                   'at the ingress (default: found in the trace)')
    args = p.parse_args(argv)
    if not os.path.isfile(args.trace):
        p.error('%s is not a file' % args.trace)
    devices = tuple(args.ingress.split(',')) if args.ingress else None
    if devices is not None and (len(devices) != 2 or not all(devices)):
        p.error('--ingress takes two interfaces, CLIENT_DEV,SERVER_DEV, not %s' % args.ingress)
    with open(args.trace, errors='replace') as f:
        trace = Trace(f)
    if not trace.pairs():
        p.error('%s has no probe pair (a client and a server each sending and receiving at '
                'least %d times, the client in select)' % (args.trace, MIN_CALLS))
    missing = [d for d in devices or () if d not in trace.ingress]
    if missing:
        p.error('%s has no netif_receive_skb on %s (it has %s)' % (
            args.trace, ' or '.join(missing), ', '.join(sorted(trace.ingress)) or 'none'))
    print(report(trace, devices))
    return 0


if __name__ == '__main__':
    sys.exit(main())
