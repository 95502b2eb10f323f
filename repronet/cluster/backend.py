"""What the runner calls for ``--machines``: the precheck, then the classes to build with.

``precheck`` runs in ``Experiment.main`` after the shared checks and before the machine lock
(``repronet.run.backends.precheck``): it reaches and probes every other server
(``repronet.cluster.placement.precheck``) and keeps the result on the experiment for the
build. A refusal is ``options.UsageError``: one sentence, exit 2, nothing made.

``classes`` gives ``repronet.run.backends.build`` the network and context classes and the
extra arguments, and records in the manifest, under ``cluster``, every server (name,
address, and the probe: kernel, OS, versions, git revision, capabilities) and which host
ran where.
"""

from repronet.cluster import placement
from repronet.cluster.network import ClusterContext, ClusterNetwork
from repronet.cluster.ssh import ClusterError
from repronet.run import options, provenance


def precheck(experiment, params, repo):
    """Probe the servers of params.machines; keep them on the experiment or refuse."""
    names = placement.parse_machines(params.machines)
    try:
        machines, where = placement.precheck(experiment.topology(params), names,
                                             params.placement, provenance.collect(repo))
    except ClusterError as e:
        raise options.UsageError(str(e)) from None
    experiment.cluster_plan = machines, where


def classes(experiment, folder):
    """(network class, context class, extra network arguments) of a cluster run."""
    machines, where = experiment.cluster_plan
    params_tunnel = folder.manifest['params']['tunnel']
    folder.update(cluster={
        'machines': {name: {'local': m.local, 'address': m.address, 'user': m.user,
                            'probe': m.probe} for name, m in machines.items()},
        'placement': dict(sorted(where.items())), 'tunnel': params_tunnel})
    return ClusterNetwork, ClusterContext, {'machines': machines, 'placement': where,
                                            'tunnel': params_tunnel}
