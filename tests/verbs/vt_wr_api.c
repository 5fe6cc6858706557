/*
 * vt_wr_api: the extended post API (ibv_create_qp_ex with send_ops_flags,
 * ibv_qp_to_qp_ex, ibv_wr_*) and the extended CQ (ibv_create_cq_ex,
 * start/next/end_poll, ibv_wc_read_*), as an ordinary libibverbs program:
 * system <infiniband/verbs.h>, linked with -libverbs, run with urvt-run.
 * Every send-side WR goes through ibv_wr_* (receives use ibv_post_recv:
 * there is no other way to post them).
 *
 *   RC, UC, UD loopback: every supported operation with verified data,
 *   multi-SGE, inline lists (copied at the setter), UD with the GRH and
 *   set_ud_addr before or after the data setter; batches of several WRs;
 *   wr_abort (nothing executes, PSNs stay in step); errors kept until
 *   wr_complete (bad lkey, too many SGEs, too much inline data, queue
 *   full, unsupported builders, setters without a builder, wrong state,
 *   first error wins) with nothing of the batch executed; create-time
 *   EOPNOTSUPP; ibv_qp_to_qp_ex on a plain QP; ibv_query_device_ex; three
 *   threads posting to one QP (two wr_* batches, one ibv_post_send).
 *
 * Exit 0 if everything held, 1 otherwise; every wait is bounded.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#define BUF 65536
#define NSGE 4
#define INL 128
#define QKEY 0x11111111u

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq_ex *scq, *rcq;
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

#define CHECK(cond, ...)                  \
	do {                              \
		if (!(cond))              \
			fail(__VA_ARGS__); \
	} while (0)


/* A UC WRITE completes when it is sent: over a link (URVT_PATH=shm, udp)
 * its data lands a little later. RC data is there at the completion.
 * True once dst holds what src does; gives up after 2 s. */
static bool landed(const void *src, const volatile void *dst, size_t len)
{
	for (int ms = 0; ms < 2000; ms++) {
		if (!memcmp(src, (const void *)dst, len))
			return true;
		usleep(1000);
	}
	return false;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Buffers inside the one registered region. */
static uint8_t *src_buf(int i)
{
	return mem + (size_t)i * BUF;
}
enum { SRC = 0, SRC2 = 1, DST = 2, DST2 = 3, RD = 4, MISC = 5, NBUF = 7 };

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 131 + seed * 7 + (i >> 8) + 1);
}

/* ------------------------------------------------------------------ */
/* Completions through the extended CQ                                */
/* ------------------------------------------------------------------ */
struct cqe {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, src_qp, imm;
	unsigned int flags;
};

static void read_cqe(struct ibv_cq_ex *cq, struct cqe *e)
{
	e->wr_id = cq->wr_id;
	e->status = cq->status;
	e->opcode = ibv_wc_read_opcode(cq);
	e->byte_len = ibv_wc_read_byte_len(cq);
	e->qp_num = ibv_wc_read_qp_num(cq);
	e->src_qp = ibv_wc_read_src_qp(cq);
	e->flags = ibv_wc_read_wc_flags(cq);
	e->imm = (e->flags & IBV_WC_WITH_IMM) ? ntohl(ibv_wc_read_imm_data(cq)) : 0;
}

/* Up to n completions, waiting at most timeout seconds for them. */
static int poll_cq(struct ibv_cq_ex *cq, struct cqe *out, int n, double timeout)
{
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	double end = now_s() + timeout;
	int got = 0;

	while (got < n && now_s() < end) {
		int ret = ibv_start_poll(cq, &attr);

		if (ret == ENOENT)
			continue;
		if (ret) {
			fail("ibv_start_poll: %d", ret);
			return -1;
		}
		for (;;) {
			read_cqe(cq, &out[got++]);
			if (got == n || ibv_next_poll(cq))
				break;
		}
		ibv_end_poll(cq);
	}
	return got;
}

/* Nothing more may arrive on either CQ within 'quiet' seconds. */
static void expect_quiet(const char *what, double quiet)
{
	struct cqe e;

	CHECK(poll_cq(scq, &e, 1, quiet) == 0, "%s: unexpected send completion wr_id %#llx", what,
	      (unsigned long long)e.wr_id);
	CHECK(poll_cq(rcq, &e, 1, 0.01) == 0, "%s: unexpected receive completion wr_id %#llx",
	      what, (unsigned long long)e.wr_id);
}

static void expect_cqe(const struct cqe *e, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len,
		       const char *what)
{
	if (e->status != IBV_WC_SUCCESS)
		fail("%s: status %s", what, ibv_wc_status_str(e->status));
	else if (e->wr_id != wr_id || e->opcode != op || e->byte_len != len)
		fail("%s: wr_id %#llx opcode %d byte_len %u (want %#llx %d %u)", what,
		     (unsigned long long)e->wr_id, e->opcode, e->byte_len,
		     (unsigned long long)wr_id, op, len);
}

/* ------------------------------------------------------------------ */
/* QPs                                                                */
/* ------------------------------------------------------------------ */
static const uint64_t ops_for[3] = {
	[0] = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_SEND_WITH_INV |
	      IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
	      IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
	      IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV,
	[1] = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
	      IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_LOCAL_INV,
	[2] = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
};

static int type_idx(enum ibv_qp_type t)
{
	return t == IBV_QPT_RC ? 0 : t == IBV_QPT_UC ? 1 : 2;
}

static struct ibv_qp *create_qp(enum ibv_qp_type type, uint64_t ops, struct ibv_cq_ex *sc,
				uint32_t max_send_wr)
{
	struct ibv_qp_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.send_cq = ibv_cq_ex_to_cq(sc);
	a.recv_cq = ibv_cq_ex_to_cq(rcq);
	a.cap.max_send_wr = max_send_wr;
	a.cap.max_recv_wr = 64;
	a.cap.max_send_sge = NSGE;
	a.cap.max_recv_sge = NSGE;
	a.cap.max_inline_data = INL;
	a.qp_type = type;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.pd = pd;
	a.send_ops_flags = ops;
	return ibv_create_qp_ex(ctx, &a);
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	if (qp->qp_type == IBV_QPT_UD) {
		a.qkey = QKEY;
		return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						     IBV_QP_QKEY);
	}
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			    (qp->qp_type == IBV_QPT_RC ? IBV_ACCESS_REMOTE_ATOMIC : 0);
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS);
}

static int to_rts(struct ibv_qp *qp, uint32_t dqpn)
{
	struct ibv_qp_attr a;
	int type = qp->qp_type, mask;

	if (to_init(qp))
		return -1;
	memset(&a, 0, sizeof(a));
	if (type == IBV_QPT_UD) {
		a.qp_state = IBV_QPS_RTR;
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
			return -1;
		a.qp_state = IBV_QPS_RTS;
		return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) ? -1 : 0;
	}
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dqpn;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (type == IBV_QPT_RC) {
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 1;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	if (ibv_modify_qp(qp, &a, mask))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
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

/* Post one receive of len bytes into nsge pieces (ibv_post_recv: the only way). */
static void post_recv(struct ibv_qp *qp, uint64_t wr_id, uint8_t *buf, uint32_t len, int nsge)
{
	struct ibv_sge sge[NSGE];
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = sge, .num_sge = nsge }, *bad;
	uint32_t chunk = len / (uint32_t)nsge;

	for (int i = 0; i < nsge; i++) {
		sge[i].addr = (uintptr_t)(buf + (uint32_t)i * chunk);
		sge[i].length = i == nsge - 1 ? len - (uint32_t)i * chunk : chunk;
		sge[i].lkey = mr->lkey;
	}
	if (ibv_post_recv(qp, &wr, &bad))
		fail("ibv_post_recv");
}

/* The send PSN the QP will use next: a batch that is not posted must not
 * consume any (the loopback path does not look at PSNs; a peer would). */
static uint32_t sq_psn(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(qp, &a, IBV_QP_SQ_PSN, &ia)) {
		fail("ibv_query_qp");
		return 0;
	}
	return a.sq_psn;
}

/* ------------------------------------------------------------------ */
/* Building WRs with ibv_wr_*                                         */
/* ------------------------------------------------------------------ */
enum data_kind { D_NONE, D_SGE, D_INLINE };

