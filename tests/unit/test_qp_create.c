/*
 * QP creation (qp-semantics §4.1-§4.3): the checks C1-C9 with their
 * errno and order, the caps reported, and QPN numbering (also on the
 * allocator itself: wrap-around and exhaustion).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/qp_table.h"
#include "ut.h"

static struct ut_dev dev;
static struct rvt_pd *pd;
static struct rvt_cq *cq;
static struct rvt_srq *srq;

static int setup(void **state)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	int err = 0;

	(void)state;
	ut_open(&dev);
	pd = ut_pd(&dev);
	cq = ut_cq(&dev, 16);
	srq = rvt_create_srq(pd, &sa, &err);
	assert_non_null(srq);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	assert_int_equal(rvt_destroy_srq(srq), 0);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
	ut_close(&dev);
	return 0;
}

/* A valid RC request with small caps. */
static void base_attr(struct ibv_qp_init_attr_ex *a)
{
	memset(a, 0, sizeof(*a));
	a->qp_type = IBV_QPT_RC;
	a->send_cq = ibv_cq_ex_to_cq(&cq->ibcq);
	a->recv_cq = ibv_cq_ex_to_cq(&cq->ibcq);
	a->comp_mask = IBV_QP_INIT_ATTR_PD;
	a->pd = &pd->ibpd;
	a->cap.max_send_wr = 4;
	a->cap.max_recv_wr = 4;
	a->cap.max_send_sge = 1;
	a->cap.max_recv_sge = 1;
}

enum { F_FLAGS = 1, F_SEND_SGE = 2, F_SEND_WR = 4, F_RECV_SGE = 8, F_RECV_WR = 16,
       F_ZERO = 32, F_TYPE = 64, F_INLINE = 128 };

/* Apply a set of faults to a valid request. */
static void apply(struct ibv_qp_init_attr_ex *a, int faults)
{
	struct rvt_dev_info *rdi = dev.rdi;

	if (faults & F_FLAGS) {
		a->comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
		a->create_flags = IBV_QP_CREATE_SCATTER_FCS;
	}
	if (faults & F_SEND_SGE)
		a->cap.max_send_sge = (uint32_t)rdi->dattr.max_sge + 1;
	if (faults & F_SEND_WR)
		a->cap.max_send_wr = (uint32_t)rdi->dattr.max_qp_wr + 1;
	if (faults & F_INLINE)
		a->cap.max_inline_data = URVT_MAX_INLINE + 1;
	if (faults & F_RECV_SGE)
		a->cap.max_recv_sge = (uint32_t)rdi->dattr.max_sge + 1;
	if (faults & F_RECV_WR)
		a->cap.max_recv_wr = (uint32_t)rdi->dattr.max_qp_wr + 1;
	if (faults & F_ZERO)
		memset(&a->cap, 0, sizeof(a->cap));
	if (faults & F_TYPE)
		a->qp_type = IBV_QPT_RAW_PACKET;
}

static int try_faults(int faults, bool with_srq)
{
	struct ibv_qp_init_attr_ex a;

	base_attr(&a);
	if (with_srq)
		a.srq = &srq->ibsrq;
	apply(&a, faults);
	return ut_qp_try(&dev, &a);
}

/* ---------------------------------------------------------------- */

static void test_each_check(void **state)
{
	static const struct {
		int faults;
		int err;
	} cases[] = {
		{ 0, 0 },
		{ F_FLAGS, -EOPNOTSUPP },                /* C1 */
		{ F_SEND_SGE, -EINVAL },                 /* C2 */
		{ F_SEND_WR, -EINVAL },                  /* C2 */
		{ F_INLINE, -EINVAL },                   /* C2 (inline cap) */
		{ F_RECV_SGE, -EINVAL },                 /* C3 */
		{ F_RECV_WR, -EINVAL },                  /* C3 */
		{ F_ZERO, -EINVAL },                     /* C4 */
		{ F_TYPE, -EOPNOTSUPP },                 /* C6 */
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int r = try_faults(cases[i].faults, false);
		if (r != cases[i].err)
			fail_msg("faults %#x: %d, expected %d", cases[i].faults, r, cases[i].err);
	}
}

