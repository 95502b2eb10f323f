"""Wire protocol of the DHT file-sharing system: framing, messages, incremental decoder.

Every name the protocol's users read, in one place: the frame format, the messages and
their encoding are `messages` (its docstring has the frame and the table of types), the
incremental decoder and the direct readers of a search's frames are `decoding`. Sans-I/O:
`encode(msg)` gives bytes, `Decoder.feed(data)` takes bytes and gives messages, raw file
chunks or `ProtocolError`s. Nothing here touches a socket or a clock.
"""

from .decoding import (Decoder, _direct, _read, _Reader, found_fields, lone_answer,  # noqa: F401
                       lone_frame, str_to_end)
from .messages import (ERR_INTERNAL, ERR_MALFORMED, ERR_NO_SUCH_FILE, ERR_TOO_LARGE,  # noqa: F401
                       ERR_UNEXPECTED, ERR_UNKNOWN_TYPE, ERR_VERSION, MAX_FRAME, MAX_STR,
                       PROTOCOL_VERSION, Ack, Chunk, DecodeError, Error, FileHeader, Found, Get,
                       NotFound, ProtocolError, Register, Search, Unregister, _HEAD,
                       _HEAD_AFTER_LEN, _SEARCH_HEAD, _U16, _U32, _U64, _body, _str, _strlist,
                       encode, encode_search, frame_size, strlist_field)