struct wrspec {
	enum ibv_wr_opcode op;
	uint64_t wr_id;
	unsigned int flags;
	enum data_kind data;
	uint8_t *buf;
	uint32_t len;
	int pieces;                /* D_SGE: 1 = set_sge, >1 = set_sge_list; D_INLINE: list */
	uint32_t lkey;             /* 0: mr->lkey */
	uint64_t raddr;
	uint32_t rkey;
	uint32_t imm;              /* host order; also the rkey of *_INV */
	uint64_t cmp, swp;
	struct ibv_ah *ah;         /* UD */
	uint32_t rqpn;
	bool ud_after;             /* set_ud_addr after the data setter */
};

static void set_data(struct ibv_qp_ex *qx, const struct wrspec *w)
{
	uint32_t lkey = w->lkey ? w->lkey : mr->lkey;
	int n = w->pieces > 0 ? w->pieces : 1;
	uint32_t chunk = w->len / (uint32_t)n;

	if (w->data == D_SGE && n == 1) {
		ibv_wr_set_sge(qx, lkey, (uintptr_t)w->buf, w->len);
	} else if (w->data == D_SGE) {
		struct ibv_sge sge[NSGE + 2];

		for (int i = 0; i < n; i++) {
			sge[i].addr = (uintptr_t)(w->buf + (uint32_t)i * chunk);
			sge[i].length = i == n - 1 ? w->len - (uint32_t)i * chunk : chunk;
			sge[i].lkey = lkey;
		}
		ibv_wr_set_sge_list(qx, (size_t)n, sge);
		memset(sge, 0xee, sizeof(sge)); /* the list is the caller's again */
	} else if (w->data == D_INLINE && n == 1) {
		ibv_wr_set_inline_data(qx, w->buf, w->len);
	} else if (w->data == D_INLINE) {
		struct ibv_data_buf b[8];

		for (int i = 0; i < n; i++) {
			b[i].addr = w->buf + (uint32_t)i * chunk;
			b[i].length = i == n - 1 ? w->len - (uint32_t)i * chunk : chunk;
		}
		ibv_wr_set_inline_data_list(qx, (size_t)n, b);
	}
}

static void build(struct ibv_qp_ex *qx, const struct wrspec *w)
{
	qx->wr_id = w->wr_id;
	qx->wr_flags = w->flags;
	switch (w->op) {
	case IBV_WR_SEND:
		ibv_wr_send(qx);
		break;
	case IBV_WR_SEND_WITH_IMM:
		ibv_wr_send_imm(qx, htonl(w->imm));
		break;
	case IBV_WR_SEND_WITH_INV:
		ibv_wr_send_inv(qx, w->imm);
		break;
	case IBV_WR_RDMA_WRITE:
		ibv_wr_rdma_write(qx, w->rkey, w->raddr);
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		ibv_wr_rdma_write_imm(qx, w->rkey, w->raddr, htonl(w->imm));
		break;
	case IBV_WR_RDMA_READ:
		ibv_wr_rdma_read(qx, w->rkey, w->raddr);
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		ibv_wr_atomic_cmp_swp(qx, w->rkey, w->raddr, w->cmp, w->swp);
		break;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		ibv_wr_atomic_fetch_add(qx, w->rkey, w->raddr, w->cmp);
		break;
	case IBV_WR_LOCAL_INV:
		ibv_wr_local_inv(qx, w->imm);
		break;
	default:
		fail("build: opcode %d", w->op);
		return;
	}
	if (w->ah && !w->ud_after)
		ibv_wr_set_ud_addr(qx, w->ah, w->rqpn, QKEY);
	set_data(qx, w);
	if (w->ah && w->ud_after)
		ibv_wr_set_ud_addr(qx, w->ah, w->rqpn, QKEY);
}

/* One batch of n WRs; returns wr_complete's result. */
static int post_batch(struct ibv_qp *qp, const struct wrspec *w, int n)
{
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);

	ibv_wr_start(qx);
	for (int i = 0; i < n; i++)
		build(qx, &w[i]);
	return ibv_wr_complete(qx);
}

static int post1(struct ibv_qp *qp, const struct wrspec *w)
{
	return post_batch(qp, w, 1);
}

/* ------------------------------------------------------------------ */
/* Creation                                                           */
/* ------------------------------------------------------------------ */
static void test_create(void)
{
	static const struct {
		enum ibv_qp_type type;
		uint64_t ops;
		const char *what;
	} bad[] = {
		{ IBV_QPT_RC, IBV_QP_EX_WITH_TSO, "RC TSO" },
		{ IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_WRITE, "UC ATOMIC_WRITE" },
		{ IBV_QPT_RC, 1ull << 11, "RC FLUSH (bit 11)" },
		{ IBV_QPT_RC, 1ull << 40, "RC unknown bit 40" },
		{ IBV_QPT_RC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO, "RC SEND|TSO" },
		{ IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ, "UC RDMA_READ" },
		{ IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, "UC CMP_AND_SWP" },
		{ IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, "UC FETCH_AND_ADD" },
		{ IBV_QPT_UC, IBV_QP_EX_WITH_SEND_WITH_INV, "UC SEND_WITH_INV" },
		{ IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE, "UD RDMA_WRITE" },
		{ IBV_QPT_UD, IBV_QP_EX_WITH_LOCAL_INV, "UD LOCAL_INV" },
		{ IBV_QPT_UD, IBV_QP_EX_WITH_TSO, "UD TSO" },
	};
	struct ibv_qp_init_attr pa = {
		.send_cq = ibv_cq_ex_to_cq(scq),
		.recv_cq = ibv_cq_ex_to_cq(rcq),
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		qp = create_qp(bad[i].type, bad[i].ops, scq, 16);
		CHECK(!qp && errno == EOPNOTSUPP, "create %s: qp %p errno %d, want EOPNOTSUPP",
		      bad[i].what, (void *)qp, errno);
		if (qp)
			ibv_destroy_qp(qp);
	}
	for (int t = 0; t < 3; t++) {
		enum ibv_qp_type type = t == 0 ? IBV_QPT_RC : t == 1 ? IBV_QPT_UC : IBV_QPT_UD;

		qp = create_qp(type, ops_for[t], scq, 16);
		if (!qp) {
			fail("create type %d with all its operations: errno %d", type, errno);
			continue;
		}
		CHECK(ibv_qp_to_qp_ex(qp) == (struct ibv_qp_ex *)qp,
		      "ibv_qp_to_qp_ex of a send-ops QP is not its embedded ibv_qp_ex");
		ibv_destroy_qp(qp);
		/* no operation at all is legal too */
		qp = create_qp(type, 0, scq, 16);
		CHECK(qp && ibv_qp_to_qp_ex(qp), "create type %d with send_ops_flags 0", type);
		if (qp)
			ibv_destroy_qp(qp);
	}
	/* a plain QP: NULL, errno untouched (rdma-core) */
	qp = ibv_create_qp(pd, &pa);
	if (!qp) {
		fail("ibv_create_qp: %d", errno);
	} else {
		errno = 12345;
		CHECK(!ibv_qp_to_qp_ex(qp) && errno == 12345,
		      "ibv_qp_to_qp_ex of a plain QP: want NULL with errno untouched");
		ibv_destroy_qp(qp);
	}
	if (!failures)
		printf("ok  create: supported send_ops_flags per type, EOPNOTSUPP for %zu bad sets, "
		       "qp_to_qp_ex NULL on a plain QP\n", sizeof(bad) / sizeof(bad[0]));
}