/* The first failing check in qp-semantics §4.1 order decides the errno. */
static void test_check_order(void **state)
{
	static const struct {
		int faults;
		int err;
	} cases[] = {
		{ F_FLAGS | F_SEND_SGE | F_RECV_WR | F_TYPE, -EOPNOTSUPP }, /* C1 first */
		{ F_SEND_WR | F_TYPE, -EINVAL },         /* C2 before C6 */
		{ F_RECV_SGE | F_TYPE, -EINVAL },        /* C3 before C6 */
		{ F_ZERO | F_TYPE, -EINVAL },            /* C4 before C6 */
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int r = try_faults(cases[i].faults, false);
		if (r != cases[i].err)
			fail_msg("faults %#x: %d, expected %d", cases[i].faults, r, cases[i].err);
	}
}

/* With an SRQ the receive caps are ignored (C3, C4 not applied). */
static void test_srq_ignores_recv_caps(void **state)
{
	struct ibv_qp_init_attr_ex a;
	struct ibv_qp_attr qa;
	struct rvt_qp *qp;
	int err = 0;

	(void)state;
	assert_int_equal(try_faults(F_RECV_SGE | F_RECV_WR, true), 0);
	assert_int_equal(try_faults(F_ZERO, true), 0);
	assert_int_equal(try_faults(F_SEND_WR, true), -EINVAL);
	base_attr(&a);
	a.srq = &srq->ibsrq;
	a.cap.max_recv_wr = 100;
	a.cap.max_recv_sge = 3;
	qp = rvt_create_qp(dev.uctx, &a, &err);
	assert_non_null(qp);
	assert_int_equal(a.cap.max_recv_wr, 0);
	assert_int_equal(rvt_query_qp(qp, &qa, 0, NULL), 0);
	assert_int_equal(qa.cap.max_recv_wr, 0);
	assert_int_equal(rvt_destroy_qp(qp), 0);
}

static void test_other_types_and_args(void **state)
{
	/* XRC_SEND / XRC_RECV: test_xrc */
	static const int types[] = { IBV_QPT_RAW_PACKET, IBV_QPT_DRIVER, 0, 1 };
	struct ibv_qp_init_attr_ex a;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(types); i++) {
		base_attr(&a);
		a.qp_type = (enum ibv_qp_type)types[i];
		assert_int_equal(ut_qp_try(&dev, &a), -EOPNOTSUPP);
	}
	/* UC and UD are fine */
	base_attr(&a);
	a.qp_type = IBV_QPT_UC;
	assert_int_equal(ut_qp_try(&dev, &a), 0);
	a.qp_type = IBV_QPT_UD;
	assert_int_equal(ut_qp_try(&dev, &a), 0);
	/* create flags comp_mask with no flag set is fine */
	base_attr(&a);
	a.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
	assert_int_equal(ut_qp_try(&dev, &a), 0);
	/* the core needs PD and both CQs */
	base_attr(&a);
	a.pd = NULL;
	assert_int_equal(ut_qp_try(&dev, &a), -EINVAL);
	base_attr(&a);
	a.comp_mask = 0;
	assert_int_equal(ut_qp_try(&dev, &a), -EINVAL);
	base_attr(&a);
	a.send_cq = NULL;
	assert_int_equal(ut_qp_try(&dev, &a), -EINVAL);
	base_attr(&a);
	a.recv_cq = NULL;
	assert_int_equal(ut_qp_try(&dev, &a), -EINVAL);
	/* limits themselves are accepted */
	base_attr(&a);
	a.cap.max_send_sge = (uint32_t)dev.rdi->dattr.max_sge;
	a.cap.max_recv_sge = (uint32_t)dev.rdi->dattr.max_sge;
	a.cap.max_send_wr = (uint32_t)dev.rdi->dattr.max_qp_wr;
	a.cap.max_recv_wr = (uint32_t)dev.rdi->dattr.max_qp_wr;
	a.cap.max_inline_data = URVT_MAX_INLINE;
	assert_int_equal(ut_qp_try(&dev, &a), 0);
	/* only one kind of queue */
	base_attr(&a);
	memset(&a.cap, 0, sizeof(a.cap));
	a.cap.max_recv_wr = 1;
	assert_int_equal(ut_qp_try(&dev, &a), 0);
}

