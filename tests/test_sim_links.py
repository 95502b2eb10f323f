"""The simulated network (repronet/sim/links.py) against closed-form results of its model:
serialisation plus delay per hop, trains forwarded packet by packet, a drop-tail queue
that overflows by exactly the excess, binomial loss, uniform jitter, links taken down and
up, breadth-first routes, and draws that depend on the seed only. Virtual time makes the
arrival times exact up to floating-point rounding (``approx`` below)."""

import math
import statistics

import pytest
from mininet.topo import Topo

from repronet.sim.engine import Engine
from repronet.sim.links import DEFAULT_QUEUE, Network

MBIT = 1e6 / 8          # bytes per second in one Mbit/s


def _network(links, seed=0):
    """A Network over links [(a, b, TCLink keywords)]; names starting with s are switches."""
    topo = Topo()
    for name in sorted({n for a, b, _ in links for n in (a, b)}):
        if name.startswith('s'):
            topo.addSwitch(name)
        else:
            topo.addHost(name)
    for a, b, params in links:
        topo.addLink(a, b, **params)
    return Network(Engine(), topo, seed)


def _send(net, src, dst, nbytes, packets=1):
    """Start one train; return a dict that gets 'arrived' or 'lost' (the time)."""
    fate = {}
    net.send(src, dst, nbytes, packets, lambda t: fate.setdefault('arrived', t),
             lambda t: fate.setdefault('lost', t))
    return fate


def _ser(nbytes, mbit):
    """Seconds to serialise nbytes at mbit Mbit/s."""
    return nbytes / (mbit * MBIT)


def test_one_packet_one_hop_and_two_hops_store_and_forward():
    net = _network([('h1', 'h2', dict(bw=10, delay='5ms'))])
    fate = _send(net, 'h1', 'h2', 1500)
    net.engine.run()
    assert fate == {'arrived': pytest.approx(1500 * 8 / 10e6 + 0.005, abs=1e-12)}
    net = _network([('h1', 's1', dict(bw=10, delay='5ms')), ('s1', 'h2', dict(bw=10, delay='5ms'))])
    fate = _send(net, 'h1', 'h2', 1500)
    net.engine.run()
    assert fate['arrived'] == pytest.approx(2 * (1500 * 8 / 10e6 + 0.005), abs=1e-12)


@pytest.mark.parametrize('hops', [1, 2, 3])
@pytest.mark.parametrize('as_train', [True, False])
def test_k_packets_back_to_back_last_arrives_at_k_plus_hops_minus_one_slots(hops, as_train):
    """Equal links: the last packet leaves hop 1 at k*ser and each later hop adds one ser
    (cut-through per train), so it arrives at (k + hops - 1)*ser + hops*delay, the same
    whether the k packets are one train or k separate sends."""
    names = ['h1'] + ['s%d' % i for i in range(1, hops)] + ['h2']
    links = [(a, b, dict(bw=10, delay='2ms')) for a, b in zip(names, names[1:])]
    net = _network(links)
    k, size = 40, 1514
    if as_train:
        last = _send(net, 'h1', 'h2', k * size, k)
    else:
        last = [_send(net, 'h1', 'h2', size) for _ in range(k)][-1]
    net.engine.run()
    want = (k + hops - 1) * _ser(size, 10) + hops * 0.002
    assert last['arrived'] == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize('first, second', [(100, 10), (10, 100)])
def test_a_train_over_unequal_links_is_paced_by_the_slower_one(first, second):
    """Fast then slow: ser1 + k*ser2; slow then fast: k*ser1 + ser2 (plus both delays)."""
    net = _network([('h1', 's1', dict(bw=first, delay='1ms')),
                    ('s1', 'h2', dict(bw=second, delay='3ms'))])
    k, size = 30, 1500
    fate = _send(net, 'h1', 'h2', k * size, k)
    net.engine.run()
    one, two = _ser(size, first), _ser(size, second)
    want = (one + k * two if two > one else k * one + two) + 0.004
    assert fate['arrived'] == pytest.approx(want, abs=1e-9)


