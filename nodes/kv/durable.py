"""The KV node's append-only file on disk: recovery at start-up, appends, and fsync policy.

The log is the store's persistent storage (records from `aof`); the core only produces its
bytes (`KVCore.take_log`). This module is the part of the driver that touches the file:

- `AppendLog.open` takes an exclusive `flock` (two servers appending to one file would
  interleave records), then `recover` scans the file with `aof.recover` in fixed-size
  chunks. A bad tail (a record cut short by a crash, or one failing its checksum) is copied
  to ``<log>.bad-tail`` (``.bad-tail.1``... when that exists already, never overwritten),
  the file is truncated to the valid prefix and synced, and the problem is returned for
  the driver to report. Nothing after the first bad record is applied. A record too
  large for this server's limits whose checksum is good is not damage but a log written
  with larger limits: the server refuses to start (`LogTooLarge`) rather than cut it.
- `append` writes with `os.write` at once, in the loop thread, so a 'log'-storage GET that
  `pread`s an offset the core has handed over always finds it in the file (the core serves
  offsets not yet handed over from its own buffer).
- `Syncer` applies ``appendfsync`` as Redis does. ``always``: a reply that acknowledges a
  write is held until an `fdatasync` that started after the write has returned (group
  commit: one fdatasync runs at a time, on a worker thread, and covers every write made
  before it started; writes arriving meanwhile wait for the next one, so the loop keeps
  serving while the disk works). ``everysec``: replies go at once, an fdatasync runs at
  most once a second when something was written. ``no``: never fdatasync; the kernel
  writes back when it likes. Every policy syncs once more at a clean shutdown.

Any failure to write or sync the log is fatal (`on_error`): a server that cannot make
writes durable must not go on acknowledging them, which is also what Redis does when
``appendfsync always`` fails.
"""

import concurrent.futures
import fcntl
import os
import zlib

from . import aof

POLICIES = ('always', 'everysec', 'no')
CHUNK = 1 << 20                 # bytes read at a time during recovery
_MAX_BAD_TAILS = 100            # .bad-tail, .bad-tail.1 ... .bad-tail.99


class LogInUse(OSError):
    """Another process holds the log file's lock."""


class LogTooLarge(OSError):
    """The log holds a sound record larger than the configured limits allow."""


class AppendLog:
    """One append-only file: recovered once, then appended to and synced."""

    def __init__(self, path):
        self.path = path
        self.end = 0            # bytes in the file (all written with os.write)
        self._fd = None

    def open(self):
        """Open (create) the file and lock it; LogInUse if another process holds it."""
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.close()
            raise LogInUse('log file %s is in use by another process' % self.path) from None
        _sync_dir(self.path)    # the file's name survives a crash, not only its data

    def recover(self, storage, max_payload=aof.DEFAULT_MAX_PAYLOAD):
        """Scan the file; keep its valid prefix and return (aof.Recovery, bad-tail path)."""
        max_payload = max(max_payload, aof.DEFAULT_MAX_PAYLOAD)
        rec = aof.recover(self._chunks(), storage, max_payload)
        bad_path = None
        if rec.problem is not None:
            self._refuse_larger_record(rec.valid_bytes, max_payload)
        if rec.problem is not None or rec.valid_bytes < rec.total_bytes:
            bad_path = self._save_tail(rec.valid_bytes)
            os.ftruncate(self._fd, rec.valid_bytes)
            os.fsync(self._fd)
        self.end = rec.valid_bytes
        os.lseek(self._fd, self.end, os.SEEK_SET)
        return rec, bad_path

    def append(self, data):
        """Write data at the end of the file (all of it, or OSError)."""
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
            self.end += n

    def read(self, offset, length):
        """The bytes at [offset, offset + length) of the file (for 'log' storage)."""
        data = os.pread(self._fd, length, offset)
        if len(data) != length:
            raise OSError('log file %s: %d bytes at offset %d, file ends at %d'
                          % (self.path, length, offset, self.end))
        return data

    def sync(self):
        """fdatasync the file (safe to call from a worker thread)."""
        os.fdatasync(self._fd)

    def close(self):
        """Close the file (drops the lock)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _refuse_larger_record(self, at, max_payload):
        """LogTooLarge if the record at `at` is whole and sound but above max_payload.

        Such a record was written by a server with larger --max-key-bytes/--max-value-bytes;
        cutting the log there would throw away acknowledged writes, so the server refuses
        to start instead. Its checksum is computed a chunk at a time (bounded memory).
        """
        head = os.pread(self._fd, aof.HEADER.size, at)
        if len(head) < aof.HEADER.size:
            return
        magic, crc, plen = aof.HEADER.unpack(head)
        if magic != aof.MAGIC or plen <= max_payload:
            return
        offset, left, got = at + aof.HEADER.size, plen, 0
        while left:
            data = os.pread(self._fd, min(CHUNK, left), offset)
            if not data:
                return                      # cut short: a truncated tail after all
            got = zlib.crc32(data, got)
            offset += len(data)
            left -= len(data)
        if got == crc:
            raise LogTooLarge('log file %s holds a sound %d-byte record at byte %d, more than '
                              'these --max-key-bytes and --max-value-bytes allow (%d); restart '
                              'with larger limits' % (self.path, plen, at, max_payload))

    def _chunks(self):
        """The file's bytes from offset 0, CHUNK at a time."""
        offset = 0
        while True:
            data = os.pread(self._fd, CHUNK, offset)
            if not data:
                return
            offset += len(data)
            yield data

    def _save_tail(self, start):
        """Copy the bytes from start to the end of the file beside it; return that path."""
        for i in range(_MAX_BAD_TAILS):
            path = self.path + '.bad-tail' + ('.%d' % i if i else '')
            try:
                out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                continue
            try:
                offset = start
                while True:
                    data = os.pread(self._fd, CHUNK, offset)
                    if not data:
                        break
                    offset += len(data)
                    os.write(out, data)
                os.fsync(out)
            finally:
                os.close(out)
            return path
        raise OSError('%s.bad-tail ... .bad-tail.%d all exist; move them away to restart'
                      % (self.path, _MAX_BAD_TAILS - 1))


