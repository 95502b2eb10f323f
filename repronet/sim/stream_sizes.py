"""How big a simulated TCP connection's writes, trains and window are (``streams``).

The constants are Linux's (or a TSO segment's) where the stream model follows it; ``window``
is the connection's window as ``streams``'s docstring states it: the path's
bandwidth-delay product plus two trains, within what its shortest queue holds and
``WINDOW``. Apart from ``streams`` so the connection's module stays one job, the
connection's life.
"""

MSS = 1448
TCP_OVERHEAD = 66           # Ethernet 14 + IPv4 20 + TCP 20 + timestamps 12
SYN_BYTES = 74
TRAIN_BYTES = 65536
SNDBUF_WINDOWS = 2          # the send buffer holds this many windows (tcp_sndbuf_expand)
WINDOW = 4 * 1024 * 1024    # most bytes in flight per connection (Linux's autotuned buffers)
RTO_MIN = 0.2
RTO_MAX = 60.0
SYN_TIMEOUT = 1.0
SYN_RETRIES = 6
RETRIES = 15                # Linux's tcp_retries2: then the connection times out


def _packets(nbytes, payload):
    """Packets needed for nbytes of payload (at least one)."""
    return -(-nbytes // payload) or 1


def train_bytes(mss):
    """The most bytes one train carries: 64 KiB, or whole segments of a clamped MSS."""
    return TRAIN_BYTES if mss == MSS else max(1, TRAIN_BYTES // mss) * mss


def window(net, src, dst, mss=MSS):
    """The window of a connection src -> dst (see the module's docstring); whole segments
    when the MSS is clamped."""
    path = net.route(src, dst) or []
    rates = [p.rate for p in path if p.rate is not None]
    if not rates:
        return WINDOW if mss == MSS else WINDOW // mss * mss
    rtt = 2 * sum(p.delay for p in path)
    fits = (min(p.limit for p in path) - 2) * mss
    size = max(mss, min(WINDOW, int(min(rates) * rtt) + 2 * train_bytes(mss), fits))
    return size if mss == MSS else size // mss * mss
