"""One reliable-UDP point on the emulated network: one transfer by one mode.

``topologies/rudp.py`` declares the points; this module runs one. Every point sends the
point's file from the sender host to the receiver host of its link configuration by one
mode, and the received copy is hashed again here against the file set's SHA-256:

- ``seed``: ``nodes.rudp`` with one block of ``block`` datagrams at a time (the seed);
- ``window``: ``nodes.rudp`` with ``--window`` blocks in flight paced at ``--rate``;
- ``tcp92k``: ``iperf3 -w 92K -l 92K -n SIZE``: TCP as the seed ran it (92 KB socket
  buffers, 92 KB writes); ``tcp``: ``iperf3 -n SIZE`` with the kernel's own buffers;
- ``uftp``: Debian's ``uftp`` in unicast mode (``-M receiver``) at ``--rate``, received by
  ``uftpd``: an existing reliable-UDP tool nobody here wrote;
- ``udp``: ``iperf3 -u -b RATE`` for the link's UDP goodput and loss.

Log names: ``pNNN-send.jsonl``/``pNNN-recv.jsonl`` (ours), ``pNNN-iperf3-client.json``,
``pNNN-uftp.log``/``pNNN-uftpd.log``; ``analysis.rudp`` reads the same names.
"""

import os
import shutil
import sys

from repronet.emu.process import LogReady, TcpListening, UdpBound
from workloads.scratch import point_folder
from workloads.transfer_points import file_sha256

PORT = 7100
IPERF_PORT = 5201
UFTP_PORT = 1044
SLACK_S = 60


def hosts(point):
    """Return (sender host, receiver host) of a point's link configuration."""
    return 'ra%d' % point['config'], 'rb%d' % point['config']


class Point:
    """One transfer; run() returns what points.jsonl keeps."""

    def __init__(self, ctx, point, files):
        self.ctx, self.point, self.params, self.files = ctx, point, ctx.params, files
        self.tag = 'p%03d' % point['point']
        self.sender, self.receiver = hosts(point)
        self.problems = []
        self.nodes = []

    def run(self):
        """Run the point's mode; nodes stopped and received data removed on every path."""
        out = point_folder(self.ctx, 'rudp-%s' % self.tag)
        try:
            getattr(self, '_' + self.point['mode'].replace('92k', ''))(out)
        finally:
            self.ctx.stop_nodes([n for n in self.nodes if n.returncode is None])
            shutil.rmtree(out, ignore_errors=True)
        return {'problems': self.problems, 'sha256': self.files.sha256[self.point['size']]}

    def _start(self, host, name, argv, **kw):
        node = self.ctx.start_node(host, name, argv, **kw)
        self.nodes.append(node)
        return node

    def _limit(self):
        """Seconds a transfer may take: the seed mode pays one round trip per block."""
        p = self.point
        rounds = p['size'] / (1472.0 * p.get('block', 32))
        return SLACK_S + 4 * (p['size'] * 8 / (p['bw'] * 1e6) + rounds * (
            4 * p['delay_ms'] / 1000.0 + 0.002))

    def _check(self, path, who):
        """Hash the received copy against the sent file's SHA-256."""
        if not os.path.exists(path):
            self.problems.append('%s left no received file' % who)
        elif file_sha256(path) != self.files.sha256[self.point['size']]:
            self.problems.append('%s received a file whose SHA-256 differs' % who)

    def _seed(self, out):
        self._ours(out, ['--block', self.point['block']])

    def _window(self, out):
        self._ours(out, ['--block', self.point['block'], '--window', self.params.window,
                         '--rate', self.point['rate']])

    def _ours(self, out, extra):
        ctx, p = self.ctx, self.params
        name = self.files.name(self.point['size'])
        self._start(self.receiver, '%s-recv' % self.tag, [
            sys.executable, '-m', 'nodes.rudp.recv', '--port', PORT, '--out', out,
            '--once', '--timeout', p.timeout, '--linger', 0.5,
            '--reorder-wait', p.reorder_wait], ready=LogReady())
        sender = self._start(self.sender, '%s-send' % self.tag, [
            sys.executable, '-m', 'nodes.rudp.send', '--dst', ctx.host(self.receiver).IP(),
            '--port', PORT, '--file', os.path.join(self.files.folder, name),
            '--timeout', p.timeout, '--barrier'] + extra, barrier=True, ready=LogReady())
        with ctx.timed():
            ctx.release([sender])
            sender.wait(timeout=self._limit())
        if sender.returncode != 0:
            self.problems.append('the sender exited %s (see %s)' % (
                sender.returncode, sender.log_path))
        self.nodes[0].wait(timeout=30)
        self._check(os.path.join(out, name), 'our receiver')

    def _tcp(self, out):
        argv = ['-n', self.point['size']]
        if self.params.congestion_control != 'machine':
            argv += ['-C', self.params.congestion_control]
        if self.point['mode'] == 'tcp92k':
            argv += ['-w', '92K', '-l', '92K']
        self._iperf(argv)

    def _udp(self, out):
        self._iperf(['-u', '-b', '%gM' % self.point['rate'], '-l', 1472,
                     '-n', self.point['size']])

    def _iperf(self, extra):
        ctx = self.ctx
        self._start(self.receiver, '%s-iperf3-server' % self.tag,
                    ['iperf3', '-s', '-1', '-J', '-p', IPERF_PORT],
                    ready=TcpListening(IPERF_PORT), suffix='.json')
        with ctx.timed():
            client = self._start(self.sender, '%s-iperf3-client' % self.tag, [
                'iperf3', '-c', ctx.host(self.receiver).IP(), '-p', IPERF_PORT, '-J']
                + extra, suffix='.json', wait=False)
            client.wait(timeout=self._limit())
        if client.returncode != 0:
            self.problems.append('iperf3 exited %s (see %s)' % (
                client.returncode, client.log_path))

    def _uftp(self, out):
        ctx, name = self.ctx, self.files.name(self.point['size'])
        logs = ctx.results.logs
        self._start(self.receiver, '%s-uftpd' % self.tag, [
            'uftpd', '-d', '-p', UFTP_PORT, '-D', out,
            '-L', os.path.join(str(logs), '%s-uftpd.log' % self.tag)], suffix='.txt',
            ready=UdpBound(UFTP_PORT), timeout=30)
        with ctx.timed():
            client = self._start(self.sender, '%s-uftp' % self.tag, [
                'uftp', '-M', ctx.host(self.receiver).IP(), '-p', UFTP_PORT,
                '-R', int(self.point['rate'] * 1000), '-D', name,
                '-L', os.path.join(str(logs), '%s-uftp.log' % self.tag),
                os.path.join(self.files.folder, name)], suffix='.txt', wait=False)
            client.wait(timeout=self._limit())
        if client.returncode != 0:
            self.problems.append('uftp exited %s (see logs/%s-uftp.log)' % (
                client.returncode, self.tag))
        self._check(os.path.join(out, name), 'uftpd')
