/*
 * post_send / post_recv (qp-semantics §2, §3): L1 and W1-W11 with their
 * errno and bad_wr, the operation table per QP type, queue capacity, local
 * operations, inline data, posting in SQD/ERR, and R1-R5.
 *
 * QPs are self-connected (dest QPN = own QPN). Checks that must not
 * execute anything are made in SQD, where accepted WRs are queued but not
 * started (qp-semantics §2.8); moving the QP to ERR then flushes them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ut.h"

static struct ut_dev dev;

struct fix {
	struct rvt_pd *pd, *pd2;
	struct rvt_cq *scq, *rcq;
	struct rvt_mregion *mr;     /* LOCAL_WRITE | REMOTE_* on buf */
	struct rvt_mregion *ro;     /* no LOCAL_WRITE, on rbuf */
	struct rvt_mregion *dmr;    /* LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ on dst */
	struct rvt_ah *ah, *ah2;    /* loopback AH in pd / in pd2 */
	uint8_t buf[8192] __attribute__((aligned(64)));
	uint8_t rbuf[1024] __attribute__((aligned(64)));
	uint8_t dst[8192] __attribute__((aligned(64)));
};

static struct fix *F;

static int setup(void **state)
{
	struct ibv_ah_attr aha;
	int err = 0;

	(void)state;
	ut_open(&dev);
	F = calloc(1, sizeof(*F));
	assert_non_null(F);
	F->pd = ut_pd(&dev);
	F->pd2 = ut_pd(&dev);
	F->scq = ut_cq(&dev, 4096);
	F->rcq = ut_cq(&dev, 4096);
	F->mr = ut_mr(F->pd, F->buf, sizeof(F->buf),
		      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			      IBV_ACCESS_REMOTE_ATOMIC);
	F->ro = ut_mr(F->pd, F->rbuf, sizeof(F->rbuf), IBV_ACCESS_REMOTE_READ);
	F->dmr = ut_mr(F->pd, F->dst, sizeof(F->dst),
		       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	ut_loopback_ah_attr(&dev, &aha);
	F->ah = rvt_create_ah(F->pd, &aha, &err);
	F->ah2 = rvt_create_ah(F->pd2, &aha, &err);
	assert_non_null(F->ah);
	assert_non_null(F->ah2);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	assert_int_equal(rvt_destroy_ah(F->ah), 0);
	assert_int_equal(rvt_destroy_ah(F->ah2), 0);
	assert_int_equal(rvt_dereg_mr(F->mr), 0);
	assert_int_equal(rvt_dereg_mr(F->ro), 0);
	assert_int_equal(rvt_dereg_mr(F->dmr), 0);
	assert_int_equal(rvt_destroy_cq(F->scq), 0);
	assert_int_equal(rvt_destroy_cq(F->rcq), 0);
	assert_int_equal(rvt_dealloc_pd(F->pd), 0);
	assert_int_equal(rvt_dealloc_pd(F->pd2), 0);
	free(F);
	ut_async_drain(&dev);
	ut_close(&dev);
	return 0;
}

static void drain(void)
{
	struct ibv_wc wc[64];

	while (rvt_poll_cq(F->scq, 64, wc) > 0)
		;
	while (rvt_poll_cq(F->rcq, 64, wc) > 0)
		;
}

static struct rvt_qp *qp_new(enum ibv_qp_type type, const struct ut_qp_caps *caps, bool sig_all)
{
	return ut_qp(&dev, F->pd, type, F->scq, F->rcq, NULL, caps, sig_all);
}

/* RTS, self-connected (RC/UC), with the given initiator depth. */
static void qp_up(struct rvt_qp *qp, int max_rd_atomic)
{
	ut_to_init(qp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		   0x1111);
	ut_to_rtr(&dev, qp, qp->qpn, 1);
	ut_to_rts(qp, 7, 7, (uint8_t)max_rd_atomic);
}

static void qp_done(struct rvt_qp *qp)
{
	assert_int_equal(rvt_destroy_qp(qp), 0);
	drain();
}

static uint32_t mr_refs(struct rvt_mregion *mr)
{
	return atomic_load(&mr->refcount);
}

/* A WR that passes every check for its opcode on a QP of this type. */
static void good_wr(struct ibv_send_wr *wr, struct ibv_sge *sge, int opcode, enum ibv_qp_type t)
{
	memset(wr, 0, sizeof(*wr));
	*sge = (struct ibv_sge){ .addr = (uintptr_t)F->buf, .length = 16, .lkey = F->mr->ibmr.lkey };
	wr->wr_id = 0x1000 + (uint64_t)opcode;
	wr->opcode = (enum ibv_wr_opcode)opcode;
	wr->sg_list = sge;
	wr->num_sge = 1;
	wr->wr.rdma.remote_addr = (uintptr_t)F->dst;
	wr->wr.rdma.rkey = F->dmr->ibmr.rkey;
	if (opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		sge->length = 8;
		wr->wr.atomic.remote_addr = (uintptr_t)F->buf + 64;
		wr->wr.atomic.rkey = F->mr->ibmr.rkey;
	}
	if (opcode == IBV_WR_LOCAL_INV) {
		wr->num_sge = 0;
		wr->send_flags = IBV_SEND_FENCE; /* queued, not executed at post */
		wr->invalidate_rkey = F->ro->ibmr.rkey;
	}
	if (t == IBV_QPT_UD) {
		wr->wr.ud.ah = &F->ah->ibah;
		wr->wr.ud.remote_qpn = 0xffffff;
		wr->wr.ud.remote_qkey = 0x1111;
	}
}

static int post1(struct rvt_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int ret = rvt_post_send(qp, wr, &bad);

	if (ret)
		assert_ptr_equal(bad, wr);
	else
		assert_null(bad);
	return ret;
}

/* ---------------------------------------------------------------- */

/* L1: RESET, INIT, RTR refuse the list; bad_wr = first WR (decision). */
static void test_l1_state(void **state)
{
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };

	(void)state;
	for (size_t t = 0; t < ARRAY_SIZE(types); t++) {
		struct rvt_qp *qp = qp_new(types[t], NULL, false);
		struct ibv_send_wr wr[2], *bad;
		struct ibv_sge sge[2];

		good_wr(&wr[0], &sge[0], IBV_WR_SEND, types[t]);
		good_wr(&wr[1], &sge[1], IBV_WR_SEND, types[t]);
		wr[0].next = &wr[1];
		for (int s = IBV_QPS_RESET; s <= IBV_QPS_RTR; s++) {
			if (s == IBV_QPS_INIT)
				ut_to_init(qp, 0, 0x1111);
			if (s == IBV_QPS_RTR)
				ut_to_rtr(&dev, qp, qp->qpn, 1);
			bad = NULL;
			assert_int_equal(rvt_post_send(qp, wr, &bad), -EINVAL);
			assert_ptr_equal(bad, &wr[0]);
			/* even a bad WR first: L1 decides */
			wr[0].num_sge = 1000;
			bad = NULL;
			assert_int_equal(rvt_post_send(qp, wr, &bad), -EINVAL);
			assert_ptr_equal(bad, &wr[0]);
			wr[0].num_sge = 1;
		}
		assert_int_equal(qp->s_head, 0);
		qp_done(qp);
	}
}

