"""benchmarks/rr_legs.py: a probe's round trips split into their legs from a tracefs text
trace (made up here with known times), the pair found by itself, the daemons' verdicts, the
cross-CPU wake-ups counted; each leg split at the receiving host's ingress and what ran during
the server's turn-around, from a hand-written excerpt of such a trace and in the printed
table; and one-sentence usage errors."""

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
    assert text.endswith('  legs not split at the ingress: no net/netif_receive_skb of the '
                         "hosts' interfaces inside them")


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


# Two round trips as tracefs prints them with rr_legs.py's docstring's commands (times and
# addresses made up): client 21147 on CPU 0, server 21146 on CPU 1. The first through
# two daemons: each leg 8 us to the receiving host's ingress, the 100 us hold, then 5 (4) to
# the wake-up, 6 to running, 2 (11) to the data; ksoftirqd runs on the server's CPU during
# its turn-around. The second without daemons, and the client still running when the reply
# came (not woken: that leg is not split).
EXCERPT = '''\
         python3-21147   [000] ..... 53300.000000: sys_enter: NR 44 (5, 7f3a2c0b1e40, 40, 0, 0, 0)
         python3-21147   [000] ..... 53300.000005: sys_enter: NR 270 (6, 7ffd0c1a2b30, 0, 0, 7ffd0c1a2a90, 0)
     kworker/1:0-5940    [001] ..s1. 53300.000008: netif_receive_skb: dev=h2-eth0 skbaddr=00000000a51f3b23 len=76
       linkdelay-21150   [001] ..... 53300.000108: sys_enter: NR 46 (6, 7ffc7b0e6c40, 0, 1, 0, 0)
       linkdelay-21150   [001] d..2. 53300.000113: sched_waking: comm=python3 pid=21146 prio=120 target_cpu=001
       linkdelay-21150   [001] d..2. 53300.000119: sched_switch: prev_comm=linkdelay prev_pid=21150 prev_prio=89 prev_state=S ==> next_comm=python3 next_pid=21146 next_prio=120
         python3-21146   [001] ..... 53300.000121: sys_exit: NR 45 = 64
         python3-21146   [001] d..2. 53300.000124: sched_switch: prev_comm=python3 prev_pid=21146 prev_prio=120 prev_state=R+ ==> next_comm=ksoftirqd/1 next_pid=22 next_prio=120
     ksoftirqd/1-22      [001] d..2. 53300.000126: sched_switch: prev_comm=ksoftirqd/1 prev_pid=22 prev_prio=120 prev_state=S ==> next_comm=python3 next_pid=21146 next_prio=120
         python3-21146   [001] ..... 53300.000129: sys_enter: NR 44 (5, 7f3a2c0b1e40, 40, 0, 7ffd0c1a2b30, 10)
         python3-21146   [001] ..... 53300.000131: sys_exit: NR 45 = -11
     kworker/1:0-5940    [001] ..s1. 53300.000137: netif_receive_skb: dev=h1-eth0 skbaddr=00000000af0b1768 len=76
       linkdelay-21151   [000] ..... 53300.000237: sys_enter: NR 46 (6, 7ffc7b0e6c40, 0, 1, 0, 0)
       linkdelay-21151   [000] d..2. 53300.000241: sched_waking: comm=python3 pid=21147 prio=120 target_cpu=000
       linkdelay-21151   [000] d..2. 53300.000247: sched_switch: prev_comm=linkdelay prev_pid=21151 prev_prio=89 prev_state=S ==> next_comm=python3 next_pid=21147 next_prio=120
         python3-21147   [000] ..... 53300.000258: sys_exit: NR 45 = 64
         python3-21147   [000] ..... 53300.001000: sys_enter: NR 44 (5, 7f3a2c0b1e40, 40, 0, 0, 0)
     kworker/1:0-5940    [001] ..s1. 53300.001006: netif_receive_skb: dev=h2-eth0 skbaddr=00000000a51f3b23 len=76
     kworker/1:0-5940    [001] d..2. 53300.001008: sched_waking: comm=python3 pid=21146 prio=120 target_cpu=001
     kworker/1:0-5940    [001] d..2. 53300.001013: sched_switch: prev_comm=kworker/1:0 prev_pid=5940 prev_prio=120 prev_state=I ==> next_comm=python3 next_pid=21146 next_prio=120
         python3-21146   [001] ..... 53300.001015: sys_exit: NR 45 = 64
         python3-21146   [001] ..... 53300.001020: sys_enter: NR 44 (5, 7f3a2c0b1e40, 40, 0, 7ffd0c1a2b30, 10)
     kworker/1:0-5940    [001] ..s1. 53300.001026: netif_receive_skb: dev=h1-eth0 skbaddr=00000000af0b1768 len=76
         python3-21147   [000] ..... 53300.001040: sys_exit: NR 45 = 64
'''


def _rounded(split):
    return {leg: {k: [round(x, 3) for x in v] for k, v in parts.items()}
            for leg, parts in split.items()}


