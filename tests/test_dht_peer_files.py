"""A peer sends the file its FILE header describes, from the one descriptor it opened: not a
symlink or FIFO swapped in for the name afterwards, not a file from a swapped share folder;
a file that shrinks mid-transfer ends that transfer as failed. Real peer processes on
loopback, plus the Catalog and the serving core on their own."""

import hashlib
import os
import socket

import pytest

from nodes.dht import codec, transfer
from nodes.dht.peer import Catalog
from tests.memnet import Files
from tests.test_dht_localhost import Proc

BIG = 64 * 1024 * 1024      # more than loopback socket buffers hold: its sendfile must wait
ORIGINAL = b'the shared file, v1\n'
SECRET = b'outside the folder!\n'       # as long as ORIGINAL, so a redirected body fits
OTHER = b'another shared file\n' * 1000


def sha(data):
    return hashlib.sha256(data).digest()


@pytest.fixture
def peer(tmp_path):
    """A peer process sharing big.bin (sparse), b.txt and c.txt: (share, (host, port), Proc)."""
    share = tmp_path / 'share'
    share.mkdir()
    with open(share / 'big.bin', 'wb') as f:
        f.truncate(BIG)
    (share / 'b.txt').write_bytes(ORIGINAL)
    (share / 'c.txt').write_bytes(OTHER)
    (tmp_path / 'secret.txt').write_bytes(SECRET)
    proc = Proc('nodes.dht.peer', '--name', 'p1', '--listen', '127.0.0.1:0', '--share',
                str(share))
    host, port = proc.wait_event('ready')['listen'].rsplit(':', 1)
    yield share, (host, int(port)), proc
    proc.stop_err()


class Conn:
    """A raw downloader connection: GETs out; replies in as [header or error, body, count]
    (bodies of big files are counted, not kept)."""

    def __init__(self, addr):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        self.sock.settimeout(15)
        self.sock.connect(addr)
        self.dec = codec.Decoder()
        self.replies = []
        self.closed = False

    def get(self, *names):
        """Send one GET per name, all in one write (the peer reads them together)."""
        self.sock.sendall(b''.join(codec.encode(codec.Get(i, n, 0))
                                   for i, n in enumerate(names, 1)))

    def read(self, until=lambda conn: False):
        """Read until until(self) holds or the peer closes the connection."""
        while not until(self):
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                pytest.fail('the peer sent nothing for 15 s (is its event loop blocked?)')
            except ConnectionResetError:
                data = b''
            if not data:
                self.closed = True
                return
            for item in self.dec.feed(data):
                if isinstance(item, codec.Chunk):
                    reply = self.replies[-1]
                    reply[2] += len(item.data)
                    if reply[0].size <= 1 << 20:
                        reply[1] += item.data
                else:
                    self.replies.append([item, bytearray(), 0])

    def close(self):
        self.sock.close()


def body_started(conn):
    return bool(conn.replies) and conn.replies[0][2] > 0


def answered(n):
    """Condition: n replies, the last one complete."""
    def done(conn):
        if len(conn.replies) < n:
            return False
        head, _, got = conn.replies[-1]
        return isinstance(head, codec.Error) or got == head.size - head.offset
    return done


def still_serving(addr, gone):
    """A new connection gets c.txt whole; the name `gone` is not shared (any more)."""
    c = Conn(addr)
    c.get('c.txt', gone)
    c.read(answered(2))
    c.close()
    (head, body, _), (err, _, _) = c.replies
    assert bytes(body) == OTHER and head.sha256 == sha(OTHER)
    assert err.code == codec.ERR_NO_SUCH_FILE


def swap_during_transfer(peer, swap):
    """GET big.bin and b.txt together; swap b.txt while big.bin is still being sent."""
    share, addr, proc = peer
    c = Conn(addr)
    c.get('big.bin', 'b.txt')
    c.read(body_started)        # both GETs were answered; big.bin's body is under way
    swap(share / 'b.txt')
    c.read(answered(2))
    c.close()
    (big, _, got), (head, body, _) = c.replies
    assert got == BIG and big.sha256 == sha(bytes(BIG))
    assert head.size == len(ORIGINAL) and head.sha256 == sha(ORIGINAL)
    assert bytes(body) == ORIGINAL            # the file the header describes
    still_serving(addr, 'b.txt')                # swapped: a symlink or FIFO is not shared
    summary, code = proc.terminate()
    assert code == 0 and summary['sent'] == 3 and summary['failed'] == 0
    assert summary['not_found'] == 1


def test_a_symlink_swapped_in_mid_transfer_does_not_redirect_the_body(peer, tmp_path):
    def swap(path):
        os.symlink(tmp_path / 'secret.txt', tmp_path / 'link')
        os.replace(tmp_path / 'link', path)
    swap_during_transfer(peer, swap)


def test_a_fifo_swapped_in_mid_transfer_does_not_block_the_peer(peer, tmp_path):
    def swap(path):
        os.mkfifo(tmp_path / 'fifo')
        os.replace(tmp_path / 'fifo', path)
    swap_during_transfer(peer, swap)