/* qp-semantics §2.3: which opcode each QP type may post (W2, W3). */
static void test_opcode_table(void **state)
{
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	/* bit per opcode 0..15: RC, UC, UD */
	static const unsigned allowed[] = {
		(1u << IBV_WR_RDMA_WRITE) | (1u << IBV_WR_RDMA_WRITE_WITH_IMM) | (1u << IBV_WR_SEND) |
			(1u << IBV_WR_SEND_WITH_IMM) | (1u << IBV_WR_RDMA_READ) |
			(1u << IBV_WR_ATOMIC_CMP_AND_SWP) | (1u << IBV_WR_ATOMIC_FETCH_AND_ADD) |
			(1u << IBV_WR_LOCAL_INV) | (1u << IBV_WR_SEND_WITH_INV),
		(1u << IBV_WR_RDMA_WRITE) | (1u << IBV_WR_RDMA_WRITE_WITH_IMM) | (1u << IBV_WR_SEND) |
			(1u << IBV_WR_SEND_WITH_IMM) | (1u << IBV_WR_LOCAL_INV),
		(1u << IBV_WR_SEND) | (1u << IBV_WR_SEND_WITH_IMM),
	};
	static const int extra[] = { 16, 0x20, 100, 255, 0x7fffffff };

	(void)state;
	for (size_t t = 0; t < ARRAY_SIZE(types); t++) {
		struct rvt_qp *qp = qp_new(types[t], &(struct ut_qp_caps){ 64, 4, 2, 1, 0 }, false);
		struct ibv_send_wr wr;
		struct ibv_sge sge;
		int n_ok = 0;

		qp_up(qp, 4);
		ut_modify_state(qp, IBV_QPS_SQD);
		for (int op = 0; op < 16; op++) {
			int want = (allowed[t] & (1u << op)) ? 0 : -EINVAL;
			good_wr(&wr, &sge, op, types[t]);
			if (post1(qp, &wr) != want)
				fail_msg("type %d opcode %d: expected %d", types[t], op, want);
			n_ok += !want;
		}
		for (size_t i = 0; i < ARRAY_SIZE(extra); i++) {
			good_wr(&wr, &sge, IBV_WR_SEND, types[t]);
			wr.opcode = (enum ibv_wr_opcode)extra[i];
			assert_int_equal(post1(qp, &wr), -EINVAL);
		}
		assert_int_equal(qp->s_head, (uint32_t)n_ok);
		/* the accepted ones flush in ERR, even unsignaled */
		ut_modify_state(qp, IBV_QPS_ERR);
		for (int i = 0; i < n_ok; i++) {
			struct ibv_wc wc;
			ut_poll1(F->scq, &wc);
			assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
			assert_int_equal(wc.qp_num, qp->qpn);
		}
		ut_cq_empty(F->scq, 10);
		qp_done(qp);
	}
}