/* ------------------------------------------------------------------ */
/* Connected QPs: every operation, batches, abort, errors             */
/* ------------------------------------------------------------------ */
static void test_ops(struct ibv_qp *a, struct ibv_qp *b, const char *tn, uint32_t len)
{
	bool rc = a->qp_type == IBV_QPT_RC;
	uint8_t *src = src_buf(SRC), *dst = src_buf(DST), *rd = src_buf(RD);
	struct cqe s, r;
	char what[96];

	/* SEND and SEND_WITH_IMM, gathered from and scattered into NSGE pieces */
	for (int imm = 0; imm < 2; imm++) {
		struct wrspec w = { .op = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
				    .wr_id = 0x100u + (unsigned)imm, .flags = IBV_SEND_SIGNALED,
				    .data = D_SGE, .buf = src, .len = len,
				    .pieces = len >= NSGE ? NSGE : 1, .imm = 0xabcd0000u + len };

		snprintf(what, sizeof(what), "%s %s %u B", tn, imm ? "SEND_IMM" : "SEND", len);
		fill(src, len, 1 + (unsigned)imm);
		memset(dst, 0, len);
		post_recv(b, 0x77, dst, len, len >= NSGE ? NSGE : 1);
		if (post1(a, &w) || poll_cq(scq, &s, 1, 5) != 1 || poll_cq(rcq, &r, 1, 5) != 1) {
			fail("%s: post/poll", what);
			continue;
		}
		expect_cqe(&s, w.wr_id, IBV_WC_SEND, len, what);
		expect_cqe(&r, 0x77, IBV_WC_RECV, len, what);
		CHECK(r.qp_num == b->qp_num && r.src_qp == a->qp_num, "%s: qp numbers", what);
		CHECK(!imm || ((r.flags & IBV_WC_WITH_IMM) && r.imm == w.imm), "%s: imm", what);
		CHECK(!memcmp(src, dst, len), "%s: data", what);
	}
	/* RDMA_WRITE from NSGE pieces */
	{
		struct wrspec w = { .op = IBV_WR_RDMA_WRITE, .wr_id = 0x200,
				    .flags = IBV_SEND_SIGNALED, .data = D_SGE, .buf = src, .len = len,
				    .pieces = len >= NSGE ? NSGE : 1, .raddr = (uintptr_t)dst,
				    .rkey = mr->rkey };

		snprintf(what, sizeof(what), "%s RDMA_WRITE %u B", tn, len);
		fill(src, len, 3);
		memset(dst, 0, len);
		if (post1(a, &w) || poll_cq(scq, &s, 1, 5) != 1)
			fail("%s: post/poll", what);
		else
			expect_cqe(&s, 0x200, IBV_WC_RDMA_WRITE, len, what);
		CHECK(landed(src, dst, len), "%s: data", what);
	}
	/* RDMA_WRITE_WITH_IMM */
	{
		struct wrspec w = { .op = IBV_WR_RDMA_WRITE_WITH_IMM, .wr_id = 0x201,
				    .flags = IBV_SEND_SIGNALED, .data = D_SGE, .buf = src, .len = len,
				    .pieces = 1, .raddr = (uintptr_t)dst, .rkey = mr->rkey,
				    .imm = 0x1234 };

		snprintf(what, sizeof(what), "%s RDMA_WRITE_IMM %u B", tn, len);
		fill(src, len, 4);
		memset(dst, 0, len);
		post_recv(b, 0x78, rd, 16, 1);
		if (post1(a, &w) || poll_cq(scq, &s, 1, 5) != 1 || poll_cq(rcq, &r, 1, 5) != 1) {
			fail("%s: post/poll", what);
		} else {
			expect_cqe(&s, 0x201, IBV_WC_RDMA_WRITE, len, what);
			expect_cqe(&r, 0x78, IBV_WC_RECV_RDMA_WITH_IMM, len, what);
			CHECK(r.imm == 0x1234, "%s: imm", what);
		}
		CHECK(!memcmp(src, dst, len), "%s: data", what);
	}
	/* inline list: copied by the setter, so the source is scribbled on
	 * before wr_complete and the receiver must still see the original */
	if (len <= INL) {
		uint8_t ref[INL];
		struct wrspec w = { .op = IBV_WR_SEND, .wr_id = 0x300, .flags = IBV_SEND_SIGNALED,
				    .data = D_INLINE, .buf = src, .len = len,
				    .pieces = len >= 3 ? 3 : 1 };
		struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(a);

		snprintf(what, sizeof(what), "%s inline SEND %u B", tn, len);
		fill(src, len, 5);
		memcpy(ref, src, len);
		memset(dst, 0, len);
		post_recv(b, 0x79, dst, len, 1);
		ibv_wr_start(qx);
		build(qx, &w);
		memset(src, 0x5a, len);
		if (ibv_wr_complete(qx) || poll_cq(scq, &s, 1, 5) != 1 ||
		    poll_cq(rcq, &r, 1, 5) != 1) {
			fail("%s: post/poll", what);
		} else {
			expect_cqe(&s, 0x300, IBV_WC_SEND, len, what);
			expect_cqe(&r, 0x79, IBV_WC_RECV, len, what);
		}
		CHECK(!memcmp(ref, dst, len), "%s: data", what);

		snprintf(what, sizeof(what), "%s inline RDMA_WRITE %u B", tn, len);
		fill(src, len, 6);
		memcpy(ref, src, len);
		memset(dst, 0, len);
		w.op = IBV_WR_RDMA_WRITE;
		w.raddr = (uintptr_t)dst;
		w.rkey = mr->rkey;
		ibv_wr_start(qx);
		build(qx, &w);
		memset(src, 0xa5, len);
		if (ibv_wr_complete(qx) || poll_cq(scq, &s, 1, 5) != 1)
			fail("%s: post/poll", what);
		else
			expect_cqe(&s, 0x300, IBV_WC_RDMA_WRITE, len, what);
		CHECK(landed(ref, dst, len), "%s: data", what);
	}
	if (!rc)
		return;
	/* RDMA_READ into NSGE pieces */
	{
		struct wrspec w = { .op = IBV_WR_RDMA_READ, .wr_id = 0x400,
				    .flags = IBV_SEND_SIGNALED, .data = D_SGE, .buf = rd, .len = len,
				    .pieces = len >= NSGE ? NSGE : 1, .raddr = (uintptr_t)dst,
				    .rkey = mr->rkey };

		snprintf(what, sizeof(what), "%s RDMA_READ %u B", tn, len);
		fill(dst, len, 7);
		memset(rd, 0, len);
		if (post1(a, &w) || poll_cq(scq, &s, 1, 5) != 1)
			fail("%s: post/poll", what);
		else
			expect_cqe(&s, 0x400, IBV_WC_RDMA_READ, len, what);
		CHECK(!memcmp(rd, dst, len), "%s: data", what);
	}
	/* atomics */
	{
		uint64_t *target = (uint64_t *)(void *)src_buf(MISC);
		uint64_t *result = target + 8;
		struct wrspec w = { .op = IBV_WR_ATOMIC_FETCH_AND_ADD, .wr_id = 0x500,
				    .flags = IBV_SEND_SIGNALED, .data = D_SGE, .buf = (uint8_t *)result,
				    .len = 8, .pieces = 1, .raddr = (uintptr_t)target,
				    .rkey = mr->rkey, .cmp = 23 };

		*target = 1000;
		*result = 0;
		if (post1(a, &w) || poll_cq(scq, &s, 1, 5) != 1)
			fail("%s FETCH_AND_ADD: post/poll", tn);
		else
			expect_cqe(&s, 0x500, IBV_WC_FETCH_ADD, 8, "FETCH_AND_ADD");
		CHECK(*result == 1000 && *target == 1023, "%s FETCH_AND_ADD: orig %llu target %llu",
		      tn, (unsigned long long)*result, (unsigned long long)*target);
		w.op = IBV_WR_ATOMIC_CMP_AND_SWP;
		w.wr_id = 0x501;
		w.cmp = 1023;
		w.swp = 77;
		if (post1(a, &w) || poll_cq(scq, &s, 1, 5) != 1)
			fail("%s CMP_AND_SWP: post/poll", tn);
		else
			expect_cqe(&s, 0x501, IBV_WC_COMP_SWAP, 8, "CMP_AND_SWP");
		CHECK(*result == 1023 && *target == 77, "%s CMP_AND_SWP: orig %llu target %llu", tn,
		      (unsigned long long)*result, (unsigned long long)*target);
		w.cmp = 1; /* a failing compare leaves the target alone */
		w.swp = 5;
		if (post1(a, &w) || poll_cq(scq, &s, 1, 5) != 1 || *result != 77 || *target != 77)
			fail("%s CMP_AND_SWP (no swap)", tn);
	}
}

