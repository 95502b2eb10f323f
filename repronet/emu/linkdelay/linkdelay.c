/*
 * linkdelay: hold IPv4 packets at a host's ingress for a per-source delay, drop some.
 *
 * Used by repronet/emu/linkemu.py where the kernel has no sch_netem. One daemon runs in each
 * emulated host's network namespace; one iptables rule in the raw PREROUTING path sends the
 * IPv4 packets arriving on the host's interface to NFQUEUE <queue>. For each packet the
 * daemon reads the source address from the first bytes (only COPY_BYTES are copied to
 * userspace), looks that source up in its table (sorted, binary search), draws the loss and
 * one uniform jitter sample per link from the source's own seeded generator, and either drops
 * the packet at once or keeps (deadline, packet id) in a min-heap. A source the table does not
 * know passes at once (counted as unknown). The loop sleeps in ppoll() until the earliest
 * deadline (timer slack 1 ns, CLOCK_MONOTONIC) and then gives NF_ACCEPT (linkdelay_release.c:
 * the packets due in one pass go in one netlink send, --verdict-batch). Equal per-source
 * delays keep per-source order (the heap breaks ties by arrival number), so packets are
 * reordered only when jitter is configured, as with netem.
 *
 * Fail closed: the queue has no bypass flag, so if this daemon dies the packets are dropped
 * (and the experiment sees it) instead of passing undelayed. Bounded: the kernel queues at
 * most QUEUE_MAXLEN packets awaiting a verdict, and the heap holds only those.
 *
 * The hold counts from the packet's arrival in the host, not from when the daemon got to it:
 * the kernel stamps each packet as it enters the host (the daemon keeps one SO_TIMESTAMPNS
 * socket open so that it does) and the queue passes the stamp on (NFQA_TIMESTAMP, in
 * microseconds). A daemon that reads the packet 50 us late therefore still releases it on
 * time, and one that reads it after its deadline has passed counts the difference as
 * lateness (queued_us_* says how long packets waited to be read). Packets without a stamp
 * count from when they were read (counted in unstamped).
 *
 * Getting a CPU on time (linkdelay_sched.h): --rt-priority N runs the daemon SCHED_FIFO,
 * bounded by the kernel's RT throttle and by --rt-budget-ms of running without blocking
 * (then it drops to SCHED_OTHER, and its stats say when: rt_demoted_after_s); so that normal
 * traffic never does that, the daemon sleeps briefly when it has not slept for a quarter of
 * that budget (forced_sleeps). It polls without sleeping once the next deadline is closer
 * than its spin window, at most --spin-permille of a CPU; the window is learned from how late
 * its own timed sleeps wake (wake_overshoot_us_*), capped by --spin-us; a polling pass that
 * found nothing yields to the other real-time tasks waiting for its CPU (ld_spin_yield:
 * spin_yields_slow, spin_yield_slow_ms). The stats say what
 * the daemon ran under. Each pass reads at most DRAIN_MAX messages before it releases what is
 * due again, so a flood cannot hold the releases back.
 * While packets are held the daemon does not let each arrival wake it: it reads the queue
 * when it wakes for a deadline or when the least hold has passed since its last read,
 * whichever comes first (lazy reads, linkdelay_sched.h), so a real-time daemon preempts the
 * node processes once per batch, not once per packet.
 *
 * Signals (SIGTERM/SIGINT stop, SIGUSR1 prints stats) are blocked except inside ppoll, so one
 * that arrives while the loop is busy is taken by the next wait instead of being lost.
 *
 * Serialisation (linkdelay_wire.c): a source whose path crosses links with a rate has them
 * listed after "via"; the hold then counts from when the packet's last bit has crossed them
 * (each link one clock, shared by every source crossing it), not from its arrival.
 *
 * Workers: a host's daemon may run as one process per CPU, each bound to its own queue
 * (--queue; the rule spreads packets by the CPU that enqueued them, --queue-cpu-fanout) and
 * pinned to that CPU by the runner, so a packet wakes a daemon on the CPU it arrived on
 * instead of one that must be interrupted across CPUs; --clocks-fd FD (a memory file the
 * workers share) makes their rated links one set of clocks (ld_share_clocks).
 *
 * Config file, one line per rated link, then one per source address (linkdelay_core.c
 * checks every field):
 *     link ID RATE_BPS                               (IDs 0, 1, 2, ... in order)
 *     SRC_IPV4 LOSS_PROBABILITY NHOPS DELAY_US JITTER_US [DELAY_US JITTER_US ...] [via ID ...]
 * Control (with --control-stdin; stdin is the runner's pipe): a line "seed N" reseeds every
 * source from (N, --host-id, source) and prints {"event": "seeded", ...}; end of file means
 * the runner is gone, and the daemon exits (so a crashed runner leaves no daemon behind).
 * Output (stdout, JSON lines): {"event": "ready", ...} once the queue is bound, and
 * {"event": "stats", ...} on SIGUSR1 and at exit. Bad arguments or config: one line on
 * stderr and exit status 2, before the queue is touched.
 */
