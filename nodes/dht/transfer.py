"""Peer-to-peer file transfer core: GET name from offset, FILE header, raw bytes, SHA-256.

Sans-I/O. The serving side (`ServeConnection`) turns GET frames into actions for its
driver: send a frame, send `count` bytes of a file from `offset` (the driver uses
`loop.sendfile`, so file data never passes through Python), or close. It learns sizes and
digests from a catalog object: `stat(name) -> (size, sha256) or None`. A catalog that reads
a disk also offers `open(name) -> (size, sha256, source) or None` and `close(source)`, and
the core then uses those: the file is opened once, the header describes that open file,
and `SendFile.source` carries it to the driver, so the bytes sent are those the header
describes, never those of whatever the name points to later (a symlink or a FIFO swapped
in meanwhile). The core gives back with `close` each source it does not hand on; the
driver closes the others.

The driver reports each body it sent with `file_sent(action, count)`: a body shorter than
announced (the file shrank under us) ends the connection, since the stream can no longer
match its header; the downloader resumes from another holder. Counters: `served` GETs
answered with a FILE header, `sent` of them whose bytes all went out, `failed` cut short,
`bytes` file bytes actually sent.

Pipelined GETs are answered `WINDOW` at a time, and not at all while the driver has output
pending (`pause_output` / `resume_output`): the rest wait decoded and `waiting` tells the
driver to stop reading, so a client that pipelines thousands of GETs holds at most
`WINDOW` open files on this connection.

The fetching side (`Download`) is one file's download across holders. It sends GET with
the current offset, checks the FILE header (offset as asked; size and digest equal to
those of earlier holders), hashes the bytes as they arrive and, at the end, compares the
digest with the header's. If a holder vanishes midway, `holder_failed()` moves to the next
holder and the next GET asks for the rest of the file (resume); the hash state carries over.
The driver writes to a temporary name and renames only after `done` with a good digest,
so a failed or corrupt download never leaves a file under the real name.
"""

import hashlib
from collections import deque
from dataclasses import dataclass, field

from . import codec

WINDOW = 16         # GETs answered per batch (each may hold an open file until it is sent)


@dataclass(frozen=True)
class SendFrame:
    data: bytes


@dataclass(frozen=True)
class SendFile:
    name: str
    offset: int
    count: int
    source: object = field(default=None, compare=False, repr=False)   # the catalog's open file


@dataclass(frozen=True)
class Close:
    reason: str


class ServeConnection:
    """One connection to a peer's file server: GET frames in, actions out."""

    def __init__(self, catalog, max_frame=64 * 1024):
        self.catalog = catalog
        self.decoder = codec.Decoder(max_frame)
        self.counters = dict(gets=0, served=0, sent=0, failed=0, not_found=0, errors=0,
                             bytes=0)
        self.output_paused = False
        self._inbox = deque()           # decoded requests not answered yet

    @property
    def waiting(self):
        """True while decoded requests wait for an answer: the driver must stop reading."""
        return bool(self._inbox)

    def receive(self, data, now):
        """Feed bytes; return a list of SendFrame / SendFile / Close actions."""
        self._inbox.extend(self.decoder.feed(data))
        return self._answer()

    def pause_output(self):
        """The driver still has actions to carry out: answer nothing until resume_output."""
        self.output_paused = True

    def resume_output(self, now):
        """The driver is done with what it had; return the next batch of actions."""
        self.output_paused = False
        return self._answer()

    def file_sent(self, action, count):
        """The driver sent count bytes of a SendFile; return [Close] if that was too few."""
        self.counters['bytes'] += count
        if count == action.count:
            self.counters['sent'] += 1
            return []
        self.counters['failed'] += 1
        return [Close('%r shrank while being sent: %d of %d bytes from offset %d'
                      % (action.name[:200], count, action.count, action.offset))]

    def _answer(self):
        """Actions for up to WINDOW waiting requests, unless paused."""
        out = []
        n = 0
        while self._inbox and not self.output_paused and n < WINDOW:
            item = self._inbox.popleft()
            n += 1
            if isinstance(item, codec.ProtocolError):
                self.counters['errors'] += 1
                out.append(SendFrame(codec.encode(codec.Error(item.req, item.code, item.text))))
                if item.fatal:
                    out.append(Close(item.text))
                    self._inbox.clear()
            elif isinstance(item, codec.Get):
                out.extend(self._get(item))
            else:
                self.counters['errors'] += 1
                text = 'a peer answers only GET, not %s' % type(item).__name__
                out.append(SendFrame(codec.encode(codec.Error(getattr(item, 'req', 0),
                                                              codec.ERR_UNEXPECTED, text))))
                if isinstance(item, codec.Chunk):
                    out.append(Close(text))
                    self._inbox.clear()
        return out

    def _open(self, name):
        """(size, sha256, source or None) of a shared file, or None."""
        if hasattr(self.catalog, 'open'):
            return self.catalog.open(name)
        st = self.catalog.stat(name)
        return None if st is None else (st[0], st[1], None)

    def _release(self, source):
        if source is not None:
            self.catalog.close(source)

    def _get(self, msg):
        """Actions answering one GET."""
        self.counters['gets'] += 1
        opened = self._open(msg.name)
        if opened is None:
            self.counters['not_found'] += 1
            return [SendFrame(codec.encode(codec.Error(msg.req, codec.ERR_NO_SUCH_FILE,
                                                       'no such file: %r' % msg.name[:200])))]
        size, digest, source = opened
        if msg.offset > size:
            self._release(source)
            self.counters['errors'] += 1
            return [SendFrame(codec.encode(codec.Error(
                msg.req, codec.ERR_MALFORMED, 'offset %d beyond size %d' % (msg.offset, size))))]
        self.counters['served'] += 1
        head = SendFrame(codec.encode(codec.FileHeader(msg.req, size, msg.offset, digest)))
        if size == msg.offset:
            self._release(source)
            self.counters['sent'] += 1
            return [head]
        return [head, SendFile(msg.name, msg.offset, size - msg.offset, source)]


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
                    self._hash.update(item.data)
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
        return self.holder

    def error(self):
        """Text explaining why the download failed."""
        total = '?' if self.size is None else str(self.size)
        return 'download of %r failed after %d of %s bytes: %s' % (
            self.name, self.received, total, '; '.join(self.failures))
