"""OsKenController: the repronet OpenFlow controller as a Mininet controller node.

Mininet's own ``Controller`` starts its program through the node's shell with a string and
redirections (``cmd + ' 1>/tmp/c0.log 2>/tmp/c0.log &'``), checks the port with ``telnet`` and
stops it with ``kill %command``. This subclass keeps the Mininet interface (``start()``,
``stop()``, ``IP()``, ``port``, so ``OVSSwitch`` connects to ``tcp:127.0.0.1:PORT`` as usual)
and replaces the process handling:

* the controller is a real ``osken-manager`` process started from an argument list with
  ``subprocess.Popen``, in its own session (a Ctrl-C at the terminal goes to the runner, which
  stops everything in one place), with its own ``<name>.out`` / ``<name>.err`` files in
  ``log_dir`` and the app's configuration in its environment (see ``nodes/osken_switch.py``);
* ``start()`` returns when the process itself listens on the port (its listening socket is
  found in ``/proc/PID/net/tcp`` and among its file descriptors), not after a sleep; if it
  dies first, the error carries the tail of its stderr;
* ``wait_connected(dpids)`` waits until the given switches have connected, read from the
  app's own event log (``switch_connected`` records);
* ``stop()`` sends SIGTERM to its own PID (the app writes one last statistics round and exits),
  escalates to SIGKILL after ``stop_timeout``, and never kills by name.
* it cannot outlive the runner: it is started through ``setpriv --pdeathsig KILL`` (util-linux),
  so the kernel kills it when the process that started it dies, even by SIGKILL, and its PID is
  handed to ``on_start`` the moment it exists, before it listens, so the next run's leftover
  cleanup finds it too.  An orphaned controller used to keep port 6653 and fail every later
  ``--switch osken`` run.

The app listens on 127.0.0.1 only: switches of the userspace datapath connect from the root
namespace, and nothing outside the machine needs to reach it.
"""

import os
import shutil
import subprocess
import tempfile
import time

from mininet.node import Controller, Node

from repronet.emu.process import listening_inodes, stop_popen
from repronet.run.results import read_jsonl

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APP = os.path.join(REPO, 'nodes', 'osken_switch.py')
SETPRIV = shutil.which('setpriv') or '/usr/bin/setpriv'


class ControllerError(RuntimeError):
    """The controller process could not be started or did not become ready."""


def find_osken_manager():
    """Path of osken-manager, or None (Debian package python3-os-ken)."""
    path = shutil.which('osken-manager')
    if path is None and os.access('/usr/bin/osken-manager', os.X_OK):
        path = '/usr/bin/osken-manager'
    return path


def socket_inodes(pid):
    """Inodes of the sockets process `pid` holds open."""
    inodes = set()
    fd_dir = '/proc/%d/fd' % pid
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(os.path.join(fd_dir, name))
        except OSError:
            continue
        if target.startswith('socket:['):
            inodes.add(target[len('socket:['):-1])
    return inodes


