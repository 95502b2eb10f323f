"""What a dht8 run needs before it starts: checked flags, memory, disk, expected length.

``topologies/dht8.py`` calls these from its ``check``, ``disk`` and ``estimate`` hooks, so a
bad flag is one sentence (``UsageError``) before the machine lock, the cleanup and the
results folder, and ``--dry-run`` can say how long the run takes and what it writes where.
Bounds say what one machine can hold: the memory per indexed name was measured (below);
the disk is what the file sets take under ``--workdir`` (sets already complete there are
reused and need nothing new) and the largest point's downloads where ``--downloads-in``
puts them (:func:`downloads_folder`).
"""

import hashlib
import os
import pathlib

from repronet.emu.linkemu_params import BW_MAX_MBIT, LinkEmulationError, parse_time_ms
from repronet.run.options import UsageError, check_range
from repronet.run.results import writable_ancestor
from workloads import dht_files, scratch
from workloads.dht8_points import PING_SEARCHES

#: Upper bounds of the flags (check()): beyond them a run cannot fit one machine.
LIMITS = {'servers': 64, 'peers': 64, 'window': 256, 'timeout': 600.0,
          'delay_ms': 1000.0, 'files': 1000000, 'part2_divisor': 10000}
#: Memory per indexed name: 290 B per name->holder entry in an index server and 472 B
#: per name in a client (its name and op record), measured with tracemalloc over 200K
#: entries (MemoryStore) and 100K records; rounded up.
INDEX_ENTRY_BYTES, CLIENT_NAME_BYTES = 300, 500
MEMORY_SHARE = 0.5      # the index may take at most this share of the available memory
DOWNLOADS_MEMORY_SHARE = 0.25   # --downloads-in auto/memory: one point's downloads at most
DOWNLOADS_IN = ('auto', 'memory', 'workdir')


def fileset_spec(key, params):
    """Return the FileSetSpec of a point's fileset key ('part1', 'ping', 'part2X')."""
    if key == 'part1':
        return dht_files.FileSetSpec('part1', params.files, 'part1', params.seed)
    if key == 'ping':
        return dht_files.FileSetSpec('ping', 1, dht_files.MB, params.seed)
    return dht_files.part2_spec(key[-1], params.seed, params.part2_divisor)


def check_flags(params, parts):
    """Check every dht8 flag's value (bounds, sets, parts among `parts`); normalise.

    Raises UsageError with one sentence; sorts --part2-sets (the manifest shows it so)."""
    sim = getattr(params, 'backend', 'emu') == 'sim'
    for flag in ('servers', 'peers', 'window', 'files', 'part2_divisor'):
        if sim and flag in ('servers', 'peers') and getattr(params, flag, 0) > LIMITS[flag]:
            raise UsageError('--%s %s: dht8 runs at most %d (every client connects to every '
                             'index server, in simulation too); benchmarks/sim_scale.py '
                             'simulates 1,000 servers and 10,000 peers' % (
                                 flag, getattr(params, flag), LIMITS[flag]))
        check_range(params, flag, 1, LIMITS[flag])
    if not 0 <= params.replicas < params.servers:
        raise UsageError('--replicas %d needs at least %d servers (--replicas 0..%d with '
                         '--servers %d)' % (params.replicas, params.replicas + 1,
                                            params.servers - 1, params.servers))
    check_range(params, 'timeout', 1e-3, LIMITS['timeout'], 'seconds')
    check_range(params, 'bw', 0, BW_MAX_MBIT, 'Mbit/s (0: unshaped)')
    try:
        delay_ms = 0.0 if str(params.delay).strip() == '0' else parse_time_ms(
            params.delay, '--delay', 'dht8')
    except LinkEmulationError as e:     # its own sentence, less the 'dht8: ' prefix
        raise UsageError(str(e).split(': ', 1)[-1]) from None
    if sim and not params.bw and not delay_ms and not getattr(params, 'sim_costs', None):
        raise UsageError('with --bw 0, --delay 0 and no --sim-cost a simulated operation '
                         'takes no time at all; give a link rate, a delay or a processing '
                         'cost')
    if delay_ms > LIMITS['delay_ms']:
        raise UsageError('--delay %s is over %g ms one way' % (
            params.delay, LIMITS['delay_ms']))
    sets = params.part2_sets or ''
    if not sets or set(sets) - set(dht_files.PART2_SETS):
        raise UsageError('--part2-sets takes letters among %s, not %r'
                         % (''.join(dht_files.PART2_SETS), sets))
    params.part2_sets = ''.join(sorted(set(sets)))
    unknown = set(str(params.parts).split(',')) - set(parts)
    if unknown:
        raise UsageError('unknown --parts %s (choose among %s)'
                         % (','.join(sorted(unknown)), ','.join(parts)))


