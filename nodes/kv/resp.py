"""RESP2 (the Redis protocol) for a server: an incremental request parser and reply encoders.

Requests come in two forms, as Redis accepts them (https://redis.io/docs/reference/protocol-spec/):
the multibulk form ``*N\\r\\n`` followed by N bulk strings ``$L\\r\\n<L bytes>\\r\\n`` (every real
client), and the inline form, one line split into arguments (a person typing into telnet).

Inline arguments follow Redis's own splitter (``sdssplitargs``, the same rules as redis-cli):
spaces separate arguments; ``"..."`` may hold spaces and the escapes ``\\n \\r \\t \\b \\a
\\xHH`` (any other escaped byte stands for itself); ``'...'`` holds everything literally but
``\\'``; a quote may open in the middle of an argument (``a"b c"`` is ``ab c``), but a closing
quote must be followed by a space or the end of the line. An unclosed quote, or a closing one
followed by anything else, is ``-ERR Protocol error: unbalanced quotes in request`` and the
connection closes, as in Redis 7. One deliberate difference: a NUL byte is an ordinary byte
here; Redis looks for the newline with ``strchr``, which stops at the NUL, so it answers
nothing and waits until 64 KiB have piled up.

Why this parser is written here rather than taken from hiredis: ``hiredis.Reader`` parses
*replies*. In the Debian build (1.0.1) it accepts a bulk string without its CRLF
(``$3\\r\\nabcXY``), lengths written as ``$03`` or ``$+3``, nested arrays and ``+``/``:`` elements,
raises SystemError for ``*-5``, and cannot say where one command ends. The server needs the command
boundaries to recognise inline commands and to bound memory, so it would have to scan the headers
anyway; after that scan, taking the elements out is one slice each. The scan costs about 1 us per
command (hiredis 0.3 us).

Bounds (every one is checked before the bytes it describes are buffered): a command, headers
included, may not exceed ``max_request_bytes``; a declared bulk length larger than that, an
argument count above ``max_args``, a count/length header longer than 32 bytes or an inline line
longer than 64 KiB raise ``ProtocolError``. After `get` returns None the parser holds at most
``max_request_bytes`` bytes. A multibulk command cut short keeps its finished elements and
buffers only the unfinished one, so a long command trickled a byte at a time costs the same
per byte as one sent whole (re-joining and re-scanning it per byte was quadratic). A
ProtocolError leaves the stream unusable: Redis replies ``-ERR Protocol error: ...`` and
closes the connection, and so does the core.
"""

_HEADER_MAX = 32            # '*'/'$' plus up to 31 characters before the CRLF
_INLINE_MAX = 64 * 1024     # Redis's PROTO_INLINE_MAX_SIZE


class ProtocolError(Exception):
    """The request stream is malformed or too large; the message is one sentence."""


