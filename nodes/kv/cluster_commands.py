"""The KV node as one member of a cluster: slot checks, -MOVED redirects and the CLUSTER command.

A server started with a layout (``--cluster``, a `cluster.Ring`) answers GET/SET/DEL/EXISTS
only for keys in the slots it owns; for any other key it answers Redis Cluster's redirect
``-MOVED <slot> <host>:<port>`` naming the owner, and a multi-key DEL/EXISTS whose keys lie in
different slots answers ``-CROSSSLOT ...``, as Redis does. That is all a Redis Cluster client
needs: redis-cli -c follows the redirect; redis-py's RedisCluster learns the owners of all
slots from CLUSTER SLOTS and the key positions of each command from COMMAND, then sends each
command to its owner directly.

The layout is static (given at start-up, the same on every server), so there is no cluster
bus, no failover and no slot migration: every CLUSTER reply is computed once in `ClusterNode`
and the per-request cost is one CRC16 (in C) and one byte lookup (`core._mine`). Subcommands that
would change the layout (MEET, ADDSLOTS, SETSLOT, ...) are refused with one sentence.
Replies follow Redis 7.0 byte for byte where it has them (checked against redis-server
--cluster-enabled yes); node ids are sha1 of the member names.

`TABLE` is `commands.TABLE` with the key commands wrapped and CLUSTER, READONLY, READWRITE and
COMMAND answered for a cluster; the core picks it when its config has a cluster.
"""

from binascii import crc_hqx

from . import commands, resp
from .cluster import SLOTS, key_slot

_SLOT_MASK = SLOTS - 1          # key_slot inlined (a call less) for keys without a '{'
_BRACE = ord('{')               # `int in bytes` is a memchr; `b'{' in bytes` costs 4x more

CROSSSLOT = resp.error("CROSSSLOT Keys in request don't hash to the same slot")
_INVALID_SLOT = resp.error('ERR Invalid slot')
_NOT_INTEGER = resp.error('ERR value is not an integer or out of range')
_BUS_OFFSET = 10000             # Redis's default cluster bus port: the client port + 10000


class ClusterNode:
    """This server's place in a static layout: its slots, redirects and CLUSTER replies."""

    def __init__(self, ring, name, keydir=()):
        self.ring = ring
        self.index = ring.index_of(name)
        self.me = ring.members[self.index]
        owners = ring.owners()
        self.mine = bytes(1 if owner == self.index else 0 for owner in owners)
        self.slots_owned = sum(self.mine)
        self._moved_to = [(' %s\r\n' % m.addr).encode() for m in ring.members]
        self.keys_in_slot = [0] * SLOTS
        for key in keydir:
            self.keys_in_slot[key_slot(key)] += 1
        ranges = ring.ranges()
        self.slots_reply = _slots_reply(ring, ranges)
        self.nodes_reply = resp.bulk(self._nodes_text(ranges))
        self.shards_reply = _shards_reply(ring, ranges)
        self.info_reply = resp.bulk(self._info_text(ranges))
        self.myid_reply = resp.bulk(self.me.node_id)

    def moved(self, slot):
        """Redis Cluster's redirect to the owner of a slot this server does not own."""
        return b'-MOVED %d%b' % (slot, self._moved_to[self.ring.owner_index(slot)])

    def largest_reply(self):
        """Bytes of the largest reply a short request can get here (for input slicing)."""
        return max(len(self.slots_reply), len(self.nodes_reply), len(self.shards_reply),
                   len(_COMMAND_REPLY))

    def _nodes_text(self, ranges):
        """CLUSTER NODES: one line per member, Redis's format."""
        by_member = [[] for _ in self.ring.members]
        for first, last, index in ranges:
            by_member[index].append('%d' % first if first == last else '%d-%d' % (first, last))
        lines = []
        for index, m in enumerate(self.ring.members):
            bus = m.port + _BUS_OFFSET if m.port + _BUS_OFFSET <= 65535 else 0
            flags = 'myself,master' if index == self.index else 'master'
            lines.append(' '.join([m.node_id, '%s:%d@%d' % (m.host, m.port, bus), flags, '-',
                                   '0', '0', str(index + 1), 'connected'] + by_member[index]))
        return ''.join(line + '\n' for line in lines)

    def _info_text(self, ranges):
        """CLUSTER INFO: a healthy static cluster with every slot assigned."""
        serving = len({index for _, _, index in ranges})
        fields = [('cluster_state', 'ok'), ('cluster_slots_assigned', SLOTS),
                  ('cluster_slots_ok', SLOTS), ('cluster_slots_pfail', 0),
                  ('cluster_slots_fail', 0), ('cluster_known_nodes', len(self.ring.members)),
                  ('cluster_size', serving), ('cluster_current_epoch', len(self.ring.members)),
                  ('cluster_my_epoch', self.index + 1), ('cluster_stats_messages_sent', 0),
                  ('cluster_stats_messages_received', 0),
                  ('total_cluster_links_buffer_limit_exceeded', 0)]
        return ''.join('%s:%s\r\n' % kv for kv in fields)


