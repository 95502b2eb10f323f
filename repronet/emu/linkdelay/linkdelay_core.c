/*
 * linkdelay's netfilter-free parts (see linkdelay_core.h and the file comment of linkdelay.c):
 * the source table, the generators and the drop/hold decision, the heap, the signal-safe
 * wait. The config parser is linkdelay_config.c, the serialisation linkdelay_wire.c.
 *
 * Every source has its own generator, seeded from (seed, host id, source address) only, so
 * a source's drop and jitter draws depend on its own packet sequence, not on how other
 * sources' packets interleave with it, and a reseed gives the same draws as a fresh start.
 */
#define _GNU_SOURCE
#include "linkdelay_core.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

volatile sig_atomic_t ld_stop_flag, ld_stats_flag;

struct ld_source *ld_find(const struct ld_table *t, uint32_t addr)
{
	size_t lo = 0, hi = t->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->v[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < t->n && t->v[lo].addr == addr ? &t->v[lo] : NULL;
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

void ld_seed(struct ld_table *t, uint64_t seed, uint64_t host_id)
{
	uint64_t base = splitmix64(splitmix64(seed) ^ host_id);
	for (size_t i = 0; i < t->n; i++) {
		t->v[i].rng = splitmix64(base ^ t->v[i].addr);
		if (!t->v[i].rng)       /* xorshift's one fixed point */
			t->v[i].rng = 0x9E3779B97F4A7C15ull;
	}
}

static double uniform(uint64_t *state)
{
	/* xorshift64* (Vigna): fast, good enough for loss and jitter draws; [0, 1). */
	*state ^= *state >> 12;
	*state ^= *state << 25;
	*state ^= *state >> 27;
	return (double)((*state * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

int ld_decide(struct ld_source *s, uint64_t *hold_ns)
{
	double hold_us = 0;

	s->packets++;
	if (s->loss > 0 && uniform(&s->rng) < s->loss) {
		s->dropped++;
		return 1;
	}
	for (int h = 0; h < s->nhops; h++) {
		double d = s->delay_us[h];
		if (s->jitter_us[h])    /* uniform in [-jitter, +jitter], netem's default */
			d += (2.0 * uniform(&s->rng) - 1.0) * s->jitter_us[h];
		hold_us += d;           /* >= 0: the parser keeps jitter <= delay per hop */
	}
	*hold_ns = (uint64_t)(hold_us * 1000.0 + 0.5);
	return 0;
}

static int held_before(const struct ld_held *a, const struct ld_held *b)
{
	if (a->deadline_ns != b->deadline_ns)
		return a->deadline_ns < b->deadline_ns;
	return a->arrival < b->arrival;
}

int ld_heap_push(struct ld_heap *h, struct ld_held item)
{
	size_t i;
	if (h->len == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 4096;
		struct ld_held *grown = realloc(h->v, cap * sizeof(*grown));
		if (!grown)
			return -1;
		h->v = grown;
		h->cap = cap;
	}
	i = h->len++;
	while (i > 0) {
		size_t up = (i - 1) / 2;
		if (!held_before(&item, &h->v[up]))
			break;
		h->v[i] = h->v[up];
		i = up;
	}
	h->v[i] = item;
	if (h->len > h->max)
		h->max = h->len;
	return 0;
}

struct ld_held ld_heap_pop(struct ld_heap *h)
{
	struct ld_held top = h->v[0], last = h->v[--h->len];
	size_t i = 0;
	for (;;) {
		size_t child = 2 * i + 1;
		if (child >= h->len)
			break;
		if (child + 1 < h->len && held_before(&h->v[child + 1], &h->v[child]))
			child++;
		if (!held_before(&h->v[child], &last))
			break;
		h->v[i] = h->v[child];
		i = child;
	}
	if (h->len)
		h->v[i] = last;
	return top;
}

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		ld_stats_flag = 1;
	else
		ld_stop_flag = 1;
}

int ld_signals_setup(sigset_t *wait_mask)
{
	static const int sigs[] = {SIGTERM, SIGINT, SIGUSR1};
	struct sigaction sa;
	sigset_t block;

	sigemptyset(&block);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaddset(&block, sigs[i]);
	if (sigprocmask(SIG_BLOCK, &block, wait_mask) < 0)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		sigdelset(wait_mask, sigs[i]);
		if (sigaction(sigs[i], &sa, NULL) < 0)
			return -1;
	}
	return 0;
}

int ld_wait(struct pollfd *pfd, nfds_t n, const uint64_t *timeout_ns, const sigset_t *wait_mask)
{
	struct timespec ts, *tp = NULL;
	if (timeout_ns) {
		ts.tv_sec = (time_t)(*timeout_ns / 1000000000ull);
		ts.tv_nsec = (long)(*timeout_ns % 1000000000ull);
		tp = &ts;
	}
	return ppoll(pfd, n, tp, wait_mask);
}

unsigned ld_late_bucket(uint64_t late_ns)
{
	uint64_t us = late_ns / 1000ull;
	unsigned k = 0;
	while (us && k < LD_LATE_BUCKETS - 1) {
		us >>= 1;
		k++;
	}
	return k;
}

uint64_t ld_late_bound_us(const uint64_t *hist, double q)
{
	uint64_t total = 0, seen = 0, rank;
	for (unsigned k = 0; k < LD_LATE_BUCKETS; k++)
		total += hist[k];
	if (!total)
		return 0;
	rank = (uint64_t)(q * (double)total + 0.5);
	if (rank < 1)
		rank = 1;
	for (unsigned k = 0; k < LD_LATE_BUCKETS - 1; k++) {
		seen += hist[k];
		if (seen >= rank)
			return 1ull << k;
	}
	return UINT64_MAX;
}

uint64_t ld_min_hold_ns(const struct ld_table *t)
{
	uint64_t least = UINT64_MAX;
	for (size_t i = 0; i < t->n; i++) {
		uint64_t us = 0;
		for (int h = 0; h < t->v[i].nhops; h++)   /* the parser keeps jitter <= delay */
			us += t->v[i].delay_us[h] - t->v[i].jitter_us[h];
		if (us * 1000ull < least)
			least = us * 1000ull;
	}
	return least == UINT64_MAX ? 0 : least;
}
