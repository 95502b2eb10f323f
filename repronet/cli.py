"""``repronet``: one command line for the experiments and the tools around them.

What ``mn`` is to Mininet.  Each command is a thin door to code that also works on its
own, so the two can never disagree:

- ``run EXPERIMENT [flags]`` replaces this process with ``topologies/EXPERIMENT.py [flags]``
  (``os.execv``): the same flags, output, signals and exit status as the script;
- ``list`` reads each script's docstring and ``scales`` with ``ast``, without importing it
  (so without Mininet or root), and says what ``--scale smoke`` sets and how long the last
  smoke run found under ``./results`` took;
- ``caps`` is ``python -m repronet.emu.capabilities``;
- ``clean`` is ``repronet.run.leftovers.clean()`` under the machine lock, refusing while a
  live run holds the lock (``mn -c`` for what a crashed repronet run left);
- ``analyse RUN_DIR...`` is ``python -m analysis``;
- ``compare RUN_A RUN_B`` is ``repronet.run.compare``;
- ``reproduce [flags]`` is ``repronet.run.reproduce``: each seed's script in turn.

``vagrant/provision.sh`` installs ``/usr/local/bin/repronet``, which runs
``/usr/bin/python3 -m repronet`` from the checkout it was installed from.
"""

import ast
import json
import os
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
TOPOLOGIES = REPO / 'topologies'
PROG = 'repronet'

COMMANDS = (
    ('run', 'EXPERIMENT [flags]', 'run an experiment (the same as topologies/EXPERIMENT.py)'),
    ('list', '', 'the experiments, one line each, and what --scale smoke sets'),
    ('caps', '[--json]', "this machine's capability report (netem, OVS, NFQUEUE, ...)"),
    ('clean', '[--machines A,B]', 'remove what a crashed run left (namespaces, interfaces, bridges, '
     'processes, a simulated run\'s memory folder)'),
    ('analyse', 'RUN_DIR...', 'rebuild tables, figures and report.md of results folders'),
    ('compare', 'RUN_A RUN_B', 'two runs of one experiment side by side, with each '
     "figure's spread"),
    ('reproduce', '[--scale S] [--backend B] [--only A,B]', "every seed report's experiment, "
     'one after another, into one folder with one report'),
)


def usage():
    """Return the --help text: every command with one line."""
    lines = ['usage: %s COMMAND [ARGS]' % PROG, '',
             'Reproducible performance experiments on Mininet.', '', 'commands:']
    for name, args, text in COMMANDS:
        lines.append('  %-30s %s' % ('%s %s' % (name, args), text))
    lines += ['', '"%s run EXPERIMENT --help" shows an experiment\'s flags.' % PROG]
    return '\n'.join(lines)


def command_help(name):
    """Return NAME --help's text: its usage line and what it does (``run``: the experiments)."""
    args, text = next((a, t) for n, a, t in COMMANDS if n == name)
    lines = [('usage: %s %s %s' % (PROG, name, args)).rstrip(), '', text[0].upper() + text[1:] + '.']
    if name == 'run':
        lines += ['', 'experiments: %s' % ', '.join(experiments()),
                  '"%s run EXPERIMENT --help" shows an experiment\'s flags.' % PROG]
    return '\n'.join(lines)


def experiments():
    """Return {name: path} of the runnable experiment scripts in topologies/."""
    return {p.stem: p for p in sorted(TOPOLOGIES.glob('*.py'))
            if re.match(r'^[a-z][a-z0-9_]*$', p.stem)}


def describe(path):
    """Return (first docstring line, smoke preset dict or None) of a script, via ast."""
    tree = ast.parse(path.read_text(), str(path))
    doc = (ast.get_docstring(tree) or '').strip().splitlines()
    smoke = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == 'scales' for t in node.targets):
            smoke = _literal_entry(node.value, 'smoke')
    return (doc[0] if doc else '(no docstring)'), smoke


def _literal_entry(node, key):
    """Return the literal value of key in a dict display node (other entries may be
    expressions, e.g. dht8's defaults), or None."""
    if not isinstance(node, ast.Dict):
        return None
    for k, v in zip(node.keys, node.values):
        try:
            if k is not None and ast.literal_eval(k) == key:
                return ast.literal_eval(v)
        except (ValueError, TypeError, SyntaxError):
            continue
    return None


def last_smoke_seconds(name, folder='results'):
    """Return (seconds, run dir) of the newest finished smoke run of name, or None."""
    best = None
    try:
        manifests = list(pathlib.Path(folder).glob('%s-*/manifest.json' % name))
    except OSError:     # an unreadable results/ says nothing about the cost
        return None
    for manifest in manifests:
        try:
            data = json.loads(manifest.read_text())
            if data.get('status') != 'ok' or data['params'].get('scale') != 'smoke':
                continue
            started, ended = _parse_time(data['started_at']), _parse_time(data['ended_at'])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if best is None or started > best[0]:
            best = (started, ended - started, manifest.parent)
    return best and (best[1], best[2])


def _parse_time(text):
    """Return seconds since the epoch of the manifest's UTC ISO time."""
    import datetime
    return datetime.datetime.fromisoformat(text.replace('Z', '+00:00')).timestamp()


