"""One dht8 point on the emulated network: start its nodes, release its clients, inject its fault.

``topologies/dht8.py`` declares which points run; this module is how one of them runs, so
the experiment script stays a short list of its topology and sweep. A point:

1. starts fresh index servers (an empty index: no point depends on an earlier one);
2. for search and download points registers the files it needs (batched, untimed) and,
   for downloads, starts the source peers' file servers;
3. writes each client's names file: the source peer's names in an order drawn from the
   point's own seed (``point['seed']``; the ping check searches a seeded sample);
4. starts the clients at the runner's barrier and releases them at once; only the part
   from the release to the last client's exit is timed (``ctx.timed()``), so file
   generation, hashing and process start-up never count in the CPU verdict;
5. failover points inject their ``fault`` into one index server drawn from the point's
   seed, once the clients have sent about ``FAULT_AT`` of their searches (read from the
   switch ports' packet counters, so the moment depends on this point's own progress,
   not on how long an earlier point took):

   * ``kill``: SIGKILL; the clients see the connection fail and ask the replica;
   * ``hang``: SIGSTOP; the TCP connection stays up and nothing answers, so a client
     pays its ``--timeout`` before it asks the replica; SIGCONT after the clients end;
   * ``cut``: the server's link goes down (``configLinkStatus``); a client pays its
     timeout; the link comes back up after the clients end.

   The result's ``kill`` record (its historic name, read by ``analysis.dht8``) says
   which fault, which server, and when relative to the release;
6. while a download runs, ``ctx.heartbeat`` says how many bytes the clients' download
   folders hold (a 1 GB Part II download says how far it is);
7. checks that every expected file arrived with its size, and removes downloads and
   names files (they live in ``--workdir``, outside the results folder).

Log names follow :func:`node_names` (``analysis.dht8.node_names`` uses the same rule).
"""

import os
import random
import shutil
import sys
import time

from nodes.dht.server_core import MAX_ENTRIES
from repronet.emu.process import LogReady
from workloads import dht_files, scratch

INDEX_PORT = 7000
PEER_PORT = 8000
PING_SEARCHES = 100
FAULTS = ('kill', 'hang', 'cut')
FAULT_AT = 0.4          # fault once the clients sent this share of one packet per search
SWITCH = 'sw1'
WAIT_LIMIT_S = 120      # on top of the expected length of the timed part
HEARTBEAT_POLL_S = 2.0  # how often the download folders are measured


def node_names(point):
    """Return {'clients', 'servers', 'captures', 'sources'} of a point (log names)."""
    tag = 'p%03d' % point['point']
    n = point['peers']
    clients = ['p%d' % i for i in range(1, n + 1)]
    if point['op'] == 'register':
        sources = {c: c for c in clients}
    else:
        m = max(n, 2)
        sources = {c: 'p%d' % (i % m + 1) for i, c in enumerate(clients, 1)}
    servers = ['s%d' % i for i in range(1, point['servers'] + 1)]
    return {'clients': {c: '%s-client-%s' % (tag, c) for c in clients},
            'servers': {s: '%s-server-%s' % (tag, s) for s in servers},
            'captures': {s: '%s-capture-%s' % (tag, s) for s in servers}
            if point['part'] == 'capture' else {},
            'sources': sources}


def choose_names(fileset, source, point, rng):
    """Return the names a client searches or downloads, in a seeded order."""
    names = [n for n, _, _ in dht_files.peer_files(fileset, source)]
    if point['part'] == 'ping' and point['op'] == 'search':
        return rng.sample(names, min(PING_SEARCHES, len(names)))
    rng.shuffle(names)
    return names


def choose_victim(servers, rng):
    """Return the index server a failover point faults (drawn from the point's seed)."""
    return rng.choice(list(servers))


