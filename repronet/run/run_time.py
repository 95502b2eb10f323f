"""How long a whole run takes: what ``--dry-run`` prints and ``repronet reproduce`` counts on.

An experiment's ``estimate(params, point)`` gives one point's seconds on the emulated
network. A run costs more than its points: starting Python and importing the experiment,
the machine lock and the leftover cleanup, building the network and starting the link
daemons, tearing it down, and the analysis (tables, figures, the report). At
``--scale smoke`` that is a large part of a run, and the dry run's total used to leave it
out. A simulated run plays the same points in virtual time: its wall time is a small
fraction of the emulated points' estimates, and most of it is the fixed part.

Each constant says where it was measured (this project's 2-core machine, 2026-11-27). An
experiment measured to differ names its own ``fixed_s`` or ``point_wall``.
"""

# Wall seconds of running the points, per second of the points' estimates.
# emu: the estimates are wall seconds. sim: in the simulated smoke runs of the five seed
# experiments (the manifests of the tests' runs under /tmp/pytest-of-root/pytest-17, from
# the results folder's start to its end) the points took 0.03-0.05 of their emulated
# estimates (dht8 0.7 s for 15, kvscale 1.0 for 32, kvload 0.24 for 6, rudp 0.2 for 7,
# transfer 0.23 for 8).
POINT_WALL = {'emu': 1.0, 'sim': 0.05}

# Wall seconds of a whole run beyond its points, by backend.
# emu: 1 s inside the results folder's times (0.4-1.1 s from its start to the first point:
# network and link daemons; 0.2-0.5 s from the last point to its end: teardown; the
# emulated smoke runs of dht8, kvload, kvscale, rudp and transfer in
# /tmp/pytest-of-root/pytest-17), and 4 s outside them (Python, imports, lock and cleanup
# before; analysis and targets after): 2.1 s for rudp run by repronet reproduce (its
# manifest: 25.1 s against the rudp folder's 23.0), 4.5-7.2 s for transfer, rudp, kvscale
# and kvload (tests' durations in /tmp/ci33c.log against those tests' folders' times).
# sim: a simulated smoke run's wall time less its points: 2.9 s for kvload and 2.0 s for
# rudp (repronet reproduce's manifest in pytest-17: 3.2 s and 2.3 s), about 4.5 s for
# transfer (/tmp/ci33c.log: 9.8 s for the fixture's two runs, with the other worker busy).
FIXED_S = {'emu': 5.0, 'sim': 3.0}


def parts(backend, point_seconds, fixed_s=None, point_wall=None):
    """Return (the points' wall seconds, the rest of the run's) for a run whose points are
    estimated at point_seconds; fixed_s and point_wall: the experiment's own {backend:
    value}, where its measurements differ from FIXED_S and POINT_WALL."""
    ratio = (point_wall or {}).get(backend, POINT_WALL[backend])
    return ratio * point_seconds, (fixed_s or {}).get(backend, FIXED_S[backend])
