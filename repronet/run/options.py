"""The command line every topology script shares.

One name per parameter: the flag ``--repeat``, the Python attribute
``params.repeat`` and the manifest key ``params.repeat`` are the same word
(flags use dashes where the Python name has underscores, nothing else).

Shared flags:
  --out DIR        results folder (default results/<experiment>-<UTC timestamp>)
  --scale NAME     smoke | default | seed: a preset for the experiment's own
                   flags (smoke finishes in seconds, seed reproduces the seed
                   reports); any flag given explicitly overrides the preset
  --repeat N       repetitions of every sweep point
  --seed S         base seed; every sweep point derives its own from it
  --switch KIND    lxbr (Linux bridge, fastest), ovs (Open vSwitch as a
                   learning bridge) or osken (Open vSwitch under our os-ken
                   OpenFlow 1.3 controller, with per-port statistics)
  --datapath DP    auto | kernel | user: the OVS datapath (auto picks kernel
                   where the host has the openvswitch module, else user)
  --links MECH     auto | netem | linkdelay: how link delay, jitter and loss
                   are emulated (auto: netem where the kernel has it, else the
                   linkdelay daemon); forcing one compares the two on one kernel
  --dry-run        print the points, the estimated time and the disk the run
                   needs, then stop (no root, no lock, nothing built)
  --keep-going     a point that fails is recorded and the next one runs
  --cli WHEN       open Mininet's CLI at start, or when a point fails
  --backend B      emu (Mininet, the default) or sim (the same topology and
                   node cores in one process on a virtual clock; no root)
  --sim-cost K=S,...  simulation only: seconds of CPU per callback of each
                   node program (module name), on --sim-cores cores
  --sim-interpreter I  simulation only: auto | pypy3 | python3 runs the points
                   (repronet.run.sim_interpreter; the analysis stays on CPython)
  --link-cpus N    emulation: the last N CPUs run only the linkdelay daemons, the
                   hosts the others (repronet.emu.linkcpus; default 0, shared)
  --link-queues Q  emulation: cpu (a host's delay daemon as one worker per CPU, woken on
                   the packet's CPU; dht8's default) or one (one queue and process per
                   host; the other experiments' default; repronet.emu.linkemu_workers)
  --machines A,B   run the hosts on several servers over ssh (this machine is
                   localhost; repronet.cluster); --placement and --tunnel say how

Every value is checked before anything is built (argparse's own refusals, ``check_shared``
and the experiment's ``limits`` and ``check``): a wrong one is one sentence and exit 2.

An experiment adds its own flags in ``add_arguments(parser)`` with
``default=None`` and gives per-scale values in its ``scales`` dict; values
still unset after that fall back to ``defaults`` in the same dict.
"""

import argparse
import math
import sys

from repronet.run import results
from repronet.usage import UsageError, UsageParser

SCALES = ('smoke', 'default', 'seed')
SWITCHES = ('lxbr', 'ovs', 'osken')
DATAPATHS = ('auto', 'kernel', 'user')
LINKS = ('auto', 'netem', 'linkdelay')    # repronet.emu.linkemu.MECHANISMS
CPU_IDLE = ('poll', 'os')    # repronet.emu.cpuidle.MODES
LINK_QUEUES = ('cpu', 'one')    # repronet.emu.linkemu_workers.QUEUES
CLI_WHEN = ('start', 'failure')
BACKENDS = ('emu', 'sim')
TUNNELS = ('vxlan', 'ssh')
SIM_INTERPRETERS = ('auto', 'pypy3', 'python3')   # repronet.run.sim_interpreter.CHOICES
SHARED_DEFAULTS = {'repeat': 1, 'seed': 1}
SHARED_LIMITS = {'repeat': (1, 1000, 'a whole number'),
                 'seed': (0, 2 ** 63 - 1, 'a whole number')}
MAX_POINTS = 100000     # a sweep larger than this is a typo, not an experiment