def cmd_list(argv):
    """Print the experiments, one line each."""
    if argv:
        return _refuse('list takes no arguments (got %s)' % ' '.join(argv))
    found = experiments()
    width = max([len(n) for n in found] + [4])
    for name, path in found.items():
        try:
            line, smoke = describe(path)
        except (OSError, SyntaxError, ValueError) as e:
            print('%-*s  (cannot read %s: %s)' % (width, name, path.name, e))
            continue
        print('%-*s  %s' % (width, name, line))
        extra = []
        if smoke:
            extra.append('--scale smoke sets ' + ' '.join(
                '--%s %s' % (k.replace('_', '-'), v) for k, v in smoke.items()))
        last = last_smoke_seconds(name)
        if last:
            extra.append('last smoke run took %.0f s (%s)' % last)
        if extra:
            print('%-*s  %s' % (width, '', '; '.join(extra)))
    return 0


def cmd_run(argv):
    """Replace this process with topologies/EXPERIMENT.py and its flags."""
    found = experiments()
    known = ', '.join(found) or 'none'
    if not argv or argv[0].startswith('-'):
        return _refuse('run needs an experiment first: %s run EXPERIMENT [flags]; '
                       'known experiments: %s' % (PROG, known))
    if argv[0] not in found:
        return _refuse('unknown experiment %r; known experiments: %s' % (argv[0], known))
    script = str(found[argv[0]])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, script] + argv[1:])


def cmd_caps(argv):
    """Print the capability report (python -m repronet.emu.capabilities)."""
    from repronet.emu import capabilities
    return capabilities.main(argv)


def cmd_analyse(argv):
    """Rebuild results folders (python -m analysis)."""
    _importable()
    from analysis.__main__ import interruptible, main
    return interruptible(main, argv)


def cmd_compare(argv):
    """Print two results folders side by side."""
    if len(argv) != 2 or any(a.startswith('-') for a in argv):
        return _refuse('compare takes two results folders: %s compare RUN_A RUN_B' % PROG)
    from repronet.run import compare
    try:
        result = compare.compare(argv[0], argv[1])
    except compare.CompareError as e:
        return _refuse(str(e))
    print(compare.format_comparison(result))
    return 0


def cmd_clean(argv):
    """Remove what a crashed run left, under the machine lock (with --machines A,B also
    what this machine's runs left on the other servers)."""
    machines = None
    if argv[:1] == ['--machines'] and len(argv) == 2:
        from repronet.cluster.placement import parse_machines
        from repronet.cluster.ssh import ClusterError
        try:
            machines = parse_machines(argv[1])
        except ClusterError as e:
            return _refuse(str(e))
    elif argv:
        return _refuse('clean takes no arguments but --machines A,B (got %s)' % ' '.join(argv))
    if os.geteuid() != 0:
        print('%s clean: needs root (it kills processes and deletes interfaces); run it '
              'with sudo' % PROG, file=sys.stderr)
        return 1
    from repronet.run import leftovers, namespaces
    try:
        with leftovers.machine_lock(wait=False):
            state = leftovers.State.load()
            live = state.runner_alive() if state is not None else None
            if live:
                print('%s clean: run %d is still alive and owns the network; stop it first '
                      '(Ctrl-C or kill -TERM %d)' % (PROG, live, live), file=sys.stderr)
                return 1
            names = {} if state is None else {
                'process %d' % pid: 'process %d (%s)' % (pid, namespaces.comm(pid))
                for pid, _ in state.data.get('pids', [])}
            done = [names.get(item, item) for item in leftovers.clean(say=False)]
            if machines:
                from repronet.cluster.network import clean_remote
                done += clean_remote(machines)
    except leftovers.LockBusy as e:
        print('%s clean: a live run holds the machine lock (%s); wait for it to end or '
              'stop it first' % (PROG, e), file=sys.stderr)
        return 1
    if not done:
        print('%s clean: nothing to clean (no recorded run state, no Mininet-style '
              'interfaces)' % PROG)
        return 0
    print('%s clean: removed %d leftover(s) of a crashed run:' % (PROG, len(done)))
    for item in done:
        print('  ' + item)
    return 0


def cmd_reproduce(argv):
    """Run every seed's experiment into one folder (repronet.run.reproduce)."""
    from repronet.run import reproduce
    return reproduce.main(argv)


HANDLERS = {'run': cmd_run, 'list': cmd_list, 'caps': cmd_caps, 'clean': cmd_clean,
            'analyse': cmd_analyse, 'compare': cmd_compare, 'reproduce': cmd_reproduce}


def _refuse(sentence):
    """Print one sentence about bad input; return the usage exit status."""
    print('%s: %s' % (PROG, sentence), file=sys.stderr)
    return 2


def _importable():
    """Make the checkout's top-level packages (analysis/, nodes/) importable."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


def main(argv=None):
    """Dispatch a command; return the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        print(usage(), file=sys.stderr)
        return 2
    if argv[0] in ('-h', '--help', 'help'):
        print(usage())
        return 0
    handler = HANDLERS.get(argv[0])
    if handler is not None and argv[1:] in (['-h'], ['--help']) and \
            argv[0] in ('run', 'list', 'clean', 'compare'):  # caps and analyse have their own
        print(command_help(argv[0]))
        return 0
    if handler is None:
        return _refuse('unknown command %r; commands: %s (see %s --help)'
                       % (argv[0], ', '.join(HANDLERS), PROG))
    _importable()
    return handler(argv[1:])
