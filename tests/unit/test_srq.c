/*
 * Shared receive queues (qp-semantics §3.2, §7 step 7, qp-semantics §12, srq.c):
 * create limits, posting, modify (limit, resize), query and the limit event.
 * WQEs are consumed through a self-connected RC QP so the order the SRQ
 * hands them out is observed, not assumed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ut.h"

static struct ut_dev dev;

struct fix {
	struct rvt_pd *pd;
	struct rvt_cq *scq, *rcq;
	struct rvt_srq *srq;
	struct rvt_qp *qp;
	struct rvt_mregion *mr;
	uint8_t buf[4096];
};

static int setup(void **state)
{
	(void)state;
	ut_open(&dev);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ut_async_drain(&dev);
	ut_close(&dev);
	return 0;
}

static struct rvt_srq *srq_try(struct rvt_pd *pd, uint32_t max_wr, uint32_t max_sge,
			       uint32_t limit, int *err, uint32_t *cap)
{
	struct ibv_srq_init_attr a;
	struct rvt_srq *srq;

	memset(&a, 0, sizeof(a));
	a.attr.max_wr = max_wr;
	a.attr.max_sge = max_sge;
	a.attr.srq_limit = limit;
	*err = 0;
	srq = rvt_create_srq(pd, &a, err);
	if (srq && cap)
		*cap = a.attr.max_wr;
	return srq;
}

static struct fix *fix_new(uint32_t max_wr, uint32_t limit)
{
	struct fix *f = calloc(1, sizeof(*f));
	int err;

	assert_non_null(f);
	f->pd = ut_pd(&dev);
	f->scq = ut_cq(&dev, 256);
	f->rcq = ut_cq(&dev, 256);
	f->srq = srq_try(f->pd, max_wr, 2, limit, &err, NULL);
	assert_non_null(f->srq);
	f->qp = ut_qp(&dev, f->pd, IBV_QPT_RC, f->scq, f->rcq, f->srq, NULL, false);
	f->mr = ut_mr(f->pd, f->buf, sizeof(f->buf), IBV_ACCESS_LOCAL_WRITE);
	ut_connect(&dev, f->qp, f->qp->qpn, 0);
	return f;
}

static void fix_free(struct fix *f)
{
	ut_async_drain(&dev); /* before the objects they name go (ut.h) */
	assert_int_equal(rvt_destroy_qp(f->qp), 0);
	assert_int_equal(rvt_destroy_srq(f->srq), 0);
	assert_int_equal(rvt_dereg_mr(f->mr), 0);
	assert_int_equal(rvt_destroy_cq(f->scq), 0);
	assert_int_equal(rvt_destroy_cq(f->rcq), 0);
	assert_int_equal(rvt_dealloc_pd(f->pd), 0);
	free(f);
}

static int post_srq(struct fix *f, uint64_t wr_id, int n, int num_sge,
		    struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *wr = calloc((size_t)n, sizeof(*wr));
	struct ibv_sge sge[4];
	int ret;

	assert_non_null(wr);
	for (int i = 0; i < 4; i++)
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)f->buf + 1024u * (uint32_t)i,
					   .length = 64, .lkey = f->mr->ibmr.lkey };
	for (int i = 0; i < n; i++) {
		wr[i].wr_id = wr_id + (uint64_t)i;
		wr[i].sg_list = sge;
		wr[i].num_sge = num_sge;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	*bad = NULL;
	ret = rvt_post_srq_recv(f->srq, wr, bad);
	if (*bad) {
		/* report the index instead of a pointer into freed memory */
		*bad = (struct ibv_recv_wr *)(uintptr_t)(*bad - wr + 1);
	}
	free(wr);
	return ret;
}

/* One zero-length SEND through the QP (fits any WQE, also one without
 * SGEs); returns the wr_id of the SRQ WQE it consumed. */