/* Several WRs of different kinds in one wr_start/wr_complete. */
static void test_batch(struct ibv_qp *a, struct ibv_qp *b, const char *tn, uint32_t len)
{
	bool rc = a->qp_type == IBV_QPT_RC;
	uint8_t *s1 = src_buf(SRC), *s2 = src_buf(SRC2), *d1 = src_buf(DST), *d2 = src_buf(DST2);
	uint8_t *rd = src_buf(RD), *rx = src_buf(MISC) + 4096;
	uint64_t *target = (uint64_t *)(void *)src_buf(MISC), *res = target + 8;
	uint32_t small = len < 2048 ? len : 2048;
	struct wrspec w[8];
	struct cqe s[8], r[4];
	int n = 0, ns;
	char what[64];

	snprintf(what, sizeof(what), "%s batch %u B", tn, len);
	fill(s1, len, 11);
	fill(s2, len, 12);
	memset(d1, 0, len);
	memset(d2, 0, len);
	memset(rx, 0, small);
	memset(rd, 0, len);
	*target = 5;
	*res = 0;
	post_recv(b, 0x900, src_buf(RD) + BUF - 64, 16, 1); /* for WRITE_IMM */
	post_recv(b, 0x901, rx, small, 2);
	/* unsignaled WRITE: executes, reports nothing */
	w[n++] = (struct wrspec){ .op = IBV_WR_RDMA_WRITE, .wr_id = 0x910, .data = D_SGE,
				  .buf = s1, .len = len, .pieces = 2, .raddr = (uintptr_t)d1,
				  .rkey = mr->rkey };
	w[n++] = (struct wrspec){ .op = IBV_WR_RDMA_WRITE_WITH_IMM, .wr_id = 0x911,
				  .flags = IBV_SEND_SIGNALED, .data = D_SGE, .buf = s2, .len = len,
				  .pieces = 1, .raddr = (uintptr_t)d2, .rkey = mr->rkey,
				  .imm = 0x42 };
	w[n++] = (struct wrspec){ .op = IBV_WR_SEND_WITH_IMM, .wr_id = 0x912,
				  .flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED, .data = D_SGE,
				  .buf = s2, .len = small, .pieces = NSGE, .imm = 0x43 };
	if (rc) {
		w[n++] = (struct wrspec){ .op = IBV_WR_RDMA_READ, .wr_id = 0x913,
					  .flags = IBV_SEND_SIGNALED, .data = D_SGE, .buf = rd,
					  .len = len, .pieces = 3, .raddr = (uintptr_t)d1,
					  .rkey = mr->rkey };
		w[n++] = (struct wrspec){ .op = IBV_WR_ATOMIC_FETCH_AND_ADD, .wr_id = 0x914,
					  .flags = IBV_SEND_SIGNALED, .data = D_SGE,
					  .buf = (uint8_t *)res, .len = 8, .pieces = 1,
					  .raddr = (uintptr_t)target, .rkey = mr->rkey, .cmp = 10 };
		w[n++] = (struct wrspec){ .op = IBV_WR_ATOMIC_CMP_AND_SWP, .wr_id = 0x915,
					  .flags = IBV_SEND_SIGNALED, .data = D_SGE,
					  .buf = (uint8_t *)res + 8, .len = 8, .pieces = 1,
					  .raddr = (uintptr_t)target, .rkey = mr->rkey, .cmp = 15,
					  .swp = 99 };
	}
	/* a zero-length signaled SEND without a data setter ends it */
	post_recv(b, 0x902, rx + small, 16, 1);
	w[n++] = (struct wrspec){ .op = IBV_WR_SEND, .wr_id = 0x916, .flags = IBV_SEND_SIGNALED };
	if (post_batch(a, w, n)) {
		fail("%s: wr_complete", what);
		return;
	}
	ns = n - 1; /* all but the unsignaled WRITE */
	if (poll_cq(scq, s, ns, 5) != ns || poll_cq(rcq, r, 3, 5) != 3) {
		fail("%s: completions", what);
		return;
	}
	for (int i = 0; i < ns; i++) {
		const struct wrspec *x = &w[i + 1];
		static const enum ibv_wc_opcode wc_op[] = {
			[IBV_WR_RDMA_WRITE_WITH_IMM] = IBV_WC_RDMA_WRITE,
			[IBV_WR_SEND_WITH_IMM] = IBV_WC_SEND,
			[IBV_WR_SEND] = IBV_WC_SEND,
			[IBV_WR_RDMA_READ] = IBV_WC_RDMA_READ,
			[IBV_WR_ATOMIC_FETCH_AND_ADD] = IBV_WC_FETCH_ADD,
			[IBV_WR_ATOMIC_CMP_AND_SWP] = IBV_WC_COMP_SWAP,
		};
		expect_cqe(&s[i], x->wr_id, wc_op[x->op], x->len, what); /* in posting order */
	}
	expect_cqe(&r[0], 0x900, IBV_WC_RECV_RDMA_WITH_IMM, len, what);
	expect_cqe(&r[1], 0x901, IBV_WC_RECV, small, what);
	expect_cqe(&r[2], 0x902, IBV_WC_RECV, 0, what);
	CHECK(r[0].imm == 0x42 && r[1].imm == 0x43, "%s: imm", what);
	CHECK(!memcmp(d1, s1, len) && !memcmp(d2, s2, len) && !memcmp(rx, s2, small),
	      "%s: data", what);
	if (rc) {
		CHECK(!memcmp(rd, s1, len), "%s: READ data", what);
		CHECK(res[0] == 5 && res[1] == 15 && *target == 99,
		      "%s: atomics orig %llu %llu target %llu", what, (unsigned long long)res[0],
		      (unsigned long long)res[1], (unsigned long long)*target);
	}
}

/* wr_abort: nothing executes, and the PSNs stay in step with the peer. */
static void test_abort(struct ibv_qp *a, struct ibv_qp *b, const char *tn)
{
	uint8_t *src = src_buf(SRC), *dst = src_buf(DST), *rx = src_buf(RD);
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(a);
	struct wrspec w[2] = {
		{ .op = IBV_WR_RDMA_WRITE, .wr_id = 0xa00, .flags = IBV_SEND_SIGNALED,
		  .data = D_SGE, .buf = src, .len = 3000, .pieces = 1, .raddr = (uintptr_t)dst,
		  .rkey = mr->rkey },
		{ .op = IBV_WR_SEND, .wr_id = 0xa01, .flags = IBV_SEND_SIGNALED, .data = D_SGE,
		  .buf = src, .len = 3000, .pieces = 2 },
	};
	struct cqe s, r;
	char what[64];
	uint32_t psn;

	snprintf(what, sizeof(what), "%s wr_abort", tn);
	fill(src, 3000, 21);
	memset(dst, 0, 3000);
	memset(rx, 0, 3000);
	post_recv(b, 0xa10, rx, 3000, 1);
	psn = sq_psn(a);
	ibv_wr_start(qx);
	build(qx, &w[0]);
	build(qx, &w[1]);
	ibv_wr_abort(qx);
	expect_quiet(what, 0.2);
	CHECK(sq_psn(a) == psn, "%s: sq_psn moved from %u to %u", what, psn, sq_psn(a));
	for (int i = 0; i < 3000; i++)
		if (dst[i] || rx[i]) {
			fail("%s: data moved", what);
			break;
		}
	/* an empty batch completes with 0 and does nothing */
	ibv_wr_start(qx);
	CHECK(ibv_wr_complete(qx) == 0, "%s: empty batch", what);
	/* the QP carries on: the receive posted above takes the next SEND */
	w[1].wr_id = 0xa02;
	w[1].len = 100;
	if (post1(a, &w[1]) || poll_cq(scq, &s, 1, 5) != 1 || poll_cq(rcq, &r, 1, 5) != 1) {
		fail("%s: SEND after abort", what);
		return;
	}
	expect_cqe(&s, 0xa02, IBV_WC_SEND, 100, what);
	expect_cqe(&r, 0xa10, IBV_WC_RECV, 100, what);
	CHECK(sq_psn(a) == ((psn + 1) & 0xffffff), "%s: one SEND moved sq_psn %u to %u", what,
	      psn, sq_psn(a));
	CHECK(!memcmp(rx, src, 100), "%s: data after abort", what);
}

/*
 * Errors are kept until wr_complete, which returns the first and posts none
 * of the batch; the QP is fine afterwards.
 */
