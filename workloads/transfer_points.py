"""One transfer point on the emulated network: our file transfer, then iperf3 beside it.

``topologies/transfer.py`` declares the points; this module is how one runs. Every
point starts a fresh file server (``nodes.transfer.server``) serving the files
:class:`FileSet` generated under ``--workdir``, so no point inherits another's
connections, and its clients (``nodes.transfer.client get``) connect, wait at the
runner's barrier and are released together; only release .. last client exit is timed
(``ctx.timed()``), so the CPU verdict covers the transfers, not process start-up.

Every received file is hashed again here, from disk, against the SHA-256 the file set
computed when it wrote the file: an independent check of the client's own.  Received
files are data, not results, and are removed after the point.

Then the reference: ``iperf3 -R`` between the same two hosts (the server host sends, as
ours does), with the point's size and write size (``-n``, ``-l``, ``-N``, ``-M``) or, for
load points, ``-P N`` streams for ``--iperf-seconds``.  Capture points run a transfer
with ``workloads.capture --decode none`` on the sending host's interface; that
component's interfaces have segmentation offloads off, so what the capture sees is what
a wire would carry.

Log names follow :func:`names` (``analysis.transfer`` reads the same names).

In simulation (``--backend sim``) the same server and clients run through their
``simulate()`` (``nodes/transfer/sim_server.py``, ``sim_client.py``) on the same files:
iperf3 is skipped (it has no simulated twin), capture and cold points are not declared
(``topologies/transfer.py``), the received files go to a folder named by the point
(``workloads.scratch``) and the TCP settings recorded are the stream model's.
"""

import hashlib
import os
import random
import shutil
import sys

from repronet.emu.process import LogReady, TcpListening
from workloads import scratch

PORT = 5001
IPERF_PORT = 5201
MIN_PATH_SIZE = 64 << 10
WAIT_SLACK_S = 30


def names(point):
    """Return the log names of a point: server, clients, iperf3 pair, capture."""
    tag = 'p%03d' % point['point']
    return {'server': '%s-server' % tag,
            'clients': ['%s-client-c%d' % (tag, i)
                        for i in range(1, point.get('conns', 1) + 1)],
            'iperf_server': '%s-iperf3-server' % tag,
            'iperf_client': '%s-iperf3-client' % tag,
            'capture': '%s-capture' % tag}


def hosts(point):
    """Return (server host, [client hosts]) of a point."""
    if point['kind'] == 'path':
        return 'pa%d' % point['config'], ['pb%d' % point['config']]
    if point['kind'] == 'capture':
        return 'ka', ['kb']
    return 'srv', ['c%d' % i for i in range(1, point.get('conns', 1) + 1)]


def mathis_mbps(delay_ms, loss_percent, mss=1448):
    """Return the Mathis et al. (1997) bound MSS/RTT * sqrt(3/2)/sqrt(p) in Mbit/s, for a
    one-way delay on one link (RTT = 2 x delay); None without loss."""
    if loss_percent <= 0:
        return None
    rtt = max(2 * delay_ms / 1000.0, 1e-6)
    return mss * 8 / rtt * (1.5 ** 0.5) / (loss_percent / 100.0) ** 0.5 / 1e6


def path_size(bw, delay_ms, loss, seconds, largest):
    """Bytes a path point transfers: about `seconds` at min(link rate, Mathis bound),
    in whole KiB, at least 64 KiB and at most `largest`."""
    bound = mathis_mbps(delay_ms, loss)
    rate = min(bw, bound) if bound else bw
    size = int(rate * 1e6 / 8 * seconds) >> 10 << 10
    return max(MIN_PATH_SIZE, min(size, largest))


class FileSet:
    """Files of given sizes with seeded random content, and their SHA-256."""

    def __init__(self, folder, seed):
        self.folder = folder
        self.seed = seed
        self.sha256 = {}

    @staticmethod
    def name(size):
        """Return the file name of a size (what clients ask for)."""
        return 'f%d.bin' % size

    def make(self, sizes):
        """Write every size not yet written; return the bytes written."""
        os.makedirs(self.folder, exist_ok=True)
        written = 0
        for size in sorted(set(sizes) - set(self.sha256)):
            rng = random.Random('%d:%d' % (self.seed, size))
            digest = hashlib.sha256()
            path = os.path.join(self.folder, self.name(size))
            with open(path + '.part', 'wb') as f:
                left = size
                while left:
                    block = rng.randbytes(min(left, 4 << 20))
                    f.write(block)
                    digest.update(block)
                    left -= len(block)
            os.replace(path + '.part', path)
            os.chmod(path, 0o644)
            self.sha256[size] = digest.hexdigest()
            written += size
        return written


