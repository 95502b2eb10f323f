"""What the DHT client core (`client_ops_core.ClientOps`) hands its driver: the actions
(`Connect`, `Send`, `Close`) and events (`OpDone`, `FileData`, `Notice`) `actions()` returns.
Sans-I/O. Kept apart from the core so each stays a small module; their users import them
from `client_ops_core`, where they were before."""

import sys
from dataclasses import dataclass, field


# The actions and events are plain dataclasses, not frozen ones: the core makes a Send per
# request and an OpDone per operation, and under CPython a frozen dataclass's __init__
# (object.__setattr__ for each field) costs twice a plain one's. Nothing hashes them or
# changes them once made (a driver may add to an OpDone's record dict, as before). Slotted
# where dataclasses can be (3.10 on; Debian's pypy3 is a 3.9).
_PLAIN = {'slots': True} if sys.version_info >= (3, 10) else {}


@dataclass(**_PLAIN)
class Connect:
    conn: tuple
    addr: str           # 'IP:PORT' (index servers: their address from --servers)


@dataclass(**_PLAIN)
class Send:
    conn: tuple
    data: bytes


@dataclass(**_PLAIN)
class Close:
    conn: tuple


@dataclass(**_PLAIN)
class OpDone:
    op_id: int
    record: dict = field(compare=False)


@dataclass(**_PLAIN)
class FileData:
    op_id: int
    name: str
    offset: int
    data: bytes


@dataclass(**_PLAIN)
class Notice:
    text: str
