/*
 * linkdelay_check's serialisation commands (see the usage in linkdelay_check.c): they drive
 * linkdelay_wire.c with packets given on the command line, so tests/test_linkdelay_unit.py
 * can compare the link clocks with closed-form times and the length reader with packets
 * scapy builds; and the lateness histogram (late) the daemon's stats print.
 */
#define _GNU_SOURCE
#include "linkdelay_check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* The second table of serialise-shared and clock-race: the same config, the clocks of fd. */
static struct ld_table second;

static void share(struct ld_table *t, int fd)
{
	char err[LD_ERR_MAX];
	if (ld_share_clocks(t, fd, err, sizeof(err)) < 0) {
		fprintf(stderr, "linkdelay: %s\n", err);
		exit(2);
	}
}

static int shared_memory(void)
{
	int fd = memfd_create("linkdelay-check-clocks", 0);
	if (fd < 0) {
		fprintf(stderr, "linkdelay_check: memfd_create: %s\n", strerror(errno));
		exit(1);
	}
	return fd;
}

static void load_second(const char *path, int fd)
{
	struct ld_table first = table;
	load(path);
	second = table;
	table = first;
	share(&table, fd);
	share(&second, fd);
}

int cmd_serialise(int argc, char **argv, int shared)
{
	load(argv[0]);
	if (shared)
		load_second(argv[0], shared_memory());
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
		/* shared: odd packets through the second table, as another worker would */
		if (shared && i % 2 == 0)
			s = &second.v[s - table.v];
		printf("%s%llu", i > 1 ? ", " : "", (unsigned long long)ld_serialise(
			shared && i % 2 == 0 ? &second : &table, s, number(f[1]),
			(uint32_t)number(f[2]), (uint32_t)number(f[3])));
		free(arg);
	}
	printf("], \"links\": [");
	for (size_t i = 0; i < table.nlinks; i++)
		printf("%s%llu", i ? ", " : "", (unsigned long long)(table.links[i].busy_ns +
			(shared ? second.links[i].busy_ns : 0)));
	printf("]}\n");
	return 0;
}

int cmd_clock_race(char **argv)
{
	uint64_t count = number(argv[2]), busy[2] = {0, 0};
	int fd = shared_memory(), pipes[2][2], go[2];
	char byte;
	struct ld_source *s;
	pid_t pids[2];

	load(argv[0]);
	share(&table, fd);
	if (!(s = ld_find(&table, addr_of(argv[1]))) || !s->nvia) {
		fprintf(stderr, "linkdelay_check: %s is not in the config with a rated link\n", argv[1]);
		return 2;
	}
	if (pipe(go) < 0) {
		perror("linkdelay_check: pipe");
		return 1;
	}
	for (int w = 0; w < 2; w++) {
		if (pipe(pipes[w]) < 0 || (pids[w] = fork()) < 0) {
			perror("linkdelay_check: fork");
			return 1;
		}
		if (pids[w] == 0) {         /* a worker: count frames of 100 bytes, all ready at 0 */
			close(go[1]);
			if (read(go[0], &byte, 1) != 0)     /* both start when the parent closes it */
				_exit(1);
			for (uint64_t k = 0; k < count; k++)
				ld_serialise(&table, s, 0, 100, 28);
			if (write(pipes[w][1], &table.links[s->via[0]].busy_ns, 8) != 8)
				_exit(1);
			_exit(0);
		}
	}
	close(go[1]);
	for (int w = 0; w < 2; w++) {
		int status;
		if (read(pipes[w][0], &busy[w], 8) != 8 || waitpid(pids[w], &status, 0) < 0 ||
		    !WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "linkdelay_check: a racing worker failed\n");
			return 1;
		}
	}
	/* every frame was ready at 0, so the first link never idled: its clock is its work */
	printf("{\"clock_ns\": %llu, \"busy_ns\": %llu}\n",
	       (unsigned long long)table.clocks[s->via[0]], (unsigned long long)(busy[0] + busy[1]));
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
