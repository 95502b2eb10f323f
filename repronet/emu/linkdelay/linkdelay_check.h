/*
 * What linkdelay_check.c shares with the commands kept in their own files (so each file
 * stays short): the loaded config and the argument readers, which exit 2 with one line.
 */
#ifndef LINKDELAY_CHECK_H
#define LINKDELAY_CHECK_H

#include "linkdelay_core.h"

#define MAX_PACKETS 10000000ull         /* most packets or samples one command takes */

extern struct ld_table table;
void load(const char *path);
uint32_t addr_of(const char *text);
uint64_t number(const char *text);

int cmd_serialise(int argc, char **argv, int shared);   /* FILE IP:READY_NS:IP_LEN:HDR_LEN... */
int cmd_clock_race(char **argv);            /* FILE IP COUNT */
int cmd_wire(const char *hex);              /* HEX */
int cmd_late(int argc, char **argv);        /* LATE_NS... */

/* linkdelay_check_sched.c */
int cmd_wait_signal(void);
int cmd_spin(int argc, char **argv);        /* SPIN_US PERMILLE NOW_NS:WAIT_NS[:SPENT_NS]... */
int cmd_lazy(int argc, char **argv);        /* MIN_HOLD READ_AT OFF PENDING NOW [DEADLINE] */
int cmd_learn(int argc, char **argv);       /* CAP_US OVERSHOOT_NS... */
int cmd_overshoot(char **argv);             /* COUNT SLEEP_NS PRIORITY */
int cmd_rttime(char **argv);
int cmd_yield(char **argv);                /* BUDGET_MS SPIN_MS REGULAR */
int cmd_block(int argc, char **argv);       /* PERIOD_NS NOW_NS:NVCSW:CPU_NS... */

#endif
