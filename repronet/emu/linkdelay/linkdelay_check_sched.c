/*
 * linkdelay_check's scheduling commands (see the usage in linkdelay_check.c): they drive
 * linkdelay_sched.c (the signal mask, the busy-poll budget, the learned spin window, the
 * regular sleep, the real-time budget and the lazy reads) with times given on the command
 * line, so tests/test_linkdelay_unit.py can check them without a queue; overshoot measures.
 */
#define _GNU_SOURCE
#include "linkdelay_check.h"
#include "linkdelay_sched.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

int cmd_wait_signal(void)
{
	sigset_t wait_mask;
	uint64_t timeout = 10000000000ull;
	int rv;
	if (ld_signals_setup(&wait_mask) < 0)
		return 1;
	if (ld_stats_flag || ld_stop_flag)      /* the loop's flag check: nothing pending yet */
		return 1;
	raise(SIGUSR1);                         /* arrives between that check and the wait */
	rv = ld_wait(NULL, 0, &timeout, &wait_mask);
	printf("{\"woke\": \"%s\"}\n", rv < 0 && errno == EINTR && ld_stats_flag ? "signal" : "timeout");
	return 0;
}

int cmd_spin(int argc, char **argv)
{
	struct ld_spin s;
	ld_spin_init(&s, number(argv[0]), (unsigned)number(argv[1]));
	printf("{\"sleep_ns\": [");
	for (int i = 2; i < argc; i++) {
		char *wait = strchr(argv[i], ':'), *spent;
		uint64_t now, sleep;
		if (!wait) {
			fprintf(stderr, "linkdelay_check: '%s' is not NOW_NS:WAIT_NS\n", argv[i]);
			exit(2);
		}
		*wait++ = '\0';
		if ((spent = strchr(wait, ':')))
			*spent++ = '\0';
		now = number(argv[i]);
		sleep = ld_spin_timeout(&s, now, number(wait));
		if (sleep == 0)
			ld_spin_charge(&s, now, now + (spent ? number(spent) : 0));
		printf("%s%llu", i > 2 ? ", " : "", (unsigned long long)sleep);
	}
	printf("], \"spun_ns\": %llu, \"exhausted\": %llu}\n", (unsigned long long)s.total_ns,
	       (unsigned long long)s.windows_exhausted);
	return 0;
}

int cmd_lazy(int argc, char **argv)
{
	struct ld_lazy l = {number(argv[0]), number(argv[1]), (int)number(argv[2]),
			    (int)number(argv[3]), 0, 0};
	int watch;
	uint64_t at = ld_lazy_wake(&l, argc == 6, argc == 6 ? number(argv[5]) : 0, &watch);
	if (at == UINT64_MAX)
		printf("{\"wake_ns\": null");
	else
		printf("{\"wake_ns\": %llu", (unsigned long long)at);
	printf(", \"watch\": %d, \"read_due\": %d}\n", watch,
	       ld_lazy_read_due(&l, number(argv[4])));
	return 0;
}

