"""``workloads.kvcluster_admin`` inside the simulator (`repronet.sim`): ``resetstat`` and
``info`` against simulated KV servers, in virtual time.

The real program talks to the servers through the ``redis`` package, which opens real
sockets; here each member is asked in turn over a simulated stream, with the same
commands (``CONFIG RESETSTAT``; ``DBSIZE`` and ``INFO all``), replies parsed by hiredis,
and the same records: one ``server`` line per member with ``dbsize`` and the
``INFO_FIELDS`` it reports (numbers as numbers, as redis-py gives them), then the action's
own line. They carry ``t`` (virtual seconds) like every simulated log record. ``setup``
configures Redis nodes, which cannot run in the simulator: one sentence, status 1.

Nothing here reads a clock or a random source or opens a socket (`tests/test_kvmix_sim.py`).
"""

import hiredis

from workloads.kvcluster_admin import INFO_FIELDS

ASK = {'resetstat': [b'*2\r\n$6\r\nCONFIG\r\n$9\r\nRESETSTAT\r\n'],
       'info': [b'*1\r\n$6\r\nDBSIZE\r\n', b'*2\r\n$4\r\nINFO\r\n$3\r\nall\r\n']}
FAILED = {'resetstat': 'CONFIG RESETSTAT failed', 'info': 'INFO failed'}


def info_fields(text):
    """The INFO_FIELDS of an INFO reply, numbers converted as redis-py converts them."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(':')
        if sep and key in INFO_FIELDS:
            out[key] = _number(value.strip())
    return out


def _number(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


class _Ask:
    """One member's connection: send the action's commands, collect their replies."""

    def __init__(self, admin, want):
        self.admin, self.want = admin, want
        self.reader, self.replies = hiredis.Reader(), []
        self.over = False

    def connection_made(self, conn):
        conn.send(b''.join(ASK[self.admin.args.action]))

    def data_received(self, conn, data):
        self.reader.feed(data)
        try:
            reply = self.reader.gets()
            while reply is not False and len(self.replies) < self.want:
                self.replies.append(reply)
                reply = self.reader.gets()
        except hiredis.ProtocolError as exc:
            self.end(conn, None, 'malformed reply (%s)' % exc)
            return
        if len(self.replies) == self.want:
            self.end(conn, self.replies, None)

    def connection_lost(self, conn, why):
        self.end(None, None, why or 'the server closed the connection')

    def end(self, conn, replies, problem):
        if not self.over:
            self.over = True
            if conn is not None:
                conn.close()
            self.admin.answered(replies, problem)


class SimAdmin:
    """Ask every member in turn; log what they said; exit 0, or 1 with one sentence."""

    def __init__(self, env, args):
        self.env, self.args = env, args
        self.members = args.ring.members
        self.index = 0
        self.timer = self.asking = None

    def start(self):
        if self.args.action == 'setup':
            self._fail('setup configures Redis nodes, which do not run in the simulator')
            return
        self._ask()

    def _ask(self):
        if self.index == len(self.members):
            self.env.log.write(self.args.action, flush=True, nodes=len(self.members))
            self.env.exit(0)
            return
        m = self.members[self.index]
        self.asking = _Ask(self, len(ASK[self.args.action]))
        self.env.connect(m.host, m.port, self.asking)
        self.timer = self.env.call_at(self.env.now() + self.args.timeout, self.asking.end,
                                      None, None, 'no reply within %g s' % self.args.timeout)

    def answered(self, replies, problem):
        self.timer.cancel()
        member = self.members[self.index]
        bad = problem or next((str(r) for r in replies or ()
                               if isinstance(r, hiredis.ReplyError)), None)
        if bad is not None:
            self._fail('%s: %s: %s' % (member.name, FAILED[self.args.action], bad))
            return
        if self.args.action == 'info':
            fields = info_fields(replies[1].decode('utf-8', 'replace'))
            self.env.log.write('server', flush=True, **dict(sorted(dict(
                fields, name=member.name, dbsize=replies[0]).items())))
        self.index += 1
        self._ask()

    def _fail(self, sentence):
        self.env.error('kvcluster_admin %s: %s' % (self.args.action, sentence))
        self.env.exit(1)
