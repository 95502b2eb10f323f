/*
 * How the linkdelay daemon gets a CPU on time (issue 15), apart from the netfilter queue so
 * linkdelay_check.c can drive the busy-poll budget without root.
 *
 * Two mechanisms, each bounded so that a daemon cannot starve the node processes whose
 * network it emulates:
 *
 * - Real-time class: SCHED_FIFO at a low priority (--rt-priority), so a daemon woken by a
 *   packet or its timer runs at once instead of queueing behind busy node processes. Bounds:
 *   the kernel's RT throttle (/proc/sys/kernel/sched_rt_runtime_us: RT tasks get at most that
 *   share of each period) and the daemon's own RLIMIT_RTTIME (--rt-budget-ms): a daemon that
 *   runs that long without blocking gets SIGXCPU, and its handler drops it to SCHED_OTHER for
 *   the rest of its life (counted in its stats as rt_demoted).
 * - Busy-poll: a timer wake-up costs tens of microseconds here, as much as a LAN link's whole
 *   delay. So the daemon sleeps until --spin-us before the next deadline and polls the queue
 *   without sleeping for the rest. Bound: the polling may use at most --spin-permille of one
 *   CPU over each SPIN_WINDOW_NS; past that the daemon sleeps to the deadline until the next
 *   window (the budget below decides, and counts what it spent).
 */
#ifndef LINKDELAY_SCHED_H
#define LINKDELAY_SCHED_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#define LD_SPIN_WINDOW_NS 100000000ull   /* 100 ms: the busy-poll budget's accounting window */
#define LD_MAX_SPIN_US 1000u
#define LD_MAX_RT_BUDGET_MS 10000u

struct ld_spin {
	uint64_t spin_ns;               /* busy-poll when the next deadline is this close */
	uint64_t budget_ns;             /* busy-poll time allowed per window */
	uint64_t window_start, used_ns; /* the current window and what it spent */
	uint64_t total_ns;              /* busy-poll time over the daemon's life */
	uint64_t windows_exhausted;     /* windows whose budget ran out */
};

/* permille of one CPU; spin_us 0 turns busy-polling off. */
void ld_spin_init(struct ld_spin *s, uint64_t spin_us, unsigned permille);

/*
 * How long to sleep before the next deadline, wait_ns away, at time now: the whole wait when
 * polling is off or its budget is spent, else the wait minus spin_ns (0: poll without sleeping).
 */
uint64_t ld_spin_timeout(struct ld_spin *s, uint64_t now, uint64_t wait_ns);

/* Charge a pass of the loop that polled without sleeping, from..to (ns). */
void ld_spin_charge(struct ld_spin *s, uint64_t from, uint64_t to);

extern volatile sig_atomic_t ld_rt_demoted;

/*
 * Ask for SCHED_FIFO at priority (0: stay SCHED_OTHER) with the RLIMIT_RTTIME bound; on
 * failure write one sentence to err and return -1 (the daemon then runs SCHED_OTHER and
 * says so). Returns 0 otherwise.
 */
int ld_sched_apply(unsigned priority, unsigned budget_ms, char *err, size_t errlen);

/* The policy the daemon runs under now: "fifo", "other", ... */
const char *ld_sched_policy(void);

#endif
