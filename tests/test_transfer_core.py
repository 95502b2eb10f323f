"""The file-transfer core without sockets: request lines, names, replies, accounting, rates."""

import hashlib

import pytest
from hypothesis import given, settings, strategies as st

from nodes.transfer import core


def test_get_and_put_lines_round_trip():
    get = core.Request('GET', 'dir/f1.bin', packet=30, nodelay=False, dropcache=True)
    assert core.encode_request(get) == b'GET dir/f1.bin packet=30 nodelay=0 dropcache=1\n'
    assert core.parse_request(core.encode_request(get)) == get
    digest = hashlib.sha256(b'abc').hexdigest()
    put = core.Request('PUT', 'up.bin', size=3, sha256=digest, packet=1400)
    assert core.parse_request(core.encode_request(put)) == put
    assert core.parse_request(b'GET a\n') == core.Request('GET', 'a')     # defaults


@pytest.mark.parametrize('line, sentence', [
    (b'FETCH a\n', "unknown request 'FETCH'"),
    (b'GET\n', 'GET needs a name'),
    (b'PUT a 3\n', 'PUT needs a name, a size and a SHA-256'),
    (b'PUT a x ' + b'0' * 64 + b'\n', "the size must be a whole number from 0 to 1073741824, not 'x'"),
    (b'PUT a 2000000000 ' + b'0' * 64 + b'\n', 'the size must be a whole number from 0 to'),
    (b'PUT a 3 ABC\n', 'the SHA-256 must be 64 lower-case hex digits'),
    (b'GET a packet=0\n', "packet must be a whole number from 1 to 4194304, not '0'"),
    (b'GET a packet=-5\n', "packet must be a whole number"),
    (b'GET a packet=99999999999999999999\n', 'packet must be a whole number'),
    (b'GET a nodelay=2\n', "nodelay must be 0 or 1, not '2'"),
    (b'GET a foo=1\n', "unknown key 'foo'"),
    (b'GET a packet=1 packet=2\n', "repeated key 'packet=2'"),
    (b'GET a packet\n', "malformed key 'packet'"),
    (b'PUT a 3 ' + b'0' * 64 + b' dropcache=1\n', "unknown key 'dropcache'"),
    (b'GET \xff\n', 'the request line is not ASCII'),
    (b'GET ../x\n', "name escapes the served folder: '../x'"),
    (b'GET /etc/passwd\n', "name escapes the served folder: '/etc/passwd'"),
    (b'GET a//b\n', 'name escapes the served folder'),
    (b'GET a/./b\n', 'name escapes the served folder'),
    (b'GET a\tb\n', 'a name must be printable ASCII without spaces'),
    (b'GET ' + b'a' * 256 + b'\n', 'a name must be 1 to 255 bytes, not 256'),
])
def test_bad_request_lines_are_one_sentence(line, sentence):
    with pytest.raises(core.ProtocolError) as err:
        core.parse_request(line)
    assert sentence in str(err.value) and '\n' not in str(err.value)


def test_line_reader_keeps_what_follows_and_bounds_the_line():
    reader = core.LineReader(limit=16)
    assert reader.feed(b'PUT a') is None
    assert reader.feed(b' 3\nfiledata') == (b'PUT a 3\n', b'filedata')
    with pytest.raises(core.ProtocolError, match='longer than 16 bytes'):
        core.LineReader(limit=16).feed(b'x' * 16)
    assert core.LineReader(limit=16).feed(b'x' * 15 + b'\n') == (b'x' * 15 + b'\n', b'')


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8))
def test_arbitrary_bytes_give_a_line_none_or_protocol_error(chunks):
    reader = core.LineReader()
    for chunk in chunks:
        try:
            got = reader.feed(chunk)
        except core.ProtocolError:
            return
        if got is not None:
            try:
                core.parse_request(got[0])
            except core.ProtocolError:
                pass
            return


def test_replies():
    digest = '0' * 64
    assert core.parse_reply(core.ok_line(5, digest)) == (5, digest)
    with pytest.raises(core.RemoteError, match="no such file: 'x'"):
        core.parse_reply(core.err_line("no such file: 'x'"))
    assert core.err_line('two\nlines') == b'ERR two lines\n'
    assert len(core.err_line('x' * 5000)) <= core.MAX_LINE
    for bad in (b'OK 5\n', b'HELLO\n', b'OK x ' + b'0' * 64 + b'\n', b'\xff\n'):
        with pytest.raises(core.ProtocolError):
            core.parse_reply(bad)


def test_receiver_counts_hashes_and_times_reads():
    data = bytes(range(256)) * 40
    rx = core.Receiver(len(data), hashlib.sha256(data).hexdigest())
    rx.receive(data[:1000], now=10.0)
    rx.receive(b'', now=10.5)               # an empty read is no read
    rx.receive(data[1000:], now=10.001)
    result = rx.finish()
    assert result['reads'] == 2 and result['bytes'] == len(data)
    assert (result['t_first_read'], result['t_last_read']) == (10.0, 10.001)
    assert result['rx_mbps'] == pytest.approx(len(data) * 8 / 0.001 / 1e6)


def test_receiver_refuses_short_long_and_wrong_data():
    digest = hashlib.sha256(b'abcd').hexdigest()
    short = core.Receiver(4, digest)
    short.receive(b'abc', 1.0)
    with pytest.raises(core.ProtocolError, match='size mismatch: got 3 of 4 bytes'):
        short.finish()
    with pytest.raises(core.ProtocolError, match='more than the 4 bytes'):
        core.Receiver(4, digest).receive(b'abcde', 1.0)
    wrong = core.Receiver(4, digest)
    wrong.receive(b'abce', 1.0)
    with pytest.raises(core.ProtocolError, match='SHA-256 mismatch'):
        wrong.finish()


def test_send_clock_is_the_seeds_tx():
    clock = core.SendClock()
    for i in range(5):
        clock.wrote(1000, now=2.0 + i * 0.001)
    record = clock.record()
    assert record['writes'] == 5 and record['bytes'] == 5000
    assert record['tx_mbps'] == pytest.approx(5000 * 8 / 0.004 / 1e6)
    one = core.SendClock()
    one.wrote(1000, 3.0)
    assert one.record()['tx_mbps'] is None          # one write has no duration


def test_rates_and_jain():
    assert core.rate_mbps(125000, 1.0, 2.0) == 1.0
    assert core.rate_mbps(10, 1.0, 1.0) is None and core.rate_mbps(10, None, 1.0) is None
    assert core.jain([5, 5, 5]) == pytest.approx(1.0)
    assert core.jain([9, 0, 0]) == pytest.approx(1 / 3)
    assert core.jain([3, 1]) == pytest.approx(16 / 20)
    assert core.jain([]) is None and core.jain([0, 0]) is None


def test_mss_for_payload():
    assert core.mss_for_payload(1000, timestamps=True) == 1012
    assert core.mss_for_payload(1000, timestamps=False) == 1000
    assert core.mss_for_payload(76, True) == 88 and core.mss_for_payload(75, True) is None
    assert core.mss_for_payload(30, False) is None
    assert core.mss_for_payload(65483, True) == 65495
    assert core.mss_for_payload(65484, True) is None
