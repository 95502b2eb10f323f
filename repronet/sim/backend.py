"""The simulation backend: the experiment's Topo, its node programs and their cores, run in
one process on a virtual clock.

What the runner does with it mirrors the emulation backend (``repronet.emu.network``): build
from the same ``mininet.topo.Topo`` (hosts get the addresses Mininet would give them,
10.0.0.1, 10.0.0.2, ... in the Topo's sorted host order, unless a host sets ``ip``), start
node programs by the same ``argv`` (``[python, -m, MODULE, flags...]``: the module's
``simulate(env, argv)`` runs instead of a process), record its mechanisms in the manifest,
stop. Nothing here needs root, the machine lock or Open vSwitch; the only state is in memory
and in the results folder.

A node program that cannot run here (iperf3, Redis, a scapy capture, any module without
``simulate``) fails its point with one sentence saying so.
"""

import importlib
import os

from repronet.sim import cpu as simcpu
from repronet.sim import links, stack, streams
from repronet.sim.engine import new_engine
from repronet.sim.process import SimNodeError, SimProcess


class SimHost:
    """What run_point sees of a simulated host: its name and address."""

    def __init__(self, name, ip):
        self.name, self.ip = name, ip

    def IP(self):       # noqa: N802 (Mininet's name)
        return self.ip

    def __repr__(self):
        return '<SimHost %s %s>' % (self.name, self.ip)


def addresses(topo):
    """{host: ip} as Mininet assigns them (sorted hosts from 10.0.0.1, or the host's ip)."""
    out = {}
    for i, name in enumerate(topo.hosts(), 1):
        ip = topo.nodeInfo(name).get('ip')
        out[name] = ip.split('/')[0] if ip else host_ip(i)
    return out


def host_ip(i):
    """The i-th host's address in 10.0.0.0/8, carrying into every byte as Mininet's ipAdd
    does (10.1.0.0 follows 10.0.255.255)."""
    return '10.%d.%d.%d' % (i >> 16 & 255, i >> 8 & 255, i & 255)


class SimBackend:
    """One simulated network with its engine, stacks and nodes."""

    def __init__(self, topo, seed=0, log_dir=None, costs=None, cores=None):
        self.engine = new_engine()
        self.seed = int(seed or 0)
        self.net = links.Network(self.engine, topo, self.seed)
        self.log_dir = log_dir
        self.hosts, self.stacks = {}, {}
        self.nodes = []             # every node started, for the run's end
        for name, ip in addresses(topo).items():
            self.hosts[name] = SimHost(name, ip)
            self.stacks[name] = stack.Stack(self.net, name, ip)
        self.cpu = simcpu.CpuModel(self.engine, cores or os.cpu_count() or 1, costs) \
            if costs else None
        if self.cpu is not None and self.cpu.per_packet:
            self.net.on_delivery = self.cpu.delivered

    def start_node(self, host, name, argv, suffix='.jsonl'):
        """Start the node program named by argv's '-m MODULE' through its simulate()."""
        module, simulate = _module(argv), simulation(argv)
        if simulate is None:
            raise SimNodeError('%s cannot run in simulation: %s has no simulate(); run '
                               'this experiment with --backend emu' % (
                                   name, module or ' '.join(map(str, argv[:3]))))
        proc = SimProcess(self, host, name, [str(a) for a in argv[argv.index('-m') + 2:]],
                          self.log_dir, suffix)
        proc.kind = module
        self.nodes.append(proc)
        proc.start(simulate)
        return proc

    def run_until(self, done, timeout=None, on_exit=False):
        """Advance virtual time until done() or timeout seconds of it passed. done() is
        asked after every event; with on_exit, only after an event in which a node ended
        (and before the first): for a done() that reads nothing else, such as "these
        nodes have ended", it stops after the same event (``Engine.run``'s signalled)."""
        until = None if timeout is None else self.engine.now + timeout
        self.engine.run(until=until, stop=done, signalled=on_exit)

    def mechanisms(self):
        """What the manifest records: the backend, the model and every link direction."""
        model = {'engine': 'discrete events ordered by (time, sequence), virtual clock',
                 'links': 'per direction: drop-tail queue (max_queue_size, default %d '
                          'packets), serialisation at bw, delay + uniform jitter, '
                          'Bernoulli loss; trains of up to %d bytes forwarded packet by '
                          'packet' % (links.DEFAULT_QUEUE, streams.TRAIN_BYTES),
                 'streams': 'handshake; ACK-clocked window = bottleneck BDP + 2 x %d bytes '
                            '(at most %d); retransmission after RTO (%.1f s + RTT, '
                            'doubling); no slow start or congestion control'
                            % (streams.TRAIN_BYTES, streams.WINDOW, streams.RTO_MIN),
                 'mss': streams.MSS, 'tcp_overhead': streams.TCP_OVERHEAD,
                 'segments': 'MSS bytes of payload, or what the client clamps it to '
                             '(TCP_MAXSEG), each with tcp_overhead header bytes (Ethernet, '
                             'IPv4, TCP, timestamps; no preamble or gap) on every link',
                 'send_buffer_windows': streams.SNDBUF_WINDOWS,
                 'udp_overhead': stack.UDP_OVERHEAD,
                 'processing': self.cpu.record() if self.cpu else 'none (zero cost)'}
        return {'backend': 'sim', 'network_model': model, 'links': self.net.records(),
                'switch': 'sim', 'link_mechanism': 'sim'}


def simulation(argv):
    """The simulate() of the node program argv runs ('-m MODULE'), or None: then it cannot
    run here (iperf3, ping, Redis, a module without simulate)."""
    module = _module(argv)
    return getattr(importlib.import_module(module), 'simulate', None) if module else None


def _module(argv):
    """The module of '-m MODULE' in argv, or None."""
    argv = [str(a) for a in argv]
    if '-m' in argv and argv.index('-m') + 1 < len(argv):
        return argv[argv.index('-m') + 1]
    return None