def downloads_folder(params, nbytes):
    """Return the folder the emulated clients of a point write nbytes of downloads in (one
    subfolder per client), from ``--downloads-in``.

    ``memory`` is dht8's folder on the ``/dev/shm`` tmpfs (``scratch.memory_workdir``): a
    new file there costs no disk, where on a disk's file system its creation holds the CPU
    the link daemons need (``workloads.scratch``); ``workdir`` is ``--workdir/downloads``;
    ``auto`` (the default) is memory for a point whose downloads fit in
    ``DOWNLOADS_MEMORY_SHARE`` of the memory available, else workdir. A simulated run has
    a memory folder of its own (``memory_downloads``): simulated runs hold no machine lock,
    so two may run at once; creating files costs them too (at --scale default, with its
    downloads on ext4 a simulated run took 106 s, 53 of them system time, against 57.5 s
    in its memory folder: docs/simulation.md, "PyPy's download phase"). Raises UsageError when memory
    is asked for and cannot hold them."""
    mode = getattr(params, 'downloads_in', 'workdir')
    disk = os.path.join(params.workdir, 'downloads')
    if mode == 'workdir':
        return disk
    memory, room = memory_downloads(params), DOWNLOADS_MEMORY_SHARE * _available()
    if memory is not None:      # a tmpfs may be smaller than memory (a container's 64 MB)
        room = min(room, _free(scratch.MEMORY_BASE))
    if memory is not None and nbytes <= room:
        return memory
    if mode == 'auto':
        return disk
    if memory is None:
        raise UsageError('--downloads-in memory needs a tmpfs at %s, and this machine has %s '
                         'there; give --downloads-in workdir' % (
                             scratch.MEMORY_BASE,
                             scratch.file_system(scratch.MEMORY_BASE) or 'none'))
    raise UsageError('--downloads-in memory: a point downloads %.1f GB, and %s can take %.1f '
                     'GB (%d%% of the memory available, at most its free space); give '
                     '--downloads-in auto or workdir' % (
                         nbytes / 1e9, scratch.MEMORY_BASE, room / 1e9,
                         100 * DOWNLOADS_MEMORY_SHARE))


def memory_downloads(params=None):
    """The downloads folder in memory (under scratch.memory_workdir), or None without a
    tmpfs at /dev/shm. An emulated run's is dht8's one folder (the machine lock makes it the
    run's own); a simulated run's is named after its --workdir, whose lock the run holds
    from before it starts, so a simulated run beside another (or beside an emulated one)
    never shares it."""
    name = 'dht8'
    if params is not None and getattr(params, 'backend', 'emu') == 'sim':
        key = os.path.realpath(params.workdir).encode('utf-8', 'surrogateescape')
        name = 'dht8-sim-%s' % hashlib.sha256(key).hexdigest()[:12]
    base = scratch.memory_workdir(name)
    return None if base is None else os.path.join(base, 'downloads')


