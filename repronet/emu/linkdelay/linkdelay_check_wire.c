/*
 * linkdelay_check's serialisation commands (see the usage in linkdelay_check.c): they drive
 * linkdelay_wire.c with packets given on the command line, so tests/test_linkdelay_unit.py
 * can compare the link clocks with closed-form times and the length reader with packets
 * scapy builds; and the lateness histogram (late) the daemon's stats print.
 */
#define _GNU_SOURCE
#include "linkdelay_check.h"

#include <stdlib.h>
#include <string.h>

int cmd_serialise(int argc, char **argv)
{
	load(argv[0]);
	printf("{\"done_ns\": [");
	for (int i = 1; i < argc; i++) {
		char *f[4], *save = NULL, *arg = strdup(argv[i]);
		int n = 0;
		struct ld_source *s;
		for (char *tok = strtok_r(arg, ":", &save); tok && n < 4; tok = strtok_r(NULL, ":", &save))
			f[n++] = tok;
		if (n != 4) {
			fprintf(stderr, "linkdelay_check: '%s' is not IP:READY_NS:IP_LEN:HDR_LEN\n",
				argv[i]);
			return 2;
		}
		if (!(s = ld_find(&table, addr_of(f[0])))) {
			fprintf(stderr, "linkdelay_check: %s is not in the config\n", f[0]);
			return 2;
		}
		printf("%s%llu", i > 1 ? ", " : "", (unsigned long long)ld_serialise(
			&table, s, number(f[1]), (uint32_t)number(f[2]), (uint32_t)number(f[3])));
		free(arg);
	}
	printf("], \"links\": [");
	for (size_t i = 0; i < table.nlinks; i++)
		printf("%s%llu", i ? ", " : "", (unsigned long long)table.links[i].busy_ns);
	printf("]}\n");
	return 0;
}

int cmd_wire(const char *hex)
{
	unsigned char bytes[40];
	uint32_t ip_len, hdr_len;
	int n = 0;

	while (n < (int)sizeof(bytes) && hex[2 * n] && hex[2 * n + 1]) {
		char pair[3] = {hex[2 * n], hex[2 * n + 1], 0}, *end;
		bytes[n] = (unsigned char)strtoul(pair, &end, 16);
		if (*end) {
			fprintf(stderr, "linkdelay_check: '%s' is not hexadecimal\n", pair);
			return 2;
		}
		n++;
	}
	if (ld_wire_lengths(bytes, n, &ip_len, &hdr_len) < 0)
		printf("{\"ip_len\": null}\n");
	else
		printf("{\"ip_len\": %u, \"hdr_len\": %u}\n", ip_len, hdr_len);
	return 0;
}

int cmd_late(int argc, char **argv)
{
	uint64_t hist[LD_LATE_BUCKETS] = {0};
	static const double qs[] = {0.5, 0.9, 0.99};
	for (int i = 0; i < argc; i++)
		hist[ld_late_bucket(number(argv[i]))]++;
	printf("{\"hist\": [");
	for (unsigned k = 0; k < LD_LATE_BUCKETS; k++)
		printf("%s%llu", k ? ", " : "", (unsigned long long)hist[k]);
	printf("], \"bounds_us\": [");
	for (unsigned i = 0; i < 3; i++) {
		uint64_t b = ld_late_bound_us(hist, qs[i]);
		if (b == UINT64_MAX)
			printf("%snull", i ? ", " : "");
		else
			printf("%s%llu", i ? ", " : "", (unsigned long long)b);
	}
	printf("]}\n");
	return 0;
}