/* W1, W5, W6, W7, W10, W11 and their order against W9. */
static void test_wr_checks(void **state)
{
	struct rvt_qp *rc = qp_new(IBV_QPT_RC, &(struct ut_qp_caps){ 8, 4, 2, 1, 0 }, false);
	struct rvt_qp *rc0 = qp_new(IBV_QPT_RC, NULL, false);
	struct rvt_qp *ud = qp_new(IBV_QPT_UD, NULL, false);
	uint32_t pmtu = 128u << dev.rdi->port_attr.active_mtu;
	struct ibv_send_wr wr;
	struct ibv_sge sge[4];
	uint32_t k = F->mr->ibmr.lkey;

	(void)state;
	qp_up(rc, 4);
	qp_up(rc0, 0);
	qp_up(ud, 0);
	ut_modify_state(rc, IBV_QPS_SQD);
	ut_modify_state(rc0, IBV_QPS_SQD);
	ut_modify_state(ud, IBV_QPS_SQD);

	/* W1: num_sge above the QP's max (2); 0 is legal */
	good_wr(&wr, sge, IBV_WR_SEND, IBV_QPT_RC);
	sge[1] = sge[2] = sge[0];
	wr.num_sge = 3;
	assert_int_equal(post1(rc, &wr), -EINVAL);
	wr.num_sge = -1;
	assert_int_equal(post1(rc, &wr), -EINVAL);
	wr.num_sge = 0;
	assert_int_equal(post1(rc, &wr), 0);
	wr.num_sge = 2;
	assert_int_equal(post1(rc, &wr), 0);

	/* W5: atomics need SGE 0 of >= 8 bytes, 8-aligned */
	for (int op = IBV_WR_ATOMIC_CMP_AND_SWP; op <= IBV_WR_ATOMIC_FETCH_AND_ADD; op++) {
		good_wr(&wr, sge, op, IBV_QPT_RC);
		wr.num_sge = 0;
		assert_int_equal(post1(rc, &wr), -EINVAL);
		wr.num_sge = 1;
		sge[0].length = 7;
		assert_int_equal(post1(rc, &wr), -EINVAL);
		sge[0].length = 8;
		sge[0].addr = (uintptr_t)F->buf + 4;
		assert_int_equal(post1(rc, &wr), -EINVAL);
		sge[0].addr = (uintptr_t)F->buf + 1;
		assert_int_equal(post1(rc, &wr), -EINVAL);
		sge[0].addr = (uintptr_t)F->buf + 8;
		sge[0].length = 16;
		assert_int_equal(post1(rc, &wr), 0);
	}
	/* W6: READ and atomics need max_rd_atomic > 0 */
	for (int op = IBV_WR_RDMA_READ; op <= IBV_WR_ATOMIC_FETCH_AND_ADD; op++) {
		good_wr(&wr, sge, op, IBV_QPT_RC);
		assert_int_equal(post1(rc0, &wr), -EINVAL);
		assert_int_equal(post1(rc, &wr), 0);
	}
	good_wr(&wr, sge, IBV_WR_RDMA_WRITE, IBV_QPT_RC);
	assert_int_equal(post1(rc0, &wr), 0);

	/* W7: the UD AH must be of the QP's PD */
	good_wr(&wr, sge, IBV_WR_SEND, IBV_QPT_UD);
	wr.wr.ud.ah = &F->ah2->ibah;
	assert_int_equal(post1(ud, &wr), -EINVAL);
	wr.wr.ud.ah = NULL;
	assert_int_equal(post1(ud, &wr), -EINVAL);
	wr.wr.ud.ah = &F->ah->ibah;
	assert_int_equal(post1(ud, &wr), 0);

	/* W10: lkeys; zero-length SGEs are skipped, even with a bad key */
	good_wr(&wr, sge, IBV_WR_SEND, IBV_QPT_RC);
	sge[0].lkey = 0;
	assert_int_equal(post1(rc, &wr), -EINVAL);
	sge[0].lkey = k ^ 0x40;
	assert_int_equal(post1(rc, &wr), -EINVAL);
	sge[0].lkey = k;
	sge[0].addr = (uintptr_t)F->buf + sizeof(F->buf) - 8;
	assert_int_equal(post1(rc, &wr), -EINVAL);
	sge[0] = (struct ibv_sge){ .addr = 1, .length = 0, .lkey = 0xdead };
	assert_int_equal(post1(rc, &wr), 0);
	/* a failure on SGE 2 drops the reference SGE 1 took */
	sge[0] = (struct ibv_sge){ .addr = (uintptr_t)F->buf, .length = 8, .lkey = k };
	sge[1] = (struct ibv_sge){ .addr = (uintptr_t)F->buf + 100, .length = 8, .lkey = 7 };
	wr.num_sge = 2;
	{
		uint32_t before = mr_refs(F->mr);
		assert_int_equal(post1(rc, &wr), -EINVAL);
		assert_int_equal(mr_refs(F->mr), before);
	}
	/* LOCAL_WRITE is required for READ/atomic destinations only */
	good_wr(&wr, sge, IBV_WR_RDMA_READ, IBV_QPT_RC);
	sge[0] = (struct ibv_sge){ .addr = (uintptr_t)F->rbuf, .length = 8, .lkey = F->ro->ibmr.lkey };
	assert_int_equal(post1(rc, &wr), -EINVAL);
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = (uintptr_t)F->buf;
	wr.wr.atomic.rkey = F->mr->ibmr.rkey;
	assert_int_equal(post1(rc, &wr), -EINVAL);
	wr.opcode = IBV_WR_SEND;
	assert_int_equal(post1(rc, &wr), 0);
	wr.opcode = IBV_WR_RDMA_WRITE;
	assert_int_equal(post1(rc, &wr), 0);
	wr.opcode = IBV_WR_SEND_WITH_INV; /* deviation: no LOCAL_WRITE needed */
	wr.invalidate_rkey = 0x12345;
	assert_int_equal(post1(rc, &wr), 0);

	/* W11 UD: at most the path MTU */
	{
		uint8_t *big = malloc(pmtu + 1);
		struct rvt_mregion *bmr;
		assert_non_null(big);
		bmr = ut_mr(F->pd, big, pmtu + 1, 0);
		good_wr(&wr, sge, IBV_WR_SEND, IBV_QPT_UD);
		sge[0] = (struct ibv_sge){ .addr = (uintptr_t)big, .length = pmtu + 1,
					   .lkey = bmr->ibmr.lkey };
		assert_int_equal(post1(ud, &wr), -EINVAL);
		sge[0].length = pmtu;
		assert_int_equal(post1(ud, &wr), 0);
		ut_modify_state(ud, IBV_QPS_ERR);
		/* the flush may run on the progress thread (it can hold the
		 * engine token when modify asks for a run) */
		for (int i = 0; i < UT_TIMEOUT_MS && mr_refs(bmr) != 1; i++)
			ut_sleep_ms(1);
		drain();
		assert_int_equal(mr_refs(bmr), 1);
		assert_int_equal(rvt_dereg_mr(bmr), 0);
		free(big);
	}

	/* W9 comes after W1-W8 and before W10/W11 */
	{
		struct ibv_send_wr *bad;
		uint32_t cap = rc->max_send_wr, queued = rc->s_head - rc->s_last;
		good_wr(&wr, sge, IBV_WR_RDMA_WRITE, IBV_QPT_RC);
		for (uint32_t i = queued; i < cap; i++)
			assert_int_equal(post1(rc, &wr), 0);
		assert_int_equal(post1(rc, &wr), -ENOMEM);
		sge[0].lkey = 0;                      /* W10 after W9 */
		assert_int_equal(post1(rc, &wr), -ENOMEM);
		sge[0].lkey = k;
		wr.num_sge = 3;                       /* W1 before W9 */
		assert_int_equal(post1(rc, &wr), -EINVAL);
		wr.num_sge = 1;
		wr.opcode = IBV_WR_BIND_MW;           /* W2 before W9 */
		assert_int_equal(post1(rc, &wr), -EINVAL);
		wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		sge[0].length = 4;                    /* W5 before W9 */
		assert_int_equal(post1(rc, &wr), -EINVAL);
		bad = NULL;
		wr.opcode = IBV_WR_RDMA_WRITE;
		assert_int_equal(rvt_post_send(rc, &wr, &bad), -ENOMEM);
		assert_ptr_equal(bad, &wr);
	}
	ut_modify_state(rc, IBV_QPS_ERR);
	ut_modify_state(rc0, IBV_QPS_ERR);
	drain();
	qp_done(rc);
	qp_done(rc0);
	qp_done(ud);
	assert_int_equal(mr_refs(F->mr), 1);
	assert_int_equal(mr_refs(F->ro), 1);
}

