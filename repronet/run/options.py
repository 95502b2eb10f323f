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

An experiment adds its own flags in ``add_arguments(parser)`` with
``default=None`` and gives per-scale values in its ``scales`` dict; values
still unset after that fall back to ``defaults`` in the same dict.
"""

import argparse

from repronet.run import results

SCALES = ('smoke', 'default', 'seed')
SWITCHES = ('lxbr', 'ovs', 'osken')
DATAPATHS = ('auto', 'kernel', 'user')
SHARED_DEFAULTS = {'repeat': 1, 'seed': 1}


class UsageError(ValueError):
    """A parameter is wrong: one sentence, said before anything is built.

    Raised by an experiment's ``check(params)`` (and by the shared checks);
    ``Experiment.main`` prints it as ``NAME: sentence`` and exits 2, before the
    machine lock, the leftover cleanup and the results folder."""


def build_parser(experiment):
    """Return the argument parser: shared flags plus the experiment's own."""
    parser = argparse.ArgumentParser(
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
        '--repeat', type=_positive_int, metavar='N', default=None,
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
    own = parser.add_argument_group('%s options' % experiment.name)
    experiment.add_arguments(own)
    return parser


def parse(experiment, argv):
    """Parse argv and fill unset values from the scale preset and defaults."""
    parser = build_parser(experiment)
    params = parser.parse_args(argv)
    scales = getattr(experiment, 'scales', {}) or {}
    layers = [scales.get(params.scale, {}), scales.get('defaults', {}),
              SHARED_DEFAULTS]
    for key in vars(params):
        for layer in layers:
            if getattr(params, key) is None and key in layer:
                setattr(params, key, layer[key])
    if params.out is None:
        params.out = results.default_out(experiment.name)
    return params


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


def _positive_int(text):
    """Parse a positive integer for argparse."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError('%r is not an integer' % text)
    if value < 1:
        raise argparse.ArgumentTypeError('must be at least 1, not %d' % value)
    return value
