"""The linkdelay daemon's serialisation (``repronet/emu/linkdelay/linkdelay_wire.c``), without
root: closed-form times on one and two links, a GSO packet timed as the frames it becomes,
one clock per link shared by every source, no drift against HTB's pacing, and the lengths
read from packets scapy builds (a tool we did not write)."""

import pytest
from hypothesis import given, settings, strategies as st

from repronet.emu.linkemu_holds import late_bound_us
from tests.test_linkdelay_unit import check, config, run   # noqa: F401 (fixture)

MTU, L2 = 1500, 14


def ns(nbytes, rate):
    """Time of nbytes + the L2 header at rate bits/s, in whole ns (the daemon floors)."""
    return (nbytes + L2) * 8 * 10**9 // rate


def frames(ip_len, hdr):
    """The IP sizes of the frames a packet of ip_len with hdr bytes of headers becomes."""
    if ip_len <= MTU:
        return [ip_len]
    mss, payload = MTU - hdr, ip_len - hdr
    n = -(-payload // mss)
    return [MTU] * (n - 1) + [hdr + payload - (n - 1) * mss]


def serialise(check, tmp_path, lines, packets):
    """Run the driver on packets [(ip, ready_ns, ip_len, hdr)]; return its answer."""
    path = config(tmp_path, lines)
    return run(check, 'serialise', path, *('%s:%d:%d:%d' % p for p in packets))


def test_one_packet_takes_its_bits_on_each_link(check, tmp_path):
    """1,500 bytes over two 100 Mbit/s links, store-and-forward: 2 x 1,514 x 80 ns; a
    source without rated links leaves at once."""
    out = serialise(check, tmp_path, ['link 0 100000000', 'link 1 100000000',
                                      '10.0.0.1 0 2 50 0 50 0 via 0 1', '10.0.0.2 0 1 50 0'],
                    [('10.0.0.1', 1000, 1500, 52), ('10.0.0.2', 5000, 1500, 52)])
    assert out['done_ns'] == [1000 + 2 * 121120, 5000]


def test_a_gso_packet_leaves_when_its_last_frame_does(check, tmp_path):
    """65,160 bytes (TCP, 52 bytes of headers) over two equal links: 45 frames pipelined, the
    last byte after all of them on the first link plus the largest on the second."""
    rate = 100_000_000
    out = serialise(check, tmp_path, ['link 0 %d' % rate, 'link 1 %d' % rate,
                                      '10.0.0.1 0 2 0 0 0 0 via 0 1'],
                    [('10.0.0.1', 0, 65160, 52)])
    sizes = frames(65160, 52)
    assert len(sizes) == 45
    assert out['done_ns'] == [sum(ns(b, rate) for b in sizes) + ns(max(sizes), rate)]


@settings(max_examples=60, deadline=None)
@given(ip_len=st.integers(1501, 65535), hdr=st.sampled_from([28, 40, 52, 60]),
       rates=st.lists(st.integers(10**6, 10**10), min_size=1, max_size=4),
       ready=st.integers(0, 10**12))
def test_gso_packet_equals_its_frames_sent_one_by_one(check, tmp_path_factory, ip_len, hdr,
                                                      rates, ready):
    """Whole or cut by the kernel before the queue, the same bytes leave at the same time."""
    lines = ['link %d %d' % (i, r) for i, r in enumerate(rates)]
    via = ' '.join(map(str, range(len(rates))))
    nhops = '%d %s' % (len(rates), ' '.join(['0 0'] * len(rates)))
    lines += ['10.0.0.1 0 %s via %s' % (nhops, via), '10.0.0.2 0 %s via %s' % (nhops, via)]
    tmp = tmp_path_factory.mktemp('wire')
    whole = serialise(check, tmp, lines, [('10.0.0.1', ready, ip_len, hdr)])
    cut = serialise(check, tmp, lines, [('10.0.0.2', ready, b, hdr)
                                        for b in frames(ip_len, hdr)])
    assert whole['done_ns'][0] == cut['done_ns'][-1]
    assert whole['links'] == cut['links']


def test_sources_share_the_clock_of_a_link_they_both_cross(check, tmp_path):
    """Two senders into one receiver: the second packet waits for the first on the shared
    last link, not on the first sender's own link."""
    rate = 10_000_000
    out = serialise(check, tmp_path, ['link 0 %d' % rate, 'link 1 %d' % rate,
                                      'link 2 %d' % rate,
                                      '10.0.0.1 0 2 0 0 0 0 via 0 2',
                                      '10.0.0.2 0 2 0 0 0 0 via 1 2'],
                    [('10.0.0.1', 0, 1000, 28), ('10.0.0.2', 0, 1000, 28)])
    t = ns(1000, rate)
    assert out['done_ns'] == [2 * t, 3 * t]
    assert out['links'] == [t, t, 2 * t]


@pytest.mark.parametrize('rate', [7_000_000, 100_000_000, 999_999_937])
def test_no_backlog_builds_behind_htb_pacing(check, tmp_path, rate):
    """Packets arriving exactly at the line rate (as HTB paces them, whole ns) leave one
    frame time later, every one: the clock never runs slower than the rate, so it cannot
    hold a saturated link's packets ever longer (a clock that rounds up fails here)."""
    exact = (1500 + L2) * 8 * 10**9 / rate
    packets = [('10.0.0.1', int(i * exact), 1500, 52) for i in range(3000)]
    out = serialise(check, tmp_path, ['link 0 %d' % rate, '10.0.0.1 0 1 0 0 via 0'], packets)
    waits = [d - p[1] for d, p in zip(out['done_ns'], packets)]
    assert max(waits) <= ns(1500, rate) + 1, (min(waits), max(waits))


def test_lengths_read_from_real_packets(check):
    """IP total length and IP + transport header length, as the daemon reads them from the
    40 bytes it copies, for packets scapy builds: TCP with options, UDP, ICMP, IP options;
    IPv6 and a truncated header give null (the daemon then counts one full frame)."""
    scapy = pytest.importorskip('scapy.all')
    ip = scapy.IP(src='10.0.0.1', dst='10.0.0.2')
    cases = [
        (ip / scapy.TCP(options=[('Timestamp', (1, 2)), ('NOP', None), ('NOP', None)])
         / (b'x' * 1000), 52),
        (ip / scapy.TCP() / (b'x' * 10), 40),
        (ip / scapy.UDP() / (b'x' * 3000), 28),
        (ip / scapy.ICMP() / b'ping', 20),
        (scapy.IP(dst='10.0.0.2', options=[scapy.IPOption_RR(routers=['1.2.3.4'] * 4)])
         / scapy.TCP(), 20 + 20 + 20),
    ]
    for pkt, hdr in cases:
        raw = bytes(pkt)
        assert run(check, 'wire', raw[:40].hex()) == {'ip_len': len(raw), 'hdr_len': hdr}, \
            pkt.summary()
    assert run(check, 'wire', bytes(scapy.IPv6() / scapy.UDP())[:40].hex()) == {'ip_len': None}
    assert run(check, 'wire', '4500') == {'ip_len': None}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40 * 10**6), min_size=1, max_size=40),
       st.sampled_from([0.5, 0.9, 0.99]))
