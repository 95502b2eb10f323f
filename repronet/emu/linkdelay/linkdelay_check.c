/*
 * linkdelay_check: drives linkdelay_core.c (the daemon's parser, table, generators, heap and
 * wait) without a netfilter queue, so tests/test_linkdelay_unit.py can check them without
 * root. Every command prints one JSON object on stdout; a config error prints the daemon's
 * one-line message on stderr and exits 2, as the daemon does.
 *
 *   config FILE                        {"sources": N, "min_hold_ns": N}
 *   lookup FILE IP...                  {"lines": [config line of each IP, or null]}
 *   heap DEADLINE...                   {"order": [arrival index of each pop]}
 *   simulate FILE HOST_ID GAP_NS STEP...
 *       packet k arrives at k * GAP_NS; a STEP is "seed=S" (reseed every source) or
 *       "IP[,IP...]xCOUNT" (COUNT rounds of one packet from each listed IP). Prints, per
 *       source, the indices (in that source's own sequence) of the dropped packets and the
 *       hold of each kept one, and the global packet indices in release order.
 *   wait-signal                        {"woke": "signal" | "timeout"}
 *       sets the daemon's signals up, raises SIGUSR1 after the flags were checked (the race
 *       the signal mask closes) and waits up to 10 s the way the daemon's loop does.
 *   spin SPIN_US PERMILLE NOW_NS:WAIT_NS[:SPENT_NS]...
 *       the busy-poll budget (linkdelay_sched.c): for each pass at NOW_NS with the next
 *       deadline WAIT_NS away, the time the loop would sleep; a pass that would not sleep is
 *       charged SPENT_NS (default 0). {"sleep_ns": [...], "spun_ns": N, "exhausted": N}
 *   learn CAP_US OVERSHOOT_NS...
 *       the learned spin window: feeds each overshoot as a timed sleep that woke that late;
 *       {"spin_ns": [the window after each], "quantile_ns": N, "max_ns": N}
 *   block PERIOD_NS NOW_NS:NVCSW:CPU_NS...
 *       the regular sleep: the loop passes at NOW_NS when the daemon's voluntary context
 *       switch count reads NVCSW and its CPU time CPU_NS (all start at 0);
 *       {"due": [0 or 1 per pass], "forced": N}
 *   yield SPIN_MS YIELD
 *       needs root: a spinning SCHED_FIFO process and a sleeping one on CPU 0; how late the
 *       sleeper woke with and without the spinner's yields (cmd_yield)
 *   rttime BUDGET_MS SPIN_MS REGULAR
 *       needs root: polls without sleeping for SPIN_MS at SCHED_FIFO 10 with an RLIMIT_RTTIME
 *       of BUDGET_MS, taking the daemon's regular sleep if REGULAR is 1;
 *       {"demoted": 0|1, "demoted_after_ms": N|null, "forced": N}
 *   serialise FILE IP:READY_NS:IP_LEN:HDR_LEN...
 *       each packet through the rated links of its source's path (linkdelay_wire.c), in the
 *       order given; {"done_ns": [when each one's last bit left], "links": [busy ns of each]}
 *   serialise-shared FILE IP:READY_NS:IP_LEN:HDR_LEN...
 *       the same through two tables (two workers) whose clocks share one memory file
 *       (ld_share_clocks), odd packets through the second: the output must not change
 *   clock-race FILE IP COUNT
 *       two processes sharing the clocks each send COUNT 100-byte packets from IP, all ready
 *       at 0, at once; {"clock_ns": the first link's clock, "busy_ns": both ones' work on it}
 *       (equal unless a reservation was lost)
 *   wire HEX                           {"ip_len": N, "hdr_len": N} or {"ip_len": null}
 *       the lengths the daemon reads from a packet's first bytes (at most 40, as it copies)
 *   lazy MIN_HOLD_NS READ_AT_NS OFF PENDING NOW_NS [DEADLINE_NS]
 *       the loop's next wake-up (linkdelay_sched.h, lazy reads) with a packet held until
 *       DEADLINE_NS, or none held without it, and whether a pass at NOW_NS that the queue
 *       did not wake must read it; {"wake_ns": N or null, "watch": 0 or 1, "read_due": 0 or 1}
 *   late LATE_NS...                    {"hist": [count per bucket], "bounds_us": [p50, p90, p99]}
 *       the daemon's lateness histogram of those releases (null: the open last bucket)
 *   overshoot COUNT SLEEP_NS PRIORITY
 *       a measurement, not a check: COUNT timed sleeps of SLEEP_NS the way the daemon sleeps
 *       (ppoll, timer slack 1 ns; SCHED_FIFO PRIORITY unless 0, which needs root), each fed
 *       to the learned window; {"p50_ns", "p90_ns", "p99_ns", "max_ns", "spin_ns"}
 */
