/*
 * linkdelay: hold IPv4 packets at a host's ingress for a per-source delay, drop some.
 *
 * Used by repronet/emu/linkemu.py where the kernel has no sch_netem. One daemon runs in each
 * emulated host's network namespace; iptables rules in the raw PREROUTING chain send packets
 * from the other hosts to NFQUEUE <queue>. For each packet the daemon reads the source
 * address from the first bytes (only COPY_BYTES are copied to userspace), looks up that
 * source's path (the link directions between source and this host), draws the loss and one
 * uniform jitter sample per link from a seeded xorshift generator, and either drops the packet
 * at once or keeps (deadline, packet id) in a min-heap. The loop sleeps in ppoll() until the
 * earliest deadline (timer slack set to 1 ns, CLOCK_MONOTONIC) and then gives NF_ACCEPT.
 * Equal per-source delays keep per-source order (the heap breaks ties by arrival number),
 * so packets are reordered only when jitter is configured, as with netem.
 *
 * Fail closed: the queue has no bypass flag, so if this daemon dies the packets are dropped
 * (and the experiment sees it) instead of passing undelayed.
 *
 * Config file, one line per source address:
 *     SRC_IPV4 LOSS_PROBABILITY NHOPS DELAY_US JITTER_US [DELAY_US JITTER_US ...]
 * Output (stdout, JSON lines): {"event": "ready", ...} once the queue is bound, and
 * {"event": "stats", ...} on SIGUSR1 and at exit (SIGTERM/SIGINT, or with --exit-on-eof when
 * stdin closes: the runner keeps a pipe open, so a crashed runner leaves no daemon behind).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <libnetfilter_queue/linux_nfnetlink_queue.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define COPY_BYTES 40
#define MAX_HOPS 64
#define QUEUE_MAXLEN 65536
#define RCVBUF_BYTES (32 * 1024 * 1024)

struct source {
	uint32_t addr;          /* network byte order */
	double loss;
	int nhops;
	uint32_t delay_us[MAX_HOPS];
	uint32_t jitter_us[MAX_HOPS];
	uint64_t packets, dropped;
};

struct held {
	uint64_t deadline_ns;
	uint64_t arrival;       /* tie-breaker: keeps FIFO order for equal deadlines */
	uint32_t id;
};

static struct source *sources;
static int nsources;
static struct held *heap;
static size_t heap_len, heap_cap, heap_max;
static uint64_t rng_state, arrivals, accepted, dropped, unknown, enobufs, verdict_errors;
static uint64_t late_ns_sum, late_ns_max, released;
static volatile sig_atomic_t stop_flag, stats_flag;
static struct nfq_q_handle *qh;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_next(void)
{
	/* xorshift64* (Vigna): fast, good enough for loss and jitter draws. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1Dull;
}

static double rng_uniform(void)
{
	return (double)(rng_next() >> 11) / 9007199254740992.0;  /* [0, 1) */
}

static int held_before(const struct held *a, const struct held *b)
{
	if (a->deadline_ns != b->deadline_ns)
		return a->deadline_ns < b->deadline_ns;
	return a->arrival < b->arrival;
}

static void heap_push(struct held item)
{
	size_t i;
	if (heap_len == heap_cap) {
		heap_cap = heap_cap ? heap_cap * 2 : 4096;
		heap = realloc(heap, heap_cap * sizeof(*heap));
		if (!heap) {
			perror("linkdelay: realloc");
			exit(1);
		}
	}
	i = heap_len++;
	while (i > 0) {
		size_t up = (i - 1) / 2;
		if (!held_before(&item, &heap[up]))
			break;
		heap[i] = heap[up];
		i = up;
	}
	heap[i] = item;
	if (heap_len > heap_max)
		heap_max = heap_len;
}

static struct held heap_pop(void)
{
	struct held top = heap[0], last = heap[--heap_len];
	size_t i = 0;
	for (;;) {
		size_t child = 2 * i + 1;
		if (child >= heap_len)
			break;
		if (child + 1 < heap_len && held_before(&heap[child + 1], &heap[child]))
			child++;
		if (!held_before(&heap[child], &last))
			break;
		heap[i] = heap[child];
		i = child;
	}
	if (heap_len)
		heap[i] = last;
	return top;
}

static struct source *find_source(uint32_t addr)
{
	for (int i = 0; i < nsources; i++)
		if (sources[i].addr == addr)
			return &sources[i];
	return NULL;
}

static void verdict(uint32_t id, uint32_t what)
{
	if (nfq_set_verdict(qh, id, what, 0, NULL) < 0)
		verdict_errors++;
}

static int on_packet(struct nfq_q_handle *q, struct nfgenmsg *msg, struct nfq_data *nfa, void *data)
{
	struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
	unsigned char *payload;
	int len = nfq_get_payload(nfa, &payload);
	uint32_t id, src;
	struct source *s;
	uint64_t hold_ns = 0;
	(void)q; (void)msg; (void)data;

	if (!ph)
		return 0;
	id = ntohl(ph->packet_id);
	if (len < 20 || (payload[0] >> 4) != 4) {
		unknown++;
		verdict(id, NF_ACCEPT);
		return 0;
	}
	memcpy(&src, payload + 12, 4);
	s = find_source(src);
	if (!s) {
		unknown++;
		verdict(id, NF_ACCEPT);
		return 0;
	}
	s->packets++;
	if (s->loss > 0 && rng_uniform() < s->loss) {
		s->dropped++;
		dropped++;
		verdict(id, NF_DROP);
		return 0;
	}
	for (int h = 0; h < s->nhops; h++) {
		double d = s->delay_us[h];
		if (s->jitter_us[h])
			d += (2.0 * rng_uniform() - 1.0) * s->jitter_us[h];
		if (d > 0)
			hold_ns += (uint64_t)(d * 1000.0);
	}
	if (hold_ns == 0) {
		accepted++;
		verdict(id, NF_ACCEPT);
		return 0;
	}
	heap_push((struct held){now_ns() + hold_ns, arrivals++, id});
	return 0;
}

