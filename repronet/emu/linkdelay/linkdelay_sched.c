/*
 * The linkdelay daemon's scheduling: real-time class with its RLIMIT_RTTIME bound, the
 * busy-poll budget, the learned spin window and the regular sleep (see linkdelay_sched.h).
 */
#define _GNU_SOURCE
#include "linkdelay_sched.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

volatile sig_atomic_t ld_rt_demoted;
volatile uint64_t ld_rt_demoted_ns;

void ld_spin_init(struct ld_spin *s, uint64_t cap_us, unsigned permille)
{
	memset(s, 0, sizeof(*s));
	s->cap_ns = s->spin_ns = cap_us * 1000ull;
	s->budget_ns = LD_SPIN_WINDOW_NS / 1000ull * permille;
}

static int by_value(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

uint64_t ld_quantile(uint64_t *v, size_t n, double q)
{
	qsort(v, n, sizeof(v[0]), by_value);
	return v[(size_t)(q * (double)(n - 1) + 0.5)];
}

void ld_spin_learn(struct ld_spin *s, uint64_t asked_ns, uint64_t slept_ns)
{
	uint64_t over = slept_ns > asked_ns ? slept_ns - asked_ns : 0, sorted[LD_SPIN_SAMPLES];
	size_t n;

	s->ring[s->samples++ % LD_SPIN_SAMPLES] = over;
	if (over > s->overshoot_max_ns)
		s->overshoot_max_ns = over;
	if (!s->cap_ns || s->samples < LD_SPIN_MIN_SAMPLES || s->samples % LD_SPIN_RELEARN)
		return;
	n = s->samples < LD_SPIN_SAMPLES ? (size_t)s->samples : LD_SPIN_SAMPLES;
	memcpy(sorted, s->ring, n * sizeof(sorted[0]));
	s->quantile_ns = ld_quantile(sorted, n, LD_SPIN_QUANTILE);
	s->spin_ns = s->quantile_ns + LD_SPIN_MARGIN_NS;
	if (s->spin_ns < LD_SPIN_FLOOR_NS)
		s->spin_ns = LD_SPIN_FLOOR_NS;
	if (s->spin_ns > s->cap_ns)
		s->spin_ns = s->cap_ns;
}

static void roll(struct ld_spin *s, uint64_t now)
{
	if (now - s->window_start >= LD_SPIN_WINDOW_NS) {
		s->window_start = now;
		s->used_ns = 0;
	}
}

uint64_t ld_spin_timeout(struct ld_spin *s, uint64_t now, uint64_t wait_ns)
{
	if (!s->spin_ns || !s->budget_ns)
		return wait_ns;
	roll(s, now);
	if (s->used_ns >= s->budget_ns)
		return wait_ns;
	return wait_ns > s->spin_ns ? wait_ns - s->spin_ns : 0;
}

void ld_spin_yield(struct ld_spin *s, uint64_t (*clock)(void))
{
	uint64_t before, after;
	if (!s->fifo || ld_rt_demoted)
		return;
	before = clock();
	sched_yield();
	after = clock();
	if (after - before > LD_YIELD_SLOW_NS) {
		s->yields_slow++;
		s->yield_slow_ns += after - before;
	}
}

void ld_spin_charge(struct ld_spin *s, uint64_t from, uint64_t to)
{
	uint64_t spent = to > from ? to - from : 0;
	roll(s, from);
	s->total_ns += spent;
	if (s->used_ns < s->budget_ns && s->used_ns + spent >= s->budget_ns)
		s->windows_exhausted++;
	s->used_ns += spent;
}

void ld_block_init(struct ld_block *b, uint64_t period_ns, uint64_t now, ld_block_reader *read)
{
	memset(b, 0, sizeof(*b));
	b->period_ns = period_ns;
	b->last_check_ns = now;
	read(&b->nvcsw, &b->cpu_check_ns);
	b->cpu_sleep_ns = b->cpu_check_ns;
}

int ld_block_due(struct ld_block *b, uint64_t now, ld_block_reader *read)
{
	long count;
	uint64_t cpu;
	if (!b->period_ns || now - b->last_check_ns < b->period_ns / LD_BLOCK_CHECKS)
		return 0;
	read(&count, &cpu);
	if (count != b->nvcsw)
		b->cpu_sleep_ns = b->cpu_check_ns;
	b->nvcsw = count;
	b->cpu_check_ns = cpu;
	b->last_check_ns = now;
	if (cpu - b->cpu_sleep_ns < b->period_ns)
		return 0;
	b->forced++;     /* not counted as a sleep until the switch count shows it blocked */
	return 1;
}

void ld_block_read_self(long *nvcsw, uint64_t *cpu_ns)
{
	struct rusage ru;
	if (getrusage(RUSAGE_THREAD, &ru) < 0)
		memset(&ru, 0, sizeof(ru));
	*nvcsw = ru.ru_nvcsw;
	*cpu_ns = ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ull +
		  ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ull;
}

/* SIGXCPU: the daemon ran its RLIMIT_RTTIME without blocking; leave the RT class for good. */
static void on_xcpu(int sig)
{
	struct sched_param p = {.sched_priority = 0};
	struct timespec ts;
	(void)sig;
	if (sched_setscheduler(0, SCHED_OTHER, &p) == 0) {
		clock_gettime(CLOCK_MONOTONIC, &ts);   /* async-signal-safe */
		ld_rt_demoted_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		ld_rt_demoted = 1;
	}
}

int ld_sched_apply(unsigned priority, unsigned budget_ms, char *err, size_t errlen)
{
	struct sched_param p = {.sched_priority = (int)priority};
	struct rlimit rl = {(rlim_t)budget_ms * 1000u, RLIM_INFINITY};
	struct sigaction sa;

	if (!priority)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_xcpu;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGXCPU, &sa, NULL) < 0 || setrlimit(RLIMIT_RTTIME, &rl) < 0) {
		snprintf(err, errlen, "cannot bound the real-time class (RLIMIT_RTTIME): %s",
			 strerror(errno));
		return -1;
	}
	if (sched_setscheduler(0, SCHED_FIFO, &p) < 0) {
		snprintf(err, errlen, "SCHED_FIFO priority %u refused (%s), running SCHED_OTHER",
			 priority, strerror(errno));
		return -1;
	}
	return 0;
}

uint64_t ld_lazy_wake(const struct ld_lazy *l, int held, uint64_t deadline_ns, int *watch)
{
	uint64_t read_by = l->read_at_ns + l->min_hold_ns;
	*watch = !held || !l->min_hold_ns || l->off || l->pending;
	if (!held)
		return UINT64_MAX;
	return !*watch && read_by < deadline_ns ? read_by : deadline_ns;
}

int ld_lazy_read_due(const struct ld_lazy *l, uint64_t now)
{
	return now >= l->read_at_ns + l->min_hold_ns;
}

const char *ld_sched_policy(void)
{
	switch (sched_getscheduler(0)) {
	case SCHED_FIFO: return "fifo";
	case SCHED_RR: return "rr";
	case SCHED_OTHER: return "other";
	case SCHED_BATCH: return "batch";
	case SCHED_IDLE: return "idle";
	default: return "unknown";
	}
}
