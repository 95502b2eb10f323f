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
    ({'bw': 0}, 'above 0'),
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
    h1h2 = emu.paths[('h1', 'h2')]
    assert h1h2.hops == ((5000, 0), (1000, 1000), (10000, 0))
    assert h1h2.delay_ms == pytest.approx(16.0)
    assert h1h2.loss == pytest.approx(1 - 0.9 * 0.8)
    assert h1h2.links == ('h1->s1', 's1->s2', 's2->h2')
    h3h1 = emu.paths[('h3', 'h1')]
    assert h3h1.hops == ((0, 0), (5000, 0)) and h3h1.loss == pytest.approx(0.1)
    assert emu.needs_daemons
    assert {r['mechanism'] for r in emu.records()} >= {'linkdelay', 'none'}


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


def test_path_records_list_active_pairs_only():
    """path_records() has one entry per delayed host pair, none for plain pairs."""
    emu = linkemu.plan(Line(last={'delay': '3ms'}), caps())
    pairs = {(r['src'], r['dst']) for r in emu.path_records()}
    assert pairs == {('h1', 'h2'), ('h2', 'h1'), ('h3', 'h2'), ('h2', 'h3')}
