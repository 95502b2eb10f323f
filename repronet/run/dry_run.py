"""--dry-run: an experiment's points, estimated time and disk, printed without building anything.

Kept apart from the runner (repronet.run.runner) so that each stays one job: the runner runs,
this says what a run would do.
"""

import json
import os

from repronet.run import run_time, sweep

PLAN_ENV = 'REPRONET_DRY_RUN_PLAN'  # a file --dry-run also writes its plan to, as JSON


def estimate(experiment, params, points, backend=None):
    """Return (each point's estimate or None, the points' wall seconds, the rest's): what
    --dry-run prints, and what ``--sim-interpreter auto`` weighs (repronet.run.run_time)."""
    estimates = [experiment.estimate(params, p) for p in points]
    points_s, rest_s = run_time.parts(backend or params.backend,
                                      sum(s for s in estimates if s is not None),
                                      getattr(experiment, 'fixed_s', None),
                                      getattr(experiment, 'point_wall', None))
    return estimates, points_s, rest_s


def print_plan(experiment, params, points):
    """Print the points, the estimated time and the disk; return 0.

    With PLAN_ENV naming a file, also write the plan there as JSON for a program
    (``repronet reproduce``): {points, estimated_s (the whole run's wall seconds: the
    points with an estimate and the rest, repronet.run.run_time), unestimated, out,
    disk: [[path, bytes]]}; the text above stays for people."""
    estimates, points_s, rest_s = estimate(experiment, params, points)
    for point, seconds in zip(points, estimates):
        print(' '.join(filter(None, [
            '[%d]' % point['point'], sweep.describe(point),
            '~' + ('?' if seconds is None else sweep.format_duration(seconds))])))
    known = [s for s in estimates if s is not None]
    total = points_s + rest_s
    print('%d points, estimated %s%s; results in %s' % (
        len(points), sweep.format_duration(total),
        '' if len(known) == len(points) else ' (%d points without an '
        'estimate)' % (len(points) - len(known)), params.out))
    print('of which the points ~%s, the rest (start-up, network, teardown, analysis) '
          '~%s' % (sweep.format_duration(points_s), sweep.format_duration(rest_s)))
    disk = list(experiment.disk(params))
    for path, nbytes in disk:
        print('writes %.1f MB in %s' % (nbytes / 1e6, path))
    if os.environ.get(PLAN_ENV):
        with open(os.environ[PLAN_ENV], 'w', encoding='utf-8') as f:
            json.dump({'points': len(points), 'estimated_s': total,
                       'unestimated': len(points) - len(known), 'out': str(params.out),
                       'disk': [[str(p), n] for p, n in disk]}, f)
    return 0
