"""What the asyncio drivers share (DHT nodes, the KV server, the KV load generator): the
JSON-lines log, socket options, the event loop choice, shutdown.

Every record is one compact JSON object per line on stdout with `t` (wall-clock seconds,
the same value the core was given as `now`) and `event`. Human-readable errors go to
stderr. `ready` and `summary` are flushed at once because the runner waits for them.
"""

import asyncio
import signal
import socket
import sys
import threading
import time

from repronet import logline, usage


class JsonLog:
    """JSON-lines writer for one node process."""

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stdout

    def write(self, event, t=None, flush=False, **fields):
        """Write one record (the simulator writes the same line: ``repronet.logline``)."""
        self.stream.write(logline.line(time.time() if t is None else t, event, fields))
        if flush:
            self.stream.flush()

    def records(self, recs):
        """write(**rec) of each of recs, records that hold their own t and event (a client's
        op records at its end), in one write (``logline.records``)."""
        self.stream.write(logline.records(recs))


def error(text):
    """Print a human-readable error line on stderr."""
    sys.stderr.write(text.rstrip() + '\n')
    sys.stderr.flush()


def nodelay(transport):
    """Disable Nagle on a TCP transport (small request/reply frames must not wait)."""
    sock = transport.get_extra_info('socket')
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def stop_event_on_signals(loop):
    """Return an Event set by SIGTERM or SIGINT."""
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def wait_go(log):
    """Print ready, then block until a 'go' line arrives on stdin (the runner's barrier)."""
    log.write('ready', flush=True)
    loop = asyncio.get_running_loop()
    lines = asyncio.Queue()

    def reader():
        # A daemon thread, so a SIGTERM during the wait does not hang on a blocked readline.
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line)
            if line.strip() == 'go':
                return
        loop.call_soon_threadsafe(lines.put_nowait, '')
    threading.Thread(target=reader, name='stdin-go', daemon=True).start()
    while True:
        line = await lines.get()
        if not line:
            raise RuntimeError('stdin closed before the "go" line of the barrier')
        if line.strip() == 'go':
            return
        error('ignoring %r on stdin while waiting for "go"' % line.strip()[:80])


async def serve_until_stopped(node, listen, log, **ready_fields):
    """Start node on listen, log ready, wait for SIGTERM/SIGINT, close, log the summary."""
    stop = stop_event_on_signals(asyncio.get_running_loop())
    host, port = await node.start(*listen)
    log.write('ready', flush=True, listen='%s:%d' % (host, port), **ready_fields)
    await stop.wait()
    await node.close()
    log.write('summary', flush=True, name=ready_fields.get('name'), **node.summary())


def run_main(kind, name, coroutine):
    """Run a node's asyncio main; an OSError (e.g. address in use) is one line and exit 1."""
    try:
        asyncio.run(coroutine)
    except OSError as exc:
        error('%s %s: %s' % (kind, name, exc))
        return 1
    return 0


def loop_factory(choice):
    """(event loop factory, name) for a --loop auto|uvloop|asyncio flag: uvloop when
    importable unless asyncio is asked for; ValueError (one sentence) when uvloop is asked
    for and missing."""
    if choice != 'asyncio':
        try:
            import uvloop
            return uvloop.new_event_loop, 'uvloop'
        except ImportError:
            if choice == 'uvloop':
                raise ValueError('--loop uvloop: the uvloop module is not installed') from None
    return asyncio.new_event_loop, 'asyncio'


class UsageParser(usage.UsageParser):
    """repronet's one-sentence parser (``repronet.usage``: ``<tool>: ...`` on stderr and exit
    status 2) named for a program of this checkout, with the checks node programs share."""

    def __init__(self, tool, package='workloads', **kwargs):
        super().__init__(prog='python -m %s.%s' % (package, tool), tool=tool, **kwargs)

    def bounded(self, args, name, low, high):
        """Fail with one sentence unless low <= args.<name> <= high."""
        value = getattr(args, name)
        if not low <= value <= high:
            self.error('--%s must be between %s and %s' % (name.replace('_', '-'), low, high))

    def loop(self, choice):
        """(loop factory, name) for --loop (nodes.dht.common.loop_factory); usage error if not."""
        try:
            return loop_factory(choice)
        except ValueError as e:
            self.error(str(e))
