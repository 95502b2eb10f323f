"""Unit tests of repronet.emu.linkemu: parameter checks, mechanism choice, path composition.

No root needed: plan() only reads the Topo and a capabilities object.
"""

import types

import pytest
from mininet.topo import Topo

from repronet.emu import linkemu
from repronet.emu.linkemu import LinkEmulationError
from repronet.emu.linkemu_params import direction_params, link_directions, parse_time_ms


def caps(**overrides):
    """A capabilities stand-in with the fields plan() reads."""
    fields = dict(netem=False, htb=True, tbf=True, nfqueue=True, iptables_statistic=True)
    fields.update(overrides)
    return types.SimpleNamespace(**fields)


class Line(Topo):
    """h1 - s1 - s2 - h2, plus h3 on s1; link keywords given per link."""

    def build(self, first=None, middle=None, last=None):
        """Build the line with the given link keyword dicts."""
        s1, s2 = self.addSwitch('s1'), self.addSwitch('s2')
        h1, h2, h3 = self.addHost('h1'), self.addHost('h2'), self.addHost('h3')
        self.addLink(h1, s1, **(first or {}))
        self.addLink(s1, s2, **(middle or {}))
        self.addLink(s2, h2, **(last or {}))
        self.addLink(h3, s1)


@pytest.mark.parametrize('text,ms', [('5ms', 5.0), ('250us', 0.25), ('0.1s', 100.0),
                                     ('2msec', 2.0), (' 7 ms ', 7.0), (None, 0.0)])
def test_parse_time(text, ms):
    """Times with units parse to milliseconds."""
    assert parse_time_ms(text, 'delay', 'x') == pytest.approx(ms)


@pytest.mark.parametrize('bad', ['5', 5, '5 parsecs', '-1ms', 'ms'])
def test_time_without_unit_is_refused(bad):
    """A bare number or garbage names the link and shows the expected format."""
    with pytest.raises(LinkEmulationError, match=r"link a->b: delay=.*'5ms'"):
        parse_time_ms(bad, 'delay', 'link a->b')


@pytest.mark.parametrize('params,match', [
    ({'bw': 2000}, 'outside 0..1000'),
    ({'bw': 0}, 'at least 0.001'),
    ({'bw': 0.0001}, 'at least 0.001'),
    ({'bw': float('nan')}, 'finite'),
    ({'loss': float('inf')}, 'finite'),
    ({'loss': float('nan')}, 'finite'),
    ({'delay': '4295s'}, 'more than 60 s'),
    ({'delay': '4294967297us'}, 'more than 60 s'),
    ({'delay': '60.001s'}, 'more than 60 s'),
    ({'delay': '61s', 'jitter': '61s'}, 'more than 60 s'),
    ({'max_queue_size': 10 ** 6}, r'1\.\.100000'),
    ({'bw': '10'}, 'must be a number'),
    ({'loss': '1%'}, 'must be a number'),
    ({'loss': 101}, 'outside 0..100'),
    ({'delay': '1ms', 'jitter': '2ms'}, 'negative delays'),
    ({'max_queue_size': 0}, 'whole number'),
    ({'max_queue_size': 10.5}, 'whole number'),
])
def test_bad_parameters_fail_with_a_sentence(params, match):
    """Each impossible value raises LinkEmulationError naming what is wrong."""
    with pytest.raises(LinkEmulationError, match=match):
        direction_params(params, 'link h1->s1')


def test_directions_merge_like_mininet():
    """params1/params2 give per-direction values; link-level keywords win, as in Mininet."""
    info = {'delay': '2ms', 'params1': {'loss': 1.0, 'delay': '9ms'}, 'params2': {'bw': 5}}
    forward, backward = link_directions(info, 'a', 'b')
    assert (forward.delay_ms, forward.loss, forward.bw) == (2.0, 1.0, None)
    assert (backward.delay_ms, backward.loss, backward.bw) == (2.0, 0.0, 5.0)


