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
 *   delay. So the daemon sleeps until a spin window before the next deadline and polls the
 *   queue without sleeping for the rest. Bound: the polling may use at most --spin-permille of
 *   one CPU over each SPIN_WINDOW_NS; past that the daemon sleeps to the deadline until the
 *   next window (the budget below decides, and counts what it spent).
 * - The spin window is learned, not fixed: how late a timed sleep wakes depends on the machine
 *   and on its load (in this nested VM a sleep that starts on an idle CPU wakes 100-200 us
 *   late, on a busy one 5-40 us), so a fixed window is either too short (late) or too long
 *   (CPU). Every sleep that ends by its timeout adds its overshoot (woke minus asked) to a
 *   ring of the last LD_SPIN_SAMPLES; the window is their LD_SPIN_QUANTILE quantile plus
 *   LD_SPIN_MARGIN_NS, at least LD_SPIN_FLOOR_NS and at most --spin-us (the hard cap, also
 *   the window until LD_SPIN_MIN_SAMPLES sleeps were seen).
 * - Blocking regularly: the kernel resets a task's RLIMIT_RTTIME count only when it wakes from
 *   a sleep. Under heavy traffic the queue always has a packet ready and the spin never
 *   sleeps, so a daemon could run its budget out and drop to SCHED_OTHER for good while doing
 *   exactly its job. ld_block_due says when the daemon has not slept for a quarter of its
 *   budget (it reads its voluntary context switches to know); the daemon then sleeps
 *   LD_FORCED_SLEEP_NS, which costs one wake-up's lateness a few times a second at most.
 * - Lazy reads (struct ld_lazy): a real-time daemon woken by every arriving packet preempts
 *   the node processes once per packet; at a gigabit with 1,000-byte writes that is 125,000
 *   wake-ups a second per daemon, and the transfers got 0.40-0.51 of the rate where the same
 *   daemons without the real-time class got 0.92 (with holds 1.7-2.7 ms late). But a hold
 *   counts from the kernel's arrival stamp, so a packet need not be read when it arrives,
 *   only before its deadline: no packet can be due sooner than the least hold any source
 *   draws (min_hold_ns) after it arrived. So while packets are held, the daemon leaves the
 *   queue alone and sleeps until the earlier of the next deadline and its last read plus
 *   min_hold_ns, then reads everything that came meanwhile; it reads nothing sooner (before
 *   then nothing unread can be due, so a pass that woke for a deadline or polls in its spin
 *   window leaves the queue alone). It watches the queue as before
 *   when nothing is held (the first packet must wake it), when a read stopped at its cap
 *   with more waiting, when a path has no hold (min_hold_ns 0), and for good once a packet
 *   came without a stamp (its hold would count from a late read).
 */
#ifndef LINKDELAY_SCHED_H
#define LINKDELAY_SCHED_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#define LD_SPIN_WINDOW_NS 100000000ull   /* 100 ms: the busy-poll budget's accounting window */
#define LD_MAX_SPIN_US 1000u
#define LD_MAX_RT_BUDGET_MS 10000u
#define LD_SPIN_SAMPLES 128             /* overshoots remembered (a ring) */
#define LD_SPIN_MIN_SAMPLES 16          /* below this many the window is the cap */
#define LD_SPIN_RELEARN 16              /* recompute the window every this many samples */
#define LD_SPIN_QUANTILE 0.95
#define LD_SPIN_MARGIN_NS 5000ull
#define LD_SPIN_FLOOR_NS 10000ull
#define LD_FORCED_SLEEP_NS 20000ull     /* long enough that the timer cannot fire before the
					   task is off the CPU, so it really sleeps */

struct ld_spin {
	uint64_t spin_ns;               /* busy-poll when the next deadline is this close */
	uint64_t cap_ns;                /* the window's hard cap (--spin-us) */
	uint64_t budget_ns;             /* busy-poll time allowed per window */
	uint64_t window_start, used_ns; /* the current window and what it spent */
	uint64_t total_ns;              /* busy-poll time over the daemon's life */
	uint64_t windows_exhausted;     /* windows whose budget ran out */
	uint64_t ring[LD_SPIN_SAMPLES]; /* the last overshoots of timed sleeps, ns */
	uint64_t samples;               /* overshoots seen over the daemon's life */
	uint64_t quantile_ns;           /* LD_SPIN_QUANTILE of the ring when last learned */
	uint64_t overshoot_max_ns;      /* the largest overshoot seen */
	int fifo;                       /* set once SCHED_FIFO is in force: only then yield */
	uint64_t yields_slow;           /* yields that came back late (ld_spin_yield) */
	uint64_t yield_slow_ns;         /* their time */
};

/* cap_us: the spin window's hard cap (0 turns busy-polling off); permille of one CPU. */
/*
 * Why a spinning pass yields (ld_spin_yield): under SCHED_FIFO a daemon that busy-polls for
 * its next deadline keeps its CPU from every other real-time task of its priority until that
 * deadline, and FIFO has no time slice. With one worker per CPU (linkemu_workers) every host's
 * worker k is pinned to CPU k, so the kernel cannot move a woken worker to the other CPU:
 * a worker whose timer fired waited behind another host's spinning worker (dht8 at its
 * default scale: 15-17 us of late wake-ups on average with the workers, 10-11 with one
 * unpinned daemon per host). After a pass that found nothing to read, the spinner calls
 * sched_yield(), which puts it behind the other runnable tasks of its priority on its CPU
 * and returns at once when there are none.
 */
