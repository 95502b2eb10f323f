"""Hosts on another server, and processes on them that behave like local ones.

:class:`ClusterHost` is Mininet's ``RemoteHost`` (its shell is ``mnexec`` + bash on the
server over ``ssh -tt``; ``cmd`` and the ``Link`` machinery work through it unchanged) with
three things of ours:

- its ssh is ``repronet.cluster.ssh.Machine``'s (the user's ssh config, BatchMode, every
  fd but 0-2 closed so no ssh inherits the machine lock), never ``sudo`` for root, and
  Mininet's ``ClusterCleanup`` (``ssh SERVER sudo mn -c`` at cleanup, which on a shared
  kernel would also wipe this machine's run) is never registered;
- ``popen`` starts the process through ``repronet/cluster/launch.py`` on the server,
  attached to the host's namespaces: stdout and stderr stream back over the process's own
  ssh connection into the files the caller gave (the results folder here), stdin carries
  the barrier's ``go``; it returns a :class:`RemotePopen`;
- ``put_file`` copies a file the runner wrote (the linkdelay daemon's path table) to the
  server and returns the path there.

:class:`RemotePopen` is a ``subprocess.Popen`` of the local ssh client whose
``send_signal`` reaches the remote process group instead (through the agent: the
launcher's pid file, gone once the process exited), so code written for local processes
(``stop_popen``, the linkdelay daemons' SIGUSR1 and SIGTERM) signals the right process, and
its ``cpu_seconds`` reads the remote process's CPU time (through the agent).
Its ``pid`` is the local ssh client's: the leftovers record may kill that one, and its
death makes the launcher end the remote process.

:class:`RemoteNodeProcess` is the runner's ``NodeProcess`` for such hosts: the same log
files, ``LogReady`` on the streamed log, ``TcpListening``/``UdpBound`` checked on the
server, stop and faults by signal through ``RemotePopen``; the group sweep at exit is the
launcher's.
"""

import itertools
import os
import signal
import socket
import subprocess
import time

from mininet.node import Node
from mininet.examples.cluster import RemoteHost

from repronet.cluster.ssh import LAUNCH, PYTHON, REMOTE_DIR, die_with_parent, spawn
from repronet.emu.cpulimit import CpuLimitError
from repronet.emu.process import NodeError, NodeProcess, TcpListening, UdpBound

_tokens = itertools.count(1)


def _token():
    """A name for one launched process, unique on every server for this run."""
    return '%d-%d' % (os.getpid(), next(_tokens))


class RemotePopen(subprocess.Popen):
    """The local ssh client of one launched remote process; signals go to the remote one."""

    def __init__(self, machine, argv, ns=None, cwd=None, env=None, cgroup=None, **kwargs):
        self.machine = machine
        self.token = _token()
        command = [PYTHON, LAUNCH, '--dir', REMOTE_DIR, '--token', self.token]
        if ns is not None:
            command += ['--ns', str(ns)]
        if cgroup:
            command += ['--cgroup', cgroup]
        if cwd:
            command += ['--cwd', str(cwd)]
        for key, value in sorted((env or {}).items()):
            if os.environ.get(key) != value and key != 'PYTHONPATH':
                command += ['--env', '%s=%s' % (key, value)]
        kwargs.update(close_fds=True, start_new_session=True, preexec_fn=die_with_parent)
        super().__init__(machine.argv(command + ['--'] + [str(a) for a in argv], mux=False),
                         **kwargs)

    def send_signal(self, sig, group=True):
        """Signal the remote process group (or, group=False, the process alone); retried
        while its pid file is not written yet."""
        deadline = time.monotonic() + 5
        while self.poll() is None:
            answer = self.machine.agent('signal', REMOTE_DIR, self.token,
                                        signal.Signals(sig).name, 'group' if group else 'pid',
                                        check=False)
            if (answer or {}).get('sent') or time.monotonic() > deadline:
                return
            time.sleep(0.05)

    def kill(self):
        """SIGKILL the remote group; end the local ssh client too if it still hangs on."""
        self.send_signal(signal.SIGKILL)
        try:
            self.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)

    def cpu_seconds(self):
        """User+system CPU seconds the remote process used so far (None once it is gone):
        what ``repronet.emu.process.cpu_seconds`` reads for a local one."""
        answer = self.machine.agent('cpu', REMOTE_DIR, self.token, check=False)
        return (answer or {}).get(self.token)

    def listening(self, port, udp=False):
        """Whether the process's namespace on the server has a socket on port."""
        args = ['listening', REMOTE_DIR, self.token, port] + (['udp'] if udp else [])
        answer = self.machine.agent(*args, check=False)
        return bool((answer or {}).get('listening'))


