"""Loopback ports for localhost tests: a free one, and whether something accepts on one."""

import socket


def free_port():
    """A TCP port the kernel just handed out on loopback (free right now)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def accepts(port):
    """True when something accepts TCP connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(('127.0.0.1', port), timeout=1):
            return True
    except OSError:
        return False