class OsKenController(Controller):
    """Mininet controller node running nodes/osken_switch.py under osken-manager."""

    def __init__(self, name, port=6653, stats_log=None, stats_interval=1.0, log_dir=None,
                 idle_timeout=60, command=None, ready_timeout=30.0, stop_timeout=10.0,
                 on_start=None, **params):
        """Prepare paths and arguments; the process starts in start()."""
        if not 0 < int(port) < 65536:
            raise ValueError('port must be in 1..65535, got %r' % (port,))
        if float(stats_interval) <= 0:
            raise ValueError('stats_interval must be > 0 seconds, got %r' % (stats_interval,))
        self.log_dir = log_dir or tempfile.mkdtemp(prefix='repronet-%s-' % name)
        os.makedirs(self.log_dir, exist_ok=True)
        self.stats_log = stats_log or os.path.join(self.log_dir, name + '.jsonl')
        self.out_log = os.path.join(self.log_dir, name + '.out')
        self.err_log = os.path.join(self.log_dir, name + '.err')
        self.stats_interval = float(stats_interval)
        self.idle_timeout = int(idle_timeout)
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.process = None
        self.on_start = on_start
        self.start_seconds = None
        self._files = []
        super().__init__(name, inNamespace=False, command=command or find_osken_manager(),
                         cargs='', ip='127.0.0.1', port=int(port), **params)

    @classmethod
    def isAvailable(cls):
        """Is osken-manager installed?"""
        return find_osken_manager()

    def checkListening(self):
        """Refuse a port that something else already listens on (no telnet needed)."""
        if listening_inodes(self.port):
            self.terminate()  # Controller.__init__ started our shell before this check
            raise ControllerError('TCP port %d is already in use by another listener; stop it '
                                  'or give OsKenController another port' % self.port)

    def argv(self):
        """The controller's command line, as a list (dies with its parent, see above)."""
        return [SETPRIV, '--pdeathsig', 'KILL', '--', self.command, '--ofp-listen-host',
                self.ip, '--ofp-tcp-listen-port', str(self.port), APP]

    def environment(self):
        """The environment the app reads its configuration from."""
        env = dict(os.environ)
        env.update({'REPRONET_PORT_STATS_LOG': self.stats_log,
                    'REPRONET_STATS_INTERVAL': repr(self.stats_interval),
                    'REPRONET_IDLE_TIMEOUT': str(self.idle_timeout),
                    'PYTHONDONTWRITEBYTECODE': '1'})
        return env

    def start(self):
        """Start osken-manager and return once it listens on its port."""
        if self.process is not None and self.process.poll() is None:
            return
        if not self.command or not os.access(self.command, os.X_OK):
            raise ControllerError('osken-manager not found (install the Debian package '
                                  'python3-os-ken)')
        out = open(self.out_log, 'ab')
        err = open(self.err_log, 'ab')
        self._files = [out, err]
        began = time.monotonic()
        self.process = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=err, env=self.environment(),
                                        cwd=self.log_dir, start_new_session=True)
        self.execed = False
        try:
            if self.on_start is not None:
                self.on_start(self)
            self._wait_listening(began + self.ready_timeout)
        except ControllerError:
            self.stop_process()
            raise
        self.start_seconds = time.monotonic() - began

    def _wait_listening(self, deadline):
        """Poll until our own process holds a listening socket on the port."""
        pid = self.process.pid
        while True:
            if self.process.poll() is not None:
                raise ControllerError('%s exited with status %s before listening on port %d: %s'
                                      % (self.name, self.process.returncode, self.port,
                                         self._stderr_tail()))
            if listening_inodes(self.port, pid) & socket_inodes(pid):
                return
            if time.monotonic() > deadline:
                raise ControllerError('%s did not listen on port %d within %.0f s: %s'
                                      % (self.name, self.port, self.ready_timeout,
                                         self._stderr_tail()))
            time.sleep(0.05)

    def _stderr_tail(self, lines=5):
        """Last lines of the process's stderr, for error messages."""
        try:
            with open(self.err_log, encoding='utf-8', errors='replace') as err:
                return ' | '.join(err.read().strip().splitlines()[-lines:]) or '(no stderr)'
        except OSError:
            return '(no stderr file)'

    def connected_dpids(self):
        """Datapath ids currently connected, according to the app's event log."""
        connected = set()
        for record in read_jsonl(self.stats_log):
            if record.get('event') == 'switch_connected':
                connected.add(record['dpid'])
            elif record.get('event') == 'switch_disconnected':
                connected.discard(record['dpid'])
        return connected

    def wait_connected(self, dpids, timeout=30.0):
        """Wait until every datapath id in `dpids` is connected; raise ControllerError if not."""
        wanted = {int(d, 16) if isinstance(d, str) else int(d) for d in dpids}
        deadline = time.monotonic() + timeout
        while True:
            missing = wanted - self.connected_dpids()
            if not missing:
                return
            if self.process is None or self.process.poll() is not None:
                raise ControllerError('%s is not running: %s' % (self.name, self._stderr_tail()))
            if time.monotonic() > deadline:
                raise ControllerError('switches %s did not connect to %s within %.0f s'
                                      % (sorted(missing), self.name, timeout))
            time.sleep(0.05)

    def stop_process(self):
        """SIGTERM our own PID, SIGKILL after stop_timeout; idempotent."""
        if self.process is not None:
            stop_popen(self.process, self.stop_timeout)
        for handle in self._files:
            handle.close()
        self._files = []

    def stop(self, *args, **kwargs):
        """Stop the controller process, then the node's shell (Mininet's Node.stop)."""
        self.stop_process()
        Node.stop(self, *args, **kwargs)
