/*
 * linkdelay's reports and control lines (see the file comment of linkdelay.c): the ready,
 * stats and seeded JSON lines it prints on stdout (seeded: the stats line's counters, after a
 * reseed), the "seed N" lines it reads from the runner's pipe,
 * and its one-line argument errors. Kept apart from the packet path so each file stays short; the state is the daemon's
 * (linkdelay_daemon.h).
 */
#define _GNU_SOURCE
#include "linkdelay_daemon.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

/* The scheduling fields of the ready and stats lines (no braces, no trailing comma). */
void print_schedule(void)
{
	printf("\"policy\": \"%s\", \"rt_priority\": %u, \"rt_budget_ms\": %u, "
	       "\"rt_demoted\": %d, \"rt_demoted_after_s\": ", ld_sched_policy(), rt_priority,
	       rt_budget_ms, (int)ld_rt_demoted);
	if (ld_rt_demoted)
		printf("%.3f", (ld_rt_demoted_ns - start_ns) / 1e9);
	else
		printf("null");
	printf(", \"forced_sleeps\": %llu, \"spin_us\": %.1f, \"spin_cap_us\": %llu, "
	       "\"spin_permille\": %llu, \"spin_quantile\": %g, \"wake_samples\": %llu, "
	       "\"wake_overshoot_us_q\": %.1f, \"wake_overshoot_us_max\": %.1f",
	       (unsigned long long)block.forced,
	       spin.spin_ns / 1000.0, (unsigned long long)(spin.cap_ns / 1000ull),
	       (unsigned long long)(spin.budget_ns / (LD_SPIN_WINDOW_NS / 1000ull)),
	       LD_SPIN_QUANTILE, (unsigned long long)spin.samples, spin.quantile_ns / 1000.0,
	       spin.overshoot_max_ns / 1000.0);
	printf(", \"lazy_min_hold_us\": %.3f, \"lazy_off\": %d, \"lazy_reads\": %llu, "
	       "\"queue_wakes\": %llu", lazy.min_hold_ns / 1000.0, lazy.off,
	       (unsigned long long)lazy.reads, (unsigned long long)lazy.woken);
	printf(", \"verdict_batch\": %u, \"verdict_sends\": %llu", verdict_batch,
	       (unsigned long long)verdict_sends);
}

/* Mean over the released packets, in us. */
static double per_release(uint64_t ns_sum)
{
	return released ? ns_sum / 1000.0 / released : 0.0;
}