def test_an_unshaped_link_adds_its_delay_only():
    net = _network([('h1', 'h2', dict(delay='5ms'))])
    fates = [_send(net, 'h1', 'h2', 65536, 45) for _ in range(3 * DEFAULT_QUEUE)]
    net.engine.run()
    assert all(f == {'arrived': 0.005} for f in fates)


@pytest.mark.parametrize('limit, burst', [(100, 150), (None, DEFAULT_QUEUE + 37)])
def test_a_burst_overflows_the_queue_by_exactly_the_excess(limit, burst):
    params = dict(bw=10, delay='1ms')
    if limit is not None:
        params['max_queue_size'] = limit
    net = _network([('h1', 'h2', params)])
    fates = [_send(net, 'h1', 'h2', 1000) for _ in range(burst)]
    net.engine.run()
    capacity = limit or DEFAULT_QUEUE
    port = net.ports[('h1', 'h2')]
    assert port.overflow == burst - capacity and port.sent == capacity and port.dropped == 0
    assert [('arrived' in f) for f in fates] == [True] * capacity + [False] * (burst - capacity)
    assert all(f['lost'] == 0.0 for f in fates[capacity:])


def test_the_queue_frees_one_slot_per_packet_sent_and_a_train_takes_k_slots():
    net = _network([('h1', 'h2', dict(bw=10, delay='1ms', max_queue_size=100))])
    engine, port, ser = net.engine, net.ports[('h1', 'h2')], _ser(1000, 10)
    for _ in range(10):
        _send(net, 'h1', 'h2', 10 * 1000, 10)          # 10 trains of 10: queue full
    assert _send(net, 'h1', 'h2', 1000) == {'lost': 0.0}
    engine.run(until=30.01 * ser)                       # 3 trains out: 30 slots free
    assert [('lost' in _send(net, 'h1', 'h2', 1000 * k, k)) for k in (25, 6, 5)] == \
        [False, True, False]
    assert port.overflow == 1 + 6 and port.sent == 100 + 25 + 5


def test_loss_is_binomial_within_four_standard_deviations():
    n, p = 200_000, 0.01
    net = _network([('h1', 'h2', dict(delay='1ms', loss=1.0))], seed=7)
    fates = [_send(net, 'h1', 'h2', 100) for _ in range(n)]
    net.engine.run()
    lost = sum('lost' in f for f in fates)
    assert abs(lost - n * p) <= 4 * math.sqrt(n * p * (1 - p))
    assert net.ports[('h1', 'h2')].dropped == lost
    assert sum('arrived' in f for f in fates) == n - lost


def test_a_train_is_lost_with_probability_one_minus_the_product():
    """10 packets at 10 % each: without a partial callback (a datagram's fragments),
    1 - 0.9**10 = 65.1 % of trains are lost, not 10 %; the port counts each lost packet
    (Binomial(10 n, 0.1)), at least one per lost train."""
    n, p = 20_000, 1 - 0.9 ** 10
    net = _network([('h1', 'h2', dict(delay='1ms', loss=10.0))], seed=3)
    fates = [_send(net, 'h1', 'h2', 15000, 10) for _ in range(n)]
    net.engine.run()
    lost = sum('lost' in f for f in fates)
    assert abs(lost - n * p) <= 4 * math.sqrt(n * p * (1 - p))
    dropped = net.ports[('h1', 'h2')].dropped
    assert dropped >= lost
    assert abs(dropped - n) <= 4 * math.sqrt(10 * n * 0.1 * 0.9)


