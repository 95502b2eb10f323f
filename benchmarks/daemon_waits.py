#!/usr/bin/python3
"""What held the CPU while a link-delay daemon waited to run: a scheduler trace of an
emulated run, each daemon wake-up charged to what its CPU was doing (issue 15).

Why: the daemons run SCHED_FIFO, yet under the dht8 seed-scale load some releases are
hundreds of microseconds late. On this ``PREEMPT_NONE`` kernel a woken real-time task waits
for the running task's system call or softirq to end, so what matters is which kernel work
was running when a daemon was woken. This script answers that from a trace of a few seconds
taken while an experiment runs (as root, in a second terminal, or started when the log
reaches the point of interest)::

    sudo perf record -a -o W.perf -e sched:sched_waking --filter 'comm == "linkdelay"' \\
        -e sched:sched_switch -e irq:softirq_entry -e irq:softirq_exit \\
        -e raw_syscalls:sys_enter --exclude-perf -e raw_syscalls:sys_exit --exclude-perf \\
        -- sleep 8
    /usr/bin/python3 benchmarks/daemon_waits.py W.perf

(``--exclude-perf`` keeps perf's own writes of the trace out of it.) The text of
``/sys/kernel/tracing/trace`` with the same events enabled reads the same way.

A wait runs from a daemon's ``sched_waking`` to its next traced event (the end of its
``ppoll``); on this kernel the switch from the idle task is not always traced, so the next
switch is not a reliable end. It is charged to the task last seen on the target CPU, with the
system call that task was in (or ``user``) and the softirq running there, if any. Also
printed: the daemons' own system calls, softirq time by kind and context, and the stretches
a task spent on a CPU inside one system call (the kernel work nothing preempts). Nothing is
asserted; docs/link-emulation.md ("Step 11") has what it showed.
"""

import collections
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from repronet.usage import UsageParser  # noqa: E402

# perf script's default line: comm pid [cpu] time: system:event: fields; tracefs's text:
# comm-pid [cpu] flags time: event: fields (a comm may have spaces and dashes)
_LINES = (re.compile(r'^\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+\w+:(\w+):\s+(.*)$'),
          re.compile(r'^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+):\s+(\w+):\s+(.*)$'))
_FIELD = re.compile(r'(\w+)=(\S+)')
DAEMON = 'linkdelay'
SYSCALLS = {0: 'read', 1: 'write', 3: 'close', 9: 'mmap', 11: 'munmap', 17: 'pread64',
            18: 'pwrite64', 20: 'writev', 25: 'mremap', 40: 'sendfile', 44: 'sendto',
            45: 'recvfrom', 46: 'sendmsg', 47: 'recvmsg', 82: 'rename', 87: 'unlink',
            202: 'futex', 232: 'epoll_wait', 257: 'openat', 262: 'newfstatat', 271: 'ppoll',
            281: 'epoll_pwait', 316: 'renameat2'}
SOFTIRQS = {0: 'HI', 1: 'TIMER', 2: 'NET_TX', 3: 'NET_RX', 4: 'BLOCK', 5: 'IRQ_POLL',
            6: 'TASKLET', 7: 'SCHED', 8: 'HRTIMER', 9: 'RCU'}
BOUNDS_US = (20, 100, 1000)


def parse(lines):
    """Yield (comm, pid, cpu, t_us, event, fields text) for each trace line."""
    for line in lines:
        m = _LINES[0].match(line) or _LINES[1].match(line)
        if m:
            yield (m[1], int(m[2]), int(m[3]), float(m[4]) * 1e6, m[5], m[6])


def _kind(comm):
    """A task's name as the tables show it (kernel threads by their family)."""
    if comm.startswith('swapper') or comm == '<idle>':
        return 'idle'
    return comm.split('/')[0]


def _syscall(nr):
    return SYSCALLS.get(nr, 'syscall %d' % nr)


class Waits:
    """The trace's daemon waits and the kernel work around them (feed() every event)."""

    def __init__(self):
        self.cur = {}           # cpu -> (pid, comm) last seen there
        self.soft = {}          # cpu -> (vector, start)
        self.sys = {}           # pid -> (syscall number, entered)
        self.oncpu = {}         # cpu -> (pid, comm, start of its stretch in a system call)
        self.waiting = {}       # daemon pid -> (woken at, holder)
        self.daemons = set()
        self.waits = []         # (us, holder)
        self.daemon_sys = collections.defaultdict(list)
        self.softirq = collections.defaultdict(list)
        self.stretches = collections.defaultdict(list)
        self.span = [None, None]

    def feed(self, comm, pid, cpu, t, event, fields):
        self.span = [t if self.span[0] is None else self.span[0], t]
        if comm == DAEMON:
            self.daemons.add(pid)
        if pid in self.waiting and event != 'sched_waking':
            woken, holder = self.waiting.pop(pid)
            self.waits.append((t - woken, holder))
        if event == 'sched_waking':
            self._waking(dict(_FIELD.findall(fields)), t)
            return
        if event == 'sched_switch':
            f = dict(_FIELD.findall(fields))
            self._end_stretch(cpu, t)
            nxt = int(f['next_pid'])
            self.cur[cpu] = (nxt, f['next_comm'])
            self.oncpu[cpu] = (nxt, f['next_comm'], t if nxt in self.sys else None)
            return
        self.cur[cpu] = (pid, comm)
        if event == 'softirq_entry':
            self.soft[cpu] = (int(re.search(r'vec=(\d+)', fields)[1]), t)
        elif event == 'softirq_exit' and cpu in self.soft:
            vec, start = self.soft.pop(cpu)
            self.softirq[(SOFTIRQS.get(vec, str(vec)), _kind(comm))].append(t - start)
        elif event == 'sys_enter':
            self.sys[pid] = (int(fields.split()[1]), t)
            self.oncpu[cpu] = (pid, comm, t)
        elif event == 'sys_exit':
            self._end_stretch(cpu, t, pid)
            entered = self.sys.pop(pid, None)
            if entered is not None and comm == DAEMON:
                self.daemon_sys[_syscall(entered[0])].append(t - entered[1])

    def _waking(self, f, t):
        pid = int(f['pid'])
        if f.get('comm') != DAEMON or pid in self.waiting:
            return
        target = int(f['target_cpu'])
        held = self.cur.get(target)
        if held is None:
            holder = '?'
        elif _kind(held[1]) == 'idle':
            holder = 'idle'
        else:
            call = self.sys.get(held[0])
            holder = '%s in %s' % (_kind(held[1]), 'user' if call is None
                                   else _syscall(call[0]))
        if target in self.soft:
            holder += ' + softirq %s' % SOFTIRQS.get(self.soft[target][0], '?')
        self.waiting[pid] = (t, holder)

    def _end_stretch(self, cpu, t, pid=None):
        held = self.oncpu.get(cpu)
        if held is None or held[2] is None or (pid is not None and held[0] != pid):
            return
        call = self.sys.get(held[0])
        name = _syscall(call[0]) if call else '?'
        self.stretches[(_kind(held[1]), name)].append(t - held[2])
        self.oncpu[cpu] = (held[0], held[1], None)