def test_netem_kernel_uses_tclink_and_records_netem():
    """With sch_netem, the mechanism is netem (Mininet's TCLink, checked)."""
    emu = linkemu.plan(Line(first={'delay': '5ms', 'bw': 10}), caps(netem=True))
    assert emu.mechanism == 'netem'
    assert emu.link_class is linkemu.CheckedTCLink
    assert not emu.needs_daemons
    rec = emu.records()
    assert rec[0]['mechanism'] == 'htb+netem' and rec[0]['delay_ms'] == 5.0
    assert len(rec) == 8     # four links, two directions each


def test_no_netem_falls_back_to_linkdelay_with_composed_paths():
    """Without netem, delay sums along the path, loss compounds, jitter stays per hop."""
    topo = Line(first={'delay': '5ms', 'loss': 10.0}, middle={'delay': '1ms', 'jitter': '1ms'},
                last={'delay': '10ms', 'loss': 20.0})
    emu = linkemu.plan(topo, caps())
    assert emu.mechanism == 'linkdelay' and emu.link_class is linkemu.ShapedLink
    h1h2 = emu.paths.path('h1', 'h2')
    assert h1h2.hops == ((5000, 0), (1000, 1000), (10000, 0))
    assert h1h2.delay_ms == pytest.approx(16.0)
    assert h1h2.loss == pytest.approx(1 - 0.9 * 0.8)
    assert h1h2.links == ('h1->s1', 's1->s2', 's2->h2')
    h3h1 = emu.paths.path('h3', 'h1')
    assert h3h1.hops == ((0, 0), (5000, 0)) and h3h1.loss == pytest.approx(0.1)
    assert emu.needs_daemons
    assert {r['mechanism'] for r in emu.records()} >= {'linkdelay', 'none'}


def test_rates_ride_along_the_path_and_need_a_daemon_once_there_are_daemons():
    """Without netem and with some delay, a path's rated hops go to its receiver's daemon
    (which times each packet's bits on them): h3 -> h2 and h2 -> h3 cross only the rated
    s1-s2 link, no delay, yet are active."""
    emu = linkemu.plan(Line(first={'delay': '1ms'}, middle={'bw': 50}), caps())
    h1h2 = emu.paths.path('h1', 'h2')
    assert h1h2.rates == (0, 50_000_000, 0) and h1h2.rated() == [('s1->s2', 50_000_000)]
    h3h2 = emu.paths.path('h3', 'h2')
    assert h3h2.hops == ((0, 0), (0, 0), (0, 0)) and h3h2.active
    assert emu.paths.path('h2', 'h3').rated() == [('s2->s1', 50_000_000)]
    assert emu.paths.receivers() == ['h1', 'h2', 'h3']
    assert emu.serialises
    assert {(r['src'], r['dst']): r['mechanism'] for r in emu.records()}[('s1', 's2')] == \
        'htb+linkdelay'
    assert not linkemu.plan(Line(middle={'bw': 50}), caps()).serialises     # no daemons


def test_daemon_config_numbers_each_rated_link_once_and_lists_it_after_via(tmp_path):
    """h2's daemon: h1 -> h2 crosses s1->s2 (rated) and 5 ms, h3 -> h2 the same rated link:
    one link line, both sources via 0; the text is what the daemon's own parser accepts."""
    from repronet.emu.linkemu_paths import daemon_config
    from tests.test_linkdelay_unit import _compile, run
    from repronet.emu.linkemu_daemon import CHECK_C
    emu = linkemu.plan(Line(first={'delay': '5ms'}, middle={'bw': 50}), caps())
    ips = {'h1': ['10.0.0.1'], 'h2': ['10.0.0.2'], 'h3': ['10.0.0.3']}
    text, sources, simple, holds = daemon_config(emu.paths.to('h2'), ips.get)
    lines = [line for line in text.splitlines() if not line.startswith('#')]
    assert lines == ['link 0 50000000', '10.0.0.1 0.000000000 3 5000 0 0 0 0 0 via 0',
                     '10.0.0.3 0.000000000 3 0 0 0 0 0 0 via 0']
    assert sources == 2 and simple and holds == [5000, 0]
    conf = tmp_path / 'h2.conf'
    conf.write_text(text)
    check = _compile(tmp_path / 'linkdelay_check', list(CHECK_C), ['-lm'])
    assert run(check, 'config', conf) == {'sources': 2, 'min_hold_ns': 0}


