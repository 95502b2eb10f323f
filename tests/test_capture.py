"""Wire counting: synthetic pcaps made with scapy, and a live capture on loopback."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

scapy_all = pytest.importorskip('scapy.all')

from nodes.dht import codec  # noqa: E402

PORT = 7000
SERVER = '10.0.0.1'


def _segment(src, sport, dst, dport, seq, payload=b'', flags='PA'):
    """Return one Ethernet/IPv4/TCP frame as a scapy packet."""
    s = scapy_all
    return (s.Ether(src='00:00:00:00:00:02', dst='00:00:00:00:00:01')
            / s.IP(src=src, dst=dst)
            / s.TCP(sport=sport, dport=dport, seq=seq, flags=flags) / s.Raw(payload))


def _flow(client, sport, frames, isn=1000, cut=None, reorder=False, dup=False):
    """Return the client->server segments of one flow carrying frames."""
    data = b''.join(frames)
    cut = cut or len(data)
    pieces = [((isn + 1 + i) & 0xffffffff, data[i:i + cut])
              for i in range(0, len(data), cut)]
    if reorder and len(pieces) > 2:
        pieces[1], pieces[2] = pieces[2], pieces[1]
    if dup:
        pieces.insert(1, pieces[0])
    packets = [_segment(client, sport, SERVER, PORT, isn, flags='S')]
    packets += [_segment(client, sport, SERVER, PORT, seq, payload)
                for seq, payload in pieces]
    return packets


def _count(packets, tmp_path):
    """Write packets to a pcap, count them with the CLI, return the summary."""
    path = tmp_path / 'synthetic.pcap'
    scapy_all.wrpcap(str(path), packets)
    out = subprocess.run([sys.executable, '-m', 'workloads.capture', '--pcap',
                          str(path), '--port', str(PORT)], capture_output=True,
                         text=True, timeout=60, cwd=_repo())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _repo():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _register(req, names):
    return codec.encode(codec.Register(req, '10.0.0.9:8000', tuple(names)))


def test_batched_vs_unbatched_message_counts(tmp_path):
    names = ['f%04d' % i for i in range(40)]
    batched = [_register(k, names[k::4]) for k in range(4)]   # K = 4 messages
    unbatched = [_register(i, [n]) for i, n in enumerate(names)]  # N = 40
    packets = _flow('10.0.0.9', 40001, batched, cut=50)
    packets += _flow('10.0.0.10', 40002, unbatched, cut=7, reorder=True, dup=True)
    summary = _count(packets, tmp_path)
    clients = summary['clients']
    assert clients['10.0.0.9']['messages_to'] == {'REGISTER': 4}
    assert clients['10.0.0.9']['names_to'] == 40
    assert clients['10.0.0.10']['messages_to'] == {'REGISTER': 40}
    assert clients['10.0.0.10']['names_to'] == 40
    assert summary['messages_to_server'] == {'REGISTER': 44}
    assert summary['gaps'] == 0 and summary['decode_errors'] == 0
    assert summary['flows'] == 2
    total = sum(len(p) for p in packets)
    assert summary['directions']['to_server']['bytes'] == total
    assert summary['directions']['to_server']['segments'] == len(packets)


def test_replies_counted_per_client_and_other_ports_ignored(tmp_path):
    reply = codec.encode(codec.Found(1, 'x', ('10.0.0.9:8000',)))
    packets = _flow('10.0.0.9', 40003, [codec.encode(codec.Search(1, 'x'))])
    packets.append(_segment(SERVER, PORT, '10.0.0.9', 40003, 5000, reply))
    packets.append(_segment('10.0.0.9', 1234, SERVER, 80, 1, b'GET /'))
    summary = _count(packets, tmp_path)
    c = summary['clients']['10.0.0.9']
    assert c['messages_to'] == {'SEARCH': 1}
    assert c['messages_from'] == {'FOUND': 1}
    assert summary['ignored'] == 1
    assert summary['midstream_flows'] == 1     # the reply direction had no SYN


def test_hole_is_reported_not_guessed(tmp_path):
    frames = [_register(i, ['n%d' % i]) for i in range(5)]
    packets = _flow('10.0.0.9', 40004, frames, cut=10)
    del packets[3]                                   # lose one segment
    summary = _count(packets, tmp_path)
    assert summary['gaps'] == 1
    assert summary['clients']['10.0.0.9']['messages_to'].get('REGISTER', 0) < 5


def test_bad_arguments_exit_with_message():
    out = subprocess.run([sys.executable, '-m', 'workloads.capture', '--port',
                          '0', '--pcap', 'x'], capture_output=True, text=True,
                         cwd=_repo(), timeout=60)
    assert out.returncode == 2 and '--port' in out.stderr
    out = subprocess.run([sys.executable, '-m', 'workloads.capture', '--port',
                          '7000', '--pcap', '/nonexistent.pcap'],
                         capture_output=True, text=True, cwd=_repo(), timeout=60)
    assert out.returncode == 2 and 'capture:' in out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason='live capture needs root')
def test_live_capture_on_loopback(tmp_path):
    server = socket.socket()
    server.bind(('127.0.0.1', 0))
    server.listen()
    port = server.getsockname()[1]
    log = open(tmp_path / 'cap.jsonl', 'w+')
    proc = subprocess.Popen([sys.executable, '-m', 'workloads.capture', '--iface',
                             'lo', '--port', str(port)], stdout=log,
                            stderr=subprocess.PIPE, cwd=_repo())
    try:
        deadline = time.monotonic() + 30
        while 'ready' not in open(tmp_path / 'cap.jsonl').read():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        client = socket.create_connection(('127.0.0.1', port))
        conn, _ = server.accept()
        for i in range(25):
            client.sendall(codec.encode(codec.Search(i, 'name%d' % i)))
        received = b''
        want = sum(len(codec.encode(codec.Search(i, 'name%d' % i))) for i in range(25))
        while len(received) < want:
            received += conn.recv(65536)
        client.close()
        conn.close()
        time.sleep(0.3)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        server.close()
    last = json.loads(open(tmp_path / 'cap.jsonl').read().strip().splitlines()[-1])
    assert last['event'] == 'summary'
    assert last['messages_to_server'] == {'SEARCH': 25}
    assert last['kernel_drops'] == 0


def test_sequence_numbers_wrap_around():
    from workloads.capture import WireCounter
    frames = [_register(i, ['w%d' % i]) for i in range(6)]
    counter = WireCounter(PORT)
    for packet in _flow('10.0.0.9', 40005, frames, isn=0xffffffff - 30, cut=9,
                        reorder=True):
        counter.frame(bytes(packet))
    summary = counter.summary()
    assert summary['messages_to_server'] == {'REGISTER': 6}
    assert summary['gaps'] == 0


def test_payload_sizes_and_retransmits_without_decoding(tmp_path):
    """--decode none: a file sender's data segments by payload size; a resent segment
    (also one ending exactly where the flow stood) counts as a retransmission."""
    client, sport, isn = '10.0.0.2', 40000, 0xfffff000      # wraps mid-flow
    seqs = [(isn + 1 + i * 1000) & 0xffffffff for i in range(6)]
    packets = [_segment(SERVER, PORT, client, sport, isn, flags='SA')]
    packets += [_segment(SERVER, PORT, client, sport, s, b'x' * 1000) for s in seqs]
    packets.append(_segment(SERVER, PORT, client, sport, seqs[2], b'x' * 1000))   # resent
    packets.append(_segment(SERVER, PORT, client, sport, seqs[5], b'x' * 1000))   # resent
    packets.append(_segment(SERVER, PORT, client, sport,
                            (isn + 6001) & 0xffffffff, b'y' * 24))               # the tail
    packets.append(_segment(client, sport, SERVER, PORT, 1, b'GET f\n'))         # request
    path = tmp_path / 'sizes.pcap'
    scapy_all.wrpcap(str(path), packets)
    out = subprocess.run([sys.executable, '-m', 'workloads.capture', '--port', str(PORT),
                          '--pcap', str(path), '--decode', 'none'],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary['payload_sizes'] == {'24': 1, '1000': 8}
    assert summary['segments'] == 9
    assert summary['retransmits'] == 2
    assert summary['bytes'] == 8024
    assert summary['messages_to_server'] == {}      # nothing decoded
