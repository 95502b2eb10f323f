"""The KV node as a child process for localhost tests: ephemeral port, ready line, stop by PID.

Readiness is the server's own ``ready`` JSON line (it carries the port the OS chose), never
a sleep. `KVProc` is a context manager that SIGKILLs its process on the way out if a test
left it running, so no test leaves a server behind.
"""

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

import hiredis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class KVProc:
    """One `nodes.kv.server` process on 127.0.0.1 and an ephemeral port (a subclass names
    another server module that logs the same ready line with its port)."""

    MODULE = 'nodes.kv.server'

    def __init__(self, *args, timeout=30):
        # An ephemeral port unless the caller names one (a flag given twice is refused).
        port = [] if '--port' in args else ['--port', '0']
        argv = [sys.executable, '-m', self.MODULE] + port
        # Unbuffered: a buffered readline could pull the ready line into its buffer along
        # with the recovery line before it, where select() cannot see it.
        self.p = subprocess.Popen(argv + [str(a) for a in args], cwd=ROOT, bufsize=0,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.records = []
        self.stderr = ''
        try:
            self.ready = self.wait_event('ready', timeout)
        except BaseException:
            self.kill()
            raise
        self.port = self.ready['port']

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()

    def wait_event(self, event, timeout=30):
        """Read JSON lines until one with this event; return it (AssertionError if none)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            ready, _, _ = select.select([self.p.stdout], [], [], end - time.monotonic())
            if not ready:
                break
            line = self.p.stdout.readline()
            if not line:
                break
            rec = json.loads(line)
            self.records.append(rec)
            if rec['event'] == event:
                return rec
        self.kill()
        raise AssertionError('no %s line from the server; stderr: %s' % (event, self.stderr))

    def rss_kb(self):
        """The server's resident set (VmRSS, kB)."""
        with open('/proc/%d/status' % self.p.pid) as f:
            for line in f:
                if line.startswith('VmRSS:'):
                    return int(line.split()[1])
        raise AssertionError('no VmRSS for PID %d' % self.p.pid)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Send sig, wait; return (summary record or None, exit status)."""
        self.p.send_signal(sig)
        out, err = self.p.communicate(timeout=timeout)
        self.drained = True
        self.stderr = err.decode(errors='replace')
        self.records += [json.loads(line) for line in out.splitlines()]
        summary = [r for r in self.records if r['event'] == 'summary']
        return (summary[-1] if summary else None), self.p.returncode

    def kill(self):
        """SIGKILL the process if it still runs, and reap it (its output is read once:
        after stop(), communicate() would hand the same lines over again)."""
        if self.p.poll() is None:
            self.p.kill()
        if getattr(self, 'drained', False):
            return
        out, err = self.p.communicate()
        self.drained = True
        self.stderr += err.decode(errors='replace')
        for line in out.splitlines():
            try:
                self.records.append(json.loads(line))
            except ValueError:
                pass


def run_server(*args, timeout=30):
    """Run the server expecting it to exit by itself; return the CompletedProcess."""
    argv = [sys.executable, '-m', 'nodes.kv.server'] + [str(a) for a in args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


class Client:
    """A raw TCP client reading replies with hiredis (errors come back as ReplyError)."""

    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection(('127.0.0.1', port), timeout=timeout)
        self.timeout = timeout
        self._reader = hiredis.Reader()
        self.closed = False

    def send(self, data):
        """Send raw bytes."""
        self.sock.sendall(data)

    def replies(self, n=1):
        """The next n replies; fewer if the server closes first (then .closed is True)."""
        got = []
        self.sock.settimeout(self.timeout)
        while len(got) < n:
            item = self._reader.gets()
            if item is not False:
                got.append(item)
                continue
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b''
            if not data:
                self.closed = True
                break
            self._reader.feed(data)
        return got

    def ask(self, data, n=1):
        """Send data and return the next n replies."""
        self.send(data)
        return self.replies(n)

    def wait_closed(self):
        """True if the server closes the connection within the timeout (replies dropped)."""
        self.sock.settimeout(self.timeout)
        try:
            while self.sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        except socket.timeout:
            return False
        self.closed = True
        return True

    def close(self):
        """Close the socket."""
        self.sock.close()


def exchange_until_pong(port, data, timeout=10):
    """Send raw bytes (ending in a PING) on a new connection to 127.0.0.1:port; return
    (every byte received up to +PONG, whether the server closed the connection first)."""
    sock = socket.create_connection(('127.0.0.1', port), timeout=timeout)
    sock.sendall(data)
    got = bytearray()
    try:
        while not got.endswith(b'+PONG\r\n'):
            chunk = sock.recv(65536)
            if not chunk:
                return bytes(got), True
            got += chunk
    except ConnectionResetError:
        return bytes(got), True
    finally:
        sock.close()
    return bytes(got), False


def command(*args):
    """One request as a RESP array of bulk strings."""
    parts = [b'*%d\r\n' % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b'$%d\r\n%s\r\n' % (len(a), a))
    return b''.join(parts)
