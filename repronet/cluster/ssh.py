"""The servers of a cluster run and the one way this machine talks to them: ssh.

``--machines localhost,HOST2`` names the servers; ``localhost`` (or this machine's own
hostname) is this machine and is reached without ssh. Every other name is an ssh
destination as ssh itself resolves it (``ssh -G``): ``~/.ssh/config``, or the file in
``REPRONET_SSH_CONFIG`` (what ``repronet.cluster.nsserver`` writes), so keys, users, ports
and host-key checking are the user's ssh settings, never a prompt: every ssh here runs with
``BatchMode=yes``.

One control master per server (``ssh -M -N``, ``ControlPersist=no``) carries every short
command and every node process of the run as a session of one connection, so a node starts
in one round trip instead of a key exchange; the master's socket lives in a folder of this
run under ``/run/repronet/``. ssh tap tunnels (``-w``) get connections of their own. Every
ssh process starts in a session of its own (a Ctrl-C at the terminal reaches the runner,
which then tears down over ssh, not the ssh processes under it) with every file descriptor
but stdin/stdout/stderr closed, so none can inherit the machine lock; the runner records
their PIDs as leftovers.

Remote commands run as the ssh user, prefixed with ``sudo -n`` unless that user is root.
Our own scripts run on a server from the same repository path (``repronet/cluster/launch.py``,
``repronet/cluster/agent.py``); the precheck refuses a server where that checkout is missing
or at another revision.
"""

import json
import os
import pathlib
import shlex
import signal
import socket
import subprocess
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
PYTHON = '/usr/bin/python3'
LAUNCH = str(REPO / 'repronet' / 'cluster' / 'launch.py')
AGENT = ['-m', 'repronet.cluster.agent']
CONFIG_ENV = 'REPRONET_SSH_CONFIG'
SOCKET_ROOT = '/run/repronet/ssh'
LOCAL_NAMES = ('localhost', '127.0.0.1')
# On each other server: launch.py's pid files and the record of what this machine's run
# made there (repronet.cluster.agent clears it after a crash).
REMOTE_DIR = '/run/repronet/cluster-from-%s' % socket.gethostname()


class ClusterError(RuntimeError):
    """A server cannot take part in the run (one sentence saying what to fix)."""


def config_args():
    """``-F FILE`` when REPRONET_SSH_CONFIG names one, else nothing (ssh's own config)."""
    path = os.environ.get(CONFIG_ENV)
    return ['-F', path] if path else []


def is_local(name):
    """True if name is this machine."""
    return name in LOCAL_NAMES or name == socket.gethostname()


