/*
 * The parts of the linkdelay daemon that need no netfilter queue: its config parser, the
 * source table, the per-source generators and the drop/hold decision, the release heap, and
 * the signal-safe wait. linkdelay.c links them into the daemon; linkdelay_check.c links the
 * same object into a driver that tests/test_linkdelay_unit.py runs without root.
 */
#ifndef LINKDELAY_CORE_H
#define LINKDELAY_CORE_H

#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define LD_MAX_HOPS 64
#define LD_MAX_DELAY_US 60000000ull   /* 60 s per link, as repronet/emu/linkemu_params.py */
#define LD_MAX_SOURCES 65536
#define LD_LINE_MAX 4096
#define LD_ERR_MAX 256
#define LD_MAX_LINKS 65536
#define LD_MAX_RATE_BPS 1000000000000ull   /* 1 Tbit/s */

struct ld_source {
	uint32_t addr;                  /* host byte order: the table's sort key */
	int line;                       /* config line it came from (messages, tests) */
	double loss;                    /* drop probability 0..1 */
	int nhops;
	uint32_t delay_us[LD_MAX_HOPS];
	uint32_t jitter_us[LD_MAX_HOPS];
	int nvia;                       /* the rated links the path crosses, in order ("via") */
	uint32_t via[LD_MAX_HOPS];
	uint64_t rng;                   /* this source's own generator (xorshift64*) */
	uint64_t packets, dropped;
};

/* One link direction with a rate: the serialisation clock of linkdelay_wire.c. */
struct ld_link {
	uint64_t rate_bps;
	uint64_t free_ns;               /* when its last segment's last bit has left */
	uint64_t packets, busy_ns;      /* what it carried: for the stats line */
};

struct ld_table {
	struct ld_source *v;            /* sorted by addr, no duplicates */
	size_t n;
	struct ld_link *links;          /* "link ID RATE_BPS" lines, ID = index */
	size_t nlinks;
	uint64_t *clocks;               /* the links' free_ns shared with other workers of the
					   same host (ld_share_clocks), or NULL: links[i].free_ns */
	size_t clocks_bytes;
};

struct ld_held {
	uint64_t deadline_ns;
	uint64_t arrival;               /* tie-breaker: equal deadlines leave in arrival order */
	uint32_t id;
	uint32_t read_late_ns;          /* how far past its deadline the daemon read it (capped) */
};

struct ld_heap {
	struct ld_held *v;
	size_t len, cap, max;
};

/* Whole decimal token in 0..max (no sign, no trailing bytes); 0 on success, -1 otherwise. */
int ld_parse_u64(const char *text, uint64_t max, uint64_t *out);

/* Read the config; on error, write one sentence to err and return -1 (the table stays empty). */
int ld_load_config(FILE *f, const char *name, struct ld_table *t, char *err, size_t errlen);
void ld_free_table(struct ld_table *t);
struct ld_source *ld_find(const struct ld_table *t, uint32_t addr);

/* Seed every source's generator from (seed, host_id, source address) alone. */
void ld_seed(struct ld_table *t, uint64_t seed, uint64_t host_id);

/* Count one packet of s; return 1 to drop it, else 0 with the time to hold it in *hold_ns. */
int ld_decide(struct ld_source *s, uint64_t *hold_ns);

/* The least hold any source of t can draw, ns (0 when one can draw none, or t has none). */
uint64_t ld_min_hold_ns(const struct ld_table *t);

/*
 * Serialisation (linkdelay_wire.c). ld_wire_lengths reads an IPv4 packet's total length
 * and its IP + transport header length from the first caplen bytes (0 on success).
 * ld_serialise sends a packet of that size, present in full at ready_ns, through the rated
 * links of s's path, store-and-forward, as the MTU-sized segments the wire carries, and
 * returns when its last bit has left the last of them (ready_ns when the path has none).
 */
#define LD_MTU 1500
#define LD_L2_BYTES 14                  /* what HTB counts per frame besides the IP packet */
int ld_wire_lengths(const unsigned char *ip, int caplen, uint32_t *ip_len, uint32_t *hdr_len);
/*
 * One host's daemon may run as several workers, one per CPU (linkemu_daemon.py), each
 * reading its own queue; a rated link is one wire whichever worker a packet reached, so
 * its clock must be one too. ld_share_clocks maps the links' clocks from fd (a memfd the
 * runner created for the host's workers; grown to fit if it is smaller) and ld_serialise
 * then reserves each frame's time on a link with one atomic compare-and-swap, so two
 * workers never give the same moment of a link to two frames. 0, or -1 with one sentence.
 */
int ld_share_clocks(struct ld_table *t, int fd, char *err, size_t errlen);
uint64_t ld_serialise(struct ld_table *t, const struct ld_source *s, uint64_t ready_ns,
		      uint32_t ip_len, uint32_t hdr_len);

/*
 * Lateness histogram: bucket 0 holds releases less than 1 us late, bucket k (1..) those
 * [2^(k-1), 2^k) us late, the last bucket everything from 2^(LD_LATE_BUCKETS-2) us on. A mean
 * alone cannot tell a few stalls of milliseconds from every packet a little late; the
 * histogram can. ld_late_bound_us: the upper edge (us) of the bucket in which the q quantile
 * (0..1) of the counted releases falls, so the quantile is at most that; 0 with no releases,
 * UINT64_MAX when it falls in the open last bucket.
 */
#define LD_LATE_BUCKETS 16
unsigned ld_late_bucket(uint64_t late_ns);
uint64_t ld_late_bound_us(const uint64_t *hist, double q);

int ld_heap_push(struct ld_heap *h, struct ld_held item);   /* -1 when out of memory */
struct ld_held ld_heap_pop(struct ld_heap *h);               /* h->len must be > 0 */

/*
 * Signals: ld_signals_setup installs the handlers for SIGTERM, SIGINT (stop) and SIGUSR1
 * (stats), BLOCKS them and stores in *wait_mask the mask to wait with (them unblocked).
 * ld_wait is ppoll with that mask, so a signal that arrives after the flags were checked
 * stays pending and ends the wait at once instead of being handled before it.
 */
extern volatile sig_atomic_t ld_stop_flag, ld_stats_flag;
int ld_signals_setup(sigset_t *wait_mask);
int ld_wait(struct pollfd *pfd, nfds_t n, const uint64_t *timeout_ns, const sigset_t *wait_mask);

#endif