static uint64_t consume_one(struct fix *f)
{
	struct ibv_send_wr wr = { .wr_id = 1, .num_sge = 0,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_wc wc;

	ut_post_send(f->qp, &wr);
	ut_poll1(f->scq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	ut_poll1(f->rcq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_RECV);
	assert_int_equal(wc.byte_len, 0);
	return wc.wr_id;
}

static uint32_t queued(struct fix *f)
{
	return rvt_rq_count(&f->srq->rq);
}

static struct ibv_srq_attr query(struct rvt_srq *srq)
{
	struct ibv_srq_attr a;

	memset(&a, 0xff, sizeof(a));
	assert_int_equal(rvt_query_srq(srq, &a), 0);
	return a;
}

/* ---------------------------------------------------------------- */

static void test_create_limits(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	uint32_t mwr = (uint32_t)dev.rdi->dattr.max_srq_wr;
	uint32_t msge = (uint32_t)dev.rdi->dattr.max_srq_sge;
	struct rvt_srq *srq;
	struct ibv_srq_attr q;
	uint32_t cap;
	int err;

	(void)state;
	assert_null(srq_try(pd, 4, 0, 0, &err, NULL));
	assert_int_equal(err, -EINVAL);
	assert_null(srq_try(pd, 4, msge + 1, 0, &err, NULL));
	assert_int_equal(err, -EINVAL);
	assert_null(srq_try(pd, 0, 1, 0, &err, NULL));
	assert_int_equal(err, -EINVAL);
	assert_null(srq_try(pd, mwr + 1, 1, 0, &err, NULL));
	assert_int_equal(err, -EINVAL);
	srq = srq_try(pd, mwr, msge, 0, &err, &cap);
	assert_non_null(srq);
	assert_true(cap >= mwr);
	assert_int_equal(rvt_destroy_srq(srq), 0);

	static const uint32_t req[] = { 1, 3, 4, 5, 100 };
	for (size_t i = 0; i < ARRAY_SIZE(req); i++) {
		srq = srq_try(pd, req[i], 3, 0, &err, &cap);
		assert_non_null(srq);
		assert_true(cap >= req[i]);
		q = query(srq);
		assert_int_equal(q.max_wr, cap);
		assert_int_equal(q.max_sge, 3);
		assert_int_equal(q.srq_limit, 0);
		assert_int_equal(rvt_destroy_srq(srq), 0);
	}
	/* the limit is stored as given, not checked against max_wr */
	srq = srq_try(pd, 4, 1, 1000, &err, &cap);
	assert_non_null(srq);
	assert_int_equal(query(srq).srq_limit, 1000);
	assert_int_equal(rvt_dealloc_pd(pd), -EBUSY);
	assert_int_equal(rvt_destroy_srq(srq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

static void test_post(void **state)
{
	struct fix *f = fix_new(8, 0);
	uint32_t cap = query(f->srq).max_wr;
	struct ibv_recv_wr *bad;

	(void)state;
	/* num_sge above max: bad_wr is that WR, the earlier ones stay */
	assert_int_equal(post_srq(f, 100, 1, 3, &bad), -EINVAL);
	assert_int_equal((uintptr_t)bad, 1);
	assert_int_equal(queued(f), 0);
	{
		struct ibv_recv_wr w[3];
		struct ibv_sge sge = { .addr = (uintptr_t)f->buf, .length = 64,
				       .lkey = f->mr->ibmr.lkey };
		memset(w, 0, sizeof(w));
		for (int i = 0; i < 3; i++) {
			w[i].wr_id = 10 + (uint64_t)i;
			w[i].sg_list = &sge;
			w[i].num_sge = i == 2 ? 3 : 1;
			w[i].next = i < 2 ? &w[i + 1] : NULL;
		}
		bad = NULL;
		assert_int_equal(rvt_post_srq_recv(f->srq, w, &bad), -EINVAL);
		assert_ptr_equal(bad, &w[2]);
		assert_int_equal(queued(f), 2);
	}
	/* zero SGEs are fine */
	assert_int_equal(post_srq(f, 20, 1, 0, &bad), 0);
	/* fill: ENOMEM at exactly the reported capacity, bad_wr = first not queued */
	assert_int_equal(post_srq(f, 30, (int)cap, 2, &bad), -ENOMEM);
	assert_int_equal((uintptr_t)bad, cap - 3 + 1);
	assert_int_equal(queued(f), cap);
	/* consumption hands them out in order */
	assert_int_equal(consume_one(f), 10);
	assert_int_equal(consume_one(f), 11);
	assert_int_equal(consume_one(f), 20);
	assert_int_equal(consume_one(f), 30);
	assert_int_equal(queued(f), cap - 4);
	assert_int_equal(post_srq(f, 40, 5, 1, &bad), -ENOMEM);
	assert_int_equal((uintptr_t)bad, 5);
	assert_int_equal(queued(f), cap);
	/* destroy while a QP uses it */
	assert_int_equal(rvt_destroy_srq(f->srq), -EBUSY);
	fix_free(f);
}

static void test_modify_limit(void **state)
{
	struct fix *f = fix_new(8, 0);
	uint32_t cap = query(f->srq).max_wr;
	struct ibv_srq_attr a;

	(void)state;
	memset(&a, 0, sizeof(a));
	a.srq_limit = cap + 1;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_LIMIT), -EINVAL);
	assert_int_equal(query(f->srq).srq_limit, 0);
	a.srq_limit = cap;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_LIMIT), 0);
	assert_int_equal(query(f->srq).srq_limit, cap);
	a.srq_limit = 3;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_LIMIT), 0);
	assert_int_equal(query(f->srq).srq_limit, 3);
	a.srq_limit = 0;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_LIMIT), 0);
	assert_int_equal(query(f->srq).srq_limit, 0);
	assert_int_equal(rvt_modify_srq(f->srq, &a, 1 << 5), -EINVAL);
	assert_int_equal(rvt_modify_srq(f->srq, &a, 0), 0);
	fix_free(f);
}