static void test_errors(struct ibv_qp *a, struct ibv_qp *b, const char *tn)
{
	bool rc = a->qp_type == IBV_QPT_RC;
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(a);
	uint8_t *src = src_buf(SRC), *dst = src_buf(DST), *rx = src_buf(RD);
	uint64_t *target = (uint64_t *)(void *)src_buf(MISC);
	struct wrspec good = { .op = IBV_WR_RDMA_WRITE, .wr_id = 0xe00,
			       .flags = IBV_SEND_SIGNALED, .data = D_SGE, .buf = src, .len = 64,
			       .pieces = 1, .raddr = (uintptr_t)dst, .rkey = mr->rkey };
	struct wrspec badl = { .op = IBV_WR_SEND, .wr_id = 0xe01, .flags = IBV_SEND_SIGNALED,
			       .data = D_SGE, .buf = src, .len = 64, .pieces = 1,
			       .lkey = mr->lkey ^ 0x5a5a00 };
	struct wrspec w[3];
	struct cqe r;
	char what[64];
	uint32_t psn;
	int ret;

	snprintf(what, sizeof(what), "%s errors", tn);
	fill(src, 64, 31);
	memset(dst, 0, 64);
	post_recv(b, 0xe10, rx, 64, 1);
	psn = sq_psn(a);

	/* a bad lkey in the middle, first and last: EINVAL, nothing executes */
	for (int pos = 0; pos < 3; pos++) {
		for (int i = 0; i < 3; i++)
			w[i] = i == pos ? badl : good;
		ret = post_batch(a, w, 3);
		CHECK(ret == EINVAL, "%s: bad lkey at %d: wr_complete %d, want EINVAL", what, pos,
		      ret);
	}
	/* more SGEs than max_send_sge */
	w[0] = good;
	w[0].data = D_SGE;
	w[0].pieces = NSGE + 1;
	CHECK(post1(a, &w[0]) == EINVAL, "%s: %d SGEs", what, NSGE + 1);
	/* more inline data than max_inline_data, in one piece and in a list */
	w[0] = good;
	w[0].data = D_INLINE;
	w[0].len = INL + 1;
	w[0].pieces = 1;
	CHECK(post1(a, &w[0]) == EINVAL, "%s: inline %d B", what, INL + 1);
	w[0].pieces = 3;
	CHECK(post1(a, &w[0]) == EINVAL, "%s: inline list %d B", what, INL + 1);
	/* a setter with no WR open */
	ibv_wr_start(qx);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)src, 8);
	CHECK(ibv_wr_complete(qx) == EINVAL, "%s: setter without builder", what);
	/* builders and setters urvt lacks */
	ibv_wr_start(qx);
	build(qx, &good);
	ibv_wr_bind_mw(qx, NULL, 0, NULL); /* exists (test_mw); no window: EINVAL */
	CHECK(ibv_wr_complete(qx) == EINVAL, "%s: ibv_wr_bind_mw without a window", what);
	ibv_wr_start(qx);
	ibv_wr_send_tso(qx, NULL, 0, 0);
	CHECK(ibv_wr_complete(qx) == EOPNOTSUPP, "%s: ibv_wr_send_tso", what);
	/* ATOMIC_WRITE is RC's only (tests/unit/test_atomic_write.c runs it) */
	ibv_wr_start(qx);
	ibv_wr_atomic_write(qx, mr->rkey, (uintptr_t)target, target);
	if (rc)
		ibv_wr_abort(qx);
	else
		CHECK(ibv_wr_complete(qx) == EINVAL, "%s: ibv_wr_atomic_write", what);
	/* ibv_wr_set_xrc_srqn: XRC_SEND only, ignored here (test_xrc, the
	 * rdma-core suite's test_qp_ex_xrc_send) */
	/* the first error wins */
	ibv_wr_start(qx);
	build(qx, &badl);
	ibv_wr_send_tso(qx, NULL, 0, 0);
	CHECK(ibv_wr_complete(qx) == EINVAL, "%s: bad lkey then send_tso", what);
	ibv_wr_start(qx);
	ibv_wr_send_tso(qx, NULL, 0, 0);
	build(qx, &badl);
	CHECK(ibv_wr_complete(qx) == EOPNOTSUPP, "%s: send_tso then bad lkey", what);
	if (rc) {
		/* atomic on a misaligned local buffer (qp-semantics §2.2 W5) */
		w[0] = (struct wrspec){ .op = IBV_WR_ATOMIC_FETCH_AND_ADD, .wr_id = 0xe02,
					.flags = IBV_SEND_SIGNALED, .data = D_SGE,
					.buf = (uint8_t *)target + 68, .len = 8, .pieces = 1,
					.raddr = (uintptr_t)target, .rkey = mr->rkey, .cmp = 1 };
		CHECK(post1(a, &w[0]) == EINVAL, "%s: misaligned atomic", what);
		/* inline is for SEND and RDMA_WRITE only */
		w[0] = (struct wrspec){ .op = IBV_WR_RDMA_READ, .wr_id = 0xe03, .data = D_INLINE,
					.buf = src, .len = 8, .pieces = 1,
					.raddr = (uintptr_t)dst, .rkey = mr->rkey };
		CHECK(post1(a, &w[0]) == EINVAL, "%s: inline RDMA_READ", what);
	} else {
		/* UC: operations the QP type does not have (W3), even though the
		 * builder exists */
		w[0] = (struct wrspec){ .op = IBV_WR_RDMA_READ, .wr_id = 0xe04, .data = D_SGE,
					.buf = src, .len = 8, .pieces = 1,
					.raddr = (uintptr_t)dst, .rkey = mr->rkey };
		CHECK(post1(a, &w[0]) == EINVAL, "%s: RDMA_READ on UC", what);
		w[0].op = IBV_WR_ATOMIC_FETCH_AND_ADD;
		CHECK(post1(a, &w[0]) == EINVAL, "%s: FETCH_AND_ADD on UC", what);
	}
	expect_quiet(what, 0.2);
	for (int i = 0; i < 64; i++)
		if (dst[i]) {
			fail("%s: a failed batch wrote data", what);
			break;
		}
	CHECK(sq_psn(a) == psn, "%s: failed batches moved sq_psn from %u to %u", what, psn,
	      sq_psn(a));
	/* after all that, the QP and its PSNs are fine */
	w[0] = good;
	w[1] = (struct wrspec){ .op = IBV_WR_SEND, .wr_id = 0xe05, .flags = IBV_SEND_SIGNALED,
				.data = D_SGE, .buf = src, .len = 64, .pieces = 1 };
	{
		struct cqe s2[2];

		if (post_batch(a, w, 2) || poll_cq(scq, s2, 2, 5) != 2 ||
		    poll_cq(rcq, &r, 1, 5) != 1) {
			fail("%s: batch after errors", what);
			return;
		}
		expect_cqe(&s2[0], 0xe00, IBV_WC_RDMA_WRITE, 64, what);
		expect_cqe(&s2[1], 0xe05, IBV_WC_SEND, 64, what);
		expect_cqe(&r, 0xe10, IBV_WC_RECV, 64, what);
		CHECK(!memcmp(dst, src, 64) && !memcmp(rx, src, 64), "%s: data after errors", what);
		CHECK(sq_psn(a) == ((psn + 2) & 0xffffff), "%s: 2 one-packet WRs moved sq_psn "
		      "%u to %u", what, psn, sq_psn(a));
	}
}

/* A full send queue: a batch one WR too long is refused whole (ENOMEM). */
static void test_queue_full(const char *tn, enum ibv_qp_type type)
{
	struct ibv_qp *a = create_qp(type, ops_for[type_idx(type)], scq, 16);
	struct ibv_qp *b = create_qp(type, ops_for[type_idx(type)], scq, 16);
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;
	uint8_t *dst = src_buf(DST), *src = src_buf(SRC);
	struct wrspec w[1024];
	struct cqe s;
	uint32_t depth;
	char what[64];

	snprintf(what, sizeof(what), "%s queue full", tn);
	if (!a || !b || to_rts(a, b->qp_num) || to_rts(b, a->qp_num) ||
	    ibv_query_qp(a, &qa, IBV_QP_CAP, &ia)) {
		fail("%s: setup", what);
		goto out;
	}
	depth = ia.cap.max_send_wr;
	if (depth + 1 > sizeof(w) / sizeof(w[0])) {
		fail("%s: depth %u", what, depth);
		goto out;
	}
	for (uint32_t i = 0; i <= depth; i++) {
		src[i] = (uint8_t)(i + 1);
		w[i] = (struct wrspec){ .op = IBV_WR_RDMA_WRITE, .wr_id = 0xf00 + i, .data = D_SGE,
					.buf = src + i, .len = 1, .pieces = 1,
					.raddr = (uintptr_t)(dst + i), .rkey = mr->rkey };
	}
	memset(dst, 0, depth + 1);
	w[depth].flags = IBV_SEND_SIGNALED;
	CHECK(post_batch(a, w, (int)depth + 1) == ENOMEM, "%s: %u WRs: want ENOMEM", what,
	      depth + 1);
	expect_quiet(what, 0.1);
	for (uint32_t i = 0; i <= depth; i++)
		if (dst[i]) {
			fail("%s: refused batch wrote byte %u", what, i);
			break;
		}
	/* exactly the depth fits */
	w[depth - 1].flags = IBV_SEND_SIGNALED;
	if (post_batch(a, w, (int)depth) || poll_cq(scq, &s, 1, 5) != 1) {
		fail("%s: %u WRs", what, depth);
		goto out;
	}
	expect_cqe(&s, 0xf00 + depth - 1, IBV_WC_RDMA_WRITE, 1, what);
	CHECK(landed(src, dst, depth) && !dst[depth], "%s: data", what);
	if (!failures)
		printf("ok  %s: %u WRs refused whole with ENOMEM, %u posted in one batch\n", what,
		       depth + 1, depth);
out:
	if (a)
		ibv_destroy_qp(a);
	if (b)
		ibv_destroy_qp(b);
}