def resolve(name):
    """Return (address, user, port) ssh would use for name; ClusterError if it cannot say."""
    proc = subprocess.run(['ssh'] + config_args() + ['-G', name], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise ClusterError('ssh cannot read its configuration for %s (%s); fix ~/.ssh/config '
                           'or %s' % (name, proc.stderr.strip(), CONFIG_ENV))
    opts = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition(' ')
        opts.setdefault(key, value)
    host = opts.get('hostname', name)
    try:
        address = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
    except OSError:
        raise ClusterError('server %s: its address %s does not resolve; put it in /etc/hosts '
                           'or give HostName in the ssh config' % (name, host))
    return address, opts.get('user', 'root'), int(opts.get('port', 22))


class Machine:
    """One server of the run: how to reach it and run commands there."""

    def __init__(self, name):
        self.name = name
        self.local = is_local(name)
        self.address, self.user, self.port = (None, 'root', 22) if self.local \
            else resolve(name)
        self.socket = None
        self.master = None
        self.probe = None           # the agent's probe record, once prechecked

    def __repr__(self):
        return 'Machine(%r)' % self.name

    # -- the control master -----------------------------------------------------------
    def connect(self, timeout=15.0):
        """Start this server's control master and wait until it accepts sessions."""
        if self.local or self.master is not None:
            return
        os.makedirs(SOCKET_ROOT, mode=0o700, exist_ok=True)
        remove_stale_sockets()
        folder = tempfile.mkdtemp(prefix='%d-' % os.getpid(), dir=SOCKET_ROOT)
        self.socket = os.path.join(folder, 'master')
        self.master = spawn(['ssh'] + config_args() + [
            '-M', '-N', '-o', 'ControlPath=' + self.socket, '-o', 'ControlPersist=no',
            '-o', 'BatchMode=yes', '-o', 'ServerAliveInterval=5', self.name],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket):
            if self.master.poll() is not None:
                why = self.master.stderr.read().decode(errors='replace').strip()
                self.disconnect()
                raise ClusterError(explain_ssh_failure(self.name, why))
            if time.monotonic() > deadline:
                self.disconnect()
                raise ClusterError('server %s: ssh did not connect within %gs; check that '
                                   'it is up and reachable' % (self.name, timeout))
            time.sleep(0.02)

    def disconnect(self):
        """End the control master (and with it every session still on it)."""
        if self.master is None:
            return
        from repronet.emu.process import stop_popen
        stop_popen(self.master, grace=5)
        self.master.stderr.close()
        self.master = None
        folder = os.path.dirname(self.socket)
        for path in (self.socket, folder):
            try:
                (os.rmdir if path == folder else os.unlink)(path)
            except OSError:
                pass
        self.socket = None      # later commands make connections of their own

    # -- commands -----------------------------------------------------------------------
    def sudo(self):
        """The prefix a remote command needs to run as root."""
        return [] if self.local or self.user == 'root' else ['sudo', '-n']

    def ssh_prefix(self, mux=True, tty=False):
        """``ssh ... NAME``: through the control master, or (mux=False) a connection of its
        own, which is what a long-lived process needs: when that connection ends, sshd
        closes the process's pipes and ``launch.py`` ends it (a session on a master stays
        open on the server after its local ssh client is killed)."""
        way = ['-o', 'ControlPath=' + self.socket, '-o', 'ControlMaster=no'] \
            if mux and self.socket else ['-o', 'ControlPath=none']
        return (['ssh'] + config_args() + way + ['-o', 'BatchMode=yes', '-tt' if tty else '-T',
                                                 self.name])

    def argv(self, command, mux=True):
        """The local argv that runs command (a list) as root on this server."""
        command = self.sudo() + [str(c) for c in command]
        if self.local:
            return command
        return self.ssh_prefix(mux) + ['--', ' '.join(shlex.quote(c) for c in command)]

    def run(self, command, input=None, timeout=60, check=True):
        """Run command on the server; return its stdout; ClusterError if check and it fails."""
        try:
            proc = subprocess.run(self.argv(command), input=input, capture_output=True,
                                  text=True, timeout=timeout, start_new_session=True,
                                  stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ClusterError('server %s: %s took more than %gs' % (
                self.name, ' '.join(map(str, command))[:80], timeout))
        if check and proc.returncode != 0:
            raise ClusterError('server %s: %s failed: %s' % (
                self.name, ' '.join(map(str, command))[:120],
                proc.stderr.strip() or 'exit %d' % proc.returncode))
        return proc.stdout

    def agent(self, *args, input=None, timeout=60, check=True):
        """Run ``repronet.cluster.agent ARGS`` on the server; return its parsed JSON answer."""
        command = ['env', 'PYTHONPATH=' + str(REPO), PYTHON] + AGENT + [str(a) for a in args]
        out = self.run(command, input=input, timeout=timeout, check=check)
        return json.loads(out) if out.strip() else None


def remove_stale_sockets():
    """Remove control-socket folders of runs that are gone (named by their runner's PID)."""
    try:
        folders = os.listdir(SOCKET_ROOT)
    except FileNotFoundError:
        return
    for folder in folders:
        pid = folder.split('-', 1)[0]
        if pid.isdigit() and not os.path.exists('/proc/' + pid):
            path = os.path.join(SOCKET_ROOT, folder)
            for name in os.listdir(path):       # a socket whose master was killed
                os.unlink(os.path.join(path, name))
            os.rmdir(path)


def route_to(address):
    """(source address, interface) this machine uses to reach address."""
    out = subprocess.run(['ip', '-o', 'route', 'get', address], capture_output=True,
                         text=True).stdout.split()
    if 'src' not in out or 'dev' not in out:
        raise ClusterError('no route from here to %s' % address)
    return out[out.index('src') + 1], out[out.index('dev') + 1]


def spawn(argv, **kwargs):
    """Popen in a new session with only stdin/stdout/stderr inherited (never the lock),
    that gets SIGTERM when the runner dies, even by SIGKILL (``PR_SET_PDEATHSIG``): its
    connection then closes and the server ends what it carried (``launch.py``)."""
    kwargs.update(close_fds=True, start_new_session=True, preexec_fn=die_with_parent)
    return subprocess.Popen(argv, **kwargs)


_PR_SET_PDEATHSIG = 1


def die_with_parent():
    """In the child before exec: SIGTERM when the process that spawned it ends, and
    SIGHUP's default action back: Mininet ends a host's shell with SIGHUP, and ssh keeps
    a SIGHUP it inherited as ignored (a runner started under nohup) ignored, so teardown
    would wait for that shell's ssh forever."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    libc.signal(signal.SIGHUP, ctypes.c_void_p(0))     # SIG_DFL; no Python handler here


def explain_ssh_failure(name, stderr):
    """One sentence saying what to fix, from what ssh printed."""
    text = stderr.lower()
    if 'permission denied' in text:
        return ('server %s refuses passwordless ssh (%s); authorize this machine\'s key '
                'for root there (ssh-copy-id) or name the key in the ssh config'
                % (name, stderr.strip().splitlines()[-1]))
    if 'host key verification failed' in text or 'host key' in text:
        return ('server %s: its host key is not known (or changed); add it to known_hosts '
                '(ssh-keyscan) after checking it' % name)
    if any(w in text for w in ('could not resolve', 'connection refused', 'timed out',
                               'no route', 'unreachable', 'connection closed')):
        return ('server %s is unreachable over ssh (%s); check that it is up, runs sshd and '
                'that its name resolves' % (name, stderr.strip().splitlines()[-1]))
    return 'server %s: ssh failed (%s); check `ssh %s true` works without a prompt' % (
        name, stderr.strip() or 'no message', name)
