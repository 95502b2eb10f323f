"""The one argument parser of every repronet program: a refusal is one sentence, exit 2.

argparse answers an unknown flag or a wrong value with its whole usage block and then the
error; the project's rule is one clear sentence on stderr and exit status 2, with nothing
started (``--help`` still prints the full usage). One class does that for the topology
scripts' shared command line (``repronet.run.options``), the node programs (``nodes/``,
through ``nodes.dht.common.UsageParser``), the workloads and the benchmarks.

It lives here, in a module that imports nothing of repronet's, because node programs
already import ``repronet`` (``repronet.logline``): they run with the checkout on their
path on an emulated host (``sys.executable -m nodes....`` from the runner's working
directory), in the simulator's own process, and on a cluster's other servers from the
checkout copied there; ``repronet`` never imports ``nodes``.

A program a person never starts (the cluster backend's agent and launcher, the idle-state
holder) also passes ``about``: what it is and what it wants, added to every refusal, so
someone who starts it by hand with no or wrong arguments learns why in the same sentence.

A flag given twice is refused (``--scale smoke --scale default`` is one sentence, not the last one
winning without a word), for every option that stores one value: argparse's own store,
store_true/false/const and BooleanOptionalAction (``--x`` with ``--no-x`` too). Options that
gather (append, count) and actions a program defines itself are left as they are.

Two ways to end, chosen by ``tool``:
- without it (an experiment's shared command line) ``error`` raises ``UsageError``, which
  ``Experiment.main`` prints as ``NAME: sentence`` after its own checks, and exits 2;
- with it (a program whose parse is the first thing its main and its simulate do) it
  prints ``tool: sentence.`` and exits 2 itself; the simulator takes that SystemExit as the
  program's exit status, as a real process's.
"""

import argparse
import functools
import sys


class UsageError(ValueError):
    """A parameter is wrong: one sentence, said before anything is built.

    Raised by an experiment's ``check(params)`` (and by the shared checks);
    ``Experiment.main`` prints it as ``NAME: sentence`` and exits 2, before the
    machine lock, the leftover cleanup and the results folder."""


# The namespace attribute that holds, during one parse, each once-only option's first spelling.
_GIVEN = '_usage_given'
# add_argument's actions that store one value, so a second appearance is refused.
_ONCE = (None, 'store', 'store_const', 'store_true', 'store_false',
         argparse.BooleanOptionalAction)
_once_classes = {}


def _once_call(self, parser, namespace, values, option_string=None):
    """An option's action, refusing the option's second appearance in one command line."""
    given = namespace.__dict__.setdefault(_GIVEN, {})
    first = given.get(self.dest)
    if first is not None:
        if first == option_string:
            raise argparse.ArgumentError(None, '%s is given twice' % option_string)
        raise argparse.ArgumentError(
            None, '%s and %s set the same option; give one of them' % (first, option_string))
    given[self.dest] = option_string
    super(type(self), self).__call__(parser, namespace, values, option_string)


def _once(action, kwargs):
    """The action add_argument made, refusing a repeat if it is an optional storing one value
    (its class swapped for a subclass with _once_call, one per action class)."""
    if action.option_strings and kwargs.get('action') in _ONCE:
        cls = type(action)
        if cls not in _once_classes:
            _once_classes[cls] = type('Once' + cls.__name__.lstrip('_'), (cls,),
                                      {'__call__': _once_call})
        action.__class__ = _once_classes[cls]
    return action


def _once_container(container):
    """container (a UsageParser, or an argument group or mutually exclusive group made from
    one: argparse's groups add arguments themselves) with its add_argument refusing repeats,
    and the groups it makes likewise."""
    add_argument = container.add_argument
    add_group = container.add_argument_group
    add_exclusive = container.add_mutually_exclusive_group

    def add_once(*args, **kwargs):
        return _once(add_argument(*args, **kwargs), kwargs)
    container.add_argument = add_once
    container.add_argument_group = lambda *a, **k: _once_container(add_group(*a, **k))
    container.add_mutually_exclusive_group = \
        lambda **k: _once_container(add_exclusive(**k))
    return container


class UsageParser(argparse.ArgumentParser):
    """argparse whose errors (an unknown flag, a missing one, a value that is not a number
    or not among the choices, a flag given twice, and the program's own ``error`` calls) are
    one sentence instead of the whole usage text and then the error; ``--help`` still prints
    the usage."""

    def __init__(self, *args, tool=None, about=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.tool = tool
        self.about = about
        _once_container(self)   # an optional that stores one value refuses a repeat

    def parse_known_args(self, args=None, namespace=None):
        """argparse's parse, without the bookkeeping of which options were given."""
        namespace, extras = super().parse_known_args(args, namespace)
        namespace.__dict__.pop(_GIVEN, None)
        return namespace, extras

    def add_subparsers(self, **kwargs):
        """Subcommands' parsers end the same way as this one (argparse would make them of
        this parser's class without ``tool`` and ``about``)."""
        kwargs.setdefault('parser_class', functools.partial(UsageParser, tool=self.tool,
                                                            about=self.about))
        return super().add_subparsers(**kwargs)

    def error(self, message):
        if self.about:
            message = '%s (%s)' % (message.rstrip().rstrip('.'), self.about)
        if self.tool is None:
            raise UsageError('%s; %s --help lists the options' % (message, self.prog))
        sys.stderr.write('%s: %s.\n' % (self.tool, message.rstrip().rstrip('.')))
        sys.stderr.flush()
        sys.exit(2)
