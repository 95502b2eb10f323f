"""The experiment runner: one class an experiment subclasses, one run per call.

An experiment is a small class (see DESIGN.md, "The runner")::

    class Smoke(Experiment):
        name = 'smoke'                         # manifest['experiment'], analysis.smoke
        scales = {'smoke': {'repeat': 1, 'duration': 2},
                  'default': {'repeat': 3, 'duration': 10}}
        def add_arguments(self, parser): ...   # own flags, default=None
        def topology(self, params): ...        # -> mininet.topo.Topo
        def points(self, params): ...          # optional; default: one point per
                                               # --repeat (see grid())
        def run_point(self, ctx, point): ...   # may return a dict (logged)
    if __name__ == '__main__':
        sys.exit(Smoke().main())

Optional hooks: ``operations_failed(point, problem)`` (call it from ``run_point``: the
run still runs every point, then ends failed naming them), ``targets_text(run_dir)``
(printed after the analysis); ``grid(params)`` returns ``{name: [values]}`` for the default
``points()`` (cross product x ``--repeat``, seeds derived from ``--seed``, see
``repronet.run.sweep``); ``setup(ctx)`` runs once after the network is up and
``finish(ctx)`` once after the last point (both still inside teardown's
protection); ``stats_interval`` (class attribute, seconds) is the os-ken
controller's port-statistics period.

``main()`` does, in this order: parse options (``repronet.run.options``); take
the machine-wide lock ``/run/repronet.lock`` (two emulations on one machine
would share its CPUs and interface names; a run whose ancestor, e.g.
``flock(1)`` or the root-test fixture, which also sets
``REPRONET_LOCK_HELD=1``, already holds the lock uses that); take the
experiment's ``--workdir`` lock if it has one (``leftovers.workdir_lock``; a
simulated run takes only this one: a second run in the same folder is refused in
one sentence, exit 2, before anything is built); clean
leftovers of a crashed earlier run (``repronet.run.leftovers``); create the
results folder and its manifest (status running); probe capabilities, record
provenance; build and start the network (``repronet.emu.network``); sample CPU
(``repronet.run.cpu``, ``logs/cpu.jsonl``); run every point, printing one
progress line per point with elapsed time and ETA, and appending the point's
timing, return value and the CPU of its timed parts (``cpu``: a precise
reading, ``repronet.run.cpu_span``) to ``logs/points.jsonl``
(``repronet.run.point_loop``); then on EVERY exit path stop
all node processes, stop the network, remove what a crash would have left,
and finish the manifest (ok | failed | interrupted).  Finally it runs the
experiment's analysis, the same code as ``python -m analysis RUN_DIR``, still
holding the lock, so that a run waiting for it does not time its first points
beside this one's report writing.

Ctrl-C is handled in one place (``repronet.run.signals``): SIGINT and SIGTERM
raise ``Interrupted``, which unwinds through the teardown above; a signal during
teardown, while the results folder is created or while a process starts, waits
until that is done and then makes the run ``interrupted`` (never ``ok``); one
during the analysis stops the analysis with one line.  The exit status is 0
(ok), 1 (failed) or 128+signal (130 for SIGINT, 143 for SIGTERM).

``--dry-run`` prints the points, the estimated time and the disk the run needs
(and writes them as JSON to the file ``REPRONET_DRY_RUN_PLAN`` names, if it names one),
and stops before the lock; ``--keep-going`` records a failed point and runs the
next one; ``--cli start|failure`` opens Mininet's CLI on the built network.
Results made under ``sudo`` are handed to the user who ran sudo.

``RunContext`` (``ctx``, ``repronet.run.context``) is what ``run_point`` gets: ``ctx.net`` (the Mininet
object), ``ctx.params``, ``ctx.results`` (ResultsFolder), ``ctx.network``
(what was chosen), ``ctx.caps``, ``ctx.point``, ``ctx.host(name)``,
``ctx.start_node(host, name, argv, ready=..., barrier=False, suffix='.jsonl',
wait=True)`` (a tracked ``NodeProcess``; unless ``barrier`` or ``wait=False``
it waits for readiness; with ``wait=False`` start many, then call
``node.wait_ready()`` on each),
``ctx.release(nodes)`` (barrier: wait until every node is ready, then send
``go`` to all) and ``ctx.stop_nodes(nodes)``.  The manifest's ``nodes``
lists every node process with its argv, host, PID and exit status.  Node
names are unique per run (they name the log files), e.g.
``'server-p%d' % point['point']``.
Node processes inherit ``PYTHONPATH`` with the repository root, so
``[sys.executable, '-m', 'nodes.x']`` works on every host.
"""

