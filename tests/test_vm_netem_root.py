"""The netem path and the OVS kernel datapath, for real: tests that need Debian's stock kernel.

The development and CI machines' kernel has neither sch_netem nor the openvswitch module, so
these are marked ``vm_kernel``: skipped there (even in CI) and run inside the VM by
tests/test_vm_root.py (vagrant/vm.py sets REPRONET_VM, and then a missing feature fails).
On a machine with a stock kernel they simply run.

The VM emulates its CPU in software, so these check that netem really delays and drops (the
old failure was a silent "qdisc kind is unknown" and no delay at all), with bounds wide
enough for the VM's own overhead. The fidelity experiment with --links netem is not here: in
the VM on a busy 2-core host even a tiny run took over 6 minutes; its numbers are the
netem-against-daemon table of docs/link-emulation.md (analysis/netem_vs_daemon.py).
"""

import json
import os
import re
import statistics
import subprocess
import sys

import pandas as pd
import pytest

pytestmark = [pytest.mark.root, pytest.mark.vm_kernel]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script(name, out, *flags, timeout):
    """Run topologies/NAME.py with flags into out; return (process, manifest)."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'topologies', name + '.py'),
                           '--out', str(out)] + list(flags), capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out / 'manifest.json') as handle:
        return proc, json.load(handle)


def test_links_netem_delays_and_drops(tmp_path):
    """Network(links='netem'): htb+netem on the link, and its delay and loss are really there.

    10 ms one way on h1-s1 and 10 % loss h1->s1: ping (the kernel answers its echoes and stamps
    their arrival) reads a median RTT of 20..25 ms, our probe's RTT is no shorter than 20 ms, and
    the one-way loss of 1,000 probes lies in its 99.9 % interval. The probes go 5 ms apart: at
    2 ms, in one CI run (the first boot of a freshly built image, host load 1), the emulated CPU
    lost 314 of 1,000 one way against netem's 10 %, the reflector not keeping up; a test of
    netem must not measure the emulated CPU. The RTT window is on ping's times for the same
    reason: our probe (Python at both ends) read a median of 34.5 ms once in CI (stop 35; 20..30
    before), the software-emulated CPU's own time, where netem's delay was 20 ms.
    """
    from analysis.fidelity import binom_quantiles
    from repronet.emu import capabilities, network
    from tests.test_linkemu_root import _probe, _topo
    net = network.Network(_topo(delay='10ms', loss=10.0), 'lxbr', 'auto',
                          capabilities.probe(), links='netem').start()
    try:
        rtts, stream = _probe(net.net, tmp_path, 1000, 0.005)
        h1, h2 = net.net.get('h1'), net.net.get('h2')
        ping = h1.cmd('ping -n -c 100 -i 0.01 -W 1 %s' % h2.IP())
        records = net.mechanisms()['links']
    finally:
        net.stop()
    shaped = [r for r in records if r['delay_ms'] == 10.0]
    assert len(shaped) == 2 and all('netem' in r['mechanism'] for r in shaped), records
    median = statistics.median(rtts)
    lo, hi = binom_quantiles(1000, 0.1, 0.0005, 0.9995)
    lost = stream['sent'] - stream['received']
    print('median RTT %.3f ms over %d echoes; lost %d of %d one way (99.9 %% interval %d..%d)'
          % (median, len(rtts), lost, stream['sent'], lo, hi))
    pings = [float(t) for t in re.findall(r'time=([0-9.]+) ms', ping)]
    print('ping: %d echoes, median %.3f ms' % (len(pings), statistics.median(pings or [0])))
    assert len(pings) >= 60, ping       # 10 % of the requests are lost, no echo is
    assert 20.0 <= statistics.median(pings) <= 25.0, ping
    assert median >= 20.0
    assert stream['sent'] == 1000 and lo <= lost <= hi


@pytest.mark.timeout(580)
def test_smoke_on_the_ovs_kernel_datapath(tmp_path):
    """--switch ovs --datapath kernel builds the network on the openvswitch module and passes.

    The VM's CPU is emulated: on a busy 2-core host 20 Mbit/s read 0.80-0.88 of the rate, and
    in CI, beside the parallel tests, 0.4953 once, then 0.35-0.52 in both tries (1f8c73d: the
    VM pushed 7-10 Mbit/s). What is tested is that the kernel datapath carries and shapes the
    link, not how fast an emulated CPU copies bytes, so the link is 5 Mbit/s, which even that
    starved VM can fill. A stall of the emulated CPU is not the datapath's fault, so a
    repetition under half the rate gets one more run; a datapath that does not carry the rate
    fails both. Both readings are printed.
    """
    for attempt in ('run', 'again'):
        proc, manifest = _script('smoke', tmp_path / attempt, '--scale', 'smoke', '--switch',
                                 'ovs', '--datapath', 'kernel', '--bw', '5', timeout=280)
        assert manifest['status'] == 'ok'
        assert manifest['mechanisms']['datapath'] == 'kernel'
        goodput = pd.read_csv(tmp_path / attempt / 'tables' / 'goodput.csv')
        print(attempt, goodput.to_string(), sep='\n')
        if (goodput['ratio'] >= 0.5).all():
            break
    assert (goodput['ratio'] >= 0.5).all()


def test_auto_links_pick_netem_on_this_kernel():
    """Where the kernel has netem, auto means netem (no daemons, no iptables rules)."""
    from mininet.topo import Topo
    from repronet.emu import capabilities, linkemu
    topo = Topo()
    s1 = topo.addSwitch('s1')
    topo.addLink(topo.addHost('h1'), s1, delay='5ms', loss=1.0)
    topo.addLink(topo.addHost('h2'), s1)
    plan = linkemu.plan(topo, capabilities.probe())
    assert plan.mechanism == 'netem'
