"""The manifest's ``link_holds`` record: how late the delay daemons released held packets.

Built after the daemons stopped from each one's last stats line (linkdelay_report.c) and
what the runner knows about it (host, configured holds, CPU seconds). A mean alone hides
where lateness comes from, so the record keeps, weighted by the packets each daemon held:
the mean and the worst; the mean split three ways (``late_read_us_mean``: the deadline had
passed before the daemon read the packet from its queue; ``late_chain_us_mean``: it waited
for earlier verdicts of the same release pass; ``late_wake_us_mean``: the rest, a pass that
began late); and one histogram summed over the daemons (``late_hist_log2_us``: bucket 0
under 1 us, bucket k from 2^(k-1) to 2^k us, the last open), from which ``late_bound_us``
gives an upper bound of any quantile. ``marked`` is True when the mean exceeds
``late_share`` of the smallest configured hold (jitter aside); ``rt_demoted`` lists the
daemons that left SCHED_FIFO; ``serial_us_mean`` is the mean time a packet's bits took on
its path's rated links (linkdelay_wire.c) before its hold began; ``lazy_reads`` how often the
daemons read their queues without an arrival waking them (lazy reads, linkdelay_sched.h),
``queue_wakes`` how often an arrival did. ``late_max_host`` and
``late_max_at`` (Unix seconds) say whose and when the worst release was, so that the runner
can set the CPU sample of that moment beside it (``late_max_sample``: a stall of the whole VM,
the hypervisor's steal, shows there, not in the daemon).
"""

FIELDS = ('late_us_mean', 'late_us_max', 'late_read_us_mean', 'late_chain_us_mean',
          'late_wake_us_mean', 'late_us_bounds', 'late_hist_log2_us', 'queued_us_mean',
          'verdict_us_mean', 'serialised', 'serial_us_mean', 'policy', 'rt_demoted',
          'rt_demoted_after_s', 'forced_sleeps', 'spin_ms', 'spin_us', 'spin_cap_us',
          'spin_permille', 'wake_samples', 'wake_overshoot_us_q', 'wake_overshoot_us_max',
          'late_us_max_at', 'lazy_min_hold_us', 'lazy_off', 'lazy_reads',
          'queue_wakes', 'verdict_batch', 'verdict_sends')
PARTS = ('read', 'chain', 'wake')


def record(daemons, finals, late_share):
    """daemons: [{'host', 'hold_us_min', 'hold_us_max', 'cpu_s', 'server'}]; finals: each
    one's last stats line ({} when it printed none), in the same order."""
    rows = []
    for info, final in zip(daemons, finals):
        rows.append(dict(info, released=final.get('released'),
                         **{k: final.get(k) for k in FIELDS}))
    counted = [r for r in rows if r['released'] and r['late_us_mean'] is not None]
    held = sum(r['released'] for r in counted)

    def weighted(key):
        return (sum(r['released'] * (r[key] or 0) for r in counted) / held) if held else None

    mins = [r['hold_us_min'] for r in rows if r['hold_us_min']]
    maxes = [r['hold_us_max'] for r in rows if r['hold_us_max']]
    worst = [r['late_us_max'] for r in rows if r['late_us_max'] is not None]
    top = max((r for r in rows if r['late_us_max'] is not None and r['released']),
              key=lambda r: r['late_us_max'], default=None)
    mean = weighted('late_us_mean')
    timed = sum(r['serialised'] or 0 for r in rows)
    serial = sum((r['serialised'] or 0) * (r['serial_us_mean'] or 0) for r in rows)
    return {'serialised': timed, 'serial_us_mean': serial / timed if timed else None,
            'lazy_reads': sum(r['lazy_reads'] or 0 for r in rows),
            'queue_wakes': sum(r['queue_wakes'] or 0 for r in rows),
            'verdict_sends': sum(r['verdict_sends'] or 0 for r in rows),
            'late_share': late_share, 'hold_us_min': min(mins) if mins else None,
            'hold_us_max': max(maxes) if maxes else None, 'released': held,
            'late_us_mean': mean, 'late_us_max': max(worst) if worst else None,
            'late_max_host': top['host'] if top else None,
            'late_max_at': top['late_us_max_at'] if top else None,
            **{'late_%s_us_mean' % part: weighted('late_%s_us_mean' % part) for part in PARTS},
            'late_hist_log2_us': summed_hist(r['late_hist_log2_us'] for r in rows),
            'marked': bool(mins and mean is not None and mean > late_share * min(mins)),
            'rt_demoted': [r['host'] for r in rows if r['rt_demoted']], 'daemons': rows}


def summed_hist(hists):
    """The daemons' lateness histograms added bucket by bucket (None when none had one)."""
    hists = [h for h in hists if h]
    return [sum(col) for col in zip(*hists)] if hists else None


def late_bound_us(hist, q):
    """The upper edge (us) of the histogram bucket holding the q quantile (nearest rank) of
    its releases, as the daemon's own stats compute it: None without releases or when it
    falls in the open last bucket."""
    total = sum(hist or [])
    if not total:
        return None
    rank, seen = max(1, int(q * total + 0.5)), 0
    for k, count in enumerate(hist[:-1]):
        seen += count
        if seen >= rank:
            return 1 << k
    return None
