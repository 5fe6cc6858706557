// SPDX-License-Identifier: MIT
/*
 * loopback_rate: in-process message rate of small RDMA WRITEs between two RC
 * QPs of one process (urvt's packet-free loopback), on one core. An ordinary
 * libibverbs program: compiled against the system <infiniband/verbs.h>,
 * linked with the system -libverbs, run with urvt-run.
 *
 *   urvt-run loopback_rate [-s SIZE] [-t SECONDS | -n WRS] [-c SIGNAL_EVERY]
 *                          [-d SQ_DEPTH] [-l POST_LIST] [-I]
 *
 * Every WR is an RDMA WRITE of SIZE bytes (default 8) from A's buffer to
 * B's; WRs are unsignaled except every SIGNAL_EVERY-th (default 64), and
 * after each post the sender polls its CQ once (ibv_poll_cq, 16 entries)
 * while signaled WRs are outstanding, so the SQ never overflows. -I posts
 * inline. -l posts lists of POST_LIST WRs per ibv_post_send (default 1).
 * -n runs a fixed count (for callgrind: --toggle-collect=bench_post_send
 * --toggle-collect=bench_poll_cq count exactly the verbs calls).
 *
 * Prints one line:
 *   RESULT loopback_rate size=8 wrs=N secs=T mwr_per_s=R posts=P polls=Q
 */
#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIST 64

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* The measured calls, kept out of line so callgrind can toggle on them. */
__attribute__((noinline)) int bench_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
					      struct ibv_send_wr **bad);
__attribute__((noinline)) int bench_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);

int bench_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return ibv_post_send(qp, wr, bad);
}

int bench_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, n, wc);
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ };

	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS);
}

static int to_rts(struct ibv_qp *qp, uint32_t dqpn, const union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				 .dest_qp_num = dqpn, .rq_psn = 0, .max_dest_rd_atomic = 1,
				 .min_rnr_timer = 1 };

	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					  IBV_QP_MAX_QP_RD_ATOMIC);
}

