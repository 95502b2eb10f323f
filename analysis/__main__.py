"""``python -m analysis RUN_DIR``: rebuild a run's tables, figures and report.

The experiment's name in ``manifest.json`` picks the module
``analysis.<experiment>``, whose ``build(run_dir)`` rewrites ``tables/``,
``figures/`` and ``report.md`` from ``logs/`` and ``manifest.json`` alone.
Analysis never runs the emulator, so it works on a copied results folder on a
machine without Mininet or root.  The runner calls the experiment's ``build()``
at the end of a run; this command line is the same code.

Every folder that cannot be rebuilt, or was rebuilt with inputs missing, is one
sentence on stderr and exit status 1 (``analysis.inputs``): a script looping
over results folders sees which ones to distrust, a person sees why. A RUN_DIR
that does not exist or cannot be read is a usage error, as in ``repronet
compare``: one sentence each (``repronet.run.results.folder_problem``) and exit
status 2, before any folder is rebuilt.
"""

import importlib
import importlib.util
import pathlib
import pkgutil
import sys

from analysis import inputs
from repronet.run.results import folder_problem
from repronet.usage import UsageParser


def experiment_module(experiment, run_dir):
    """Return the module analysing experiment; InputError when analysis/ has none."""
    name = 'analysis.%s' % experiment
    module = importlib.import_module(name) if importlib.util.find_spec(name) else None
    if not callable(getattr(module, 'build', None)):
        raise inputs.InputError('%s: manifest.json names experiment %r, which has no '
                                'analysis (known: %s)' % (run_dir, experiment,
                                                          ', '.join(known())))
    return module


def known():
    """Return the experiments analysis/ can rebuild (modules with a build function)."""
    import analysis
    names = []
    for info in pkgutil.iter_modules(analysis.__path__):
        if not info.name.startswith('_') and callable(getattr(importlib.import_module(
                'analysis.%s' % info.name), 'build', None)):
            names.append(info.name)
    return sorted(names)


def build(run_dir):
    """Rebuild one results folder; return what the experiment's build returns."""
    run_dir = pathlib.Path(run_dir)
    manifest = inputs.read_manifest(run_dir)
    return experiment_module(manifest['experiment'], run_dir).build(run_dir)


def main(argv=None):
    """Command line entry point; return the exit status."""
    parser = UsageParser(
        tool='analysis',
        prog='python -m analysis',
        description='Rebuild tables/, figures/ and report.md of results '
        'folders from their logs/ and manifest.json.')
    parser.add_argument('run_dirs', nargs='+', metavar='RUN_DIR')
    args = parser.parse_args(argv)
    problems = list(filter(None, map(folder_problem, args.run_dirs)))
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 2
    status = 0
    for run_dir in args.run_dirs:
        try:
            build(run_dir)
        except inputs.InputError as e:      # its sentence names the folder
            print(e, file=sys.stderr)
            status = 1
            continue
        except OSError as e:
            print('%s: %s%s' % (run_dir, e.strerror or e, ' (%s)' % e.filename
                                if e.filename else ''), file=sys.stderr)
            status = 1
            continue
        except (ValueError, ImportError) as e:
            print('%s: %s' % (run_dir, e), file=sys.stderr)
            status = 1
            continue
        print('%s: tables, figures and report.md rebuilt' % run_dir)
    return status


def interruptible(main_function, argv=None):
    """Run main_function; Ctrl-C is one line and status 130, not a traceback (a half
    rebuilt folder is rebuilt whole by the next run of the same command)."""
    try:
        return main_function(argv)
    except KeyboardInterrupt:
        print('analysis interrupted; run the same command again to rebuild', file=sys.stderr)
        return 130


if __name__ == '__main__':
    sys.exit(interruptible(main))