def test_bandwidth_only_needs_no_daemon_and_no_netem():
    """bw alone is HTB on any kernel; max_queue_size without netem is a pfifo leaf."""
    emu = linkemu.plan(Line(middle={'bw': 50, 'max_queue_size': 100}), caps())
    assert not emu.needs_daemons
    by_pair = {(r['src'], r['dst']): r for r in emu.records()}
    assert by_pair[('s1', 's2')]['mechanism'] == 'htb+pfifo'
    assert by_pair[('h1', 's1')]['mechanism'] == 'none'
    assert linkemu.plan(Line(middle={'bw': 50}), caps()).mechanism == 'netem'


class Ring(Topo):
    """Three switches in a loop with a delayed host link."""

    def build(self):
        """Build the loop."""
        s = [self.addSwitch('s%d' % i) for i in (1, 2, 3)]
        self.addLink(self.addHost('h1'), s[0], delay='1ms')
        self.addLink(self.addHost('h2'), s[1])
        self.addLink(s[0], s[1])
        self.addLink(s[1], s[2])
        self.addLink(s[2], s[0])


class Router(Topo):
    """A host with two links between two switches."""

    def build(self):
        """Build h1 - s1 - r - s2 - h2."""
        s1, s2, r = self.addSwitch('s1'), self.addSwitch('s2'), self.addHost('r')
        self.addLink(self.addHost('h1'), s1, delay='1ms')
        self.addLink(s1, r)
        self.addLink(r, s2)
        self.addLink(s2, self.addHost('h2'))


@pytest.mark.parametrize('topo,kw,match', [
    (Ring(), {}, 'loop or parallel links'),
    (Router(), {}, 'host r has 2 links'),
    (Line(first={'delay': '1ms'}), {'caps': caps(nfqueue=False)}, 'no NFQUEUE'),
    (Line(first={'bw': 10}), {'caps': caps(htb=False)}, 'no sch_htb'),
    (Line(first={'loss': 1.0}), {'mechanism': 'netem'}, 'no sch_netem'),
    (Line(first={'delay': '1'}), {}, 'not a time with a unit'),
])
def test_impossible_topologies_fail_before_anything_starts(topo, kw, match):
    """plan() refuses, with one sentence, what the fallback cannot emulate faithfully."""
    with pytest.raises(LinkEmulationError, match=match) as info:
        linkemu.plan(topo, kw.get('caps', caps()), mechanism=kw.get('mechanism', 'auto'))
    assert str(info.value).endswith('.')


def test_loops_are_fine_with_netem():
    """Only the per-path fallback needs a tree; netem delays per link."""
    assert linkemu.plan(Ring(), caps(netem=True)).mechanism == 'netem'


def test_largest_values_are_accepted():
    """The upper bounds themselves are fine: 60 s delay and jitter, 1000 Mbit/s, 100000 packets."""
    p = direction_params({'delay': '60s', 'jitter': '60000ms', 'bw': 1000, 'loss': 100,
                          'max_queue_size': 100000}, 'link a->b')
    assert (p.delay_ms, p.jitter_ms, p.bw, p.loss, p.max_queue_size) == \
        (60000.0, 60000.0, 1000.0, 100.0, 100000)


def test_huge_delay_is_refused_by_plan():
    """A delay past the daemon's range stops plan() before anything starts (it used to wrap)."""
    with pytest.raises(LinkEmulationError, match=r"link h1->s1: delay='5000s' is more than 60 s"):
        linkemu.plan(Line(first={'delay': '5000s'}), caps())


class Chain(Topo):
    """h1 - s1 - s2 - ... - sN - h2: one path of N + 1 links."""

    def build(self, switches=3):
        """Build the chain with 1 ms on the first link."""
        prev = self.addHost('h1')
        for i in range(switches):
            s = self.addSwitch('s%d' % (i + 1))
            self.addLink(prev, s, **({'delay': '1ms'} if i == 0 else {}))
            prev = s
        self.addLink(prev, self.addHost('h2'))


def test_path_longer_than_the_daemon_composes_is_refused():
    """64 link directions per path is the daemon's limit; 65 fails in plan with a sentence."""
    assert linkemu.plan(Chain(switches=63), caps()).paths.longest() == 64
    with pytest.raises(LinkEmulationError, match='crosses 65 links, more than the 64'):
        linkemu.plan(Chain(switches=64), caps())


