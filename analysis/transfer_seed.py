"""The numbers of seed report 002 (a TCP file transfer between lab workstations, 2014).

Rates in the seed's unit, bits per microsecond, which is Mbit/s. T_x is the sender's rate
(bytes over first..last write), R_x the receiver's (first..last read). Sizes in the seed's
words: "1 KB", "10 MB" (read here as 10^3 and 10^6 bytes: the seed does not say, and at
these sizes the difference is 2-5 %).
"""

SOURCE = 'seeds/002_ceee7acb92eb6ae0.txt'
MACHINE = 'two XINU lab workstations on the lab LAN (2014)'
KB, MB = 1000, 1000 * 1000

# Table 1: fixed 1000-byte packets; (file size in bytes, T_x, R_x)
SIZES = [(1 * KB, 17, 431), (100 * KB, 336, 554), (500 * KB, 497, 487),
         (10 * MB, 611, 582), (20 * MB, 556, 537), (30 * MB, 390, 384),
         (40 * MB, 424, 419), (50 * MB, 442, 448), (60 * MB, 465, 459), (70 * MB, 544, 537)]
SIZE_PACKET = 1000

# Table 2: a 50 MB file; (packet size in bytes, T_x, R_x)
PACKETS = [(30, 305, 304), (100, 440, 436), (300, 580, 572), (500, 582, 572),
           (700, 580, 572), (900, 578, 572), (1100, 582, 572), (1300, 580, 573),
           (1400, 580, 573)]
PACKET_FILE = 50 * MB

# Table 3: simultaneous connections; (connections, average T_x, average R_x)
LOAD = [(1, 578, 571), (2, 443, 438), (3, 434, 431), (4, 378, 377), (5, 285, 273)]

# Table 4: iperf with 1..5 parallel connections; (connections, per-connection rates)
IPERF = [(1, (571,)), (2, (275, 343)), (3, (285, 399, 215)), (4, (244, 203, 206, 257)),
         (5, (222, 133, 148, 123, 191))]


def size_rows():
    """Table 1 as rows for a DataFrame."""
    return [{'size': s, 'seed_tx_mbps': tx, 'seed_rx_mbps': rx} for s, tx, rx in SIZES]


def packet_rows():
    """Table 2 as rows."""
    return [{'packet': p, 'seed_tx_mbps': tx, 'seed_rx_mbps': rx} for p, tx, rx in PACKETS]


def load_rows():
    """Table 3 as rows, with Table 4 beside it (iperf's mean and sum over connections)."""
    iperf = dict(IPERF)
    return [{'conns': n, 'seed_tx_mbps': tx, 'seed_rx_mbps': rx,
             'seed_iperf_mean_mbps': round(sum(iperf[n]) / n, 1),
             'seed_iperf_sum_mbps': sum(iperf[n])} for n, tx, rx in LOAD]
