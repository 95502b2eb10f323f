"""The seed's numbers for dht8, copied from the seed report (``SEED_SOURCE``).

Kept in one place so the tables, the report and the figures put the same seed figures
beside ours, and the analysis modules import them without importing each other.
"""

SEED_SOURCE = 'seeds/000_a0ac7540a03218ff.txt'
#: Part I: variant -> {concurrent clients: (avg total time s, ms per operation)}.
SEED_PART1 = {
    'register batched': {1: (1.85, 0.185), 2: (2.02, 0.202), 4: (2.78, 0.278),
                         8: (3.94, 0.394)},
    'register batched replicated': {1: (2.10, 0.210), 2: (2.9, 0.290),
                                    4: (3.87, 0.387), 8: (4.27, 0.427)},
    'register unbatched': {1: (12.78, 1.278), 2: (13.23, 1.323), 4: (14.16, 1.416),
                           8: (15.78, 1.578)},
    'search': {1: (5.94, 0.594), 2: (6.72, 0.672), 4: (8.15, 0.815), 8: (9.74, 0.974)},
    'download': {1: (312.23, 31.23), 2: (318.11, 31.81), 4: (323.28, 32.23),
                 8: (334.41, 33.44)},
}
#: Part II (8 peers): set -> (avg total time s, s per file, bytes/s).
SEED_PART2 = {'A': (121.02, 0.0137, 82500), 'B': (197.86, 0.028, 354600),
              'C': (47.67, 0.04767, 210120), 'D': (248.67, 2.487, 4090000),
              'E': (133.34, 26.68, 3750000), 'F': (372.12, 372.12, 2680000)}
#: The seed's size label of each Part II set.
SIZE_LABELS = {'A': '1KB', 'B': '10KB', 'C': '100KB', 'D': '10MB', 'E': '100MB',
               'F': '1GB'}
#: Ping checks: 100 searches to 4 servers, total s; one 1 MB transfer, s.
SEED_PING = {'search': 0.16, 'download': 4.73}
#: Targets at seed scale, 1 peer: (variant, seed ms per op).
TARGETS = (('register batched', 0.185), ('register unbatched', 1.278),
           ('search', 0.594), ('download', 31.23))
GOODPUT_TARGET = 0.9