class RequestParser:
    """Incremental request parser: `feed` bytes, then `get` commands until it returns None."""

    __slots__ = ('_buf', '_pos', '_parts', '_waiting', '_need', '_limit', '_max_args',
                 '_args', '_left', '_at')

    def __init__(self, max_request_bytes, max_args):
        if max_request_bytes < 16 or max_args < 1:
            raise ValueError('max_request_bytes must be >= 16 and max_args >= 1')
        self._buf = b''
        self._pos = 0
        self._parts = []        # data fed while the buffered command is known to be incomplete
        self._waiting = 0       # bytes in _parts
        self._need = 0          # bytes (from _pos) needed before parsing can progress
        self._limit = max_request_bytes
        self._max_args = max_args
        self._args = None       # the elements of a multibulk command cut short, kept
        self._left = 0          #   while the rest arrives; how many are missing
        self._at = 0            #   and how many bytes of the command they used

    @property
    def buffered(self):
        """Bytes held that do not yet form a complete command."""
        held = self._at if self._args is not None else 0
        return len(self._buf) - self._pos + self._waiting + held

    def clear(self):
        """Drop everything buffered (the connection is being closed)."""
        self._buf, self._pos, self._parts, self._waiting, self._need = b'', 0, [], 0, 0
        self._args, self._left, self._at = None, 0, 0

    def feed(self, data):
        """Append received bytes (parsed lazily by `get`)."""
        if data:
            self._parts.append(data)
            self._waiting += len(data)

    def get(self):
        """The next complete command (list of bytes) or None; raises ProtocolError."""
        buf, pos = self._buf, self._pos
        if self._waiting:
            if len(buf) - pos + self._waiting < self._need:
                return None
            if pos < len(buf):
                self._parts.insert(0, buf[pos:] if pos else buf)
            buf = self._parts[0] if len(self._parts) == 1 else b''.join(self._parts)
            self._parts = []
            self._waiting = pos = 0
            self._buf = buf
        end = len(buf)
        while pos < end:
            if self._args is not None:                  # resume a command cut short
                args, count = self._args, self._left
                start, p = pos - self._at, pos
                self._args = None
            elif buf[pos] != 42:                        # not '*': inline form
                nl = buf.find(b'\n', pos, pos + _INLINE_MAX + 1)
                if nl < 0:
                    if end - pos > _INLINE_MAX:
                        raise ProtocolError('Protocol error: too big inline request')
                    return self._incomplete(buf, pos, end - pos + 1)
                args = split_inline(buf[pos:nl - 1] if buf[nl - 1:nl] == b'\r' and nl > pos
                                    else buf[pos:nl])
                pos = nl + 1
                if not args:                            # empty line: ignored, as by Redis
                    continue
                if len(args) > self._max_args:
                    raise ProtocolError('Protocol error: too many arguments (more than %d)'
                                        % self._max_args)
                self._done(buf, pos)
                return args
            else:
                nl = buf.find(b'\r\n', pos, pos + _HEADER_MAX)
                if nl < 0:
                    if end - pos >= _HEADER_MAX:
                        raise ProtocolError('Protocol error: too big mbulk count string')
                    return self._incomplete(buf, pos, end - pos + 1)
                head = buf[pos + 1:nl]
                if not head.isdigit():
                    if head[:1] == b'-' and head[1:].isdigit():     # *-1: skipped (Redis)
                        pos = nl + 2
                        continue
                    raise ProtocolError('Protocol error: invalid multibulk length')
                count = int(head)
                if count > self._max_args:
                    raise ProtocolError('Protocol error: invalid multibulk length (%d '
                                        'arguments, more than %d)' % (count, self._max_args))
                if count == 0:
                    pos = nl + 2
                    continue
                start, p, args = pos, nl + 2, []
            # The elements, inline (this loop is the hot path of every request).
            limit = start + self._limit
            for left in range(count, 0, -1):
                if p >= end:
                    return self._partial(buf, start, p, args, left, 1)
                if buf[p] != 36:                        # '$'
                    raise ProtocolError("Protocol error: expected '$', got '%s'"
                                        % chr(buf[p]).encode('unicode_escape').decode())
                nl = buf.find(b'\r\n', p, p + _HEADER_MAX)
                if nl < 0:
                    if end - p >= _HEADER_MAX:
                        raise ProtocolError('Protocol error: too big bulk count string')
                    return self._partial(buf, start, p, args, left, end - p + 1)
                head = buf[p + 1:nl]
                if not head.isdigit():
                    raise ProtocolError('Protocol error: invalid bulk length')
                q = p
                p = nl + 2 + int(head)
                if p + 2 > limit:
                    raise ProtocolError('Protocol error: invalid bulk length (the request '
                                        'would exceed %d bytes)' % self._limit)
                if p + 2 > end:
                    return self._partial(buf, start, q, args, left, p + 2 - q)
                if buf[p] != 13 or buf[p + 1] != 10:
                    raise ProtocolError('Protocol error: expected CRLF after a bulk string')
                args.append(buf[nl + 2:p])
                p += 2
            if p >= end:
                self._buf, self._pos = b'', 0
            else:
                self._pos = p
            self._need = 0
            return args
        self._done(buf, pos)
        return None

    def _incomplete(self, buf, start, need):
        """Keep the partial command at `start`; raise if it cannot fit the limit."""
        if need > self._limit or len(buf) - start > self._limit:
            raise ProtocolError('Protocol error: request larger than %d bytes' % self._limit)
        if start:
            buf = buf[start:]
        self._buf, self._pos, self._need = buf, 0, need
        return None

    def _partial(self, buf, start, q, args, left, need):
        """Keep the elements parsed so far; buffer only the unfinished one (from q)."""
        self._args, self._left, self._at = args, left, q - start
        self._buf, self._pos, self._need = (buf[q:] if q else buf), 0, need
        return None

    def _done(self, buf, pos):
        """Remember the parse position after a complete command (drop a consumed buffer)."""
        if pos >= len(buf):
            self._buf, self._pos = b'', 0
        else:
            self._pos = pos
        self._need = 0


