"""A peer's shared folder: the regular files directly inside it and their SHA-256.

A shared name is opened exactly once per GET, relative to the folder opened at start
(`dir_fd`, so renaming or swapping the folder itself changes nothing), with O_NOFOLLOW (a
symlink is refused, never followed out of the folder) and O_NONBLOCK (a FIFO cannot block
the event loop; it is refused once `fstat` shows it is not a regular file). Digest, header
and body all come from that one descriptor, and the digest covers exactly the size `fstat`
gave, the size the header announces and the driver sends: a file appended to meanwhile is
served as it was when opened, and its header still matches its bytes.

Digests are cached per file (device, inode: hard links share one) with the version they
were computed for (size, mtime, ctime), so a file is hashed once until it changes. Hashing
reads the whole file, so `digest` blocks: the peer runs it on worker threads, never on its
event loop.

Only errors that say "no such shared file" (ENOENT, ELOOP for a symlink, EACCES, ...) make
`open` return None. Running out of descriptors or memory (EMFILE, ENFILE, ENOMEM, ...)
says nothing about the file: `open` raises `transfer.Unavailable` ("busy, try later"), as
it does past `max_open` files, the budget that keeps the peer's descriptors below
RLIMIT_NOFILE whatever its downloaders ask for. `kept` of those are kept for the `first`
file of a connection that holds none: downloaders that pipeline GETs and stop reading can
take the rest, never the one a downloader with a single GET in flight needs.
"""

import errno
import hashlib
import io
import os
import stat

from .server_core import valid_name
from .transfer import Unavailable

_HASH_BLOCK = 1024 * 1024
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# open(2) errors that mean the name is not a shared regular file (or never can be served).
_NOT_SHARED = frozenset((errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES, errno.EPERM,
                         errno.ENXIO, errno.ENAMETOOLONG, errno.EISDIR, errno.ENODEV))


def sha256_fd(fd, size, stop=None):
    """Return the SHA-256 of the first size bytes of an open file, or None if it holds fewer
    (it shrank) or stop (a threading.Event) is set meanwhile."""
    h = hashlib.sha256()
    offset = 0
    while offset < size:
        if stop is not None and stop.is_set():
            return None
        block = os.pread(fd, min(_HASH_BLOCK, size - offset), offset)
        if not block:
            return None
        h.update(block)
        offset += len(block)
    return h.digest()


class SharedFile(io.FileIO):
    """An open shared file with its identity and version at opening."""

    def __init__(self, fd, key):
        super().__init__(fd, 'r')
        self.key = key              # (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)
        self.size = key[2]


class Catalog:
    """The shared folder: name -> (size, sha256), refreshed when a file changes."""

    def __init__(self, share, max_open=None, kept=0):
        self.share = os.path.abspath(share)
        self._dir = os.open(self.share, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._cache = {}
        self.max_open = max_open
        self.kept = kept
        self.open_files = 0

    def names(self):
        """Return the sorted names of the regular files in the folder."""
        with os.scandir(self._dir) as it:
            return sorted(e.name for e in it if e.is_file(follow_symlinks=False)
                          and not e.name.startswith('.'))

    def scan(self, stop=None):
        """Hash every file now (so the first download does not pay for it), until stop is
        set; return how many files have their digest."""
        done = 0
        for name in self.names():
            if stop is not None and stop.is_set():
                break
            try:
                done += self.stat(name, stop) is not None
            except Unavailable:
                pass
        return done

    def open(self, name, first=True):
        """Return (size, sha256 or None if not known for this version, SharedFile) of a
        shared regular file, or None; raise Unavailable if it cannot be opened now (first:
        the connection asking holds no other file)."""
        if valid_name(name) or name.startswith('.'):
            return None
        if self.max_open is not None and \
                self.open_files >= self.max_open - (0 if first else self.kept):
            raise Unavailable('%d files open, the most this peer allows' % self.open_files)
        try:
            fd = os.open(name, _OPEN_FLAGS, dir_fd=self._dir)
        except OSError as exc:
            if exc.errno in _NOT_SHARED:
                return None
            raise Unavailable('cannot open %r now: %s' % (name[:200], exc.strerror)) from None
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise Unavailable('cannot stat %r now: %s' % (name[:200], exc.strerror)) from None
        if not stat.S_ISREG(st.st_mode):       # a FIFO, a device, a directory
            os.close(fd)
            return None
        source = SharedFile(fd, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                 st.st_ctime_ns))
        self.open_files += 1
        hit = self._cache.get(source.key[:2])
        return st.st_size, hit[1] if hit is not None and hit[0] == source.key else None, source

    def digest(self, source, stop=None):
        """SHA-256 of the file's size at opening (blocks), or None if it cannot be read."""
        try:
            return sha256_fd(source.fileno(), source.size, stop)
        except OSError:
            return None

    def remember(self, source, digest):
        """Cache the digest of source's version of its file."""
        self._cache[source.key[:2]] = (source.key, digest)

    def close(self, source):
        """Close a file returned by open()."""
        source.close()
        self.open_files -= 1

    def stat(self, name, stop=None):
        """Return (size, sha256) of a shared file, or None if it is not shared (blocks: it
        hashes the file unless its digest is cached)."""
        opened = self.open(name)
        if opened is None:
            return None
        size, digest, source = opened
        try:
            if digest is None:
                digest = self.digest(source, stop)
                if digest is None:
                    return None
                self.remember(source, digest)
        finally:
            self.close(source)
        return size, digest