def test_the_lateness_histogram_bounds_each_quantile(check, late_ns, q):
    """The stats' histogram (linkdelay_core.c): each release lands in the bucket of its whole
    microseconds' bit length (under 1 us in bucket 0, 2^14 us and more in the last), and the
    bound printed for a quantile is the upper edge of the bucket holding the nearest-rank
    quantile of the sorted releases (null in the open last bucket): never below it, and
    less than twice it (fails with buckets off by one either way); the Python reading of
    summed histograms (linkemu_holds.late_bound_us) gives the same bound."""
    out = run(check, 'late', *map(str, late_ns))
    expected = [0] * 16
    for v in late_ns:
        expected[min((v // 1000).bit_length(), 15)] += 1
    assert out['hist'] == expected
    rank = max(1, int(q * len(late_ns) + 0.5))
    value_us = sorted(late_ns)[rank - 1] / 1000
    bound = out['bounds_us'][[0.5, 0.9, 0.99].index(q)]
    assert late_bound_us(out['hist'], q) == bound     # the manifest's summed bounds agree
    if (int(value_us)).bit_length() >= 15:
        assert bound is None
    else:
        assert value_us < bound <= max(1, 2 * value_us)


def test_workers_sharing_the_clocks_time_packets_as_one_daemon(check, tmp_path):
    """A host's daemon as two workers (one per CPU, linkdelay.c) whose link clocks share one
    memory file (ld_share_clocks): packets alternating between them queue behind each
    other on a link exactly as through one daemon. The second and third packets wait for
    the first: with a clock per worker they would not."""
    lines = ['link 0 100000000', 'link 1 10000000', '10.0.0.1 0 2 50 0 50 0 via 0 1',
             '10.0.0.2 0 1 50 0 via 1']
    packets = [('10.0.0.1', 0, 1500, 40), ('10.0.0.2', 0, 3000, 40),
               ('10.0.0.1', 100, 60, 40), ('10.0.0.2', 10**7, 1500, 40)]
    path = config(tmp_path, lines)
    args = ['%s:%d:%d:%d' % p for p in packets]
    one = run(check, 'serialise', path, *args)
    two = run(check, 'serialise-shared', path, *args)
    assert two == one
    first = ns(1500, 10**8) + ns(1500, 10**7)
    # the second: three frames (1,500, 1,500, 80 bytes) on link 1 once the first has left it
    assert one['done_ns'][:2] == [first, first + 2 * ns(1500, 10**7) + ns(80, 10**7)]


def test_two_workers_racing_for_a_link_lose_no_reservation(check, tmp_path):
    """Two processes (two workers on two CPUs) send 2,000,000 frames each through one shared
    link, all ready at once: the link never idles, so its clock must end at the sum of
    their work. A plain read-then-write of the clock lost 2.5 s of 36.5 here; the
    compare-and-swap loses none."""
    path = config(tmp_path, ['link 0 100000000', '10.0.0.1 0 1 50 0 via 0'])
    out = run(check, 'clock-race', path, '10.0.0.1', '2000000')
    assert out['busy_ns'] == 2 * 2_000_000 * ns(100, 10**8)
    assert out['clock_ns'] == out['busy_ns']
