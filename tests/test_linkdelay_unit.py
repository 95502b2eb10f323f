"""Unit tests of the linkdelay daemon's C core, built and run without root.

``repronet/emu/linkdelay/linkdelay_core.c`` (config parser, source table, per-source generators,
drop/hold decision, release heap, signal-safe wait) is compiled here with
``linkdelay_check.c``, a driver that prints JSON; the daemon itself is compiled too, to check
that it refuses a bad config or flag with one line before it touches a queue. Nothing is
compiled into the source tree. The loss checks use fixed seeds, so they are deterministic; the
binomial interval is what makes them able to fail.
"""

import json
import random
import shutil
import subprocess

import pytest

from analysis.fidelity import binom_quantiles
from repronet.emu.linkemu_daemon import CHECK_C, DAEMON_C, SOURCE_DIR

CFLAGS = ['-O2', '-Wall', '-Wextra', '-std=c11']


def _compile(out, sources, libs=()):
    """Compile sources (in SOURCE_DIR) to out; skip the test if the tools are missing."""
    if shutil.which('cc') is None:
        pytest.skip('no C compiler (cc); vagrant/provision.sh installs gcc')
    proc = subprocess.run(['cc'] + CFLAGS + ['-o', str(out)]
                          + ['%s/%s' % (SOURCE_DIR, s) for s in sources] + list(libs),
                          capture_output=True, text=True)
    if proc.returncode != 0 and 'libnetfilter_queue' in proc.stderr and \
            'No such file' in proc.stderr:
        pytest.skip('libnetfilter-queue headers missing; vagrant/provision.sh installs '
                    'libnetfilter-queue-dev')
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope='module')
def check(tmp_path_factory):
    """Path of the compiled driver."""
    out = tmp_path_factory.mktemp('linkdelay') / 'linkdelay_check'
    return _compile(out, list(CHECK_C), ['-lm'])


@pytest.fixture(scope='module')
def daemon(tmp_path_factory):
    """Path of the compiled daemon (same sources and libraries as its Makefile)."""
    out = tmp_path_factory.mktemp('linkdelay') / 'linkdelay'
    return _compile(out, list(DAEMON_C),
                    ['-lnetfilter_queue', '-lnfnetlink', '-lm'])


