"""Peer-to-peer file transfer, the fetching side: one file's download across holders.

Sans-I/O, like the serving side (``transfer.ServeConnection``). `Download` sends GET with
the current offset, checks the FILE header (offset as asked; size and digest equal to
those of earlier holders), hashes the bytes as they arrive and, at the end, compares the
digest with the header's. If a holder vanishes midway, `holder_failed()` moves to the next
holder and the next GET asks for the rest of the file (resume); the hash state carries over.
The driver writes to a temporary name and renames only after `done` with a good digest,
so a failed or corrupt download never leaves a file under the real name.

Under PyPy the bytes are hashed in batches of at least `HASH_BATCH` (joined), under CPython
as they come: see `HASH_BATCH`. The digest is the same either way.
"""

import hashlib
import platform

from . import codec

# Bytes hashed at once under PyPy (0: every chunk as it arrives, as under CPython). A chunk
# is at most a 64 KiB stream train, which PyPy allocates in its nursery (the simulator's
# pypy3 child runs with a 64 MB one, repronet.run.sim_interpreter); handing such an object
# to OpenSSL costs PyPy a copy into fresh memory, a page fault per 4 KiB (pypy3 7.3.11:
# 48 user + 30 system us per 64 KiB against 38 us of CPython's, where the SHA-256 itself is
# about 37). A join of 256 KiB is allocated outside the nursery and hashed in place
# (50 us per 64 KiB, no fault). Under CPython the join would be one more copy, and an
# allocation over glibc's 128 KiB mmap threshold faults: it hashes each chunk.
HASH_BATCH = 256 * 1024 if platform.python_implementation() == 'PyPy' else 0


class DownloadError(Exception):
    """A download that cannot complete (from this holder or at all)."""


class Download:
    """One file fetched from one or more holders, verified by SHA-256."""

    def __init__(self, name, holders):
        self.name = name
        self.holders = list(holders)
        if not self.holders:
            raise DownloadError('no holder of %r' % name)
        self.holder = self.holders.pop(0)
        self.size = None
        self.sha256 = None
        self.received = 0
        self.resumes = 0
        self.failures = []
        self._hash = hashlib.sha256()
        self._unhashed = []     # chunks received and not yet hashed (HASH_BATCH)
        self._unhashed_bytes = 0
        self._corrupt = False
        self._req = None
        self._decoder = None
        self.done = False

    def request(self, req):
        """Return the GET frame asking the current holder for the rest of the file."""
        self._req = req
        self._decoder = codec.Decoder(64 * 1024)
        return codec.encode(codec.Get(req, self.name, self.received))

    def receive(self, data):
        """Feed bytes from the holder; return chunks to append to the file (may raise)."""
        out = []
        try:
            self._receive(data, out)
        except DownloadError as exc:
            exc.chunks = out      # bytes decoded before the error still count
            raise
        return out

    def _receive(self, data, out):
        """Decode data, appending file chunks to out."""
        for item in self._decoder.feed(data):
            if type(item) is codec.Chunk:
                if item.data:
                    self._hash_chunk(item.data)
                    self.received += len(item.data)
                    out.append(item.data)
                if item.last:
                    self._finish()
            elif type(item) is codec.FileHeader:
                self._header(item)
            elif type(item) is codec.Error:
                raise DownloadError('%s: %s' % (self.holder, item.text))
            elif type(item) is codec.ProtocolError:
                raise DownloadError('%s sent a bad frame: %s' % (self.holder, item.text))
            else:
                raise DownloadError('%s sent unexpected %s' % (self.holder, type(item).__name__))

    def _hash_chunk(self, data):
        """Hash data now, or once HASH_BATCH bytes wait (see HASH_BATCH)."""
        if not HASH_BATCH:
            self._hash.update(data)
            return
        self._unhashed.append(data)
        self._unhashed_bytes += len(data)
        if self._unhashed_bytes >= HASH_BATCH:
            self._hash_unhashed()

    def _hash_unhashed(self):
        """Hash the chunks that wait."""
        if self._unhashed:
            self._hash.update(b''.join(self._unhashed))
            self._unhashed.clear()
            self._unhashed_bytes = 0

    def _header(self, h):
        """Check a FILE header against the request and earlier holders."""
        if h.req != self._req or h.offset != self.received:
            raise DownloadError('%s answered req %d offset %d, asked req %d offset %d'
                                % (self.holder, h.req, h.offset, self._req, self.received))
        if self.size is None:
            self.size, self.sha256 = h.size, h.sha256
        elif (h.size, h.sha256) != (self.size, self.sha256):
            raise DownloadError('%s holds a different %r (size %d, digest %s) than the first'
                                ' holder; cannot resume' % (self.holder, self.name, h.size,
                                                            h.sha256.hex()[:16]))
        if h.size == h.offset:
            self._finish()

    def _finish(self):
        """All bytes arrived: verify the digest."""
        if self.received != self.size:
            raise DownloadError('size mismatch: got %d of %d bytes' % (self.received, self.size))
        self._hash_unhashed()
        if self._hash.digest() != self.sha256:
            self._corrupt = True
            raise DownloadError('SHA-256 mismatch for %r from %s: got %s, header says %s'
                                % (self.name, self.holder, self._hash.hexdigest()[:16],
                                   self.sha256.hex()[:16]))
        self.done = True

    def holder_failed(self, reason):
        """The current holder failed; return the next holder to resume from, or None."""
        self.failures.append('%s: %s (at byte %d)' % (self.holder, reason, self.received))
        if not self.holders:
            return None
        self.holder = self.holders.pop(0)
        self.resumes += 1
        if self._corrupt:
            # The bytes so far do not match their digest: start over, do not resume.
            self._corrupt = False
            self.size = self.sha256 = None
            self.received = 0
            self._hash = hashlib.sha256()
            self._unhashed.clear()
            self._unhashed_bytes = 0
        return self.holder

    def error(self):
        """Text explaining why the download failed."""
        total = '?' if self.size is None else str(self.size)
        return 'download of %r failed after %d of %s bytes: %s' % (
            self.name, self.received, total, '; '.join(self.failures))
