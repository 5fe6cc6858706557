/*
 * vt_loopback: an ordinary libibverbs program (system <infiniband/verbs.h>,
 * linked with -libverbs) that moves verified data with every opcode between
 * QPs of one process: RC SEND, SEND_WITH_IMM, RDMA_WRITE,
 * RDMA_WRITE_WITH_IMM, RDMA_READ, ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD;
 * UC SEND and RDMA_WRITE; UD SEND and SEND_WITH_IMM with the GRH. Run it
 * with urvt-run. Exit 0 on success, 1 on the first mismatch.
 *
 *   gcc vt_loopback.c -libverbs -o vt_loopback && urvt-run ./vt_loopback
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#define BUF 65536
#define NSGE 4

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static uint8_t *mem;
static struct ibv_mr *mr;
static union ibv_gid gid;
static int failures;

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "FAIL: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	failures++;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Poll until n completions arrived (or 5 s passed). */
static int poll_n(struct ibv_wc *wc, int n)
{
	int got = 0;
	double end = now_s() + 5;

	while (got < n && now_s() < end) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0)
			return -1;
		got += r;
	}
	return got;
}

static struct ibv_qp *make_qp(enum ibv_qp_type type)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = NSGE,
			 .max_recv_sge = NSGE, .max_inline_data = 64 },
		.qp_type = type,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);

	if (!qp)
		perror("ibv_create_qp");
	return qp;
}

static int to_rts(struct ibv_qp *qp, uint32_t dqpn)
{
	struct ibv_qp_attr a;
	int type = qp->qp_type;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	if (type == IBV_QPT_UD) {
		a.qkey = 0x11111111;
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
			return -1;
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTR;
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
			return -1;
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0;
		return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) ? -1 : 0;
	}
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			    (type == IBV_QPT_RC ? IBV_ACCESS_REMOTE_ATOMIC : 0);
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dqpn;
	a.rq_psn = 0;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (type == IBV_QPT_RC) {
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 1;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	if (ibv_modify_qp(qp, &a, mask))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (type == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return ibv_modify_qp(qp, &a, mask) ? -1 : 0;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 131 + seed * 7 + (i >> 8));
}

static int post_recv_sg(struct ibv_qp *qp, uint64_t wr_id, uint8_t *buf, uint32_t len, int nsge)
{
	struct ibv_sge sge[NSGE];
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = sge, .num_sge = nsge }, *bad;
	uint32_t chunk = len / (uint32_t)nsge;

	for (int i = 0; i < nsge; i++) {
		sge[i].addr = (uintptr_t)(buf + (uint32_t)i * chunk);
		sge[i].length = i == nsge - 1 ? len - (uint32_t)i * chunk : chunk;
		sge[i].lkey = mr->lkey;
	}
	return ibv_post_recv(qp, &wr, &bad);
}

/* Post one send WR gathering len bytes from src in nsge pieces. */
static int post_send_sg(struct ibv_qp *qp, enum ibv_wr_opcode op, uint8_t *src, uint32_t len,
			int nsge, uint64_t raddr, uint32_t rkey, uint32_t imm,
			struct ibv_ah *ah, uint32_t rqpn)
{
	struct ibv_sge sge[NSGE];
	struct ibv_send_wr wr, *bad;
	uint32_t chunk = nsge ? len / (uint32_t)nsge : 0;

	memset(&wr, 0, sizeof(wr));
	for (int i = 0; i < nsge; i++) {
		sge[i].addr = (uintptr_t)(src + (uint32_t)i * chunk);
		sge[i].length = i == nsge - 1 ? len - (uint32_t)i * chunk : chunk;
		sge[i].lkey = mr->lkey;
	}
	wr.wr_id = 0x5000 + (uint64_t)op;
	wr.sg_list = sge;
	wr.num_sge = nsge;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(imm);
	if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ) {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	if (ah) {
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = rqpn;
		wr.wr.ud.remote_qkey = 0x11111111;
	}
	return ibv_post_send(qp, &wr, &bad);
}

static void expect_wc(struct ibv_wc *wc, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len,
		      const char *what)
{
	if (wc->status != IBV_WC_SUCCESS)
		fail("%s: status %s", what, ibv_wc_status_str(wc->status));
	else if (wc->wr_id != wr_id || wc->opcode != op || wc->byte_len != len)
		fail("%s: wc wr_id %#llx opcode %d byte_len %u (want %#llx %d %u)", what,
		     (unsigned long long)wc->wr_id, wc->opcode, wc->byte_len,
		     (unsigned long long)wr_id, op, len);
}