int cmd_learn(int argc, char **argv)
{
	struct ld_spin s;
	ld_spin_init(&s, number(argv[0]), 250);
	printf("{\"spin_ns\": [");
	for (int i = 1; i < argc; i++) {
		ld_spin_learn(&s, 1000000ull, 1000000ull + number(argv[i]));
		printf("%s%llu", i > 1 ? ", " : "", (unsigned long long)s.spin_ns);
	}
	printf("], \"quantile_ns\": %llu, \"max_ns\": %llu}\n",
	       (unsigned long long)s.quantile_ns, (unsigned long long)s.overshoot_max_ns);
	return 0;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int cmd_overshoot(char **argv)
{
	uint64_t count = number(argv[0]), asked = number(argv[1]), *over;
	char err[LD_ERR_MAX];
	sigset_t mask;
	struct ld_spin s;

	if (!count || count > MAX_PACKETS || !(over = malloc(count * sizeof(*over))))
		return 2;
	if (ld_sched_apply((unsigned)number(argv[2]), 1000, err, sizeof(err)) < 0) {
		fprintf(stderr, "linkdelay_check: %s\n", err);
		return 1;
	}
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	sigprocmask(SIG_SETMASK, NULL, &mask);
	ld_spin_init(&s, LD_MAX_SPIN_US, 1000);
	for (uint64_t i = 0; i < count; i++) {
		uint64_t before = mono_ns(), wait = asked;
		ld_wait(NULL, 0, &wait, &mask);
		over[i] = mono_ns() - before - asked;
		ld_spin_learn(&s, asked, over[i] + asked);
	}
	printf("{\"p50_ns\": %llu, ", (unsigned long long)ld_quantile(over, count, 0.5));
	printf("\"p90_ns\": %llu, \"p99_ns\": %llu, \"max_ns\": %llu, \"spin_ns\": %llu}\n",
	       (unsigned long long)ld_quantile(over, count, 0.9),
	       (unsigned long long)ld_quantile(over, count, 0.99),
	       (unsigned long long)over[count - 1], (unsigned long long)s.spin_ns);
	free(over);
	return 0;
}

int cmd_rttime(char **argv)
{
	uint64_t budget = number(argv[0]), spin = number(argv[1]) * 1000000ull, start = mono_ns();
	int regular = number(argv[2]) != 0;
	char err[LD_ERR_MAX];
	struct ld_block b;

	if (!budget || budget > LD_MAX_RT_BUDGET_MS)
		return 2;
	if (ld_sched_apply(10, (unsigned)budget, err, sizeof(err)) < 0) {
		fprintf(stderr, "linkdelay_check: %s\n", err);
		return 1;
	}
	ld_block_init(&b, budget * 1000000ull / 4, start, ld_block_read_self);
	while (!ld_rt_demoted && mono_ns() - start < spin) {
		if (regular && ld_block_due(&b, mono_ns(), ld_block_read_self)) {
			struct timespec nap = {0, (long)LD_FORCED_SLEEP_NS};
			clock_nanosleep(CLOCK_MONOTONIC, 0, &nap, NULL);
		}
	}
	printf("{\"demoted\": %d, \"demoted_after_ms\": ", (int)ld_rt_demoted);
	if (ld_rt_demoted)
		printf("%.1f", (ld_rt_demoted_ns - start) / 1e6);
	else
		printf("null");
	printf(", \"forced\": %llu}\n", (unsigned long long)b.forced);
	return 0;
}

/*
 * yield SPIN_MS YIELD: two SCHED_FIFO 10 processes pinned to CPU 0, as two hosts' workers
 * would be. The child sleeps until 5 ms after the start and reports how late it woke; the
 * parent busy-polls (ppoll with a zero timeout, as a spinning daemon does) until SPIN_MS,
 * calling ld_spin_yield after each pass when YIELD is 1. Without the yield the woken child
 * cannot run until the spin ends (FIFO has no time slice). Needs root.
 * {"late_us": N, "yields_slow": N, "yield_slow_ms": N}
 */
int cmd_yield(char **argv)
{
	uint64_t spin = number(argv[0]) * 1000000ull, start, due;
	int yield = number(argv[1]) != 0, fds[2];
	char err[LD_ERR_MAX];
	struct ld_spin s;
	cpu_set_t cpu0;
	pid_t child;
	double late_us = -1;

	CPU_ZERO(&cpu0);
	CPU_SET(0, &cpu0);
	if (sched_setaffinity(0, sizeof(cpu0), &cpu0) < 0 ||
	    ld_sched_apply(10, LD_MAX_RT_BUDGET_MS, err, sizeof(err)) < 0 ||
	    sched_getscheduler(0) != SCHED_FIFO || pipe(fds) < 0) {
		fprintf(stderr, "linkdelay_check: cannot run two SCHED_FIFO processes on CPU 0 "
			"(needs root)\n");
		return 1;
	}
	ld_spin_init(&s, LD_MAX_SPIN_US, 1000);
	s.fifo = 1;                     /* checked above */
	start = mono_ns();
	due = start + 5000000ull;
	child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		struct timespec at = {(time_t)(due / 1000000000ull), (long)(due % 1000000000ull)};
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR)
			;
		late_us = (mono_ns() - due) / 1e3;
		if (write(fds[1], &late_us, sizeof(late_us)) != sizeof(late_us))
			_exit(1);
		_exit(0);
	}
	while (mono_ns() - start < spin) {
		struct timespec zero = {0, 0};
		if (ppoll(NULL, 0, &zero, NULL) == 0 && yield)
			ld_spin_yield(&s, mono_ns);
	}
	if (read(fds[0], &late_us, sizeof(late_us)) != sizeof(late_us))
		return 1;
	waitpid(child, NULL, 0);
	printf("{\"late_us\": %.1f, \"yields_slow\": %llu, \"yield_slow_ms\": %.3f}\n", late_us,
	       (unsigned long long)s.yields_slow, s.yield_slow_ns / 1e6);
	return 0;
}

static long scripted_nvcsw;
static uint64_t scripted_cpu;

static void read_scripted(long *nvcsw, uint64_t *cpu_ns)
{
	*nvcsw = scripted_nvcsw;
	*cpu_ns = scripted_cpu;
}

int cmd_block(int argc, char **argv)
{
	struct ld_block b;
	ld_block_init(&b, number(argv[0]), 0, read_scripted);
	printf("{\"due\": [");
	for (int i = 1; i < argc; i++) {
		char *count = strchr(argv[i], ':'), *cpu = count ? strchr(count + 1, ':') : NULL;
		if (!cpu) {
			fprintf(stderr, "linkdelay_check: '%s' is not NOW_NS:NVCSW:CPU_NS\n", argv[i]);
			exit(2);
		}
		*count++ = '\0';
		*cpu++ = '\0';
		scripted_nvcsw = (long)number(count);
		scripted_cpu = number(cpu);
		printf("%s%d", i > 1 ? ", " : "", ld_block_due(&b, number(argv[i]), read_scripted));
	}
	printf("], \"forced\": %llu}\n", (unsigned long long)b.forced);
	return 0;
}
