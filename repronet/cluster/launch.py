"""Start one process on this server for a cluster run, and never let it outlive the run.

Run over ssh by ``repronet.cluster.nodes`` (``launch.py --dir D --token T [--ns PID]
[--cwd C] [--cgroup PROCS] [--env K=V ...] -- ARGV``); it imports from repronet only
``repronet.run.pids`` (which imports only ``os``: the start time and the group kill the
runner's cleanup uses too), so it starts fast.

- The process is forked, made a session (and process group) leader, moved into a CPU-limited
  host's cgroup when ``--cgroup`` names its ``cgroup.procs`` (before exec, so nothing it
  starts escapes the limit), and attached to the emulated host's network and mount
  namespaces with ``mnexec -a PID`` (its own PID is kept: mnexec execs). stdin, stdout and
  stderr are ssh's, so its log streams back into the results folder on the runner's machine
  and a barrier's ``go`` arrives on its stdin.
- Its PID goes to ``D/T.pid`` (signals and readiness checks find it there, see
  ``repronet.cluster.agent``) and, with its start time, to ``D/state.jsonl``, the record
  ``repronet clean --machines`` kills from after a crash.
- This launcher stays as its parent. It watches its own stderr, a pipe to sshd: when the
  runner's ssh goes away (the runner ended, was killed, or the connection broke) the pipe
  reports a hang-up and the group gets SIGTERM, then SIGKILL after GRACE seconds.
- When the process exits, it is not reaped at once (``waitid`` with ``WNOWAIT``): its
  zombie holds the PID, so what is left of its group is killed while that number is still
  ours, the pid file is removed, and only then is it reaped. The launcher exits with the
  process's status (128 + N for a signal), which ssh hands back to the runner.
"""

import json
import os
import select
import signal
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:        # run as a script: import from this checkout
    sys.path.insert(0, REPO)
from repronet.run.pids import signal_group, start_time  # noqa: E402
from repronet.usage import UsageParser  # noqa: E402

GRACE = 3.0
TICK = 0.2


def _parser():
    """The flags before ``--``, on the one-sentence parser (repronet.usage)."""
    parser = UsageParser(
        prog='python3 repronet/cluster/launch.py', tool='launch.py', allow_abbrev=False,
        about="the cluster backend's launcher, run over ssh on another server as --dir D "
              '--token T [--ns PID] [--cwd C] [--cgroup PROCS] [--env K=V ...] -- ARGV',
        description=__doc__.split('\n\n')[0])
    parser.add_argument('--dir', required=True, help='folder of the pid files and state.jsonl')
    parser.add_argument('--token', required=True, help='name of this process in --dir')
    parser.add_argument('--ns', help='PID of the emulated host whose namespaces it joins')
    parser.add_argument('--cwd', help='working directory')
    parser.add_argument('--cgroup', help='cgroup.procs file it joins before exec')
    parser.add_argument('--env', action='append', default=[], metavar='K=V',
                        help='environment variable (repeatable)')
    return parser


def _parse(argv):
    """Return (options dict, command argv). The split at ``--`` is done here: argparse
    would read the command's own flags as launch.py's."""
    i = argv.index('--') if '--' in argv else len(argv)
    parser = _parser()
    opts, command = vars(parser.parse_args(argv[:i])), argv[i + 1:]
    if not command:
        parser.error('give the command to start after --')
    opts['env'] = dict(value.partition('=')[::2] for value in opts['env'])
    return {k: v for k, v in opts.items() if v is not None}, command


def _child(opts, command):
    """In the child: new session, environment, namespaces, exec (never returns)."""
    os.setsid()
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    env = dict(os.environ)
    env.update(opts['env'])
    env['PYTHONPATH'] = os.pathsep.join(
        [REPO] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p and p != REPO])
    if opts.get('cgroup'):
        try:
            fd = os.open(opts['cgroup'], os.O_WRONLY)
            try:
                os.write(fd, b'0')      # 0: this process itself
            finally:
                os.close(fd)
        except OSError as e:
            os.write(2, ('launch.py: cannot join %s: %s\n' % (opts['cgroup'], e)).encode())
            os._exit(126)
    if opts.get('cwd'):
        os.chdir(opts['cwd'])
    if opts.get('ns'):
        command = ['mnexec', '-a', opts['ns']] + command
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        os.write(2, ('launch.py: cannot start %s: %s\n' % (command[0], e)).encode())
        os._exit(127)


def _exited(pid, timeout):
    """Wait up to timeout for pid to exit, without reaping it; return True if it did."""
    deadline = time.monotonic() + timeout
    while True:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def main(argv):
    opts, command = _parse(argv)
    os.makedirs(opts['dir'], exist_ok=True)
    pid = os.fork()
    if pid == 0:
        _child(opts, command)
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGTERM,
                  lambda *_: signal_group(pid, signal.SIGTERM, group_only=True))
    pid_file = os.path.join(opts['dir'], opts['token'] + '.pid')
    with open(pid_file + '.tmp', 'w') as f:
        f.write('%d\n' % pid)
    os.replace(pid_file + '.tmp', pid_file)
    with open(os.path.join(opts['dir'], 'state.jsonl'), 'a') as f:
        f.write(json.dumps({'pid': [pid, start_time(pid)], 'token': opts['token']}) + '\n')
    watch = select.poll()
    watch.register(2, 0)        # no events asked: POLLERR/POLLHUP are always reported
    while not _exited(pid, 0):
        if watch.poll(TICK * 1000):     # the runner's end of the pipe is gone
            signal_group(pid, signal.SIGTERM, group_only=True)
            if not _exited(pid, GRACE):
                signal_group(pid, signal.SIGKILL, group_only=True)
            break
    _exited(pid, 3600)
    # its zombie still holds the number: the group is ours
    signal_group(pid, signal.SIGKILL, group_only=True)
    try:
        os.unlink(pid_file)
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
