"""One run, one results folder.

A run writes everything it knows into a single folder so that the folder alone
explains the numbers in it (the Flent idea of a self-describing result file):

    RUN_DIR/manifest.json   what ran, with which parameters, on what, and how it ended
    RUN_DIR/logs/           raw logs of every node process, untouched
    RUN_DIR/tables/         tidy CSV derived from logs/ only (written by analysis)
    RUN_DIR/figures/        PNG + PDF (written by analysis/figures.py)
    RUN_DIR/report.md       short human summary (written by analysis)

The manifest is written when the run starts (``status: running``) so that a
run killed with SIGKILL still leaves a folder that says it never finished, and
it is rewritten on every exit path with ``ended_at``, ``status`` (ok | failed |
interrupted) and the error text.  Every write goes to a temporary file first
and is renamed over the old one, so a reader never sees half a manifest.

A SIGKILL leaves ``status: running`` for good, so the first manifest also records
``process``: the writer's PID, its start time (clock ticks since boot, from /proc/PID/stat)
and the kernel's boot id. ``run_status`` (what every reader shows: the reports, the seeds
table) says ``running`` only while that very process lives (a reused PID has another start
time), ``killed (no end recorded)`` when it is gone on this boot, and ``no end recorded``
for a manifest from another boot, or one written before the record existed.
"""

import datetime
import json
import os
import pathlib
import stat

from repronet.run import pids

STATUSES = ('running', 'ok', 'failed', 'interrupted')
KILLED = 'killed (no end recorded)'         # run_status: the writer is gone, on this boot
NO_END = 'no end recorded'                  # run_status: another boot's, or no process record
BOOT_ID = '/proc/sys/kernel/random/boot_id'

ST_RDONLY = getattr(os, 'ST_RDONLY', 1)    # statvfs's read-only flag (PyPy 3.9 lacks the name)


def utc_now():
    """Return the current UTC time as an ISO 8601 string with seconds."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.isoformat(timespec='milliseconds').replace('+00:00', 'Z')


def default_out(experiment):
    """Return the default run folder: results/<experiment>-<UTC timestamp>."""
    stamp = datetime.datetime.now(datetime.timezone.utc)
    return os.path.join('results', '%s-%s' % (
        experiment, stamp.strftime('%Y%m%dT%H%M%SZ')))


def write_json(path, data):
    """Write data as indented, key-sorted JSON atomically (temp file + rename)."""
    path = pathlib.Path(path)
    tmp = path.with_name('.' + path.name + '.tmp')
    with open(tmp, 'w') as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
        f.write('\n')
    os.replace(tmp, path)


def read_manifest(run_dir):
    """Return the manifest of a results folder as a dict."""
    with open(pathlib.Path(run_dir) / 'manifest.json') as f:
        return json.load(f)


def boot_id():
    """The kernel's id of this boot, or None where /proc does not say."""
    try:
        with open(BOOT_ID) as f:
            return f.read().strip() or None
    except OSError:
        return None


def process_record(pid=None):
    """What tells the process pid (default: this one) from any other, also after a reboot."""
    pid = os.getpid() if pid is None else pid
    return {'pid': pid, 'start_time': pids.start_time(pid), 'boot_id': boot_id()}


def run_status(manifest):
    """The manifest's status, except that ``running`` is said only while the process that
    wrote it lives: KILLED when it is gone on this boot, NO_END when it cannot be known."""
    status = manifest.get('status')
    if status != 'running':
        return status
    record = manifest.get('process')
    if not isinstance(record, dict) or not isinstance(record.get('pid'), int) \
            or record.get('start_time') is None or record.get('boot_id') != boot_id():
        return NO_END
    return 'running' if pids.same_process(record['pid'], record['start_time']) else KILLED


class Records(list):
    """The records read_jsonl kept; ``dropped`` counts the lines it could not read."""

    dropped = 0


def read_jsonl(path, event=None):
    """Return the JSON-object records of a JSON-lines log, optionally only one event.

    A missing file gives []; lines that are not a JSON object (a partial last line of a
    node killed mid-write, stray text) are skipped, so analysis never dies on a raw log,
    and counted in the result's ``dropped`` (a ``list`` with that one attribute), so it
    can say what it skipped. Blank lines are neither records nor dropped.
    """
    records = Records()
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if not isinstance(record, dict):
                    records.dropped += bool(line.strip())
                elif event is None or record.get('event') == event:
                    records.append(record)
    except FileNotFoundError:
        pass
    return records


def read_points(run_dir):
    """Return (point, result) pairs of the points a run finished, in point order."""
    records = read_jsonl(pathlib.Path(run_dir) / 'logs' / 'points.jsonl', event='point')
    pairs = [(r['point'], r.get('result') or {}) for r in records]
    return sorted(pairs, key=lambda pair: pair[0]['point'])