#define _GNU_SOURCE
#include "linkdelay_check.h"
#include "linkdelay_sched.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

struct ld_table table;

void load(const char *path)
{
	char err[LD_ERR_MAX];
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "linkdelay: cannot open config %s: %s\n", path, strerror(errno));
		exit(2);
	}
	if (ld_load_config(f, path, &table, err, sizeof(err)) < 0) {
		fprintf(stderr, "linkdelay: %s\n", err);
		exit(2);
	}
	fclose(f);
}

uint32_t addr_of(const char *text)
{
	struct in_addr a;
	if (inet_pton(AF_INET, text, &a) != 1) {
		fprintf(stderr, "linkdelay_check: '%s' is not an IPv4 address\n", text);
		exit(2);
	}
	return ntohl(a.s_addr);
}

uint64_t number(const char *text)
{
	uint64_t v;
	if (ld_parse_u64(text, UINT64_MAX, &v) < 0) {
		fprintf(stderr, "linkdelay_check: '%s' is not a whole number\n", text);
		exit(2);
	}
	return v;
}

static int cmd_lookup(int argc, char **argv)
{
	load(argv[0]);
	printf("{\"lines\": [");
	for (int i = 1; i < argc; i++) {
		struct ld_source *s = ld_find(&table, addr_of(argv[i]));
		if (s)
			printf("%s%d", i > 1 ? ", " : "", s->line);
		else
			printf("%snull", i > 1 ? ", " : "");
	}
	printf("]}\n");
	return 0;
}

static int cmd_heap(int argc, char **argv)
{
	struct ld_heap h = {0};
	for (int i = 0; i < argc; i++)
		if (ld_heap_push(&h, (struct ld_held){number(argv[i]), (uint64_t)i, (uint32_t)i, 0}) < 0)
			return 1;
	printf("{\"order\": [");
	for (int i = 0; h.len; i++)
		printf("%s%u", i ? ", " : "", ld_heap_pop(&h).id);
	printf("]}\n");
	free(h.v);
	return 0;
}

struct seen {
	uint64_t sent;
	char *dropped, *holds;          /* JSON list bodies, grown as needed */
	size_t dlen, dcap, hlen, hcap;
};

static void append(char **buf, size_t *len, size_t *cap, uint64_t v)
{
	char num[32];
	int n = snprintf(num, sizeof(num), "%s%llu", *len ? ", " : "", (unsigned long long)v);
	if (*len + (size_t)n + 1 > *cap) {
		*cap = (*cap + (size_t)n + 1) * 2;
		if (!(*buf = realloc(*buf, *cap)))
			exit(1);
	}
	memcpy(*buf + *len, num, (size_t)n + 1);
	*len += (size_t)n;
}