def build_parser(experiment):
    """Return the argument parser: shared flags plus the experiment's own."""
    parser = UsageParser(
        prog='%s.py' % experiment.name,
        description=(experiment.__doc__ or experiment.name).strip(),
        epilog=_scales_text(experiment),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    shared = parser.add_argument_group('shared options')
    shared.add_argument(
        '--out', metavar='DIR', default=None,
        help='results folder (default results/%s-<UTC timestamp>)'
        % experiment.name)
    shared.add_argument(
        '--scale', choices=SCALES, default='default',
        help='preset size: smoke finishes in seconds, default is the '
        'normal run, seed reproduces the seed reports (default: default)')
    shared.add_argument(
        '--repeat', type=int, metavar='N', default=None,
        help='repetitions of every sweep point (default: from --scale)')
    shared.add_argument(
        '--seed', type=int, metavar='S', default=None,
        help='base seed; every sweep point derives its own (default 1)')
    shared.add_argument(
        '--switch', choices=SWITCHES, default='lxbr',
        help='lxbr: Linux bridge (default, fastest); ovs: Open vSwitch '
        'learning bridge; osken: Open vSwitch under the os-ken OpenFlow 1.3 '
        'controller, which also logs per-port counters')
    shared.add_argument(
        '--datapath', choices=DATAPATHS, default='auto',
        help='Open vSwitch datapath: kernel module or userspace; auto picks '
        'kernel when the host has it (default auto)')
    shared.add_argument(
        '--links', choices=LINKS, default='auto',
        help='link delay/jitter/loss: netem (the kernel qdisc), linkdelay (our NFQUEUE '
        'daemon) or auto: netem where the kernel has it (default auto)')
    shared.add_argument(
        '--cpu-idle', choices=CPU_IDLE, default=None,
        help='emulation only: poll keeps this machine\'s CPUs out of sleeping idle states '
        'during the run (waking a halted CPU costs more than a LAN link\'s delay); os leaves '
        'them to the kernel (default poll)')
    shared.add_argument(
        '--link-cpus', type=int, default=None, metavar='N',
        help='emulation with linkdelay links only: set the last N CPUs apart for the delay '
        'daemons and run the hosts on the others, so a busy host cannot hold a packet '
        'past its deadline; costs the hosts those CPUs (default 0: shared)')
    shared.add_argument(
        '--link-queues', choices=LINK_QUEUES, default=None,
        help='emulation with linkdelay links only: cpu runs each host\'s delay daemon as one '
        'worker per CPU, each woken on the CPU its packets arrived on (no interrupt across '
        'CPUs: LAN holds on time under load); one keeps one queue and process per host, which '
        'never reorders a flow and lets a daemon run beside a busy sender (default: the '
        'experiment\'s, cpu for dht8, one for the others)')
    shared.add_argument(
        '--dry-run', action='store_true',
        help='print the points, the estimated time and the disk the run needs '
        '(and where), then stop without building anything')
    shared.add_argument(
        '--keep-going', action='store_true',
        help='record a failed point and go on with the next one (the run ends '
        'as failed, and the analysis covers the points that finished)')
    shared.add_argument(
        '--cli', choices=CLI_WHEN, default=None,
        help="open Mininet's CLI on the built network: at start, or when a "
        "point fails (for debugging; needs a terminal)")
    shared.add_argument(
        '--backend', choices=BACKENDS, default='emu',
        help='emu: real processes on Mininet (default); sim: the same topology and '
        'protocol cores in one process on a virtual clock (no root, no Mininet)')
    shared.add_argument(
        '--sim-cost', metavar='MODULE=SECONDS,...', default=None,
        help='sim only: CPU seconds charged per callback of each node program, e.g. '
        'nodes.dht.server=3e-05, and per byte it received, nodes.dht.server/byte=4e-07; '
        'also MODULE/cold, MODULE/first, MODULE/exit, packet and cold_after (see '
        'repronet/sim/cpu.py; python -m analysis.sim_cost EMU_DIR SIM_DIR measures them '
        'from an emulation run; default: no processing cost)')
    shared.add_argument(
        '--sim-cores', type=int, metavar='N', default=None,
        help='sim only: cores the --sim-cost charges share (default: this machine\'s)')
    shared.add_argument(
        '--sim-interpreter', choices=SIM_INTERPRETERS, default=None,
        help='sim only: the interpreter that runs the points (default python3); pypy3 is '
        'faster for runs of minutes, slower for short ones (JIT warm-up); auto: pypy3 where '
        'it is installed and the experiment runs there; the analysis always runs on CPython')
    shared.add_argument(
        '--machines', metavar='localhost,HOST2', default=None,
        help='spread the hosts over these servers (ssh names; this machine is localhost, '
        'where the switches stay); default: this machine alone')
    shared.add_argument(
        '--placement', metavar='block|roundrobin|H=SERVER,...', default=None,
        help='with --machines: which server runs each host (default block)')
    shared.add_argument(
        '--tunnel', choices=TUNNELS, default=None,
        help='with --machines: links between servers over vxlan (default) or ssh tap tunnels')
    own = parser.add_argument_group('%s options' % experiment.name)
    experiment.add_arguments(own)
    return parser


def parse(experiment, argv):
    """Parse argv and fill unset values from the scale preset and defaults (UsageError
    for a flag or value argparse refuses)."""
    parser = build_parser(experiment)
    params = parser.parse_args(argv)
    scales = getattr(experiment, 'scales', {}) or {}
    layers = [scales.get(params.scale, {}), scales.get('defaults', {}),
              SHARED_DEFAULTS]
    workdir_given = getattr(params, 'workdir', None) is not None
    for key in vars(params):
        for layer in layers:
            if getattr(params, key) is None and key in layer:
                setattr(params, key, layer[key])
    if not workdir_given and params.backend == 'sim' and isinstance(
            getattr(params, 'workdir', None), str):
        # a simulation needs no lock and may run beside an emulation of the same
        # experiment: by default they must not share generated files or the workdir's lock
        params.workdir += '-sim'
    if params.out is None:
        params.out = results.default_out(experiment.name)
    return params


def check_range(params, flag, low, high, what='a whole number'):
    """Raise UsageError unless params.<flag> is a finite number in [low, high]."""
    value = getattr(params, flag)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not math.isfinite(value)) or not (
            low <= value <= high) or (what == 'a whole number' and value != int(value)):
        raise UsageError('--%s %s must be %s from %s to %s' % (
            flag.replace('_', '-'), value, what, _num(low), _num(high)))