/* wc holds one send-side and one receive-side completion, in either order. */
static void pair_sort(struct ibv_wc wc[2], struct ibv_wc **s, struct ibv_wc **r)
{
	*s = (wc[0].opcode & IBV_WC_RECV) ? &wc[1] : &wc[0];
	*r = (wc[0].opcode & IBV_WC_RECV) ? &wc[0] : &wc[1];
}

/* Two completions in either order: one send-side, one receive-side. */
static int pair(struct ibv_wc wc[2], struct ibv_wc **s, struct ibv_wc **r)
{
	if (poll_n(wc, 2) != 2)
		return -1;
	pair_sort(wc, s, r);
	return 0;
}

/*
 * A UC or UD SEND: unreliable by definition (no ACK, no retransmission), so
 * over a link on a loaded host a datagram may be lost (a full socket
 * buffer). One whose receive does not complete goes again, three times at
 * most, to the receive WQE posted once; what arrives must still be right.
 * 0 with the send's and the receive's completions, or -1.
 */
static int send_unreliable(struct ibv_qp *a, enum ibv_wr_opcode op, uint8_t *src, uint32_t len,
			   int nsge, uint32_t imm, struct ibv_ah *ah, uint32_t rqpn,
			   struct ibv_wc wc[2], struct ibv_wc **s, struct ibv_wc **r)
{
	for (int t = 0; t < 3; t++) {
		int n;

		if (post_send_sg(a, op, src, len, nsge, 0, 0, imm, ah, rqpn))
			return -1;
		n = poll_n(wc, 2);
		if (n == 2) {
			pair_sort(wc, s, r);
			return 0;
		}
		if (n == 1 && (wc[0].opcode & IBV_WC_RECV))
			return -1; /* a receive without its send's completion */
		printf("note: %s datagram lost, sent again\n", ah ? "UD" : "UC");
	}
	return -1;
}

