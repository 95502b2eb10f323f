"""The file-transfer protocol without I/O: request and reply lines, name rules, the
receiving side's accounting, and the rates the seed reports.

One transfer per TCP connection, as in the seed's program. The client sends one ASCII
line (at most :data:`MAX_LINE` bytes with its ``\\n``):

- ``GET <name> [key=value ...]``: the server answers ``OK <size> <sha256>`` and the
  file's bytes, then closes;
- ``PUT <name> <size> <sha256> [key=value ...]`` and the bytes: the server answers
  ``OK <size> <sha256>`` once they are checked and under their final name.

Any failure is ``ERR <one sentence>`` and the connection closes. Keys: ``packet`` (bytes
per write of the sending side, the seed's "packet size"), ``nodelay`` (TCP_NODELAY on the
sending socket), ``dropcache`` (GET: the server evicts the file from the page cache before
reading it, so the seed's disk-seek explanation can be tested rather than repeated).

Rates are the seed's: bytes over the time from the first to the last write (T_x) or read
(R_x), in Mbit/s (the seed's "bits per microsecond"). A transfer that fits in one read
has no duration: its R_x is None, not infinite. The driver passes ``now`` everywhere; this
module reads no clock.
"""

import dataclasses
import hashlib
import re

MAX_LINE = 1024
MAX_NAME = 255
MAX_PACKET = 4 << 20
DEFAULT_PACKET = 1000
TCP_MIN_MSS = 88            # Linux raises a smaller TCP_MAXSEG to this
TCP_MAX_MSS = 65495         # loopback MTU 65536 less IPv4 and TCP headers
TIMESTAMP_OPTION = 12       # bytes of TCP options per segment with timestamps on
_HEX64 = re.compile(r'^[0-9a-f]{64}$')
_NAME_CHARS = re.compile(r'^[\x21-\x7e]+$')       # printable ASCII, no space


class ProtocolError(ValueError):
    """The peer broke the protocol; the message is one sentence."""


class RemoteError(Exception):
    """The peer answered ERR; the message is its sentence."""


@dataclasses.dataclass(frozen=True)
class Request:
    """One parsed request line."""
    op: str                 # 'GET' or 'PUT'
    name: str
    size: int = None        # PUT only
    sha256: str = None      # PUT only
    packet: int = DEFAULT_PACKET
    nodelay: bool = True
    dropcache: bool = False


def check_name(name):
    """Return name if it is a safe relative path; ProtocolError (one sentence) if not.

    The driver also resolves symbolic links against its served folder; this is the part
    that needs no file system."""
    if not name or len(name) > MAX_NAME:
        raise ProtocolError('a name must be 1 to %d bytes, not %d' % (MAX_NAME, len(name)))
    if not _NAME_CHARS.match(name):
        raise ProtocolError('a name must be printable ASCII without spaces: %r' % name)
    parts = name.split('/')
    if name.startswith('/') or '..' in parts or '' in parts or '.' in parts:
        raise ProtocolError('name escapes the served folder: %r' % name)
    return name


def _int(text, what, low, high):
    """Parse a decimal field within [low, high] or raise ProtocolError."""
    if not text.isdigit() or len(text) > 12 or not low <= int(text) <= high:
        raise ProtocolError('%s must be a whole number from %d to %d, not %r' % (
            what, low, high, text[:40]))
    return int(text)


def _flag(text, what):
    """Parse 0 or 1."""
    if text not in ('0', '1'):
        raise ProtocolError('%s must be 0 or 1, not %r' % (what, text[:40]))
    return text == '1'


def parse_request(line, max_put=1 << 30):
    """Parse one request line (bytes, with or without its newline) into a Request."""
    try:
        text = line.rstrip(b'\n').decode('ascii')
    except UnicodeDecodeError:
        raise ProtocolError('the request line is not ASCII') from None
    words = text.split(' ')
    op = words[0]
    if op not in ('GET', 'PUT'):
        raise ProtocolError('unknown request %r (GET or PUT)' % op[:40])
    need = 2 if op == 'GET' else 4
    if len(words) < need:
        raise ProtocolError('%s needs %s' % (
            op, 'a name' if op == 'GET' else 'a name, a size and a SHA-256'))
    fields = {'op': op, 'name': check_name(words[1])}
    if op == 'PUT':
        fields['size'] = _int(words[2], 'the size', 0, max_put)
        if not _HEX64.match(words[3]):
            raise ProtocolError('the SHA-256 must be 64 lower-case hex digits')
        fields['sha256'] = words[3]
    seen = set()
    for word in words[need:]:
        key, eq, value = word.partition('=')
        if not eq or key in seen:
            raise ProtocolError('%s key %r' % ('repeated' if key in seen else 'malformed',
                                               word[:40]))
        seen.add(key)
        if key == 'packet':
            fields['packet'] = _int(value, 'packet', 1, MAX_PACKET)
        elif key == 'nodelay':
            fields['nodelay'] = _flag(value, 'nodelay')
        elif key == 'dropcache' and op == 'GET':
            fields['dropcache'] = _flag(value, 'dropcache')
        else:
            raise ProtocolError('unknown key %r' % key[:40])
    return Request(**fields)


