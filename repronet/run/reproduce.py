"""``repronet reproduce``: every seed report's experiment, one after another, into one folder.

A user who wants "the numbers of all five seed reports, on this machine, today" should not
have to know five scripts, their scales and where each wrote its folder.  This runs each
seed's experiment as its own script (``topologies/NAME.py``, the same code, flags, cleanup
and machine lock as running it by hand) with ``--out ROOT/NAME``, then writes ROOT's own
manifest and the combined report (``analysis.seeds``), which reads only the folders.

Before anything is built, every experiment is asked for ``--dry-run`` with the very flags it
will get: a wrong flag stops the whole command with the experiment's own one-sentence error,
and the dry runs' estimates (read from the plan the runner writes as JSON to the file
``REPRONET_DRY_RUN_PLAN`` names, not from its text) give the ETA, corrected as experiments
finish by how much longer the finished ones took than their estimates (``left``).

Signals: each experiment runs in its own session, so a terminal's Ctrl-C reaches this
process only, which passes it on once; the experiment tears down and records itself as
interrupted, and no further experiment starts.  If this process is SIGKILLed, the running
experiment gets SIGTERM from the kernel (``PR_SET_PDEATHSIG``) and cleans up as on Ctrl-C.
"""

import argparse
import ctypes
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

from repronet.run import provenance, results, runner, sweep
from repronet.usage import UsageError, UsageParser

REPO = pathlib.Path(__file__).resolve().parents[2]
PYTHON = '/usr/bin/python3'     # the scripts import Mininet, which only Debian's python sees
# (seed report, experiment, what the seed timed), in the seeds' order
SEEDS = (
    ('000', 'dht8', 'DHT file-sharing index: register, search, download'),
    ('001', 'kvload', 'key-value store under load, beside Redis'),
    ('002', 'transfer', 'TCP file transfer: rate against size, packet size and load'),
    ('003', 'kvscale', 'partitioned key-value store with caches over 1 to 10 servers'),
    ('004', 'rudp', 'reliable UDP in blocks against TCP'),
)
SCALES = ('smoke', 'default', 'seed')
BACKENDS = ('emu', 'sim')
USAGE = ('usage: repronet reproduce [--scale smoke|default|seed] [--backend emu|sim] '
         '[--only NAME,...] [--out DIR] [--seed S] [--dry-run] [-- FLAGS for every experiment]')
HELP = """
Run the five seed reports' experiments one after another (dht8 000, kvload 001, transfer 002,
kvscale 003, rudp 004), each as topologies/NAME.py into DIR/NAME, then write DIR/report.md.

  --scale S     smoke | default | seed, for every experiment (default: default)
  --backend B   emu (Mininet, needs root; the default) or sim (the simulator, no root)
  --only A,B    these experiments only (names as above)
  --out DIR     the folder (default results/seeds-<UTC timestamp>); it must not hold a run
  --seed S      base seed of every experiment (default: each experiment's)
  --dry-run     ask every experiment for its plan and estimate; nothing runs
  -- FLAGS      flags given to every experiment (e.g. -- --repeat 3 --switch ovs); not the
                flags above, which reproduce sets itself

Each experiment first gets --dry-run with its flags, so a wrong one stops everything before
anything is built. Ctrl-C or SIGTERM stops the running experiment (it cleans up) and starts no
other. Exit status: 0 all ok, 1 one failed, 2 wrong arguments, 130/143 interrupted."""
PR_SET_PDEATHSIG = 1
NAMES = tuple(name for _, name, _ in SEEDS)


def _seed(text):
    """--seed's type: the digits as given (each experiment reads them itself)."""
    if not re.fullmatch(r'[0-9]{1,18}', text):
        raise argparse.ArgumentTypeError('must be a whole number, not %r' % text)
    return text


def _only(text):
    """--only's type: the experiments it names, in the seeds' order, each one of NAMES once."""
    picked = [n.strip() for n in text.split(',')]
    if [n for n in picked if n not in NAMES] or len(set(picked)) != len(picked):
        raise argparse.ArgumentTypeError('takes experiments from %s, each once, not %r' % (
            ', '.join(NAMES), text))
    return [n for n in NAMES if n in picked]