_SPACE = b' \t\n\r\x0b\x0c'    # C's isspace(): skipped before an inline argument
_END = b' \t\n\r'              # ends an unquoted inline argument (not \v or \f: Redis's rule)
_HEX = b'0123456789abcdefABCDEF'
_ESCAPED = {ord('n'): 10, ord('r'): 13, ord('t'): 9, ord('b'): 8, ord('a'): 7}
_UNBALANCED = 'Protocol error: unbalanced quotes in request'


def split_inline(line):
    """The arguments of one inline command line (its CR LF removed), split as Redis does
    (see the module docstring); raises ProtocolError for unbalanced quotes."""
    if 34 not in line and 39 not in line and 11 not in line and 12 not in line:
        return line.split()         # the common case: bytes.split() splits on _SPACE too
    args, i, n = [], 0, len(line)
    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return args
        arg, quote = bytearray(), 0
        while True:
            if i >= n:
                if quote:
                    raise ProtocolError(_UNBALANCED)
                break
            c = line[i]
            if not quote:
                if c in _END:
                    break
                if c == 34 or c == 39:
                    quote = c
                else:
                    arg.append(c)
                i += 1
            elif c == quote:                            # a closing quote ends the argument
                if i + 1 < n and line[i + 1] not in _SPACE:
                    raise ProtocolError(_UNBALANCED)
                i += 1
                break
            elif c == 92 and quote == 39:               # '...': only \' is an escape
                if i + 1 < n and line[i + 1] == 39:
                    arg.append(39)
                    i += 2
                else:
                    arg.append(c)
                    i += 1
            elif c == 92 and i + 1 < n:                 # "...": \xHH, \n \r \t \b \a, \<any>
                if line[i + 1] == 120 and i + 3 < n and line[i + 2] in _HEX \
                        and line[i + 3] in _HEX:
                    arg.append(int(line[i + 2:i + 4], 16))
                    i += 4
                else:
                    arg.append(_ESCAPED.get(line[i + 1], line[i + 1]))
                    i += 2
            else:
                arg.append(c)
                i += 1
        args.append(bytes(arg))


# Encoders. Constant replies are precomputed; the core uses them directly.
OK = b'+OK\r\n'
PONG = b'+PONG\r\n'
NIL = b'$-1\r\n'
ZERO = b':0\r\n'
ONE = b':1\r\n'
EMPTY_ARRAY = b'*0\r\n'
EMPTY_BULK = b'$0\r\n\r\n'


def simple(s):
    """A simple string reply (+s)."""
    if isinstance(s, str):
        s = s.encode()
    return b'+' + _one_line(s) + b'\r\n'


def error(msg):
    """An error reply; `msg` starts with its code (ERR, WRONGTYPE, OOM, ...) as Redis's do."""
    if isinstance(msg, str):
        msg = msg.encode('utf-8', 'backslashreplace')
    return b'-' + _one_line(msg) + b'\r\n'


def integer(n):
    """An integer reply (:n)."""
    return b':%d\r\n' % n


def bulk(b):
    """A bulk string reply; None is the nil bulk string."""
    if b is None:
        return NIL
    if isinstance(b, str):
        b = b.encode()
    return b'$%d\r\n%b\r\n' % (len(b), b)


def array(items):
    """An array reply of bytes/str (bulk), int, None (nil) or nested lists."""
    out = [b'*%d\r\n' % len(items)]
    for item in items:
        if isinstance(item, int):
            out.append(integer(item))
        elif isinstance(item, (list, tuple)):
            out.append(array(item))
        else:
            out.append(bulk(item))
    return b''.join(out)


def _one_line(b):
    """Simple strings and errors cannot hold CR or LF (Redis turns them into spaces too)."""
    if b'\r' in b or b'\n' in b:
        b = b.replace(b'\r', b' ').replace(b'\n', b' ')
    return b
