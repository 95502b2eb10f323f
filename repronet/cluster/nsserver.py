"""A second machine on this one: sshd in its own network and mount namespaces.

The cluster backend (``repronet.cluster``) drives other servers over ssh only. To test it
without a second computer, :class:`NamespaceServer` makes one that behaves like another
machine as far as the backend can tell:

- its own network namespace ``rnsrv-<id>``, joined to the root namespace by a veth pair
  ``rns<id>a`` (root side) / ``rns<id>b`` (server side) carrying a private /30 that exists
  only on that veth; traffic to it stays inside namespaces this run made;
- its own mount namespace with fresh tmpfs on ``/tmp`` and ``/run``, so a log the backend
  forgot to copy back cannot appear in the results folder through a shared ``/tmp``, and
  the server's ``/run/repronet`` (lock, leftover records) is its own; the cpu cgroup
  hierarchy is mounted there again (``ip netns exec`` hides it), as a machine has it;
- ``sshd`` with a host key and a client key made for this server alone, ``PermitTunnel``
  (ssh tap tunnels), ``UseDNS no`` and ``MaxSessions`` high enough for one ssh session per
  remote node process (sshd's default 10 is the limit Mininet's cluster edition hit);
- an ssh_config file naming the server (``Host rnsrv-<id>``) with that key, the server's
  host key pinned in a known_hosts file of its own and ``StrictHostKeyChecking yes``, so
  no prompt can ever appear. The backend reads it from ``REPRONET_SSH_CONFIG``.

It shares this kernel and PID space: nothing here kills by name, and :meth:`stop` ends only
the processes inside the server's own network namespace (found by namespace inode), deletes
only the veth and namespace it made, and removes its key folder (in ``/var/tmp``, visible
from both mount namespaces; ``/tmp`` is not). ``stop`` runs on every exit path of the
context manager and of ``python3 -m repronet.cluster.nsserver`` (which serves until
SIGINT/SIGTERM); :func:`remove_stale` deletes servers whose maker died (SIGKILL).
"""

import ipaddress
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time

from repronet.run import namespaces
from repronet.usage import UsageParser

PREFIX = 'rnsrv-'
KEY_ROOT = '/var/tmp/repronet-nsserver'
POOL = ipaddress.ip_network('172.30.0.0/16')
SSHD = '/usr/sbin/sshd'
# The checkout this module belongs to: a second machine has it at the same path (the precheck
# asks for that), so when it lies under /tmp or /run it is bound back over the fresh tmpfs.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
READY_TIMEOUT = 10.0


class NsServerError(RuntimeError):
    """The namespace server could not be made (one sentence)."""


def _run(argv, check=True, **kwargs):
    """Run a command; raise NsServerError with its stderr if check and it fails."""
    proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if check and proc.returncode != 0:
        raise NsServerError('%s failed: %s' % (' '.join(argv), proc.stderr.strip()
                                                or 'exit %d' % proc.returncode))
    return proc


def _used_networks():
    """Every IPv4 network configured in the root namespace."""
    out = _run(['ip', '-o', '-4', 'addr', 'show']).stdout
    return [ipaddress.ip_interface(line.split()[3]).network for line in out.splitlines()]


def _free_slash30(rng):
    """A /30 from POOL that overlaps no address of the root namespace."""
    used = _used_networks()
    for _ in range(200):
        net = ipaddress.ip_network('%s/30' % (POOL[rng.randrange(0, POOL.num_addresses, 4)]))
        if not any(net.overlaps(u) for u in used):
            return net
    raise NsServerError('no free /30 in %s for the namespace server' % POOL)


