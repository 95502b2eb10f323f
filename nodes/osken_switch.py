"""os-ken OpenFlow 1.3 app: a learning switch plus a per-port statistics log.

Run by Debian's ``osken-manager`` (python3-os-ken, the maintained fork of Ryu, same app API)::

    REPRONET_PORT_STATS_LOG=logs/c0.jsonl REPRONET_STATS_INTERVAL=1 \\
        osken-manager --ofp-tcp-listen-port 6653 nodes/osken_switch.py

``repronet.emu.controller.OsKenController`` starts it that way inside a Mininet network.
osken-manager owns the command line (its oslo.config parser rejects unknown flags), so this
app takes its configuration from environment variables:

``REPRONET_PORT_STATS_LOG``  path of the JSON-lines event log (default: standard output;
                             osken-manager's own logging goes to standard error).
``REPRONET_STATS_INTERVAL``  seconds between two port-statistics rounds (default 1.0, > 0).
``REPRONET_IDLE_TIMEOUT``    idle timeout in seconds of the flows the learning switch installs
                             (default 60, 0 means never expire).

A bad value stops the app at start-up with one clear sentence on standard error.

Learning switch (per datapath): a table-miss flow sends every unmatched packet whole to the
controller (``OFPCML_NO_BUFFER``: the userspace datapath's buffers are not needed). On a
packet-in the source MAC is learned on the ingress port; a packet to a known destination gets
a flow ``in_port, eth_src, eth_dst -> output`` with the idle timeout, so the rest of that
conversation stays in the switch and never touches the controller; unknown destinations and
broadcasts are flooded. LLDP is dropped rather than learned. There is no spanning tree, so
topologies must be loop-free (trees, lines, stars), as with Mininet's own reference controller.

Port-statistics monitor: every interval the app sends ``OFPPortStatsRequest(OFPP_ANY)`` to every
connected datapath and writes one record per port and reply::

    {"t": 1700000000.12, "event": "port_stats", "dpid": 1, "port": 2, "name": "s1-eth2",
     "rx_packets": ..., "tx_packets": ..., "rx_bytes": ..., "tx_bytes": ...,
     "rx_dropped": ..., "tx_dropped": ..., "rx_errors": ..., "tx_errors": ...,
     "duration": 12.5}

``t`` is the controller's wall clock when the reply arrived; ``duration`` is the switch's own
age of the port when it took the counters, the better time base for rates (analysis.portstats
uses it when present). Port names come from a port-description request at connect time.
Other records: ``controller_started``, ``switch_connected``, ``switch_disconnected``,
``switch_error`` (an OpenFlow error message from a switch), ``error`` (an event this app
could not handle: it is logged and the app keeps serving), ``final_round`` and ``stopped``.

Shutdown: on SIGTERM the app runs one last statistics round (waiting at most
``_FINAL_WAIT`` seconds for the replies), so the log covers the traffic up to the stop, and then
throws KeyboardInterrupt into osken-manager's main greenlet, its normal way out (it closes every
app, and :meth:`PortStatsSwitch.close` writes ``stopped``).
"""

import json
import os
import signal
import sys
import time
import traceback

import eventlet

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (CONFIG_DISPATCHER, DEAD_DISPATCHER,
                                       MAIN_DISPATCHER, set_ev_cls)
from os_ken.lib import hub
from os_ken.lib.packet import ethernet, ether_types, packet
from os_ken.ofproto import ofproto_v1_3

_FINAL_WAIT = 2.0
_COUNTERS = ('rx_packets', 'tx_packets', 'rx_bytes', 'tx_bytes', 'rx_dropped',
             'tx_dropped', 'rx_errors', 'tx_errors')


def config_from_env(environ):
    """Parse the app's environment variables into a dict; raise ValueError on bad values."""
    interval = _number(environ, 'REPRONET_STATS_INTERVAL', 1.0)
    if interval <= 0:
        raise ValueError('REPRONET_STATS_INTERVAL must be > 0 seconds, got %r'
                         % environ['REPRONET_STATS_INTERVAL'])
    idle = _number(environ, 'REPRONET_IDLE_TIMEOUT', 60)
    if idle < 0 or idle != int(idle) or idle > 65535:
        raise ValueError('REPRONET_IDLE_TIMEOUT must be a whole number of seconds in 0..65535, '
                         'got %r' % environ['REPRONET_IDLE_TIMEOUT'])
    return {'log': environ.get('REPRONET_PORT_STATS_LOG') or None,
            'interval': interval, 'idle_timeout': int(idle)}


def _number(environ, key, default):
    """Read one numeric environment variable, with a clear error."""
    raw = environ.get(key)
    if raw is None or raw == '':
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError('%s must be a number, got %r' % (key, raw)) from None