static int cmd_simulate(int argc, char **argv)
{
	uint64_t host_id = number(argv[1]), gap = number(argv[2]), k = 0, hold;
	struct ld_heap h = {0};
	struct seen *seen;

	load(argv[0]);
	seen = calloc(table.n ? table.n : 1, sizeof(*seen));
	ld_seed(&table, 0, host_id);
	for (int a = 3; a < argc; a++) {
		char *x, *list, *ip, *save;
		uint64_t rounds;
		if (!strncmp(argv[a], "seed=", 5)) {
			ld_seed(&table, number(argv[a] + 5), host_id);
			continue;
		}
		x = strrchr(argv[a], 'x');
		if (!x || (rounds = number(x + 1)) > MAX_PACKETS) {
			fprintf(stderr, "linkdelay_check: step '%s' is not IP[,IP...]xCOUNT\n", argv[a]);
			return 2;
		}
		*x = '\0';
		for (uint64_t r = 0; r < rounds; r++) {
			list = strdup(argv[a]);
			for (ip = strtok_r(list, ",", &save); ip; ip = strtok_r(NULL, ",", &save)) {
				struct ld_source *s = ld_find(&table, addr_of(ip));
				struct seen *sn;
				if (!s) {
					fprintf(stderr, "linkdelay_check: %s is not in the config\n", ip);
					return 2;
				}
				sn = &seen[s - table.v];
				if (ld_decide(s, &hold))
					append(&sn->dropped, &sn->dlen, &sn->dcap, sn->sent);
				else {
					append(&sn->holds, &sn->hlen, &sn->hcap, hold);
					ld_heap_push(&h, (struct ld_held){k * gap + hold, k, (uint32_t)k, 0});
				}
				sn->sent++;
				k++;
			}
			free(list);
		}
	}
	printf("{\"sources\": {");
	for (size_t i = 0, first = 1; i < table.n; i++) {
		struct in_addr ia = {htonl(table.v[i].addr)};
		if (!seen[i].sent)
			continue;
		printf("%s\"%s\": {\"sent\": %llu, \"dropped\": [%s], \"holds_ns\": [%s]}",
		       first ? "" : ", ", inet_ntoa(ia), (unsigned long long)seen[i].sent,
		       seen[i].dropped ? seen[i].dropped : "", seen[i].holds ? seen[i].holds : "");
		first = 0;
	}
	printf("}, \"release\": [");
	for (int i = 0; h.len; i++)
		printf("%s%u", i ? ", " : "", ld_heap_pop(&h).id);
	printf("]}\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";
	if (!strcmp(cmd, "config") && argc == 3) {
		load(argv[2]);
		printf("{\"sources\": %zu, \"min_hold_ns\": %llu}\n", table.n,
		       (unsigned long long)ld_min_hold_ns(&table));
		return 0;
	}
	if (!strcmp(cmd, "lookup") && argc >= 3)
		return cmd_lookup(argc - 2, argv + 2);
	if (!strcmp(cmd, "heap"))
		return cmd_heap(argc - 2, argv + 2);
	if (!strcmp(cmd, "simulate") && argc >= 5)
		return cmd_simulate(argc - 2, argv + 2);
	if (!strcmp(cmd, "wait-signal") && argc == 2)
		return cmd_wait_signal();
	if (!strcmp(cmd, "spin") && argc >= 4)
		return cmd_spin(argc - 2, argv + 2);
	if (!strcmp(cmd, "lazy") && (argc == 7 || argc == 8))
		return cmd_lazy(argc - 2, argv + 2);
	if (!strcmp(cmd, "learn") && argc >= 3)
		return cmd_learn(argc - 2, argv + 2);
	if (!strcmp(cmd, "block") && argc >= 3)
		return cmd_block(argc - 2, argv + 2);
	if (!strcmp(cmd, "rttime") && argc == 5)
		return cmd_rttime(argv + 2);
	if (!strcmp(cmd, "yield") && argc == 4)
		return cmd_yield(argv + 2);
	if (!strcmp(cmd, "serialise") && argc >= 4)
		return cmd_serialise(argc - 2, argv + 2, 0);
	if (!strcmp(cmd, "serialise-shared") && argc >= 4)
		return cmd_serialise(argc - 2, argv + 2, 1);
	if (!strcmp(cmd, "clock-race") && argc == 5)
		return cmd_clock_race(argv + 2);
	if (!strcmp(cmd, "wire") && argc == 3)
		return cmd_wire(argv[2]);
	if (!strcmp(cmd, "late") && argc >= 3)
		return cmd_late(argc - 2, argv + 2);
	if (!strcmp(cmd, "overshoot") && argc == 5)
		return cmd_overshoot(argv + 2);
	fprintf(stderr, "usage: linkdelay_check config FILE | lookup FILE IP... | heap D... | "
		"simulate FILE HOST_ID GAP_NS STEP... | wait-signal | "
		"spin SPIN_US PERMILLE NOW:WAIT[:SPENT]... | learn CAP_US OVERSHOOT_NS... | "
		"block PERIOD_NS NOW:NVCSW:CPU... | rttime BUDGET_MS SPIN_MS REGULAR | yield SPIN_MS YIELD | "
		"serialise[-shared] FILE IP:READY:LEN:HDR... | clock-race FILE IP COUNT | "
		"wire HEX | late NS... | "
		"overshoot COUNT SLEEP_NS PRIORITY\n");
	return 2;
}
