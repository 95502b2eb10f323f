/*
 * linkdelay's serialisation: the time a packet takes to cross the rated links of its path.
 *
 * HTB (on each shaped interface's egress) keeps a link's long-run rate, but it lets a packet
 * out whole the moment its tokens allow, and a veth carries it in no time: a 1,500-byte
 * packet on an idle "100 Mbit/s" link arrived with none of the 120 us its bits take, and a
 * 64 KiB GSO packet (segmented only after the qdisc) arrived in one piece, its last byte
 * milliseconds early. The receiving host's daemon therefore keeps one clock per rated link
 * direction its sources' paths cross ("link ID RATE_BPS" in the config, shared by every
 * source whose path names it after "via") and sends each packet through them as the wire
 * would: cut into the MTU-sized frames a GSO packet becomes, each frame store-and-forward
 * over each link in path order, a link busy until its previous frame has left. The packet's
 * delay hold counts from when its last frame has left the last link.
 *
 * What it leaves out, said plainly: a link is shared with traffic this daemon never sees
 * (the sender's other destinations), which HTB alone accounts for; a GSO packet's frames are
 * taken at MTU size (a smaller MSS makes more frames than counted, so this clock never runs
 * slower than HTB's, which counts the real segments); dropped packets occupy no link.
 * Frames count as HTB counts them: the IP packet plus LD_L2_BYTES, no preamble or gap.
 */
#define _GNU_SOURCE
#include "linkdelay_core.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int ld_wire_lengths(const unsigned char *ip, int caplen, uint32_t *ip_len, uint32_t *hdr_len)
{
	uint32_t ihl, hdr;

	if (caplen < 20 || (ip[0] >> 4) != 4)
		return -1;
	ihl = (ip[0] & 15u) * 4u;
	*ip_len = ((uint32_t)ip[2] << 8) | ip[3];
	if (ihl < 20 || *ip_len == 0)   /* length 0: a >64 KiB (BIG TCP) packet; not enabled here */
		return -1;
	hdr = ihl;
	if (ip[9] == IPPROTO_TCP)
		hdr += caplen >= (int)ihl + 13 ? (ip[ihl + 12] >> 4) * 4u : 20u;
	else if (ip[9] == IPPROTO_UDP)
		hdr += 8;
	*hdr_len = hdr;
	return 0;
}

/* Take took ns of a link whose clock is *clock from at or when it is free, whichever is
 * later; return when that ends. Atomic: another worker may reserve the same link. */
static uint64_t reserve(uint64_t *clock, uint64_t at, uint64_t took)
{
	uint64_t free = __atomic_load_n(clock, __ATOMIC_ACQUIRE), end;
	do
		end = (free > at ? free : at) + took;
	while (!__atomic_compare_exchange_n(clock, &free, end, 0, __ATOMIC_ACQ_REL,
					    __ATOMIC_ACQUIRE));
	return end;
}

int ld_share_clocks(struct ld_table *t, int fd, char *err, size_t errlen)
{
	size_t bytes = (t->nlinks ? t->nlinks : 1) * sizeof(uint64_t);
	struct stat st;
	void *map;

	if (fstat(fd, &st) < 0 || ((size_t)st.st_size < bytes && ftruncate(fd, (off_t)bytes) < 0)) {
		snprintf(err, errlen, "cannot size the shared link clocks (fd %d): %s", fd,
			 strerror(errno));
		return -1;
	}
	map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		snprintf(err, errlen, "cannot map the shared link clocks (fd %d): %s", fd,
			 strerror(errno));
		return -1;
	}
	t->clocks = map;
	t->clocks_bytes = bytes;
	return 0;
}

uint64_t ld_serialise(struct ld_table *t, const struct ld_source *s, uint64_t ready_ns,
		      uint32_t ip_len, uint32_t hdr_len)
{
	uint32_t frames = 1, mss = 0, last = ip_len;
	uint64_t done = ready_ns;

	if (ip_len > LD_MTU && hdr_len < LD_MTU) {
		uint32_t payload = ip_len - hdr_len;
		mss = LD_MTU - hdr_len;
		frames = (payload + mss - 1) / mss;
		last = hdr_len + payload - (frames - 1) * mss;
	}
	for (uint32_t f = 0; f < frames && s->nvia; f++) {
		uint64_t bits = 8ull * ((f + 1 < frames ? LD_MTU : last) + LD_L2_BYTES), at = ready_ns;
		for (int h = 0; h < s->nvia; h++) {
			struct ld_link *l = &t->links[s->via[h]];
			uint64_t took = bits * 1000000000ull / l->rate_bps;   /* floor: never slower */
			at = reserve(t->clocks ? &t->clocks[s->via[h]] : &l->free_ns, at, took);
			l->busy_ns += took;
		}
		done = at;
	}
	for (int h = 0; h < s->nvia; h++)
		t->links[s->via[h]].packets++;
	return done;
}