def _sync_dir(path):
    """fsync the directory holding path, so a new entry in it is durable."""
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SyncPolicy:
    """appendfsync for one AppendLog, whatever runs the fdatasync (`Syncer`: a worker
    thread; the simulator's `sim_server.SimSyncer`: virtual time).

    `synced` is the file length known to be on disk. With 'always' the driver holds each
    acknowledging reply until `synced` reaches the log's end at the time of the write, and
    `on_synced(synced)` releases them. A subclass starts one fdatasync in ``_begin(target)``
    and calls ``_done(target, exc)`` when it returned; ``call_later(delay, fn)`` runs the
    ``everysec`` timer.
    """

    def __init__(self, log, policy, call_later, on_synced, on_error):
        if policy not in POLICIES:
            raise ValueError('appendfsync must be one of %s' % ', '.join(POLICIES))
        self.log = log
        self.policy = policy
        self.synced = log.end
        self.fsyncs = 0
        self._call_later = call_later
        self._on_synced = on_synced
        self._on_error = on_error
        self._running = None                # the fdatasync under way
        self._timer = None
        if policy == 'everysec':
            self._timer = call_later(1.0, self._tick)

    def written(self):
        """The driver appended to the log; with 'always' start an fdatasync unless one runs."""
        if self.policy == 'always' and self._running is None:
            self._start()

    def _tick(self):
        self._timer = self._call_later(1.0, self._tick)
        if self._running is None and self.log.end > self.synced:
            self._start()

    def _start(self):
        self._running = self._begin(self.log.end)

    def _done(self, target, exc):
        self._running = None
        if exc is not None:
            self._on_error('cannot fdatasync the log file %s: %s' % (self.log.path, exc))
            return
        self.fsyncs += 1
        self.synced = max(self.synced, target)
        self._on_synced(self.synced)
        if self.policy == 'always' and self.log.end > self.synced:
            self._start()

    def _stop_timer(self):
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _final_sync(self):
        """The clean shutdown's last fdatasync, when anything is not yet synced."""
        if self.log.end > self.synced:
            self.log.sync()
            self.fsyncs += 1
            self.synced = self.log.end


class Syncer(SyncPolicy):
    """`SyncPolicy` on an asyncio loop, each fdatasync on a worker thread."""

    def __init__(self, log, policy, loop, on_synced, on_error):
        self._loop = loop
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix='fsync')
        super().__init__(log, policy, loop.call_later, on_synced, on_error)

    def _begin(self, target):
        running = self._loop.run_in_executor(self._pool, self.log.sync)
        running.add_done_callback(lambda fut: self._finished(fut, target))
        return running

    def _finished(self, fut, target):
        if fut.cancelled():
            self._running = None
            return
        self._done(target, fut.exception())

    async def close(self):
        """Stop the timer, wait for a running fdatasync, sync what is left, stop the thread."""
        self._stop_timer()
        if self._running is not None:
            try:
                await self._running
            except OSError:
                pass                        # reported by _done; the final sync tries again
        self._final_sync()
        self._pool.shutdown(wait=True)
