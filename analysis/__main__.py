"""``python -m analysis RUN_DIR``: rebuild a run's tables, figures and report.

The experiment's name in ``manifest.json`` picks the module
``analysis.<experiment>``, whose ``build(run_dir)`` rewrites ``tables/``,
``figures/`` and ``report.md`` from ``logs/`` and ``manifest.json`` alone.
Analysis never runs the emulator, so it works on a copied results folder on a
machine without Mininet or root.  The runner calls ``build()`` below at the
end of a run; this command line is the same code.
"""

import argparse
import importlib
import pathlib
import re
import sys

from repronet.run import results


def build(run_dir):
    """Rebuild one results folder; return what the experiment's build returns."""
    run_dir = pathlib.Path(run_dir)
    manifest = results.read_manifest(run_dir)
    experiment = manifest.get('experiment', '')
    if not re.match(r'^[a-z_][a-z0-9_]*$', experiment):
        raise ValueError('%s: manifest names no valid experiment (%r)'
                         % (run_dir, experiment))
    module = importlib.import_module('analysis.%s' % experiment)
    return module.build(run_dir)


def main(argv=None):
    """Command line entry point; return the exit status."""
    parser = argparse.ArgumentParser(
        prog='python -m analysis',
        description='Rebuild tables/, figures/ and report.md of results '
        'folders from their logs/ and manifest.json.')
    parser.add_argument('run_dirs', nargs='+', metavar='RUN_DIR')
    args = parser.parse_args(argv)
    status = 0
    for run_dir in args.run_dirs:
        try:
            build(run_dir)
        except (OSError, ValueError, KeyError, ImportError) as e:
            print('%s: %s' % (run_dir, e), file=sys.stderr)
            status = 1
            continue
        print('%s: tables, figures and report.md rebuilt' % run_dir)
    return status


if __name__ == '__main__':
    sys.exit(main())