class Point:
    """One point's nodes and steps; run() returns what points.jsonl keeps."""

    def __init__(self, ctx, point, fileset, downloads_folder):
        """downloads_folder(nbytes) names the folder a download point's clients write their
        nbytes in (dht8_plan.downloads_folder with the run's parameters)."""
        self.ctx, self.point, self.fileset = ctx, point, fileset
        self.params = ctx.params
        self.tag = 'p%03d' % point['point']
        self.op = point['op']
        self.rng = random.Random(point['seed'])
        names = node_names(point)
        self.clients = list(names['clients'])
        self.source = names['sources']
        self.servers = list(names['servers'])
        self.server_arg = ','.join('%s=%s:%d' % (s, ctx.host(s).IP(), INDEX_PORT)
                                   for s in self.servers)
        self.scratch = os.path.join(self.params.workdir, 'names', self.tag)
        self.downloads_folder = downloads_folder
        self.nodes = []
        self.fault = None           # the fault record once injected
        self._undo = None           # how to end the fault (hang, cut)

    def start_all(self, specs, ready=True):
        """Start [(host, name, argv)] at once, then wait until each is ready."""
        nodes = [self.ctx.start_node(h, name, argv, wait=False,
                                     ready=LogReady() if ready else None)
                 for h, name, argv in specs]
        self.nodes += nodes
        for node in nodes:
            node.wait_ready(60)
        return nodes

    def client_argv(self, peer, op, batch, barrier, names=None, downloads=None):
        """Return a client's command line (nodes.dht.client's flags)."""
        argv = [sys.executable, '-m', 'nodes.dht.client', '--name', '%s-%s-%s' % (
            self.tag, op, peer), '--servers', self.server_arg, '--replicas',
            self.point['replicas'], '--op', op, '--batch' if batch else '--no-batch',
            '--window', self.params.window, '--timeout', self.params.timeout]
        if op == 'register':
            share = dht_files.peer_share(self.fileset, peer, self.params.workdir)
            argv += ['--share', share, '--advertise', '%s:%d' % (
                self.ctx.host(peer).IP(), PEER_PORT)]
        if names is not None:
            argv += ['--names', names]
        if downloads is not None:
            argv += ['--downloads', downloads]
        if barrier:
            argv.append('--barrier')
        return argv

    def run(self):
        """Servers, setup, peers, captures, clients; then undo faults, stop and clean."""
        try:
            return self._run()
        finally:
            try:
                self._end_fault()
            finally:
                self.ctx.stop_nodes([n for n in self.nodes if n.returncode is None])
                shutil.rmtree(self.scratch, ignore_errors=True)

    def _max_entries(self):
        """The index size a server may need: Part III's centralized server holds every
        peer's every file (times the replicas); dht8_plan checked that memory holds it."""
        files = max([self.params.files] + [count for _, count in dht_files.PART2_SETS.values()])
        return max(MAX_ENTRIES, self.params.peers * files * (1 + self.point['replicas']))

    def _run(self):
        """The steps of run(); nodes are stopped and faults undone by run()."""
        ctx, point = self.ctx, self.point
        servers = self.start_all([(s, '%s-server-%s' % (self.tag, s), [
            sys.executable, '-m', 'nodes.dht.server', '--name', s, '--listen',
            '%s:%d' % (ctx.host(s).IP(), INDEX_PORT), '--servers', self.server_arg,
            '--replicas', point['replicas'], '--max-entries', self._max_entries()])
            for s in self.servers])
        sources = sorted(set(self.source.values()))
        if self.op != 'register':
            self._setup_register(sources)
        if self.op == 'download':
            self.start_all([(p, '%s-peer-%s' % (self.tag, p), [
                sys.executable, '-m', 'nodes.dht.peer', '--name', p, '--listen',
                '%s:%d' % (ctx.host(p).IP(), PEER_PORT), '--share',
                dht_files.peer_share(self.fileset, p, self.params.workdir)])
                for p in sources])
        captures = []
        if point['part'] == 'capture':
            captures = self.start_all([(s, '%s-capture-%s' % (self.tag, s), [
                sys.executable, '-m', 'workloads.capture', '--name', s, '--iface',
                ctx.host(s).defaultIntf().name, '--port', INDEX_PORT])
                for s in self.servers])
        downloads, specs, searches = {}, [], 0
        os.makedirs(self.scratch, exist_ok=True)
        folder = self.downloads_folder(self.fileset.total_bytes * len(self.clients))
        for c in self.clients:
            names = downloads_dir = None
            if self.op != 'register':
                chosen = choose_names(self.fileset, self.source[c], point, self.rng)
                searches += len(chosen)
                names = dht_files.write_names(
                    os.path.join(self.scratch, '%s.txt' % c), chosen)
            if self.op == 'download':
                downloads_dir = downloads[c] = os.path.join(folder, '%s-%s' % (self.tag, c))
                shutil.rmtree(downloads_dir, ignore_errors=True)
                os.makedirs(downloads_dir)
            specs.append((c, '%s-client-%s' % (self.tag, c), self.client_argv(
                c, self.op, point['batch'], True, names, downloads_dir)))
        clients = [ctx.start_node(h, name, argv, barrier=True, ready=LogReady())
                   for h, name, argv in specs]
        self.nodes += clients
        victim = None
        if point['part'] == 'failover':
            victim = servers[self.servers.index(choose_victim(self.servers, self.rng))]
        for node in clients:        # ready (connected) before the timed part starts
            node.wait_ready(120)
        baseline = self._client_packets() if victim is not None else 0
        with ctx.timed():           # the barrier's release, without its readiness wait
            for node in clients:
                node.go()
            released = ctx.clock()
            self._wait(clients, released, (victim, baseline, searches), downloads)
            finished = ctx.clock()
        for node in captures:
            node.stop(grace=60)
        result = {'released': round(released, 6), 'finished': round(finished, 6)}
        failed = [n.name for n in clients if n.returncode != 0]
        if failed:
            result['failed_clients'] = failed
        if victim is not None:
            result['kill'] = self.fault
        if self.op == 'download':
            result['downloads'] = self._check_downloads(downloads)
            result['downloads_fs'] = scratch.file_system(folder)
        return result

    def _setup_register(self, sources):
        """Register the source peers' files (batched, untimed) and wait for it."""
        specs = [(p, '%s-setup-%s' % (self.tag, p), self.client_argv(
            p, 'register', True, False)) for p in sources]
        nodes = self.start_all(specs, ready=False)
        for node in nodes:
            if node.wait(timeout=600) != 0:
                raise RuntimeError('setup registration %s failed; see %s'
                                   % (node.name, node.err_path))

    def expected_seconds(self):
        """Return a generous guess of the timed part's length (for the wait limit)."""
        files = len(self.fileset.files) * max(len(self.clients), 1)
        rate = (self.params.bw or 1000) * 1e6 / 8
        return (files * 0.005 + self.params.timeout * 4
                + self.fileset.total_bytes * len(self.clients) / rate)

    def _wait(self, clients, released, fault, downloads):
        """Wait for the clients; inject the fault and say how far downloads are.

        fault is (victim node or None, client packets at the release, searches)."""
        victim, start, searches = fault
        deadline = released + WAIT_LIMIT_S + 20 * self.expected_seconds()
        threshold = FAULT_AT * searches
        total_bytes = self.fileset.total_bytes * len(downloads)
        next_beat = time.monotonic() + HEARTBEAT_POLL_S
        while any(n.returncode is None for n in clients):
            if victim is not None and self.fault is None and (
                    self._client_packets() - start >= threshold):
                self._inject(victim, released)
            if downloads and time.monotonic() >= next_beat:
                next_beat = time.monotonic() + HEARTBEAT_POLL_S
                self.ctx.heartbeat(round(folder_bytes(downloads) / 1e6, 1),
                                   round(total_bytes / 1e6, 1), ' MB downloaded')
            if self.ctx.clock() > deadline:
                raise RuntimeError('%s: clients still running %.0f s after the release'
                                   % (self.tag, self.ctx.clock() - released))
            if victim is not None and self.fault is None:
                self.ctx.sleep(0.002)
            else:
                self.ctx.wait_any([n for n in clients if n.returncode is None], 0.005)
        if victim is not None and self.fault is None:
            raise RuntimeError('%s: the clients finished before the %s fault was '
                               'injected (%d searches)' % (self.tag, self.point['fault'],
                                                           searches))

    def _client_packets(self):
        """Return the packets the clients have sent into the switch so far."""
        return self.ctx.packets_sent(self.clients, SWITCH)

    def _inject(self, victim, released):
        """Apply the point's fault to victim now; remember how to undo it.

        The record's ``t`` is when the fault is complete (a link cut takes two shell
        commands); ``began`` is when it started."""
        kind, ctx = self.point['fault'], self.ctx
        host = victim.name.rsplit('-', 1)[-1]
        began = ctx.clock()
        if kind == 'kill':
            ctx.kill(victim)
        elif kind == 'hang':
            ctx.pause(victim)
            self._undo = lambda: ctx.resume(victim)
        elif kind == 'cut':
            ctx.link_status(host, SWITCH, False)
            self._undo = lambda: ctx.link_status(host, SWITCH, True)
        else:
            raise ValueError('unknown fault %r (one of %s)' % (kind, ', '.join(FAULTS)))
        t = ctx.clock()
        self.fault = {'fault': kind, 'server': victim.name, 't': round(t, 6),
                      'began': round(began, 6), 'after_release': round(t - released, 6)}
        if kind == 'kill':
            victim.wait(timeout=10)

    def _end_fault(self):
        """Undo a hang or a cut (SIGCONT, link up) so teardown and later points are clean."""
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()
            self.fault['ended'] = round(self.ctx.clock(), 6)

    def _check_downloads(self, downloads):
        """Check that every expected file arrived with its size; remove them."""
        problems = []
        for client, path in downloads.items():
            want = {n: size for n, size, _ in dht_files.peer_files(
                self.fileset, self.source[client])}
            got = {e.name: e.stat().st_size for e in os.scandir(path)
                   if not e.name.startswith('.')}
            if got != want:
                missing = len(set(want) - set(got))
                wrong = sum(1 for n in got if n in want and got[n] != want[n])
                problems.append('%s: %d missing, %d wrong size' % (client, missing, wrong))
            shutil.rmtree(path, ignore_errors=True)
        return '; '.join(problems) or 'ok'


def folder_bytes(folders):
    """Return the bytes held by the files in folders (partial downloads included)."""
    total = 0
    for path in folders.values():
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    try:
                        total += entry.stat().st_size
                    except FileNotFoundError:    # renamed from .part meanwhile
                        pass
        except FileNotFoundError:
            pass
    return total