def file_sha256(path):
    """Return the SHA-256 of a file read back from disk."""
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


class Point:
    """One point's server, clients and iperf3 reference; run() returns what
    points.jsonl keeps."""

    def __init__(self, ctx, point, files, mss):
        self.ctx, self.point, self.params = ctx, point, ctx.params
        self.files = files
        self.mss = mss                  # mss_for_payload(packet) or None (iperf3 -M)
        self.names = names(point)
        self.server_host, self.client_hosts = hosts(point)
        self.nodes = []
        self.problems = []

    def run(self):
        """Run the point; every node is stopped and received data removed on every path."""
        recv = scratch.point_folder(self.ctx, 'recv-p%03d' % self.point['point'])
        try:
            self._ours(recv)
            if self.point['kind'] != 'capture' and not self.point.get('cold') and \
                    self.ctx.runs_programs():
                self._iperf()           # iperf3 reads no file: its warm twin has it
        finally:
            self.ctx.stop_nodes([n for n in self.nodes if n.returncode is None])
            shutil.rmtree(recv, ignore_errors=True)
        return {'files': {self.files.name(self.point['size']):
                          self.files.sha256[self.point['size']]},
                'problems': self.problems}

    def _start(self, host, name, argv, **kw):
        """Start a tracked node of this point."""
        node = self.ctx.start_node(host, name, argv, **kw)
        self.nodes.append(node)
        return node

    def _ours(self, recv):
        """Our server, N clients released together, each received file checked."""
        ctx, p, point = self.ctx, self.params, self.point
        server = self._start(self.server_host, self.names['server'], [
            sys.executable, '-m', 'nodes.transfer.server', '--root', self.files.folder,
            '--host', '0.0.0.0', '--port', PORT, '--timeout', p.timeout] + (
            [] if p.congestion_control == 'machine' else
            ['--congestion-control', p.congestion_control]),
            ready=LogReady(), timeout=60)
        capture = None
        if point['kind'] == 'capture':
            capture = self._start(self.server_host, self.names['capture'], [
                sys.executable, '-m', 'workloads.capture', '--name', 'capture',
                '--iface', '%s-eth0' % self.server_host, '--port', PORT,
                '--decode', 'none'], ready=LogReady(), timeout=60)
        ip = ctx.host(self.server_host).IP()
        name = self.files.name(point['size'])
        clients = []
        for i, (host, log) in enumerate(zip(self.client_hosts, self.names['clients']), 1):
            out = os.path.join(recv, 'c%d' % i)
            os.makedirs(out)
            argv = [sys.executable, '-m', 'nodes.transfer.client', 'get',
                    '--server', ip, '--port', PORT, '--name', name, '--out', out,
                    '--packet', point['packet'], '--timeout', p.timeout, '--barrier']
            argv += [] if p.nodelay else ['--no-nodelay']
            argv += ['--segment'] if p.segment else []
            cold = point.get('cold', p.dropcache == 'on')
            argv += ['--dropcache'] if cold else []
            clients.append(self._start(host, log, argv, barrier=True, ready=LogReady()))
        with ctx.timed():
            ctx.release(clients, timeout=120)
            limit = WAIT_SLACK_S + self._seconds() * 4
            for node in clients:
                node.wait(timeout=limit)
        if capture is not None:
            ctx.stop_nodes([capture])
        for i, node in enumerate(clients, 1):
            path = os.path.join(recv, 'c%d' % i, name)
            if node.returncode != 0:
                self.problems.append('client c%d exited %s (see %s)' % (
                    i, node.returncode, node.err_path))
            elif not os.path.exists(path):
                self.problems.append('client c%d left no %s' % (i, name))
            elif file_sha256(path) != self.files.sha256[point['size']]:
                self.problems.append('client c%d received a file whose SHA-256 differs '
                                     'from the sent one' % i)
        if server.poll() is not None:
            self.problems.append('the server had exited (see %s)' % server.err_path)
        ctx.stop_nodes([server])

    def _seconds(self):
        """Expected seconds of the point's transfer at the configured rate."""
        point = self.point
        bw = point.get('bw') or self.params.bw
        return point['size'] * point.get('conns', 1) * 8 / (bw * 1e6)

    def _iperf(self):
        """iperf3 -R from the first client host: the reference in the same point."""
        ctx, p, point = self.ctx, self.params, self.point
        ip = ctx.host(self.server_host).IP()
        self._start(self.server_host, self.names['iperf_server'], [
            'iperf3', '-s', '-1', '-J', '-p', IPERF_PORT],
            ready=TcpListening(IPERF_PORT), suffix='.json')
        length = min(point['packet'], point['size'])
        argv = ['iperf3', '-c', ip, '-p', IPERF_PORT, '-R', '-J', '-l', length]
        if point['kind'] == 'load':
            argv += ['-P', point['conns'], '-t', p.iperf_seconds]
            limit = p.iperf_seconds
        elif point['kind'] == 'path':
            argv += ['-t', p.iperf_seconds]
            limit = p.iperf_seconds
        else:
            argv += ['-n', point['size']]
            limit = self._seconds()
        if p.congestion_control != 'machine':
            argv += ['-C', p.congestion_control]
        if point['kind'] != 'path':
            argv += ['-N'] if p.nodelay else []
            argv += ['-M', self.mss] if (p.segment and self.mss) else []
        with ctx.timed():
            client = self._start(self.client_hosts[0], self.names['iperf_client'], argv,
                                 suffix='.json', wait=False)
            client.wait(timeout=WAIT_SLACK_S + 4 * limit)
        if client.returncode != 0:
            self.problems.append('iperf3 exited %s (see %s)' % (
                client.returncode, client.log_path))


