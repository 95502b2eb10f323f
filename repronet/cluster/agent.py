"""What the runner asks of another server, one ssh command each; answers are JSON on stdout.

``python3 -m repronet.cluster.agent COMMAND ...`` from the same repository path there
(``repronet.cluster.ssh.Machine.agent``):

- ``probe``: provenance (kernel, OS, versions, git revision) and capabilities of this server,
  plus what the cluster backend needs here (mnexec, the linkdelay binary).
- ``signal DIR TOKEN SIGNAL [group|pid]``: signal the process group (or the process alone)
  of the process ``launch.py`` started under TOKEN; nothing once it has exited (the launcher removes its pid file before reaping
  it, so a reused number is never signalled).
- ``cpu DIR TOKEN...``: user+system CPU seconds of each TOKEN's process so far (null once it
  has exited), so a remote linkdelay daemon's CPU is its own, not its ssh client's.
- ``listening DIR TOKEN PORT [udp]``: is a socket in that process's network namespace
  listening on (bound to) PORT? (``repronet.emu.process.listening_inodes`` read here, where
  the process runs.)
- ``cgroup DIR create NAME QUOTA_US PERIOD_US PID`` / ``cgroup DIR remove NAME``: a CPU-limited
  host's group on this server (``repronet.emu.cpulimit_cgroups.Group`` under the ``repronet``
  parent, on the hierarchy with the cpu controller), with its shell PID moved in; the group
  is recorded in ``DIR/state.jsonl`` so ``clear`` removes it after a crash.
- ``record DIR``: append the JSON lines on stdin (host shells, host namespaces, interfaces
  made in the root namespace) to ``DIR/state.jsonl``, beside the PIDs launch.py recorded.
- ``clear DIR``: remove everything ``DIR/state.jsonl`` records, as the runner's own
  ``repronet.run.leftovers.State.clear`` does locally (recorded PIDs with their start times,
  every process in a recorded host namespace, recorded interfaces), then the recorded
  cgroups, then DIR itself.
  Nothing is found by name pattern: this server may be running other things, and in the
  test it shares the runner's kernel and PID space.
"""

import argparse
import json
import os
import shutil
import signal
import sys

from repronet.usage import UsageParser


def _pid(folder, token):
    try:
        with open(os.path.join(folder, token + '.pid')) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def probe():
    """This server's provenance, capabilities and cluster prerequisites."""
    from repronet.emu import capabilities, linkemu_daemon
    from repronet.run import provenance
    caps = capabilities.probe()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return {'provenance': provenance.collect(repo), 'capabilities': caps.as_dict(),
        'mnexec': shutil.which('mnexec'), 'linkdelay': os.access(linkemu_daemon.BINARY,
                                                                 os.X_OK),
        'uid': os.geteuid()}


def send_signal(folder, token, signame, scope='group'):
    """Signal the group of TOKEN's process (scope pid: the process alone); say whether it
    was still there."""
    pid = _pid(folder, token)
    if pid is None:
        return {'sent': False}
    try:
        (os.killpg if scope == 'group' else os.kill)(pid, getattr(signal, signame))
    except ProcessLookupError:
        return {'sent': False}
    return {'sent': True, 'pid': pid}


def cpu(folder, tokens):
    """{token: CPU seconds of its process so far, or None once it is gone}."""
    from repronet.emu.process import cpu_seconds
    out = {}
    for token in tokens:
        pid = _pid(folder, token)
        out[token] = cpu_seconds(pid) if pid is not None else None
    return out


def listening(folder, token, port, udp=False):
    """Whether TOKEN's network namespace has a socket on port."""
    from repronet.emu.process import listening_inodes
    pid = _pid(folder, token)
    return {'listening': pid is not None and bool(listening_inodes(int(port), pid, udp=udp))}


def _group(name):
    """The Group NAME on this server's cpu hierarchy (v2 before v1, as the probe prefers)."""
    from repronet.emu import cpulimit_cgroups
    found = cpulimit_cgroups.preferred(cpulimit_cgroups.find())
    if not found:
        raise cpulimit_cgroups.CgroupError('this server mounts no cgroup hierarchy with the '
                                           'cpu controller')
    mechanism, root = found[0]
    return cpulimit_cgroups.Group(mechanism, root, name)


def cgroup(folder, action, name, *args):
    """Create (and record) or remove the group NAME; its cgroup.procs path and mechanism."""
    from repronet.emu.cpulimit_cgroups import CgroupError
    try:
        group = _group(name)
        if action == 'create':
            quota_us, period_us, pid = (int(a) for a in args)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, 'state.jsonl'), 'a') as f:
                f.write(json.dumps({'cgroup': name}) + '\n')
            group.create(quota_us, period_us)
            group.add(pid)
        else:
            group.remove()
    except CgroupError as e:
        return {'error': str(e)}
    return {'procs': group.procs, 'path': group.path, 'mechanism': group.mechanism}


def _remove_groups(names):
    """Remove the named groups that still exist (killing what is left in them), then the
    repronet parent if that left it empty; return what went."""
    from repronet.emu.cpulimit_cgroups import CgroupError, remove_parent
    done = []
    for name in dict.fromkeys(names):
        try:
            group = _group(name)
            if os.path.isdir(group.path):
                killed = group.remove()
                done += ['process %d in cgroup %s' % (pid, group.path) for pid in killed]
                done.append('cgroup %s' % group.path)
        except CgroupError as e:
            done.append('not removed: %s' % e)
    if names:
        try:
            remove_parent(_group('x').root)
        except CgroupError:
            pass
    return done


