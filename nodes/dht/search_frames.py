"""SEARCH requests answered from their frame's bytes: an index server's fast path.

Why: searches are most of what an index server answers (every search of the simulator's
scale runs), and the general path decodes each frame into a `codec.Search`, looks the name
up, builds a `codec.Found` and encodes it: the name is decoded and encoded again and the
holders are encoded afresh for every answer. Here a well-formed SEARCH frame's name field
(u16 length + UTF-8, read by `codec.str_to_end` as the decoder reads it) is echoed as it
came into the FOUND or NOTFOUND reply, and a holders tuple's strlist is encoded once
(`Answers`).

The same bytes and counters as `ServerCore.handle` and `codec.encode`: UTF-8 decodes and
encodes back to the same bytes, so the echoed field is the one encode would write.
`tests/test_dht_search_frames.py` feeds random streams (good and bad searches, registers,
file headers, unknown types, split anywhere) to a connection with and without this path.
A frame that is not a well-formed SEARCH goes the general way, which says what is wrong.
"""

from . import codec
from .codec import _HEAD             # the frame header (length, version, type, req)
_FOUND, _NOTFOUND = codec.Found.TYPE, codec.NotFound.TYPE
MAX_TAILS = 4096                    # holders tuples remembered (their encoded strlist)


def read(buf, pos, length):
    """(req, name, name field) of the whole frame at buf[pos:] (its length field says
    length) when it is a well-formed SEARCH of this protocol version, else None."""
    if buf[pos + 5] != codec.Search.TYPE or buf[pos + 4] != codec.PROTOCOL_VERSION:
        return None
    start, end = pos + 10, pos + 4 + length
    name = codec.str_to_end(buf, start, end)
    if name is None:
        return None
    return _HEAD.unpack_from(buf, pos)[3], name, bytes(buf[start:end])


class Answers:
    """The replies of one ServerCore to the SEARCH frames `read` took apart."""

    def __init__(self, core, max_holders):
        self.core, self.max_holders = core, max_holders
        self._tails = {}            # holders tuple -> its strlist field

    def reply(self, req, name, field):
        """codec.encode(core.handle(codec.Search(req, name))), with handle's counting;
        field is the request's name field (what codec writes for name)."""
        counters = self.core.counters
        counters['search'] += 1
        holders = self.core.store.holders(name)[:self.max_holders]
        if not holders:
            counters['not_found'] += 1
            return _HEAD.pack(6 + len(field), codec.PROTOCOL_VERSION, _NOTFOUND, req) + field
        counters['found'] += 1
        tail = self._tails.get(holders)
        if tail is None:
            if len(self._tails) >= MAX_TAILS:
                self._tails.clear()
            tail = self._tails[holders] = codec.strlist_field(holders)
        return _HEAD.pack(6 + len(field) + len(tail), codec.PROTOCOL_VERSION, _FOUND,
                          req) + field + tail