static void usage(void)
{
	fprintf(stderr, "usage: loopback_rate [-s SIZE] [-t SECONDS | -n WRS] [-c SIGNAL_EVERY]"
			" [-d SQ_DEPTH] [-l POST_LIST] [-I]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint32_t size = 8, sig_every = 64, depth = 1024, list = 1;
	double secs = 1.0;
	uint64_t fixed = 0;
	bool inl = false;
	int opt;

	while ((opt = getopt(argc, argv, "s:t:n:c:d:l:I")) != -1) {
		switch (opt) {
		case 's': size = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 't': secs = strtod(optarg, NULL); break;
		case 'n': fixed = strtoull(optarg, NULL, 0); break;
		case 'c': sig_every = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'd': depth = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'l': list = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'I': inl = true; break;
		default: usage();
		}
	}
	if (!size || size > 65536 || !sig_every || depth < 2 * sig_every || !list ||
	    list > MAX_LIST || sig_every % list || secs <= 0 || secs > 60)
		usage();

	int n;
	struct ibv_device **devs = ibv_get_device_list(&n);
	if (!devs || n < 1)
		die("ibv_get_device_list (run through urvt-run)");
	struct ibv_context *ctx = ibv_open_device(devs[0]);
	if (!ctx)
		die("ibv_open_device");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		die("ibv_query_gid");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, (int)depth, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !scq || !rcq)
		die("alloc_pd/create_cq");
	uint8_t *src = aligned_alloc(4096, 65536), *dst = aligned_alloc(4096, 65536);
	if (!src || !dst)
		die("aligned_alloc");
	memset(src, 0xab, 65536);
	memset(dst, 0, 65536);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, 65536, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, 65536,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!smr || !dmr)
		die("ibv_reg_mr");
	struct ibv_qp_init_attr qa = {
		.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = depth, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = inl ? size : 0 },
		.sq_sig_all = 0,
	};
	struct ibv_qp *a = ibv_create_qp(pd, &qa);
	struct ibv_qp *b = ibv_create_qp(pd, &qa);
	if (!a || !b)
		die("ibv_create_qp");
	if (to_init(a) || to_init(b) || to_rts(a, b->qp_num, &gid) || to_rts(b, a->qp_num, &gid))
		die("ibv_modify_qp");

	struct ibv_sge sge[MAX_LIST];
	struct ibv_send_wr wr[MAX_LIST], *bad;
	for (uint32_t i = 0; i < list; i++) {
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)src, .length = size,
					   .lkey = smr->lkey };
		wr[i] = (struct ibv_send_wr){ .wr_id = i, .sg_list = &sge[i], .num_sge = 1,
					      .opcode = IBV_WR_RDMA_WRITE,
					      .send_flags = inl ? IBV_SEND_INLINE : 0,
					      .next = i + 1 < list ? &wr[i + 1] : NULL };
		wr[i].wr.rdma.remote_addr = (uintptr_t)dst;
		wr[i].wr.rdma.rkey = dmr->rkey;
	}

	struct ibv_wc wc[16];
	uint64_t posted = 0, signaled = 0, completed = 0, posts = 0, polls = 0;
	uint64_t max_out = depth / sig_every - 1; /* signaled WRs in flight */
	double t0 = now_s(), t = t0;

	for (;;) {
		if (fixed ? posted >= fixed : ((posts & 1023) == 0 && (t = now_s()) - t0 >= secs))
			break;
		if (signaled - completed >= max_out) {
			/* SQ budget used up: wait for the oldest signaled WR */
			int r = bench_poll_cq(scq, 16, wc);
			polls++;
			if (r < 0)
				die("ibv_poll_cq");
			for (int i = 0; i < r; i++)
				if (wc[i].status != IBV_WC_SUCCESS) {
					fprintf(stderr, "completion error: %s\n",
						ibv_wc_status_str(wc[i].status));
					return 1;
				}
			completed += (uint64_t)r;
			continue;
		}
		/* the last WR of the list is signaled every sig_every WRs */
		bool sig = (posted + list) % sig_every == 0;
		wr[list - 1].send_flags = (inl ? IBV_SEND_INLINE : 0) | (sig ? IBV_SEND_SIGNALED : 0);
		if (bench_post_send(a, wr, &bad))
			die("ibv_post_send");
		posts++;
		posted += list;
		signaled += sig;
		if (signaled != completed) {
			int r = bench_poll_cq(scq, 16, wc);
			polls++;
			if (r < 0)
				die("ibv_poll_cq");
			for (int i = 0; i < r; i++)
				if (wc[i].status != IBV_WC_SUCCESS) {
					fprintf(stderr, "completion error: %s\n",
						ibv_wc_status_str(wc[i].status));
					return 1;
				}
			completed += (uint64_t)r;
		}
	}
	/* drain */
	double drain_end = now_s() + 5;
	while (completed < signaled && now_s() < drain_end) {
		int r = bench_poll_cq(scq, 16, wc);
		if (r < 0)
			die("ibv_poll_cq");
		completed += (uint64_t)r;
	}
	t = now_s();
	if (completed != signaled) {
		fprintf(stderr, "lost completions: %llu of %llu\n", (unsigned long long)completed,
			(unsigned long long)signaled);
		return 1;
	}
	if (dst[size - 1] != 0xab) {
		fprintf(stderr, "data did not arrive\n");
		return 1;
	}
	printf("RESULT loopback_rate size=%u wrs=%llu secs=%.3f mwr_per_s=%.3f posts=%llu "
	       "polls=%llu inline=%d list=%u signal_every=%u\n",
	       size, (unsigned long long)posted, t - t0, (double)posted / (t - t0) / 1e6,
	       (unsigned long long)posts, (unsigned long long)polls, inl, list, sig_every);

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(devs);
	free(src);
	free(dst);
	return 0;
}
