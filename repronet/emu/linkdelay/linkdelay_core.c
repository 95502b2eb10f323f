/*
 * linkdelay's netfilter-free parts (see linkdelay_core.h and the file comment of linkdelay.c).
 *
 * Config lines are checked field by field before the daemon binds its queue: a value that
 * does not fit (a delay over 2^32 us read with %u used to wrap to almost nothing) makes the
 * daemon exit with one sentence instead of running with the wrong delay.
 *
 * Every source has its own generator, seeded from (seed, host id, source address) only, so
 * a source's drop and jitter draws depend on its own packet sequence, not on how other
 * sources' packets interleave with it, and a reseed gives the same draws as a fresh start.
 */
#define _GNU_SOURCE
#include "linkdelay_core.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

volatile sig_atomic_t ld_stop_flag, ld_stats_flag;

int ld_parse_u64(const char *text, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!isdigit((unsigned char)text[0]))   /* strtoull would accept and negate a '-' */
		return -1;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno == ERANGE || *end != '\0' || v > max)
		return -1;
	*out = v;
	return 0;
}

static void say(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* Copy the next whitespace-separated token of *p into tok; return 0 at the end of the line. */
static int next_token(const char **p, char *tok, size_t len)
{
	const char *s = *p;
	size_t n = 0;
	tok[0] = '\0';
	while (*s && isspace((unsigned char)*s))
		s++;
	if (!*s)
		return 0;
	while (*s && !isspace((unsigned char)*s)) {
		if (n + 1 < len)
			tok[n++] = *s;
		s++;
	}
	tok[n] = '\0';
	*p = s;
	return 1;
}

/* Parse one non-comment line into s; return 0 or -1 with the reason in err. */
static int parse_line(const char *line, const char *where, struct ld_source *s,
		      char *err, size_t errlen)
{
	char tok[64], *end;
	const char *p = line;
	uint64_t v, delay;
	struct in_addr a;

	if (!next_token(&p, tok, sizeof(tok)) || inet_pton(AF_INET, tok, &a) != 1) {
		say(err, errlen, "%s: '%s' is not an IPv4 source address", where, tok);
		return -1;
	}
	s->addr = ntohl(a.s_addr);
	if (!next_token(&p, tok, sizeof(tok))) {
		say(err, errlen, "%s: expected 'SRC_IPV4 LOSS NHOPS DELAY_US JITTER_US ...'", where);
		return -1;
	}
	errno = 0;
	s->loss = strtod(tok, &end);
	if (errno || *end || !isfinite(s->loss) || s->loss < 0 || s->loss > 1) {
		say(err, errlen, "%s: loss '%s' is not a probability in 0..1", where, tok);
		return -1;
	}
	if (!next_token(&p, tok, sizeof(tok)) || ld_parse_u64(tok, LD_MAX_HOPS, &v) < 0) {
		say(err, errlen, "%s: hop count '%s' is not a whole number in 0..%d", where, tok,
		    LD_MAX_HOPS);
		return -1;
	}
	s->nhops = (int)v;
	for (int h = 0; h < s->nhops; h++) {
		if (!next_token(&p, tok, sizeof(tok))) {
			say(err, errlen, "%s: %d hops announced, fewer given", where, s->nhops);
			return -1;
		}
		if (ld_parse_u64(tok, LD_MAX_DELAY_US, &delay) < 0) {
			say(err, errlen, "%s: delay '%s' of hop %d is not a whole number of "
			    "microseconds in 0..%llu", where, tok, h + 1, LD_MAX_DELAY_US);
			return -1;
		}
		if (!next_token(&p, tok, sizeof(tok))) {
			say(err, errlen, "%s: %d hops announced, fewer given", where, s->nhops);
			return -1;
		}
		if (ld_parse_u64(tok, delay, &v) < 0) {
			say(err, errlen, "%s: jitter '%s' of hop %d is not a whole number of "
			    "microseconds in 0..%llu (its delay)", where, tok, h + 1,
			    (unsigned long long)delay);
			return -1;
		}
		s->delay_us[h] = (uint32_t)delay;
		s->jitter_us[h] = (uint32_t)v;
	}
	if (next_token(&p, tok, sizeof(tok))) {
		say(err, errlen, "%s: more values than the %d hops announced", where, s->nhops);
		return -1;
	}
	return 0;
}

static int by_addr(const void *a, const void *b)
{
	uint32_t x = ((const struct ld_source *)a)->addr, y = ((const struct ld_source *)b)->addr;
	return x < y ? -1 : x > y;
}

int ld_load_config(FILE *f, const char *name, struct ld_table *t, char *err, size_t errlen)
{
	char line[LD_LINE_MAX], where[LD_ERR_MAX / 2];
	size_t cap = 0;
	int lineno = 0;

	t->v = NULL;
	t->n = 0;
	while (fgets(line, sizeof(line), f)) {
		const char *p = line;
		struct ld_source s;
		lineno++;
		snprintf(where, sizeof(where), "%s:%d", name, lineno);
		if (!strchr(line, '\n') && !feof(f)) {
			say(err, errlen, "%s: line longer than %d bytes", where, LD_LINE_MAX - 2);
			goto fail;
		}
		while (isspace((unsigned char)*p))
			p++;
		if (*p == '#' || *p == '\0')
			continue;
		if (t->n == LD_MAX_SOURCES) {
			say(err, errlen, "%s: more than %d sources", where, LD_MAX_SOURCES);
			goto fail;
		}
		memset(&s, 0, sizeof(s));
		s.line = lineno;
		if (parse_line(p, where, &s, err, errlen) < 0)
			goto fail;
		if (t->n == cap) {
			struct ld_source *grown;
			cap = cap ? 2 * cap : 64;
			grown = realloc(t->v, cap * sizeof(*grown));
			if (!grown) {
				say(err, errlen, "%s: out of memory", where);
				goto fail;
			}
			t->v = grown;
		}
		t->v[t->n++] = s;
	}
	if (ferror(f)) {
		say(err, errlen, "%s: read error: %s", name, strerror(errno));
		goto fail;
	}
	qsort(t->v, t->n, sizeof(*t->v), by_addr);
	for (size_t i = 1; i < t->n; i++) {
		if (t->v[i].addr == t->v[i - 1].addr) {
			struct in_addr a = {htonl(t->v[i].addr)};
			int first = t->v[i].line < t->v[i - 1].line ? t->v[i].line : t->v[i - 1].line;
			int again = t->v[i].line < t->v[i - 1].line ? t->v[i - 1].line : t->v[i].line;
			say(err, errlen, "%s:%d: source %s appears again (first on line %d)",
			    name, again, inet_ntoa(a), first);
			goto fail;
		}
	}
	return 0;
fail:
	ld_free_table(t);
	return -1;
}

void ld_free_table(struct ld_table *t)
{
	free(t->v);
	t->v = NULL;
	t->n = 0;
}

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