void print_stats(const char *event)
{
	static const double qs[] = {0.5, 0.9, 0.99, 0.999};
	static const char *const qnames[] = {"p50", "p90", "p99", "p999"};
	int first = 1;
	printf("{\"event\": \"%s\", \"arrivals\": %llu, \"accepted\": %llu, \"dropped\": %llu, "
	       "\"unknown\": %llu, \"held_now\": %zu, \"held_max\": %zu, \"released\": %llu, "
	       "\"late_us_mean\": %.3f, "
	       "\"late_us_max\": %.3f, \"verdict_us_mean\": %.3f, \"queued_us_mean\": %.3f, "
	       "\"queued_us_max\": %.3f, "
	       "\"stamped\": %llu, \"unstamped\": %llu, \"enobufs\": %llu, "
	       "\"verdict_errors\": %llu, \"seed\": %llu, ",
	       event, (unsigned long long)arrivals, (unsigned long long)accepted,
	       (unsigned long long)dropped, (unsigned long long)unknown, heap.len, heap.max,
	       (unsigned long long)released, released ? late_ns_sum / 1000.0 / released : 0.0,
	       late_ns_max / 1000.0, released ? verdict_ns_sum / 1000.0 / released : 0.0,
	       stamped ? queued_ns_sum / 1000.0 / stamped : 0.0, queued_ns_max / 1000.0,
	       (unsigned long long)stamped, (unsigned long long)unstamped,
	       (unsigned long long)enobufs, (unsigned long long)verdict_errors,
	       (unsigned long long)seed);
	print_schedule();
	/* when the worst release happened (Unix seconds), so that a run can set it beside the
	 * CPU samples of that moment (the hypervisor's steal, a busy core); null before any */
	if (released)
		printf(", \"late_us_max_at\": %.6f", unix_seconds(late_max_at_ns));
	else
		printf(", \"late_us_max_at\": null");
	printf(", \"late_read_us_mean\": %.3f, \"late_chain_us_mean\": %.3f, "
	       "\"late_wake_us_mean\": %.3f, \"late_us_bounds\": {", per_release(late_read_ns_sum),
	       per_release(late_chain_ns_sum), per_release(late_wake_ns_sum));
	for (unsigned i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		uint64_t b = ld_late_bound_us(late_hist, qs[i]);
		printf("%s\"%s\": ", i ? ", " : "", qnames[i]);
		if (b == UINT64_MAX)
			printf("null");
		else
			printf("%llu", (unsigned long long)b);
	}
	printf("}, \"late_hist_log2_us\": [");
	for (unsigned k = 0; k < LD_LATE_BUCKETS; k++)
		printf("%s%llu", k ? ", " : "", (unsigned long long)late_hist[k]);
	printf("]");
	printf(", \"spin_ms\": %.3f, \"spin_windows_exhausted\": %llu, \"spin_yields_slow\": %llu, "
	       "\"spin_yield_slow_ms\": %.3f, \"serialised\": %llu, "
	       "\"serial_us_mean\": %.3f, \"serial_us_max\": %.3f, \"links\": [",
	       spin.total_ns / 1e6, (unsigned long long)spin.windows_exhausted,
	       (unsigned long long)spin.yields_slow, spin.yield_slow_ns / 1e6,
	       (unsigned long long)serialised, serialised ? serial_ns_sum / 1000.0 / serialised : 0.0,
	       serial_ns_max / 1000.0);
	for (size_t i = 0; i < table.nlinks; i++)
		printf("%s{\"id\": %zu, \"rate_bps\": %llu, \"packets\": %llu, \"busy_ms\": %.3f}",
		       i ? ", " : "", i, (unsigned long long)table.links[i].rate_bps,
		       (unsigned long long)table.links[i].packets, table.links[i].busy_ns / 1e6);
	printf("], \"sources\": [");
	for (size_t i = 0; i < table.n; i++) {
		char addr[INET_ADDRSTRLEN];
		struct in_addr a = {htonl(table.v[i].addr)};
		if (!table.v[i].packets)
			continue;   /* only sources that sent: the line stays short on big trees */
		inet_ntop(AF_INET, &a, addr, sizeof(addr));
		printf("%s{\"src\": \"%s\", \"packets\": %llu, \"dropped\": %llu}", first ? "" : ", ",
		       addr, (unsigned long long)table.v[i].packets,
		       (unsigned long long)table.v[i].dropped);
		first = 0;
	}
	printf("]}\n");
	fflush(stdout);
}

/* The one-line usage error (exit 2) and a flag's whole-number value (or that error). */
void usage(const char *why, const char *arg)
{
	fprintf(stderr, "linkdelay: %s%s; usage: linkdelay --config FILE [--queue N] [--seed N] "
		"[--host-id N] [--gso] [--control-stdin] [--rt-priority 0..98] [--rt-budget-ms 1..%u] "
		"[--spin-us 0..%u] [--spin-permille 0..1000] [--verdict-batch 1..%d] [--clocks-fd FD]\n", why, arg,
		LD_MAX_RT_BUDGET_MS, LD_MAX_SPIN_US, LD_VERDICT_BATCH_MAX);
	exit(2);
}

uint64_t flag_number(const char *flag, const char *text, uint64_t max)
{
	uint64_t v;
	if (ld_parse_u64(text, max, &v) < 0) {
		fprintf(stderr, "linkdelay: %s '%s' is not a whole number in 0..%llu\n", flag, text,
			(unsigned long long)max);
		exit(2);
	}
	return v;
}

/* Act on the complete lines in buf[0..*len); keep an unfinished one. */
void control(char *buf, size_t *len)
{
	char *start = buf, *nl;
	while ((nl = memchr(start, '\n', *len - (size_t)(start - buf)))) {
		uint64_t v;
		*nl = '\0';
		if (!strncmp(start, "seed ", 5) && ld_parse_u64(start + 5, UINT64_MAX, &v) == 0) {
			seed = v;
			ld_seed(&table, seed, host_id);
			/* every counter so far: the runner reseeds at each point's start, so
			 * two of these lines bound one point's releases (linkemu_holds.by_seed) */
			print_stats("seeded");
		} else {
			fprintf(stderr, "linkdelay: ignored control line '%.64s' (expected 'seed N')\n",
				start);
		}
		start = nl + 1;
	}
	*len -= (size_t)(start - buf);
	memmove(buf, start, *len);
	if (*len == CONTROL_MAX) {
		fprintf(stderr, "linkdelay: ignored a control line longer than %d bytes\n", CONTROL_MAX);
		*len = 0;
	}
}