def _parser():
    """reproduce's own flags on the one-sentence parser every program uses (repronet.usage):
    argparse refuses unknown flags, missing values, values off the choices or not of their
    type, and a flag given twice; --help prints USAGE and HELP. No abbreviations: --sc is
    not --scale."""
    parser = UsageParser(
        prog='repronet reproduce', usage=USAGE[len('usage: '):], description=HELP.strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False,
        add_help=False)
    parser.add_argument('-h', '--help', action='help', help=argparse.SUPPRESS)
    for flag, kind, choices, default in (
            ('--scale', None, SCALES, 'default'), ('--backend', None, BACKENDS, 'emu'),
            ('--only', _only, None, list(NAMES)), ('--out', None, None, None),
            ('--seed', _seed, None, None)):
        parser.add_argument(flag, type=kind, choices=choices, default=default,
                            help=argparse.SUPPRESS)
    parser.add_argument('--dry-run', action='store_true', help=argparse.SUPPRESS)
    return parser


# reproduce's own flags, which it sets for every experiment itself (refused after --).
OWN_FLAGS = ('-h', '--help', '--scale', '--backend', '--only', '--out', '--seed', '--dry-run')


def parse(argv):
    """Return the options as a dict; UsageError for anything wrong.

    Flags after ``--`` go to every experiment, unread, except reproduce's own (it sets
    them itself). The split at ``--`` and that refusal stay here: argparse (3.11) cannot
    give a positional everything after ``--`` once an optional came first, and would
    take a stray word before ``--`` for an experiment's flag. What cannot be known from
    the flags alone (a folder that holds a run, the emulation without root) is checked
    after the parse."""
    argv = list(argv)
    extra = argv[argv.index('--') + 1:] if '--' in argv else []
    argv = argv[:argv.index('--')] if '--' in argv else argv
    parser = _parser()
    for flag in extra:
        if flag.split('=')[0] in OWN_FLAGS:
            raise UsageError('%s is reproduce\'s own flag: give it before --, not after '
                             '(flags after -- go to every experiment)' % flag.split('=')[0])
    opts = vars(parser.parse_args(argv))
    opts['extra'] = extra
    if opts['out'] is None:
        opts['out'] = results.default_out('seeds')
    problem = results.out_problem(opts['out'])
    if problem:
        raise UsageError(problem)
    if opts['backend'] == 'emu' and os.geteuid() != 0 and not opts['dry_run']:
        raise UsageError('the emulation needs root (Mininet): run it with sudo, or add '
                         '--backend sim')
    return opts


def command(name, opts, out, dry_run=False):
    """Return the argv that runs experiment name into out."""
    argv = [PYTHON, str(REPO / 'topologies' / ('%s.py' % name)), '--scale', opts['scale'],
            '--backend', opts['backend'], '--out', str(out)]
    if opts['seed'] is not None:
        argv += ['--seed', opts['seed']]
    return argv + list(opts['extra']) + (['--dry-run'] if dry_run else [])


def estimate(name, opts, out):
    """Return the experiment's estimated seconds from its --dry-run's plan (the JSON the
    runner writes where PLAN_ENV says; None when it wrote none); UsageError with its own
    sentence when it refuses the flags."""
    with tempfile.TemporaryDirectory(prefix='repronet-plan-') as tmp:
        plan = pathlib.Path(tmp) / 'plan.json'
        proc = subprocess.run(command(name, opts, out, dry_run=True), capture_output=True,
                              text=True, timeout=300,
                              env=dict(os.environ, **{runner.PLAN_ENV: str(plan)}))
        if proc.returncode != 0:
            said = [line for line in proc.stderr.strip().splitlines() if line.strip()]
            raise UsageError('%s refused the flags: %s' % (
                name, said[-1] if said else 'exit status %d' % proc.returncode))
        try:
            seconds = json.loads(plan.read_text(encoding='utf-8'))['estimated_s']
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return int(round(seconds)) if isinstance(seconds, (int, float)) else None


def clock(seconds):
    """Return H:MM:SS for seconds (or '?' when unknown)."""
    return '?' if seconds is None else sweep.format_duration(seconds)


def left(plan, done):
    """Return the seconds the experiments not yet run should take: each one's estimate plus
    the median of how much longer the finished ones took than theirs (never less than 0).

    Added, not multiplied: what a run costs beyond its points (start-up, network, teardown,
    analysis) does not grow with its size, and a machine busier than the one the estimates
    were measured on adds to each experiment rather than scaling it. The dry runs' estimates
    count that part since repronet.run.run_time; before, they counted the points alone. In
    the first emulated smoke run of all five (d249cd8) dht8 took 41 s
    for 19 estimated and kvload 23 s for 69: scaling by the running ratio said 6:09 left after
    dht8 and 1:14 after kvload with 2:58 and 2:35 left; this says 3:17 and 1:41."""
    pending = [p['estimated_s'] or 0 for p in plan if p['name'] not in done]
    over = sorted(done[p['name']] - (p['estimated_s'] or 0) for p in plan if p['name'] in done)
    extra = 0.0
    if over:
        middle = len(over) // 2
        extra = over[middle] if len(over) % 2 else (over[middle - 1] + over[middle]) / 2
    return sum(pending) + len(pending) * max(extra, 0.0)


