"""Statistics every experiment's analysis shares: percentiles and the CPU verdict per point.

The runner samples the machine's CPU (``logs/cpu.jsonl``, ``repronet.run.cpu``) and judges a
whole run; an analysis judges each point by the same rule over that point's timed part
(:func:`cpu_window`), so a table can mark the points whose figures the CPU, not the system
under test, limited. A timed part shorter than a sample holds none; the runner also reads
the CPU precisely at each timed part's start and end (``points.jsonl``'s ``cpu``), and
:func:`point_cpu` judges such a point by that reading, with the same bar.
"""

import math

from analysis.inputs import as_dict, is_number, simulated
from analysis.tables import cell
from repronet.run import cpu


def percentile(values, q):
    """Return the q-quantile of sorted values (nearest rank), or None."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def cpu_bar(manifest):
    """Return (busy threshold, over fraction) the run's CPU verdict used.

    The manifest's CPU summary records them; a folder without one is judged by the
    constants of ``repronet.run.cpu``, the one place they are defined."""
    summary = as_dict(manifest.get('cpu'))
    threshold, fraction = summary.get('threshold'), summary.get('max_over_fraction')
    return (threshold if is_number(threshold) else cpu.THRESHOLD,
            fraction if is_number(fraction) else cpu.MAX_OVER_FRACTION)


def read_cpu(inputs, manifest):
    """Return (samples, interval) of logs/cpu.jsonl; note when there are none (a
    simulated run has no CPU monitor, so none are missing there)."""
    samples = [s for s in inputs.read('cpu.jsonl')
               if is_number(s.get('t')) and is_number(s.get('busy'))]
    if not samples and not simulated(manifest):
        inputs.missing('CPU samples missing (logs/cpu.jsonl)')
    interval = as_dict(manifest.get('cpu')).get('interval')
    return samples, interval if is_number(interval) and interval > 0 else 0.5


def cpu_window(samples, interval, start, end, bar):
    """Return (mean busy, fraction over the bar, CPU-bound) of the samples inside [start, end].

    A sample at t covers (t - interval, t]; only samples wholly inside the timed part
    count, so process start-up before the barrier is not blamed on it (a timed part
    shorter than one interval has no CPU figure)."""
    if not (is_number(start) and is_number(end)):
        return None, None, None
    inside = [s['busy'] for s in samples
              if start <= s['t'] - interval and s['t'] <= end + 0.05]
    if not inside:
        return None, None, None
    over = sum(b > bar[0] for b in inside) / len(inside)
    return sum(inside) / len(inside), over, bool(over > bar[1])


def span_figures(span, bar):
    """Return (mean busy, fraction over the bar, CPU-bound) of the runner's precise reading
    of a point's timed parts (``points.jsonl``'s ``cpu``, ``repronet.run.cpu_span``).

    One reading covers the whole timed part, so it is one sample by the sampler's rule:
    over the bar (busy > bar[0]) or not, and bound when that share (1 or 0) exceeds
    bar[1]. Nones without a reading (a simulated run, an older folder)."""
    busy = as_dict(span).get('busy')
    if not is_number(busy):
        return None, None, None
    over = 1.0 if busy > bar[0] else 0.0
    return busy, over, bool(over > bar[1])


def point_cpu(samples, interval, start, end, span, bar):
    """Return (busy, over, bound, verdict) of a point: by the samples wholly inside its
    timed part (verdict 'samples') and, when there are none, by the runner's precise
    reading of that part (verdict 'timed part'); verdict None when neither judged it."""
    figures = cpu_window(samples, interval, start, end, bar)
    if figures[2] is not None:
        return figures + ('samples',)
    figures = span_figures(span, bar)
    return figures + ('timed part' if figures[2] is not None else None,)


MODELLED = 'modelled'


class PointJudge:
    """The CPU verdict of a run's points, its samples read once (:func:`read_cpu`).

    ``judge(start, end, record)`` returns :func:`point_cpu`'s (busy, over, bound, verdict):
    by the samples inside start..end, else by the runner's precise reading of the point's
    timed parts (its ``points.jsonl`` record's ``cpu``); in a simulated run (busy, over and
    bound None) the verdict is 'modelled'."""

    def __init__(self, inputs, manifest):
        self.samples, self.interval = read_cpu(inputs, manifest)
        self.bar, self.sim = cpu_bar(manifest), simulated(manifest)

    def __call__(self, start, end, record):
        if self.sim:
            return None, None, None, MODELLED
        return point_cpu(self.samples, self.interval, start, end,
                         as_dict(record).get('cpu'), self.bar)

    def window(self, start, end):
        """cpu_window() over start..end alone (a part the runner's reading does not
        single out)."""
        return cpu_window(self.samples, self.interval, start, end, self.bar)


def pooled_cpu(points):
    """{cpu_bound, cpu_verdict} of a table row that pools points (their table, or a dict of
    those two columns): bound when any point was, None when none was judged; the points'
    distinct verdicts, sorted and joined by '+' ('samples+timed part'), None without any."""
    judged = [str(b) == 'True' for b in points['cpu_bound'] if str(b) in ('True', 'False')]
    known = sorted({str(v) for v in points['cpu_verdict'] if isinstance(v, str) and v})
    return {'cpu_bound': any(judged) if judged else None, 'cpu_verdict': '+'.join(known) or None}


def cpu_mark(bound, verdict):
    """A report cell for a row's CPU verdict: 'CPU-bound', 'no', 'modelled' (a simulated
    run) or '-' (no sample and no reading covered it)."""
    if verdict == MODELLED:
        return MODELLED
    if bound is True or str(bound) == 'True':
        return 'CPU-bound'
    if bound is False or str(bound) == 'False':
        return 'no'
    return '-'


def with_cpu_mark(df):
    """df (a table with cpu_bound and cpu_verdict) with a report column 'cpu': cpu_mark's."""
    verdicts = df['cpu_verdict'] if 'cpu_verdict' in df.columns else [None] * len(df)
    return df.assign(cpu=[cpu_mark(b, v) for b, v in zip(df['cpu_bound'], verdicts)])