/* C9: the device QP count, checked last, everything undone on failure. */
static void test_max_qp(void **state)
{
	struct rvt_dev_info *rdi = dev.rdi;
	int saved = rdi->dattr.max_qp, n0 = atomic_load(&rdi->n_qps);
	int pd_use = atomic_load(&pd->usecnt), cq_use = atomic_load(&cq->usecnt);
	struct ibv_qp_init_attr_ex a;
	struct rvt_qp *q[2];
	int err = 0;

	(void)state;
	rdi->dattr.max_qp = n0 + 2;
	for (int i = 0; i < 2; i++) {
		base_attr(&a);
		q[i] = rvt_create_qp(dev.uctx, &a, &err);
		assert_non_null(q[i]);
	}
	base_attr(&a);
	assert_int_equal(ut_qp_try(&dev, &a), -ENOMEM);
	a.cap.max_send_sge = 1000; /* earlier checks still win */
	assert_int_equal(ut_qp_try(&dev, &a), -EINVAL);
	assert_int_equal(atomic_load(&rdi->n_qps), n0 + 2);
	assert_int_equal(atomic_load(&pd->usecnt), pd_use + 2);
	assert_int_equal(atomic_load(&cq->usecnt), cq_use + 4);
	assert_int_equal(rvt_destroy_qp(q[1]), 0);
	base_attr(&a);
	q[1] = rvt_create_qp(dev.uctx, &a, &err);
	assert_non_null(q[1]);
	rdi->dattr.max_qp = saved;
	assert_int_equal(rvt_destroy_qp(q[0]), 0);
	assert_int_equal(rvt_destroy_qp(q[1]), 0);
	assert_int_equal(atomic_load(&rdi->n_qps), n0);
	assert_int_equal(atomic_load(&pd->usecnt), pd_use);
	assert_int_equal(atomic_load(&cq->usecnt), cq_use);
}

/* rvt_cq_rx_fills: a CQ only UD QPs send into gets nothing from what
 * arrives (its poller does not receive, transport/poll.c); any other use
 * (a receive CQ, an RC QP's send CQ, which ACKs complete) makes it one. */
static void test_cq_rx_fills(void **state)
{
	struct rvt_cq *scq = ut_cq(&dev, 16), *rcq = ut_cq(&dev, 16);
	struct rvt_qp *ud, *ud2, *rc;

	(void)state;
	assert_true(rvt_cq_rx_fills(scq)); /* no user yet: as before */
	ud = ut_qp(&dev, pd, IBV_QPT_UD, scq, rcq, NULL, NULL, false);
	assert_false(rvt_cq_rx_fills(scq));
	assert_true(rvt_cq_rx_fills(rcq));
	ud2 = ut_qp(&dev, pd, IBV_QPT_UD, scq, rcq, NULL, NULL, false);
	assert_false(rvt_cq_rx_fills(scq));
	rc = ut_qp(&dev, pd, IBV_QPT_RC, scq, rcq, NULL, NULL, false);
	assert_true(rvt_cq_rx_fills(scq));
	assert_int_equal(rvt_destroy_qp(rc), 0);
	assert_false(rvt_cq_rx_fills(scq));
	/* a UD QP that both sends and receives into it */
	assert_int_equal(rvt_destroy_qp(ud2), 0);
	ud2 = ut_qp(&dev, pd, IBV_QPT_UD, scq, scq, NULL, NULL, false);
	assert_true(rvt_cq_rx_fills(scq));
	assert_int_equal(rvt_destroy_qp(ud2), 0);
	assert_int_equal(rvt_destroy_qp(ud), 0);
	assert_int_equal(atomic_load(&scq->ud_send_uses), 0);
	assert_true(rvt_cq_rx_fills(scq));
	assert_int_equal(rvt_destroy_cq(scq), 0);
	assert_int_equal(rvt_destroy_cq(rcq), 0);
}