def run(check, *args):
    """Run the driver; return its JSON answer."""
    proc = subprocess.run([str(check)] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def config(tmp_path, lines, name='c.conf'):
    """Write a config file; return its path."""
    path = tmp_path / name
    path.write_text(''.join(line + '\n' for line in lines))
    return path


GOOD = ['# SRC LOSS NHOPS DELAY JITTER ...', '', 'link 0 100000000', 'link 1 1',
        '10.0.0.2 0.010000000 2 1000 0 2500 100 via 0 1',
        '  10.0.0.1 0 0', '10.0.0.3 1 64 ' + ' '.join(['60000000 60000000'] * 64)]

BAD = [
    # the %u parse used to wrap this to 0 us: a 71-minute delay became none
    (['10.0.0.1 0 1 4294967296 0'], ":1: delay '4294967296' of hop 1 is not a whole number "
                                    "of microseconds in 0..60000000"),
    (['10.0.0.1 0 1 18446744073709551617 0'], ":1: delay '18446744073709551617' of hop 1"),
    (['10.0.0.1 0 1 60000001 0'], ":1: delay '60000001' of hop 1"),
    (['10.0.0.1 0 1 -5 0'], ":1: delay '-5' of hop 1"),
    (['10.0.0.1 0 1 10ms 0'], ":1: delay '10ms' of hop 1"),
    (['10.0.0.1 0 1 1000 1001'], ":1: jitter '1001' of hop 1 is not a whole number of "
                                 "microseconds in 0..1000 (its delay)"),
    (['10.0.0.1 0 2 1000 0 5 -1'], ":1: jitter '-1' of hop 2"),
    (['10.0.0.1 1.5 0'], ":1: loss '1.5' is not a probability in 0..1"),
    (['10.0.0.1 nan 0'], ":1: loss 'nan'"),
    (['10.0.0.1 -0.1 0'], ":1: loss '-0.1'"),
    (['10.0.0.1 0.1x 0'], ":1: loss '0.1x'"),
    (['10.0.0.1 0 65'], ":1: hop count '65' is not a whole number in 0..64"),
    (['10.0.0.1 0 4294967297 1 0'], ":1: hop count '4294967297'"),
    (['10.0.0.1 0 2 1000 0'], ':1: 2 hops announced, fewer given'),
    (['10.0.0.1 0 1 1000 0 7'], ':1: more values than the 1 hops announced'),
    (['10.0.0.256 0 0'], ":1: '10.0.0.256' is not an IPv4 source address"),
    (['10.0.0.1'], ":1: expected 'SRC_IPV4 LOSS NHOPS DELAY_US JITTER_US ... [via LINK...]'"),
    (['link 1 1000'], ":1: link id '1' is not the next one (0)"),
    (['link 0 1000', 'link 0 1000'], ":2: link id '0' is not the next one (1)"),
    (['link 0 0'], ":1: rate '0' of link 0 is not a whole number of bits per second in "
                   "1..1000000000000"),
    (['link 0 1e6'], ":1: rate '1e6' of link 0"),
    (['link 0 1000 x'], ":1: expected 'link ID RATE_BPS', found more"),
    (['link 0 1000', '10.0.0.1 0 1 5 0 via 1'], ":2: link '1' after 'via' is not one declared "
                                                "above (1 'link' lines)"),
    (['10.0.0.1 0 1 5 0 via 0'], ":1: link '0' after 'via' is not one declared above"),
    (['link 0 1000', '10.0.0.1 0 1 5 0 via 0 0'], ":2: more links after 'via' than the 1 hops"),
    (['10.0.0.1 0 1 5 0 vía 0'], ':1: more values than the 1 hops announced'),
    (['10.0.0.1 0 0', '# x', '10.0.0.1 0 1 5 0'], ':3: source 10.0.0.1 appears again '
                                                  '(first on line 1)'),
    (['10.0.0.1 0 0 ' + ' ' * 5000], ':1: line longer than 4094 bytes'),
]


def test_good_config_parses(check, tmp_path):
    """Comments, blank lines, leading blanks, 64 hops of 60 s each: all accepted."""
    assert run(check, 'config', config(tmp_path, GOOD)) == {'sources': 3, 'min_hold_ns': 0}


def test_least_hold_is_every_hop_delay_less_its_jitter_over_the_nearest_source(check, tmp_path):
    """The lazy reads' bound: the least hold any source can draw (jitter takes up to its whole
    value off each hop); a source with no hops makes it 0 (never lazy)."""
    lines = ['10.0.0.1 0 2 50 0 50 0', '10.0.0.2 0.5 2 100 30 20 20', '10.0.0.3 0 1 1000 900']
    assert run(check, 'config', config(tmp_path, lines))['min_hold_ns'] == 70000
    assert run(check, 'config', config(tmp_path, lines + ['10.0.0.4 0 0'], 'd.conf')
               )['min_hold_ns'] == 0


def test_lazy_reads_wake_by_the_deadline_or_the_least_hold_after_the_last_read(check):
    """With packets held, the queue does not wake the daemon: it wakes at the next deadline
    or when a packet that came right after its last read (at 1,000 ns) could be due, the
    least hold (100 us) later, whichever is first; it watches the queue when nothing is held,
    when there is no least hold, when stamps are off, and when the last read left more."""
    def lazy(min_hold, off, pending, *deadline):
        out = run(check, 'lazy', min_hold, 1000, off, pending, 0, *deadline)
        return {'wake_ns': out['wake_ns'], 'watch': out['watch']}
    assert lazy(100000, 0, 0, 50000) == {'wake_ns': 50000, 'watch': 0}
    assert lazy(100000, 0, 0, 500000) == {'wake_ns': 101000, 'watch': 0}
    assert lazy(100000, 0, 0) == {'wake_ns': None, 'watch': 1}
    for min_hold, off, pending in ((0, 0, 0), (100000, 1, 0), (100000, 0, 1)):
        assert lazy(min_hold, off, pending, 500000) == {'wake_ns': 500000, 'watch': 1}


def test_lazy_reads_read_only_once_the_least_hold_has_passed(check):
    """A pass the queue did not wake (a deadline's, or one polling in the spin window) reads
    the queue only from the last read (1,000 ns) plus the least hold (100 us) on: before that
    nothing unread can be due, and reading would cost a system call for nothing."""
    due = [run(check, 'lazy', 100000, 1000, 0, 0, now, 500000)['read_due']
           for now in (1000, 50000, 100999, 101000, 400000)]
    assert due == [0, 0, 0, 1, 1]


def _refused(argv):
    """Run argv; return its single stderr line after checking exit 2 and an empty stdout."""
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)     # a daemon that got past this ends at EOF
    assert (proc.returncode, proc.stdout) == (2, ''), proc
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith('linkdelay: '), proc.stderr
    return lines[0]