static int load_config(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	int lineno = 0;
	if (!f) {
		fprintf(stderr, "linkdelay: cannot open config %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char addr[64];
		struct source s;
		int off = 0, used;
		lineno++;
		if (line[0] == '#' || line[0] == '\n')
			continue;
		memset(&s, 0, sizeof(s));
		if (sscanf(line, "%63s %lf %d%n", addr, &s.loss, &s.nhops, &off) != 3 ||
		    inet_pton(AF_INET, addr, &s.addr) != 1 || s.loss < 0 || s.loss > 1 ||
		    s.nhops < 0 || s.nhops > MAX_HOPS) {
			fprintf(stderr, "linkdelay: %s:%d: expected 'SRC_IPV4 LOSS NHOPS DELAY_US JITTER_US...'\n",
				path, lineno);
			fclose(f);
			return -1;
		}
		for (int h = 0; h < s.nhops; h++) {
			if (sscanf(line + off, "%u %u%n", &s.delay_us[h], &s.jitter_us[h], &used) != 2) {
				fprintf(stderr, "linkdelay: %s:%d: %d hops announced, fewer given\n",
					path, lineno, s.nhops);
				fclose(f);
				return -1;
			}
			off += used;
		}
		sources = realloc(sources, (nsources + 1) * sizeof(*sources));
		sources[nsources++] = s;
	}
	fclose(f);
	return 0;
}

static void print_stats(const char *event)
{
	printf("{\"event\": \"%s\", \"arrivals\": %llu, \"accepted\": %llu, \"dropped\": %llu, "
	       "\"unknown\": %llu, \"held_now\": %zu, \"held_max\": %zu, \"late_us_mean\": %.3f, "
	       "\"late_us_max\": %.3f, \"enobufs\": %llu, \"verdict_errors\": %llu, \"sources\": [",
	       event, (unsigned long long)(arrivals + unknown), (unsigned long long)accepted,
	       (unsigned long long)dropped, (unsigned long long)unknown, heap_len, heap_max,
	       released ? late_ns_sum / 1000.0 / released : 0.0, late_ns_max / 1000.0,
	       (unsigned long long)enobufs, (unsigned long long)verdict_errors);
	for (int i = 0; i < nsources; i++) {
		char addr[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &sources[i].addr, addr, sizeof(addr));
		printf("%s{\"src\": \"%s\", \"packets\": %llu, \"dropped\": %llu}", i ? ", " : "",
		       addr, (unsigned long long)sources[i].packets,
		       (unsigned long long)sources[i].dropped);
	}
	printf("]}\n");
	fflush(stdout);
}

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		stats_flag = 1;
	else
		stop_flag = 1;
}

static void usage(void)
{
	fprintf(stderr, "usage: linkdelay --config FILE [--queue N] [--seed N] [--gso] [--exit-on-eof]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *config = NULL;
	unsigned queue = 0;
	unsigned long long seed = 1;
	int gso = 0, exit_on_eof = 0, fd;
	struct nfq_handle *h;
	static char buf[1 << 16];
	struct sigaction sa;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--config") && i + 1 < argc)
			config = argv[++i];
		else if (!strcmp(argv[i], "--queue") && i + 1 < argc)
			queue = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--gso"))
			gso = 1;
		else if (!strcmp(argv[i], "--exit-on-eof"))
			exit_on_eof = 1;
		else
			usage();
	}
	if (!config || load_config(config) < 0)
		usage();
	rng_state = seed * 0x9E3779B97F4A7C15ull + 1;  /* never zero */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);

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
	printf("{\"event\": \"ready\", \"queue\": %u, \"sources\": %d, \"seed\": %llu, \"gso\": %d}\n",
	       queue, nsources, seed, gso);
	fflush(stdout);

	while (!stop_flag) {
		struct pollfd pfd[2] = {{fd, POLLIN, 0}, {0, POLLIN, 0}};
		struct timespec timeout, *tp = NULL;
		uint64_t now = now_ns();
		int rv;

		while (heap_len && heap[0].deadline_ns <= now) {
			struct held item = heap_pop();
			uint64_t late = now - item.deadline_ns;
			late_ns_sum += late;
			if (late > late_ns_max)
				late_ns_max = late;
			accepted++;
			released++;
			verdict(item.id, NF_ACCEPT);
		}
		if (stats_flag) {
			stats_flag = 0;
			print_stats("stats");
		}
		if (heap_len) {
			uint64_t wait = heap[0].deadline_ns - now;
			timeout.tv_sec = wait / 1000000000ull;
			timeout.tv_nsec = wait % 1000000000ull;
			tp = &timeout;
		}
		rv = ppoll(pfd, exit_on_eof ? 2 : 1, tp, NULL);
		if (rv < 0 && errno != EINTR) {
			perror("linkdelay: ppoll");
			break;
		}
		if (rv <= 0)
			continue;
		if (exit_on_eof && pfd[1].revents) {
			char junk[256];
			if (read(0, junk, sizeof(junk)) <= 0)
				break;  /* the runner is gone */
		}
		if (!(pfd[0].revents & POLLIN))
			continue;
		for (;;) {
			ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n < 0) {
				if (errno == ENOBUFS) {
					enobufs++;
					continue;
				}
				break;
			}
			nfq_handle_packet(h, buf, (int)n);
		}
	}
	print_stats("stats");
	nfq_destroy_queue(qh);
	nfq_close(h);
	return 0;
}
