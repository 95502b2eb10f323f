/*
 * linkdelay's config parser (see linkdelay_core.h and the file comment of linkdelay.c).
 *
 * Config lines are checked field by field before the daemon binds its queue: a value that
 * does not fit (a delay over 2^32 us read with %u used to wrap to almost nothing) makes the
 * daemon exit with one sentence instead of running with the wrong delay.
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
#include <sys/mman.h>

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
		      size_t nlinks, char *err, size_t errlen)
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
		say(err, errlen, "%s: expected 'SRC_IPV4 LOSS NHOPS DELAY_US JITTER_US ... "
		    "[via LINK...]'", where);
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
	if (next_token(&p, tok, sizeof(tok)) && strcmp(tok, "via")) {
		say(err, errlen, "%s: more values than the %d hops announced", where, s->nhops);
		return -1;
	}
	while (next_token(&p, tok, sizeof(tok))) {     /* after "via": rated links, in order */
		if (s->nvia == s->nhops) {
			say(err, errlen, "%s: more links after 'via' than the %d hops", where, s->nhops);
			return -1;
		}
		if (ld_parse_u64(tok, nlinks ? nlinks - 1 : 0, &v) < 0 || !nlinks) {
			say(err, errlen, "%s: link '%s' after 'via' is not one declared above "
			    "(%zu 'link' lines)", where, tok, nlinks);
			return -1;
		}
		s->via[s->nvia++] = (uint32_t)v;
	}
	return 0;
}

/* Parse "link ID RATE_BPS" into t->links[ID]; IDs must come in order from 0. */
static int parse_link(const char *line, const char *where, struct ld_table *t,
		      char *err, size_t errlen)
{
	char tok[64];
	const char *p = line;
	uint64_t id, rate;
	struct ld_link *grown;

	next_token(&p, tok, sizeof(tok));      /* "link" */
	if (!next_token(&p, tok, sizeof(tok)) || ld_parse_u64(tok, LD_MAX_LINKS - 1, &id) < 0 ||
	    id != t->nlinks) {
		say(err, errlen, "%s: link id '%s' is not the next one (%zu)", where, tok, t->nlinks);
		return -1;
	}
	if (!next_token(&p, tok, sizeof(tok)) || ld_parse_u64(tok, LD_MAX_RATE_BPS, &rate) < 0 ||
	    rate == 0) {
		say(err, errlen, "%s: rate '%s' of link %llu is not a whole number of bits per "
		    "second in 1..%llu", where, tok, (unsigned long long)id, LD_MAX_RATE_BPS);
		return -1;
	}
	if (next_token(&p, tok, sizeof(tok))) {
		say(err, errlen, "%s: expected 'link ID RATE_BPS', found more", where);
		return -1;
	}
	grown = realloc(t->links, (t->nlinks + 1) * sizeof(*grown));
	if (!grown) {
		say(err, errlen, "%s: out of memory", where);
		return -1;
	}
	t->links = grown;
	t->links[t->nlinks++] = (struct ld_link){rate, 0, 0, 0};
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
	t->links = NULL;
	t->nlinks = 0;
	t->clocks = NULL;
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
		if (!strncmp(p, "link", 4) && isspace((unsigned char)p[4])) {
			if (parse_link(p, where, t, err, errlen) < 0)
				goto fail;
			continue;
		}
		memset(&s, 0, sizeof(s));
		s.line = lineno;
		if (parse_line(p, where, &s, t->nlinks, err, errlen) < 0)
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
	free(t->links);
	if (t->clocks)
		munmap(t->clocks, t->clocks_bytes);
	t->v = NULL;
	t->n = 0;
	t->links = NULL;
	t->nlinks = 0;
	t->clocks = NULL;
}
