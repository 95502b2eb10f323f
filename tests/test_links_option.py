"""The shared --links flag: parsed, refused where it cannot work, and reaching the link plan.

--links forces the link mechanism (netem or the linkdelay daemon) so the two can be measured
against each other on one kernel (the VM's, which has netem); auto keeps the old choice.
"""

import os
import subprocess
import sys

import pytest

from repronet.run import options
from tests.test_capabilities import all_caps

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Exp:
    """A minimal experiment for the option parser."""

    name = 'demo'
    scales = {}

    def add_arguments(self, parser):
        pass


def _pair_topo(**link):
    """h1 - s1 - h2 with the given keywords on both links."""
    from mininet.topo import Topo
    topo = Topo()
    s1 = topo.addSwitch('s1')
    for name in ('h1', 'h2'):
        topo.addLink(topo.addHost(name), s1, **link)
    return topo


def test_links_defaults_to_auto_and_takes_each_mechanism():
    assert options.parse(_Exp(), []).links == 'auto'
    for mechanism in ('auto', 'netem', 'linkdelay'):
        assert options.parse(_Exp(), ['--links', mechanism]).links == mechanism
    with pytest.raises(options.UsageError):
        options.parse(_Exp(), ['--links', 'tbf'])


def test_links_netem_is_refused_in_one_sentence_without_netem():
    params = options.parse(_Exp(), ['--links', 'netem'])
    with pytest.raises(options.UsageError) as info:
        options.check_links(params, all_caps(True, netem=False))
    assert str(info.value).startswith('--links netem needs the sch_netem qdisc')
    assert str(info.value).count('. ') == 0
    options.check_links(params, all_caps(True))        # netem present: accepted
    options.check_links(options.parse(_Exp(), ['--links', 'linkdelay']),
                        all_caps(True, netem=False))


def test_links_is_refused_for_a_simulated_run():
    params = options.parse(_Exp(), ['--backend', 'sim', '--links', 'linkdelay'])
    with pytest.raises(options.UsageError) as info:
        options.check_shared(params)
    assert 'simulated run models its links' in str(info.value)


@pytest.mark.parametrize('links, expected', [('auto', 'netem'), ('netem', 'netem'),
                                             ('linkdelay', 'linkdelay')])
def test_links_reaches_the_network_plan_and_the_manifest(links, expected):
    """On a kernel with netem, --links picks the mechanism the Network plans and records."""
    pytest.importorskip('mininet.topo')
    from repronet.emu import network
    net = network.Network(_pair_topo(delay='5ms'), 'lxbr', 'auto', all_caps(True),
                          links=links)
    assert net.links.mechanism == expected
    records = net.links.records()
    assert records and all(expected in r['mechanism'] for r in records)


@pytest.mark.root
def test_experiment_refuses_links_netem_where_the_kernel_lacks_it(tmp_path):
    """Before the lock and before any folder: exit 2 with one sentence."""
    from repronet.emu import capabilities
    if capabilities.probe().netem:
        pytest.skip('this kernel has sch_netem, so --links netem is accepted')
    out = tmp_path / 'run'
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'topologies', 'smoke.py'),
                           '--scale', 'smoke', '--links', 'netem', '--out', str(out)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith('smoke: --links netem needs the sch_netem qdisc')
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()


def test_gso_cap_never_goes_under_one_frame():
    """The cap is the rate's bytes in 200 us, but a 5 Mbit/s link's 125 bytes is refused by the
    kernel ("integer out of range" from `ip link`, the VM test at b1ca1ab): one 1,500-byte frame
    at least."""
    from types import SimpleNamespace
    from repronet.emu import network
    size = lambda bw: network._gso_size(SimpleNamespace(params={'bw': bw} if bw else {}))
    assert [size(bw) for bw in (None, 5, 60, 100, 500)] == [0, 1500, 1500, 2500, 12500]
