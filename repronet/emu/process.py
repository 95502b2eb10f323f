"""NodeProcess: one real process on an emulated host.

Modelled on ipmininet's ``Daemon``: a process is a small object with a name,
an argument list (never a shell string), its own log files, a readiness check
and a stop that signals its own PID, never a name pattern.

- stdout goes to ``logs/<name>.jsonl`` (JSON lines; a tool with another
  output format names its own suffix, e.g. ``.json`` for ``iperf3 -J``),
  stderr to ``logs/<name>.err``.  Both are plain files the process writes
  directly, so nothing is lost if the runner dies.
- Readiness is observed, never assumed with ``sleep``: ``LogReady`` waits for
  a ``{"event": "ready"}`` line in the log; ``TcpReady`` waits until a TCP
  port accepts a connection from inside the host's namespace (the probe runs
  as a short process on that host); ``TcpListening`` waits until a socket in
  the process's namespace listens on a port, without connecting to it.
- Barrier: a node started with ``stdin`` open (``barrier=True``) reports ready
  and then blocks on a ``go`` line, which ``go()`` writes.
- ``stop()`` sends SIGTERM to the process group the process leads (Mininet's
  ``mnexec -d`` and our local start both make it a session leader, so its
  children go too), waits a grace period, then SIGKILL.
- A process group is signalled only while its number cannot belong to anyone
  else: until the leader is reaped its PID is held by the zombie, and once it
  is reaped (the first ``poll``/``wait`` that sees it exit) what is left of the
  group is killed at once and the group is never signalled again.  Signalling
  it later, at teardown, could hit an unrelated process that was given the
  same number meanwhile.  The barrier's stdin pipe is closed as soon as ``go``
  is written, so finished nodes hold no pipes until teardown.

``host`` is a Mininet node (``host.popen`` puts the process into the host's
network namespace and, for ``CPULimitedHost``, its cgroup) or ``None`` to run
on this machine directly, which is what the unit tests do.
"""

import json
import os
import signal
import subprocess
import sys
import time

from repronet.run import pids

POLL = 0.02


class NodeError(RuntimeError):
    """A node process did not start, get ready or stop as expected."""


class LogReady:
    """Ready when the process's log has a JSON line with the given event."""

    def __init__(self, event='ready'):
        self.event = event
        self.record = None          # the ready line itself, once seen (its fields: port...)
        self._offset = 0
        self._partial = b''

    def check(self, node):
        """Return True once the ready line has appeared in node's log."""
        try:
            with open(node.log_path, 'rb') as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return False
        self._offset += len(data)
        lines = (self._partial + data).split(b'\n')
        self._partial = lines.pop()
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get('event') == self.event:
                self.record = record
                return True
        return False

    def __repr__(self):
        return 'LogReady(%r)' % self.event


_PROBE = ('import socket, sys\n'
          's = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] '
          'else socket.AF_INET)\n'
          's.settimeout(0.5)\n'
          'sys.exit(s.connect_ex((sys.argv[1], int(sys.argv[2]))))\n')


class TcpReady:
    """Ready when a TCP port accepts connections inside the node's host."""

    def __init__(self, port, address='127.0.0.1'):
        self.port = int(port)
        self.address = address

    def check(self, node):
        """Return True if one connection attempt to the port succeeds."""
        argv = [sys.executable, '-c', _PROBE, self.address, str(self.port)]
        kwargs = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL)
        if node.host is None:
            probe = subprocess.Popen(argv, **kwargs)
        else:
            probe = node.host.popen(argv, **kwargs)
        try:
            return probe.wait(timeout=5) == 0
        except subprocess.TimeoutExpired:
            probe.kill()
            probe.wait()
            return False

    def __repr__(self):
        return 'TcpReady(%d, %r)' % (self.port, self.address)


_TCP_LISTEN = '0A'  # st column of /proc/net/tcp: TCP_LISTEN


def listening_inodes(port, pid='self', udp=False):
    """Socket inodes listening on TCP `port` (with udp: bound to UDP `port`) in the network
    namespace of process `pid`."""
    inodes = set()
    for table in (('udp', 'udp6') if udp else ('tcp', 'tcp6')):
        try:
            with open('/proc/%s/net/%s' % (pid, table), encoding='ascii') as lines:
                next(lines, None)
                for line in lines:
                    fields = line.split()
                    local_port = int(fields[1].rsplit(':', 1)[1], 16)
                    if local_port == port and (udp or fields[3] == _TCP_LISTEN):
                        inodes.add(fields[9])
        except OSError:  # the process (and its namespace) is gone
            continue
    return inodes


def cpu_seconds(pid):
    """User+system CPU seconds of a live process (/proc/PID/stat), or None once it is gone.

    Emulated hosts share the machine's PID namespace, so the runner reads a node's own
    CPU time directly: how much of its CPU limit a server used is a measured figure."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            fields = f.read().rsplit(')', 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def stop_popen(proc, grace):
    """SIGTERM one Popen (our own PID, never a name), SIGKILL after grace seconds; idempotent."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class TcpListening:
    """Ready when the node's network namespace has a TCP socket listening
    on the port.  It reads ``/proc/<pid>/net/tcp{,6}``, which shows the
    namespace of that process, so it needs no probe process and, unlike a
    probe connection, is invisible to the server (``iperf3 -s -1`` would
    take a probe connection for its one test)."""

    def __init__(self, port):
        self.port = int(port)

    def check(self, node):
        """Return True if a socket in node's namespace listens on the port."""
        return bool(listening_inodes(self.port, node.pid))

    def __repr__(self):
        return 'TcpListening(%d)' % self.port


