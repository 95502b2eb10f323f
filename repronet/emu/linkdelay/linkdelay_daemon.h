/*
 * The linkdelay daemon's state shared by linkdelay.c (the packet path and the loop),
 * linkdelay_release.c (the verdicts that release held packets) and linkdelay_report.c (its JSON
 * lines and control input): defined in linkdelay.c unless marked.
 */
#ifndef LINKDELAY_DAEMON_H
#define LINKDELAY_DAEMON_H

#include "linkdelay_core.h"
#include "linkdelay_sched.h"

#define CONTROL_MAX 256
#define LD_VERDICT_BATCH_MAX 64     /* verdicts in one netlink send at most (--verdict-batch) */

struct nfq_q_handle;

extern struct ld_table table;
extern struct ld_heap heap;
extern uint64_t seed, host_id;
extern uint64_t arrivals, accepted, dropped, unknown, enobufs, verdict_errors;
extern uint64_t late_ns_sum, late_ns_max, late_max_at_ns, released, verdict_ns_sum;
extern uint64_t queued_ns_sum, queued_ns_max, stamped, unstamped;
extern uint64_t serialised, serial_ns_sum, serial_ns_max;
extern uint64_t late_read_ns_sum, late_chain_ns_sum, late_wake_ns_sum, late_hist[LD_LATE_BUCKETS];
extern unsigned rt_priority, rt_budget_ms;
extern struct ld_spin spin;
extern struct ld_block block;
extern struct ld_lazy lazy;
extern uint64_t start_ns;
extern uint64_t verdict_sends;              /* linkdelay_release.c */
extern unsigned verdict_batch;

void print_schedule(void);                  /* the scheduling fields of ready and stats lines */
void print_stats(const char *event);        /* one {"event": event, ...} line, flushed */
void control(char *buf, size_t *len);       /* act on the complete lines in buf, keep the rest */
void usage(const char *why, const char *arg);                   /* one line, exit 2 */
uint64_t flag_number(const char *flag, const char *text, uint64_t max); /* or exit 2 */
double unix_seconds(uint64_t mono_ns);      /* a CLOCK_MONOTONIC time as Unix seconds */
uint64_t now_ns(void);                      /* CLOCK_MONOTONIC in ns */
void ld_release_init(struct nfq_q_handle *qh, int fd, unsigned queue);  /* linkdelay_release.c */
void verdict(uint32_t id, uint32_t what);   /* one verdict in its own message */
uint64_t release_due(uint64_t now);         /* accept what is due; the time after */

#endif