/* W11 RC: total length above 2^31, also when the 32-bit sum would wrap. */
static void test_w11_total_length(void **state)
{
	const size_t span = 6ull << 30;
	uint8_t *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	struct rvt_qp *qp = qp_new(IBV_QPT_RC, NULL, false);
	struct rvt_mregion *mr;
	struct ibv_send_wr wr;
	struct ibv_sge sge[4];
	int err = 0;

	(void)state;
	assert_true(p != MAP_FAILED);
	mr = rvt_reg_mr(F->pd, p, span, (uintptr_t)p, 0, &err);
	assert_non_null(mr);
	qp_up(qp, 4);
	ut_modify_state(qp, IBV_QPS_SQD);
	good_wr(&wr, sge, IBV_WR_RDMA_WRITE, IBV_QPT_RC);
	for (int i = 0; i < 4; i++)
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)p + (uint64_t)i * 0x7fffffffu,
					   .length = 0x7fffffffu, .lkey = mr->ibmr.lkey };
	/* exactly 2^31 is allowed, one more byte is not */
	sge[0].length = 0x80000000u;
	wr.num_sge = 1;
	assert_int_equal(post1(qp, &wr), 0);
	sge[1] = (struct ibv_sge){ .addr = (uintptr_t)p + 0x80000000u, .length = 1,
				   .lkey = mr->ibmr.lkey };
	wr.num_sge = 2;
	assert_int_equal(post1(qp, &wr), -EINVAL);
	/* 3 x (2^31 - 1): 6 GiB - 3, which is 2^31 - 3 modulo 2^32 */
	for (int i = 0; i < 3; i++)
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)p + (uint64_t)i * 0x7fffffffu,
					   .length = 0x7fffffffu, .lkey = mr->ibmr.lkey };
	wr.num_sge = 3;
	assert_int_equal(post1(qp, &wr), -EINVAL);
	/* and not adjacent (no merging) */
	sge[1].addr += 1;
	sge[2].addr += 2;
	sge[2].length -= 2;
	assert_int_equal(post1(qp, &wr), -EINVAL);
	/* flush without touching the memory */
	ut_modify_state(qp, IBV_QPS_ERR);
	drain();
	qp_done(qp);
	assert_int_equal(mr_refs(mr), 1);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	munmap(p, span);
}

