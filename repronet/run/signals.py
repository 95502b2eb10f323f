"""SIGINT and SIGTERM for a run: one exception, and windows where a signal waits.

A run must end in one of three recorded states (ok, failed, interrupted) and leave
nothing behind, whenever Ctrl-C or a SIGTERM arrives.  Python delivers a signal between
any two bytecodes, so the runner cannot simply catch ``KeyboardInterrupt``: a signal that
lands between ``Popen`` and recording the new PID would orphan the process, one that
lands between creating the results folder and entering the ``try`` would leave a
manifest saying ``running`` forever, and one during teardown would cut teardown short.

So the runner turns both signals into ``Interrupted`` (a ``BaseException``, which an
experiment's ``except Exception`` cannot swallow) and marks the few places where a
signal must wait with ``guard.held()``: inside, a signal is noted; when the block ends,
the noted signal is raised as ``Interrupted``.  Teardown runs under ``guard.hold()``
for good: the signal is kept in ``guard.pending`` and the runner records the run as
interrupted afterwards, instead of finishing teardown and then calling the run ok.
"""

import contextlib
import signal
import sys

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; unwinds through teardown."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class SignalGuard:
    """Installs the run's handlers; restores the previous ones on close()."""

    def __init__(self):
        self.pending = None         # the first signal noted while held
        self._holding = 0
        self._previous = None

    def install(self):
        """Route SIGINT/SIGTERM through this guard; return self."""
        self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def close(self):
        """Put the previous handlers back (idempotent)."""
        if self._previous:
            for s, handler in self._previous.items():
                signal.signal(s, handler)
        self._previous = None

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.close()

    def hold(self):
        """From now on, note signals instead of raising them (teardown)."""
        self._holding += 1

    def release(self):
        """End hold(): signals raise Interrupted again; return and forget the
        signal noted meanwhile (the caller has recorded it)."""
        self._holding = 0
        signum, self.pending = self.pending, None
        return signum

    @contextlib.contextmanager
    def held(self):
        """Note a signal while the block runs; raise it as Interrupted after."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
        if self.pending is not None and not self._holding:
            signum, self.pending = self.pending, None
            raise Interrupted(signum)

    def _handle(self, signum, frame):
        """The handler: raise Interrupted, or note the signal while held."""
        if not self._holding:
            raise Interrupted(signum)
        if self.pending is None:
            self.pending = signum
        print('%s while tearing down or starting a process: finishing that first, '
              'then stopping' % signal.Signals(signum).name, file=sys.stderr, flush=True)