@pytest.mark.parametrize('lines,message', BAD)
def test_parser_refuses_with_one_line(check, tmp_path, lines, message):
    """Overflow, garbage, out-of-range and inconsistent lines: one sentence naming file:line."""
    path = config(tmp_path, lines)
    assert _refused([check, 'config', path]) .startswith('linkdelay: %s%s' % (path, message))


@pytest.mark.parametrize('lines,message', BAD)
def test_daemon_refuses_bad_config_before_touching_a_queue(daemon, tmp_path, lines, message):
    """The daemon exits 2 with the same one line (it used to run with the wrapped value)."""
    path = config(tmp_path, lines)
    line = _refused([daemon, '--config', path, '--queue', 3, '--control-stdin'])
    assert line.startswith('linkdelay: %s%s' % (path, message))


@pytest.mark.parametrize('flags,message', [
    (['--seed', '-1'], "--seed '-1' is not a whole number"),
    (['--seed', '18446744073709551616'], "--seed '18446744073709551616'"),
    (['--queue', '65536'], "--queue '65536' is not a whole number in 0..65535"),
    (['--host-id', '7x'], "--host-id '7x'"),
    (['--bogus'], 'unknown argument'),
    (['--seed'], 'lacks its value'),
    (['--rt-priority', '99'], "--rt-priority '99' is not a whole number in 0..98"),
    (['--spin-us', '1001'], "--spin-us '1001' is not a whole number in 0..1000"),
    (['--spin-permille', '1001'], "--spin-permille '1001'"),
    (['--rt-budget-ms', '0'], '--rt-budget-ms must be at least 1'),
    (['--spin-us'], 'lacks its value'),
    (['--verdict-batch', '0'], '--verdict-batch must be at least 1'),
    (['--verdict-batch', '65'], "--verdict-batch '65' is not a whole number in 0..64"),
    (['--verdict-batch'], 'lacks its value'),
    (['--clocks-fd', '999'], 'cannot size the shared link clocks (fd 999): Bad file descriptor'),
    (['--clocks-fd'], 'lacks its value'),
])
def test_daemon_refuses_bad_flags(daemon, tmp_path, flags, message):
    """A flag value that does not fit is one line and exit 2, not a silently wrapped number."""
    path = config(tmp_path, GOOD)
    assert message in _refused([daemon, '--config', path] + flags)