/* Posting in a state without POST_SEND_OK (RESET, INIT, RTR): EINVAL. */
static void test_state(void)
{
	struct ibv_qp *qp = create_qp(IBV_QPT_RC, ops_for[0], scq, 16);
	struct ibv_qp_ex *qx;
	struct wrspec w = { .op = IBV_WR_SEND, .wr_id = 1, .data = D_SGE, .buf = src_buf(SRC),
			    .len = 8, .pieces = 1 };

	if (!qp) {
		fail("state: create");
		return;
	}
	qx = ibv_qp_to_qp_ex(qp);
	CHECK(post1(qp, &w) == EINVAL, "state: RESET: want EINVAL");
	ibv_wr_start(qx);
	CHECK(ibv_wr_complete(qx) == EINVAL, "state: RESET, empty batch: want EINVAL");
	if (to_init(qp))
		fail("state: to INIT");
	CHECK(post1(qp, &w) == EINVAL, "state: INIT: want EINVAL");
	expect_quiet("state", 0.05);
	ibv_destroy_qp(qp);
}

/* SEND_WITH_INV and LOCAL_INV: the key is dead afterwards (its lkey fails W10). */
static void test_invalidate(struct ibv_qp *a, struct ibv_qp *b, const char *tn)
{
	bool rc = a->qp_type == IBV_QPT_RC;
	uint8_t *area = src_buf(MISC) + 8192, *rx = src_buf(RD);
	struct ibv_mr *m2 = ibv_reg_mr(pd, area, 4096,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mr *m3 = ibv_reg_mr(pd, area + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct wrspec use = { .op = IBV_WR_SEND, .wr_id = 0xc09, .flags = IBV_SEND_SIGNALED,
			      .data = D_SGE, .buf = area, .len = 16, .pieces = 1 };
	struct cqe s, r;
	char what[64];

	if (!m2 || !m3) {
		fail("%s invalidate: reg_mr", tn);
		return;
	}
	if (rc) {
		struct wrspec w = { .op = IBV_WR_SEND_WITH_INV, .wr_id = 0xc00,
				    .flags = IBV_SEND_SIGNALED, .data = D_SGE, .buf = src_buf(SRC),
				    .len = 32, .pieces = 1, .imm = m2->rkey };

		snprintf(what, sizeof(what), "%s SEND_WITH_INV", tn);
		fill(src_buf(SRC), 32, 41);
		post_recv(b, 0xc10, rx, 32, 1);
		if (post1(a, &w) || poll_cq(scq, &s, 1, 5) != 1 || poll_cq(rcq, &r, 1, 5) != 1) {
			fail("%s: post/poll", what);
		} else {
			expect_cqe(&s, 0xc00, IBV_WC_SEND, 32, what);
			expect_cqe(&r, 0xc10, IBV_WC_RECV, 32, what);
			CHECK(r.flags & IBV_WC_WITH_INV, "%s: IBV_WC_WITH_INV not set", what);
			CHECK(!memcmp(rx, src_buf(SRC), 32), "%s: data", what);
		}
		use.lkey = m2->lkey;
		CHECK(post1(a, &use) == EINVAL, "%s: invalidated lkey still usable", what);
	}
	/* LOCAL_INV: queued behind what is before it, then executed */
	snprintf(what, sizeof(what), "%s LOCAL_INV", tn);
	use.lkey = m3->lkey;
	use.buf = area + 4096;
	post_recv(b, 0xc11, rx, 64, 1);
	{
		struct wrspec w[2] = {
			use,
			{ .op = IBV_WR_LOCAL_INV, .wr_id = 0xc01, .flags = IBV_SEND_SIGNALED,
			  .imm = m3->rkey },
		};
		struct cqe s2[2];
		int ret = post_batch(a, w, 2), ns = ret ? 0 : poll_cq(scq, s2, 2, 5);
		int nr = ret ? 0 : poll_cq(rcq, &r, 1, 5);

		if (ret || ns != 2 || nr != 1) {
			fail("%s: wr_complete %d, %d send and %d receive completions", what, ret,
			     ns, nr);
		} else {
			expect_cqe(&s2[0], 0xc09, IBV_WC_SEND, 16, what);
			CHECK(s2[1].status == IBV_WC_SUCCESS && s2[1].wr_id == 0xc01 &&
				      s2[1].opcode == IBV_WC_LOCAL_INV,
			      "%s: completion status %s opcode %d", what,
			      ibv_wc_status_str(s2[1].status), s2[1].opcode);
		}
	}
	CHECK(post1(a, &use) == EINVAL, "%s: invalidated lkey still usable", what);
	/* an unsignaled one reports nothing and still takes effect: it is
	 * queued, so once the SEND behind it has completed it has run */
	{
		struct ibv_mr *m4 = ibv_reg_mr(pd, area + 2048, 1024, IBV_ACCESS_LOCAL_WRITE);
		struct wrspec w[2] = {
			{ .op = IBV_WR_LOCAL_INV, .wr_id = 0xc02 },
			{ .op = IBV_WR_SEND, .wr_id = 0xc03, .flags = IBV_SEND_SIGNALED },
		};

		if (!m4) {
			fail("%s: reg_mr", what);
		} else {
			w[0].imm = m4->rkey;
			post_recv(b, 0xc12, rx, 64, 1);
			if (post_batch(a, w, 2) || poll_cq(scq, &s, 1, 5) != 1 ||
			    poll_cq(rcq, &r, 1, 5) != 1)
				fail("%s: unsignaled: post/poll", what);
			else
				expect_cqe(&s, 0xc03, IBV_WC_SEND, 0, what);
			use.lkey = m4->lkey;
			use.buf = area + 2048;
			CHECK(post1(a, &use) == EINVAL, "%s: unsignaled: lkey still usable", what);
			ibv_dereg_mr(m4);
		}
	}
	ibv_dereg_mr(m2);
	ibv_dereg_mr(m3);
}

static void test_connected(enum ibv_qp_type type)
{
	static const uint32_t sizes[] = { 1, 100, 4096, 65536 };
	const char *tn = type == IBV_QPT_RC ? "RC" : "UC";
	int before = failures;
	struct ibv_qp *a = create_qp(type, ops_for[type_idx(type)], scq, 64);
	struct ibv_qp *b = create_qp(type, ops_for[type_idx(type)], scq, 64);

	if (!a || !b || to_rts(a, b->qp_num) || to_rts(b, a->qp_num)) {
		fail("%s: setup (errno %d)", tn, errno);
		return;
	}
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		test_ops(a, b, tn, sizes[i]);
		test_batch(a, b, tn, sizes[i]);
	}
	test_abort(a, b, tn);
	test_errors(a, b, tn);
	test_invalidate(a, b, tn);
	expect_quiet(tn, 0.05);
	/* A batch never invalidates at post time (it could not be undone if
	 * the batch failed later), so a bad key is reported by the completion,
	 * as IBV_SEND_FENCE'd LOCAL_INVs are. Last: it may end the QP. */
	{
		struct wrspec w = { .op = IBV_WR_LOCAL_INV, .wr_id = 0xc20, .imm = 0x7fffff00 };
		struct cqe s;

		CHECK(post1(a, &w) == 0, "%s: LOCAL_INV of an unknown key: wr_complete", tn);
		CHECK(poll_cq(scq, &s, 1, 5) == 1 && s.wr_id == 0xc20 &&
			      s.status == IBV_WC_LOC_PROT_ERR,
		      "%s: LOCAL_INV of an unknown key: want a LOC_PROT_ERR completion", tn);
	}
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	if (failures == before)
		printf("ok  %s: every operation (1 B..64 KiB, multi-SGE, inline lists), batches, "
		       "abort, errors, invalidation\n", tn);
	test_queue_full(tn, type);
}

/* ------------------------------------------------------------------ */
/* UD                                                                 */
/* ------------------------------------------------------------------ */
static void check_grh_payload(const uint8_t *buf, const uint8_t *ref, uint32_t len,
			      const char *what)
{
	for (int i = 0; i < 20; i++)
		if (buf[i]) {
			fail("%s: GRH byte %d", what, i);
			return;
		}
	CHECK(buf[20] == 0x45 && buf[29] == 17 && !memcmp(buf + 32, &gid.raw[12], 4) &&
		      !memcmp(buf + 36, &gid.raw[12], 4),
	      "%s: GRH IPv4 header", what);
	CHECK(!memcmp(buf + 40, ref, len), "%s: data", what);
}

static void test_ud(void)
{
	static const uint32_t sizes[] = { 1, 100, 1024 };
	int before = failures;
	struct ibv_qp *a = create_qp(IBV_QPT_UD, ops_for[2], scq, 64);
	struct ibv_qp *b = create_qp(IBV_QPT_UD, ops_for[2], scq, 64);
	struct ibv_ah_attr aha = { .is_global = 1, .port_num = 1 };
	uint8_t *src = src_buf(SRC), *rx = src_buf(DST), ref[INL];
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	struct ibv_ah *ah, *ah2 = NULL;
	struct cqe s[4], r[4];
	char what[64];

	aha.grh.dgid = gid;
	aha.grh.hop_limit = 64;
	if (!a || !b || !pd2 || to_rts(a, 0) || to_rts(b, 0) || !(ah = ibv_create_ah(pd, &aha)) ||
	    !(ah2 = ibv_create_ah(pd2, &aha))) {
		fail("UD: setup");
		return;
	}
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t len = sizes[i];

		for (int k = 0; k < 3; k++) {
			/* SEND with set_sge_list, SEND_IMM with set_sge and set_ud_addr
			 * after the data, inline SEND list */
			struct wrspec w = { .op = k == 1 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
					    .wr_id = 0xd00u + (unsigned)k, .flags = IBV_SEND_SIGNALED,
					    .data = k == 2 ? D_INLINE : D_SGE, .buf = src, .len = len,
					    .pieces = k == 1 ? 1 : len >= 3 ? 3 : 1, .imm = 0x4242,
					    .ah = ah, .rqpn = b->qp_num, .ud_after = k == 1 };
			struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(a);

			if (k == 2 && len > INL)
				continue;
			snprintf(what, sizeof(what), "UD %s%s %u B", k == 2 ? "inline " : "",
				 k == 1 ? "SEND_IMM" : "SEND", len);
			fill(src, len, 51 + (unsigned)k);
			memcpy(ref, src, len < INL ? len : INL);
			memset(rx, 0, len + 40);
			post_recv(b, 0xd10, rx, len + 40, 1);
			ibv_wr_start(qx);
			build(qx, &w);
			if (k == 2)
				memset(src, 0x33, len); /* inline: copied already */
			if (ibv_wr_complete(qx) || poll_cq(scq, s, 1, 5) != 1 ||
			    poll_cq(rcq, r, 1, 5) != 1) {
				fail("%s: post/poll", what);
				continue;
			}
			expect_cqe(&s[0], w.wr_id, IBV_WC_SEND, len, what);
			expect_cqe(&r[0], 0xd10, IBV_WC_RECV, len + 40, what);
			CHECK((r[0].flags & IBV_WC_GRH) && r[0].src_qp == a->qp_num &&
				      r[0].qp_num == b->qp_num,
			      "%s: GRH flag / qp numbers", what);
			CHECK(k != 1 || ((r[0].flags & IBV_WC_WITH_IMM) && r[0].imm == 0x4242),
			      "%s: imm", what);
			check_grh_payload(rx, k == 2 ? ref : src, len, what);
		}
	}
	/* a batch of four datagrams: to b, to a itself, unsignaled, signaled */
	{
		uint8_t *rb = rx, *ra = rx + 2048;
		struct wrspec w[4];

		fill(src, 512, 61);
		memset(rx, 0, 4096);
		post_recv(b, 0xd20, rb, 296, 1);
		post_recv(b, 0xd21, rb + 512, 296, 1);
		post_recv(a, 0xd22, ra, 296, 1);
		post_recv(b, 0xd23, rb + 1024, 296, 1);
		for (int i = 0; i < 4; i++)
			w[i] = (struct wrspec){ .op = IBV_WR_SEND, .wr_id = 0xd30u + (unsigned)i,
						.flags = i == 1 ? 0 : IBV_SEND_SIGNALED,
						.data = D_SGE, .buf = src + i * 64, .len = 256,
						.pieces = 2, .ah = ah,
						.rqpn = i == 2 ? a->qp_num : b->qp_num,
						.ud_after = i & 1 };
		if (post_batch(a, w, 4) || poll_cq(scq, s, 3, 5) != 3 || poll_cq(rcq, r, 4, 5) != 4) {
			fail("UD batch: post/poll");
		} else {
			CHECK(s[0].wr_id == 0xd30 && s[1].wr_id == 0xd32 && s[2].wr_id == 0xd33,
			      "UD batch: send completions out of order");
			check_grh_payload(rb, src, 256, "UD batch 0");
			check_grh_payload(rb + 512, src + 64, 256, "UD batch 1");
			check_grh_payload(ra, src + 128, 256, "UD batch 2 (to itself)");
			check_grh_payload(rb + 1024, src + 192, 256, "UD batch 3");
		}
	}
	/* UD errors: no address; an AH of another PD (W7); larger than the path MTU */
	{
		struct wrspec w = { .op = IBV_WR_SEND, .wr_id = 0xd40, .flags = IBV_SEND_SIGNALED,
				    .data = D_SGE, .buf = src, .len = 8, .pieces = 1 };

		CHECK(post1(a, &w) == EINVAL, "UD: no set_ud_addr: want EINVAL");
		w.ah = ah2;
		w.rqpn = b->qp_num;
		CHECK(post1(a, &w) == EINVAL, "UD: AH of another PD: want EINVAL");
		w.ah = ah;
		w.len = 4097;
		CHECK(post1(a, &w) == EINVAL, "UD: 4097 B datagram: want EINVAL");
		expect_quiet("UD errors", 0.1);
	}
	ibv_destroy_ah(ah);
	ibv_destroy_ah(ah2);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dealloc_pd(pd2);
	if (failures == before)
		printf("ok  UD: SEND, SEND_IMM, inline lists with the GRH, set_ud_addr before/after "
		       "data, 4-WR batch, errors\n");
}