/* *bad_wr = first failing WR; the ones before it execute, later ones not. */
static void test_bad_wr_partial(void **state)
{
	struct rvt_qp *qp = qp_new(IBV_QPT_RC, NULL, false);
	struct ibv_send_wr wr[4], *bad = NULL;
	struct ibv_sge sge[4];
	struct ibv_wc wc;

	(void)state;
	qp_up(qp, 4);
	memset(F->dst, 0, sizeof(F->dst));
	ut_fill(F->buf, 3 * 256, 77);
	for (int i = 0; i < 4; i++) {
		good_wr(&wr[i], &sge[i], IBV_WR_RDMA_WRITE, IBV_QPT_RC);
		wr[i].wr_id = (uint64_t)i;
		wr[i].send_flags = IBV_SEND_SIGNALED;
		sge[i].addr = (uintptr_t)F->buf + 256u * (uint32_t)(i == 3 ? 2 : i);
		sge[i].length = 256;
		wr[i].wr.rdma.remote_addr = (uintptr_t)F->dst + 256u * (uint32_t)i;
		wr[i].next = i < 3 ? &wr[i + 1] : NULL;
	}
	sge[2].lkey = 0;
	assert_int_equal(rvt_post_send(qp, wr, &bad), -EINVAL);
	assert_ptr_equal(bad, &wr[2]);
	for (int i = 0; i < 2; i++) {
		ut_poll1(F->scq, &wc);
		assert_int_equal(wc.wr_id, (uint64_t)i);
		assert_int_equal(wc.status, IBV_WC_SUCCESS);
		assert_int_equal(wc.opcode, IBV_WC_RDMA_WRITE);
		assert_int_equal(wc.byte_len, 256);
		assert_int_equal(wc.qp_num, qp->qpn);
	}
	ut_cq_empty(F->scq, 20);
	assert_memory_equal(F->dst, F->buf, 512);
	for (int i = 512; i < 1024; i++)
		assert_int_equal(F->dst[i], 0);
	assert_int_equal(ut_state(qp), IBV_QPS_RTS);
	qp_done(qp);
}

/* W9 at exactly the reported capacity, for several sizes; the queued WRs
 * all execute once the QP leaves SQD. */
static void test_sq_full(void **state)
{
	static const uint32_t req[] = { 1, 2, 3, 7, 8, 100 };

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(req); i++) {
		struct rvt_qp *qp = qp_new(IBV_QPT_RC, &(struct ut_qp_caps){ req[i], 1, 1, 1, 0 },
					   (i & 1));
		struct ibv_qp_attr qa;
		struct ibv_send_wr *wr, *bad = NULL;
		struct ibv_sge sge;
		uint32_t cap;

		assert_int_equal(rvt_query_qp(qp, &qa, 0, NULL), 0);
		cap = qa.cap.max_send_wr;
		assert_true(cap >= req[i]);
		wr = calloc(cap + 2, sizeof(*wr));
		assert_non_null(wr);
		qp_up(qp, 4);
		ut_modify_state(qp, IBV_QPS_SQD);
		for (uint32_t j = 0; j < cap + 2; j++) {
			good_wr(&wr[j], &sge, IBV_WR_RDMA_WRITE, IBV_QPT_RC);
			wr[j].wr_id = j;
			wr[j].num_sge = 0;
			wr[j].send_flags = IBV_SEND_SIGNALED;
			wr[j].next = j + 1 < cap + 2 ? &wr[j + 1] : NULL;
		}
		assert_int_equal(rvt_post_send(qp, wr, &bad), -ENOMEM);
		assert_ptr_equal(bad, &wr[cap]);
		ut_modify_state(qp, IBV_QPS_RTS);
		for (uint32_t j = 0; j < cap; j++) {
			struct ibv_wc wc;
			ut_poll1(F->scq, &wc);
			assert_int_equal(wc.wr_id, j);
			assert_int_equal(wc.status, IBV_WC_SUCCESS);
		}
		ut_cq_empty(F->scq, 5);
		/* room again */
		wr[0].next = NULL;
		assert_int_equal(post1(qp, &wr[0]), 0);
		qp_done(qp);
		free(wr);
	}
}

/* SQD holds new WRs; SQD -> RTS runs them (qp-semantics §2.8). */
static void test_sqd_holds(void **state)
{
	struct rvt_qp *qp = qp_new(IBV_QPT_RC, NULL, false);
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_qp_attr qa;
	struct ibv_wc wc;

	(void)state;
	qp_up(qp, 4);
	ut_modify_state(qp, IBV_QPS_SQD);
	memset(F->dst, 0, 64);
	ut_fill(F->buf, 64, 5);
	good_wr(&wr, &sge, IBV_WR_RDMA_WRITE, IBV_QPT_RC);
	sge.length = 64;
	wr.send_flags = IBV_SEND_SIGNALED;
	assert_int_equal(post1(qp, &wr), 0);
	ut_cq_empty(F->scq, 30);
	assert_false(ut_check(F->dst, 64, 5));
	assert_int_equal(rvt_query_qp(qp, &qa, 0, NULL), 0);
	assert_int_equal(qa.qp_state, IBV_QPS_SQD);
	assert_int_equal(qa.sq_draining, 0); /* nothing was in progress */
	ut_modify_state(qp, IBV_QPS_RTS);
	ut_poll1(F->scq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, wr.wr_id);
	assert_true(ut_check(F->dst, 64, 5));
	qp_done(qp);
}

