"""Link parameters: parse and check Mininet's TCLink keywords, one direction at a time.

A Mininet link ``addLink(a, b, bw=10, delay='5ms', jitter='1ms', loss=1.0,
max_queue_size=100, params1={...}, params2={...})`` configures two interfaces. Each
interface shapes, delays and drops what it *sends*, so the keywords describe two directions:
``a -> b`` uses ``params1`` updated by the link-level keywords, ``b -> a`` uses ``params2``
updated by them (Mininet's own ``Link.__init__`` merges them in that order, so link-level
keywords win, and so do they here).

The checks reject what Mininet would pass on silently or garble: a delay without a unit
(``tc`` reads a bare number as microseconds on some versions, seconds on others), a loss given as
a string, a bandwidth outside HTB's range (Mininet logs "ignoring" and runs unshaped; below
``BW_MIN_MBIT`` its ``rate %fMbit`` prints as zero), a jitter larger than the delay (would need
negative delays). Every value is also bounded above: a delay or jitter over ``DELAY_MAX_MS``
(the delay daemon's own limit, so a huge delay cannot wrap around to almost none in a
fixed-width field), a queue over ``QUEUE_MAX_PACKETS`` (memory), non-finite numbers. Every
error is one sentence naming the link and direction.
"""

import dataclasses
import math
import re

BW_MAX_MBIT = 1000          # Mininet's TCIntf.bwParamMax: above it TCIntf ignores bw
BW_MIN_MBIT = 0.001         # 1 kbit/s (Mininet's 'rate %fMbit' turns under 1e-6 into 0)
DELAY_MAX_MS = 60000.0      # per link direction; linkdelay.c's LD_MAX_DELAY_US
QUEUE_MAX_PACKETS = 100000  # pfifo/netem limit: ~150 MB of full-size packets
_TIME_RE = re.compile(r'^\s*([0-9]*\.?[0-9]+)\s*(s|sec|secs|ms|msec|msecs|us|usec|usecs)\s*$')
_TIME_SCALE_MS = {'s': 1000.0, 'sec': 1000.0, 'secs': 1000.0,
                  'ms': 1.0, 'msec': 1.0, 'msecs': 1.0,
                  'us': 0.001, 'usec': 0.001, 'usecs': 0.001}
EMULATED_KEYS = ('bw', 'delay', 'jitter', 'loss', 'max_queue_size')


class LinkEmulationError(ValueError):
    """A link asks for something that cannot be emulated on this host (one clear sentence)."""


@dataclasses.dataclass(frozen=True)
class DirectionParams:
    """What one direction of a link must do: shape, delay, jitter, drop, bound its queue."""

    bw: float = None             # Mbit/s, None = unshaped
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0            # percent
    max_queue_size: int = None   # packets, None = interface default

    @property
    def needs_delay_or_loss(self):
        """True when this direction needs delay, jitter or loss (netem's part)."""
        return self.delay_ms > 0 or self.jitter_ms > 0 or self.loss > 0

    def as_record(self):
        """Plain dict for the manifest (units in the key names)."""
        return {'bw': self.bw, 'delay_ms': self.delay_ms, 'jitter_ms': self.jitter_ms,
                'loss': self.loss, 'max_queue_size': self.max_queue_size}


def parse_time_ms(value, what, where, high=DELAY_MAX_MS):
    """'5ms' / '100us' / '0.1s' -> milliseconds in 0..high; anything else raises."""
    if value is None:
        return 0.0
    match = _TIME_RE.match(value) if isinstance(value, str) else None
    if not match:
        raise LinkEmulationError(
            f'{where}: {what}={value!r} is not a time with a unit; write it like '
            f"'5ms', '250us' or '0.1s'.")
    ms = float(match.group(1)) * _TIME_SCALE_MS[match.group(2)]
    if not ms <= high:
        raise LinkEmulationError(
            f'{where}: {what}={value!r} is more than {high / 1000:g} s, the longest one-way '
            f'{what} repronet emulates per link.')
    return ms


def _number(value, what, where, low, high, unit):
    """Check that value is a finite real number in [low, high]; return it as float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LinkEmulationError(
            f'{where}: {what}={value!r} must be a number ({unit}), not {type(value).__name__}.')
    if not math.isfinite(value):
        raise LinkEmulationError(f'{where}: {what}={value!r} must be a finite number ({unit}).')
    if not low <= value <= high:
        raise LinkEmulationError(
            f'{where}: {what}={value!r} is outside {low}..{high} {unit}.')
    return float(value)


def direction_params(params, where):
    """Check one direction's keyword dict and return its DirectionParams."""
    bw = params.get('bw')
    if bw is not None:
        bw = _number(bw, 'bw', where, 0, BW_MAX_MBIT, 'Mbit/s')
        if bw < BW_MIN_MBIT:
            raise LinkEmulationError(
                f'{where}: bw must be at least {BW_MIN_MBIT} Mbit/s (omit it for no limit).')
    delay_ms = parse_time_ms(params.get('delay'), 'delay', where)
    jitter_ms = parse_time_ms(params.get('jitter'), 'jitter', where)
    if jitter_ms > delay_ms:
        raise LinkEmulationError(
            f'{where}: jitter {jitter_ms:g} ms is larger than delay {delay_ms:g} ms, which would '
            f'need negative delays; lower the jitter or raise the delay.')
    loss = params.get('loss')
    loss = 0.0 if loss is None else _number(loss, 'loss', where, 0, 100, 'percent')
    queue = params.get('max_queue_size')
    if queue is not None:
        if isinstance(queue, bool) or not isinstance(queue, int) or \
                not 1 <= queue <= QUEUE_MAX_PACKETS:
            raise LinkEmulationError(
                f'{where}: max_queue_size={queue!r} must be a whole number of packets in '
                f'1..{QUEUE_MAX_PACKETS}.')
    return DirectionParams(bw, delay_ms, jitter_ms, loss, queue)


def link_directions(info, node1, node2):
    """Split a Topo link info dict into (params node1->node2, params node2->node1)."""
    shared = {k: v for k, v in info.items() if k in EMULATED_KEYS}
    forward = dict(info.get('params1') or {})
    backward = dict(info.get('params2') or {})
    forward.update(shared)
    backward.update(shared)
    return (direction_params(forward, f'link {node1}->{node2}'),
            direction_params(backward, f'link {node2}->{node1}'))
