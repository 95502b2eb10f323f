"""The netem path and the OVS kernel datapath, for real: tests that need Debian's stock kernel.

The development and CI machines' kernel has neither sch_netem nor the openvswitch module, so
these are marked ``vm_kernel``: skipped there (even in CI) and run inside the VM by
tests/test_vm_root.py (vagrant/vm.py sets REPRONET_VM, and then a missing feature fails).
On a machine with a stock kernel they simply run.

The VM emulates its CPU in software, so these check that netem really delays and drops (the
old failure was a silent "qdisc kind is unknown" and no delay at all), with bounds wide
enough for the VM's own overhead; the fidelity numbers themselves are for the README table.
"""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

pytestmark = [pytest.mark.root, pytest.mark.vm_kernel]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIDELITY = ['--scale', 'smoke', '--delays', '10', '--losses', '5', '--rates', '10@10',
            '--rtt-packets', '100', '--loss-packets', '2000', '--duration', '2', '--seed', '7']


def _script(name, out, *flags, timeout):
    """Run topologies/NAME.py with flags into out; return (process, manifest)."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'topologies', name + '.py'),
                           '--out', str(out)] + list(flags), capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out / 'manifest.json') as handle:
        return proc, json.load(handle)


@pytest.mark.timeout(400)
def test_fidelity_with_netem_links_delays_and_drops(tmp_path):
    """--links netem: every delayed or lossy link uses netem, and the delay and loss are there."""
    proc, manifest = _script('fidelity', tmp_path / 'run', '--links', 'netem', *FIDELITY,
                             timeout=380)
    assert manifest['status'] == 'ok' and manifest['params']['links'] == 'netem'
    assert manifest['mechanisms']['link_mechanism'] == 'netem'
    shaped = [r for r in manifest['mechanisms']['links']
              if r.get('delay_ms') or r.get('loss')]
    assert shaped and all('netem' in r['mechanism'] for r in shaped), shaped
    rtt = pd.read_csv(tmp_path / 'run' / 'tables' / 'rtt.csv')
    print(rtt.to_string())
    delayed = rtt[(rtt['delay_ms'] == 10) & (rtt['jitter_ms'] == 0)]['median_rtt_ms']
    assert len(delayed) == 2 and ((delayed > 19.5) & (delayed < 30)).all(), delayed
    loss = pd.read_csv(tmp_path / 'run' / 'tables' / 'loss.csv')
    print(loss.to_string())
    assert ((loss['lost'] > 0) & (loss['lost'] < loss['sent'])).all()


@pytest.mark.timeout(300)
def test_smoke_on_the_ovs_kernel_datapath(tmp_path):
    """--switch ovs --datapath kernel builds the network on the openvswitch module and passes."""
    proc, manifest = _script('smoke', tmp_path / 'run', '--scale', 'smoke', '--switch', 'ovs',
                             '--datapath', 'kernel', timeout=280)
    assert manifest['status'] == 'ok'
    assert manifest['mechanisms']['datapath'] == 'kernel'
    goodput = pd.read_csv(tmp_path / 'run' / 'tables' / 'goodput.csv')
    print(goodput.to_string())
    assert (goodput['ratio'] >= 0.8).all()


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
