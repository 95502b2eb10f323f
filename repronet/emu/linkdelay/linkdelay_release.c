/*
 * linkdelay's releases (see the file comment of linkdelay.c): the verdicts that let held
 * packets go once their deadline has passed, and the lateness they are counted with.
 *
 * Batched verdicts (--verdict-batch N, default 1): the packets due in one pass go to the
 * kernel as up to N verdict messages in one netlink send instead of one send each. The kernel
 * still carries each packet through the rest of its stack one after the other inside that
 * send, so a batch saves the system call and message set-up per packet, not the stack's work.
 * Inside a batch no packet's own release time can be read; each one's is taken as the send's
 * start plus its share of the send's duration by its place in the batch (the k-th of n at
 * start + k/n of it), which is what one verdict after another would have given if every
 * verdict cost the same. With N = 1 every packet's is read from the clock, as before.
 */
#define _GNU_SOURCE
#include "linkdelay_daemon.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <libnetfilter_queue/linux_nfnetlink_queue.h>
#include <string.h>
#include <sys/socket.h>

/* One verdict message as the kernel reads it: header, queue, one NFQA_VERDICT_HDR attribute. */
struct ld_verdict_msg {
	struct nlmsghdr nh;
	struct nfgenmsg g;
	struct nlattr a;
	struct nfqnl_msg_verdict_hdr v;
};

uint64_t verdict_sends;                     /* system calls that carried release verdicts */
unsigned verdict_batch = 1;
static struct nfq_q_handle *rel_qh;
static int rel_fd;
static unsigned rel_queue;

void ld_release_init(struct nfq_q_handle *qh, int fd, unsigned queue)
{
	rel_qh = qh;
	rel_fd = fd;
	rel_queue = queue;
}

/* One verdict in its own message (the packets that pass or drop at once, and N = 1). */
void verdict(uint32_t id, uint32_t what)
{
	if (nfq_set_verdict(rel_qh, id, what, 0, NULL) < 0)
		verdict_errors++;
}

/* NF_ACCEPT for n held packets in one send; 0, or -1 when the send failed. */
static int accept_batch(const struct ld_held *items, size_t n)
{
	static struct ld_verdict_msg msgs[LD_VERDICT_BATCH_MAX];
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	for (size_t i = 0; i < n; i++) {
		struct ld_verdict_msg *m = &msgs[i];
		memset(m, 0, sizeof(*m));
		m->nh.nlmsg_len = sizeof(*m);
		m->nh.nlmsg_type = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT;
		m->nh.nlmsg_flags = NLM_F_REQUEST;
		m->g.nfgen_family = AF_UNSPEC;
		m->g.version = NFNETLINK_V0;
		m->g.res_id = htons((uint16_t)rel_queue);
		m->a.nla_len = sizeof(m->a) + sizeof(m->v);
		m->a.nla_type = NFQA_VERDICT_HDR;
		m->v.verdict = htonl(NF_ACCEPT);
		m->v.id = htonl(items[i].id);
	}
	return sendto(rel_fd, msgs, n * sizeof(msgs[0]), 0, (struct sockaddr *)&kernel,
		      sizeof(kernel)) < 0 ? -1 : 0;
}

/*
 * Count one released packet's lateness at `at`, its release. The lateness is split three ways,
 * so a report can say where it came from: read (its deadline had passed when the daemon read it
 * from the queue), chain (it waited for earlier verdicts of this pass, which began at `pass`)
 * and wake (the rest: the pass began late, a timed sleep woke late or the daemon was busy
 * reading).
 */
static void count_release(const struct ld_held *item, uint64_t at, uint64_t pass)
{
	uint64_t late = at > item->deadline_ns ? at - item->deadline_ns : 0;
	uint64_t from = item->deadline_ns > pass ? item->deadline_ns : pass;
	uint64_t chain = at > from ? at - from : 0;
	uint64_t read;
	if (chain > late)
		chain = late;
	read = item->read_late_ns < late - chain ? item->read_late_ns : late - chain;
	late_ns_sum += late;
	late_chain_ns_sum += chain;
	late_read_ns_sum += read;
	late_wake_ns_sum += late - chain - read;
	late_hist[ld_late_bucket(late)]++;
	if (late > late_ns_max) {
		late_ns_max = late;
		late_max_at_ns = at;
	}
	accepted++;
	released++;
}

/*
 * Accept every held packet whose deadline has passed, up to verdict_batch per send; packets
 * that fall due during the sends go in the same pass. verdict_ns_sum is the time the sends
 * took. Returns the time after the last send.
 */
uint64_t release_due(uint64_t now)
{
	static struct ld_held due[LD_VERDICT_BATCH_MAX];
	uint64_t pass = now;
	while (heap.len && heap.v[0].deadline_ns <= now) {
		size_t n = 0;
		uint64_t done;
		while (n < verdict_batch && heap.len && heap.v[0].deadline_ns <= now)
			due[n++] = ld_heap_pop(&heap);
		if (n == 1) {
			verdict(due[0].id, NF_ACCEPT);
		} else if (accept_batch(due, n) < 0) {
			verdict_errors++;
			for (size_t i = 0; i < n; i++)  /* one at a time, so none stays queued */
				verdict(due[i].id, NF_ACCEPT);
		}
		done = now_ns();
		verdict_sends++;
		for (size_t i = 0; i < n; i++)
			count_release(&due[i], now + (done - now) * i / n, pass);
		verdict_ns_sum += done - now;
		now = done;
	}
	return now;
}
