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

    10 ms one way and 10 % loss on h1-s1 (both directions), measured by the kernel alone:
    h1 pings h2 1,000 times 5 ms apart (the kernel answers the echoes and stamps their
    arrival), an iptables rule in h2 counts the echo requests that arrived, so the one-way
    loss (1,000 less that count) lies in its 99.9 % interval and ping's median RTT in 20..25 ms.
    Not our probe: it is Python at both ends, and on the VM's software-emulated CPU, with the
    host's other tests beside it, it read a median RTT of 34.5 and 61.9 ms and lost 208 of
    1,000 one way in two CI runs (stop 35; netem's delay 20 ms, its loss 10 %): a test of
    netem must not measure the emulated CPU.
    """
    from analysis.fidelity import binom_quantiles
    from repronet.emu import capabilities, network
    from tests.test_linkemu_root import _topo
    net = network.Network(_topo(delay='10ms', loss=10.0), 'lxbr', 'auto',
                          capabilities.probe(), links='netem').start()
    try:
        h1, h2 = net.net.get('h1'), net.net.get('h2')
        h2.cmd('iptables -I INPUT -p icmp --icmp-type echo-request')    # a counter only
        ping = h1.cmd('ping -n -c 1000 -i 0.005 -W 1 %s' % h2.IP())
        counters = h2.cmd('iptables -nvxL INPUT')
        records = net.mechanisms()['links']
    finally:
        net.stop()
    shaped = [r for r in records if r['delay_ms'] == 10.0]
    assert len(shaped) == 2 and all('netem' in r['mechanism'] for r in shaped), records
    arrived = [int(line.split()[0]) for line in counters.splitlines()
               if 'icmptype 8' in line]
    assert len(arrived) == 1, counters
    lost = 1000 - arrived[0]
    lo, hi = binom_quantiles(1000, 0.1, 0.0005, 0.9995)
    times = [float(t) for t in re.findall(r'time=([0-9.]+) ms', ping)]
    print('ping: %d of 1000 echoes, median %.3f ms; %d requests lost one way (99.9 %% '
          'interval %d..%d)' % (len(times), statistics.median(times or [0]), lost, lo, hi))
    assert lo <= lost <= hi, counters
    assert len(times) >= 700, ping[-500:]       # 0.9 x 0.9 of them come back
    assert 20.0 <= statistics.median(times) <= 25.0, ping[-500:]


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