def _free(path):
    """Return the bytes free on path's file system."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _available():
    """Return MemAvailable in bytes (0 when /proc/meminfo cannot say)."""
    try:
        with open('/proc/meminfo') as f:
            return next(int(line.split()[1]) * 1024 for line in f
                        if line.startswith('MemAvailable:'))
    except (OSError, StopIteration, ValueError):
        return 0


def check_resources(params, values):
    """Check that --workdir can be made and that the points (values) fit memory and disk."""
    folder, problem = writable_ancestor(params.workdir, '--workdir')
    if problem:
        raise UsageError(problem)
    _check_memory(params)
    _check_disk(params, values, folder)


def _check_memory(params):
    """Refuse a --files the index servers and clients of one point cannot hold."""
    need = params.peers * params.files * (
        INDEX_ENTRY_BYTES * (1 + params.replicas) + CLIENT_NAME_BYTES)
    avail = _available()
    if avail and need > MEMORY_SHARE * avail:
        raise UsageError('--files %d with --peers %d needs about %.1f GB for the index, '
                         'over %d%% of the %.1f GB available' % (
                             params.files, params.peers, need / 1e9,
                             100 * MEMORY_SHARE, avail / 1e9))


def _check_disk(params, values, folder):
    """Refuse a run whose new file sets and downloads do not fit the --workdir disk (the
    downloads count there unless memory takes them: downloads_folder)."""
    need = sum(size for path, size, spec in _needs(params, values)
               if (spec is None and not _in_memory(path, params)) or
               (spec is not None and not dht_files.is_generated(spec, params.workdir)))
    free = _free(folder)
    if need > free:
        raise UsageError('--workdir %s needs %.1f GB for file sets and downloads, and '
                         '%s has %.1f GB free' % (params.workdir, need / 1e9, folder,
                                                  free / 1e9))


def _in_memory(path, params=None):
    """True when path is the memory folder (downloads_folder's memory choice)."""
    return str(path) == memory_downloads(params)


def disk_needs(params, values):
    """Return [(path, bytes)]: each file set the points (values) use, then the largest
    download (one point's downloads exist at a time; each point removes its own)."""
    return [(str(path), size) for path, size, _ in _needs(params, values)]


def _needs(params, values):
    """Return [(path, bytes, spec)] behind disk_needs (spec None for the downloads: the
    largest point's in each folder downloads_folder picks)."""
    work = pathlib.Path(params.workdir)
    sizes, out, peaks = {}, [], {}
    for point in values:
        key = point['fileset']
        if key not in sizes:
            spec = fileset_spec(key, params)
            sizes[key] = dht_files.expected_bytes(spec)
            out.append((work / 'sets' / spec.set_id, sizes[key], spec))
        if point['op'] == 'download':
            nbytes = sizes[key] * point['peers']
            folder = downloads_folder(params, nbytes)
            peaks[folder] = max(peaks.get(folder, 0), nbytes)
    return out + [(pathlib.Path(folder), peak, None) for folder, peak in sorted(peaks.items())]


#: Seconds per operation of one client, and to start one node (server, client, peer) or
#: one capture, and the peers' bytes as a multiple of one link's rate (``SHARED_LINKS``):
#: fitted per kind of point to ``logs/points.jsonl`` of the quick start's dht8 run at
#: 1c2a77b (default scale, 82 points, 539 s of points; a 2-core machine, CPU-bound in 62 of
#: them), where the earlier constants, rounded from one smoke run, gave 1,148 s: batched
#: registers took 0.20 of their estimate, unbatched ones and searches 0.5, Part II's
#: downloads 0.43 (its 8 peers moved their bytes at about 2.3 links' rate). Only
#: ``--dry-run`` and the ETA use them, as a guide: the ETA rescales each kind by its own
#: finished points, and a machine with other cores, or another load, takes longer or less.
OP_SECONDS = {'register batched': 0.0001, 'register': 0.0005, 'search': 0.00045,
              'download': 0.0015}
SHARED_LINKS = 2.3
NODE_START_S, CAPTURE_START_S = 0.07, 1.25


def estimate_seconds(point, files, nbytes, params):
    """Return a point's rough length: node start, every client's operations and bytes.

    Clients run at once, each on its own link, but on the machines this runs on the CPU
    does every client's work: at seed scale on 2 cores, 1, 2, 4 and 8 peers took 7, 12, 23
    and 43 s to search and 22, 41, 93 and 190 s to download, in proportion to all their
    operations, not to one client's. So a point counts every client's operations and its
    bytes at --bw, and the ETA scales each kind of point by how its first ones compared
    with their estimates (``sweep.Progress`` kinds; ``Dht8.eta_kind``). A hung or cut
    server costs the clients waiting on it one --timeout."""
    op = point['op']
    ops = PING_SEARCHES if point['part'] == 'ping' and op == 'search' else files
    per_op = OP_SECONDS['register batched' if op == 'register' and point['batch'] else op]
    nodes = point['servers'] + 2 * point['peers']      # servers, clients, setup/peers
    seconds = nodes * NODE_START_S + point['peers'] * ops * per_op * (1 + point['replicas'])
    if point['part'] == 'capture':
        seconds += CAPTURE_START_S
    if op != 'register':
        seconds += files * OP_SECONDS['register batched']       # untimed setup
    if op == 'download':
        seconds += point['peers'] * nbytes * 8 / (SHARED_LINKS * (params.bw or BW_MAX_MBIT)
                                                  * 1e6)
    if point.get('fault') in ('hang', 'cut'):
        seconds += params.timeout
    return seconds