def verdicts_line(verdicts, bar):
    """The report line saying how a run's points were judged ([] when none was: a simulated
    run, or no CPU figure at all); verdicts is the points' cpu_verdict column."""
    verdicts = [str(v) for v in verdicts]
    samples, timed = verdicts.count('samples'), verdicts.count('timed part')
    if MODELLED in verdicts:
        return ['- CPU per point: modelled (a simulated run has no CPU monitor; with '
                '--sim-cost the manifest gives the modelled cores\' busy share)']
    if not samples and not timed:
        return []
    return ['- CPU verdict per point: %d by the samples wholly inside its timed part, %d '
            '(timed part shorter than a sample) by the runner\'s own reading of the timed '
            'part: nanoseconds of CPU every task ran (root cpuacct cgroup) at its start and '
            'end, over the bar when the machine was more than %g %% busy between them; %d '
            'without a verdict' % (samples, timed, round(100 * bar[0], 6),
                                   len(verdicts) - samples - timed)]


def run_cpu_line(manifest, emulated_tail=''):
    """The report's '- CPU over the run' line, for every experiment and both backends.

    Emulated: the runner's monitor (the manifest's ``cpu``): mean busy and whether the run
    was CPU-saturated, then emulated_tail (the experiment's own words on its bar). Simulated:
    there was no monitor, so no mean and no saturation to give (a manifest's 'saturated:
    False' there means nothing was measured); instead whether --sim-cost modelled the nodes'
    CPU time, since without it the model charged none."""
    if simulated(manifest):
        params = as_dict(manifest.get('params'))
        cores = params.get('sim_cores')
        return ('- CPU over the run: no monitor (a simulated run: the load of the machine '
                'that ran the simulator does not enter its times); %s' % (
                    '--sim-cost modelled the nodes\' CPU time (%s)' % (
                        '%s cores' % cores if cores else 'on this machine\'s core count')
                    if params.get('sim_cost') else
                    'no --sim-cost, so the model charged no CPU time'))
    summary = as_dict(manifest.get('cpu'))
    return '- CPU over the run: mean busy %s, saturated: %s%s' % (
        cell(summary.get('mean'), '%.2f'), summary.get('saturated'), emulated_tail)
