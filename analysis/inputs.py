"""What every analysis checks before it trusts a results folder, and how it says what was missing.

A results folder may come from a run that crashed, was killed, or was copied by hand, so
the analysis meets manifests that are not what the runner writes and logs that stop
mid-line. Two kinds of trouble, two exceptions, each carrying one sentence:

- :class:`InputError`: the folder cannot be analysed at all (no readable manifest, a
  manifest that is not a JSON object, names no experiment, or has no ``params`` object);
  nothing is written.
- :class:`IncompleteInputs`: tables, figures and report.md were written, but some inputs
  were missing (a client summary, a capture, the CPU samples); the report names them,
  and ``python -m analysis`` exits with status 1 so a script notices.

:class:`Inputs` collects, while an analysis reads logs, what was missing and how many
unreadable lines ``read_jsonl`` dropped from each log, as a table of its own
(``tables/inputs.csv``) so the same logs give the same list.

:func:`backend` (and :func:`simulated`) is the one answer to "which backend made this
folder?" that every analysis and report asks.
"""

import json
import pathlib
import re

import pandas as pd

from repronet.run.results import read_jsonl, run_status

NAME = re.compile(r'^[a-z_][a-z0-9_]*$')
BACKENDS = ('emu', 'sim')
_JSON_TYPES = {list: 'array', str: 'string', int: 'number', float: 'number',
               bool: 'boolean', type(None): 'null'}


class InputError(ValueError):
    """The results folder cannot be analysed at all; the message is one sentence."""


class IncompleteInputs(ValueError):
    """Tables, figures and report.md were written, but inputs were missing (one sentence)."""


def as_dict(value):
    """Return value if it is a JSON object (dict), else an empty dict."""
    return value if isinstance(value, dict) else {}


def is_number(value):
    """True for an int or float that is not a bool (JSON numbers)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(value, default=0):
    """Return value if it is a JSON number, else default (a field a log or manifest lacks)."""
    return value if is_number(value) else default


def backend(manifest):
    """'emu' or 'sim': the first of params.backend, mechanisms.backend and cpu.backend
    that names one (the runner writes all three alike; a hand-made or half-written manifest
    may hold only one), else 'emu': folders from before the simulator name none."""
    for record in ('params', 'mechanisms', 'cpu'):
        value = as_dict(manifest.get(record)).get('backend')
        if value in BACKENDS:
            return value
    return 'emu'


def simulated(manifest):
    """True for a run of the simulation backend (:func:`backend`)."""
    return backend(manifest) == 'sim'


def status(manifest):
    """The run's status line for a report: ``running`` only while its process lives
    (repronet.run.results.run_status), then the error the manifest recorded, if any."""
    error = manifest.get('error')
    return '%s%s' % (run_status(manifest), ' (%s)' % error if error else '')


def read_manifest(run_dir):
    """Return the manifest of run_dir as a dict; raise InputError when it cannot serve."""
    path = pathlib.Path(run_dir) / 'manifest.json'
    try:
        with open(path, encoding='utf-8') as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise InputError('%s has no manifest.json (not a results folder?)' % run_dir) from None
    except OSError as e:
        raise InputError('cannot read %s: %s' % (path, e.strerror)) from None
    except ValueError as e:
        raise InputError('%s is not JSON (%s)' % (path, e)) from None
    if not isinstance(manifest, dict):
        raise InputError('%s holds a JSON %s, not a JSON object' % (
            path, _JSON_TYPES.get(type(manifest), 'value')))
    experiment = manifest.get('experiment')
    if not isinstance(experiment, str) or not NAME.match(experiment):
        raise InputError('%s: experiment must be a name such as "dht8", not %s' % (
            path, json.dumps(experiment)))
    if not isinstance(manifest.get('params'), dict):
        raise InputError('%s has no params object (%s)' % (
            path, 'params is missing' if 'params' not in manifest else 'params is a JSON %s'
            % _JSON_TYPES.get(type(manifest['params']), 'value')))
    return manifest


class Inputs:
    """The logs an analysis read: what was missing, and the lines read_jsonl dropped."""

    COLUMNS = ['point', 'kind', 'count', 'problem']

    def __init__(self, logs):
        self.logs = pathlib.Path(logs)
        self.rows = []

    def read(self, name, point=None, event=None):
        """Return read_jsonl(logs/name), noting the lines it dropped."""
        records = read_jsonl(self.logs / name, event=event)
        if records.dropped:
            self.rows.append({'point': point, 'kind': 'dropped', 'count': records.dropped,
                              'problem': '%d unreadable line%s dropped from logs/%s' % (
                                  records.dropped, _s(records.dropped), name)})
        return records

    def points(self, keys):
        """Return [(record, point, result)] of logs/points.jsonl whose point has every one
        of keys, in point order; note it when there is none."""
        out = []
        for r in self.read('points.jsonl', event='point'):
            point = as_dict(r.get('point'))
            if all(k in point for k in keys):
                out.append((r, point, as_dict(r.get('result'))))
        if not out:
            self.missing('no finished point in logs/points.jsonl')
        return sorted(out, key=lambda t: t[1]['point'])

    def missing(self, text, point=None, count=1):
        """Note a missing or empty input, described by text (part of a sentence)."""
        self.rows.append({'point': point, 'kind': 'missing', 'count': count, 'problem': text})

    def missing_texts(self):
        """Return the descriptions of the missing inputs, in reading order."""
        return [r['problem'] for r in self.rows if r['kind'] == 'missing']

    def table(self):
        """Return the rows as a DataFrame (point as a nullable integer)."""
        df = pd.DataFrame(self.rows, columns=self.COLUMNS)
        df['point'] = df['point'].astype('Int64')
        return df


def dropped_lines(table):
    """Return the number of log lines dropped, from an Inputs table."""
    return int(table.loc[table['kind'] == 'dropped', 'count'].sum()) if len(table) else 0


def incomplete(table, most=3):
    """Return the IncompleteInputs for an Inputs table's missing rows, or None."""
    texts = list(table.loc[table['kind'] == 'missing', 'problem']) if len(table) else []
    if not texts:
        return None
    more = len(texts) - most
    return IncompleteInputs('tables, figures and report.md written, but inputs were '
                            'missing: %s%s' % ('; '.join(texts[:most]), (
                                ' (and %d more, see report.md)' % more) if more > 0 else ''))


def _s(n):
    """Return 's' unless n is 1."""
    return '' if n == 1 else 's'