static void test_modify_resize(void **state)
{
	struct fix *f = fix_new(8, 0);
	uint32_t cap = query(f->srq).max_wr, ncap;
	uint32_t mwr = (uint32_t)dev.rdi->dattr.max_srq_wr;
	struct ibv_recv_wr *bad;
	struct ibv_srq_attr a;

	(void)state;
	/* the ring holds WQEs and its indices have moved */
	assert_int_equal(post_srq(f, 0, 3, 1, &bad), 0);
	assert_int_equal(consume_one(f), 0);
	assert_int_equal(consume_one(f), 1);
	assert_int_equal(post_srq(f, 100, (int)cap - 1, 1, &bad), 0);
	assert_int_equal(queued(f), cap);

	memset(&a, 0, sizeof(a));
	a.max_wr = 0;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_MAX_WR), -EINVAL);
	a.max_wr = mwr + 1;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_MAX_WR), -EINVAL);
	/* too small for what is queued */
	a.max_wr = 1;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_MAX_WR), -EINVAL);
	assert_int_equal(query(f->srq).max_wr, cap);
	/* the (current or new) limit above the new max_wr */
	a.max_wr = 2 * cap;
	a.srq_limit = 2 * cap + 1;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), -EINVAL);
	a.srq_limit = 5;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_LIMIT), 0);
	a.max_wr = 4;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_MAX_WR), -EINVAL);
	a.srq_limit = 0;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_LIMIT), 0);
	assert_int_equal(query(f->srq).max_wr, cap);
	assert_int_equal(queued(f), cap);

	/* grow with LIMIT: entries kept in order, limit applied, capacity usable */
	a.max_wr = 2 * cap;
	a.srq_limit = 2;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), 0);
	ncap = query(f->srq).max_wr;
	assert_true(ncap >= 2 * cap);
	assert_int_equal(a.max_wr, ncap);
	assert_int_equal(query(f->srq).srq_limit, 2);
	assert_int_equal(queued(f), cap);
	assert_int_equal(post_srq(f, 1000, (int)(ncap - cap), 1, &bad), 0);
	assert_int_equal(post_srq(f, 5000, 1, 1, &bad), -ENOMEM);
	assert_int_equal(consume_one(f), 2);
	for (uint32_t i = 0; i < cap - 1; i++)
		assert_int_equal(consume_one(f), 100 + i);
	assert_int_equal(consume_one(f), 1000);
	ut_async_drain(&dev);

	/* shrink with entries queued */
	{
		uint32_t left = queued(f);
		a.max_wr = left;
		assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_MAX_WR), 0);
		assert_true(query(f->srq).max_wr >= left);
		assert_true(query(f->srq).max_wr < ncap);
		for (uint32_t i = 1; i < left + 1; i++)
			assert_int_equal(consume_one(f), 1000 + i);
		assert_int_equal(queued(f), 0);
	}
	fix_free(f);
}