class Tree(Topo):
    """A core switch, one leaf switch per `per` hosts, every link with the given keywords."""

    def build(self, hosts=30, per=10, **link):
        """Build the tree."""
        core = self.addSwitch('s0')
        for i in range(hosts):
            if i % per == 0:
                leaf = self.addSwitch('s%d' % (i // per + 1))
                self.addLink(leaf, core, **link)
            self.addLink(self.addHost('h%d' % (i + 1)), leaf, **link)


def test_paths_in_a_tree_compose_per_receiver():
    """Every receiver reaches every other host; same-leaf paths cross 2 links, others 4."""
    emu = linkemu.plan(Tree(hosts=30, delay='1ms', loss=1.0), caps())
    into_h1 = emu.paths.to('h1')
    assert [p.src for p in into_h1] == sorted('h%d' % i for i in range(2, 31))
    by_src = {p.src: p for p in into_h1}
    assert by_src['h2'].links == ('h2->s1', 's1->h1') and by_src['h2'].delay_ms == 2.0
    assert by_src['h30'].links == ('h30->s3', 's3->s0', 's0->s1', 's1->h1')
    assert by_src['h30'].loss == pytest.approx(1 - 0.99 ** 4)
    assert emu.paths.path('h30', 'h1') == by_src['h30']
    assert emu.paths.path('h1', 'h1') is None
    assert emu.paths.receivers() == sorted('h%d' % i for i in range(1, 31))


def test_path_records_are_one_summary_per_receiver():
    """path_records() grows with the hosts, not with the host pairs: one row per receiver."""
    emu = linkemu.plan(Tree(hosts=30, delay='1ms'), caps())
    rows = emu.path_records()
    assert len(rows) == 30
    h1 = next(r for r in rows if r['dst'] == 'h1')
    assert (h1['sources'], h1['active_sources'], h1['delay_ms_min'], h1['delay_ms_max'],
            h1['hops_max'], h1['jitter']) == (29, 29, 2.0, 4.0, 4, False)


def test_path_records_list_active_receivers_only():
    """A receiver whose incoming paths are all plain has no daemon and no record."""
    emu = linkemu.plan(Line(last={'delay': '3ms'}), caps())
    rows = {r['dst']: r for r in emu.path_records()}
    assert set(rows) == {'h1', 'h2', 'h3'}
    assert (rows['h1']['sources'], rows['h1']['active_sources']) == (2, 1)
    assert rows['h2']['delay_ms_min'] == rows['h2']['delay_ms_max'] == 3.0


def test_no_delay_anywhere_on_host_paths_needs_no_daemon():
    """Delay on a link between a switch and nothing else reaches no host pair: no daemon."""
    class Spur(Topo):
        def build(self):
            s1, s2 = self.addSwitch('s1'), self.addSwitch('s2')
            self.addLink(self.addHost('h1'), s1)
            self.addLink(self.addHost('h2'), s1)
            self.addLink(s1, s2, delay='5ms')
    emu = linkemu.plan(Spur(), caps())
    assert emu.mechanism == 'linkdelay' and not emu.needs_daemons and emu.path_records() == []


def test_a_default_root_qdisc_that_cannot_be_deleted_is_no_tc_error():
    """Mininet's first step deletes the root qdisc; on a kernel whose default is fq_codel
    (Debian's; seen on an ssh tap tunnel's end between two VMs) tc says it cannot delete
    handle 0, which is harmless: the qdisc added next replaces it. Other errors still raise."""
    linkemu._raise_on_tc_error('s2-eth0', {'tcoutputs': [
        'Error: Cannot delete qdisc with handle of zero.\n', '', '']})
    with pytest.raises(LinkEmulationError, match='s2-eth0: tc refused the configuration: '
                                                 'Error: Specified qdisc kind is unknown'):
        linkemu._raise_on_tc_error('s2-eth0', {'tcoutputs': [
            'Error: Cannot delete qdisc with handle of zero.\n',
            'Error: Specified qdisc kind is unknown.\n']})