def encode_request(req):
    """Return the request line (bytes, newline included) of a Request."""
    words = [req.op, check_name(req.name)]
    if req.op == 'PUT':
        words += [str(req.size), req.sha256]
    words += ['packet=%d' % req.packet, 'nodelay=%d' % req.nodelay]
    if req.op == 'GET' and req.dropcache:
        words.append('dropcache=1')
    line = (' '.join(words) + '\n').encode('ascii')
    if len(line) > MAX_LINE:
        raise ProtocolError('request line longer than %d bytes' % MAX_LINE)
    return line


def ok_line(size, sha256):
    """Return the OK reply line."""
    return b'OK %d %s\n' % (size, sha256.encode('ascii'))


def err_line(sentence):
    """Return an ERR reply line (one line, at most MAX_LINE bytes)."""
    text = ' '.join(str(sentence).split())
    return ('ERR %s\n' % text[:MAX_LINE - 6]).encode('ascii', 'replace')


def parse_reply(line):
    """Return (size, sha256) of an OK line; RemoteError for ERR; ProtocolError otherwise."""
    try:
        text = line.rstrip(b'\n').decode('ascii')
    except UnicodeDecodeError:
        raise ProtocolError('the reply line is not ASCII') from None
    if text.startswith('ERR '):
        raise RemoteError(text[4:])
    words = text.split(' ')
    if len(words) != 3 or words[0] != 'OK' or not _HEX64.match(words[2]):
        raise ProtocolError('malformed reply %r' % text[:80])
    return _int(words[1], 'the size', 0, 1 << 62), words[2]


class LineReader:
    """Collects bytes until a newline; what follows the line is kept (file data)."""

    def __init__(self, limit=MAX_LINE):
        self.limit = limit
        self.buffer = b''

    def feed(self, data):
        """Return (line, rest) once a whole line arrived, else None."""
        self.buffer += data
        end = self.buffer.find(b'\n', 0, self.limit)
        if end < 0:
            if len(self.buffer) >= self.limit:
                raise ProtocolError('request line longer than %d bytes' % self.limit)
            return None
        line, rest = self.buffer[:end + 1], self.buffer[end + 1:]
        self.buffer = b''
        return line, rest


def rate_mbps(nbytes, t0, t1):
    """Return nbytes over [t0, t1] in Mbit/s (bits per microsecond), or None when the
    interval is empty (a single read or write has no duration)."""
    if t0 is None or t1 is None or t1 <= t0:
        return None
    return round(nbytes * 8 / (t1 - t0) / 1e6, 6)


def jain(rates):
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all are equal, 1/n when one
    takes everything; None for no rates or all zero."""
    rates = [r for r in rates if r is not None]
    square = sum(r * r for r in rates)
    if not rates or square == 0:
        return None
    return sum(rates) ** 2 / (len(rates) * square)


def mss_for_payload(packet, timestamps):
    """Return the TCP_MAXSEG value whose segments carry exactly `packet` payload bytes
    (with timestamps on, every segment also carries 12 bytes of options: TCP_MAXSEG 1012
    gave 1000-byte payloads here), or None when Linux cannot clamp to it."""
    mss = packet + (TIMESTAMP_OPTION if timestamps else 0)
    if mss < TCP_MIN_MSS or mss > TCP_MAX_MSS:
        return None
    return mss


class SendClock:
    """The sending side's accounting: writes, bytes, first and last write."""

    def __init__(self):
        self.writes = 0
        self.bytes = 0
        self.t_first_write = None
        self.t_last_write = None

    def wrote(self, nbytes, now):
        """Count one send() that handed nbytes to the kernel at now."""
        if self.t_first_write is None:
            self.t_first_write = now
        self.t_last_write = now
        self.writes += 1
        self.bytes += nbytes

    def record(self):
        """Return the accounting as log fields, T_x included."""
        return {'writes': self.writes, 'bytes': self.bytes,
                't_first_write': self.t_first_write, 't_last_write': self.t_last_write,
                'tx_mbps': rate_mbps(self.bytes, self.t_first_write, self.t_last_write)}


class Receiver:
    """The receiving side of one file: counts, hashes and times what arrives."""

    def __init__(self, size, sha256):
        self.size = size
        self.sha256 = sha256
        self.digest = hashlib.sha256()
        self.bytes = 0
        self.reads = 0
        self.t_first_read = None
        self.t_last_read = None

    def receive(self, data, now):
        """Take one read's bytes at now; ProtocolError if more than announced arrive."""
        if not data:
            return
        if self.bytes + len(data) > self.size:
            raise ProtocolError('the peer sent more than the %d bytes it announced'
                                % self.size)
        if self.t_first_read is None:
            self.t_first_read = now
        self.t_last_read = now
        self.reads += 1
        self.bytes += len(data)
        self.digest.update(data)

    @property
    def complete(self):
        """True once every announced byte arrived."""
        return self.bytes == self.size

    def finish(self):
        """Return the accounting once the data ended; ProtocolError when it is short or
        its SHA-256 differs from the announced one."""
        if self.bytes != self.size:
            raise ProtocolError('size mismatch: got %d of %d bytes' % (self.bytes, self.size))
        if self.digest.hexdigest() != self.sha256:
            raise ProtocolError('SHA-256 mismatch: the %d bytes received are not the '
                                'announced file' % self.bytes)
        return {'bytes': self.bytes, 'reads': self.reads, 'sha256': self.sha256,
                'sha256_ok': True, 't_first_read': self.t_first_read,
                't_last_read': self.t_last_read,
                'rx_mbps': rate_mbps(self.bytes, self.t_first_read, self.t_last_read)}