#define _GNU_SOURCE
#include "linkdelay_daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <libnetfilter_queue/linux_nfnetlink_queue.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define COPY_BYTES 40
#define QUEUE_MAXLEN 65536
#define RCVBUF_BYTES (32 * 1024 * 1024)
#define DRAIN_MAX 64            /* messages read per pass before due packets are released */

/* The daemon's state; linkdelay_report.c prints it (linkdelay_daemon.h). */
struct ld_table table;
struct ld_heap heap;
uint64_t seed, host_id;
uint64_t arrivals, accepted, dropped, unknown, enobufs, verdict_errors;
uint64_t late_ns_sum, late_ns_max, late_max_at_ns, released, verdict_ns_sum;
uint64_t queued_ns_sum, queued_ns_max, stamped, unstamped;
uint64_t serialised, serial_ns_sum, serial_ns_max;
uint64_t late_read_ns_sum, late_chain_ns_sum, late_wake_ns_sum, late_hist[LD_LATE_BUCKETS];
unsigned rt_priority, rt_budget_ms = 200;
struct ld_spin spin;
struct ld_block block;
struct ld_lazy lazy;
uint64_t start_ns;
static struct nfq_q_handle *qh;

static uint64_t clock_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/* A CLOCK_MONOTONIC time in Unix seconds (CLOCK_REALTIME), by the clocks' offset now. */
double unix_seconds(uint64_t mono_ns)
{
	return ((double)clock_ns(CLOCK_REALTIME) - (double)now_ns() + (double)mono_ns) / 1e9;
}

/*
 * When the packet entered the host, on CLOCK_MONOTONIC: its kernel stamp (CLOCK_REALTIME,
 * microseconds) moved by the clocks' offset now, never later than now; now when unstamped.
 */
