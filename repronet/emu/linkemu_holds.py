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

A run's mean hides which of its points the lateness came from, so ``points`` splits it by
point (``by_seed``): the runner reseeds every daemon at each point's start, and each daemon
answers with all its counters so far (a ``seeded`` line), so the releases between one point's
reseed and the next one's (or the daemon's last line) are that point's, its set-up traffic
included; the runner names the point of each seed (``name_points``).
"""

FIELDS = ('late_us_mean', 'late_us_max', 'late_read_us_mean', 'late_chain_us_mean',
          'late_wake_us_mean', 'late_us_bounds', 'late_hist_log2_us', 'queued_us_mean',
          'verdict_us_mean', 'serialised', 'serial_us_mean', 'policy', 'rt_demoted',
          'rt_demoted_after_s', 'forced_sleeps', 'spin_ms', 'spin_us', 'spin_cap_us',
          'spin_permille', 'wake_samples', 'wake_overshoot_us_q', 'wake_overshoot_us_max',
          'late_us_max_at', 'lazy_min_hold_us', 'lazy_off', 'lazy_reads',
          'queue_wakes', 'verdict_batch', 'verdict_sends')
PARTS = ('read', 'chain', 'wake')


def record(daemons, finals, late_share, lines=()):
    """daemons: [{'host', 'hold_us_min', 'hold_us_max', 'cpu_s', 'server'}]; finals: each
    one's last stats line ({} when it printed none), in the same order; lines: each one's
    seeded lines and last stats line (by_seed), for the per-point split."""
    rows = []
    for info, final in zip(daemons, finals):
        rows.append(dict(info, released=final.get('released'),
                         **{k: final.get(k) for k in FIELDS}))
    counted = [r for r in rows if r['released'] and r['late_us_mean'] is not None]
    held = sum(r['released'] for r in counted)

    def weighted(key):
        return weighted_mean((r['released'], r[key]) for r in counted)

    mins = [r['hold_us_min'] for r in rows if r['hold_us_min']]
    maxes = [r['hold_us_max'] for r in rows if r['hold_us_max']]
    worst = [r['late_us_max'] for r in rows if r['late_us_max'] is not None]
    top = max((r for r in rows if r['late_us_max'] is not None and r['released']),
              key=lambda r: r['late_us_max'], default=None)
    mean = weighted('late_us_mean')
    return {'serialised': sum(r['serialised'] or 0 for r in rows),
            'serial_us_mean': weighted_mean((r['serialised'], r['serial_us_mean'])
                                            for r in rows),
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
            'rt_demoted': [r['host'] for r in rows if r['rt_demoted']],
            'points': by_seed(lines), 'daemons': rows}


def by_seed(daemon_lines):
    """daemon_lines: per daemon, its ``seeded`` lines and then its last ``stats`` line, in
    the order printed. Returns one entry per seed in the order the seeds came, summed over the
    daemons: {'seed', 'released', 'late_us_mean', 'late_read_us_mean', 'late_hist_log2_us',
    'late_us_bounds': {'p50', 'p99'}} for the releases from that reseed to the next line.
    Lines without counters (a daemon before they had them) give nothing."""
    order, sums = [], {}
    for lines in daemon_lines:
        for start, end in zip(lines, lines[1:]):
            if start.get('event') != 'seeded' or not _counted(start) or not _counted(end):
                continue
            seed = start.get('seed')
            if seed not in sums:
                order.append(seed)
                sums[seed] = {'released': 0, 'late': 0.0, 'read': 0.0, 'hist': None}
            got = sums[seed]
            got['released'] += end['released'] - start['released']
            for key, field in (('late', 'late_us_mean'), ('read', 'late_read_us_mean')):
                got[key] += (end['released'] * (end.get(field) or 0)
                             - start['released'] * (start.get(field) or 0))
            if start.get('late_hist_log2_us') and end.get('late_hist_log2_us'):
                diff = [b - a for a, b in zip(start['late_hist_log2_us'],
                                              end['late_hist_log2_us'])]
                got['hist'] = summed_hist([got['hist'], diff])
    out = []
    for seed in order:
        got, n = sums[seed], sums[seed]['released']
        out.append({'seed': seed, 'released': n,
                    'late_us_mean': round(got['late'] / n, 3) if n else None,
                    'late_read_us_mean': round(got['read'] / n, 3) if n else None,
                    'late_hist_log2_us': got['hist'],
                    'late_us_bounds': {q: late_bound_us(got['hist'], f)
                                       for q, f in (('p50', 0.5), ('p99', 0.99))}})
    return out


def _counted(line):
    return isinstance(line.get('released'), int) and 'late_us_mean' in line


def name_points(record, points):
    """Put each point's number (and its repetition) beside its seed in ``record['points']``
    (points: the run's point dicts; a seed no point has keeps no number)."""
    if not record or not record.get('points'):
        return
    numbers = {}
    for point in points:
        numbers.setdefault(point.get('seed'), point)
    for entry in record['points']:
        point = numbers.get(entry['seed'])
        if point is not None:
            entry['point'] = point.get('point')
            if 'repetition' in point:
                entry['repetition'] = point['repetition']


def weighted_mean(pairs):
    """The mean of (weight, value) pairs weighted by the weights (a daemon's mean by the
    packets it averages over), a None weight or value counting as 0; None when the weights
    sum to 0. Unrounded: linkemu_workers.merge rounds as the daemon prints."""
    pairs = [(weight or 0, value or 0) for weight, value in pairs]
    total = sum(weight for weight, _ in pairs)
    return sum(weight * value for weight, value in pairs) / total if total else None


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
