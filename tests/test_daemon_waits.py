"""benchmarks/daemon_waits.py: each daemon wake-up charged to what its CPU was doing, read
from both trace formats (perf script's and tracefs's text), and one-sentence usage errors."""

import os
import subprocess
import sys

from benchmarks import daemon_waits

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A client enters openat on CPU 1; the daemon is woken there 10 us later and runs only when
# the call ends (450 us). On CPU 0 a second wake-up finds python3 in user mode (20 us).
PERF = """\
         python3  4001 [001]   100.000100: raw_syscalls:sys_enter: NR 257 (ffffff9c, 7f, 80241, 1b6, 0, 0)
         python3  4002 [000]   100.000105: raw_syscalls:sys_exit: NR 0 = 10
          <idle>     0 [001]   100.000110: sched:sched_waking: comm=linkdelay pid=3001 prio=89 target_cpu=001
         python3  4001 [001]   100.000560: raw_syscalls:sys_exit: NR 257 = 5
         python3  4001 [001]   100.000561: sched:sched_switch: prev_comm=python3 prev_pid=4001 prev_prio=120 prev_state=R ==> next_comm=linkdelay next_pid=3001 next_prio=89
       linkdelay  3001 [001]   100.000563: raw_syscalls:sys_exit: NR 271 = 1
         python3  4003 [000]   100.000600: sched:sched_waking: comm=linkdelay pid=3002 prio=89 target_cpu=000
       linkdelay  3002 [000]   100.000620: raw_syscalls:sys_exit: NR 271 = 0
"""


def _tracefs(text):
    """The same events as tracefs's text prints them (comm-pid [cpu] flags time: event:)."""
    out = []
    for line in text.splitlines():
        comm, pid, rest = line.split(None, 2)
        cpu, t, event, fields = rest.split(None, 3)
        out.append('%16s-%-6s %s ..... %s %s %s' % (comm, pid, cpu, t, event.split(':', 1)[1],
                                                      fields))
    return out


def _fed(lines):
    w = daemon_waits.Waits()
    for event in daemon_waits.parse(lines):
        w.feed(*event)
    return w


def test_a_wake_up_is_charged_to_the_system_call_running_on_its_cpu():
    for lines in (PERF.splitlines(), _tracefs(PERF)):
        w = _fed(lines)
        assert sorted((round(d), h) for d, h in w.waits) == [
            (20, 'python3 in user'), (453, 'python3 in openat')]
        assert [round(x) for x in w.stretches[('python3', 'openat')]] == [460]
        assert w.daemons == {3001, 3002}
        text = daemon_waits.report(w)
        assert 'python3 in openat' in text and '2 daemon wake-ups' in text


def test_usage_errors_are_one_sentence(tmp_path):
    empty = tmp_path / 'empty.txt'
    empty.write_text('no events here\n')
    for argv, said in (([str(tmp_path / 'none')], 'is not a file'),
                       ([str(empty)], 'has no wake-up of a linkdelay daemon'),
                       ([str(empty), '--top', '0'], '--top 0 must be at least 1')):
        proc = subprocess.run([sys.executable, 'benchmarks/daemon_waits.py'] + argv, cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and said in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