def number_list(text, flag, parse, low, high):
    """Parse a flag's 'a,b,c' into sorted distinct numbers (int or float, by parse) within
    [low, high]; UsageError in one sentence if it does not parse or lies outside."""
    try:
        values = sorted({parse(v) for v in str(text).split(',') if v.strip()})
    except ValueError:
        values = []
    if not values or values[0] < low or values[-1] > high:
        raise UsageError('--%s must list %s from %s to %s, not %r' % (
            flag, 'whole numbers' if parse is int else 'numbers', list_text([low]),
            list_text([high]), text))
    return values


def list_text(values):
    """Write numbers back the way a list flag takes them ('1,2.5,1000000')."""
    return ','.join(str(v) if isinstance(v, int) else '%g' % v for v in values)


def _num(x):
    """Return a bound as people write it (1000, 0.001, 2^63-1)."""
    if x == 2 ** 63 - 1:
        return '2^63-1'
    return str(int(x)) if x == int(x) and abs(x) < 1e15 else '%g' % x


def check_shared(params, limits=None):
    """Check the shared flags and an experiment's ``limits`` ({flag: (low, high,
    what)}); raise UsageError with one sentence.  Runs before the lock."""
    for flag, bounds in dict(SHARED_LIMITS, **(limits or {})).items():
        if getattr(params, flag, None) is not None:
            check_range(params, flag, *bounds)
    if params.backend == 'sim' and params.cli:
        raise UsageError('--cli opens Mininet\'s CLI, which a simulated run does not have')
    if params.cli and not sys.stdin.isatty():
        raise UsageError('--cli needs a terminal on standard input')
    if params.backend == 'sim':
        if params.sim_cores is not None and not params.sim_cost:
            raise UsageError('--sim-cores sets the cores --sim-cost charges; without '
                             '--sim-cost it does nothing')
        if params.switch != 'lxbr' or params.datapath != 'auto':
            raise UsageError('--switch and --datapath choose the emulated switch; a '
                             'simulated run has none')
        if params.links != 'auto':
            raise UsageError('--links chooses how emulated links delay packets; a '
                             'simulated run models its links instead')
        if params.cpu_idle is not None:
            raise UsageError('--cpu-idle sets this machine\'s idle states for an emulated '
                             'run; a simulated run has no CPUs to keep awake')
        if params.link_cpus is not None:
            raise UsageError('--link-cpus sets CPUs apart for the emulated links\' delay '
                             'daemons; a simulated run has none')
        if params.link_queues is not None:
            raise UsageError('--link-queues chooses how the emulated links\' delay daemons '
                             'read their packets; a simulated run has none')
        if params.sim_cores is not None and not 1 <= params.sim_cores <= 1024:
            raise UsageError('--sim-cores must be a whole number from 1 to 1024')
        from repronet.sim.cpu import parse_costs
        try:
            params.sim_costs = parse_costs(params.sim_cost)
        except ValueError as e:
            raise UsageError(str(e)) from None
    elif params.sim_cost is not None or params.sim_cores is not None or \
            params.sim_interpreter is not None:
        raise UsageError('--sim-cost, --sim-cores and --sim-interpreter need --backend sim')
    _check_machines(params)
    _check_link_cpus(params)
    _check_link_queues(params)