static void test_limit_event(void **state)
{
	struct fix *f = fix_new(16, 0);
	struct ibv_recv_wr *bad;
	struct ibv_srq_attr a;

	(void)state;
	ut_async_drain(&dev);
	assert_int_equal(post_srq(f, 0, 10, 1, &bad), 0);
	memset(&a, 0, sizeof(a));
	a.srq_limit = 7;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_LIMIT), 0);
	/* 10 -> 9 -> 8 -> 7 left: not below 7 yet */
	for (int i = 0; i < 3; i++)
		assert_int_equal(consume_one(f), (uint64_t)i);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_SRQ_LIMIT_REACHED, f->srq, 20), 0);
	assert_int_equal(query(f->srq).srq_limit, 7);
	/* 6 left: fires once, then disarmed */
	assert_int_equal(consume_one(f), 3);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_SRQ_LIMIT_REACHED, f->srq, 20), 1);
	assert_int_equal(query(f->srq).srq_limit, 0);
	for (int i = 4; i < 8; i++)
		assert_int_equal(consume_one(f), (uint64_t)i);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_SRQ_LIMIT_REACHED, f->srq, 20), 0);
	/* re-armed by modify: the next consumption below it fires again */
	a.srq_limit = 5;
	assert_int_equal(rvt_modify_srq(f->srq, &a, IBV_SRQ_LIMIT), 0);
	assert_int_equal(consume_one(f), 8);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_SRQ_LIMIT_REACHED, f->srq, 20), 1);
	assert_int_equal(query(f->srq).srq_limit, 0);
	assert_int_equal(consume_one(f), 9);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_SRQ_LIMIT_REACHED, f->srq, 20), 0);
	/* an armed limit given at create works the same */
	fix_free(f);
	f = fix_new(16, 3);
	assert_int_equal(query(f->srq).srq_limit, 3);
	assert_int_equal(post_srq(f, 50, 4, 1, &bad), 0);
	assert_int_equal(consume_one(f), 50);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_SRQ_LIMIT_REACHED, f->srq, 20), 0);
	assert_int_equal(consume_one(f), 51);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_SRQ_LIMIT_REACHED, f->srq, 20), 1);
	assert_int_equal(query(f->srq).srq_limit, 0);
	fix_free(f);
}

/* A QP on an SRQ has no receive queue of its own. */
static void test_qp_on_srq(void **state)
{
	struct fix *f = fix_new(4, 0);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;
	struct ibv_recv_wr wr = { .wr_id = 1 }, *bad = NULL;

	(void)state;
	assert_int_equal(rvt_query_qp(f->qp, &qa, 0, &ia), 0);
	assert_int_equal(qa.cap.max_recv_wr, 0);
	assert_ptr_equal(ia.srq, &f->srq->ibsrq);
	assert_int_equal(rvt_post_recv(f->qp, &wr, &bad), -EINVAL);
	assert_ptr_equal(bad, &wr);
	fix_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_limits),
		cmocka_unit_test(test_post),
		cmocka_unit_test(test_modify_limit),
		cmocka_unit_test(test_modify_resize),
		cmocka_unit_test(test_limit_event),
		cmocka_unit_test(test_qp_on_srq),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
