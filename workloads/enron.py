"""The Enron e-mail corpus, in its maildir layout, as (key, value) pairs for the KV workload.

The seed stored the Enron corpus (CMU's release, ``enron_mail_20150507.tar.gz``, about
1.7 GB unpacked, 517,401 messages) in its key-value servers.  It cannot be downloaded
here, so the experiment uses synthetic keys by default (``workloads.keyspace``) and this
loader for anyone who has a copy: ``--dataset enron:/path/to/maildir``.

Layout: ``maildir/<user>/<folder>[/<sub>...]/<n>.``, one RFC 822 message per file.  The
path may be the ``maildir`` folder itself or the folder holding it.  Order is
deterministic: folders and files sorted by name, message files ``<n>.`` by their number,
so every load-generator process given the same path and ``limit`` builds the same keys.

Key: the message's ``Message-ID`` header (``keys='message-id'``, the default; the header
name is matched without regard to case, a folded value is unfolded) or its path relative
to the maildir (``keys='path'``, e.g. ``allen-p/inbox/1.``).  Value: the body, the bytes
after the first empty line (all of it when there is none: no headers were found, so the
file is skipped as lacking a Message-ID in that mode, or kept whole as a body in path mode).

Skipped and counted, never raised: files that cannot be read, files without a
Message-ID, a Message-ID already seen (the corpus files one message in several folders:
``sent`` and ``_sent_mail``, ``all_documents``), keys over ``max_key_bytes`` and values over
``max_value_bytes`` (the KV server's defaults, 512 B and 1 MiB), and files whose names are
not ``<n>.``.  A missing or empty folder is ``EnronError`` with one sentence.
"""

import collections
import os
import re

MAX_KEY_BYTES = 512             # nodes.kv's --max-key-bytes default
MAX_VALUE_BYTES = 1 << 20       # nodes.kv's --max-value-bytes default
MAX_HEADER_BYTES = 64 << 10     # a header block longer than this is not a message header
MAX_FILE_BYTES = MAX_HEADER_BYTES + MAX_VALUE_BYTES
KEY_MODES = ('message-id', 'path')
SKIP_REASONS = ('unreadable', 'no_message_id', 'duplicate', 'key_too_long', 'value_too_long',
                'not_a_message')
_MESSAGE_FILE = re.compile(r'(\d+)\.\Z')
_MESSAGE_ID = re.compile(rb'^message-id:[ \t]*(.*(?:\r?\n[ \t].*)*)', re.IGNORECASE | re.MULTILINE)


class EnronError(ValueError):
    """The maildir cannot be used at all (its sentence says why)."""


def _sort_key(name):
    """Message files <n>. by number, before anything else by name."""
    m = _MESSAGE_FILE.match(name)
    return (0, int(m.group(1)), '') if m else (1, 0, name)


def maildir_root(path):
    """The maildir folder of path (path itself, or path/maildir when that exists)."""
    if not os.path.isdir(path):
        raise EnronError('the Enron maildir %s is not a folder' % path)
    inner = os.path.join(path, 'maildir')
    return inner if os.path.isdir(inner) else path


def split_message(data):
    """(header bytes, body bytes) of a message; header empty when there is no empty line."""
    for sep in (b'\r\n\r\n', b'\n\n'):
        at = data.find(sep)
        if at >= 0 and at <= MAX_HEADER_BYTES:
            return data[:at], data[at + len(sep):]
    return b'', data


def message_id(header):
    """The Message-ID of a header block (bytes, unfolded and stripped), or None."""
    m = _MESSAGE_ID.search(header)
    if m is None:
        return None
    value = re.sub(rb'\r?\n[ \t]+', b' ', m.group(1)).strip()
    return value or None


class Loader:
    """Iterate a maildir's (key, value) pairs; ``skipped`` counts what was left out, by reason."""

    def __init__(self, path, keys='message-id', limit=None, max_key_bytes=MAX_KEY_BYTES,
                 max_value_bytes=MAX_VALUE_BYTES):
        if keys not in KEY_MODES:
            raise EnronError('Enron keys are message-id or path, not %r' % keys)
        if limit is not None and limit < 1:
            raise EnronError('the Enron limit must be at least 1')
        self.root = root = maildir_root(path)
        self.keys = keys
        self.limit = limit
        self.max_key_bytes = max_key_bytes
        self.max_value_bytes = max_value_bytes
        self.loaded = 0
        self.skipped = collections.Counter()
        self._seen = set()
        self._root_len = len(root.rstrip(os.sep)) + 1

    def __iter__(self):
        for path in self._files():
            pair = self._pair(path)
            if pair is not None:
                self.loaded += 1
                yield pair
                if self.limit is not None and self.loaded >= self.limit:
                    return

    def _files(self):
        """Paths of the message files under the root, in the module doc's order."""
        def unreadable(_exc):
            self.skipped['unreadable'] += 1
        for folder, dirs, files in os.walk(self.root, onerror=unreadable):
            dirs.sort(key=_sort_key)
            for name in sorted(files, key=_sort_key):
                if _MESSAGE_FILE.match(name):
                    yield os.path.join(folder, name)
                else:
                    self.skipped['not_a_message'] += 1

    def _pair(self, path):
        """(key, value) of one file, or None after counting why it is skipped."""
        try:
            with open(path, 'rb') as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError:
            self.skipped['unreadable'] += 1
            return None
        header, body = split_message(data)
        if self.keys == 'path':
            key = path[self._root_len:].replace(os.sep, '/').encode('utf-8', 'surrogateescape')
        else:
            key = message_id(header)
            if key is None:
                self.skipped['no_message_id'] += 1
                return None
        if len(key) > self.max_key_bytes:
            self.skipped['key_too_long'] += 1
            return None
        if len(body) > self.max_value_bytes or len(data) > MAX_FILE_BYTES:
            self.skipped['value_too_long'] += 1
            return None
        if key in self._seen:
            self.skipped['duplicate'] += 1
            return None
        self._seen.add(key)
        return key, body


def load(path, keys='message-id', limit=None, **limits):
    """(list of (key, value), Loader) of a maildir; EnronError when it has no usable message."""
    loader = Loader(path, keys, limit, **limits)
    pairs = list(loader)
    if not pairs:
        skipped = ', '.join('%d %s' % (n, why.replace('_', ' '))
                            for why, n in sorted(loader.skipped.items()))
        raise EnronError('the Enron maildir %s has no usable message%s' % (
            path, ' (skipped: %s)' % skipped if skipped else ''))
    return pairs, loader