/* SQE/ERR: accepted and flushed with WR_FLUSH_ERR, signaled or not. */
static void test_post_in_err(void **state)
{
	struct rvt_qp *qp = qp_new(IBV_QPT_RC, NULL, false);
	struct ibv_send_wr wr[3];
	struct ibv_sge sge[3];
	struct ibv_wc wc;

	(void)state;
	qp_up(qp, 4);
	ut_modify_state(qp, IBV_QPS_ERR);
	memset(F->dst, 0, 64);
	for (int i = 0; i < 3; i++) {
		good_wr(&wr[i], &sge[i], i == 1 ? IBV_WR_SEND : IBV_WR_RDMA_WRITE, IBV_QPT_RC);
		wr[i].wr_id = 50 + (uint64_t)i;
		wr[i].send_flags = i == 2 ? IBV_SEND_SIGNALED : 0;
		wr[i].next = i < 2 ? &wr[i + 1] : NULL;
	}
	ut_fill(F->buf, 16, 9);
	ut_post_send(qp, wr);
	for (int i = 0; i < 3; i++) {
		ut_poll1(F->scq, &wc);
		assert_int_equal(wc.wr_id, 50 + (uint64_t)i);
		assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
		assert_int_equal(wc.qp_num, qp->qpn);
	}
	ut_cq_empty(F->scq, 10);
	for (int i = 0; i < 64; i++)
		assert_int_equal(F->dst[i], 0);
	/* the W checks still apply */
	sge[0].lkey = 0;
	wr[0].next = NULL;
	assert_int_equal(post1(qp, &wr[0]), -EINVAL);
	assert_int_equal(mr_refs(F->mr), 1);
	qp_done(qp);
}

/* qp-semantics §2.5 LOCAL_INV: immediate (signaled or not) or queued (FENCE). */
static void test_local_inv(void **state)
{
	struct rvt_qp *qp = qp_new(IBV_QPT_RC, NULL, false);
	struct rvt_qp *uc = qp_new(IBV_QPT_UC, NULL, false);
	static uint8_t b[64];
	struct rvt_mregion *m1 = ut_mr(F->pd, b, sizeof(b), IBV_ACCESS_LOCAL_WRITE);
	struct rvt_mregion *m2 = ut_mr(F->pd, b, sizeof(b), IBV_ACCESS_LOCAL_WRITE);
	struct rvt_mregion *m3 = ut_mr(F->pd, b, sizeof(b), IBV_ACCESS_LOCAL_WRITE);
	struct rvt_mregion *other = ut_mr(F->pd2, b, sizeof(b), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_send_wr wr = { .wr_id = 0x77, .opcode = IBV_WR_LOCAL_INV };
	struct rvt_sge s = { 0 };
	struct ibv_sge isge = { .addr = (uintptr_t)b, .length = 8 };
	struct ibv_wc wc;
	uint32_t head;

	(void)state;
	qp_up(qp, 4);
	qp_up(uc, 0);
	/* errors at post time */
	wr.invalidate_rkey = 0;
	assert_int_equal(post1(qp, &wr), -EINVAL);
	wr.invalidate_rkey = m1->ibmr.rkey ^ 2;
	assert_int_equal(post1(qp, &wr), -EINVAL);
	wr.invalidate_rkey = other->ibmr.rkey;
	assert_int_equal(post1(qp, &wr), -EINVAL);
	/* unsignaled, immediate: done, no slot, no completion */
	head = qp->s_head;
	wr.invalidate_rkey = m1->ibmr.rkey;
	assert_int_equal(post1(qp, &wr), 0);
	assert_int_equal(qp->s_head, head);
	isge.lkey = m1->ibmr.lkey;
	assert_int_equal(rvt_lkey_ok(&dev.rdi->lkey_table, F->pd, &s, NULL, &isge, 0), -EINVAL);
	ut_cq_empty(F->scq, 10);
	/* signaled, immediate: a completion-only WQE */
	wr.invalidate_rkey = m2->ibmr.rkey;
	wr.send_flags = IBV_SEND_SIGNALED;
	assert_int_equal(post1(uc, &wr), 0);
	ut_poll1(F->scq, &wc);
	assert_int_equal(wc.wr_id, 0x77);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_LOCAL_INV);
	isge.lkey = m2->ibmr.lkey;
	assert_int_equal(rvt_lkey_ok(&dev.rdi->lkey_table, F->pd, &s, NULL, &isge, 0), -EINVAL);
	/* FENCE: queued and executed by the engine; a bad key there is a
	 * LOC_PROT_ERR completion without a QP error */
	wr.send_flags = IBV_SEND_FENCE | IBV_SEND_SIGNALED;
	wr.invalidate_rkey = m2->ibmr.rkey ^ 8;
	wr.wr_id = 0x78;
	assert_int_equal(post1(qp, &wr), 0);
	ut_poll1(F->scq, &wc);
	assert_int_equal(wc.wr_id, 0x78);
	assert_int_equal(wc.status, IBV_WC_LOC_PROT_ERR);
	assert_int_equal(wc.opcode, IBV_WC_LOCAL_INV);
	assert_int_equal(ut_state(qp), IBV_QPS_RTS);
	wr.invalidate_rkey = m3->ibmr.rkey;
	wr.wr_id = 0x79;
	assert_int_equal(post1(qp, &wr), 0);
	ut_poll1(F->scq, &wc);
	assert_int_equal(wc.wr_id, 0x79);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	isge.lkey = m3->ibmr.lkey;
	assert_int_equal(rvt_lkey_ok(&dev.rdi->lkey_table, F->pd, &s, NULL, &isge, 0), -EINVAL);
	assert_int_equal(qp->local_ops_pending, 0);
	/* invalidated MRs can still be deregistered */
	assert_int_equal(rvt_dereg_mr(m1), 0);
	assert_int_equal(rvt_dereg_mr(m2), 0);
	assert_int_equal(rvt_dereg_mr(m3), 0);
	assert_int_equal(rvt_dereg_mr(other), 0);
	qp_done(qp);
	qp_done(uc);
}