def test_a_partial_train_goes_on_with_the_packets_that_were_not_lost():
    """With a partial callback, a train that lost some packets arrives with the rest:
    partial(t, missing) with missing = the packets lost, and fewer bytes on later ports."""
    net = _network([('h1', 's1', dict(loss=30.0)), ('s1', 'h2', dict(bw=10, max_queue_size=5000))], seed=5)
    seen = []
    for _ in range(200):
        net.send('h1', 'h2', 10 * 1500, 10, lambda t: seen.append(0),
                 lambda t: seen.append(10), lambda t, missing: seen.append(missing))
    net.engine.run()
    assert len(seen) == 200 and 0 in seen and any(0 < m < 10 for m in seen)
    assert sum(seen) == net.ports[('h1', 's1')].dropped
    assert net.ports[('s1', 'h2')].sent == 200 * 10 - sum(seen)
    assert net.ports[('s1', 'h2')].bytes == sum(1500 * (10 - m) for m in seen)


def _pattern(net, n=2000):
    """Which of n packets were lost and when the others arrived (a run's fingerprint)."""
    fates = [_send(net, 'h1', 'h2', 1500) for _ in range(n)]
    net.engine.run()
    return [f.get('arrived') for f in fates]


def _lossy_jittery(seed):
    return _network([('h1', 's1', dict(bw=100, delay='2ms', jitter='1ms', loss=5.0)),
                     ('s1', 'h2', dict(bw=10, delay='3ms', jitter='2ms', loss=5.0))], seed)


def test_same_seed_same_drops_and_times_other_seed_other_pattern():
    first = _pattern(_lossy_jittery(11))
    assert first == _pattern(_lossy_jittery(11))
    assert first != _pattern(_lossy_jittery(12))
    assert None in first and len(set(first)) > 100


def test_reseed_restarts_the_pattern():
    net = _lossy_jittery(5)
    _pattern(net)
    start = net.engine.now              # every queue has drained: a fresh start but later
    net.reseed(11)
    again = _pattern(net)
    fresh = _pattern(_lossy_jittery(11))
    assert [t is None for t in again] == [t is None for t in fresh]
    assert [None if t is None else t - start for t in again] == pytest.approx(fresh, abs=1e-9)


def test_jitter_is_uniform_around_the_delay():
    """Uniform on [delay - jitter, delay + jitter]: mean delay, variance jitter^2 / 3."""
    n, delay, jitter = 20_000, 0.010, 0.002
    net = _network([('h1', 'h2', dict(delay='10ms', jitter='2ms'))], seed=2)
    draws = []
    for _ in range(n):                  # sent at 0 on an unshaped link: arrival = draw
        net.send('h1', 'h2', 100, 1, draws.append)
    net.engine.run()
    assert len(draws) == n
    assert min(draws) >= delay - jitter - 1e-12 and max(draws) <= delay + jitter + 1e-12
    assert min(draws) < delay - 0.99 * jitter and max(draws) > delay + 0.99 * jitter
    assert abs(statistics.fmean(draws) - delay) < 4 * jitter / math.sqrt(3 * n)
    # the sample variance of n uniform draws has a relative spread of 0.0063 at this n
    assert statistics.pvariance(draws) == pytest.approx(jitter ** 2 / 3, rel=0.03)


def test_link_down_drops_and_counts_and_up_again_delivers():
    net = _network([('h1', 's1', dict(bw=10, delay='1ms')), ('s1', 'h2', dict(delay='1ms'))])
    net.link_status('s1', 'h2', False)
    down = [_send(net, 'h1', 'h2', 3000, 2), _send(net, 'h2', 'h1', 1500)]
    net.engine.run()
    assert down[0] == {'lost': pytest.approx(_ser(3000, 10) / 2 + 0.001)}   # at s1
    assert down[1] == {'lost': 0.0}
    assert net.ports[('s1', 'h2')].dropped == 2 and net.ports[('h2', 's1')].dropped == 1
    net.link_status('h2', 's1', True)
    up = [_send(net, 'h1', 'h2', 1500), _send(net, 'h2', 'h1', 1500)]
    net.engine.run()
    assert all('arrived' in f for f in up)
    with pytest.raises(ValueError, match='no link h1-h2'):
        net.link_status('h1', 'h2', False)


