"""The file server inside the simulator (`repronet.sim`): the same request line, checks,
replies and ``sent``/``error``/``summary`` records as ``nodes.transfer.server``, in virtual
time.

`server.simulate` parses the real command line (a bad flag fails the same way, exit 2) and
hands it here with the real `server.FileServer` (and its ``Refused``), which keeps the
served folder, the name checks (``path``), the SHA-256 sidecars and digests (``sha256``),
the counters and the ``error`` record: the files are read from ``--root`` as in emulation.

The sending loop is the real one's, on the simulated stream's send buffer: the file goes
out in ``packet``-byte writes (``SendClock`` counts each, and a write the buffer takes only
part of is two writes, as a short ``send()`` is), as many as the buffer has room for
(``Conn.send_space``: twice the window); then the loop waits until the buffer is at most
two thirds full (``Conn.when_writable``, what ``epoll`` reports for a socket) and goes on.
So T_x (first to last write) is the rate the stack took the bytes at: the link's, once the
file is larger than the buffer; none for a file the buffer takes whole (every write at one
instant), where emulation measures Python's write loop.

What differs from the asyncio program, and why:

* no disk is modelled: ``read_s`` is 0 and ``dropcache`` changes nothing (the bytes are
  still read from the file, in no virtual time);
* congestion control is not modelled (``repronet.sim.streams``: a fixed window), so the
  ``congestion_control`` field is null whatever ``--congestion-control`` says;
* only GET runs: a PUT is answered ``ERR`` (the experiment sends none);
* a request line that does not come within ``--timeout`` is refused as in emulation, but a
  stalled transfer is not timed out here: the stream model ends a connection whose packets
  never arrive (its retransmissions give up), and the server logs that.

Nothing here reads a clock or a random source or opens a socket (`tests/test_transfer_sim.py`
checks the imports).
"""

import os

from nodes.transfer import core


class _Connection:
    """One client connection: the request line, then a GET's reply and file."""

    def __init__(self, server):
        self.server, self.env, self.book = server, server.env, server.book
        self.refused = server.refused
        self.reader = core.LineReader()
        self.conn = self.fields = self.req = self.file = self.clock = self.idle = None
        self.state = 'request'          # request | sending | over
        self.left = self.offset = 0
        self.t_open = None

    # the protocol repronet.sim calls
    def connection_made(self, conn):
        env, book = self.env, self.book
        self.conn = conn
        book.counts['connections'] += 1
        book.active += 1
        self.fields = {'conn': next(book.ids), 'peer': '%s:%d' % conn.remote, 'name': None}
        if book.active > book.args.max_connections:
            self._refuse('too many connections (at most %d)' % book.args.max_connections)
            return
        self.fields['t_accept'] = env.now()
        self.idle = env.call_at(env.now() + book.args.timeout, self._refuse,
                                'no data from the client for %g s while waiting for the '
                                'request line' % book.args.timeout)

    def data_received(self, conn, data):
        if self.state != 'request':
            return                      # what follows a request (none for a GET) is dropped
        try:
            got = self.reader.feed(data)
            if got is None:
                return
            self.idle.cancel()
            self.fields['t_request'] = self.env.now()
            req = core.parse_request(got[0], self.book.args.max_put_bytes)
            self.fields['name'] = req.name
            if req.op != 'GET':
                raise self.refused('PUT does not run in the simulator (GET only)')
            self._get(req, self.book.path(req.name))
        except (core.ProtocolError, self.refused) as e:
            self._refuse(str(e))

    def connection_lost(self, conn, why):
        if self.state == 'request':
            self.book._error(self.fields, 'the client closed before its request line ended'
                             if why is None else 'the client went away (%s)' % why, 0)
        elif self.state == 'sending':
            self.book._error(self.fields, 'the client went away mid-transfer (%s)' % (
                why or 'it closed its side'), self.clock.bytes)
        self._end()

    # the GET
    def _get(self, req, path):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise self.refused('no such file: %r' % req.name) from None
        if not os.path.isfile(path):
            raise self.refused('not a regular file: %r' % req.name)
        digest = self.book.sha256(path, st)
        self.fields['congestion_control'] = None        # not modelled
        self.conn.send(core.ok_line(st.st_size, digest))
        self.req, self.left, self.state = req, st.st_size, 'sending'
        self.clock = core.SendClock()
        self.t_open = self.env.now()
        self.file = open(path, 'rb')
        self._write()

    def _write(self):
        """Write packet-sized slices while the send buffer has room; then wait for it."""
        if self.state != 'sending':
            return
        now, packet = self.env.now(), self.req.packet
        space, total = self.conn.send_space(), 0
        while space > 0 and self.left > 0:
            n = min(packet - self.offset % packet, self.left, space)
            self.clock.wrote(n, now)
            self.offset += n
            self.left -= n
            space -= n
            total += n
        if total:
            data = self.file.read(total)
            if len(data) != total:
                self.book._error(self.fields, 'transfer failed: the file ended %d bytes '
                                 'early' % (total - len(data) + self.left), self.clock.bytes)
                self.conn.abort()
                self._end()
                return
            self.conn.send(data)
        if self.left:
            self.conn.when_writable(lambda: self.env.call_soon(self._write))
            return
        self._sent()

    def _sent(self):
        """Every byte was written: log the sender's record and close (FIN after the data)."""
        record = self.clock.record()
        record.update(t_open=self.t_open, read_s=0.0, packet=self.req.packet,
                      tx_open_mbps=core.rate_mbps(self.clock.bytes, self.t_open,
                                                  self.clock.t_last_write))
        self.book.counts['sent'] += 1
        self.env.log.write('sent', flush=True, **dict(
            self.fields, nodelay=self.req.nodelay, dropcache=self.req.dropcache, **record))
        self.conn.close()
        self._end()

    def _refuse(self, sentence):
        """ERR and close; the error record as the real server writes it."""
        if self.state == 'over':
            return
        self.book._error(self.fields, sentence, self.clock.bytes if self.clock else 0)
        self.conn.send(core.err_line(sentence))
        self.conn.close()
        self._end()

    def _end(self):
        if self.state == 'over':
            return
        self.state = 'over'
        self.book.active -= 1
        if self.idle is not None:
            self.idle.cancel()
        if self.file is not None:
            self.file.close()


class SimFileServer:
    """One file server in the simulator; SIGTERM (the runner's stop) logs the summary."""

    def __init__(self, env, args, book, refused):
        """book: the real server's FileServer; refused: its Refused exception."""
        self.env, self.args, self.book, self.refused = env, args, book, refused

    def start(self):
        """Listen on --port and log ready; or end with one line (status 1)."""
        env, args = self.env, self.args
        try:
            if args.port == 0:
                raise OSError('port 0 (any free port) is not simulated; give --port a port')
            env.listen(args.port, lambda conn: _Connection(self))
        except OSError as e:
            env.error('transfer server: cannot listen on %s:%d: %s' % (args.host, args.port,
                                                                      e))
            env.exit(1)
            return
        env.on_stop(self.stop)
        env.log.write('ready', flush=True, port=args.port, root=self.book.root)

    def stop(self):
        """What SIGTERM does: the summary, then exit (open connections are reset)."""
        self.env.log.write('summary', flush=True, **self.book.counts)
        self.env.exit(0)