def test_a_file_truncated_mid_transfer_ends_that_transfer_as_failed(peer):
    share, addr, proc = peer
    c = Conn(addr)
    c.get('big.bin')
    c.read(body_started)
    os.truncate(share / 'big.bin', 0)
    c.read()                                    # until the peer closes the connection
    c.close()
    ((head, _, got),) = c.replies
    assert c.closed and head.size == BIG and 0 < got < BIG
    still_serving(addr, 'nothing.txt')
    summary, code = proc.terminate()
    assert code == 0 and summary['failed'] == 1 and summary['sent'] == 1
    assert summary['bytes'] == got + len(OTHER)     # counted as sent, not as announced


def test_shutdown_closes_a_stalled_transfer_and_an_idle_connection(peer):
    _, addr, proc = peer
    stalled, idle = Conn(addr), Conn(addr)
    stalled.get('big.bin')
    stalled.read(body_started)                  # then reads no more: the sendfile waits
    summary, code = proc.terminate()            # within Proc's bound
    assert code == 0 and summary['served'] == 1 and summary['sent'] == 0
    stalled.read()
    idle.read()
    assert stalled.closed and idle.closed and stalled.replies[0][2] < BIG
    stalled.close()
    idle.close()


def test_the_catalog_serves_from_the_folder_it_opened_not_what_the_path_becomes(tmp_path):
    share, other = tmp_path / 'share', tmp_path / 'other'
    share.mkdir()
    other.mkdir()
    (share / 'a').write_bytes(b'one')
    (other / 'a').write_bytes(b'evil')
    cat = Catalog(share)
    os.rename(share, tmp_path / 'moved')
    os.symlink(other, share)
    assert cat.names() == ['a'] and cat.stat('a') == (3, sha(b'one'))


def test_the_catalog_refuses_fifos_and_symlinks_without_opening_through_them(tmp_path):
    (tmp_path / 'a').write_bytes(b'one')
    os.mkfifo(tmp_path / 'fifo')
    os.symlink(tmp_path / 'a', tmp_path / 'link')       # even one that stays inside
    cat = Catalog(tmp_path)
    assert cat.names() == ['a']
    assert cat.open('fifo') is None and cat.open('link') is None
    size, digest, source = cat.open('a')
    assert (size, digest, source.read()) == (3, None, b'one')     # not hashed yet
    assert cat.digest(source) == sha(b'one')
    cat.close(source)


class CountingCatalog:
    """In-memory files handed out as sources; counts the ones not given back."""

    def __init__(self, files):
        self.files = files
        self.open_now = self.most = 0

    def open(self, name, first=True):
        data = self.files.get(name)
        if data is None:
            return None
        self.open_now += 1
        self.most = max(self.most, self.open_now)
        return len(data), sha(data), name

    def close(self, source):
        self.open_now -= 1


def test_the_serving_core_counts_a_body_once_sent_and_a_short_one_as_failed():
    conn = transfer.ServeConnection(Files({'a': OTHER}))
    head, send = conn.receive(codec.encode(codec.Get(1, 'a', 0)), 0.0)
    assert send == transfer.SendFile('a', 0, len(OTHER))
    assert conn.counters['served'] == 0             # queued, not written yet
    conn.written(head, 0.0)
    assert conn.counters['served'] == 1 and conn.counters['bytes'] == 0
    assert conn.file_sent(send, len(OTHER), 0.0) == []
    head, send = conn.receive(codec.encode(codec.Get(2, 'a', 100)), 0.0)
    conn.written(head, 0.0)
    (close,) = conn.file_sent(send, 5, 0.0)
    assert type(close) is transfer.Close and 'shrank' in close.reason
    c = conn.counters
    assert (c['gets'], c['served'], c['sent'], c['failed'], c['failed_shrank'], c['bytes']) == \
        (2, 2, 1, 1, 1, len(OTHER) + 5)


def test_the_serving_core_holds_a_window_of_open_files_however_many_gets_arrive():
    cat = CountingCatalog({'a': OTHER})
    conn = transfer.ServeConnection(cat)
    gets = [codec.Get(i, 'a', 0) for i in range(1, 1001)]
    gets += [codec.Get(1001, 'a', len(OTHER)), codec.Get(1002, 'a', len(OTHER) + 1)]
    acts = conn.receive(b''.join(codec.encode(g) for g in gets), 0.0)
    answered_reqs = []
    while acts:
        conn.pause_output()                     # the driver works through the batch
        assert conn.receive(b'', 0.0) == []
        for a in acts:
            if type(a) is transfer.SendFile:
                cat.close(a.source)
            else:
                answered_reqs += [i.req for i in codec.Decoder().feed(a.data) if hasattr(i, "req")]
        acts = conn.resume_output(0.0)
    assert answered_reqs == list(range(1, 1003)) and not conn.waiting
    assert cat.most == transfer.WINDOW and cat.open_now == 0