static uint64_t arrival_ns(struct nfq_data *nfa, uint64_t now)
{
	struct timeval tv;
	uint64_t real, stamp, age;
	if (nfq_get_timestamp(nfa, &tv) < 0 || tv.tv_sec <= 0) {
		unstamped++;
		lazy.off = 1;           /* its hold counts from the read: read at once from now on */
		return now;
	}
	real = clock_ns(CLOCK_REALTIME);
	stamp = (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
	age = real > stamp ? real - stamp : 0;
	if (age > now)
		age = now;
	stamped++;
	queued_ns_sum += age;
	if (age > queued_ns_max)
		queued_ns_max = age;
	return now - age;
}

static int on_packet(struct nfq_q_handle *q, struct nfgenmsg *msg, struct nfq_data *nfa, void *data)
{
	struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
	unsigned char *payload;
	int len = nfq_get_payload(nfa, &payload);
	uint32_t id, src;
	struct ld_source *s;
	uint64_t hold_ns, ready, late, now = now_ns();
	(void)q; (void)msg; (void)data;

	if (!ph)
		return 0;
	id = ntohl(ph->packet_id);
	arrivals++;
	s = NULL;
	if (len >= 20 && (payload[0] >> 4) == 4) {
		memcpy(&src, payload + 12, 4);
		s = ld_find(&table, ntohl(src));
	}
	if (!s) {
		unknown++;
		verdict(id, NF_ACCEPT);
		return 0;
	}
	if (ld_decide(s, &hold_ns)) {
		dropped++;
		verdict(id, NF_DROP);
		return 0;
	}
	if (hold_ns == 0 && !s->nvia) {
		accepted++;
		verdict(id, NF_ACCEPT);
		return 0;
	}
	ready = arrival_ns(nfa, now);
	if (s->nvia) {
		uint32_t ip_len, hdr_len;
		uint64_t arrived = ready;
		if (ld_wire_lengths(payload, len, &ip_len, &hdr_len) < 0) {
			ip_len = LD_MTU;    /* unreadable length: one full frame */
			hdr_len = 0;
		}
		ready = ld_serialise(&table, s, arrived, ip_len, hdr_len);
		serialised++;
		serial_ns_sum += ready - arrived;
		if (ready - arrived > serial_ns_max)
			serial_ns_max = ready - arrived;
	}
	ready += hold_ns;
	late = now > ready ? now - ready : 0;
	if (ld_heap_push(&heap, (struct ld_held){ready, arrivals, id,
						  late > UINT32_MAX ? UINT32_MAX : (uint32_t)late}) < 0) {
		fprintf(stderr, "linkdelay: out of memory holding %zu packets\n", heap.len);
		exit(1);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *config = NULL;
	unsigned queue = 0;
	int gso = 0, control_stdin = 0, fd, stamp_fd, on = 1, clocks_fd = -1;
	uint64_t spin_us = 0, spin_permille = 0;
	struct nfq_handle *h;
	static char buf[1 << 16], ctl[CONTROL_MAX];
	size_t ctl_len = 0;
	char err[LD_ERR_MAX];
	sigset_t wait_mask;
	FILE *f;

	for (int i = 1; i < argc; i++) {
		int more = i + 1 < argc;
		if (!strcmp(argv[i], "--config") && more)
			config = argv[++i];
		else if (!strcmp(argv[i], "--queue") && more)
			queue = (unsigned)flag_number("--queue", argv[++i], 65535);
		else if (!strcmp(argv[i], "--seed") && more)
			seed = flag_number("--seed", argv[++i], UINT64_MAX);
		else if (!strcmp(argv[i], "--host-id") && more)
			host_id = flag_number("--host-id", argv[++i], UINT64_MAX);
		else if (!strcmp(argv[i], "--rt-priority") && more)
			rt_priority = (unsigned)flag_number("--rt-priority", argv[++i], 98);
		else if (!strcmp(argv[i], "--rt-budget-ms") && more)
			rt_budget_ms = (unsigned)flag_number("--rt-budget-ms", argv[++i],
							 LD_MAX_RT_BUDGET_MS);
		else if (!strcmp(argv[i], "--spin-us") && more)
			spin_us = flag_number("--spin-us", argv[++i], LD_MAX_SPIN_US);
		else if (!strcmp(argv[i], "--spin-permille") && more)
			spin_permille = flag_number("--spin-permille", argv[++i], 1000);
		else if (!strcmp(argv[i], "--verdict-batch") && more)
			verdict_batch = (unsigned)flag_number("--verdict-batch", argv[++i],
							     LD_VERDICT_BATCH_MAX);
		else if (!strcmp(argv[i], "--clocks-fd") && more)
			clocks_fd = (int)flag_number("--clocks-fd", argv[++i], 1u << 20);
		else if (!strcmp(argv[i], "--gso"))
			gso = 1;
		else if (!strcmp(argv[i], "--control-stdin"))
			control_stdin = 1;
		else if (!more && (!strcmp(argv[i], "--config") || !strcmp(argv[i], "--queue") ||
				   !strcmp(argv[i], "--seed") || !strcmp(argv[i], "--host-id") ||
				   !strcmp(argv[i], "--verdict-batch") || !strcmp(argv[i], "--clocks-fd") ||
				   !strncmp(argv[i], "--rt-", 5) || !strncmp(argv[i], "--spin-", 7)))
			usage("this flag lacks its value: ", argv[i]);
		else
			usage("unknown argument ", argv[i]);
	}
	if (!config)
		usage("--config is required", "");
	if (!rt_budget_ms)
		usage("--rt-budget-ms must be at least 1", "");
	if (!verdict_batch)
		usage("--verdict-batch must be at least 1", "");
	if (!(f = fopen(config, "r"))) {
		fprintf(stderr, "linkdelay: cannot open config %s: %s\n", config, strerror(errno));
		return 2;
	}
	if (ld_load_config(f, config, &table, err, sizeof(err)) < 0) {
		fprintf(stderr, "linkdelay: %s\n", err);
		fclose(f);
		return 2;
	}
	fclose(f);
	if (clocks_fd >= 0 && ld_share_clocks(&table, clocks_fd, err, sizeof(err)) < 0) {
		fprintf(stderr, "linkdelay: %s\n", err);
		return 2;
	}
	ld_seed(&table, seed, host_id);
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	ld_spin_init(&spin, spin_us, (unsigned)spin_permille);
	if (ld_sched_apply(rt_priority, rt_budget_ms, err, sizeof(err)) < 0)
		fprintf(stderr, "linkdelay: %s\n", err);
	spin.fifo = sched_getscheduler(0) == SCHED_FIFO;
	start_ns = now_ns();
	ld_block_init(&block, rt_priority ? rt_budget_ms * 1000000ull / 4 : 0, start_ns,
		      ld_block_read_self);
	/* Any socket asking for receive stamps makes the kernel stamp every arriving packet. */
	stamp_fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (stamp_fd < 0 || setsockopt(stamp_fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) < 0) {
		fprintf(stderr, "linkdelay: no receive stamps (%s); holds count from when packets "
			"are read\n", strerror(errno));
		lazy.off = 1;
	}
	lazy.min_hold_ns = ld_min_hold_ns(&table);
	if (ld_signals_setup(&wait_mask) < 0) {
		perror("linkdelay: signal setup");
		return 1;
	}

	h = nfq_open();
	if (!h) {
		fprintf(stderr, "linkdelay: nfq_open failed: %s\n", strerror(errno));
		return 1;
	}
	qh = nfq_create_queue(h, queue, on_packet, NULL);
	if (!qh) {
		fprintf(stderr, "linkdelay: cannot bind queue %u (another process holds it?): %s\n",
			queue, strerror(errno));
		return 1;
	}
	if (nfq_set_mode(qh, NFQNL_COPY_PACKET, COPY_BYTES) < 0 ||
	    nfq_set_queue_maxlen(qh, QUEUE_MAXLEN) < 0) {
		fprintf(stderr, "linkdelay: cannot configure queue %u: %s\n", queue, strerror(errno));
		return 1;
	}
	if (gso && nfq_set_queue_flags(qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO) < 0)
		fprintf(stderr, "linkdelay: kernel refused NFQA_CFG_F_GSO, packets arrive segmented\n");
	nfnl_rcvbufsiz(nfq_nfnlh(h), RCVBUF_BYTES);
	fd = nfq_fd(h);
	ld_release_init(qh, fd, queue);
	printf("{\"event\": \"ready\", \"queue\": %u, \"sources\": %zu, \"seed\": %llu, "
	       "\"host_id\": %llu, \"gso\": %d, \"clocks_shared\": %d, ", queue, table.n,
	       (unsigned long long)seed, (unsigned long long)host_id, gso, table.clocks != NULL);
	print_schedule();
	printf("}\n");
	fflush(stdout);

	while (!ld_stop_flag) {
		struct pollfd pfd[2];
		uint64_t now = now_ns(), wait = 0, woke, wake_at;
		int rv, drained, watch, n = 0, iq = -1, ictl = -1;

		if (ld_block_due(&block, now, ld_block_read_self)) {
			struct timespec nap = {0, (long)LD_FORCED_SLEEP_NS};
			clock_nanosleep(CLOCK_MONOTONIC, 0, &nap, NULL);
			now = now_ns();
		}
		now = release_due(now);     /* the next sleep counts from after the verdicts */
		if (ld_stats_flag) {
			ld_stats_flag = 0;
			print_stats("stats");
		}
		wake_at = ld_lazy_wake(&lazy, heap.len > 0, heap.len ? heap.v[0].deadline_ns : 0,
				       &watch);
		if (watch)
			iq = n, pfd[n++] = (struct pollfd){fd, POLLIN, 0};
		if (control_stdin)
			ictl = n, pfd[n++] = (struct pollfd){0, POLLIN, 0};
		if (heap.len)
			wait = ld_spin_timeout(&spin, now, wake_at > now ? wake_at - now : 0);
		rv = ld_wait(pfd, (nfds_t)n, heap.len ? &wait : NULL, &wait_mask);
		woke = now_ns();
		if (heap.len && wait == 0) {
			ld_spin_charge(&spin, now, woke);       /* this pass polled, it did not sleep */
			if (rv == 0)
				ld_spin_yield(&spin, now_ns);   /* nothing came: let a pinned peer run */
		} else if (heap.len && rv == 0)
			ld_spin_learn(&spin, wait, woke - now); /* a timed sleep: how late it woke */
		if (rv < 0 && errno != EINTR) {
			perror("linkdelay: ppoll");
			break;
		}
		if (rv < 0)
			continue;
		if (ictl >= 0 && pfd[ictl].revents) {
			ssize_t got = read(0, ctl + ctl_len, sizeof(ctl) - ctl_len);
			if (got <= 0)
				break;  /* the runner is gone */
			ctl_len += (size_t)got;
			control(ctl, &ctl_len);
		}
		if (watch ? !(pfd[iq].revents & POLLIN) : !ld_lazy_read_due(&lazy, woke))
			continue;
		lazy.reads += !watch;
		lazy.woken += watch;
		lazy.read_at_ns = woke;
		for (drained = 0; drained < DRAIN_MAX; drained++) {
			ssize_t got = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (got < 0) {
				if (errno == ENOBUFS) {
					enobufs++;
					continue;
				}
				break;
			}
			nfq_handle_packet(h, buf, (int)got);
		}
		lazy.pending = drained == DRAIN_MAX;
	}
	print_stats("stats");
	nfq_destroy_queue(qh);
	nfq_close(h);
	if (stamp_fd >= 0)
		close(stamp_fd);
	return 0;
}