/* Inline data (rxe-style decision): copied at post, lkeys not checked. */
static void test_inline(void **state)
{
	struct rvt_qp *qp = qp_new(IBV_QPT_RC, &(struct ut_qp_caps){ 16, 16, 4, 1, 64 }, false);
	uint8_t src[64];
	struct ibv_sge sge[4];
	struct ibv_send_wr wr;
	struct ibv_wc wc;

	(void)state;
	qp_up(qp, 4);
	/* more than max_inline_data */
	good_wr(&wr, sge, IBV_WR_SEND, IBV_QPT_RC);
	wr.send_flags = IBV_SEND_INLINE;
	sge[0] = (struct ibv_sge){ .addr = (uintptr_t)src, .length = 40, .lkey = 0 };
	sge[1] = (struct ibv_sge){ .addr = (uintptr_t)src, .length = 25, .lkey = 0 };
	wr.num_sge = 2;
	assert_int_equal(post1(qp, &wr), -EINVAL);
	/* a length sum that wraps 32 bits is not small */
	sge[0].length = UINT32_MAX;
	sge[1].length = 1;
	assert_int_equal(post1(qp, &wr), -EINVAL);
	sge[0].length = UINT32_MAX - 15;
	sge[1].length = 32;
	assert_int_equal(post1(qp, &wr), -EINVAL);
	/* inline READ / atomic: EINVAL (only SEND and RDMA WRITE carry inline) */
	good_wr(&wr, sge, IBV_WR_RDMA_READ, IBV_QPT_RC);
	wr.send_flags = IBV_SEND_INLINE;
	assert_int_equal(post1(qp, &wr), -EINVAL);

	/* queued in SQD: the source is copied at post time, lkey 0 is fine */
	ut_modify_state(qp, IBV_QPS_SQD);
	ut_post_recv(qp, 0x55, F->dst, 128, F->dmr->ibmr.lkey);
	ut_fill(src, sizeof(src), 31);
	good_wr(&wr, sge, IBV_WR_SEND, IBV_QPT_RC);
	wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
	sge[0] = (struct ibv_sge){ .addr = (uintptr_t)src, .length = 20, .lkey = 0 };
	sge[1] = (struct ibv_sge){ .addr = (uintptr_t)src + 20, .length = 0, .lkey = 0 };
	sge[2] = (struct ibv_sge){ .addr = (uintptr_t)src + 20, .length = 44, .lkey = 0xbad };
	wr.num_sge = 3;
	assert_int_equal(post1(qp, &wr), 0);
	memset(src, 0, sizeof(src));
	ut_modify_state(qp, IBV_QPS_RTS);
	ut_poll1(F->scq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 64);
	ut_poll1(F->rcq, &wc);
	assert_int_equal(wc.wr_id, 0x55);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 64);
	assert_true(ut_check(F->dst, 64, 31));
	/* inline RDMA WRITE */
	ut_fill(src, sizeof(src), 32);
	good_wr(&wr, sge, IBV_WR_RDMA_WRITE, IBV_QPT_RC);
	wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
	sge[0] = (struct ibv_sge){ .addr = (uintptr_t)src, .length = 64, .lkey = 0 };
	wr.wr.rdma.remote_addr = (uintptr_t)F->dst + 1000;
	assert_int_equal(post1(qp, &wr), 0);
	ut_poll1(F->scq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_true(ut_check(F->dst + 1000, 64, 32));
	qp_done(qp);
}

