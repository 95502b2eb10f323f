"""DHT file-sharing index: sans-I/O protocol cores and their asyncio drivers.

Reproduces the system of seed 000 (8 index servers each owning a hash partition of file
names; peers register their shared folders, search, and download peer-to-peer).

Modules
    codec        wire protocol v1: length-prefixed frames, message table, incremental decoder
    ring         consistent hashing with virtual nodes; owner + next R distinct servers
    server_core  index store interface + REGISTER/UNREGISTER/SEARCH handling, with bounds
                 (holders per name, entries per server, names per frame) and timers (idle,
                 frame progress)
    client_core  batching by owner, request window (Channel)
    client_ops_core  every decision of a client (failover, fan-out, timeouts, resume)
    transfer     the serving side of a peer: GET name+offset -> FILE header (size, sha256) +
                 raw bytes, a window of open files, timers (idle, frame, stall)
    download_core    the fetching side: one file across holders, resume, digest check
    catalog      the peer's shared folder: open once (O_NOFOLLOW), digests cached
    listener     accepting within a descriptor budget; error lines that cannot flood
    server.py, peer.py, client.py   asyncio drivers (the processes below); each module's
                 simulate(env, argv) runs the same program in repronet.sim instead
    connections  the client's asyncio protocols (index connection, holder connection)
    index_serving, client_driving   what both drivers of a server / client share (bounds,
                 per-connection policy, the action loop, download files, the summary)
    sim_drivers, sim_peer   the simulated drivers: the same cores and records, virtual time
    common       JSON-lines log, TCP_NODELAY, signals, the stdin `go` barrier

Command lines (contract with topologies/dht8.py; changes are announced here)
    python -m nodes.dht.server --name s1 --listen IP:PORT --servers s1=IP:PORT,s2=IP:PORT,...
        [--replicas R] [--vnodes 100] [--max-frame BYTES] [--max-entries N]
        [--max-connections N]
    python -m nodes.dht.peer --name p1 --listen IP:PORT --share DIR [--max-connections N]
        [--idle-timeout S] [--frame-timeout S] [--stall-timeout S]
    python -m nodes.dht.client --name c1 --servers s1=IP:PORT,... [--replicas R]
        --op register|unregister|search|download [--batch | --no-batch]
        [--share DIR --advertise IP:PORT] [--names FILE] [--downloads DIR]
        [--window W] [--barrier] [--timeout S] [--vnodes 100]

    Every process: stdout is JSON lines, each record with `t` (wall clock, s) and `event`;
    stderr has human-readable errors. Servers and peers print {"event": "ready", ...} once
    listening (port 0 allowed: the record's `listen` has the bound address) and, on SIGTERM
    or SIGINT, a {"event": "summary", ...} record of counters, then exit 0 (a peer stopped
    while it still scans its folder, before ready: one line, a summary, exit 1).

    Client: connects to every server first; with --barrier prints {"event": "ready"} and
    waits for a line `go` on stdin, so the timed part excludes process start and connection
    setup. Then one record per operation:
        {"t", "event": "op", "op", "name", "ok", "latency" (s), "server", "bytes", ...}
    batched register/unregister: one record per message, with "files" (names in it) and
    "name" = the first name; unbatched: one record per file (latency until all R+1 servers
    acknowledged); search: "holders" (count); download: latency covers search + transfer,
    "bytes" = file size, "holder", "resumes" when another holder finished the file;
    failed operations carry "error". The op records are written after the timed part.
    Last: {"event": "summary", "name", "op", "batch", "window", "replicas", "count" (files
    or names handled), "ok", "failed", "elapsed" (s, the timed part), "bytes" (downloaded),
    "messages_sent" (requests to servers + GETs to peers), "servers", "down"}.
    SIGTERM/SIGINT mid-run: the records so far, a summary with "interrupted": true whose
    counts cover the operations that finished, exit status 1.
    Seed-style "ms per operation" = 1000 * elapsed / count. Exit status 0 only if every
    operation succeeded (a search for a name nobody holds counts as failed).
    Defaults: --batch, --replicas 0, --window 1 (one request in flight, as the seed),
    --timeout 5.

Replication: write-all, read-one. The client writes each entry to all R + 1 servers of
the key's preference list and counts it done only when every one acknowledged; a search
asks the owner and falls back along the preference list when a server fails or times out.
Servers never talk to each other. Centralized variant: pass a single server in --servers.
"""
