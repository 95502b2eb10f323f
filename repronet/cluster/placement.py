"""Which server each host runs on, and the checks made before anything is built.

``--machines localhost,HOST2`` lists the servers (this machine must be one: the switches, the
controller and the runner stay here; hosts are what gets spread). ``--placement``:

- ``block`` (default): the hosts in Mininet's natural order (``Topo.hosts()``) cut into one
  contiguous block per server, the first blocks one larger when they do not divide evenly,
  the way Mininet's ``SwitchBinPlacer`` bins switches;
- ``roundrobin``: host i on server i mod N (Mininet's ``RoundRobinPlacer``);
- ``h1=HOST2,h3=HOST2``: an explicit map; hosts not named stay on this machine.

:func:`check_syntax` runs with the other shared checks (no network); :func:`precheck` runs
before the machine lock and before anything is built: each other server is reached over ssh
(unreachable, no passwordless ssh, unknown host key are each one sentence saying what to
fix), probed by ``repronet.cluster.agent probe`` and refused if its Mininet version or
repronet revision differs from this machine's, or if it lacks what its hosts need (the
linkdelay daemon for delay/loss, a cgroup cpu controller for a CPU limit, which is checked
against that server's CPU count).
The probes go into the manifest as each server's provenance.
"""

from repronet.cluster.ssh import REPO, ClusterError, Machine, is_local, route_to

PLACEMENTS = ('block', 'roundrobin')
DELAY_KEYS = ('delay', 'jitter', 'loss')


def parse_machines(text):
    """The server names of --machines; ClusterError (one sentence) if the list is wrong."""
    names = [n.strip() for n in text.split(',')]
    if any(not n for n in names):
        raise ClusterError('--machines has an empty name: give a comma-separated list such '
                           'as localhost,HOST2')
    if len(set(names)) != len(names):
        raise ClusterError('--machines names a server twice')
    local = [n for n in names if is_local(n)]
    if len(local) != 1:
        raise ClusterError('--machines must name this machine once (localhost): the '
                           'switches and the runner stay here')
    if len(names) < 2:
        raise ClusterError('--machines with one server is a normal run; name a second one '
                           'or leave --machines out')
    return names


def check_syntax(machines, placement):
    """Check --machines and --placement without touching the network."""
    names = parse_machines(machines)
    if placement in PLACEMENTS:
        return
    for item in placement.split(','):
        host, sep, server = item.partition('=')
        if not sep or not host.strip():
            raise ClusterError('--placement is block, roundrobin or HOST=SERVER,...; '
                               '%r is none of these' % item)
        if server.strip() not in names:
            raise ClusterError('--placement puts %s on %s, which --machines does not list'
                               % (host.strip(), server.strip()))


def place(hosts, names, placement):
    """Return {host: server name} for the topology's hosts (Mininet's natural order)."""
    local = next(n for n in names if is_local(n))
    if placement == 'block':
        size, extra = divmod(len(hosts), len(names))
        out, i = {}, 0
        for k, name in enumerate(names):
            count = size + (1 if k < extra else 0)
            for host in hosts[i:i + count]:
                out[host] = name
            i += count
        return out
    if placement == 'roundrobin':
        return {host: names[i % len(names)] for i, host in enumerate(hosts)}
    explicit = dict(item.split('=', 1) for item in placement.split(','))
    unknown = sorted(set(explicit) - set(hosts))
    if unknown:
        raise ClusterError('--placement names %s, which the topology does not have'
                           % ', '.join(unknown))
    return {host: explicit.get(host, local) for host in hosts}


def precheck(topo, names, placement, local_probe):
    """Reach and probe every other server; return (Machines by name, placement map)."""
    where = place(topo.hosts(), names, placement)
    machines = {}
    for name in names:
        machine = Machine(name)
        machines[name] = machine
        if machine.local:
            continue
        try:
            machine.connect()
            machine.probe = machine.agent('probe')
        except ClusterError as e:
            if 'No such file' in str(e) or 'No module named' in str(e):
                raise ClusterError('server %s has no repronet checkout at %s; clone this '
                                   'commit there at the same path' % (name, REPO))
            raise
        finally:
            machine.disconnect()
        _compare(machine, local_probe)
        _needs(machine, topo, [h for h, m in where.items() if m == name])
    here = next(m for m in machines.values() if m.local)
    here.address = route_to(next(m for m in machines.values() if not m.local).address)[0]
    return machines, where


def _compare(machine, local):
    """Refuse a server whose Mininet or repronet differs from this machine's."""
    theirs = machine.probe['provenance']
    mine_mn, their_mn = local['versions'].get('mininet'), theirs['versions'].get('mininet')
    if mine_mn != their_mn:
        raise ClusterError('server %s runs Mininet %s and this machine %s; install the same '
                           'version on both (vagrant/provision.sh)' % (
                               machine.name, their_mn, mine_mn))
    mine_git, their_git = local.get('git') or {}, theirs.get('git') or {}
    if mine_git.get('revision') != their_git.get('revision'):
        raise ClusterError('server %s has repronet at %s and this machine at %s; check out '
                           'the same commit on both' % (
                               machine.name, (their_git.get('revision') or '?')[:12],
                               (mine_git.get('revision') or '?')[:12]))
    if not machine.probe.get('mnexec'):
        raise ClusterError('server %s has no mnexec; install mininet there '
                           '(vagrant/provision.sh)' % machine.name)


def _needs(machine, topo, hosts):
    """Refuse hosts placed on machine that ask for what is not supported or missing there."""
    from repronet.emu.cpulimit import CpuLimitError, host_limit
    cpus = (machine.probe.get('provenance', {}).get('host') or {}).get('cpus') or 1
    for host in hosts:
        try:
            limit = host_limit(host, topo.nodeInfo(host), cpus)
        except CpuLimitError as e:
            raise ClusterError('%s (on server %s)' % (str(e).rstrip('.'), machine.name))
        if limit is not None and not (machine.probe.get('capabilities') or {}).get(
                'cgroup_cpu'):
            raise ClusterError('host %s asks for a CPU limit, but server %s has no cgroup cpu '
                               'controller that takes one (its capability report says why); '
                               'place the host on localhost' % (host, machine.name))
    delayed = any(k in info for _, _, info in topo.links(withInfo=True) for k in DELAY_KEYS)
    caps = machine.probe.get('capabilities') or {}
    if delayed and hosts and not caps.get('netem') and not machine.probe.get('linkdelay'):
        raise ClusterError('server %s needs the linkdelay daemon for delay/jitter/loss; run '
                           '`make -C repronet/emu/linkdelay` there' % machine.name)
