"""Root test: a shaped link paces a message at its rate even after an idle spell.

With segmentation offload on, a host's TCP hands HTB packets of up to 64 KiB that are split
only after the qdisc, so a 42,000-byte message sent after 0.3 s of silence crossed a 100
Mbit/s link in 0.2-2.9 ms on this kernel, faster than the link can carry it (3.36 ms of
payload alone). ``repronet.emu.network`` caps each shaped host interface's ``gso_max_size``
(GSO_WINDOW_S of its rate), after which the same message took 3.4-3.7 ms. Asserted: every
one of eight such messages takes at least the payload's time at the rate. A busy machine
can only make them slower, so the bound holds under load; the uncapped code fails it
(checked: 6 of 8 messages under 0.5 ms).

With link delay too, the link-delay daemons (linkdelay, no netem here) time every packet's
bits on its path's rated links (``linkdelay_wire.c``), GSO packets as the frames they become,
so there the cap is not set and the same bound must hold from the daemon alone; and a ping's
round trip must include each packet's time on the four links it crosses, which HTB alone
never added (a 1,428-byte ping took 0.2 ms plus processing over 100 Mbit/s links of 0.05
ms, where its bits alone need 0.46 ms).
"""

import subprocess

import pytest

pytestmark = pytest.mark.root

PYTHON = '/usr/bin/python3'
SIZE = 42000
MBIT = 100.0
SERVER = r'''
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', 7000)); s.listen(1); print('ready', flush=True)
c, _ = s.accept()
for i in range(8):
    got = 0
    while got < %d:
        got += len(c.recv(65536))
    print(time.monotonic(), flush=True)
    c.sendall(b'k')
''' % SIZE
CLIENT = r'''
import socket, sys, time
c = socket.create_connection((sys.argv[1], 7000))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for i in range(8):
    time.sleep(0.3)
    print(time.monotonic(), flush=True); c.sendall(b'y' * %d); c.recv(1)
''' % SIZE


def pair(tmp_path, **link):
    """A started two-host network over one switch, every link alike."""
    from mininet.topo import Topo
    from repronet.emu import capabilities, network

    class Pair(Topo):
        def build(self):
            s1 = self.addSwitch('s1')
            for name in ('h1', 'h2'):
                self.addLink(self.addHost(name), s1, **link)

    return network.Network(Pair(), 'lxbr', 'auto', capabilities.probe(), log_dir=tmp_path)


@pytest.mark.parametrize('delay_ms', [0, 0.05])
def test_a_message_after_idle_takes_its_time_at_the_rate(tmp_path, delay_ms):
    link = {'bw': MBIT, **({'delay': '%gms' % delay_ms} if delay_ms else {})}
    net = pair(tmp_path, **link)
    try:
        net.start()
        caps = net.mechanisms()['gso_caps']
        if delay_ms:
            assert caps is None and net.links.serialises
        else:
            assert caps['max_size'] == {'h1-eth0': 2500, 'h2-eth0': 2500}
        h1, h2 = net.net.get('h1', 'h2')
        server = h2.popen([PYTHON, '-c', SERVER], stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == 'ready'
        client = h1.popen([PYTHON, '-c', CLIENT, h2.IP()], stdout=subprocess.PIPE, text=True)
        sent = [float(t) for t in client.communicate(timeout=60)[0].split()]
        got = [float(t) for t in server.communicate(timeout=60)[0].split()]
    finally:
        net.stop()
    took_ms = [1000 * (b - a) for a, b in zip(sent, got)]
    print('42,000 bytes over %g Mbit/s after 0.3 s idle: %s ms' % (
        MBIT, ', '.join('%.2f' % t for t in took_ms)))
    assert len(took_ms) == 8
    floor_ms = SIZE * 8 / (MBIT * 1e6) * 1000 + 2 * delay_ms
    assert min(took_ms) >= floor_ms, (took_ms, floor_ms)


def test_a_ping_takes_its_bits_time_on_every_link(tmp_path):
    """ping -U -s 1400 (1,428-byte IP packets, 1,442 on the wire; -U: user-space times, since
    the kernel stamps a reply before the hold) over two 100 Mbit/s links of
    0.05 ms each way: its round trip crosses four links, so at least 4 x 115.36 us + 0.2 ms;
    the fastest of 20 (load only adds) stays within 0.5 ms of that."""
    net = pair(tmp_path, bw=MBIT, delay='0.05ms')
    try:
        net.start()
        h1, h2 = net.net.get('h1', 'h2')
        out = h1.cmd('ping -U -c 20 -i 0.05 -s 1400 %s' % h2.IP())   # -U: kernel stamps precede the hold
    finally:
        net.stop()
    rtts = [float(w.split('=')[1]) for w in out.split() if w.startswith('time=')]
    floor_ms = 4 * (1428 + 14) * 8 / (MBIT * 1e6) * 1000 + 0.2
    print('ping -s 1400 RTT min %.3f ms, floor %.3f ms' % (min(rtts), floor_ms))
    assert len(rtts) >= 19, out
    assert floor_ms <= min(rtts) < floor_ms + 0.5, (rtts, floor_ms)
