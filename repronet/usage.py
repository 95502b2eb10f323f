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


class UsageParser(argparse.ArgumentParser):
    """argparse whose errors (an unknown flag, a missing one, a value that is not a number
    or not among the choices, and the program's own ``error`` calls) are one sentence
    instead of the whole usage text and then the error; ``--help`` still prints the usage."""

    def __init__(self, *args, tool=None, about=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.tool = tool
        self.about = about

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
