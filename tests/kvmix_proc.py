"""workloads.kvmix as a child process for localhost tests, as the runner starts it.

Its exit status, stdout JSON lines and one-sentence stderr are what tests check, so it
always runs as a separate process (``sys.executable -m workloads.kvmix``).
"""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def argv(*args):
    """kvmix's command line."""
    return [sys.executable, '-m', 'workloads.kvmix'] + [str(a) for a in args]


def run(*args, timeout=120):
    """Run kvmix to the end; return (exit status, JSON records, stderr)."""
    p = subprocess.run(argv(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return p.returncode, [json.loads(line) for line in p.stdout.splitlines()], p.stderr


def start(*args):
    """Start kvmix with stdin, stdout and stderr as pipes (for --barrier)."""
    return subprocess.Popen(argv(*args), cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_ready(proc, timeout=60):
    """Read proc's stdout until its ready line; return it (AssertionError if none)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        record = json.loads(line)
        if record['event'] == 'ready':
            return record
    proc.kill()
    raise AssertionError('kvmix printed no ready line: %s' % proc.stderr.read())


def finish(proc, stdin=None, timeout=120):
    """Write stdin (if any), wait; return (exit status, remaining JSON records, stderr)."""
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, [json.loads(line) for line in out.splitlines()], err


def one_sentence(stderr):
    """Assert stderr is one line and no traceback; return it."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and 'Traceback' not in stderr, stderr
    return lines[0]


def summary(records):
    """The one summary record."""
    (record,) = [r for r in records if r['event'] == 'summary']
    return record


def command_calls(node, kinds=('calls', 'rejected_calls')):
    """{'get': n, 'set': n}: GET and SET commands a redis-server received (INFO
    commandstats: executed ``calls`` plus ``rejected_calls``, which include those answered
    with a cluster redirect), or only the kinds asked for."""
    stats = node.client().info('commandstats')
    return {op: sum(stats.get('cmdstat_%s' % op, {}).get(kind, 0) for kind in kinds)
            for op in ('get', 'set')}