def test_source_lookup_finds_every_source_in_a_large_table(check, tmp_path):
    """2,000 sources in random order: each address finds its own line, absent ones none."""
    rnd = random.Random(5)
    addrs = rnd.sample(range(1, 2 ** 24), 2050)
    present, absent = addrs[:2000], addrs[2000:]
    ip = lambda n: '10.%d.%d.%d' % (n >> 16, (n >> 8) & 255, n & 255)   # noqa: E731
    path = config(tmp_path, ['%s 0 1 %d 0' % (ip(n), i) for i, n in enumerate(present)])
    queries = present[::-1] + absent
    lines = run(check, 'lookup', path, *[ip(n) for n in queries])['lines']
    assert lines == list(range(2000, 0, -1)) + [None] * 50


def test_equal_deadlines_leave_in_arrival_order(check):
    """The heap orders by deadline, and by arrival among equal deadlines."""
    assert run(check, 'heap', *[7] * 50)['order'] == list(range(50))
    rnd = random.Random(1)
    deadlines = [rnd.randrange(20) for _ in range(3000)]
    expected = sorted(range(3000), key=lambda i: (deadlines[i], i))
    assert run(check, 'heap', *deadlines)['order'] == expected


def test_no_jitter_holds_exactly_and_keeps_order(check, tmp_path):
    """Without jitter every packet is held for the path delay and none is reordered."""
    path = config(tmp_path, ['10.0.0.1 0 2 1000 0 250 0'])
    out = run(check, 'simulate', path, 7, 20000, '10.0.0.1x2000')
    assert out['sources']['10.0.0.1']['holds_ns'] == [1250000] * 2000
    assert out['release'] == list(range(2000))


def test_jitter_reorders_by_deadline_within_its_bounds(check, tmp_path):
    """One uniform draw per hop: holds stay within the summed bounds, average to the delay,
    and packets leave in deadline order, so jitter larger than the gap reorders them."""
    path = config(tmp_path, ['10.0.0.1 0 2 1000 400 500 100'])
    gap = 20000
    out = run(check, 'simulate', path, 7, gap, '10.0.0.1x4000')
    holds = out['sources']['10.0.0.1']['holds_ns']
    assert len(holds) == 4000
    assert 1000000 <= min(holds) and max(holds) <= 2000000
    assert abs(sum(holds) / len(holds) - 1500000) < 30000      # ~8 standard errors
    assert out['release'] == sorted(range(4000), key=lambda k: (k * gap + holds[k], k))
    assert out['release'] != list(range(4000))


@pytest.mark.parametrize('loss', [0.01, 0.1, 0.5])
def test_loss_rate_within_binomial_bound(check, tmp_path, loss):
    """For ten seeds, the drop count of 20,000 packets lies in the 99.9 % binomial interval."""
    path = config(tmp_path, ['10.0.0.1 %.9f 1 1000 0' % loss])
    lo, hi = binom_quantiles(20000, loss, 0.0005, 0.9995)
    for seed in range(1, 11):
        out = run(check, 'simulate', path, 3, 1000, 'seed=%d' % seed, '10.0.0.1x20000')
        assert lo <= len(out['sources']['10.0.0.1']['dropped']) <= hi, seed


def test_loss_zero_and_one(check, tmp_path):
    """Probability 0 never drops, 1 always does."""
    path = config(tmp_path, ['10.0.0.1 0 0', '10.0.0.2 1 0'])
    out = run(check, 'simulate', path, 3, 1000, '10.0.0.1,10.0.0.2x1000')
    assert out['sources']['10.0.0.1']['dropped'] == []
    assert out['sources']['10.0.0.2']['dropped'] == list(range(1000))


def _drops(check, path, host, *steps):
    """{source: dropped indices} of one simulated run."""
    out = run(check, 'simulate', path, host, 1000, *steps)
    return {src: s['dropped'] for src, s in out['sources'].items()}


