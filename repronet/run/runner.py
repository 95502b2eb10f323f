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

Optional hooks: ``grid(params)`` returns ``{name: [values]}`` for the default
``points()`` (cross product x ``--repeat``, seeds derived from ``--seed``, see
``repronet.run.sweep``); ``setup(ctx)`` runs once after the network is up and
``finish(ctx)`` once after the last point (both still inside teardown's
protection); ``stats_interval`` (class attribute, seconds) is the os-ken
controller's port-statistics period.

``main()`` does, in this order: parse options (``repronet.run.options``); take
the machine-wide lock ``/run/repronet.lock`` (two emulations on one machine
would share its CPUs and interface names; a run whose ancestor, e.g.
``flock(1)`` or the root-test fixture, which also sets
``REPRONET_LOCK_HELD=1``, already holds the lock uses that); clean
leftovers of a crashed earlier run (``repronet.run.leftovers``); create the
results folder and its manifest (status running); probe capabilities, record
provenance; build and start the network (``repronet.emu.network``); sample CPU
(``repronet.run.cpu``, ``logs/cpu.jsonl``); run every point, printing one
progress line per point with elapsed time and ETA, and appending the point's
timing and return value to ``logs/points.jsonl``; then on EVERY exit path stop
all node processes, stop the network, remove what a crash would have left,
and finish the manifest (ok | failed | interrupted).  Finally it runs the
experiment's analysis, the same code as ``python -m analysis RUN_DIR``.