def test_routes_over_two_switches_take_the_path_and_sum_its_hops():
    net = _network([('h1', 's1', dict(bw=100, delay='1ms')),
                    ('s1', 's2', dict(bw=10, delay='4ms')),
                    ('s2', 'h2', dict(bw=100, delay='2ms')),
                    ('s2', 'h3', dict(delay='1ms'))])
    assert [(p.src, p.dst) for p in net.route('h1', 'h2')] == \
        [('h1', 's1'), ('s1', 's2'), ('s2', 'h2')]
    assert [(p.src, p.dst) for p in net.route('h3', 'h1')] == \
        [('h3', 's2'), ('s2', 's1'), ('s1', 'h1')]
    assert net.one_way('h1', 'h2') == pytest.approx(0.007)
    fate = _send(net, 'h1', 'h2', 1000)
    net.engine.run()
    want = _ser(1000, 100) + _ser(1000, 10) + _ser(1000, 100) + 0.007
    assert fate['arrived'] == pytest.approx(want, abs=1e-12)


def test_routes_take_fewest_hops_ties_by_name_and_hosts_do_not_forward():
    net = _network([('h1', 's1', {}), ('s1', 's3', {}), ('s1', 's2', {}), ('s3', 's4', {}),
                    ('s2', 's4', {}), ('s4', 'h2', {}), ('h1', 's9', {}), ('s9', 's8', {}),
                    ('s8', 's7', {}), ('s7', 'h2', {}), ('h2', 'h3', {})])
    assert [p.dst for p in net.route('h1', 'h2')] == ['s1', 's2', 's4', 'h2']
    assert net.route('h1', 'h3') is None and net.one_way('h1', 'h3') is None
    fate = _send(net, 'h1', 'h3', 100)
    net.engine.run()
    assert fate == {'lost': 0.0}


def test_each_direction_has_its_own_parameters_and_records():
    net = _network([('h1', 'h2', dict(bw=10, params1={'delay': '1ms'},
                                      params2={'delay': '7ms', 'loss': 2.0}))])
    assert net.one_way('h1', 'h2') == 0.001 and net.one_way('h2', 'h1') == 0.007
    _send(net, 'h1', 'h2', 1200, 1)
    net.engine.run()
    records = net.records()
    assert [(r['src'], r['dst'], r['bw'], r['delay_ms'], r['loss'], r['mechanism'])
            for r in records] == [('h1', 'h2', 10, 1.0, 0.0, 'sim'),
                                  ('h2', 'h1', 10, 7.0, 2.0, 'sim')]
    assert net.ports[('h1', 'h2')].record() == {'src': 'h1', 'dst': 'h2', 'packets': 1,
                                                'dropped': 0, 'overflow': 0, 'bytes': 1200}


def test_send_path_with_the_route_is_send_train_and_no_route_is_lost_now():
    """A stream keeps its route and sends along it (Network.send_path): the same arrivals,
    losses and jitter draws as send_train looking the route up each time."""
    from repronet.sim.links import Outcomes
    links = [('h1', 's1', {'bw': 10, 'delay': '1ms', 'jitter': '0.5ms', 'loss': 20}),
             ('s1', 'h2', {'bw': 5, 'delay': '2ms'}), ('h3', 's9', {})]
    fates = []
    for by_path in (False, True):
        net, seen = _network(links, seed=7), []
        path = net.route('h1', 'h2')
        for i in range(40):
            train = Outcomes(lambda t, i=i: seen.append(('arrived', i, t)),
                             lambda t, i=i: seen.append(('lost', i, t)),
                             lambda t, m, i=i: seen.append(('partial', i, t, m)), 1 + i % 5)
            if by_path:
                net.send_path(path, 1500 * train.packets, train)
            else:
                net.send_train('h1', 'h2', 1500 * train.packets, train)
        net.engine.run()
        fates.append(seen)
    assert fates[0] == fates[1] and len(fates[0]) == 40
    net, seen = _network(links), []
    net.send_path(net.route('h1', 'h3'), 100, Outcomes(seen.append, seen.append, None, 1))
    net.engine.run()
    assert net.route('h1', 'h3') is None and seen == [0.0]