def _cpu_cgroup_mounts(mountinfo=None):
    """Shell steps that mount this machine's cpu cgroup hierarchy again at the same place in
    the server's namespace (``ip netns exec`` mounts a fresh /sys, which hides it), so CPU
    limits on the server's hosts work as on another machine; a failed step only loses them."""
    from repronet.emu import cpulimit_cgroups
    if mountinfo is None:
        with open(cpulimit_cgroups.MOUNTINFO) as f:
            mountinfo = f.read()
    roots = set(cpulimit_cgroups.find(mountinfo).values())
    steps = []
    for point, fstype, options in cpulimit_cgroups.cgroup_mounts(mountinfo):
        if point not in roots:
            continue
        parent = os.path.dirname(point)
        if point != '/sys/fs/cgroup':   # sysfs has that folder; anything below needs a tmpfs
            steps.append('{ mountpoint -q %s || mount -t tmpfs -o mode=755 repronet-cgroup %s; '
                         'mkdir -p %s; }' % (shlex.quote(parent), shlex.quote(parent),
                                             shlex.quote(point)))
        steps.append('mount -t %s -o %s %s %s' % (fstype, shlex.quote(','.join(options)), fstype,
                                                   shlex.quote(point)))
    return ''.join('{ %s; } 2>/dev/null; ' % step for step in steps)


def _pids_in_netns(inode):
    """Every process (but this one) in the network namespace with that inode."""
    return namespaces.pids_by_netns().get(inode, [])


