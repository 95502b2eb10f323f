"""Unit tests of the peer file-transfer core: serve, verify, detect corruption, resume."""

import hashlib
import random

import pytest

from nodes.dht import codec, download_core, transfer

CONTENT = random.Random(4).randbytes(100000)


class DictCatalog:
    """A catalog over in-memory files (the peer driver's Catalog reads the disk)."""

    def __init__(self, files):
        self.files = files

    def stat(self, name):
        """Size and digest, or None."""
        data = self.files.get(name)
        return None if data is None else (len(data), hashlib.sha256(data).digest())


def serve(files, request, cut=None, corrupt=False):
    """Run a serving core on one request; return the bytes a holder would send."""
    conn = transfer.ServeConnection(DictCatalog(files))
    out = b''
    for action in conn.receive(request, 0.0):
        if isinstance(action, transfer.SendFrame):
            out += action.data
        elif isinstance(action, transfer.SendFile):
            body = files[action.name][action.offset:action.offset + action.count]
            if corrupt:
                body = body[:10] + bytes([body[10] ^ 1]) + body[11:]
            out += body
    return out if cut is None else out[:cut]


def fetch(d, files, **kw):
    """Feed one holder's answer to the download in 1000-byte pieces; return the file bytes."""
    data = serve(files, d.request(1), **kw)
    got = b''
    for i in range(0, len(data), 1000):
        got += b''.join(d.receive(data[i:i + 1000]))
    return got


def test_download_whole_file_and_verify():
    d = download_core.Download('a', ['h1:1'])
    assert fetch(d, {'a': CONTENT}) == CONTENT and d.done and d.size == len(CONTENT)


def test_empty_file():
    d = download_core.Download('e', ['h1:1'])
    assert fetch(d, {'e': b''}) == b'' and d.done


def test_digest_mismatch_is_detected():
    d = download_core.Download('a', ['h1:1'])
    with pytest.raises(download_core.DownloadError, match='SHA-256 mismatch'):
        fetch(d, {'a': CONTENT}, corrupt=True)
    assert not d.done


def test_missing_file_is_a_clear_error():
    d = download_core.Download('nope', ['h1:1'])
    with pytest.raises(download_core.DownloadError, match='no such file'):
        fetch(d, {'a': CONTENT})


def test_resume_from_second_holder():
    files = {'a': CONTENT}
    d = download_core.Download('a', ['h1:1', 'h2:1'])
    part = fetch(d, files, cut=40000)          # h1 vanishes after 40000 bytes of the stream
    assert not d.done and d.received == len(part) > 0
    assert d.holder_failed('connection closed') == 'h2:1'
    rest = fetch(d, files)
    assert d.done and part + rest == CONTENT and d.resumes == 1
    assert d.holder_failed('x') is None         # no third holder


def test_resume_refuses_a_different_file():
    d = download_core.Download('a', ['h1:1', 'h2:1'])
    fetch(d, {'a': CONTENT}, cut=5000)
    d.holder_failed('gone')
    with pytest.raises(download_core.DownloadError, match='different'):
        fetch(d, {'a': CONTENT[:-1] + b'!'})


def test_corrupt_holder_then_good_holder_restarts_from_zero():
    d = download_core.Download('a', ['bad:1', 'good:1'])
    with pytest.raises(download_core.DownloadError):
        fetch(d, {'a': CONTENT}, corrupt=True)
    d.holder_failed('digest mismatch')
    assert d.received == 0
    assert fetch(d, {'a': CONTENT}) == CONTENT and d.done


def test_serving_core_rejects_bad_requests_and_keeps_going():
    conn = transfer.ServeConnection(DictCatalog({'a': CONTENT}))
    bad = codec.encode(codec.Get(1, 'a', len(CONTENT) + 1)) + codec.encode(codec.Search(2, 'a'))
    acts = conn.receive(bad + codec.encode(codec.Get(3, 'a', 99990)), 0.0)
    errs = codec.Decoder().feed(b''.join(a.data for a in acts[:2]))
    assert [e.req for e in errs] == [1, 2] and all(isinstance(e, codec.Error) for e in errs)
    assert acts[-1] == transfer.SendFile('a', 99990, 10)
    conn.written(acts[-2], 0.0)
    c = conn.counters
    assert (c['gets'], c['refused'], c['errors'], c['served']) == (2, 1, 1, 1)


def test_no_holder():
    with pytest.raises(download_core.DownloadError):
        download_core.Download('a', [])


@pytest.mark.parametrize('batch', [0, 1, 999, 4096, 256 * 1024])
def test_batched_hashing_verifies_as_hashing_each_chunk(monkeypatch, batch):
    """HASH_BATCH (hash in joined batches, as under PyPy) changes when bytes are hashed, not
    what is verified: whole, resumed with bytes waiting to be hashed, corrupt, restarted."""
    monkeypatch.setattr(download_core, 'HASH_BATCH', batch)
    files = {'a': CONTENT}
    d = download_core.Download('a', ['h1:1'])
    assert fetch(d, files) == CONTENT and d.done
    d = download_core.Download('a', ['h1:1', 'h2:1'])
    part = fetch(d, files, cut=40000)
    d.holder_failed('gone')
    assert part + fetch(d, files) == CONTENT and d.done and d.resumes == 1
    d = download_core.Download('a', ['bad:1', 'good:1'])
    with pytest.raises(download_core.DownloadError, match='SHA-256 mismatch'):
        fetch(d, files, corrupt=True)
    d.holder_failed('digest mismatch')
    assert fetch(d, files) == CONTENT and d.done
