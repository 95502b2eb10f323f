"""The runner's loop over a run's points (``repronet.run.runner``): one point after another,
each with its progress line and its ``logs/points.jsonl`` record.

Apart from the runner, which sets a run up and tears it down on every exit path, because
a point's record gathers several things a reader checks together: the point and its
return value (or its error under ``--keep-going``, after stopping the point's own nodes),
its timing on the backend's clock (virtual time in a simulation), and the CPU of its timed
parts (``cpu``: the monitor's precise reading, ``repronet.run.cpu_span``; a point whose
experiment declares no timed parts is measured whole).
"""

import json

from repronet.run import cpu


def run_points(experiment, ctx, points, folder, monitor):
    """Run every point of experiment with a progress line and a points.jsonl record;
    return the failed points' descriptions (only with --keep-going). monitor: the run's
    CpuMonitor, or None."""
    failed = []
    with open(folder.log_path('points'), 'a') as log:
        for point in points:
            ctx.point = point
            if 'seed' in point:     # loss/jitter draws of this point alone
                ctx.network.links.reseed(point['seed'])
            started = ctx.clock()   # virtual time in a simulated run
            first_node = len(ctx.nodes)
            if monitor is not None:
                monitor.take_span()     # this point's precise reading starts empty
            if not experiment.timed_parts and monitor is not None:    # CPU over whole points
                monitor.set_phase(cpu.MEASURE)
            record = {'event': 'point', 'point': point}
            try:
                record['result'] = experiment.run_point(ctx, point)
            except Exception as e:
                if not ctx.params.keep_going:
                    raise
                record.update(status='failed', error='%s: %s' % (
                    type(e).__name__, e))
                failed.append('point %d: %s' % (point['point'], e))
                ctx.stop_nodes(ctx.nodes[first_node:])
            finally:
                if monitor is not None:
                    monitor.set_phase(None)
            now = ctx.clock()
            record.update(t=round(now, 6), started=round(started, 6),
                          elapsed=round(now - started, 6))
            span = monitor.take_span() if monitor is not None else None
            if span is not None:    # the timed parts' own CPU (repronet.run.cpu_span)
                record['cpu'] = span
            log.write(json.dumps(record, sort_keys=True) + '\n')
            log.flush()
            if 'error' in record and ctx.params.cli == 'failure':
                open_cli(ctx, 'point %d failed: %s' % (
                    point['point'], record['error']))
            ctx.progress.point_done(
                point, status='FAILED' if 'error' in record else 'ok',
                result=record.get('result'))
    return failed


def open_cli(ctx, why):
    """Open Mininet's CLI on the running network (for debugging)."""
    from mininet.cli import CLI
    print('*** %s: opening the Mininet CLI; "exit" goes on' % why, flush=True)
    CLI(ctx.net)
