"""Sweep points: cross products of parameter lists times repetitions.

A sweep is declared as data, ``{'rate': [10, 20], 'size': [1, 4]}``, and
expanded into points in a fixed order: the cross product in the order the
keys were given (last key varies fastest), repeated ``repeat`` times with the
repetition as the OUTER loop.  Repetition-outer means one repetition of every
point finishes before the next starts, so slow drift of a shared machine
spreads over all points instead of biasing the last ones.

Every point gets its own seed, derived from the base ``--seed``, the point's
parameter values and its repetition number with SHA-256.  It does not depend
on the point's position, so adding a value to one list leaves the seeds of the
existing points unchanged, and the same command line always gives the same
seeds on any machine (Python's ``hash()`` is salted per process; SHA-256 is not).

``Progress`` prints one line per finished point with elapsed time and ETA:
``[3/10] point 2: kind=search ... ok``. ``[3/10]`` counts finished points from 1;
``point 2`` is the point's own number, counted from 0 as in ``logs/points.jsonl``, the
tables, the reports, the log names (``-p2``) and ``--dry-run``, so a progress line and a
report name a point alike.  It writes plain lines (no carriage returns), so it reads the same in a terminal,
a pipe and a CI log.  Points are not equally long (a 1 GB download against a
search burst), so the ETA weighs the points left by the experiment's own
``estimate()`` of each, scaled by how the finished points compared with
theirs; points without an estimate count as the mean of those with one.
Estimates err differently for different work (dht8's downloads ran ten times
slower than its link rate said, its searches faster), so an experiment may name
each point's ``kind``: a point left is scaled by how the finished points of its
own kind compared with their estimates, and by all finished points until one of
its kind has finished.
"""

import hashlib
import itertools
import json
import sys
import time

HEARTBEAT_S = 10.0      # at most one heartbeat line per this many seconds


def derive_seed(seed, values, repetition):
    """Return a reproducible 31-bit seed for one point."""
    text = json.dumps([seed, sorted(values.items()), repetition],
                      sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:4], 'big') & 0x7fffffff


def expand(grid, repeat=1, seed=1):
    """Return the list of point dicts for a grid of lists times repeat."""
    if repeat < 1:
        raise ValueError('repeat must be at least 1, not %r' % (repeat,))
    keys = list(grid)
    for key in keys:
        if key in ('point', 'repetition', 'seed'):
            raise ValueError('%r is reserved for the sweep itself' % key)
        if isinstance(grid[key], (str, bytes)) or not hasattr(
                grid[key], '__iter__'):
            raise ValueError('sweep values for %r must be a list' % key)
    combos = list(itertools.product(*(list(grid[k]) for k in keys)))
    points = []
    for repetition in range(repeat):
        for combo in combos:
            values = dict(zip(keys, combo))
            point = dict(values)
            point.update(point=len(points), repetition=repetition,
                         seed=derive_seed(seed, values, repetition))
            points.append(point)
    return points


def describe(point):
    """Return a short 'key=value ...' text for a point (without its seed)."""
    return ' '.join('%s=%s' % (k, v) for k, v in point.items()
                    if k not in ('point', 'seed'))


def format_duration(seconds):
    """Return seconds as H:MM:SS."""
    seconds = int(round(max(seconds, 0)))
    return '%d:%02d:%02d' % (seconds // 3600, seconds // 60 % 60, seconds % 60)


class Progress:
    """Prints one progress line per finished point: elapsed time and ETA."""

    def __init__(self, total, stream=None, clock=time.monotonic, weights=None, kinds=None):
        self.total = total
        self.weights = _fill(weights, total)
        self.kinds = (list(kinds or []) + [None] * total)[:total]
        self.done = 0
        self.stream = stream or sys.stdout
        self.clock = clock
        self.started = clock()
        self._last_beat = self._last_end = self.started
        self._took, self._guessed = {}, {}     # per kind: seconds taken, estimates of them

    def heartbeat(self, done, total=None, unit=''):
        """Print how far the running point is, at most every HEARTBEAT_S seconds."""
        now = self.clock()
        if now - self._last_beat < HEARTBEAT_S:
            return None
        self._last_beat = now
        if total:
            text = '%s of %s%s (%.0f%%)' % (done, total, unit, 100.0 * done / total)
        else:
            text = '%s%s' % (done, unit)
        line = '  [%d/%d] ... %s  elapsed %s' % (
            self.done + 1, self.total, text, format_duration(now - self.started))
        print(line, file=self.stream, flush=True)
        return line

    def point_done(self, point, status='ok', result=None):
        """Count one finished point and print its progress line."""
        if isinstance(result, dict) and result:
            status += ' ' + ' '.join('%s=%s' % kv for kv in result.items())
        now = self.clock()
        if self.done < self.total:
            kind = self.kinds[self.done]
            self._took[kind] = self._took.get(kind, 0.0) + now - self._last_end
            self._guessed[kind] = self._guessed.get(kind, 0.0) + self.weights[self.done]
        self._last_end = now
        self.done += 1
        elapsed = now - self.started
        remaining = self.total - self.done
        done_weight = sum(self.weights[:self.done])
        if done_weight > 0:
            overall = elapsed / done_weight
            eta = sum(w * (self._took[k] / self._guessed[k] if self._guessed.get(k) else overall)
                      for w, k in zip(self.weights[self.done:], self.kinds[self.done:]))
        else:
            eta = elapsed / self.done * remaining
        line = '[%d/%d] %s%s %s  elapsed %s  ETA %s' % (
            self.done, self.total, 'point %s: ' % point['point'] if 'point' in point else '',
            describe(point), status, format_duration(elapsed), format_duration(eta))
        print(line, file=self.stream, flush=True)
        return line


def _fill(weights, total):
    """Return total positive weights: unknown ones get the mean of the known."""
    weights = list(weights or [])[:total]
    known = [w for w in weights if w is not None and w > 0]
    mean = sum(known) / len(known) if known else 1.0
    weights += [None] * (total - len(weights))
    return [w if w is not None and w > 0 else mean for w in weights]
