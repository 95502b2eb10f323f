"""Root test of issue 15: the delay daemons release LAN-scale holds on time beside a CPU hog.

h1 - s1 - h2, 0.05 ms on both links (each packet's configured hold: 100 us), two busy-looping
processes in the hosts (with the probe and the daemons, more runnable work than the 2 cores
of the development machine), 1,000 request-response exchanges (``benchmarks/lan_latency.py``
builds it all; this test only asserts).

Asserted: the daemons' logged mean lateness (from each packet's kernel arrival stamp to its
release) stays under issue 15's idle bound, 5 us, times MARGIN = 10, i.e. 50 us. Why 10: the
machine is shared (other runs and a QEMU build share its 2 cores), and the bound must still be
far below what an unfixed daemon does. Measured with load averages of 5-6 from other work:
this test logged 0.8, 1.9, 4.9, 9.0 and 29.7 us (the last with this machine's whole non-root
suite running beside it), and ``benchmarks/lan_latency.py``'s hogs
row at 0.05 ms per link 1.3, 1.4, 3.2 and 32 us in four runs (so 50 us is not far above the
worst seen); the daemon of commit 48e91bb (SCHED_OTHER, no busy-poll, hold counted from when
it read the packet) logged 392 us in this test, 8 times the bound, and fails it (checked by
building 48e91bb's daemon and link modules in place, then restoring them). At 25245f8, load
average 8: 23.1 us. Also asserted: neither daemon left SCHED_FIFO, and each recorded its
learned spin window within its floor and cap, and its CPU budget (a daemon that prints no
window, as bf1644d's, fails here).
"""

import time

import pytest

pytestmark = pytest.mark.root

IDLE_BOUND_US = 5.0     # issue 15: idle mean lateness at most 5 us
MARGIN = 10             # see the module docstring
DELAY_MS = 0.05
HOGS = 2
COUNT = 1000


def test_mean_lateness_beside_a_cpu_hog(tmp_path):
    """Mean lateness <= 5 us x 10 with hogs; the daemons ran SCHED_FIFO on kernel stamps."""
    from benchmarks.lan_latency import lateness, pair, request_response, start_hogs, stop_hogs
    from repronet.emu import capabilities, network
    began = time.time()
    net = network.Network(pair(DELAY_MS), 'lxbr', 'auto', capabilities.probe(), seed=1,
                          log_dir=tmp_path).start()
    hogs = []
    try:
        hogs = start_hogs(net.net, HOGS)
        rtts = request_response(net.net, tmp_path, COUNT, 0.0005)
        stats = net.links.daemon_stats()
        schedule = net.mechanisms().get('link_daemons')
    finally:
        stop_hogs(hogs)
        net.stop()
    holds = net.links.daemon_holds()
    figures = lateness(stats)
    print('mean lateness %.2f us, worst %.1f us, queued %.2f us, %d echoes; %s' % (
        figures['late_us_mean'], figures['late_us_max'], figures['queued_us_mean'] or 0,
        len(rtts), schedule))
    assert len(rtts) >= 0.99 * COUNT
    assert set(stats) == {'h1', 'h2'}
    assert figures['late_us_mean'] <= IDLE_BOUND_US * MARGIN
    assert figures['stamped_share'] == 1.0
    assert set(schedule['policy_got'].values()) == {'fifo'}
    # What the runner records for every report (analysis.machine.holds): the 100 us holds.
    assert holds['hold_us_min'] == holds['hold_us_max'] == 100
    assert holds['released'] >= 2 * len(rtts)
    assert holds['marked'] == (holds['late_us_mean'] > 0.1 * 100)
    assert abs(holds['late_us_mean'] - figures['late_us_mean']) < 5.0
    # The mean splits into read, chain and wake without remainder, and the summed histogram
    # counts every release once (linkdelay.c's release_due, linkemu_holds.record).
    split = sum(holds['late_%s_us_mean' % part] for part in ('read', 'chain', 'wake'))
    assert abs(split - holds['late_us_mean']) < 0.01
    assert min(holds['late_%s_us_mean' % part] for part in ('read', 'chain', 'wake')) >= 0
    assert sum(holds['late_hist_log2_us']) == holds['released']
    # The worst release is named with its daemon and its moment, inside the test's own time
    # (the daemon converts its monotonic clock to Unix seconds), for the runner's CPU sample.
    top = max(holds['daemons'], key=lambda r: r['late_us_max'])
    assert holds['late_max_host'] == top['host'] and holds['late_us_max'] == top['late_us_max']
    assert began < holds['late_max_at'] < time.time()
    # Neither daemon left the real-time class, and each recorded the spin window it used
    # (learned from its own sleeps, within the floor and the cap) and its CPU budget.
    assert holds['rt_demoted'] == []
    for row in holds['daemons']:
        assert 10 <= row['spin_us'] <= row['spin_cap_us'] == schedule['spin_us_cap']
        assert row['spin_permille'] == schedule['spin_permille'] > 0