def _q(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


def report(w, top=15):
    """Text tables of a fed Waits."""
    span = (w.span[1] - w.span[0]) / 1e6 if w.span[0] is not None else 0.0
    total = sum(d for d, _ in w.waits) or 1.0
    out = ['trace of %.2f s: %d daemon wake-ups (%d daemons), waited %.0f us in all, mean '
           '%.2f us' % (span, len(w.waits), len(w.daemons), total if w.waits else 0,
                        total / max(1, len(w.waits)))]
    for bound in BOUNDS_US:
        long_ = [d for d, _ in w.waits if d >= bound]
        out.append('  waits >= %4d us: %7d, %5.1f %% of the waiting' % (
            bound, len(long_), 100 * sum(long_) / total))
    by = collections.defaultdict(list)
    for d, holder in w.waits:
        by[holder].append(d)
    out += ['', 'what ran on the woken daemon\'s CPU (by share of the waiting):']
    for holder, ds in sorted(by.items(), key=lambda kv: -sum(kv[1]))[:top]:
        out.append('  %-42s %7d wake-ups %5.1f %%  mean %8.1f us  p99 %8.1f  >=100 us: %d' % (
            holder, len(ds), 100 * sum(ds) / total, sum(ds) / len(ds), _q(ds, 0.99),
            sum(1 for d in ds if d >= 100)))
    out += ['', 'on-CPU stretches inside one system call, >= 100 us (the work nothing '
            'preempts here):']
    rows = [(sum(x for x in v if x >= 100), k, v) for k, v in w.stretches.items()]
    for big, (kind, call), v in sorted(rows, reverse=True)[:top]:
        if big:
            out.append('  %-34s %6d of %7d calls, %9.0f us in all (%.1f %% of %d CPUs), '
                       'max %7.0f us' % ('%s/%s' % (kind, call), sum(1 for x in v if x >= 100),
                                         len(v), big, 100 * big / 1e6 / max(span, 1e-9) /
                                         max(1, len(w.cur)), len(w.cur), max(v)))
    out += ['', 'the daemons\' system calls (time inside, sleeping included):']
    for call, v in sorted(w.daemon_sys.items(), key=lambda kv: -len(kv[1]))[:6]:
        out.append('  %-10s %8d calls  mean %7.2f us  p99 %8.1f' % (
            call, len(v), sum(v) / len(v), _q(v, 0.99)))
    out += ['', 'softirqs by kind and the task they ran in:']
    for (vec, ctx), v in sorted(w.softirq.items(), key=lambda kv: -sum(kv[1]))[:8]:
        out.append('  %-8s in %-14s %8d  %9.0f us in all  mean %6.1f  p99 %7.1f' % (
            vec, ctx, len(v), sum(v), sum(v) / len(v), _q(v, 0.99)))
    return '\n'.join(out)


def main(argv=None):
    p = UsageParser(tool='daemon_waits.py', description=__doc__.split('\n')[0])
    p.add_argument('trace', help='perf record output (the events above), or the text of '
                   'perf script or of /sys/kernel/tracing/trace')
    p.add_argument('--top', type=int, default=15, help='rows per table (default 15)')
    args = p.parse_args(argv)
    if not os.path.isfile(args.trace):
        p.error('%s is not a file' % args.trace)
    if args.top < 1:
        p.error('--top %d must be at least 1' % args.top)
    with open(args.trace, 'rb') as f:
        binary = f.read(8).startswith(b'PERFILE')
    w = Waits()
    if binary:
        script = subprocess.Popen(['perf', 'script', '-i', args.trace], text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        lines = script.stdout
    else:
        lines = open(args.trace, errors='replace')
    with lines:
        for event in parse(lines):
            w.feed(*event)
    if binary and script.wait() != 0:
        p.error('perf script could not read %s' % args.trace)
    if not w.waits:
        p.error('%s has no wake-up of a %s daemon (record sched:sched_waking while an '
                'emulated run with delays is running)' % (args.trace, DAEMON))
    print(report(w, args.top))
    return 0


if __name__ == '__main__':
    sys.exit(main())
