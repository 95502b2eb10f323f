"""One host's linkdelay daemon as one worker per CPU (``repronet/emu/linkemu_workers.py``),
without root: how the CPUs are split, the rule's target, and the one line per event every
reader gets from the workers' lines (sums, maxima, weighted means, the histogram and the
bounds recomputed from it, links and sources by key). The root tests that run real workers:
tests/test_linkdelay_*_root.py and tests/test_link_cpus_root.py."""

import json

import pytest

from repronet.emu import linkemu_workers as workers
from repronet.emu.linkemu_holds import late_bound_us


def line(**fields):
    base = {'event': 'stats', 'arrivals': 10, 'released': 0, 'late_us_mean': 0.0,
            'late_us_max': 0.0, 'late_us_max_at': None, 'queued_us_mean': 0.0, 'stamped': 0,
            'late_hist_log2_us': [0] * 16, 'late_us_bounds': {'p50': 0}, 'policy': 'fifo',
            'rt_demoted_after_s': None, 'queue': 0, 'seed': 7,
            'links': [{'id': 0, 'rate_bps': 10**8, 'packets': 0, 'busy_ms': 0.0}],
            'sources': []}
    base.update(fields)
    return base


def hist(**buckets):
    h = [0] * 16
    for k, v in buckets.items():
        h[int(k[1:])] = v
    return h


def test_one_worker_keeps_its_line_as_it_is():
    one = line(released=3)
    assert workers.merge([one]) is one


def test_two_workers_read_as_one_daemon():
    a = line(arrivals=100, released=90, late_us_mean=2.0, late_us_max=40.0,
             late_us_max_at=1000.5, stamped=90, queued_us_mean=10.0,
             late_hist_log2_us=hist(b0=80, b3=10), queue=0, rt_demoted_after_s=None,
             links=[{'id': 0, 'rate_bps': 10**8, 'packets': 90, 'busy_ms': 1.5}],
             sources=[{'src': '10.0.0.1', 'packets': 100, 'dropped': 1}])
    b = line(arrivals=20, released=10, late_us_mean=12.0, late_us_max=900.0,
             late_us_max_at=2000.25, stamped=10, queued_us_mean=30.0,
             late_hist_log2_us=hist(b0=1, b10=9), queue=1, rt_demoted_after_s=3.5,
             links=[{'id': 0, 'rate_bps': 10**8, 'packets': 10, 'busy_ms': 0.25}],
             sources=[{'src': '10.0.0.2', 'packets': 15, 'dropped': 0},
                      {'src': '10.0.0.1', 'packets': 5, 'dropped': 2}])
    got = workers.merge([a, b])
    assert got['workers'] == 2
    assert (got['arrivals'], got['released'], got['stamped']) == (120, 100, 100)
    assert got['late_us_mean'] == pytest.approx((90 * 2.0 + 10 * 12.0) / 100)
    assert got['queued_us_mean'] == pytest.approx((90 * 10.0 + 10 * 30.0) / 100)
    assert (got['late_us_max'], got['late_us_max_at']) == (900.0, 2000.25)
    assert got['late_hist_log2_us'] == hist(b0=81, b3=10, b10=9)
    assert got['late_us_bounds']['p50'] == 1
    assert got['late_us_bounds']['p99'] == late_bound_us(got['late_hist_log2_us'], 0.99) == 1024
    assert got['rt_demoted_after_s'] == 3.5
    assert (got['policy'], got['seed'], got['queue']) == ('fifo', 7, [0, 1])
    assert got['links'] == [{'id': 0, 'rate_bps': 10**8, 'packets': 100, 'busy_ms': 1.75}]
    assert sorted(got['sources'], key=lambda s: s['src']) == [
        {'src': '10.0.0.1', 'packets': 105, 'dropped': 3},
        {'src': '10.0.0.2', 'packets': 15, 'dropped': 0}]
    assert a['arrivals'] == 100 and a['links'][0]['packets'] == 90     # inputs untouched


def test_workers_without_releases_have_a_zero_mean_and_no_worst_moment():
    got = workers.merge([line(), line()])
    assert (got['late_us_mean'], got['late_us_max_at'], got['late_us_bounds']['p50']) == \
        (0.0, None, 0)


