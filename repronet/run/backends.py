"""Build the run's backend: the emulated network (Mininet) or the simulated one.

The runner (``repronet.run.runner``) does the same around both: results folder, points,
progress, teardown, analysis. What differs is here: the emulation probes the kernel,
starts a CPU monitor and builds Mininet; the simulation builds ``repronet.sim`` from the
same Topo and has no monitor (virtual time has no CPU to saturate, unless ``--sim-cost``
models one). Both return (network, monitor or None, ctx); ``network.stop()`` and
``ctx.stop_nodes()`` end them. ``made`` gets the monitor and the network as soon as each
exists, so the runner's teardown stops a network whose start failed half-way.
``teardown`` is that end, the same for both: nodes, network, recorded leftovers.
"""

import sys

from repronet.emu import linkemu_holds
from repronet.run import cpu, options


def build(experiment, params, folder, state, guard, progress, repo, made):
    """Return (network, monitor, ctx) for params.backend, recorded in the manifest."""
    from repronet.run import provenance
    if getattr(params, 'backend', 'emu') == 'sim':
        return _sim(experiment, params, folder, progress, provenance.collect(repo))
    from repronet.emu import capabilities, network
    from repronet.emu.context import EmuContext
    caps = capabilities.probe()
    folder.update(capabilities=caps.as_dict(), provenance=provenance.collect(repo))
    topo = experiment.topology(params)
    net_cls, ctx_cls, where = network.Network, EmuContext, {}
    if getattr(params, 'machines', None):       # hosts on several servers
        from repronet.cluster import backend as cluster
        net_cls, ctx_cls, where = cluster.classes(experiment, folder)
    net = net_cls(
        topo, switch=params.switch, datapath=params.datapath, caps=caps,
        controller_log=folder.log_path('controller-stats'),
        stats_interval=experiment.stats_interval, on_built=state.record,
        seed=params.seed, log_dir=folder.logs, links=params.links,
        cpu_idle=getattr(params, 'cpu_idle', None) or 'poll',
        link_cpus=getattr(params, 'link_cpus', None) or 0,
        link_queues=link_queues(experiment, params), **where)
    # With CPUs set apart for the link daemons, the run is judged by the hosts' CPUs.
    split = getattr(net, 'link_cpus', None)
    monitor = made['monitor'] = cpu.CpuMonitor(
        0.5, path=folder.log_path('cpu'),
        cpus=split.rest if split is not None and split.active else None).start()
    made['net'] = net
    net.start()
    folder.update(mechanisms=dict(net.mechanisms(), backend='emu'))
    return net, monitor, ctx_cls(net, params, folder, state, monitor, guard, progress)


def link_queues(experiment, params):
    """--link-queues, or the experiment's own default when not given ('cpu' only where one
    worker per CPU was measured to help: repronet.emu.linkemu_workers)."""
    return getattr(params, 'link_queues', None) or experiment.link_queues


def precheck(experiment, params, repo):
    """The checks that need root, before the lock and before anything is built: --links
    netem against this kernel's capability probe (cached: build() reuses it), then reach
    and probe the other servers of --machines (options.UsageError: one sentence saying
    what to fix). A simulated run has neither flag: options.check_shared refuses them."""
    if getattr(params, 'links', 'auto') == 'netem':
        from repronet.emu import capabilities
        options.check_links(params, capabilities.probe())
    if getattr(params, 'machines', None):
        from repronet.cluster import backend as cluster
        cluster.precheck(experiment, params, repo)


def _sim(experiment, params, folder, progress, provenance):
    """The simulated network: no capabilities, no monitor, no root."""
    from repronet.run.sim_interpreter import describe
    from repronet.sim.backend import SimBackend
    from repronet.sim.context import SimContext
    folder.update(capabilities=None, provenance=provenance)
    backend = SimBackend(experiment.topology(params), params.seed, folder.logs,
                         costs=getattr(params, 'sim_costs', None), cores=params.sim_cores)
    folder.update(mechanisms=dict(backend.mechanisms(), interpreter=describe(
        getattr(experiment, 'sim_interpreter_choice', None))))
    ctx = SimContext(backend, params, folder, progress)
    return ctx.network, None, ctx


def runs(params, argv):
    """True if the run's backend can run the program argv: any program on an emulated host;
    in simulation only a node program with simulate(). An experiment asks this (before the
    run too: its checks and points) rather than which backend it has."""
    if getattr(params, 'backend', 'emu') != 'sim':
        return True
    from repronet.sim.backend import simulation
    return simulation(argv) is not None


def sim_cpu(ctx):
    """The manifest's cpu record of a simulated run: no monitor; with --sim-cost, the
    modelled cores' busy share over the run's virtual time."""
    backend = ctx.backend
    record = {'backend': 'sim', 'monitored': False, 'saturated': False,
              'virtual_seconds': round(backend.engine.now, 6),
              'events': backend.engine.events,
              'packets_delivered': backend.net.delivered}
    if backend.cpu is not None and backend.engine.now > 0:
        record['mean'] = round(backend.cpu.busy / backend.engine.now, 4)
        record['cores'] = len(backend.cpu.free)
    return record


def link_holds(net, name, points=()):
    """After teardown: the delay daemons' lateness next to their holds (None without
    daemons), split by the run's points; warn, as for a saturated CPU, when it marks the run
    (issue 15)."""
    holds = getattr(getattr(net, 'links', None), 'daemon_holds', None)
    try:
        record = holds() if holds else None
        linkemu_holds.name_points(record, points)
    except Exception as e:  # the manifest must still be finished
        print('%s: the delay daemons\' lateness was not recorded: %s' % (name, e),
              file=sys.stderr)
        return None
    if record and record['marked']:
        print('%s: WARNING: the delay daemons released packets %.1f us late on average, more '
              'than %d %% of the smallest configured hold (%g us); the emulated delays were '
              'longer than asked' % (name, record['late_us_mean'], 100 * record['late_share'],
                                      record['hold_us_min']), flush=True)
    if record and record.get('rt_demoted'):
        print('%s: WARNING: the delay daemons of %s left SCHED_FIFO during the run (they ran '
              'their real-time budget without sleeping) and released packets late from then '
              'on' % (name, ', '.join(record['rt_demoted'])), flush=True)
    return record


def worst_release_sample(holds, monitor):
    """Set the CPU sample that held the daemons' worst release beside it in their record
    (``late_max_sample``), so the report can say whether the VM itself stalled then."""
    if holds and isinstance(holds.get('late_max_at'), (int, float)):
        holds['late_max_sample'] = monitor.sample_at(holds['late_max_at'])


def cpu_idle(net):
    """After teardown: the idle-state record with the states entered during the run (None
    for a simulated run, which has no CPUs to keep awake)."""
    record = getattr(net, 'cpu_idle_record', None)
    return record() if record is not None else None


def node_record(node):
    """Return what the manifest keeps about one node process."""
    return {'name': node.name, 'argv': node.argv, 'pid': node.pid,
            'host': getattr(node.host, 'name', None),
            'returncode': node.returncode}


def teardown(ctx, net, state, error):
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