def _slots_reply(ring, ranges):
    """CLUSTER SLOTS in Redis 7's form: [first, last, [host, port, id, []]] per run of slots."""
    nodes = [b'*4\r\n%b:%d\r\n%b*0\r\n' % (resp.bulk(m.host), m.port, resp.bulk(m.node_id))
             for m in ring.members]
    parts = [b'*%d\r\n' % len(ranges)]
    parts += [b'*3\r\n:%d\r\n:%d\r\n%b' % (first, last, nodes[index])
              for first, last, index in ranges]
    return b''.join(parts)


def _shards_reply(ring, ranges):
    """CLUSTER SHARDS: one shard (a master without replicas) per member."""
    by_member = [[] for _ in ring.members]
    for first, last, index in ranges:
        by_member[index] += [first, last]
    shards = []
    for index, m in enumerate(ring.members):
        node = ['id', m.node_id, 'port', m.port, 'ip', m.host, 'endpoint', m.host,
                'role', 'master', 'replication-offset', 0, 'health', 'online']
        shards.append(['slots', by_member[index], 'nodes', [node]])
    return resp.array(shards)


def _slot_arg(arg):
    """(slot, None) for a slot number argument, or (None, the error reply Redis gives)."""
    digits = arg[1:] if arg[:1] == b'-' else arg
    if not digits.isdigit() or len(arg) > 20:
        return None, _NOT_INTEGER
    slot = int(arg)
    return (slot, None) if 0 <= slot < SLOTS else (None, _INVALID_SLOT)


def _countkeysinslot(cl, args):
    slot, err = _slot_arg(args[2])
    return err if err is not None else resp.integer(cl.keys_in_slot[slot])


_SUBCOMMANDS = {
    b'SLOTS': (lambda cl, args: cl.slots_reply, 2),
    b'NODES': (lambda cl, args: cl.nodes_reply, 2),
    b'SHARDS': (lambda cl, args: cl.shards_reply, 2),
    b'INFO': (lambda cl, args: cl.info_reply, 2),
    b'MYID': (lambda cl, args: cl.myid_reply, 2),
    b'KEYSLOT': (lambda cl, args: resp.integer(key_slot(args[2])), 3),
    b'COUNTKEYSINSLOT': (_countkeysinslot, 3),
    b'HELP': (lambda cl, args: _HELP, 2),
}
_HELP = b''.join([b'*%d\r\n' % (len(_SUBCOMMANDS) + 1),
                  resp.simple('CLUSTER <subcommand> [<arg> ...]. Subcommands of this server '
                              '(its layout is fixed by --cluster at start-up):')] +
                 [resp.simple(name) for name in _SUBCOMMANDS])


def _cluster(core, conn, args):
    """CLUSTER SLOTS|NODES|SHARDS|INFO|MYID|KEYSLOT|COUNTKEYSINSLOT|HELP."""
    sub = args[1].upper()
    entry = _SUBCOMMANDS.get(sub)
    if entry is None:
        if sub in commands.CLUSTER_SUBCOMMANDS:
            return resp.error(b'ERR CLUSTER %s is not supported: the layout of this cluster '
                              b'is fixed by --cluster at start-up' % sub)
        return commands.unknown_subcommand(args[1], b'CLUSTER')
    fn, arity = entry
    if len(args) != arity:
        return commands.arity_error(b'cluster|' + sub.lower())
    return fn(core._cluster, args)


def _ok(core, conn, args):
    """READONLY/READWRITE: there are no replicas, so reads go to masters either way."""
    return resp.OK


_PLAIN = commands.TABLE
_GET, _SET, _DEL, _EXISTS, _FLUSHALL, _COMMAND = (
    _PLAIN[name][0] for name in (b'get', b'set', b'del', b'exists', b'flushall', b'command'))


