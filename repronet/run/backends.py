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

from repronet.run import cpu
from repronet.run.context import RunContext


def build(experiment, params, folder, state, guard, progress, repo, made):
    """Return (network, monitor, ctx) for params.backend, recorded in the manifest."""
    from repronet.run import provenance
    if getattr(params, 'backend', 'emu') == 'sim':
        return _sim(experiment, params, folder, progress, provenance.collect(repo))
    from repronet.emu import capabilities, network
    caps = capabilities.probe()
    folder.update(capabilities=caps.as_dict(), provenance=provenance.collect(repo))
    topo = experiment.topology(params)
    monitor = made['monitor'] = cpu.CpuMonitor(0.5, path=folder.log_path('cpu')).start()
    net = made['net'] = network.Network(
        topo, params.switch, params.datapath, caps,
        controller_log=folder.log_path('controller-stats'),
        stats_interval=experiment.stats_interval, on_built=state.record,
        seed=params.seed, log_dir=folder.logs, links=params.links)
    net.start()
    folder.update(mechanisms=dict(net.mechanisms(), backend='emu'))
    return net, monitor, RunContext(net, params, folder, state, monitor, guard, progress)


def _sim(experiment, params, folder, progress, provenance):
    """The simulated network: no capabilities, no monitor, no root."""
    from repronet.sim.backend import SimBackend
    from repronet.sim.context import SimContext
    folder.update(capabilities=None, provenance=provenance)
    backend = SimBackend(experiment.topology(params), params.seed, folder.logs,
                         costs=getattr(params, 'sim_costs', None), cores=params.sim_cores)
    folder.update(mechanisms=backend.mechanisms())
    ctx = SimContext(backend, params, folder, progress)
    return ctx.network, None, ctx


def sim_cpu(ctx):
    """The manifest's cpu record of a simulated run: no monitor; with --sim-cost, the
    modelled cores' busy share over the run's virtual time."""
    backend = ctx.backend
    record = {'backend': 'sim', 'monitored': False, 'saturated': False,
              'virtual_seconds': round(backend.engine.now, 6),
              'events': backend.engine.events}
    if backend.cpu is not None and backend.engine.now > 0:
        record['mean'] = round(backend.cpu.busy / backend.engine.now, 4)
        record['cores'] = len(backend.cpu.free)
    return record


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