class NamespaceServer:
    """sshd in its own network + mount namespace, reachable over a private veth."""

    def __init__(self, ident=None, max_sessions=200):
        if not os.path.exists(SSHD):
            raise NsServerError('%s is missing; install openssh-server (vagrant/provision.sh '
                                'lists it)' % SSHD)
        rng = random.Random()
        self.ident = ident or '%04x' % rng.randrange(16 ** 4)
        self.name = PREFIX + self.ident
        self.root_intf, self.server_intf = 'rns%sa' % self.ident, 'rns%sb' % self.ident
        self.keys = os.path.join(KEY_ROOT, self.ident)
        self.ssh_config = os.path.join(self.keys, 'ssh_config')
        self.max_sessions = max_sessions
        net = _free_slash30(rng)
        self.root_address, self.address = str(net[1]), str(net[2])
        self.prefixlen = net.prefixlen
        self.sshd = None
        self.netns_inode = None
        self._made = []          # what stop() undoes, newest last

    # -- making it ------------------------------------------------------------------------
    def start(self):
        """Make the namespace, the veth, the keys, start sshd and wait until ssh works."""
        try:
            self._make_keys()
            self._make_network()
            self._start_sshd()
            self._wait_ssh()
        except BaseException:
            self.stop()
            raise
        return self

    def _make_keys(self):
        """A client key and a host key for this server alone, and the ssh_config naming it."""
        os.makedirs(self.keys, mode=0o700)
        self._made.append(('dir', self.keys))
        with open(os.path.join(self.keys, 'owner'), 'w') as f:
            json.dump({'pid': os.getpid(), 'name': self.name}, f)
        for key in ('id', 'host_key'):
            _run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-C', self.name,
                  '-f', os.path.join(self.keys, key)])
        shutil.copy(os.path.join(self.keys, 'id.pub'), os.path.join(self.keys, 'authorized_keys'))
        with open(os.path.join(self.keys, 'host_key.pub')) as f:
            host_key = ' '.join(f.read().split()[:2])
        with open(os.path.join(self.keys, 'known_hosts'), 'w') as f:
            f.write('%s %s\n' % (self.address, host_key))
        with open(os.path.join(self.keys, 'sshd_config'), 'w') as f:
            f.write('\n'.join([
                'ListenAddress %s' % self.address, 'Port 22',
                'HostKey %s' % os.path.join(self.keys, 'host_key'),
                'AuthorizedKeysFile %s' % os.path.join(self.keys, 'authorized_keys'),
                'PermitRootLogin prohibit-password', 'PasswordAuthentication no',
                'KbdInteractiveAuthentication no', 'UsePAM no', 'StrictModes no',
                'PermitTunnel yes', 'UseDNS no', 'MaxSessions %d' % self.max_sessions,
                'MaxStartups 200:30:400', 'PidFile none', 'LogLevel ERROR', '']))
        with open(self.ssh_config, 'w') as f:
            f.write('\n'.join([
                'Host %s' % self.name, '  HostName %s' % self.address, '  User root',
                '  IdentityFile %s' % os.path.join(self.keys, 'id'), '  IdentitiesOnly yes',
                '  UserKnownHostsFile %s' % os.path.join(self.keys, 'known_hosts'),
                '  StrictHostKeyChecking yes', '  BatchMode yes', '  ConnectTimeout 5',
                '  LogLevel ERROR', '']))

    def _make_network(self):
        """The namespace and the veth with its /30."""
        _run(['ip', 'netns', 'add', self.name])
        self._made.append(('netns', self.name))
        _run(['ip', 'link', 'add', self.root_intf, 'type', 'veth', 'peer', 'name',
              self.server_intf, 'netns', self.name])
        self._made.append(('link', self.root_intf))
        _run(['ip', 'addr', 'add', '%s/%d' % (self.root_address, self.prefixlen),
              'dev', self.root_intf])
        _run(['ip', 'link', 'set', self.root_intf, 'up'])
        inside = ['ip', 'netns', 'exec', self.name]
        _run(inside + ['ip', 'addr', 'add', '%s/%d' % (self.address, self.prefixlen),
                       'dev', self.server_intf])
        for intf in (self.server_intf, 'lo'):
            _run(inside + ['ip', 'link', 'set', intf, 'up'])

    def _start_sshd(self):
        """sshd -D in the namespace, with private /tmp and /run (a mount namespace of its own)."""
        keep, back = '', ''
        if any(REPO == top or REPO.startswith(top + '/') for top in ('/tmp', '/run')):
            # a clone under /tmp (CI's) would vanish under the fresh tmpfs: hold it aside
            # in this namespace's own mount table, then bind it back at the same path
            aside = os.path.join(self.keys, 'checkout')
            os.makedirs(aside, exist_ok=True)
            keep = 'mount --bind %s %s && ' % (shlex.quote(REPO), shlex.quote(aside))
            back = 'mkdir -p %s && mount --bind %s %s && ' % (
                shlex.quote(REPO), shlex.quote(aside), shlex.quote(REPO))
        script = (keep + 'mount -t tmpfs -o mode=1777 repronet-tmp /tmp && '
                  'mount -t tmpfs -o mode=755 repronet-run /run && mkdir -p /run/sshd && '
                  + back + _cpu_cgroup_mounts()
                  + 'exec %s -D -e -f %s' % (SSHD, os.path.join(self.keys, 'sshd_config')))
        err = open(os.path.join(self.keys, 'sshd.err'), 'w')
        with err:
            self.sshd = subprocess.Popen(
                ['ip', 'netns', 'exec', self.name, 'unshare', '--mount',
                 '--propagation', 'private', 'sh', '-c', script],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)
        self._made.append(('sshd', self.sshd))

    def _wait_ssh(self):
        """Return once `ssh SERVER true` works; raise with sshd's words if it does not."""
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if self.sshd.poll() is not None:
                raise NsServerError('sshd in %s exited (%s)' % (self.name, self._sshd_err()))
            self.netns_inode = namespaces.netns(self.sshd.pid)
            probe = subprocess.run(self.ssh_argv() + ['true'], capture_output=True, text=True,
                                   stdin=subprocess.DEVNULL)
            if probe.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise NsServerError('ssh to %s did not work within %gs: %s' % (
                    self.name, READY_TIMEOUT, probe.stderr.strip() or self._sshd_err()))
            time.sleep(0.1)

    def _sshd_err(self):
        try:
            with open(os.path.join(self.keys, 'sshd.err')) as f:
                return f.read().strip() or 'no message'
        except OSError:
            return 'no message'

    def ssh_argv(self):
        """`ssh` with this server's config and name, ready for a remote command."""
        return ['ssh', '-F', self.ssh_config, self.name, '--']

    def environ(self):
        """The environment a run needs to reach this server by name."""
        return {'REPRONET_SSH_CONFIG': self.ssh_config}

    # -- ending it ------------------------------------------------------------------------
    def stop(self):
        """Undo everything start() made, newest first; safe to repeat."""
        while self._made:
            kind, what = self._made.pop()
            if kind == 'sshd':
                _end_namespace(what, self.netns_inode)
            elif kind == 'link':
                _run(['ip', 'link', 'del', what], check=False)
            elif kind == 'netns':
                _run(['ip', 'netns', 'del', what], check=False)
            elif kind == 'dir':
                shutil.rmtree(what, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def _end_namespace(sshd, inode):
    """SIGTERM sshd, then SIGKILL whatever still runs in its network namespace."""
    if sshd.poll() is None:
        sshd.terminate()
        try:
            sshd.wait(timeout=3)
        except subprocess.TimeoutExpired:
            sshd.kill()
            sshd.wait()
    if inode is None:
        return
    for _ in range(50):
        pids = _pids_in_netns(inode)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def remove_stale():
    """Delete namespace servers whose maker is gone (it was SIGKILLed); return their names."""
    removed = []
    try:
        idents = os.listdir(KEY_ROOT)
    except FileNotFoundError:
        return removed
    for ident in idents:
        try:
            with open(os.path.join(KEY_ROOT, ident, 'owner')) as f:
                owner = json.load(f)
            os.kill(owner['pid'], 0)
            continue                        # its maker still runs
        except (OSError, ValueError, KeyError):
            pass
        name = PREFIX + ident
        if os.path.exists('/run/netns/' + name):
            inode = os.stat('/run/netns/' + name).st_ino
            for pid in _pids_in_netns(inode):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _run(['ip', 'netns', 'del', name], check=False)
        _run(['ip', 'link', 'del', 'rns%sa' % ident], check=False)
        shutil.rmtree(os.path.join(KEY_ROOT, ident), ignore_errors=True)
        removed.append(name)
    return removed


def main(argv=None):
    """Serve a namespace server until SIGINT/SIGTERM, or (``-- CMD ...``) while CMD runs
    with REPRONET_SSH_CONFIG and REPRONET_NSSERVER (the server's name) set."""
    argv = sys.argv[1:] if argv is None else argv
    parser = UsageParser(
        prog='python3 -m repronet.cluster.nsserver', tool='repronet.cluster.nsserver',
        usage='%(prog)s [-- CMD ARG...]', allow_abbrev=False,
        about='a second machine on this one for the cluster tests, as root: without '
              'arguments it serves until Ctrl-C, with -- CMD ARG... while CMD runs',
        description=__doc__.split('\n\n')[0])
    # argparse reads only the flags before --; what follows is CMD's, unread
    head = argv[:argv.index('--')] if '--' in argv else argv
    parser.parse_args(head)
    if argv and argv[1:] == []:
        parser.error('-- needs a command after it')
    if os.geteuid() != 0:
        print('nsserver: needs root (it makes a network namespace)', file=sys.stderr)
        return 1
    for name in remove_stale():
        print('nsserver: removed stale %s' % name, file=sys.stderr)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with NamespaceServer() as server:
            if argv:
                env = dict(os.environ, REPRONET_NSSERVER=server.name, **server.environ())
                return subprocess.run(argv[1:], env=env).returncode
            print('namespace server %s at %s is up; in another shell:\n'
                  '  export REPRONET_SSH_CONFIG=%s\n'
                  '  sudo -E /usr/bin/python3 topologies/smoke.py --scale smoke '
                  '--machines localhost,%s\nCtrl-C ends it.' % (
                      server.name, server.address, server.ssh_config, server.name),
                  flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 130
    except NsServerError as e:
        print('nsserver: %s' % e, file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
