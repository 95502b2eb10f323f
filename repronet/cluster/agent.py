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
- ``record DIR``: append the JSON lines on stdin (host shells, host namespaces, interfaces
  made in the root namespace) to ``DIR/state.jsonl``, beside the PIDs launch.py recorded.
- ``clear DIR``: remove everything ``DIR/state.jsonl`` records, as the runner's own
  ``repronet.run.leftovers.State.clear`` does locally (recorded PIDs with their start times,
  every process in a recorded host namespace, recorded interfaces), then DIR itself.
  Nothing is found by name pattern: this server may be running other things, and in the
  test it shares the runner's kernel and PID space.
"""

import json
import os
import shutil
import signal
import sys


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
    try:
        with open(os.path.join(folder, 'state.jsonl')) as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue        # a line cut short by a crash
                if 'pid' in entry:
                    data['pids'].append(entry['pid'])
                if entry.get('namespace') and entry['namespace'][0] is not None:
                    data['namespaces'].append(entry['namespace'])
                data['intfs'] += entry.get('intfs', [])
    except FileNotFoundError:
        return {'done': []}
    done = State(os.path.join(folder, 'state.json'), data).clear()
    shutil.rmtree(folder, ignore_errors=True)
    return {'done': done}


def main(argv):
    command, args = argv[0], argv[1:]
    if command == 'probe':
        answer = probe()
    elif command == 'signal':
        answer = send_signal(*args)
    elif command == 'cpu':
        answer = cpu(args[0], args[1:])
    elif command == 'listening':
        answer = listening(args[0], args[1], args[2], udp=args[3:] == ['udp'])
    elif command == 'record':
        answer = record(args[0], sys.stdin)
    elif command == 'clear':
        answer = clear(args[0])
    else:
        print('agent: unknown command %r' % command, file=sys.stderr)
        return 2
    print(json.dumps(answer))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
