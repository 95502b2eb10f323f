"""Root test of the CPU idle-state request (issue 15): the kernel really holds it, and drops it.

The request is a PM QoS one on /dev/cpu_dma_latency; reading that device gives the value in
force for the whole machine (2,000,000,000 us when nobody asks for anything). Asserted: while a
Network runs with the default ``cpu_idle='poll'`` the value in force is 0 and its manifest
record says so; after stop() it is back to what it was; and a process that holds the request
and is SIGKILLed leaves nothing behind (the kernel drops the request with the descriptor), which
is why the runner's cleanup after a SIGKILL has nothing to undo here. Each part fails on a
broken version: a hold that never writes reads back the old value, and one that stops without
closing keeps 0 after stop() (checked by editing ``IdleHold.close`` to do nothing: the second
assertion failed).
"""

import os
import signal
import struct
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.root


def _in_force():
    """The machine's wake-up latency in force, in us (None without the device)."""
    try:
        with open('/dev/cpu_dma_latency', 'rb') as f:
            return struct.unpack('i', f.read(4))[0]
    except OSError:
        return None


def test_a_network_keeps_the_cpus_awake_until_it_stops(tmp_path):
    from benchmarks.lan_latency import pair
    from repronet.emu import capabilities, network
    before = _in_force()
    if before is None:
        pytest.skip('no /dev/cpu_dma_latency on this kernel')
    assert before != 0, 'something else already holds the CPUs awake; the test cannot tell'
    net = network.Network(pair(0.05), 'lxbr', 'auto', capabilities.probe(), seed=1,
                          log_dir=tmp_path)
    try:
        net.start()
        assert _in_force() == 0
        record = net.mechanisms()['cpu_idle']
        assert record['mode'] == 'poll' and record['in_force_us'] == 0
    finally:
        net.stop()
    assert _in_force() == before
    assert net.cpu_idle.record()['effect'].startswith(('in force', 'no cpuidle driver'))


def test_a_sigkilled_holder_leaves_no_request_behind():
    before = _in_force()
    if before is None:
        pytest.skip('no /dev/cpu_dma_latency on this kernel')
    code = ('import sys, time; from repronet.emu import cpuidle; '
            'hold = cpuidle.IdleHold("poll").start(); print("held", flush=True); time.sleep(60)')
    child = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        assert child.stdout.readline().strip() == 'held'
        assert _in_force() == 0
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + 5
    while _in_force() != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _in_force() == before
