"""Seed 001's published figures (``shared/seeds/001_b2d3dad5f6c62202.txt``), as data.

The seed ran 100,000 puts, then gets, then deletes per client, 1 to 8 clients at once,
server and clients on one Intel Core i5 machine with 6 GB of memory, and gave each
client's total milliseconds per operation and their average. Only the averages are kept
here (its "Performance of the System" table, whose rows are the per-test "Avg" rows);
:data:`SEED_REQUESTS` turns them into milliseconds per request as the seed did
(``2943 / 100000 = 0.02943 ms``).
"""

SEED_SOURCE = '001_b2d3dad5f6c62202.txt'
SEED_MACHINE = 'Intel Core i5, 6 GB, server and clients on the same machine'
SEED_REQUESTS = 100000

# clients -> average total ms per client for (put, get, delete)
SEED_AVG_MS = {
    1: (2943.0, 2410.0, 2098.0),
    2: (2608.0, 2610.0, 2244.5),
    3: (3909.3, 3777.3, 3125.0),
    4: (4367.5, 4581.0, 3727.0),
    5: (5660.4, 5322.0, 4421.2),
    6: (6728.5, 6104.5, 4811.0),
    7: (7753.7, 7239.7, 5711.7),
    8: (8757.4, 8534.8, 5945.0),
}
OPS = ('set', 'get', 'del')             # the seed's put, get, delete
OP_NAMES = {'set': 'put (SET)', 'get': 'get (GET)', 'del': 'delete (DEL)'}


def rows():
    """Return the seed's rows: clients, op, avg_total_ms, ms_per_request."""
    out = []
    for clients, totals in sorted(SEED_AVG_MS.items()):
        for op, total in zip(OPS, totals):
            out.append({'clients': clients, 'op': op, 'avg_total_ms': total,
                        'ms_per_request': total / SEED_REQUESTS})
    return out


def aggregate_ops_per_s(clients):
    """The seed's aggregate rate with n clients: n x 100K puts in the average put time."""
    return clients * SEED_REQUESTS / (SEED_AVG_MS[clients][0] / 1000.0)
