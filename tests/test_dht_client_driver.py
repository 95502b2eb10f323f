"""The asyncio driver writes what the core says where it says: after a corrupt holder the
core restarts the download from byte 0 at the next holder, and the temporary file must be
rewritten from the start, not appended to. Real client, server and peer processes."""

import hashlib
import socket
import threading

from nodes.dht import codec
from tests.test_dht_localhost import (cluster, make_files, names_file, peers,  # noqa: F401
                                      run_client)


class CorruptHolder:
    """Sends a true FILE header and every byte, one of them flipped."""

    def __init__(self, data):
        self.data = data
        self.sock = socket.create_server(('127.0.0.1', 0))
        self.addr = '127.0.0.1:%d' % self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            dec, items = codec.Decoder(), []
            while not items:
                items = dec.feed(conn.recv(4096))
            get = items[0]
            body = bytearray(self.data[get.offset:])
            body[len(body) // 2] ^= 0xFF
            conn.sendall(codec.encode(codec.FileHeader(get.req, len(self.data), get.offset,
                                                       hashlib.sha256(self.data).digest()))
                         + bytes(body))


def test_corrupt_holder_then_good_holder_rewrites_the_file_from_zero(tmp_path, cluster, peers):
    servers, _ = cluster(2)
    files = make_files(tmp_path / 'share', [2 * 1024 * 1024 + 5])
    name = next(iter(files))
    bad = CorruptHolder((tmp_path / 'share' / name).read_bytes())
    good, _ = peers('p2', tmp_path / 'share')
    for addr in (bad.addr, good):                     # the corrupt holder is listed first
        assert run_client(servers, '--op', 'register', '--share', tmp_path / 'share',
                          '--advertise', addr)[0] == 0
    rc, ops, summ, err = run_client(servers, '--op', 'download', '--downloads', tmp_path / 'dl',
                                    '--names', names_file(tmp_path / 'names', [name]))
    assert rc == 0, err
    assert ops[0]['holder'] == good and ops[0]['resumes'] == 1
    assert hashlib.sha256((tmp_path / 'dl' / name).read_bytes()).hexdigest() == files[name]
    assert [p.name for p in (tmp_path / 'dl').iterdir()] == [name]