def test_worker_cpus_split_every_cpu_once(monkeypatch):
    monkeypatch.setattr(workers.os, 'cpu_count', lambda: 12)
    sets = workers.worker_cpus(local=True, reserved=False)
    assert len(sets) == workers.WORKERS_MAX == 8
    assert sets[0] == {0, 8} and sets[7] == {7}
    assert sorted(c for s in sets for c in s) == list(range(12))
    monkeypatch.setattr(workers.os, 'cpu_count', lambda: 2)
    assert workers.worker_cpus(local=True, reserved=False) == [{0}, {1}]


@pytest.mark.parametrize('local,reserved,draws,fanout,cpus', [
    (False, False, False, True, 2), (True, True, False, True, 2),
    (True, False, True, True, 2), (True, False, False, False, 2),
    (True, False, False, True, 1)])
def test_one_unpinned_worker_where_fanout_cannot_help(monkeypatch, local, reserved, draws,
                                                      fanout, cpus):
    """A host on another server, CPUs reserved for the daemons, loss or jitter on a path
    (a seed must repeat its draws: one generator in arrival order), --link-queues one,
    one CPU."""
    monkeypatch.setattr(workers.os, 'cpu_count', lambda: cpus)
    assert workers.worker_cpus(local=local, reserved=reserved, draws=draws,
                               fanout=fanout) == [None]


def test_rule_spreads_by_cpu_only_with_workers():
    assert workers.rule_target(1) == '--queue-num 0'
    assert workers.rule_target(2) == '--queue-balance 0:1 --queue-cpu-fanout'


def test_a_host_daemon_merges_only_what_every_worker_printed(tmp_path):
    """stats() waits for every worker's answer: the merged list grows only once all printed."""
    paths = []
    for k, lines in enumerate([[line(arrivals=1), line(arrivals=2)], [line(arrivals=5)]]):
        path = tmp_path / f'w{k}.jsonl'
        path.write_text(''.join(json.dumps(x) + '\n' for x in lines) + '{"event": "st')
        paths.append(str(path))
    daemon = workers.HostDaemon(host=None, intfs=[])
    daemon.log_paths = paths
    got = daemon.events('stats')
    assert [g['arrivals'] for g in got] == [6]


def test_a_worker_reads_its_own_queue_and_shares_the_clocks():
    from repronet.emu.linkemu_daemon import daemon_argv, host_id

    def flag(argv, name):
        return argv[argv.index(name) + 1] if name in argv else None

    first = daemon_argv('linkdelay', 'c.conf', 7, 'h2', 4, False)
    second = daemon_argv('linkdelay', 'c.conf', 7, 'h2', 4, False, worker=1, clocks_fd=9)
    assert (flag(first, '--queue'), flag(second, '--queue')) == ('0', '1')
    assert flag(first, '--host-id') == flag(second, '--host-id') == str(host_id('h2'))
    assert (flag(first, '--clocks-fd'), flag(second, '--clocks-fd')) == (None, '9')
    assert flag(first, '--seed') == flag(second, '--seed') == '7'


def test_link_queues_parses_and_is_refused_in_one_sentence_where_it_cannot_work():
    from repronet.run import options
    from tests.test_links_option import _Exp
    assert options.parse(_Exp(), []).link_queues is None
    assert options.parse(_Exp(), ['--link-queues', 'one']).link_queues == 'one'
    for argv, says in ((['--link-queues', 'one', '--links', 'netem'], '--links netem has none'),
                       (['--link-queues', 'cpu', '--backend', 'sim'],
                        'a simulated run has none')):
        with pytest.raises(options.UsageError, match=says):
            options.check_shared(options.parse(_Exp(), argv))


def test_the_default_is_the_experiments_and_the_flag_overrides_it():
    """dht8 runs a worker per CPU (measured to help its LAN holds); the transfer experiment
    keeps one queue per host (its gigabit transfers lost rate and fairness with the workers,
    docs/link-emulation.md "Step 12"); --link-queues wins over either."""
    from repronet.run import backends, options
    from topologies import dht8 as dht8_script, transfer as transfer_script
    dht8, transfer = dht8_script.Dht8(), transfer_script.Transfer()
    assert backends.link_queues(dht8, options.parse(dht8, [])) == 'cpu'
    assert backends.link_queues(transfer, options.parse(transfer, [])) == 'one'
    assert backends.link_queues(dht8, options.parse(dht8, ['--link-queues', 'one'])) == 'one'
    assert backends.link_queues(transfer, options.parse(transfer, ['--link-queues', 'cpu'])) \
        == 'cpu'