def _check_link_cpus(params):
    """--link-cpus: a count that leaves the hosts at least one CPU, on this machine only."""
    count = getattr(params, 'link_cpus', None)
    if not count:
        return
    from repronet.emu.linkcpus import LinkCpus, LinkCpuError
    try:
        LinkCpus(count)
    except LinkCpuError as e:
        raise UsageError(str(e)) from None
    if getattr(params, 'machines', None):
        raise UsageError('--link-cpus places the delay daemons of this machine; with '
                         '--machines the other servers\' daemons would stay shared, so '
                         'leave it out')
    if params.links == 'netem':
        raise UsageError('--link-cpus places the linkdelay daemons, and --links netem '
                         'has none')


def _check_link_queues(params):
    """--link-queues: only where there can be linkdelay daemons."""
    if getattr(params, 'link_queues', None) is not None and params.links == 'netem':
        raise UsageError('--link-queues chooses how the linkdelay daemons read their '
                         'packets, and --links netem has none')


def _check_machines(params):
    """--machines with its --placement and --tunnel (the servers are reached later)."""
    machines = getattr(params, 'machines', None)
    if not machines:
        if getattr(params, 'placement', None) or getattr(params, 'tunnel', None):
            raise UsageError('--placement and --tunnel place hosts on the servers of '
                             '--machines; give --machines too')
        return
    if params.backend != 'emu':
        raise UsageError('--machines spreads an emulation over servers; a simulated run '
                         'has none')
    params.placement = params.placement or 'block'
    params.tunnel = params.tunnel or 'vxlan'
    from repronet.cluster.placement import check_syntax
    from repronet.cluster.ssh import ClusterError
    try:
        check_syntax(machines, params.placement)
    except ClusterError as e:
        raise UsageError(str(e)) from None


def check_links(params, caps):
    """Refuse --links netem on a kernel without sch_netem (one sentence; caps from the
    capability probe, which needs root, so the runner calls this after its root check)."""
    if getattr(params, 'links', 'auto') == 'netem' and not caps.netem:
        raise UsageError('--links netem needs the sch_netem qdisc, which this kernel lacks '
                         '(see repronet caps); use --links auto or linkdelay, or run in the '
                         'VM: vagrant/vm.py run')


def check_out(params):
    """Raise UsageError unless --out can hold a new run (checked as the user
    who will write it, so after the root check)."""
    problem = results.out_problem(params.out)
    if problem:
        raise UsageError(problem)


def check_points(points):
    """Refuse an empty or absurdly large sweep (one sentence)."""
    if not points:
        raise UsageError('these flags give no points to run')
    if len(points) > MAX_POINTS:
        raise UsageError('these flags give %d points, more than %d; use fewer values or '
                         'a smaller --repeat' % (len(points), MAX_POINTS))


def _scales_text(experiment):
    """Return the help text listing each scale's preset values."""
    scales = getattr(experiment, 'scales', {}) or {}
    lines = []
    for name in SCALES + ('defaults',):
        if scales.get(name):
            lines.append('  %-9s %s' % (name + ':', ' '.join(
                '--%s %s' % (k.replace('_', '-'), v)
                for k, v in scales[name].items())))
    return ('presets (--scale; "defaults" fill what the scale leaves '
            'unset):\n' + '\n'.join(lines)) if lines else None
