"""What a new user of --backend sim runs into: a mistyped --sim-cost module, host addresses
past the 65,536th host (both found trying the simulator as a user, issue 13)."""

import pytest
from mininet.topo import Topo

from repronet.sim import backend, cpu


def test_a_sim_cost_for_a_module_that_does_not_exist_is_refused():
    """A typo would otherwise charge nothing and the run would look like a cost-free one."""
    assert cpu.parse_costs('nodes.dht.server=1e-4') == {'nodes.dht.server': 1e-4}
    for text in ('nodes.dht.sever=1e-4', 'nodes.nothere.server=1e-4', 'x=0.1'):
        with pytest.raises(ValueError, match='is not a module'):
            cpu.parse_costs(text)


def test_addresses_go_on_past_the_65536th_host_as_mininet_counts():
    """Mininet's ipAdd carries into the second byte: 10.1.0.0 follows 10.0.255.255."""
    assert backend.host_ip(1) == '10.0.0.1'
    assert backend.host_ip(256) == '10.0.1.0'
    assert backend.host_ip(65535) == '10.0.255.255'
    assert backend.host_ip(65536) == '10.1.0.0'
    assert backend.host_ip(65537) == '10.1.0.1'


def test_addresses_use_host_ip_in_sorted_host_order():
    topo = Topo()
    for name in ('h2', 'h1', 'h10'):
        topo.addHost(name)
    topo.addHost('x', ip='192.168.1.5/24')
    got = backend.addresses(topo)
    assert got['x'] == '192.168.1.5'
    assert sorted(ip for n, ip in got.items() if n != 'x') == [
        backend.host_ip(i) for i in (1, 2, 3)]
