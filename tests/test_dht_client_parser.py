"""nodes.dht.client builds its parser once per process (the simulator starts 10,000 clients
in one): each parse must still stand alone."""

import pytest

from nodes.dht import client

SERVERS = 's1=10.0.0.1:7000,s2=10.0.0.2:7000'


def test_parses_in_one_process_do_not_leak_into_each_other(tmp_path):
    names = tmp_path / 'names.txt'
    names.write_text('a.bin\nb.bin\n')
    first = client.parse_args(['--name', 'c1', '--servers', SERVERS, '--op', 'search',
                               '--names', str(names), '--window', '4', '--no-batch',
                               '--connect', 'lazy'])
    with pytest.raises(SystemExit) as bad:
        client.parse_args(['--name', 'c2', '--servers', SERVERS, '--op', 'search'])
    assert bad.value.code == 2
    second = client.parse_args(['--name', 'c3', '--servers', SERVERS, '--op', 'search',
                                '--names', str(names)])
    assert (first.name, first.window, first.batch, first.connect) == ('c1', 4, False, 'lazy')
    assert (second.name, second.window, second.batch, second.connect) == ('c3', 1, True, 'all')
    assert second.names_list == ['a.bin', 'b.bin'] and second.servers == first.servers
    assert client._parser() is client._parser()