def test_same_seed_same_drops_and_each_source_its_own_stream(check, tmp_path):
    """Drops depend on (seed, receiving host, source) and the source's own packets only."""
    path = config(tmp_path, ['10.0.0.1 0.1 1 10 5', '10.0.0.2 0.1 1 10 5'])
    a = _drops(check, path, 3, 'seed=11', '10.0.0.1,10.0.0.2x3000')
    assert a == _drops(check, path, 3, 'seed=11', '10.0.0.1,10.0.0.2x3000')
    assert a['10.0.0.1'] != a['10.0.0.2']                   # not one shared pattern
    assert a['10.0.0.1'] != _drops(check, path, 3, 'seed=12', '10.0.0.1x3000')['10.0.0.1']
    assert a['10.0.0.1'] != _drops(check, path, 4, 'seed=11', '10.0.0.1x3000')['10.0.0.1']
    # the other source's packets, interleaved or not, do not move this source's drops
    assert a['10.0.0.1'] == _drops(check, path, 3, 'seed=11', '10.0.0.1x3000')['10.0.0.1']
    assert a['10.0.0.2'] == _drops(check, path, 3, 'seed=11', '10.0.0.2x1000',
                                   '10.0.0.1,10.0.0.2x2000')['10.0.0.2']


def test_reseed_gives_the_same_drops_as_a_fresh_start(check, tmp_path):
    """After 'seed N' the draws are those of a daemon started with seed N (per-point seeds)."""
    path = config(tmp_path, ['10.0.0.1 0.2 0'])
    fresh = _drops(check, path, 3, 'seed=99', '10.0.0.1x2000')['10.0.0.1']
    later = _drops(check, path, 3, 'seed=5', '10.0.0.1x1234', 'seed=99',
                   '10.0.0.1x2000')['10.0.0.1']
    assert [k - 1234 for k in later if k >= 1234] == fresh


def test_signal_between_flag_check_and_wait_ends_the_wait(check):
    """A SIGUSR1 that lands after the loop checked its flags must still wake its ppoll.

    Without the blocked mask the handler ran at once, the flag was set after the check, and
    ppoll slept through (the driver then waits 10 s and reports a timeout).
    """
    assert run(check, 'wait-signal') == {'woke': 'signal'}


def test_busy_poll_wakes_early_and_polls_only_close_to_a_deadline(check):
    """100 us threshold: a deadline 500 us away sleeps 400 us, one 100 us or closer polls."""
    out = run(check, 'spin', 100, 250, '0:500000', '1000:100000', '2000:30000')
    assert out['sleep_ns'] == [400000, 0, 0]


def test_busy_poll_stops_when_its_share_of_the_window_is_spent(check):
    """250 per mille of a 100 ms window is 25 ms: after 26 ms of polling the loop sleeps to
    the deadline until the next window starts, then polls again."""
    out = run(check, 'spin', 100, 250, '0:50000:20000000', '20000000:50000:6000000',
              '26000000:50000', '99999999:50000', '100000000:50000')
    assert out['sleep_ns'] == [0, 0, 50000, 50000, 0]
    assert out['spun_ns'] == 26000000 and out['exhausted'] == 1


def test_busy_poll_off_sleeps_the_whole_wait(check):
    """Threshold 0 or a zero share: never poll."""
    assert run(check, 'spin', 0, 250, '0:50000')['sleep_ns'] == [50000]
    assert run(check, 'spin', 100, 0, '0:50000')['sleep_ns'] == [50000]


def test_spin_window_is_the_cap_until_enough_sleeps_were_seen(check):
    """Fewer than 16 timed sleeps: no quantile yet, the window is the 400 us cap."""
    out = run(check, 'learn', 400, *[30000] * 15)
    assert out['spin_ns'] == [400000] * 15 and out['max_ns'] == 30000