/* post_recv R1-R5. */
static void test_post_recv(void **state)
{
	struct rvt_qp *qp = qp_new(IBV_QPT_RC, &(struct ut_qp_caps){ 4, 5, 1, 2, 0 }, false);
	struct ibv_qp_attr qa;
	struct ibv_recv_wr *w, *bad;
	struct ibv_sge sge[3];
	uint32_t cap;
	struct ibv_wc wc;

	(void)state;
	assert_int_equal(rvt_query_qp(qp, &qa, 0, NULL), 0);
	cap = qa.cap.max_recv_wr;
	assert_true(cap >= 5);
	w = calloc(cap + 2, sizeof(*w));
	assert_non_null(w);
	for (int i = 0; i < 3; i++)
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)F->dst, .length = 8, .lkey = 0xbadbad };
	for (uint32_t i = 0; i < cap + 2; i++) {
		w[i].wr_id = 900 + i;
		w[i].sg_list = sge;
		w[i].num_sge = 2;
		w[i].next = i + 1 < cap + 2 ? &w[i + 1] : NULL;
	}
	/* R1: RESET */
	bad = NULL;
	assert_int_equal(rvt_post_recv(qp, w, &bad), -EINVAL);
	assert_ptr_equal(bad, &w[0]);
	/* INIT accepts; lkeys are not looked at now */
	ut_to_init(qp, 0, 0);
	/* R2: num_sge above max: this WR is bad, the earlier are queued */
	w[2].num_sge = 3;
	bad = NULL;
	assert_int_equal(rvt_post_recv(qp, w, &bad), -EINVAL);
	assert_ptr_equal(bad, &w[2]);
	assert_int_equal(rvt_rq_count(&qp->rq), 2);
	w[2].num_sge = 0;
	/* R3: full at the reported capacity */
	bad = NULL;
	assert_int_equal(rvt_post_recv(qp, &w[2], &bad), -ENOMEM);
	assert_ptr_equal(bad, &w[cap]);
	assert_int_equal(rvt_rq_count(&qp->rq), cap);
	/* R4: ERR flushes what is queued, then each new WR at once, in order */
	ut_modify_state(qp, IBV_QPS_ERR);
	for (uint32_t i = 0; i < cap; i++) {
		ut_poll1(F->rcq, &wc);
		assert_int_equal(wc.wr_id, 900 + i);
		assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
		assert_int_equal(wc.opcode, IBV_WC_RECV);
		assert_int_equal(wc.qp_num, qp->qpn);
	}
	w[4].next = NULL;
	bad = NULL;
	assert_int_equal(rvt_post_recv(qp, &w[3], &bad), 0);
	assert_null(bad);
	for (uint32_t i = 3; i < 5; i++) {
		ut_poll1(F->rcq, &wc);
		assert_int_equal(wc.wr_id, 900 + i);
		assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
		assert_int_equal(wc.opcode, IBV_WC_RECV);
	}
	ut_cq_empty(F->rcq, 10);
	/* R2 still applies in ERR */
	w[3].num_sge = 3;
	bad = NULL;
	assert_int_equal(rvt_post_recv(qp, &w[3], &bad), -EINVAL);
	assert_ptr_equal(bad, &w[3]);
	ut_cq_empty(F->rcq, 10);
	/* RESET discards without completions; posting needs INIT again */
	ut_modify_state(qp, IBV_QPS_RESET);
	bad = NULL;
	assert_int_equal(rvt_post_recv(qp, &w[4], &bad), -EINVAL);
	free(w);
	qp_done(qp);
}

/* qp-semantics §2.5: while a local operation is pending, later ones queue
 * behind it even without FENCE, and run in order. */
static void test_local_inv_pending_queues(void **state)
{
	struct rvt_qp *qp = qp_new(IBV_QPT_RC, NULL, false);
	static uint8_t b[64];
	struct rvt_mregion *m1 = ut_mr(F->pd, b, sizeof(b), IBV_ACCESS_LOCAL_WRITE);
	struct rvt_mregion *m2 = ut_mr(F->pd, b, sizeof(b), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_send_wr wr = { .opcode = IBV_WR_LOCAL_INV };
	struct ibv_sge isge = { .addr = (uintptr_t)b, .length = 8 };
	struct rvt_sge s = { 0 };
	struct ibv_wc wc;

	(void)state;
	qp_up(qp, 4);
	ut_modify_state(qp, IBV_QPS_SQD);
	wr.wr_id = 1;
	wr.send_flags = IBV_SEND_FENCE | IBV_SEND_SIGNALED;
	wr.invalidate_rkey = m1->ibmr.rkey;
	assert_int_equal(post1(qp, &wr), 0);
	wr.wr_id = 2;
	wr.send_flags = 0; /* no FENCE, unsignaled: still queued behind #1 */
	wr.invalidate_rkey = m2->ibmr.rkey;
	assert_int_equal(post1(qp, &wr), 0);
	assert_int_equal(qp->s_head, 2);
	/* neither has run yet */
	isge.lkey = m2->ibmr.lkey;
	assert_int_equal(rvt_lkey_ok(&dev.rdi->lkey_table, F->pd, &s, NULL, &isge, 0), 1);
	rvt_put_sge(&s);
	isge.lkey = m1->ibmr.lkey;
	assert_int_equal(rvt_lkey_ok(&dev.rdi->lkey_table, F->pd, &s, NULL, &isge, 0), 1);
	rvt_put_sge(&s);
	ut_modify_state(qp, IBV_QPS_RTS);
	ut_poll1(F->scq, &wc);
	assert_int_equal(wc.wr_id, 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_LOCAL_INV);
	ut_cq_empty(F->scq, 10);
	assert_int_equal(rvt_lkey_ok(&dev.rdi->lkey_table, F->pd, &s, NULL, &isge, 0), -EINVAL);
	isge.lkey = m2->ibmr.lkey;
	assert_int_equal(rvt_lkey_ok(&dev.rdi->lkey_table, F->pd, &s, NULL, &isge, 0), -EINVAL);
	assert_int_equal(qp->local_ops_pending, 0);
	assert_int_equal(qp->s_last, qp->s_head);
	assert_int_equal(rvt_dereg_mr(m1), 0);
	assert_int_equal(rvt_dereg_mr(m2), 0);
	qp_done(qp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_l1_state),
		cmocka_unit_test(test_opcode_table),
		cmocka_unit_test(test_wr_checks),
		cmocka_unit_test(test_w11_total_length),
		cmocka_unit_test(test_bad_wr_partial),
		cmocka_unit_test(test_sq_full),
		cmocka_unit_test(test_sqd_holds),
		cmocka_unit_test(test_post_in_err),
		cmocka_unit_test(test_local_inv),
		cmocka_unit_test(test_local_inv_pending_queues),
		cmocka_unit_test(test_inline),
		cmocka_unit_test(test_post_recv),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