/* ------------------------------------------------------------------ */
/* Three threads on one QP: the batch is a critical section           */
/* ------------------------------------------------------------------ */
#define THR_ITERS 300
struct thr {
	struct ibv_qp *qp;
	int id;
	bool use_wr;
	int errors;
};

static void *poster(void *arg)
{
	struct thr *t = arg;
	uint8_t *buf = src_buf(MISC) + 16384 + (size_t)t->id * 64;

	for (uint32_t i = 0; i < THR_ITERS; i++) {
		uint64_t id0 = ((uint64_t)t->id << 32) | (2 * i), id1 = id0 + 1;
		int ret;

		do {
			if (t->use_wr) {
				struct wrspec w[2] = {
					{ .op = IBV_WR_RDMA_WRITE, .wr_id = id0,
					  .flags = IBV_SEND_SIGNALED, .data = D_SGE, .buf = buf,
					  .len = 8, .pieces = 1, .raddr = (uintptr_t)(buf + 8),
					  .rkey = mr->rkey },
					{ .op = IBV_WR_RDMA_WRITE, .wr_id = id1,
					  .flags = IBV_SEND_SIGNALED, .data = D_SGE, .buf = buf,
					  .len = 8, .pieces = 1, .raddr = (uintptr_t)(buf + 16),
					  .rkey = mr->rkey },
				};
				ret = post_batch(t->qp, w, 2);
			} else {
				struct ibv_sge sge = { (uintptr_t)buf, 8, mr->lkey };
				struct ibv_send_wr w1, w0, *bad;

				memset(&w0, 0, sizeof(w0));
				w0.wr_id = id0;
				w0.sg_list = &sge;
				w0.num_sge = 1;
				w0.opcode = IBV_WR_RDMA_WRITE;
				w0.send_flags = IBV_SEND_SIGNALED;
				w0.wr.rdma.remote_addr = (uintptr_t)(buf + 8);
				w0.wr.rdma.rkey = mr->rkey;
				w1 = w0;
				w1.wr_id = id1;
				w0.next = &w1;
				ret = ibv_post_send(t->qp, &w0, &bad);
				/* post_send keeps what came before the failing WR */
				if (ret == ENOMEM && bad == &w1) {
					do {
						sched_yield();
						w1.next = NULL;
						ret = ibv_post_send(t->qp, &w1, &bad);
					} while (ret == ENOMEM);
				}
			}
			if (ret == ENOMEM)
				sched_yield();
		} while (ret == ENOMEM);
		if (ret)
			t->errors++;
	}
	return NULL;
}

