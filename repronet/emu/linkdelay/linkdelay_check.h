/*
 * What linkdelay_check.c shares with the commands kept in their own files (so each file
 * stays short): the loaded config and the argument readers, which exit 2 with one line.
 */
#ifndef LINKDELAY_CHECK_H
#define LINKDELAY_CHECK_H

#include "linkdelay_core.h"

extern struct ld_table table;
void load(const char *path);
uint32_t addr_of(const char *text);
uint64_t number(const char *text);

int cmd_serialise(int argc, char **argv);   /* FILE IP:READY_NS:IP_LEN:HDR_LEN... */
int cmd_wire(const char *hex);              /* HEX */
int cmd_late(int argc, char **argv);        /* LATE_NS... */

#endif