def test_regular_sleep_keeps_a_polling_daemon_realtime(tmp_path):
    """The kernel demotes a SCHED_FIFO loop that polls without sleeping once it has run its
    RLIMIT_RTTIME budget (here 20 ms), and the daemon's regular sleep prevents that.

    ``linkdelay_check rttime`` polls for 300 ms at SCHED_FIFO 10 with the daemon's SIGXCPU
    handler and scheduling code: without the regular sleep it must be demoted (the kernel
    enforces the bound: 22-23 ms here, so the second half is able to fail, as it does with the
    regular sleep off); with it (every 5 ms of CPU, a quarter of the budget) it must stay
    real-time. About 0.6 s of one CPU at SCHED_FIFO.
    """
    from repronet.emu.linkemu_daemon import CHECK_C
    from tests.test_linkdelay_unit import _compile, run
    check = _compile(tmp_path / 'linkdelay_check', list(CHECK_C), ['-lm'])
    bare = run(check, 'rttime', 20, 300, 0)
    assert bare['demoted'] == 1 and bare['forced'] == 0, bare
    guarded = run(check, 'rttime', 20, 300, 1)
    assert guarded == {'demoted': 0, 'demoted_after_ms': None, 'forced': guarded['forced']}
    assert guarded['forced'] >= 10, guarded     # about one per 5 ms of CPU over 300 ms


def test_a_spinning_daemon_yields_to_a_pinned_peer(tmp_path):
    """A worker that busy-polls at SCHED_FIFO lets another real-time worker pinned to its CPU
    run when that one's timer fires (ld_spin_yield).

    ``linkdelay_check yield 60 Y`` pins two SCHED_FIFO 10 processes to CPU 0: one sleeps until
    5 ms after the start, the other polls (zero-timeout ppoll, as a spinning daemon) for 60 ms.
    Without the yield (Y = 0, the daemon before ld_spin_yield) the sleeper cannot run until the
    poll ends, about 55 ms late: FIFO has no time slice, and a pinned task cannot be moved to
    the idle CPU. With it (Y = 1) it runs within the next pass: bounded here by 2 ms, far under
    55, since the machine is shared. dht8 at its default scale: 18.2 and 20.5 us mean lateness
    with the workers before, 5.6 after (docs/link-emulation.md, "Step 13"). About 0.12 s of
    CPU 0 at SCHED_FIFO.
    """
    from repronet.emu.linkemu_daemon import CHECK_C
    from tests.test_linkdelay_unit import _compile, run
    check = _compile(tmp_path / 'linkdelay_check', list(CHECK_C), ['-lm'])
    stuck = run(check, 'yield', 60, 0)
    assert stuck['late_us'] > 40000 and stuck['yields_slow'] == 0, stuck
    polite = run(check, 'yield', 60, 1)
    assert 0 <= polite['late_us'] < 2000, polite