static void test_threads(void)
{
	struct ibv_cq_init_attr_ex ca = { .cqe = 4096,
					  .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
						      IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP };
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
	struct ibv_qp *a = cq ? create_qp(IBV_QPT_RC, ops_for[0], cq, 32) : NULL;
	struct ibv_qp *b = cq ? create_qp(IBV_QPT_RC, ops_for[0], cq, 32) : NULL;
	struct thr t[3];
	pthread_t th[3];
	uint32_t next[3] = { 0, 0, 0 };
	int total = 0, want = 3 * 2 * THR_ITERS, before = failures;
	double end;

	if (!a || !b || to_rts(a, b->qp_num) || to_rts(b, a->qp_num)) {
		fail("threads: setup");
		return;
	}
	for (int i = 0; i < 3; i++) {
		t[i] = (struct thr){ .qp = a, .id = i, .use_wr = i < 2 };
		pthread_create(&th[i], NULL, poster, &t[i]);
	}
	end = now_s() + 60;
	while (total < want && now_s() < end) {
		struct cqe e[64];
		int n = poll_cq(cq, e, 64, 0.01);

		for (int i = 0; i < n; i++) {
			uint32_t id = (uint32_t)(e[i].wr_id >> 32), seq = (uint32_t)e[i].wr_id;

			if (e[i].status != IBV_WC_SUCCESS || id > 2 || seq != next[id]) {
				fail("threads: completion %#llx status %s (want seq %u)",
				     (unsigned long long)e[i].wr_id,
				     ibv_wc_status_str(e[i].status), id <= 2 ? next[id] : 0);
				total = want;
				break;
			}
			next[id]++;
			total++;
		}
	}
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		CHECK(!t[i].errors, "threads: poster %d had %d errors", i, t[i].errors);
	}
	CHECK(total == want, "threads: %d of %d completions", total, want);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	if (failures == before)
		printf("ok  threads: 2 x ibv_wr_* + 1 x ibv_post_send on one QP, %d completions, "
		       "each poster's in order\n", want);
}

/* ------------------------------------------------------------------ */
/* ibv_query_device_ex                                                */
/* ------------------------------------------------------------------ */
static void test_query_device_ex(void)
{
	struct ibv_device_attr da;
	struct ibv_device_attr_ex dx;
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	int ret;

	memset(&dx, 0xff, sizeof(dx));
	if (ibv_query_device(ctx, &da) || (ret = ibv_query_device_ex(ctx, NULL, &dx))) {
		fail("query_device(_ex)");
		return;
	}
	CHECK(!memcmp(&da, &dx.orig_attr, sizeof(da)), "query_device_ex: orig_attr differs");
	CHECK(dx.phys_port_cnt_ex == da.phys_port_cnt && da.phys_port_cnt == 1,
	      "query_device_ex: phys_port_cnt_ex %u", dx.phys_port_cnt_ex);
	CHECK((uint32_t)dx.device_cap_flags_ex == (uint32_t)da.device_cap_flags,
	      "query_device_ex: device_cap_flags_ex %#llx vs %#x",
	      (unsigned long long)dx.device_cap_flags_ex, (unsigned)da.device_cap_flags);
	/* on-demand paging: what core/odp.h gives, for RC, UC and UD */
	CHECK(dx.odp_caps.general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT) &&
		      (dx.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_ATOMIC) &&
		      (dx.odp_caps.per_transport_caps.uc_odp_caps & IBV_ODP_SUPPORT_WRITE) &&
		      !(dx.odp_caps.per_transport_caps.uc_odp_caps & IBV_ODP_SUPPORT_READ) &&
		      dx.odp_caps.per_transport_caps.ud_odp_caps ==
			      (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV),
	      "query_device_ex: odp_caps %#llx rc %#x uc %#x ud %#x",
	      (unsigned long long)dx.odp_caps.general_caps, dx.odp_caps.per_transport_caps.rc_odp_caps,
	      dx.odp_caps.per_transport_caps.uc_odp_caps, dx.odp_caps.per_transport_caps.ud_odp_caps);
	CHECK(da.max_mw > 0 && (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW),
	      "query_device: max_mw %d", da.max_mw);
	CHECK(!dx.comp_mask &&
		      !dx.tso_caps.max_tso && !dx.rss_caps.max_rwq_indirection_tables &&
		      !dx.max_wq_type_rq && !dx.packet_pacing_caps.qp_rate_limit_max &&
		      !dx.raw_packet_caps && !dx.tm_caps.max_num_tags && !dx.cq_mod_caps.max_cq_count,
	      "query_device_ex: a capability urvt lacks is reported");
	/* XRC: the RC engines, ODP as RC (qp-semantics §16) */
	CHECK((da.device_cap_flags & IBV_DEVICE_XRC) &&
		      dx.xrc_odp_caps == dx.odp_caps.per_transport_caps.rc_odp_caps,
	      "query_device_ex: XRC %#x, xrc_odp_caps %#x", da.device_cap_flags & IBV_DEVICE_XRC,
	      dx.xrc_odp_caps);
	/* what it has: completion timestamps (1 GHz clock), device memory */
	CHECK(dx.completion_timestamp_mask && dx.hca_core_clock == 1000000 && dx.max_dm_size,
	      "query_device_ex: timestamps %#llx/%llu kHz, max_dm_size %llu",
	      (unsigned long long)dx.completion_timestamp_mask,
	      (unsigned long long)dx.hca_core_clock, (unsigned long long)dx.max_dm_size);
	/* what the ibv_wr_* tests rely on */
	CHECK(da.max_sge >= NSGE && da.max_qp_rd_atom > 0 && da.atomic_cap != IBV_ATOMIC_NONE,
	      "query_device: max_sge %d max_qp_rd_atom %d atomic_cap %d", da.max_sge,
	      da.max_qp_rd_atom, da.atomic_cap);
	CHECK(ibv_query_device_ex(ctx, &in, &dx) == EINVAL, "query_device_ex: input comp_mask");
	if (!failures)
		printf("ok  ibv_query_device_ex: orig_attr == ibv_query_device, 1 port, no "
		       "ODP/TSO/RSS/TM/timestamps, max_sge %d, max_qp_rd_atom %d\n",
		       da.max_sge, da.max_qp_rd_atom);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 512,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
			    IBV_WC_EX_WITH_SRC_QP,
	};

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
	scq = ibv_create_cq_ex(ctx, &ca);
	rcq = ibv_create_cq_ex(ctx, &ca);
	mem = aligned_alloc(4096, NBUF * BUF);
	mr = mem && pd ? ibv_reg_mr(pd, mem, NBUF * BUF,
				    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
		       : NULL;
	if (!scq || !rcq || !mr) {
		perror("setup");
		return 1;
	}
	memset(mem, 0, NBUF * BUF);
	test_query_device_ex();
	test_create();
	test_state();
	test_connected(IBV_QPT_RC);
	test_connected(IBV_QPT_UC);
	test_ud();
	test_threads();
	ibv_dereg_mr(mr);
	ibv_destroy_cq(ibv_cq_ex_to_cq(scq));
	ibv_destroy_cq(ibv_cq_ex_to_cq(rcq));
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(mem);
	printf("%s\n", failures ? "FAILED" : "PASSED");
	return failures ? 1 : 0;
}