SYSCTLS = {'timestamps': 'net.ipv4.tcp_timestamps',
           'congestion_control': 'net.ipv4.tcp_congestion_control',
           'autocorking': 'net.ipv4.tcp_autocorking', 'rmem': 'net.ipv4.tcp_rmem',
           'wmem': 'net.ipv4.tcp_wmem', 'rmem_max': 'net.core.rmem_max',
           'wmem_max': 'net.core.wmem_max'}
CAPTURE_OFFLOADS = ('tso', 'gso', 'gro')
SIM_TCP = dict({key: None for key in SYSCTLS}, timestamps='1',     # the stream model's
               congestion_control='none (fixed window, repronet.sim.streams)')


def tcp_settings(host):
    """Return the TCP sysctls as read in a host's namespace ({name: text or None})."""
    settings = {}
    for key, name in SYSCTLS.items():
        out, _err, code = host.pexec(['sysctl', '-n', name])
        settings[key] = ' '.join(out.split()) if code == 0 else None
    return settings


def setup(ctx, points, mss_for_payload):
    """Write the file set, turn offloads off on the capture pair, and record the TCP
    settings, the workdir's file system and what the file set cost; return
    (FileSet, {packet: TCP_MAXSEG value or None})."""
    p = ctx.params
    os.makedirs(p.workdir, exist_ok=True)
    files = FileSet(os.path.join(p.workdir, 'files'), p.seed)
    files.make(pt['size'] for pt in points)
    tcp = tcp_settings(ctx.host('srv')) if ctx.runs_programs() else SIM_TCP
    timestamps = tcp.get('timestamps') not in ('0', None)
    mss = {pt['packet']: mss_for_payload(pt['packet'], timestamps) for pt in points}
    offloads = []
    if any(pt['kind'] == 'capture' for pt in points):
        for name in ('ka', 'kb'):
            host = ctx.host(name)
            argv = ['ethtool', '-K', '%s-eth0' % name]
            for feature in CAPTURE_OFFLOADS:
                argv += [feature, 'off']
            _out, err, code = host.pexec(argv)
            if code != 0:
                raise RuntimeError('cannot turn offloads off on %s-eth0: %s' % (
                    name, err.strip()))
            offloads.append('%s-eth0' % name)
    ctx.results.update(hosts={h.name: h.IP() for h in ctx.hosts()}, tcp=tcp,
                       workdir_fs=scratch.file_system(p.workdir),
                       files={FileSet.name(s): h for s, h in sorted(files.sha256.items())},
                       segment_mss={str(k): v for k, v in sorted(mss.items())},
                       capture_offloads_off=offloads)
    return files, mss