def test_spin_window_learns_the_high_quantile_of_overshoots(check):
    """The window is the 0.95 quantile of the remembered overshoots plus 5 us, recomputed
    every 16 sleeps: 16 sleeps 30 us late give 35 us; once 10 of 48 woke 200 us late
    (more than 5 %) it grows to 205 us; a single 500 us outlier among 32 does not move it
    past what 95 % of sleeps needed."""
    out = run(check, 'learn', 400, *[30000] * 16)
    assert out['spin_ns'][-1] == 35000 and out['quantile_ns'] == 30000
    out = run(check, 'learn', 400, *([30000] * 38 + [200000] * 10))
    assert out['spin_ns'][15] == 35000 and out['spin_ns'][-1] == 205000
    out = run(check, 'learn', 400, *([30000] * 31 + [500000]))
    assert out['spin_ns'][-1] == 35000 and out['max_ns'] == 500000


def test_spin_window_stays_within_floor_and_cap(check):
    """On time sleeps still poll 10 us (the floor); sleeps later than the cap spin the cap."""
    assert run(check, 'learn', 400, *[0] * 16)['spin_ns'][-1] == 10000
    assert run(check, 'learn', 150, *[900000] * 16)['spin_ns'][-1] == 150000
    assert run(check, 'learn', 0, *[900000] * 16)['spin_ns'][-1] == 0   # polling off


def test_spin_window_forgets_old_overshoots(check):
    """Only the last 128 sleeps count: 128 late ones (300 us) followed by 128 on time (20 us)
    bring the window back to 25 us."""
    out = run(check, 'learn', 400, *([300000] * 128 + [20000] * 128))
    assert out['spin_ns'][127] == 305000 and out['spin_ns'][-1] == 25000


def _passes(times_ms, count, cpu):
    """Loop passes NOW_NS:NVCSW:CPU_NS at times_ms, with count(t) and cpu(t) (ms) at each."""
    return ['%d:%d:%d' % (t * 1000000, count(t), cpu(t) * 1000000) for t in times_ms]


def test_daemon_sleeps_when_it_has_run_a_period_without_sleeping(check):
    """Period 50 ms, read every 7 ms here: a daemon that polls without sleeping (CPU time
    grows with the wall clock) must sleep at 56 ms, the first read with 50 ms of CPU since it
    started; that sleep blocked (the switch count moved by the next read), so the next one is
    due 50 ms of CPU after it, at 112 ms."""
    times = range(7, 120, 7)
    out = run(check, 'block', 50000000, *_passes(times, lambda t: (t > 56) + (t > 112),
                                                 lambda t: t))
    assert [t for t, due in zip(times, out['due']) if due] == [56, 112]
    assert out['forced'] == 2


def test_a_forced_sleep_that_did_not_block_is_asked_again(check):
    """The same daemon, but its forced sleeps never show as a voluntary switch (the timer
    fired before it was switched out): every read from 56 ms on asks again, so the kernel's
    RLIMIT_RTTIME count cannot grow past a period plus one read. With the sleep trusted (the
    code before this test) the second request came only at 112 ms."""
    times = range(7, 120, 7)
    out = run(check, 'block', 50000000, *_passes(times, lambda t: 0, lambda t: t))
    assert [t for t, due in zip(times, out['due']) if due] == [t for t in times if t >= 56]


def test_daemon_that_sleeps_or_waits_is_left_alone(check):
    """No forced sleep while the switch count moves between reads, while the daemon waits
    for a CPU (wall time passes, its CPU time does not), after a long idle sleep (the CPU it
    used since that sleep counts, not the wall time), or with the check off."""
    times = range(0, 400, 7)
    assert run(check, 'block', 50000000, *_passes(times, lambda t: t, lambda t: t))[
        'forced'] == 0
    assert run(check, 'block', 50000000, *_passes(times, lambda t: 0, lambda t: 1))[
        'forced'] == 0
    assert run(check, 'block', 50000000, *_passes([1, 10000, 10007], lambda t: t > 1,
                                                  lambda t: 1 + (t > 1) + (t > 10000)))[
        'forced'] == 0
    assert run(check, 'block', 0, *_passes([0, 900], lambda t: 0, lambda t: t))['forced'] == 0
