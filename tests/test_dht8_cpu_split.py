"""The pure parts of benchmarks/dht8_cpu_split.py and dht8_cpu_sched.py: what a process is
counted as, how two schedstat snapshots become CPU per kind (a reaped client's CPU from
RUSAGE_CHILDREN), and how a scheduler trace is charged to the tasks and softirqs of a span."""

import pytest

from benchmarks import dht8_cpu_sched as sched
from benchmarks import dht8_cpu_split as split


def test_processes_are_classified_by_comm_and_command_line():
    assert split.classify('linkdelay', '/x/linkdelay --conf c') == 'linkdelay'
    assert split.classify('python3', 'python3 -m nodes.dht.server --name s1') == 'server'
    assert split.classify('python3', 'python3 -m nodes.dht.client --name c') == 'client'
    assert split.classify('ksoftirqd/1', '') == 'ksoftirqd'
    assert split.classify('python3', 'python3 benchmarks/dht8_cpu_split.py') == 'runner'
    assert split.classify('bash', 'bash') == 'other'


def test_a_reaped_client_counts_its_whole_cpu_less_what_it_had_used_before():
    before = {1: ('server', 1_000_000, 0), 2: ('client', 4_000_000, 0),
              3: ('linkdelay', 0, 500_000)}
    after = {1: ('server', 3_000_000, 2_000_000), 3: ('linkdelay', 1_000_000, 500_000)}
    run, wait = split.split(before, after, reaped_s=0.010)
    assert run['server'] == pytest.approx(2.0) and wait['server'] == pytest.approx(2.0)
    assert run['client'] == pytest.approx(10.0 - 4.0)
    assert run['linkdelay'] == pytest.approx(1.0) and wait['linkdelay'] == 0


def _switch(cpu, t, prev, nxt, comm='python3'):
    return ('[%03d] %.6f: sched:sched_switch: prev_comm=x prev_pid=%d prev_prio=120 '
            'prev_state=S ==> next_comm=%s next_pid=%d next_prio=120' % (cpu, t, prev, comm,
                                                                        nxt))


def _soft(cpu, t, kind, action='NET_RX'):
    return '[%03d] %.6f:  irq:softirq_%s: vec=3 [action=%s]' % (cpu, t, kind, action)


def test_a_trace_is_charged_to_tasks_softirqs_and_client_phases_inside_the_span():
    pids = {10: 'p000-server-s1', 20: 'p000-client-p1', 30: 'linkdelay'}
    clients = {20: (1.0, 2.0)}          # first send, summary
    wins = [(1.0, 3.0, 0, pids, clients)]
    lines = [_switch(0, 0.5, 0, 20),             # client runs from 0.5 (before the span)
             _switch(0, 1.5, 20, 10),            # 1.0-1.5 client active
             _soft(0, 1.6, 'entry'), _soft(0, 1.7, 'exit'),     # server 1.5-1.6, 1.7-1.9
             _switch(0, 1.9, 10, 30, 'linkdelay'),
             _switch(0, 2.1, 30, 20),            # daemon 1.9-2.1
             _switch(0, 2.6, 20, 0, 'swapper/0'),   # client 2.1-2.6, after its summary
             _switch(0, 3.5, 0, 99, 'bash')]     # idle 2.6-3.0 (span ends at 3.0)
    got = sched.charge(lines, wins)[0]
    want = {'client active': 0.5, 'server': 0.3, 'softirq NET_RX': 0.1, 'linkdelay': 0.2,
            'client exiting': 0.5, 'idle': 0.4}
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v), k