def _die_with_parent():
    """In the child: SIGTERM when this runner dies, even by SIGKILL (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class Runner:
    """Runs the plan's experiments one by one, passing a signal on to the running one."""

    def __init__(self):
        self.child = None
        self.stopped_by = None

    def _handle(self, signum, frame):
        if self.stopped_by is None:
            self.stopped_by = signum
            print('repronet reproduce: %s: stopping the running experiment (it cleans up) and '
                  'starting no other' % signal.Signals(signum).name, file=sys.stderr,
                  flush=True)
            if self.child is not None and self.child.poll() is None:
                self.child.send_signal(signum)

    def run(self, argv):
        """Start argv, wait for it (through signals); return its exit status."""
        self.child = subprocess.Popen(argv, start_new_session=True,
                                      preexec_fn=_die_with_parent)
        if self.stopped_by is not None:     # the signal came while it was starting
            self.child.send_signal(self.stopped_by)
        while True:
            try:
                return self.child.wait()
            except InterruptedError:
                continue


def main(argv):
    """Command line entry point; return the exit status."""
    try:
        opts = parse(argv)
        root = pathlib.Path(opts['out'])
        plan = []
        for seed, name, what in SEEDS:
            if name in opts['only']:
                out = root / name
                plan.append({'seed': seed, 'name': name, 'what': what, 'out': name,
                             'argv': command(name, opts, out),
                             'estimated_s': estimate(name, opts, out)})
    except UsageError as e:
        print('repronet reproduce: %s' % e, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print('repronet reproduce: interrupted while asking the experiments for their plans; '
              'nothing ran', file=sys.stderr)
        return 128 + signal.SIGINT
    total = sum(p['estimated_s'] or 0 for p in plan)
    for i, p in enumerate(plan, 1):
        print('[%d/%d] seed %s %s (%s): ~%s' % (i, len(plan), p['seed'], p['name'], p['what'],
                                                clock(p['estimated_s'])))
    print('%d experiment(s), estimated %s; results in %s' % (len(plan), clock(total), root))
    if opts['dry_run']:
        return 0
    try:
        folder = results.ResultsFolder(root)
    except results.FolderError as e:
        print('repronet reproduce: %s' % e, file=sys.stderr)
        return 2
    folder.start('seeds', {k: v for k, v in opts.items() if k != 'dry_run'},
                 opts['seed'], ['repronet', 'reproduce'] + list(argv),
                 provenance=provenance.collect(REPO), runs=plan)
    runner, done = Runner(), {}
    previous = {s: signal.signal(s, runner._handle) for s in (signal.SIGINT, signal.SIGTERM)}
    started = time.monotonic()
    try:
        for i, p in enumerate(plan, 1):
            if runner.stopped_by is not None:
                break
            print('\n[%d/%d] seed %s: %s (estimated %s; all left ~%s)' % (
                i, len(plan), p['seed'], ' '.join(p['argv'][1:]), clock(p['estimated_s']),
                clock(left(plan, done))), flush=True)
            t0 = time.monotonic()
            p['started_at'] = results.utc_now()
            p['exit'] = runner.run(p['argv'])
            p['ended_at'], p['seconds'] = results.utc_now(), round(time.monotonic() - t0, 1)
            done[p['name']] = p['seconds']
            folder.update(runs=plan)
            print('[%d/%d] %s: exit %d after %s (estimated %s)%s' % (
                i, len(plan), p['name'], p['exit'], clock(p['seconds']),
                clock(p['estimated_s']), '' if runner.stopped_by else
                '; %s left' % clock(left(plan, done))), flush=True)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    failed = [p['name'] for p in plan if p.get('exit') not in (0, None)]
    status = 'interrupted' if runner.stopped_by else 'failed' if failed else 'ok'
    folder.finish(status, error=('%s exited non-zero' % ', '.join(failed)) if failed else None,
                  runs=plan, seconds=round(time.monotonic() - started, 1))
    for empty in (folder.logs, folder.figures):     # the experiments' folders hold them
        try:
            empty.rmdir()
        except OSError:
            pass
    from analysis import seeds
    seeds.build(root)
    results.hand_over(root)
    print('\nrepronet reproduce: %s after %s; report: %s' % (
        status, clock(time.monotonic() - started), root / 'report.md'))
    return 128 + runner.stopped_by if runner.stopped_by else 0 if status == 'ok' else 1