static void test_connected(enum ibv_qp_type type, uint32_t len)
{
	const char *tn = type == IBV_QPT_RC ? "RC" : "UC";
	struct ibv_qp *a = make_qp(type), *b = make_qp(type);
	uint8_t *src = mem, *dst = mem + BUF, *rd = mem + 2 * BUF;
	struct ibv_wc wc[2], *s, *r;
	char what[64];

	if (!a || !b || to_rts(a, b->qp_num) || to_rts(b, a->qp_num)) {
		fail("%s: setup", tn);
		return;
	}
	/* SEND and SEND_WITH_IMM, gathered from and scattered into NSGE pieces */
	for (int imm = 0; imm < 2; imm++) {
		snprintf(what, sizeof(what), "%s %s %u B", tn, imm ? "SEND_WITH_IMM" : "SEND", len);
		fill(src, len, 1 + (unsigned)imm);
		memset(dst, 0, len);
		post_recv_sg(b, 0x77, dst, len, NSGE);
		if (type == IBV_QPT_UC ?
			    send_unreliable(a, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, src, len,
					    NSGE, 0xabcd, NULL, 0, wc, &s, &r) :
			    post_send_sg(a, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, src, len, NSGE,
					 0, 0, 0xabcd, NULL, 0) || pair(wc, &s, &r)) {
			fail("%s: post/poll", what);
			continue;
		}
		expect_wc(s, 0x5000 + (imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND), IBV_WC_SEND, len, what);
		expect_wc(r, 0x77, IBV_WC_RECV, len, what);
		if (imm && (!(r->wc_flags & IBV_WC_WITH_IMM) || ntohl(r->imm_data) != 0xabcd))
			fail("%s: imm", what);
		if (r->src_qp != a->qp_num || r->qp_num != b->qp_num)
			fail("%s: qp numbers", what);
		if (memcmp(src, dst, len))
			fail("%s: data", what);
	}
	/* RDMA_WRITE */
	snprintf(what, sizeof(what), "%s RDMA_WRITE %u B", tn, len);
	fill(src, len, 3);
	memset(dst, 0, len);
	if (post_send_sg(a, IBV_WR_RDMA_WRITE, src, len, NSGE, (uintptr_t)dst, mr->rkey, 0, NULL, 0) ||
	    poll_n(wc, 1) != 1)
		fail("%s: post/poll", what);
	else
		expect_wc(&wc[0], 0x5000 + IBV_WR_RDMA_WRITE, IBV_WC_RDMA_WRITE, len, what);
	/* a UC WRITE completes when it is sent: over a link (URVT_PATH=shm,
	 * udp) the data lands a little later; give it a bounded moment, and
	 * send it again (three times at most) if it was lost on the way
	 * (unreliable: send_unreliable) */
	for (int t = 0; type == IBV_QPT_UC && t < 3 && memcmp(src, dst, len); t++) {
		if (t) {
			printf("note: UC WRITE lost, sent again\n");
			if (post_send_sg(a, IBV_WR_RDMA_WRITE, src, len, NSGE, (uintptr_t)dst,
					 mr->rkey, 0, NULL, 0) || poll_n(wc, 1) != 1)
				break;
		}
		for (int ms = 0; ms < 2000 && memcmp(src, dst, len); ms++)
			usleep(1000);
	}
	if (memcmp(src, dst, len))
		fail("%s: data", what);
	if (type == IBV_QPT_UC)
		goto out;
	/* RDMA_WRITE_WITH_IMM */
	snprintf(what, sizeof(what), "%s RDMA_WRITE_WITH_IMM %u B", tn, len);
	fill(src, len, 4);
	memset(dst, 0, len);
	post_recv_sg(b, 0x78, rd, 16, 1);
	if (post_send_sg(a, IBV_WR_RDMA_WRITE_WITH_IMM, src, len, NSGE, (uintptr_t)dst, mr->rkey,
			 0x1234, NULL, 0) || pair(wc, &s, &r)) {
		fail("%s: post/poll", what);
	} else {
		expect_wc(s, 0x5000 + IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WC_RDMA_WRITE, len, what);
		expect_wc(r, 0x78, IBV_WC_RECV_RDMA_WITH_IMM, len, what);
		if (ntohl(r->imm_data) != 0x1234)
			fail("%s: imm", what);
	}
	if (memcmp(src, dst, len))
		fail("%s: data", what);
	/* RDMA_READ into NSGE pieces */
	snprintf(what, sizeof(what), "%s RDMA_READ %u B", tn, len);
	fill(dst, len, 5);
	memset(rd, 0, len);
	if (post_send_sg(a, IBV_WR_RDMA_READ, rd, len, NSGE, (uintptr_t)dst, mr->rkey, 0, NULL, 0) ||
	    poll_n(wc, 1) != 1)
		fail("%s: post/poll", what);
	else
		expect_wc(&wc[0], 0x5000 + IBV_WR_RDMA_READ, IBV_WC_RDMA_READ, len, what);
	if (memcmp(rd, dst, len))
		fail("%s: data", what);
	/* Atomics on an 8-byte aligned word */
	{
		uint64_t *target = (uint64_t *)(void *)(mem + 3 * BUF);
		uint64_t *result = (uint64_t *)(void *)(mem + 3 * BUF + 64);
		struct ibv_sge sge = { .addr = (uintptr_t)result, .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr wr, *bad;

		*target = 1000;
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 0xf1;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.atomic.remote_addr = (uintptr_t)target;
		wr.wr.atomic.rkey = mr->rkey;
		wr.wr.atomic.compare_add = 23;
		if (ibv_post_send(a, &wr, &bad) || poll_n(wc, 1) != 1)
			fail("RC FETCH_AND_ADD: post/poll");
		else
			expect_wc(&wc[0], 0xf1, IBV_WC_FETCH_ADD, 8, "RC FETCH_AND_ADD");
		if (*result != 1000 || *target != 1023)
			fail("RC FETCH_AND_ADD: orig %llu target %llu", (unsigned long long)*result,
			     (unsigned long long)*target);
		wr.wr_id = 0xf2;
		wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		wr.wr.atomic.compare_add = 1023;
		wr.wr.atomic.swap = 77;
		if (ibv_post_send(a, &wr, &bad) || poll_n(wc, 1) != 1)
			fail("RC CMP_AND_SWP: post/poll");
		else
			expect_wc(&wc[0], 0xf2, IBV_WC_COMP_SWAP, 8, "RC CMP_AND_SWP");
		if (*result != 1023 || *target != 77)
			fail("RC CMP_AND_SWP: orig %llu target %llu", (unsigned long long)*result,
			     (unsigned long long)*target);
		/* a failing compare leaves the target alone */
		wr.wr.atomic.compare_add = 1;
		wr.wr.atomic.swap = 5;
		if (ibv_post_send(a, &wr, &bad) || poll_n(wc, 1) != 1 || *result != 77 || *target != 77)
			fail("RC CMP_AND_SWP (no swap)");
	}
out:
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	if (!failures)
		printf("ok  %s loopback, %u-byte messages: all opcodes verified\n", tn, len);
}

static void test_ud(uint32_t len)
{
	struct ibv_qp *a = make_qp(IBV_QPT_UD), *b = make_qp(IBV_QPT_UD);
	struct ibv_ah_attr aha = { .is_global = 1, .port_num = 1 };
	uint8_t *src = mem, *dst = mem + BUF;
	struct ibv_wc wc[2], *s, *r;
	struct ibv_ah *ah;
	char what[64];

	aha.grh.dgid = gid;
	aha.grh.hop_limit = 64;
	if (!a || !b || to_rts(a, 0) || to_rts(b, 0) || !(ah = ibv_create_ah(pd, &aha))) {
		fail("UD: setup");
		return;
	}
	for (int imm = 0; imm < 2; imm++) {
		snprintf(what, sizeof(what), "UD %s %u B", imm ? "SEND_WITH_IMM" : "SEND", len);
		fill(src, len, 9 + (unsigned)imm);
		memset(dst, 0, len + 40);
		post_recv_sg(b, 0x99, dst, len + 40, 1);
		if (send_unreliable(a, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, src, len, 2, 0x4242,
				    ah, b->qp_num, wc, &s, &r)) {
			fail("%s: post/poll", what);
			continue;
		}
		expect_wc(s, 0x5000 + (imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND), IBV_WC_SEND, len, what);
		expect_wc(r, 0x99, IBV_WC_RECV, len + 40, what);
		if (!(r->wc_flags & IBV_WC_GRH) || r->src_qp != a->qp_num)
			fail("%s: GRH flag / src_qp", what);
		/* GRH image: 20 zero bytes, then the IPv4 header (roce-wire §11) */
		for (int i = 0; i < 20; i++)
			if (dst[i])
				fail("%s: GRH byte %d", what, i);
		if (dst[20] != 0x45 || dst[29] != 17 || memcmp(dst + 32, &gid.raw[12], 4) ||
		    memcmp(dst + 36, &gid.raw[12], 4))
			fail("%s: GRH IPv4 header", what);
		if (memcmp(dst + 40, src, len))
			fail("%s: data", what);
		if (imm && ntohl(r->imm_data) != 0x4242)
			fail("%s: imm", what);
	}
	ibv_destroy_ah(ah);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	if (!failures)
		printf("ok  UD loopback, %u-byte messages with GRH: SEND, SEND_WITH_IMM verified\n", len);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	static const uint32_t sizes[] = { 1, 8, 1000, 4096, 65536 };

	if (!list || !list[0]) {
		fprintf(stderr, "no RDMA device (run me with urvt-run)\n");
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	if (!ctx || ibv_query_gid(ctx, 1, 0, &gid)) {
		perror("open/query gid");
		return 1;
	}
	printf("device %s\n", ibv_get_device_name(list[0]));
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	mem = aligned_alloc(4096, 4 * BUF);
	mr = mem && pd ? ibv_reg_mr(pd, mem, 4 * BUF,
				    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
		       : NULL;
	if (!cq || !mr) {
		perror("setup");
		return 1;
	}
	/* a rereg that changes no PD must not look at the pd argument
	 * (pyverbs passes whatever it holds) */
	if (ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, (struct ibv_pd *)(uintptr_t)0x6d37e7,
			 NULL, 0,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				 IBV_ACCESS_REMOTE_ATOMIC))
		fail("rereg_mr CHANGE_ACCESS with a stray pd: %s", strerror(errno));
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		test_connected(IBV_QPT_RC, sizes[i]);
		test_connected(IBV_QPT_UC, sizes[i]);
		if (sizes[i] <= 1024)
			test_ud(sizes[i]);
	}
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(mem);
	printf("%s\n", failures ? "FAILED" : "PASSED");
	return failures ? 1 : 0;
}