static void test_caps_reported(void **state)
{
	static const struct ut_qp_caps req[] = {
		{ 1, 1, 1, 1, 0 },   { 3, 5, 2, 3, 16 }, { 4, 4, 0, 0, 0 },
		{ 100, 7, 32, 32, 512 }, { 16384, 1, 1, 1, 1 },
	};
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };

	(void)state;
	for (size_t t = 0; t < ARRAY_SIZE(types); t++) {
		for (size_t i = 0; i < ARRAY_SIZE(req); i++) {
			struct ibv_qp_init_attr_ex a;
			struct ibv_qp_attr qa;
			struct ibv_qp_init_attr ia;
			struct rvt_qp *qp;
			int err = 0;

			base_attr(&a);
			a.qp_type = types[t];
			a.sq_sig_all = (int)(i & 1);
			a.cap.max_send_wr = req[i].send_wr;
			a.cap.max_recv_wr = req[i].recv_wr;
			a.cap.max_send_sge = req[i].send_sge;
			a.cap.max_recv_sge = req[i].recv_sge;
			a.cap.max_inline_data = req[i].inline_data;
			a.qp_context = (void *)(uintptr_t)(0x1000 + i);
			qp = rvt_create_qp(dev.uctx, &a, &err);
			assert_non_null(qp);
			assert_true(a.cap.max_send_wr >= req[i].send_wr);
			assert_true(a.cap.max_recv_wr >= req[i].recv_wr);
			/* rings are powers of two with one slot kept free */
			assert_int_equal((a.cap.max_send_wr + 1) & a.cap.max_send_wr, 0);
			assert_int_equal((a.cap.max_recv_wr + 1) & a.cap.max_recv_wr, 0);
			assert_int_equal(a.cap.max_send_sge, req[i].send_sge);
			assert_int_equal(a.cap.max_recv_sge, req[i].recv_sge);
			assert_int_equal(a.cap.max_inline_data, req[i].inline_data);
			assert_int_equal(rvt_query_qp(qp, &qa, 0, &ia), 0);
			assert_memory_equal(&qa.cap, &a.cap, sizeof(a.cap));
			assert_memory_equal(&ia.cap, &a.cap, sizeof(a.cap));
			assert_int_equal(ia.qp_type, types[t]);
			assert_int_equal(ia.sq_sig_all, (int)(i & 1));
			assert_ptr_equal(ia.send_cq, a.send_cq);
			assert_ptr_equal(ia.recv_cq, a.recv_cq);
			assert_null(ia.srq);
			assert_ptr_equal(ia.qp_context, a.qp_context);
			assert_int_equal(qa.qp_state, IBV_QPS_RESET);
			assert_int_equal(qp->ibqp_ex.qp_base.qp_num, qp->qpn);
			assert_int_equal(qp->ibqp_ex.qp_base.qp_type, types[t]);
			assert_int_equal(qp->ibqp_ex.qp_base.state, IBV_QPS_RESET);
			assert_int_equal(rvt_destroy_qp(qp), 0);
		}
	}
}

/* qp-semantics §4.2: initial attribute values after create. */
static void test_initial_values(void **state)
{
	struct ibv_qp_init_attr_ex a;
	struct ibv_qp_attr qa;
	struct rvt_qp *qp;
	int err = 0;

	(void)state;
	base_attr(&a);
	qp = rvt_create_qp(dev.uctx, &a, &err);
	assert_non_null(qp);
	assert_int_equal(rvt_query_qp(qp, &qa, 0, NULL), 0);
	assert_int_equal(qa.qp_state, IBV_QPS_RESET);
	assert_int_equal(qa.cur_qp_state, IBV_QPS_RESET);
	assert_int_equal(qa.dest_qp_num, 0);
	assert_int_equal(qa.qkey, 0);
	assert_int_equal(qa.qp_access_flags, 0);
	assert_int_equal(qa.sq_psn, 0);
	assert_int_equal(qa.rq_psn, 0);
	assert_int_equal(qa.path_mig_state, IBV_MIG_MIGRATED);
	assert_int_equal(qa.retry_cnt, 0);
	assert_int_equal(qa.rnr_retry, 0);
	assert_int_equal(qa.min_rnr_timer, 0);
	assert_int_equal(qa.max_rd_atomic, 0);
	assert_int_equal(qa.max_dest_rd_atomic, 0);
	assert_int_equal(qa.timeout, 0);
	assert_int_equal(qa.pkey_index, 0);
	assert_int_equal(qa.en_sqd_async_notify, 0);
	assert_int_equal(qa.sq_draining, 0);
	assert_int_equal(rvt_destroy_qp(qp), 0);
}