class FolderError(RuntimeError):
    """The results folder cannot be made where --out says (one sentence)."""


def folder_problem(path):
    """Why path cannot be read as a results folder, one sentence, or None: it does not
    exist, is not a folder, or this user cannot read it. ``repronet analyse`` and ``repronet
    compare`` refuse such an argument alike, as a usage error, before reading anything."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return 'results folder %s does not exist' % path
    except OSError as e:
        return 'cannot read results folder %s (%s)' % (path, e.strerror.lower())
    if not stat.S_ISDIR(mode):
        return '%s is a file, not a results folder' % path
    if not os.access(path, os.R_OK | os.X_OK):
        return 'cannot read results folder %s (permission denied)' % path
    return None


def writable_ancestor(path, flag):
    """Return (the existing folder path will be made in, None), or (None, why not) in one
    sentence naming flag: an empty name, a file on the way, a folder we cannot write."""
    if not str(path).strip():
        return None, '%s must name a folder, not an empty string' % flag
    probe = pathlib.Path(path).absolute()
    while not os.path.lexists(probe):
        probe = probe.parent
    if not probe.is_dir():
        return None, '%s %s cannot be a folder: %s is not a folder (it is a file)' % (
            flag, path, probe)
    if not os.access(probe, os.W_OK | os.X_OK) or os.statvfs(probe).f_flag & ST_RDONLY:
        return None, '%s %s: %s is not writable' % (flag, path, probe)
    return probe, None


def out_problem(out):
    """Return why --out cannot hold a new run (one sentence), or None.

    Checked before the machine lock, so a typo costs nothing: an empty name
    would write the run into the current folder, a file or a read-only place
    would fail only after the network was built."""
    probe, problem = writable_ancestor(out, '--out')
    if problem:
        return problem
    path = pathlib.Path(out).absolute()
    if (path / 'manifest.json').exists():
        return '--out %s already holds a run (manifest.json exists); choose another' % out
    if probe == path and any(path.iterdir()) and not (path / 'logs').is_dir():
        return '--out %s is a folder that holds other files; choose a new or empty one' % out
    return None


def hand_over(path):
    """Give a results folder to the user who ran sudo (SUDO_UID/SUDO_GID).

    Runs need root, but the analysis does not: ``repronet analyse`` as that user
    must be able to rewrite tables/, figures/ and report.md.  The parent folder
    (e.g. results/) is handed over too when root made it for this run."""
    uid, gid = os.environ.get('SUDO_UID'), os.environ.get('SUDO_GID')
    if os.geteuid() != 0 or not uid or not uid.isdigit():
        return False
    uid, gid = int(uid), int(gid) if gid and gid.isdigit() else -1
    path = pathlib.Path(path)
    targets = [path.parent] if path.parent.stat().st_uid == 0 and \
        path.parent != pathlib.Path('/') and path.parent.name == 'results' else []
    for root, dirs, files in os.walk(path):
        targets.append(pathlib.Path(root))
        targets += [pathlib.Path(root) / n for n in dirs + files]
    for target in targets:
        try:
            os.chown(target, uid, gid, follow_symlinks=False)
        except OSError:
            pass
    return True


class ResultsFolder:
    """A results folder with its manifest, created fresh for one run."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        problem = out_problem(path)
        if problem:
            raise FolderError(problem)
        self.logs = self.path / 'logs'
        self.tables = self.path / 'tables'
        self.figures = self.path / 'figures'
        self.report = self.path / 'report.md'
        try:
            for d in (self.path, self.logs, self.tables, self.figures):
                d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise FolderError('--out %s cannot be made: %s' % (path, e.strerror)) from None
        self.manifest = {}

    def start(self, experiment, params, seed, argv, **fields):
        """Write the first manifest: status running, with what is known now."""
        self.manifest = dict(fields)
        self.manifest.update(
            experiment=experiment, params=dict(params), seed=seed,
            argv=list(argv), started_at=utc_now(), ended_at=None,
            status='running', error=None, process=process_record())
        self._write()

    def update(self, **fields):
        """Merge fields into the manifest and rewrite it."""
        self.manifest.update(fields)
        self._write()

    def finish(self, status, error=None, **fields):
        """Close the manifest with ended_at, status and the error text."""
        if status not in STATUSES[1:]:
            raise ValueError('status must be ok, failed or interrupted, '
                             'not %r' % (status,))
        self.manifest.update(fields)
        self.manifest.update(status=status, error=error, ended_at=utc_now())
        self._write()

    def log_path(self, name, suffix='.jsonl'):
        """Return the path of a raw log file in logs/."""
        return self.logs / (name + suffix)

    def _write(self):
        """Write the manifest atomically."""
        write_json(self.path / 'manifest.json', self.manifest)