class UdpBound(TcpListening):
    """Ready when the node's namespace has a UDP socket bound to the port (a daemon such
    as uftpd that prints no ready line of its own)."""

    def check(self, node):
        """Return True if a UDP socket in node's namespace is bound to the port."""
        return bool(listening_inodes(self.port, node.pid, udp=True))

    def __repr__(self):
        return 'UdpBound(%d)' % self.port


class NodeProcess:
    """One real process on an emulated host, with its logs and lifecycle."""

    def __init__(self, host, name, argv, log_dir, ready=None, barrier=False,
                 suffix='.jsonl', env=None, cwd=None):
        if not name or '/' in name or name.startswith('.'):
            raise ValueError('bad node name %r' % (name,))
        if isinstance(argv, str) or not argv:
            raise ValueError('argv must be a non-empty list, not %r' % (argv,))
        self.host = host
        self.name = name
        self.argv = [str(a) for a in argv]
        self.ready = ready
        self.barrier = barrier
        self.env = env
        self.cwd = cwd
        self.log_path = os.path.join(str(log_dir), name + suffix)
        self.err_path = os.path.join(str(log_dir), name + '.err')
        self.popen = None
        self.started_at = None
        self.exit_seen_at = None    # when a poll/wait first saw the exit

    @property
    def pid(self):
        """Return the process id, or None before start()."""
        return self.popen.pid if self.popen else None

    @property
    def returncode(self):
        """Return the exit status, or None while running (or not started)."""
        return self.poll()

    def poll(self):
        """Return the exit status or None; reaping sweeps the group (see above)."""
        if self.popen is None:
            return None
        return self._seen(self.popen.poll())

    def _seen(self, code):
        """Note the first sight of an exit: kill what is left of the group now,
        while its number is still ours."""
        if code is not None and self.exit_seen_at is None:
            self.exit_seen_at = time.monotonic()
            self._signal(signal.SIGKILL, group_only=True)
            self._close_stdin()
        return code

    def _close_stdin(self):
        """Close the barrier pipe (idempotent)."""
        if self.popen is not None and self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass

    def start(self):
        """Start the process with stdout/stderr going to its log files."""
        if self.popen is not None:
            raise NodeError('%s was already started' % self.name)
        stdin = subprocess.PIPE if self.barrier else subprocess.DEVNULL
        with open(self.log_path, 'wb') as out, \
                open(self.err_path, 'wb') as err:
            kwargs = dict(stdin=stdin, stdout=out, stderr=err, cwd=self.cwd)
            if self.env is not None:
                kwargs['env'] = self.env
            try:
                if self.host is None:
                    self.popen = subprocess.Popen(
                        self.argv, start_new_session=True, **kwargs)
                else:
                    self.popen = self.host.popen(self.argv, **kwargs)
            except OSError as e:
                raise NodeError('%s: cannot start %s: %s'
                                % (self.name, self.argv[0], e))
        self.started_at = time.time()
        return self

    def wait_ready(self, timeout=30):
        """Block until the readiness check passes; raise NodeError if not."""
        if self.ready is None:
            return
        deadline = time.monotonic() + timeout
        while True:
            if self.ready.check(self):
                return
            code = self.returncode
            if code is not None:
                raise NodeError('%s exited with status %s before it was ready'
                                '%s' % (self.name, code, self._err_tail()))
            if time.monotonic() > deadline:
                raise NodeError('%s was not ready (%r) after %gs%s' % (
                    self.name, self.ready, timeout, self._err_tail()))
            time.sleep(POLL)

    def go(self):
        """Release a node blocked on the barrier (write 'go' to its stdin)."""
        if not self.barrier:
            raise NodeError('%s was not started with barrier=True' % self.name)
        try:
            self.popen.stdin.write(b'go\n')
            self.popen.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise NodeError('%s: stdin closed before go (status %s)%s' % (
                self.name, self.returncode, self._err_tail()))
        finally:
            self._close_stdin()     # 'go' is all it will ever read

    def wait(self, timeout=None):
        """Wait for the process to exit and return its status."""
        try:
            return self._seen(self.popen.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            raise NodeError('%s still running after %ss' % (self.name, timeout))

    def stop(self, grace=5.0):
        """Stop the process: SIGTERM, then SIGKILL after grace seconds.

        A process that had already exited is not signalled at all: its group
        was swept when the exit was first seen."""
        if self.popen is None:
            return None
        if self.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.wait(timeout=grace)
            except NodeError:
                self._signal(signal.SIGKILL)
                self.wait()
        self._close_stdin()
        return self.popen.returncode

    def _signal(self, signum, group_only=False):
        """Signal our process group if we lead one, else our own PID."""
        pids.signal_group(self.popen.pid, signum, group_only)

    def _err_tail(self, lines=5):
        """Return the last lines of stderr, for error messages."""
        try:
            with open(self.err_path, 'rb') as f:
                tail = f.read().decode(errors='replace').strip()
        except OSError:
            return ''
        if not tail:
            return ''
        return '; stderr: ' + ' | '.join(tail.splitlines()[-lines:])

    def __repr__(self):
        return 'NodeProcess(%r, pid=%s)' % (self.name, self.pid)


def stop_all(nodes, grace=5.0):
    """Stop many nodes with one shared grace period; return {name: status}."""
    running = [n for n in nodes if n.popen is not None and n.poll() is None]
    for node in running:
        node._signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for node in running:
        try:
            node.wait(timeout=max(deadline - time.monotonic(), 0))
        except NodeError:
            pass
    return {node.name: node.stop(grace=0) for node in nodes}