def port_stats_record(now, dpid, stat, name=None):
    """One JSON-ready port_stats record from an OFPPortStats entry."""
    record = {'t': round(now, 6), 'event': 'port_stats', 'dpid': dpid, 'port': stat.port_no,
              'name': name}
    for counter in _COUNTERS:
        record[counter] = getattr(stat, counter)
    record['duration'] = stat.duration_sec + stat.duration_nsec / 1e9
    return record


class PortStatsSwitch(app_manager.OSKenApp):
    """Learning switch that also logs every port's counters each interval."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        """Read the configuration and open the log; bad configuration ends the process."""
        super().__init__(*args, **kwargs)
        try:
            self.config = config_from_env(os.environ)
        except ValueError as exc:
            sys.stderr.write('repronet controller: %s\n' % exc)
            sys.stderr.flush()
            os._exit(2)
        path = self.config['log']
        self._out = open(path, 'a', encoding='utf-8') if path else sys.stdout
        self.datapaths = {}     # dpid -> Datapath
        self.mac_to_port = {}   # dpid -> {mac: port}
        self.port_names = {}    # dpid -> {port_no: name}
        self._pending = set()   # dpids whose stats reply for the current round is missing
        self._stopping = False
        self._monitor = None
        # osken-manager builds apps in its main greenlet, which then waits for the services;
        # KeyboardInterrupt thrown there is its normal shutdown path.
        self._main = hub.getcurrent()
        self.emit('controller_started', pid=os.getpid(), interval=self.config['interval'],
                  idle_timeout=self.config['idle_timeout'])

    def start(self):
        """Start the event loop, the statistics monitor and the SIGTERM handler."""
        thread = super().start()
        self._monitor = hub.spawn(self._monitor_loop)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        return thread

    def close(self):
        """Called by osken-manager on the way out: record it and close the log."""
        if self._monitor is not None:
            hub.kill(self._monitor)
            self._monitor = None
        self.emit('stopped')
        if self._out is not sys.stdout:
            self._out.close()

    # -- log ---------------------------------------------------------------------------------

    def emit(self, event, **fields):
        """Write one JSON line stamped with the wall clock; never raises."""
        record = {'t': round(time.time(), 6), 'event': event}
        record.update(fields)
        self._write(record)

    def _write(self, record):
        """Write a prepared record and flush, so a crash loses nothing already seen."""
        try:
            self._out.write(json.dumps(record, sort_keys=False) + '\n')
            self._out.flush()
        except (OSError, ValueError, TypeError) as exc:
            self.logger.error('cannot write log record %r: %s', record, exc)

    def _failed(self, where, ev):
        """Log an event that a handler could not process, and keep serving."""
        self.emit('error', where=where, message=traceback.format_exc(limit=3),
                  msg_type=type(getattr(ev, 'msg', ev)).__name__)

    # -- switches ----------------------------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        """Install the table-miss flow and ask for the port names."""
        try:
            datapath = ev.msg.datapath
            ofproto, parser = datapath.ofproto, datapath.ofproto_parser
            actions = [parser.OFPActionOutput(ofproto.OFPP_CONTROLLER, ofproto.OFPCML_NO_BUFFER)]
            self._add_flow(datapath, 0, parser.OFPMatch(), actions, idle_timeout=0)
            datapath.send_msg(parser.OFPPortDescStatsRequest(datapath, 0))
        except Exception:  # noqa: BLE001 - one bad event must not stop the controller
            self._failed('switch_features', ev)

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change(self, ev):
        """Track which datapaths are connected."""
        datapath = ev.datapath
        if ev.state == MAIN_DISPATCHER and datapath.id is not None:
            self.datapaths[datapath.id] = datapath
            self.emit('switch_connected', dpid=datapath.id, address=list(datapath.address))
        elif ev.state == DEAD_DISPATCHER and datapath.id in self.datapaths:
            del self.datapaths[datapath.id]
            self.mac_to_port.pop(datapath.id, None)
            self._pending.discard(datapath.id)
            self.emit('switch_disconnected', dpid=datapath.id)

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def port_desc_reply(self, ev):
        """Remember port names (s1-eth2) so stats records can carry them."""
        try:
            names = self.port_names.setdefault(ev.msg.datapath.id, {})
            for port in ev.msg.body:
                names[port.port_no] = _text(port.name)
        except Exception:  # noqa: BLE001
            self._failed('port_desc_reply', ev)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status(self, ev):
        """Keep port names current when ports come and go."""
        try:
            msg = ev.msg
            names = self.port_names.setdefault(msg.datapath.id, {})
            if msg.reason == msg.datapath.ofproto.OFPPR_DELETE:
                names.pop(msg.desc.port_no, None)
            else:
                names[msg.desc.port_no] = _text(msg.desc.name)
        except Exception:  # noqa: BLE001
            self._failed('port_status', ev)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def switch_error(self, ev):
        """An OpenFlow error from a switch: log it, it says a request of ours was wrong."""
        msg = ev.msg
        self.emit('switch_error', dpid=msg.datapath.id, type=msg.type, code=msg.code)

    # -- learning switch ---------------------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        """Learn the source, then forward (installing a flow) or flood."""
        try:
            self._forward(ev.msg)
        except Exception:  # noqa: BLE001
            self._failed('packet_in', ev)

    def _forward(self, msg):
        """The learning-switch step for one packet-in."""
        datapath = msg.datapath
        ofproto, parser = datapath.ofproto, datapath.ofproto_parser
        in_port = msg.match['in_port']
        eth = packet.Packet(msg.data).get_protocol(ethernet.ethernet)
        if eth is None or eth.ethertype == ether_types.ETH_TYPE_LLDP:
            return
        table = self.mac_to_port.setdefault(datapath.id, {})
        table[eth.src] = in_port
        out_port = table.get(eth.dst, ofproto.OFPP_FLOOD)
        actions = [parser.OFPActionOutput(out_port)]
        if out_port != ofproto.OFPP_FLOOD:
            match = parser.OFPMatch(in_port=in_port, eth_src=eth.src, eth_dst=eth.dst)
            self._add_flow(datapath, 1, match, actions, self.config['idle_timeout'])
        data = msg.data if msg.buffer_id == ofproto.OFP_NO_BUFFER else None
        datapath.send_msg(parser.OFPPacketOut(datapath=datapath, buffer_id=msg.buffer_id,
                                              in_port=in_port, actions=actions, data=data))

    @staticmethod
    def _add_flow(datapath, priority, match, actions, idle_timeout):
        """Send one FlowMod that applies the given actions."""
        ofproto, parser = datapath.ofproto, datapath.ofproto_parser
        instructions = [parser.OFPInstructionActions(ofproto.OFPIT_APPLY_ACTIONS, actions)]
        datapath.send_msg(parser.OFPFlowMod(datapath=datapath, priority=priority, match=match,
                                            instructions=instructions,
                                            idle_timeout=idle_timeout))

    # -- statistics --------------------------------------------------------------------------

    def _monitor_loop(self):
        """Request port statistics from every datapath, every interval, until stopped."""
        while not self._stopping:
            try:
                self.request_stats()
            except Exception:  # noqa: BLE001
                self._failed('monitor', None)
            hub.sleep(self.config['interval'])

    def request_stats(self):
        """Send one OFPPortStatsRequest for all ports to every connected datapath."""
        for dpid, datapath in list(self.datapaths.items()):
            parser = datapath.ofproto_parser
            self._pending.add(dpid)
            datapath.send_msg(parser.OFPPortStatsRequest(datapath, 0, datapath.ofproto.OFPP_ANY))

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def port_stats_reply(self, ev):
        """Log one record per port of the reply."""
        try:
            now = time.time()
            dpid = ev.msg.datapath.id
            names = self.port_names.get(dpid, {})
            for stat in sorted(ev.msg.body, key=lambda s: s.port_no):
                self._write(port_stats_record(now, dpid, stat, names.get(stat.port_no)))
            if not ev.msg.flags & ev.msg.datapath.ofproto.OFPMPF_REPLY_MORE:
                self._pending.discard(dpid)
        except Exception:  # noqa: BLE001
            self._failed('port_stats_reply', ev)

    # -- shutdown ----------------------------------------------------------------------------

    def _on_sigterm(self, signum, frame):
        """SIGTERM: schedule the final round; the signal handler itself must not block."""
        if not self._stopping:
            self._stopping = True
            hub.spawn(self._final_round)

    def _final_round(self):
        """Collect one last statistics round, then leave the way Ctrl-C does."""
        try:
            self.request_stats()
            deadline = time.monotonic() + _FINAL_WAIT
            while self._pending and time.monotonic() < deadline:
                hub.sleep(0.02)
            self.emit('final_round', missing=sorted(self._pending))
        except Exception:  # noqa: BLE001
            self._failed('final_round', None)
        # A signal would land in this greenlet, whose spawner swallows exceptions; throw the
        # interrupt into the main greenlet instead, as eventlet's own kill() does.
        eventlet.greenthread.kill(self._main, KeyboardInterrupt)


def _text(name):
    """Port names arrive as bytes; logs want text."""
    return name.decode('utf-8', 'replace') if isinstance(name, bytes) else str(name)
