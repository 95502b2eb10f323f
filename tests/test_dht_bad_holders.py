"""Holder addresses nobody can connect to: the index server refuses them at REGISTER, and
a client given them anyway (by a server that did not check) fails each such holder at once
and goes on to the next, instead of waiting out its --timeout. Real client and peer
processes, a real index server whose store was filled directly."""

import asyncio
import contextlib
import hashlib
import threading

import pytest

from nodes.dht import codec
from nodes.dht.ring import MAX_HOST, Ring, parse_addr
from nodes.dht.server import IndexServer
from nodes.dht.server_core import ServerCore
from tests.test_dht_localhost import make_files, names_file, peers, run_client  # noqa: F401

JUNK = ['x\x00y:80', '\u00e4' * 100 + ':80', 'a:b:80', 'h:0', 'h' * 64 + '.example:80',
        '-h.example:80', '1.2.3.999:80', '[h.example]:80', 'fe80::1%eth0:80',
        '.'.join(['h' * 63] * 4) + ':80']


@pytest.mark.parametrize('addr', JUNK, ids=range(len(JUNK)))
def test_an_index_server_refuses_a_holder_that_is_not_an_ip_or_host_name_and_port(addr):
    core = ServerCore('s1')
    reply = core.handle(codec.Register(1, addr, ('a',)), 0)
    assert isinstance(reply, codec.Error) and reply.code == codec.ERR_MALFORMED
    assert len(codec.encode(reply)) < 300 and core.store.entries == 0
    with pytest.raises(ValueError):
        parse_addr(addr, port_zero=False)


def test_ip_literals_and_host_names_are_holders():
    longest = '.'.join(['h' * 63] * 3 + ['h' * 61])
    for addr, parsed in [('10.0.0.1:7000', ('10.0.0.1', 7000)), ('::1:80', ('::1', 80)),
                         ('[::1]:80', ('::1', 80)), ('peer-1.example:1', ('peer-1.example', 1)),
                         (longest + ':65535', (longest, 65535))]:
        assert parse_addr(addr, port_zero=False) == parsed
        assert ServerCore('s1').handle(codec.Register(1, addr, ('a',)), 0) == codec.Ack(1, 1)
    assert len(longest) == MAX_HOST and parse_addr('127.0.0.1:0') == ('127.0.0.1', 0)


@contextlib.contextmanager
def index_listing(name, holders):
    """A real index server, on a loop in a thread, whose store already lists holders for
    name (as a server that did not check them would); yields its address."""
    loop = asyncio.new_event_loop()
    node = IndexServer('s1', Ring(['s1']))
    for addr in holders:
        node.core.store.add(name, addr)
    host, port = loop.run_until_complete(node.start('127.0.0.1', 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield '%s:%d' % (host, port)
    finally:
        asyncio.run_coroutine_threadsafe(node.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def test_a_client_fails_junk_holders_at_once_and_downloads_from_the_next(tmp_path, peers):
    files = make_files(tmp_path / 'share', [1000])
    name = next(iter(files))
    good, _ = peers('p1', tmp_path / 'share')
    with index_listing(name, ['x\x00y:80', '\u00e4' * 100 + ':80', good]) as index:
        # --timeout far beyond the subprocess's own limit: waiting for it fails the test
        rc, ops, _, err = run_client('s1=' + index, '--op', 'download', '--timeout', 600,
                                     '--downloads', tmp_path / 'dl',
                                     '--names', names_file(tmp_path / 'names', [name]),
                                     timeout=60)
    assert rc == 0, err
    assert ops[0]['ok'] and ops[0]['holder'] == good and ops[0]['resumes'] == 2
    assert hashlib.sha256((tmp_path / 'dl' / name).read_bytes()).hexdigest() == files[name]