void ld_spin_init(struct ld_spin *s, uint64_t cap_us, unsigned permille);

/*
 * A sleep asked for asked_ns ended by its timeout after slept_ns: learn its overshoot (the
 * window moves every LD_SPIN_RELEARN samples, see the top of this file).
 */
void ld_spin_learn(struct ld_spin *s, uint64_t asked_ns, uint64_t slept_ns);

/* After a spinning pass that found nothing: yield to a real-time task of the same priority
 * waiting for this CPU (only when s->fifo, set by the caller once SCHED_FIFO is in force,
 * and the daemon has not been demoted since: no system call to ask each pass). Counts the yields that came
 * back more than LD_YIELD_SLOW_NS later, and their time: another task ran meanwhile, or the
 * hypervisor took the CPU (a lone spinner on an idle CPU still sees some, so this says how
 * much the yields cost, not exactly how often a peer ran). */
#define LD_YIELD_SLOW_NS 10000ull
void ld_spin_yield(struct ld_spin *s, uint64_t (*clock)(void));

/* The q quantile (0..1, nearest rank) of v[0..n), n > 0; sorts v in place. */
uint64_t ld_quantile(uint64_t *v, size_t n, double q);

/*
 * How long to sleep before the next deadline, wait_ns away, at time now: the whole wait when
 * polling is off or its budget is spent, else the wait minus spin_ns (0: poll without sleeping).
 */
uint64_t ld_spin_timeout(struct ld_spin *s, uint64_t now, uint64_t wait_ns);

/* Charge a pass of the loop that polled without sleeping, from..to (ns). */
void ld_spin_charge(struct ld_spin *s, uint64_t from, uint64_t to);

/*
 * Has the daemon slept lately? The kernel counts the CPU time an RT task runs between
 * sleeps, so this does too. period_ns: the most CPU the daemon may use without sleeping (a
 * quarter of its RLIMIT_RTTIME budget; 0 turns the check off). ld_block_due is called once
 * per pass of the loop; every period_ns / LD_BLOCK_CHECKS of wall time it reads the daemon's
 * voluntary context switch count and CPU time through read() (getrusage in the daemon, a
 * script in linkdelay_check). When the count moved, the daemon slept since the previous read
 * (to be safe: right after it). Returns 1 when the CPU used since then reaches period_ns:
 * the daemon must sleep now. A forced sleep counts only once the next read sees the switch
 * count move: a short sleep whose timer fires before the task is switched out (a vCPU held
 * up between arming the timer and scheduling) never blocks and resets nothing in the kernel,
 * so the next read asks again instead of trusting it (seen here: 1 run in 7 of the rttime
 * root test was demoted while its regular sleep was on).
 */
#define LD_BLOCK_CHECKS 8
struct ld_block {
	uint64_t period_ns;
	uint64_t last_check_ns;         /* wall time of the last read */
	long nvcsw;                     /* the count at the last read */
	uint64_t cpu_check_ns;          /* CPU time at the last read */
	uint64_t cpu_sleep_ns;          /* CPU time when it last slept, at the earliest */
	uint64_t forced;                /* sleeps ld_block_due asked for */
};
typedef void ld_block_reader(long *nvcsw, uint64_t *cpu_ns);
void ld_block_init(struct ld_block *b, uint64_t period_ns, uint64_t now, ld_block_reader *read);
int ld_block_due(struct ld_block *b, uint64_t now, ld_block_reader *read);

struct ld_lazy {
	uint64_t min_hold_ns;           /* the least hold a source can draw (0: never lazy) */
	uint64_t read_at_ns;            /* when the last read of the queue began */
	int off;                        /* set for good: a packet came without a stamp */
	int pending;                    /* the last read stopped at its cap, more may wait */
	uint64_t reads;                 /* reads made without the queue waking the daemon */
	uint64_t woken;                 /* reads made because the queue woke the daemon */
};

/*
 * The next wake-up: with held packets (next deadline at deadline_ns) returns the time to wake
 * by and sets *watch to whether the queue must wake the daemon too; with none returns
 * UINT64_MAX and *watch = 1 (wait for the queue alone).
 */
uint64_t ld_lazy_wake(const struct ld_lazy *l, int held, uint64_t deadline_ns, int *watch);

/*
 * Must a pass that the queue did not wake (watch 0) read it at time now? Only once the least
 * hold has passed since the last read: until then nothing unread can be due, and a pass that
 * woke for a deadline or polls in its spin window would read for nothing.
 */
int ld_lazy_read_due(const struct ld_lazy *l, uint64_t now);

/* The reader of the calling thread itself (getrusage). */
void ld_block_read_self(long *nvcsw, uint64_t *cpu_ns);

/* Set when SIGXCPU moved the daemon to SCHED_OTHER; ld_rt_demoted_ns: CLOCK_MONOTONIC then. */
extern volatile sig_atomic_t ld_rt_demoted;
extern volatile uint64_t ld_rt_demoted_ns;

/*
 * Ask for SCHED_FIFO at priority (0: stay SCHED_OTHER) with the RLIMIT_RTTIME bound; on
 * failure write one sentence to err and return -1 (the daemon then runs SCHED_OTHER and
 * says so). Returns 0 otherwise.
 */
int ld_sched_apply(unsigned priority, unsigned budget_ms, char *err, size_t errlen);

/* The policy the daemon runs under now: "fifo", "other", ... */
const char *ld_sched_policy(void);

#endif