def record(folder, lines):
    """Append records to DIR/state.jsonl; a host's shell becomes its PID (with start time)
    and its network namespace (inode, interfaces, host), as the runner records them."""
    from repronet.run.leftovers import start_time
    from repronet.run.namespaces import netns
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, 'state.jsonl'), 'a') as f:
        for line in lines:
            if not line.strip():
                continue
            entry = json.loads(line)
            if 'shell' in entry:
                pid = int(entry['shell'])
                entry = {'pid': [pid, start_time(pid)],
                         'namespace': [netns(pid), entry['intfs'], entry['host']]}
            f.write(json.dumps(entry) + '\n')
    return {'recorded': True}


def clear(folder):
    """Remove what DIR/state.jsonl records; return what went."""
    from repronet.run.leftovers import State
    data = {'runner': None, 'runner_started': None, 'pids': [], 'intfs': [],
            'bridges': [], 'ovs_bridges': [], 'namespaces': []}
    groups = []
    try:
        with open(os.path.join(folder, 'state.jsonl')) as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue        # a line cut short by a crash
                if 'pid' in entry:
                    data['pids'].append(entry['pid'])
                if 'cgroup' in entry:
                    groups.append(entry['cgroup'])
                if entry.get('namespace') and entry['namespace'][0] is not None:
                    data['namespaces'].append(entry['namespace'])
                data['intfs'] += entry.get('intfs', [])
    except FileNotFoundError:
        return {'done': []}
    done = State(os.path.join(folder, 'state.json'), data).clear()
    done += _remove_groups(groups)
    shutil.rmtree(folder, ignore_errors=True)
    return {'done': done}


ABOUT = ("the cluster backend's helper, run over ssh on another server as COMMAND ARGS; "
         '--help lists the commands')


def _signal_name(text):
    """signal's type: a signal's name (SIGTERM), as the runner sends it."""
    if not text.startswith('SIG') or not isinstance(getattr(signal, text, None), signal.Signals):
        raise argparse.ArgumentTypeError('%r is not a signal name such as SIGTERM' % text)
    return text


def _parser():
    """The commands and their arguments, on the one-sentence parser (repronet.usage)."""
    parser = UsageParser(prog='python3 -m repronet.cluster.agent', tool='repronet.cluster.agent',
                         about=ABOUT, description=__doc__.split('\n\n')[0])
    commands = parser.add_subparsers(dest='command', required=True, metavar='COMMAND')
    commands.add_parser('probe', help='this server\'s provenance and capabilities')
    sub = commands.add_parser('signal', help='signal the group (or the process) of TOKEN')
    sub.add_argument('dir')
    sub.add_argument('token')
    sub.add_argument('signame', type=_signal_name, metavar='SIGNAL')
    sub.add_argument('scope', nargs='?', choices=('group', 'pid'), default='group')
    sub = commands.add_parser('cpu', help='CPU seconds of each TOKEN\'s process')
    sub.add_argument('dir')
    sub.add_argument('tokens', nargs='*', default=[], metavar='TOKEN')
    sub = commands.add_parser('listening', help='is PORT bound in TOKEN\'s namespace')
    sub.add_argument('dir')
    sub.add_argument('token')
    sub.add_argument('port', type=int)
    sub.add_argument('udp', nargs='?', choices=('udp',))
    sub = commands.add_parser('cgroup', help='create NAME QUOTA_US PERIOD_US PID, or remove '
                                             'NAME')
    sub.add_argument('dir')
    sub.add_argument('action', choices=('create', 'remove'))
    sub.add_argument('name')
    sub.add_argument('numbers', nargs='*', type=int, default=[],
                     metavar='QUOTA_US PERIOD_US PID')
    for name, what in (('record', 'append the JSON lines on stdin to DIR/state.jsonl'),
                       ('clear', 'remove what DIR/state.jsonl records')):
        commands.add_parser(name, help=what).add_argument('dir')
    return parser


def main(argv):
    opts = _parser().parse_args(argv)
    if opts.command == 'cgroup' and len(opts.numbers) != (3 if opts.action == 'create' else 0):
        _parser().error('cgroup DIR create takes NAME QUOTA_US PERIOD_US PID, cgroup DIR '
                        'remove takes NAME alone')
    if opts.command == 'probe':
        answer = probe()
    elif opts.command == 'signal':
        answer = send_signal(opts.dir, opts.token, opts.signame, opts.scope)
    elif opts.command == 'cpu':
        answer = cpu(opts.dir, opts.tokens)
    elif opts.command == 'listening':
        answer = listening(opts.dir, opts.token, opts.port, udp=opts.udp == 'udp')
    elif opts.command == 'cgroup':
        answer = cgroup(opts.dir, opts.action, opts.name, *opts.numbers)
    elif opts.command == 'record':
        answer = record(opts.dir, sys.stdin)
    else:
        answer = clear(opts.dir)
    print(json.dumps(answer))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
