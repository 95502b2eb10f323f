"""benchmarks/rr_legs.py: a probe's round trips split into their legs from a tracefs text
trace (made up here with known times), the pair found by itself, the daemons' verdicts, the
cross-CPU wake-ups counted, and one-sentence usage errors."""

import subprocess
import sys

from benchmarks import rr_legs


def line(comm, pid, cpu, t_us, event, fields):
    return '%16s-%-6d [%03d] ..... %.6f: %s: %s' % (comm, pid, cpu, t_us / 1e6, event, fields)


def made_up(n=200, verdicts=True):
    """n round trips 1 ms apart: client 10 on CPU 0 sends at t, waits in pselect6; a daemon
    (30) releases at t+100; server 20 (CPU 1, woken from CPU 0) has it at t+113, answers at
    t+123; a daemon (31) releases at t+223; the client (woken from CPU 1) has it at t+247."""
    out = []
    for k in range(n):
        t = 1_000_000 + 1000 * k
        out += [line('python3', 10, 0, t, 'sys_enter', 'NR 44 (5, 7f, 40, 0, 0, 0)'),
                line('python3', 10, 0, t + 5, 'sys_enter', 'NR 270 (6, 7f, 0, 0, 7f, 0)')]
        if verdicts:
            out.append(line('linkdelay', 30, 0, t + 100, 'sys_enter', 'NR 46 (6, 7f, 0, 1)'))
        out += [line('linkdelay', 30, 0, t + 105, 'sched_waking',
                     'comm=python3 pid=20 prio=120 target_cpu=001'),
                line('python3', 20, 1, t + 113, 'sys_exit', 'NR 45 = 64'),
                line('python3', 20, 1, t + 123, 'sys_enter', 'NR 44 (5, 7f, 40, 0, 7f, 10)'),
                line('python3', 20, 1, t + 125, 'sys_exit', 'NR 45 = -11')]
        if verdicts:
            out.append(line('linkdelay', 31, 1, t + 223, 'sys_enter', 'NR 46 (6, 7f, 0, 1)'))
        out += [line('linkdelay', 31, 1, t + 228, 'sched_waking',
                     'comm=python3 pid=10 prio=120 target_cpu=000'),
                line('python3', 10, 0, t + 247, 'sys_exit', 'NR 45 = 64')]
    return out


def test_the_legs_of_each_round_trip():
    trace = rr_legs.Trace(made_up())
    assert trace.pairs() == [(10, 20)]
    got, cross = rr_legs.legs(trace, 10, 20)
    n = 200 - 2 * rr_legs.EDGE
    assert {k: {round(x, 3) for x in v} for k, v in got.items()} == {
        'request': {113}, 'server': {10}, 'reply': {124}, 'round trip': {247},
        'request from verdict': {13}, 'reply from verdict': {24}}
    assert all(len(v) == n for v in got.values())
    assert cross == {'server': (200, 200), 'client': (200, 200)}
    text = rr_legs.report(trace)
    assert 'client 10, server 20: %d round trips' % n in text
    assert 'reply from verdict    median    24.0 us' in text


def test_without_daemons_no_verdict_legs():
    got, _ = rr_legs.legs(rr_legs.Trace(made_up(verdicts=False)), 10, 20)
    assert set(got) == {'request', 'server', 'reply', 'round trip'}


def test_usage_errors_are_one_sentence(tmp_path):
    empty = tmp_path / 'empty.txt'
    empty.write_text('\n'.join(made_up(n=10)) + '\n')
    for args, says in (([str(tmp_path / 'missing')], 'is not a file'),
                       ([str(empty)], 'has no probe pair')):
        proc = subprocess.run([sys.executable, 'benchmarks/rr_legs.py'] + args,
                              capture_output=True, text=True)
        assert proc.returncode == 2 and says in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
