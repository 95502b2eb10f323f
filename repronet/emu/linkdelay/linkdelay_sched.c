/*
 * The linkdelay daemon's scheduling: real-time class with its RLIMIT_RTTIME bound, and the
 * busy-poll budget (see linkdelay_sched.h for why).
 */
#define _GNU_SOURCE
#include "linkdelay_sched.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

volatile sig_atomic_t ld_rt_demoted;

void ld_spin_init(struct ld_spin *s, uint64_t spin_us, unsigned permille)
{
	memset(s, 0, sizeof(*s));
	s->spin_ns = spin_us * 1000ull;
	s->budget_ns = LD_SPIN_WINDOW_NS / 1000ull * permille;
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

void ld_spin_charge(struct ld_spin *s, uint64_t from, uint64_t to)
{
	uint64_t spent = to > from ? to - from : 0;
	roll(s, from);
	s->total_ns += spent;
	if (s->used_ns < s->budget_ns && s->used_ns + spent >= s->budget_ns)
		s->windows_exhausted++;
	s->used_ns += spent;
}

/* SIGXCPU: the daemon ran its RLIMIT_RTTIME without blocking; leave the RT class for good. */
static void on_xcpu(int sig)
{
	struct sched_param p = {.sched_priority = 0};
	(void)sig;
	if (sched_setscheduler(0, SCHED_OTHER, &p) == 0)
		ld_rt_demoted = 1;
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