#define NQ 6
static void test_qpn_numbering(void **state)
{
	struct rvt_qp *q[NQ];
	uint32_t qpn[NQ], dead1, dead2;

	(void)state;
	for (int i = 0; i < NQ; i++) {
		q[i] = ut_qp(&dev, pd, (enum ibv_qp_type)(IBV_QPT_RC + i % 3), cq, cq, NULL, NULL,
			     false);
		qpn[i] = q[i]->qpn;
		assert_true(qpn[i] >= 2);
		assert_true(qpn[i] <= URVT_QPN_MASK);
		if (i)
			assert_true(qpn[i] > qpn[i - 1]);
	}
	/* the last and a middle number are not handed out again right away */
	dead1 = qpn[NQ - 1];
	dead2 = qpn[2];
	assert_int_equal(rvt_destroy_qp(q[NQ - 1]), 0);
	assert_int_equal(rvt_destroy_qp(q[2]), 0);
	for (int i = 0; i < 3; i++) {
		struct rvt_qp *n = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, NULL, false);
		assert_int_not_equal(n->qpn, dead1);
		assert_int_not_equal(n->qpn, dead2);
		assert_true(n->qpn > dead1);
		assert_int_equal(rvt_destroy_qp(n), 0);
	}
	for (int i = 0; i < NQ - 1; i++)
		if (i != 2)
			assert_int_equal(rvt_destroy_qp(q[i]), 0);
}

/* The allocator (qp-semantics §4.3): round robin, wrap past 2^24, exhaustion. */
static void test_qpn_allocator(void **state)
{
	struct rvt_qpn_table *t = calloc(1, sizeof(*t));
	uint32_t a, b, c, d;

	(void)state;
	assert_non_null(t);
	assert_int_equal(rvt_qpn_table_init(t), 0);
	assert_int_equal(rvt_alloc_qpn(t, &a), 0);
	assert_int_equal(rvt_alloc_qpn(t, &b), 0);
	assert_int_equal(rvt_alloc_qpn(t, &c), 0);
	assert_int_equal(a, 2);
	assert_int_equal(b, 3);
	assert_int_equal(c, 4);
	rvt_free_qpn(t, b);
	assert_int_equal(rvt_alloc_qpn(t, &d), 0);
	assert_int_equal(d, 5);
	/* near the top of the space: the last number, then a wrap that skips
	 * the reserved 0/1 and the used 2, and finds the freed 3 */
	t->last = URVT_QPN_MASK - 1;
	assert_int_equal(rvt_alloc_qpn(t, &d), 0);
	assert_int_equal(d, URVT_QPN_MASK);
	assert_int_equal(rvt_alloc_qpn(t, &d), 0);
	assert_int_equal(d, 3);
	rvt_qpn_table_fini(t);

	/* exhaustion: every bit set except the reserved ones */
	memset(t, 0, sizeof(*t));
	assert_int_equal(rvt_qpn_table_init(t), 0);
	for (uint32_t m = 0; m < ARRAY_SIZE(t->map); m++) {
		if (!t->map[m]) {
			t->map[m] = malloc(32768 / 8);
			assert_non_null(t->map[m]);
			t->nmaps++;
		}
		memset(t->map[m], 0xff, 32768 / 8);
	}
	assert_int_equal(rvt_alloc_qpn(t, &d), -ENOMEM);
	rvt_free_qpn(t, 0x123456);
	assert_int_equal(rvt_alloc_qpn(t, &d), 0);
	assert_int_equal(d, 0x123456);
	assert_int_equal(rvt_alloc_qpn(t, &d), -ENOMEM);
	/* a freed bit in the first word, below the wrap point */
	rvt_free_qpn(t, 40);
	assert_int_equal(rvt_alloc_qpn(t, &d), 0);
	assert_int_equal(d, 40);
	rvt_qpn_table_fini(t);
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_check),
		cmocka_unit_test(test_check_order),
		cmocka_unit_test(test_srq_ignores_recv_caps),
		cmocka_unit_test(test_other_types_and_args),
		cmocka_unit_test(test_max_qp),
		cmocka_unit_test(test_cq_rx_fills),
		cmocka_unit_test(test_caps_reported),
		cmocka_unit_test(test_initial_values),
		cmocka_unit_test(test_qpn_numbering),
		cmocka_unit_test(test_qpn_allocator),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