import contextlib
import importlib
import os
import pathlib
import sys
import traceback

from repronet.run import (backends, dry_run, leftovers, options, point_loop, results,
                          sim_interpreter, sweep)
from repronet.run.context import RunContext
from repronet.run.signals import Interrupted, SignalGuard

__all__ = ['Experiment', 'RunContext', 'Interrupted', 'EXIT_FAILED']

REPO = pathlib.Path(__file__).resolve().parents[2]
EXIT_FAILED = 1
PLAN_ENV = dry_run.PLAN_ENV     # re-exported: repronet.run.reproduce and tests name it here


class Experiment:
    """Base class of runnable experiments; subclasses fill in the hooks."""

    name = None
    scales = {}
    limits = {}             # {flag: (low, high, 'what')}: checked for every run
    stats_interval = 1.0
    timed_parts = False     # True: run_point marks its timed parts with ctx.timed()
    backends = ('emu',)     # ('emu', 'sim'): its nodes have simulate() and run_point
                            # uses only the ctx surface (DESIGN.md, "Backends")
    emu_only = 'it runs tools that exist only on real hosts'   # why not 'sim', if not
    sim_interpreters = ('python3',)     # + 'pypy3': its simulation imports nothing PyPy
                                        # lacks (repronet.run.sim_interpreter)
    pypy_pays_from_s = 0.0  # --sim-interpreter auto: pypy3 only for points estimated at
                            # this many seconds or more (0: always; None: never)
    link_queues = 'one'     # --link-queues when not given, not Network's 'cpu': an experiment
                            # sets 'cpu' (a delay daemon worker per CPU) only where measured
                            # to help, as transfer lost rate and fairness with it
                            # (docs/link-emulation.md "Step 12"; dht8 sets 'cpu')
    sim_interpreter_choice = None   # (name, asked, reason): sim_interpreter.choose's
    child_run_dir = None    # the results folder, when the points ran in such a child
    fixed_s = {}            # {backend: seconds a run costs beyond its points} and
    point_wall = {}         # {backend: wall seconds per estimated point second}, where
                            # measured to differ from repronet.run.run_time's
    analysis_module = None  # e.g. 'analysis.smoke': its build(run_dir) is analyse()
    targets_module = None   # e.g. 'analysis.kvload_report': its targets_text(run_dir)

    def add_arguments(self, parser):
        """Add the experiment's own flags (default=None; see scales)."""

    def topology(self, params):
        """Return the mininet.topo.Topo to run."""
        raise NotImplementedError

    def grid(self, params):
        """Return {name: [values]} swept by the default points()."""
        return {}

    def points(self, params):
        """Return the sweep points: grid() cross product x --repeat."""
        return sweep.expand(self.grid(params), params.repeat, params.seed)

    def setup(self, ctx):
        """Run once after the network is up, before the first point."""

    def run_point(self, ctx, point):
        """Run one sweep point on ctx.net; may return a dict to log."""
        raise NotImplementedError

    def check(self, params):
        """Check the parameters; raise options.UsageError with one sentence.

        Called before the lock, the cleanup and the results folder, after the
        shared checks and the bounds in ``limits``."""

    def estimate(self, params, point):
        """Return the expected seconds of one point (weights the ETA), or None."""
        return None

    def eta_kind(self, point):
        """Return the kind of work of one point (the ETA scales each kind's estimates by how
        that kind's finished points compared with theirs), or None: one kind."""
        return None

    def disk(self, params):
        """Return [(path, bytes)] the run will write outside its results folder."""
        return []

    def finish(self, ctx):
        """Run once after the last point, before teardown."""

    def operations_failed(self, point, problem):
        """Note that operations failed in a point (one line); the run goes on to its last
        point, then ends ``failed`` naming the first five such points."""
        self.failed_operations.append('p%03d: %s' % (point['point'], problem))

    def targets_text(self, run_dir):
        """Return the measured targets to print after the analysis, or None (no targets):
        ``targets_module``'s targets_text(run_dir)."""
        if self.targets_module is None:
            return None
        return importlib.import_module(self.targets_module).targets_text(run_dir)

    def analyse(self, run_dir):
        """Turn a finished run's logs into tables, figures and report.md.

        The experiment names its own analysis (``analysis_module``, whose build(run_dir) does
        it), so the framework never imports ``analysis/`` by name."""
        if self.analysis_module is None:
            raise NotImplementedError('%s gives no analysis' % self.name)
        importlib.import_module(self.analysis_module).build(run_dir)

    def main(self, argv=None):
        """Run the experiment from the command line; return the exit status."""
        argv = sys.argv[1:] if argv is None else list(argv)
        try:
            params = options.parse(self, argv)
            options.check_shared(params, self.limits)
            if params.backend not in self.backends:
                raise options.UsageError('%s runs only with --backend emu: %s' % (
                    self.name, self.emu_only))
            self.check(params)
            points = self.points(params)
            options.check_points(points)
            elsewhere = sim_interpreter.resolve(self, params, points) \
                if params.backend == 'sim' else None
        except options.UsageError as e:
            print('%s: %s' % (self.name, e), file=sys.stderr)
            return 2
        if params.dry_run:
            return dry_run.print_plan(self, params, points)
        sim = params.backend == 'sim'       # no root, no machine lock, no leftovers
        if not sim and os.geteuid() != 0:
            print('%s: Mininet needs root; run with sudo /usr/bin/python3'
                  % self.name, file=sys.stderr)
            return EXIT_FAILED
        try:
            options.check_out(params)
            backends.precheck(self, params, REPO)
        except options.UsageError as e:
            print('%s: %s' % (self.name, e), file=sys.stderr)
            return 2
        os.environ['PYTHONPATH'] = os.pathsep.join(
            [str(REPO)] + [p for p in os.environ.get('PYTHONPATH', '').split(
                os.pathsep) if p])
        # The lock is held through the analysis too: a run queued behind this one would
        # otherwise measure its first points beside this one's report writing.
        with SignalGuard() as guard, contextlib.ExitStack() as held:
            try:
                if not sim:
                    held.enter_context(leftovers.machine_lock())
                if getattr(params, 'workdir', None):    # before anything is built
                    held.enter_context(leftovers.workdir_lock(params.workdir))
                if not sim:
                    leftovers.clean()
                status, folder = sim_interpreter.run_in(
                    elsewhere, self, params, argv, guard) if elsewhere \
                    else self._run(params, argv, points, guard)
            except Interrupted as e:    # before the results folder existed
                print('%s: interrupted (%s) before the run started'
                      % (self.name, e), file=sys.stderr)
                return 128 + e.signum
            except options.UsageError as e:     # --workdir is another run's
                print('%s: %s' % (self.name, e), file=sys.stderr)
                return 2
            guard.release()             # teardown is over: Ctrl-C acts again
            if folder is None:          # --out could not be made: said why
                return EXIT_FAILED
            print('%s: %s, results in %s' % (self.name, status, folder.path),
                  flush=True)
            code = {'ok': 0, 'interrupted': 128 + folder.manifest.get(
                'signal', 2)}.get(status, EXIT_FAILED)
            if status == 'ok' or (status == 'failed' and
                                  folder.manifest.get('points_ok')):
                code = self._analyse(folder.path, guard) or code
                self._print_targets(folder.path)
            results.hand_over(folder.path)
        return code

    def _print_targets(self, run_dir):
        """Print targets_text(run_dir), or one line saying why there is none."""
        try:
            text = self.targets_text(run_dir)
        except (OSError, ValueError, KeyError) as e:
            print('%s: no target summary: %s' % (self.name, e), file=sys.stderr)
            return
        if text:
            print(text, flush=True)

    def _run(self, params, argv, points, guard):
        """Run under the lock; return (status, results folder)."""
        folder = net = ctx = monitor = None
        made = {}                   # what backends.build made, even if it then failed
        state = leftovers.State()
        status, error, fields = 'failed', None, {}
        try:
            with guard.held():      # no half-made folder saying 'running'
                folder = results.ResultsFolder(params.out)
                folder.start(self.name, vars(params), params.seed,
                             [sys.argv[0]] + argv, points=len(points))
            progress = sweep.Progress(len(points), weights=[
                self.estimate(params, p) for p in points], kinds=[
                self.eta_kind(p) for p in points])
            net, monitor, ctx = backends.build(self, params, folder, state, guard,
                                               progress, REPO, made)
            self.failed_operations = []
            self.setup(ctx)
            if params.cli == 'start':
                point_loop.open_cli(ctx, 'the network is up')
            failed = point_loop.run_points(self, ctx, points, folder, monitor)
            fields['points_ok'] = len(points) - len(failed)
            if failed:
                error = '%d of %d points failed (--keep-going): %s' % (
                    len(failed), len(points), '; '.join(failed[:3]))
            self.finish(ctx)
            if self.failed_operations:
                raise RuntimeError('operations failed in %d point(s): %s' % (
                    len(self.failed_operations), '; '.join(self.failed_operations[:5])))
            status = 'ok' if not failed else 'failed'
        except Interrupted as e:
            status, error = 'interrupted', str(e)
            fields['signal'] = e.signum
            print('%s: %s, tearing down' % (self.name, e), flush=True)
        except results.FolderError as e:
            error = str(e)
            print('%s: %s' % (self.name, e), file=sys.stderr, flush=True)
        except BaseException as e:  # SystemExit too: the manifest says why
            error = '%s: %s' % (type(e).__name__, e)
            if isinstance(e, _clear_errors()):    # one sentence says it all
                print('%s: %s' % (self.name, e), file=sys.stderr, flush=True)
            else:
                traceback.print_exc()
            if ctx is not None and params.cli == 'failure':
                point_loop.open_cli(ctx, 'the run failed: %s' % error)
        finally:
            guard.hold()            # teardown runs to the end, whatever comes
            net, monitor = made.get('net', net), made.get('monitor', monitor)
            if monitor is not None:
                monitor.set_phase(None)
            error = backends.teardown(ctx, net, state, error)
            if ctx is not None:
                fields['nodes'] = [backends.node_record(n) for n in ctx.nodes]
            fields['link_holds'] = backends.link_holds(net, self.name, points)
            fields['cpu_idle'] = backends.cpu_idle(net)
            if guard.pending is not None and status != 'interrupted':
                status, fields['signal'] = 'interrupted', guard.pending
                error = '; '.join(filter(None, [error, '%s during teardown' % (
                    Interrupted(guard.pending))]))
            elif error and status == 'ok':
                status = 'failed'
            if ctx is not None and params.backend == 'sim':
                fields['cpu'] = backends.sim_cpu(ctx)
            if monitor is not None:
                monitor.stop()
                fields['cpu'] = monitor.summary()
                backends.worst_release_sample(fields.get('link_holds'), monitor)
                if fields['cpu'].get('saturated'):
                    print('%s: WARNING: the CPU was saturated during this run;'
                          ' the machine, not the emulated network, may have '
                          'limited the results' % self.name, flush=True)
            if folder is not None:
                folder.finish(status, error, **fields)
        if folder is None and status == 'interrupted':
            raise Interrupted(fields['signal'])
        return status, folder

    def _analyse(self, run_dir, guard):
        """Run the analysis of a finished run; return the exit status."""
        hint = '"repronet analyse %s"' % run_dir
        try:
            self.analyse(run_dir)
        except Interrupted as e:
            print('%s: analysis interrupted (%s); the run itself is complete, '
                  'rerun it with %s' % (self.name, e, hint), file=sys.stderr)
            return 128 + e.signum
        except ValueError as e:     # the analysis says what was wrong or missing
            print('%s: %s (the run itself is complete; %s rebuilds it)'
                  % (self.name, e, hint), file=sys.stderr)
            return EXIT_FAILED
        except Exception:
            traceback.print_exc()
            print('%s: analysis failed; the run itself is complete, retry with '
                  '%s' % (self.name, hint), file=sys.stderr)
            return EXIT_FAILED
        return 0


def _clear_errors():
    """Return the exception classes whose message needs no traceback."""
    from repronet.cluster.ssh import ClusterError
    from repronet.emu import capabilities, linkemu_params, network
    from repronet.emu.process import NodeError
    from repronet.sim.process import SimNodeError
    return (capabilities.CapabilityError, linkemu_params.LinkEmulationError,
            network.NetworkError, NodeError, SimNodeError, options.UsageError, ClusterError)
