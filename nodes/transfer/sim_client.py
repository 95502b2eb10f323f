"""The file-transfer client inside the simulator (`repronet.sim`): the same GET, checks and
``received``/``error`` records as ``nodes.transfer.client``, in virtual time.

`client.simulate` parses the real command line (a bad flag fails the same way, exit 2) and
hands it here. The client connects (``--segment`` clamps the connection's MSS as
``TCP_MAXSEG`` does: the stream model then carries ``--packet`` bytes per segment, each
with its own headers), waits at the runner's barrier (``env.barrier``: the same ``ready``
line), sends the request line, reads the ``OK`` line and then the file through the real
`core.Receiver` (size, SHA-256, first and last read: R_x) into a temporary file in
``--out``, renamed once it checks out. A delivery larger than ``--read-size`` counts as
several reads, as the real loop's ``recv_into`` would.

What differs from the asyncio program, and why:

* the clamp assumes TCP timestamps on (the stream model's 66 header bytes include them),
  whatever this machine's sysctl says;
* the temporary file is named ``.NAME.part-sim`` (no process id: a seed repeats a run);
* ``--timeout`` is checked every ``--timeout`` seconds of virtual time (a watchdog, not a
  per-read timer), so a stall is reported between one and two timeouts after it began;
* only get runs: put is refused with one sentence (exit 2).

Nothing here reads a clock or a random source or opens a socket (`tests/test_transfer_sim.py`
checks the imports).
"""

import os

from nodes.transfer import core


class SimClient:
    """One client run: connect, (barrier), GET, receive, check, rename, exit."""

    def __init__(self, env, args):
        self.env, self.args = env, args
        self.fields = {'name': args.name, 'packet': args.packet,
                       'nodelay': not args.no_nodelay}
        self.conn = self.receiver = self.file = self.timer = None
        self.state = 'connecting'       # connecting | ready | reply | data | over
        self.reader = core.LineReader()
        self.seen = -1                  # bytes at the watchdog's last look
        self.final = self.temp = None

    def start(self):
        env, a = self.env, self.args
        if a.command != 'get':
            env.error('transfer.client: put does not run in the simulator (get only)')
            env.exit(2)
            return
        self.final = os.path.join(a.out, a.save_as)
        self.temp = os.path.join(a.out, '.%s.part-sim' % a.save_as)
        mss = payload = None
        if a.segment:
            mss = core.mss_for_payload(a.packet, True)
            if mss is None:
                env.log.write('segment', flush=True, applied=False, why='a %d-byte payload '
                              'needs an MSS Linux cannot set (%d to %d)' % (
                                  a.packet, core.TCP_MIN_MSS, core.TCP_MAX_MSS))
            else:
                payload = mss - core.TIMESTAMP_OPTION
        self.fields['mss'] = mss
        self.conn = env.connect(a.server, a.port, self, mss=payload)
        self.timer = env.call_at(env.now() + a.timeout, self._fail,
                                 'no connection to %s:%d within %g s' % (
                                     a.server, a.port, a.timeout))

    # the protocol repronet.sim calls
    def connection_made(self, conn):
        self.timer.cancel()
        self.fields['t_connect'] = self.env.now()
        self.state = 'ready'
        if self.args.barrier:
            self.env.barrier(self._request)
        else:
            self._request()

    def data_received(self, conn, data):
        try:
            if self.state == 'reply':
                got = self.reader.feed(data)
                if got is None:
                    return
                size, digest = core.parse_reply(got[0])
                self.fields['t_reply'] = self.env.now()
                self.receiver = core.Receiver(size, digest)
                self.file = open(self.temp, 'wb')
                self.state, data = 'data', got[1]
            if self.state == 'data':
                self._take(data)
        except core.RemoteError as e:
            self._fail('the server refused: %s' % e)
        except core.ProtocolError as e:
            self._fail(str(e))

    def connection_lost(self, conn, why):
        if self.state == 'connecting':
            self._fail('cannot connect to %s:%d: %s' % (self.args.server, self.args.port, why))
        elif self.state in ('ready', 'reply'):
            self._fail('the server closed the connection before replying' if why is None
                       else 'the server went away mid-transfer (%s)' % why)
        elif self.state == 'data':
            if why is not None:
                self._fail('the server went away mid-transfer (%s)' % why)
                return
            try:
                self.receiver.finish()          # short: says by how much
            except core.ProtocolError as e:
                self._fail(str(e))

    # the transfer
    def _request(self):
        if self.state != 'ready':
            return
        a = self.args
        req = core.Request('GET', a.name, packet=a.packet, nodelay=not a.no_nodelay,
                           dropcache=a.dropcache)
        self.fields['t_request'] = self.env.now()
        self.conn.send(core.encode_request(req))
        self.state = 'reply'
        self._watch()

    def _take(self, data):
        """Reads of at most --read-size bytes, each to the receiver and the file."""
        now, step = self.env.now(), self.args.read_size
        for i in range(0, len(data), step):
            piece = data[i:i + step]
            self.receiver.receive(piece, now)
            self.file.write(piece)
        if self.receiver.complete:
            self._done()

    def _done(self):
        self.file.close()
        try:
            result = self.receiver.finish()
        except core.ProtocolError as e:
            self._fail(str(e))
            return
        os.replace(self.temp, self.final)
        t_last = result['t_last_read']
        result.update(path=self.final,
                      total_s=round(t_last - self.fields['t_request'], 6)
                      if t_last is not None else 0.0,
                      total_mbps=core.rate_mbps(self.receiver.size, self.fields['t_request'],
                                                t_last))
        self.fields['read_size'] = self.args.read_size
        self.env.log.write('received', flush=True, **dict(self.fields, **result))
        self._over(0)

    def _watch(self):
        """Every --timeout: fail if nothing arrived since the last look."""
        if self.state not in ('reply', 'data'):
            return
        got = self.receiver.bytes if self.receiver else 0
        if got == self.seen:
            if self.state == 'reply':
                self._fail('no reply from the server for %g s' % self.args.timeout)
            else:
                self._fail('no data from the peer for %g s after %d of %d bytes' % (
                    self.args.timeout, got, self.receiver.size))
            return
        self.seen = got
        self.timer = self.env.call_at(self.env.now() + self.args.timeout, self._watch)

    def _fail(self, sentence):
        if self.state == 'over':
            return
        got = self.receiver.bytes if self.receiver else 0
        self.env.log.write('error', flush=True, name=self.args.name, error=sentence,
                           bytes=got)
        if self.file is not None:
            self.file.close()
            try:
                os.unlink(self.temp)
            except FileNotFoundError:
                pass
        self._over(1)

    def _over(self, code):
        self.state = 'over'
        if self.timer is not None:
            self.timer.cancel()
        if self.conn is not None:
            self.conn.close()
        self.env.exit(code)