Ctrl-C is handled in one place: SIGINT and SIGTERM raise ``Interrupted``
(a BaseException, so an experiment's ``except Exception`` cannot swallow it),
which unwinds through the teardown above; further signals during teardown are
noted and ignored.  The exit status is 0 (ok), 1 (failed) or 128+signal
(130 for SIGINT, 143 for SIGTERM).

``RunContext`` (``ctx``) is what ``run_point`` gets: ``ctx.net`` (the Mininet
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
import json
import os
import pathlib
import signal
import sys
import time
import traceback

from repronet.emu.process import NodeProcess, stop_all
from repronet.run import cpu, leftovers, options, results
from repronet.run import sweep

REPO = pathlib.Path(__file__).resolve().parents[2]
EXIT_FAILED = 1


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; unwinds through teardown."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class RunContext:
    """What run_point sees: the network, parameters, results and nodes."""

    def __init__(self, network, params, results_folder, state, monitor=None):
        self.network = network
        self._monitor = monitor
        self.net = network.net
        self.caps = network.caps
        self.params = params
        self.results = results_folder
        self.point = None
        self._progress = sweep.Progress(0)
        self.nodes = []
        self._names = set()
        self._state = state

    def host(self, name):
        """Return the Mininet host called name."""
        return self.net.get(name)

    def start_node(self, host, name, argv, ready=None, barrier=False,
                   suffix='.jsonl', timeout=30, env=None, wait=True):
        """Start a tracked NodeProcess; wait for readiness unless barrier
        or wait=False (start many, then node.wait_ready() each)."""
        if name in self._names:
            raise ValueError('node name %r already used in this run' % name)
        if isinstance(host, str):
            host = self.host(host)
        node = NodeProcess(host, name, argv, self.results.logs, ready=ready,
                           barrier=barrier, suffix=suffix, env=env)
        self._names.add(name)
        node.start()
        self.nodes.append(node)
        self._state.add_pid(node.pid)
        if wait and not barrier:
            node.wait_ready(timeout)
        return node

    @contextlib.contextmanager
    def timed(self):
        """Mark the timed part of a point: the CPU verdict is taken over these
        parts only (not file generation, hashing or process start-up).  An
        experiment that never calls it is judged over whole points."""
        if self._monitor is not None:
            self._monitor.set_phase(cpu.MEASURE)
        try:
            yield
        finally:
            if self._monitor is not None:
                self._monitor.set_phase(None)

    def heartbeat(self, done, total=None, unit=''):
        """Say how far a long point is (e.g. bytes of a 1 GB download); prints
        at most every HEARTBEAT_S seconds, so it is cheap to call often."""
        self._progress.heartbeat(done, total, unit)

    def release(self, nodes, timeout=30):
        """Barrier: wait until all nodes are ready, then send go to each."""
        deadline = time.monotonic() + timeout
        for node in nodes:
            node.wait_ready(max(deadline - time.monotonic(), 0.1))
        for node in nodes:
            node.go()

    def stop_nodes(self, nodes=None):
        """Stop the given nodes (default all) with one shared grace period."""
        nodes = list(self.nodes if nodes is None else nodes)
        return stop_all(list(reversed(nodes)))


class Experiment:
    """Base class of runnable experiments; subclasses fill in the hooks."""

    name = None
    scales = {}
    stats_interval = 1.0
    timed_parts = False     # True: run_point marks its timed parts with ctx.timed()

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

        Called before the lock, the cleanup and the results folder."""

    def estimate(self, params, point):
        """Return the expected seconds of one point (weights the ETA), or None."""
        return None

    def disk(self, params):
        """Return [(path, bytes)] the run will write outside its results folder."""
        return []

    def finish(self, ctx):
        """Run once after the last point, before teardown."""

    def analyse(self, run_dir):
        """Turn a finished run's logs into tables, figures and report.md.

        The experiment names its own analysis (e.g. ``analysis.smoke.build``), so
        the framework never imports ``analysis/`` by name."""
        raise NotImplementedError('%s gives no analysis' % self.name)

    def main(self, argv=None):
        """Run the experiment from the command line; return the exit status."""
        argv = sys.argv[1:] if argv is None else list(argv)
        params = options.parse(self, argv)
        try:
            self.check(params)
        except options.UsageError as e:
            print('%s: %s' % (self.name, e), file=sys.stderr)
            return 2
        if os.geteuid() != 0:
            print('%s: Mininet needs root; run with sudo /usr/bin/python3'
                  % self.name, file=sys.stderr)
            return EXIT_FAILED
        os.environ['PYTHONPATH'] = os.pathsep.join(
            [str(REPO)] + [p for p in os.environ.get('PYTHONPATH', '').split(
                os.pathsep) if p])
        handlers = _install_signals()
        try:
            with leftovers.machine_lock():
                leftovers.clean()
                status, folder = self._run(params, argv)
        except Interrupted as e:    # before the results folder existed
            print('%s: interrupted (%s) before the run started'
                  % (self.name, e), file=sys.stderr)
            return 128 + e.signum
        except FileExistsError as e:    # --out names an earlier run
            print('%s: %s' % (self.name, e), file=sys.stderr)
            return EXIT_FAILED
        finally:
            _restore_signals(handlers)
        print('%s: %s, results in %s' % (self.name, status, folder.path),
              flush=True)
        if status == 'ok':
            return self._analyse(folder.path)
        if status == 'interrupted':
            return 128 + folder.manifest.get('signal', signal.SIGINT)
        return EXIT_FAILED

    def _run(self, params, argv):
        """Run under the lock; return (status, results folder)."""
        from repronet.emu import capabilities, network
        from repronet.run import provenance
        folder = results.ResultsFolder(params.out)
        folder.start(self.name, vars(params), params.seed,
                     [sys.argv[0]] + argv)
        state = leftovers.State()
        net = ctx = monitor = None
        status, error, fields = 'failed', None, {}
        try:
            caps = capabilities.probe()
            folder.update(capabilities=caps.as_dict(),
                          provenance=provenance.collect(REPO))
            topo = self.topology(params)
            points = self.points(params)
            folder.update(points=len(points))
            monitor = cpu.CpuMonitor(0.5, path=folder.log_path('cpu')).start()
            net = network.Network(
                topo, params.switch, params.datapath, caps,
                controller_log=folder.log_path('controller-stats'),
                stats_interval=self.stats_interval, on_built=state.record,
                seed=params.seed, log_dir=folder.logs)
            net.start()
            folder.update(mechanisms=net.mechanisms())
            ctx = RunContext(net, params, folder, state, monitor)
            self.setup(ctx)
            self._points(ctx, points, folder, monitor)
            self.finish(ctx)
            status = 'ok'
        except Interrupted as e:
            status, error = 'interrupted', str(e)
            fields['signal'] = e.signum
            print('%s: %s, tearing down' % (self.name, e), flush=True)
        except Exception as e:
            error = '%s: %s' % (type(e).__name__, e)
            if isinstance(e, _clear_errors()):    # one sentence says it all
                print('%s: %s' % (self.name, e), file=sys.stderr, flush=True)
            else:
                traceback.print_exc()
        finally:
            _defer_signals()
            if monitor is not None:
                monitor.set_phase(None)
            error = _teardown(ctx, net, state, error)
            if ctx is not None:
                fields['nodes'] = [node_record(n) for n in ctx.nodes]
            if error and status == 'ok':
                status = 'failed'
            if monitor is not None:
                monitor.stop()
                fields['cpu'] = monitor.summary()
                if fields['cpu'].get('saturated'):
                    print('%s: WARNING: the CPU was saturated during this run;'
                          ' the machine, not the emulated network, may have '
                          'limited the results' % self.name, flush=True)
            folder.finish(status, error, **fields)
        return status, folder

    def _points(self, ctx, points, folder, monitor):
        """Run every point with a progress line and a points.jsonl record."""
        progress = sweep.Progress(len(points))
        ctx._progress = progress
        with open(folder.log_path('points'), 'a') as log:
            for point in points:
                ctx.point = point
                started = time.time()
                if not self.timed_parts:    # judge CPU over whole points
                    monitor.set_phase(cpu.MEASURE)
                try:
                    result = self.run_point(ctx, point)
                finally:
                    monitor.set_phase(None)
                record = {'t': round(time.time(), 6), 'event': 'point',
                          'point': point, 'started': round(started, 6),
                          'elapsed': round(time.time() - started, 6),
                          'result': result}
                log.write(json.dumps(record, sort_keys=True) + '\n')
                log.flush()
                progress.point_done(point, result=result)

    def _analyse(self, run_dir):
        """Run the analysis of a finished run; return the exit status."""
        try:
            self.analyse(run_dir)
        except Exception:
            traceback.print_exc()
            print('%s: analysis failed; the run itself is complete, retry with '
                  '"python -m analysis %s"' % (self.name, run_dir),
                  file=sys.stderr)
            return EXIT_FAILED
        return 0


def _clear_errors():
    """Return the exception classes whose message needs no traceback."""
    from repronet.emu import capabilities, linkemu_params, network
    from repronet.emu.process import NodeError
    return (capabilities.CapabilityError, linkemu_params.LinkEmulationError,
            network.NetworkError, NodeError)


def node_record(node):
    """Return what the manifest keeps about one node process."""
    return {'name': node.name, 'argv': node.argv, 'pid': node.pid,
            'host': getattr(node.host, 'name', None),
            'returncode': node.returncode}


def _teardown(ctx, net, state, error):
    """Stop nodes, network and leftovers; return error text (merged)."""
    problems = []
    if ctx is not None:
        try:
            ctx.stop_nodes()
        except Exception as e:
            problems.append('stopping nodes: %s' % e)
    if net is not None:
        try:
            net.stop()
        except Exception as e:
            problems.append(str(e))
    try:
        state.clear()
    except Exception as e:
        problems.append('removing leftovers: %s' % e)
    if problems:
        text = 'teardown: ' + '; '.join(problems)
        print(text, file=sys.stderr)
        error = text if error is None else error + '; ' + text
    return error


_PENDING = []


def _raise_interrupted(signum, frame):
    """Signal handler: turn SIGINT/SIGTERM into Interrupted."""
    raise Interrupted(signum)


def _note_signal(signum, frame):
    """Signal handler during teardown: note the signal, keep tearing down."""
    _PENDING.append(signum)
    print('signal %s during teardown: finishing teardown first'
          % signal.Signals(signum).name, file=sys.stderr, flush=True)


def _install_signals():
    """Install the Interrupted handlers; return the old ones."""
    return {s: signal.signal(s, _raise_interrupted)
            for s in (signal.SIGINT, signal.SIGTERM)}


def _defer_signals():
    """Make further signals wait until teardown is done."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _note_signal)


def _restore_signals(handlers):
    """Put the previous signal handlers back."""
    for s, handler in handlers.items():
        signal.signal(s, handler)