def test_a_trace_excerpt_split_at_the_receiving_hosts_ingress():
    trace = rr_legs.Trace(EXCERPT.splitlines())
    devices = rr_legs.ingress_devices(trace, 21147, 21146, edge=0)
    assert devices == ('h1-eth0', 'h2-eth0')
    assert _rounded(rr_legs.split(trace, 21147, 21146, devices, edge=0)) == {
        'request': {'ingress': [8, 6], 'verdict': [100], 'wake-up': [5, 2],
                    'running': [6, 5], 'data': [2, 2], 'leg': [121, 15]},
        'reply': {'ingress': [8], 'verdict': [100], 'wake-up': [4], 'running': [6],
                  'data': [11], 'leg': [129]}}
    # the devices swapped: no ingress inside either leg, nothing split
    assert rr_legs.split(trace, 21147, 21146, devices[::-1], edge=0) == {
        'request': {}, 'reply': {}}


def test_a_trace_excerpt_says_what_ran_during_the_servers_turn_around():
    trace = rr_legs.Trace(EXCERPT.splitlines())
    assert [round(sent - got, 3) for _, got, sent, _ in
            rr_legs.round_trips(trace, 21147, 21146, edge=0)] == [8, 5]
    assert rr_legs.turn_around(trace, 21147, 21146, edge=0) == {('ksoftirqd/1',): 1, (): 1}


def with_ingress(lines, n=200):
    """made_up()'s round trips with the hosts' ingress and the processes' switch-ins: the
    request reaches h2-eth0 at t+9, the server runs at t+110; the reply reaches h1-eth0 at
    t+130, the client runs at t+235; ksoftirqd runs on the server's CPU in every tenth
    turn-around."""
    out = list(lines)
    for k in range(n):
        t = 1_000_000 + 1000 * k
        out += [line('kworker/1:0', 5940, 1, t + 9, 'netif_receive_skb',
                     'dev=h2-eth0 skbaddr=00000000a51f3b23 len=76'),
                line('linkdelay', 30, 1, t + 110, 'sched_switch',
                     'prev_comm=linkdelay prev_pid=30 prev_prio=89 prev_state=S ==> '
                     'next_comm=python3 next_pid=20 next_prio=120'),
                line('kworker/0:1', 5941, 0, t + 130, 'netif_receive_skb',
                     'dev=h1-eth0 skbaddr=00000000af0b1768 len=76'),
                line('linkdelay', 31, 0, t + 235, 'sched_switch',
                     'prev_comm=linkdelay prev_pid=31 prev_prio=89 prev_state=S ==> '
                     'next_comm=python3 next_pid=10 next_prio=120')]
        if k % 10 == 0:
            out.append(line('python3', 20, 1, t + 118, 'sched_switch',
                            'prev_comm=python3 prev_pid=20 prev_prio=120 prev_state=R+ ==> '
                            'next_comm=ksoftirqd/1 next_pid=22 next_prio=120'))
    return sorted(out, key=lambda s: float(s.split(': ')[0].split()[-1]))


def test_the_split_table_is_printed_with_the_interfaces_found(tmp_path):
    path = tmp_path / 'rr.txt'
    path.write_text('\n'.join(with_ingress(made_up())) + '\n')
    proc = subprocess.run([sys.executable, 'benchmarks/rr_legs.py', str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert ("  switched in on the server's CPU during its turn-around: nothing 144, "
            "ksoftirqd/1 16") in out
    assert ("  legs split at the receiving host's ingress (request at h2-eth0, reply at "
            "h1-eth0), us from the event before:") in out
    at = out.index('    leg           n  stat    ingress  verdict  wake-up  running     data'
                   '      leg')
    assert out[at + 1:at + 7] == [
        '    request     160  median      9.0     91.0      5.0      5.0      3.0    113.0',
        '                     mean        9.0     91.0      5.0      5.0      3.0    113.0',
        '                     p90         9.0     91.0      5.0      5.0      3.0    113.0',
        '    reply       160  median      7.0     93.0      5.0      7.0     12.0    124.0',
        '                     mean        7.0     93.0      5.0      7.0     12.0    124.0',
        '                     p90         7.0     93.0      5.0      7.0     12.0    124.0']


def test_the_ingress_option_names_the_interfaces(tmp_path):
    path = tmp_path / 'rr.txt'
    path.write_text('\n'.join(with_ingress(made_up())) + '\n')
    proc = subprocess.run([sys.executable, 'benchmarks/rr_legs.py', str(path),
                           '--ingress', 'h2-eth0,h1-eth0'], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert '(request at h1-eth0, reply at h2-eth0)' in proc.stdout
    bare = tmp_path / 'bare.txt'
    bare.write_text('\n'.join(made_up()) + '\n')
    for trace, args, says in (
            (path, ['--ingress', 'h1-eth0'], '--ingress takes two interfaces'),
            (path, ['--ingress', 'h1-eth0,'], '--ingress takes two interfaces'),
            (path, ['--ingress', 'h1-eth0,h3-eth0'],
             'has no netif_receive_skb on h3-eth0 (it has h1-eth0, h2-eth0)'),
            (bare, ['--ingress', 'h1-eth0,h2-eth0'],
             'has no netif_receive_skb on h1-eth0 or h2-eth0 (it has none)')):
        proc = subprocess.run([sys.executable, 'benchmarks/rr_legs.py', str(trace)] + args,
                              capture_output=True, text=True)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