class ClusterHost(RemoteHost):
    """A Mininet host on another server (see the module docstring)."""

    def __init__(self, name, machine=None, cpu_limit=None, **kwargs):
        # RemoteMixin.__init__ is skipped on purpose: it registers `mn -c` on the server.
        self.machine = machine
        self.server, self.serverIP = machine.name, machine.address
        self.user, self.dest = machine.user, '%s@%s' % (machine.user, machine.address)
        self.controlPath, self.splitInit, self.isRemote = None, False, True
        self.sshcmd = machine.ssh_prefix(mux=False, tty=True)
        self.shell, self.pid = None, None
        self.cpu_limit, self.cpu_group = cpu_limit, None
        Node.__init__(self, name, **kwargs)
        if cpu_limit is not None:
            self._limit_cpu(cpu_limit)

    def _limit_cpu(self, limit):
        """Make this host's cgroup on its server with the shell in it (see repronet.emu.cpulimit;
        named after this machine too: in the test the server shares this kernel's cgroups)."""
        name = 'from-%s-%s' % (socket.gethostname(), self.name)
        answer = self.machine.agent('cgroup', REMOTE_DIR, 'create', name, limit.quota_us,
                                    limit.period_us, self.pid, check=False) or {}
        if 'procs' not in answer:
            Node.terminate(self)
            self.machine.agent('cgroup', REMOTE_DIR, 'remove', name, check=False)
            raise CpuLimitError('cannot limit the CPU of host %s on server %s: %s' % (
                self.name, self.server, answer.get('error', 'the agent did not answer')))
        self.cpu_group = dict(answer, name=name)

    def terminate(self):
        """Stop the host, then remove its cgroup on the server (``agent clear`` retries)."""
        RemoteHost.terminate(self)
        if self.cpu_group is not None:
            self.machine.agent('cgroup', REMOTE_DIR, 'remove', self.cpu_group['name'],
                               check=False)

    def _popen(self, cmd, sudo=True, tt=True, **params):
        """Mininet's remote spawn with our ssh: no sudo for root, no inherited fds."""
        if isinstance(cmd, str):
            cmd = cmd.split()
        prefix = list(self.sshcmd) if tt else self.machine.ssh_prefix(mux=False)
        if sudo:
            cmd = self.machine.sudo() + list(cmd)
        params.pop('preexec_fn', None)
        return spawn(prefix + [str(c) for c in cmd], **params)

    def rpopen(self, *cmd, **opts):
        """A process in the server's root namespace (Mininet's RemoteLink uses it)."""
        params = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT)
        params.update(opts)
        params.pop('sudo', None)
        return self._popen(list(cmd[0]) if len(cmd) == 1 and isinstance(cmd[0], list)
                           else list(cmd), tt=False, **params)

    def popen(self, *args, **kwargs):
        """Start a process in this host through launch.py; return its RemotePopen."""
        mncmd = kwargs.pop('mncmd', None)
        if mncmd and '-g' in mncmd:
            raise NodeError('%s: mnexec -g (a cgroup named by Mininet) is not supported on '
                            'another server; give the host cores= instead' % self.name)
        if self.cpu_group is not None and mncmd is None:    # as CPULimitedHost.popen
            kwargs['cgroup'] = self.cpu_group['procs']
        kwargs.pop('shell', None)
        kwargs.setdefault('stdout', subprocess.PIPE)
        kwargs.setdefault('stderr', subprocess.PIPE)
        argv = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)
        if isinstance(argv, str):
            argv = argv.split()
        return RemotePopen(self.machine, list(argv), ns=self.pid, **kwargs)

    def put_file(self, path):
        """Copy a local file to this host's server; return its path there."""
        remote = '%s/files/%s-%s' % (REMOTE_DIR, _token(), os.path.basename(path))
        with open(path) as f:
            self.machine.run(['sh', '-c', 'mkdir -p "$(dirname "$1")" && cat > "$1"', 'sh',
                              remote], input=f.read())
        return remote

    def record(self):
        """The leftover records of this host on its server: shell PID, namespace, intfs."""
        intfs = sorted(i.name for i in self.intfList() if i.name != 'lo')
        return {'host': self.name, 'shell': self.pid, 'intfs': intfs}


class _RemoteListening:
    """TcpListening/UdpBound checked on the server where the process runs."""

    def __init__(self, inner):
        self.inner = inner
        self.udp = isinstance(inner, UdpBound)

    def check(self, node):
        return node.popen.listening(self.inner.port, udp=self.udp)

    def __repr__(self):
        return repr(self.inner)


class RemoteNodeProcess(NodeProcess):
    """A NodeProcess on a ClusterHost (see the module docstring)."""

    def __init__(self, host, name, argv, log_dir, ready=None, **kwargs):
        if isinstance(ready, TcpListening):
            ready = _RemoteListening(ready)
        super().__init__(host, name, argv, log_dir, ready=ready, **kwargs)

    def _signal(self, signum, group_only=False):
        """Signal the remote group; the launcher already swept it after an exit."""
        if not group_only and self.popen is not None:
            self.popen.send_signal(signum)


ClusterHost.process_class = RemoteNodeProcess