def _get(core, conn, args):
    """GET of an owned key, else -MOVED."""
    key = args[1]
    slot = crc_hqx(key, 0) & _SLOT_MASK if _BRACE not in key else key_slot(key)
    if core._mine[slot]:
        return _GET(core, conn, args)
    return core._cluster.moved(slot)


def _set(core, conn, args):
    """SET of an owned key (counted in its slot if new), else -MOVED."""
    key = args[1]
    slot = crc_hqx(key, 0) & _SLOT_MASK if _BRACE not in key else key_slot(key)
    if not core._mine[slot]:
        return core._cluster.moved(slot)
    keys = len(core._keydir)
    reply = _SET(core, conn, args)
    if len(core._keydir) != keys:
        core._cluster.keys_in_slot[slot] += 1
    return reply


def _one_slot(args):
    """The slot of all the keys in args[1:], or None when they span slots."""
    slot = key_slot(args[1])
    for key in args[2:]:
        if key_slot(key) != slot:
            return None
    return slot


def _del(core, conn, args):
    """DEL of keys in one owned slot; -CROSSSLOT or -MOVED otherwise."""
    cl = core._cluster
    slot = _one_slot(args)
    if slot is None:
        return CROSSSLOT
    if not core._mine[slot]:
        return cl.moved(slot)
    before = len(core._keydir)
    reply = _DEL(core, conn, args)
    cl.keys_in_slot[slot] -= before - len(core._keydir)
    return reply


def _exists(core, conn, args):
    """EXISTS of keys in one owned slot; -CROSSSLOT or -MOVED otherwise."""
    slot = _one_slot(args)
    if slot is None:
        return CROSSSLOT
    if not core._mine[slot]:
        return core._cluster.moved(slot)
    return _EXISTS(core, conn, args)


def _flushall(core, conn, args):
    """FLUSHALL/FLUSHDB: also zero the per-slot key counts."""
    reply = _FLUSHALL(core, conn, args)
    if not core._keydir:
        core._cluster.keys_in_slot = [0] * SLOTS
    return reply


# COMMAND's entries in Redis 7's form (name, arity, flags, first key, last key, step, ACL
# categories, tips, key specs, subcommands): redis-py's RedisCluster finds each command's
# keys from first/last/step. Flags are status replies, as Redis sends them.
_KEYS = {b'get': (1, 1, 1), b'set': (1, 1, 1), b'del': (1, -1, 1), b'exists': (1, -1, 1)}
_FLAGS = {b'get': (b'readonly', b'fast'), b'exists': (b'readonly', b'fast'),
          b'set': (b'write', b'denyoom'), b'del': (b'write',)}


def _command_entry(name, arity):
    first, last, step = _KEYS.get(name, (0, 0, 0))
    flags = _FLAGS.get(name, ())
    return b'*10\r\n%b:%d\r\n*%d\r\n%b:%d\r\n:%d\r\n:%d\r\n*0\r\n*0\r\n*0\r\n*0\r\n' % (
        resp.bulk(name), arity, len(flags), b''.join(resp.simple(f) for f in flags),
        first, last, step)


_ENTRIES = {name: _command_entry(name, entry[1]) for name, entry in _PLAIN.items()
            if name.islower()}
_ENTRIES[b'cluster'] = _command_entry(b'cluster', -2)
_COMMAND_REPLY = b'*%d\r\n%b' % (len(_ENTRIES), b''.join(_ENTRIES.values()))


def _command(core, conn, args):
    """COMMAND (the table above), COMMAND COUNT, COMMAND INFO name ...; others as standalone."""
    if len(args) == 1:
        return _COMMAND_REPLY
    sub = args[1].upper()
    if sub == b'COUNT' and len(args) == 2:
        return resp.integer(len(_ENTRIES))
    if sub == b'INFO':
        return b'*%d\r\n%b' % (len(args) - 2, b''.join(
            _ENTRIES.get(name.lower(), resp.NIL) for name in args[2:]))
    return _COMMAND(core, conn, args)


_WRAPPED = {
    b'get': (_get, 2), b'set': (_set, -3), b'del': (_del, -2), b'exists': (_exists, -2),
    b'flushall': (_flushall, -1), b'flushdb': (_flushall, -1), b'cluster': (_cluster, -2),
    b'readonly': (_ok, 1), b'readwrite': (_ok, 1), b'command': (_command, -1),
}
TABLE = {**_PLAIN, **_WRAPPED, **{name.upper(): entry for name, entry in _WRAPPED.items()}}
