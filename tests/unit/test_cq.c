/*
 * Completion queues (qp-semantics §11, cq.c): create limits, capacity
 * rounding, order, overflow, resize, notification and completion channels.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "ut.h"

static struct ut_dev dev;

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

static struct rvt_cq *cq_try(int cqe, struct urvt_comp_channel *ch, int vec, int *err)
{
	*err = 0;
	return rvt_create_cq(dev.uctx, cqe, ch, vec, NULL, err);
}

static bool enter(struct rvt_cq *cq, uint64_t wr_id, enum ibv_wc_status st, bool solicited)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	wc.wr_id = wr_id;
	wc.status = st;
	wc.opcode = IBV_WC_RECV;
	wc.byte_len = (uint32_t)wr_id * 3;
	wc.qp_num = 0x123;
	return rvt_cq_enter(cq, &wc, solicited);
}

static bool readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* Every entry the CQ reports is usable; one more is not. Returns capacity. */
static int fill_to_capacity(struct rvt_cq *cq, uint64_t base)
{
	int cap = cq->ibcq.cqe;

	for (int i = 0; i < cap; i++)
		assert_true(enter(cq, base + (uint64_t)i, IBV_WC_SUCCESS, false));
	return cap;
}

static void expect_in_order(struct rvt_cq *cq, uint64_t first, int n, int chunk)
{
	struct ibv_wc wc[8];
	int got = 0;

	assert_true(chunk <= 8);
	while (got < n) {
		int r = rvt_poll_cq(cq, chunk, wc);
		assert_true(r > 0);
		assert_true(r <= chunk);
		for (int i = 0; i < r; i++) {
			assert_int_equal(wc[i].wr_id, first + (uint64_t)got);
			assert_int_equal(wc[i].byte_len, (uint32_t)(first + (uint64_t)got) * 3);
			assert_int_equal(wc[i].qp_num, 0x123);
			got++;
		}
	}
	assert_int_equal(got, n);
	assert_int_equal(rvt_poll_cq(cq, 8, wc), 0);
}

/* ---------------------------------------------------------------- */

static void test_create_limits(void **state)
{
	int max = dev.rdi->dattr.max_cqe, err;
	struct rvt_cq *cq;

	(void)state;
	assert_true(max > 0);
	assert_null(cq_try(0, NULL, 0, &err));
	assert_int_equal(err, -EINVAL);
	assert_null(cq_try(-1, NULL, 0, &err));
	assert_int_equal(err, -EINVAL);
	assert_null(cq_try(max + 1, NULL, 0, &err));
	assert_int_equal(err, -EINVAL);
	assert_null(cq_try(1, NULL, -1, &err));
	assert_int_equal(err, -EINVAL);
	assert_null(cq_try(1, NULL, dev.uctx->vctx.context.num_comp_vectors, &err));
	assert_int_equal(err, -EINVAL);
	cq = cq_try(max, NULL, 0, &err);
	assert_non_null(cq);
	assert_true(cq->ibcq.cqe >= max);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	cq = cq_try(1, NULL, dev.uctx->vctx.context.num_comp_vectors - 1, &err);
	assert_non_null(cq);
	assert_int_equal(rvt_destroy_cq(cq), 0);
}

/* The reported capacity is usable exactly, whatever rounding happened. */
static void test_capacity(void **state)
{
	static const int req[] = { 1, 2, 3, 5, 7, 8, 9, 100, 1000 };

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(req); i++) {
		struct rvt_cq *cq = ut_cq(&dev, req[i]);
		int cap;

		assert_true(cq->ibcq.cqe >= req[i]);
		cap = fill_to_capacity(cq, 1000);
		assert_false(enter(cq, 1, IBV_WC_SUCCESS, false));
		expect_in_order(cq, 1000, cap, 8);
		/* room again after polling */
		assert_true(enter(cq, 5, IBV_WC_SUCCESS, false));
		expect_in_order(cq, 5, 1, 1);
		/* events are read before their object goes (ut.h) */
		ut_async_drain(&dev);
		assert_int_equal(rvt_destroy_cq(cq), 0);
	}
}

static void test_poll_order(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 15);
	struct ibv_wc wc[4];

	(void)state;
	assert_int_equal(rvt_poll_cq(cq, 4, wc), 0);
	assert_int_equal(rvt_poll_cq(cq, -1, wc), -EINVAL);
	/* many rounds, so the indices wrap the ring several times */
	for (uint64_t round = 0; round < 20; round++) {
		int n = 1 + (int)(round % 11);
		for (int i = 0; i < n; i++)
			assert_true(enter(cq, round * 100 + (uint64_t)i, IBV_WC_SUCCESS, false));
		assert_int_equal(rvt_poll_cq(cq, 0, wc), 0);
		expect_in_order(cq, round * 100, n, 1 + (int)(round % 4));
	}
	assert_int_equal(rvt_destroy_cq(cq), 0);
}

static void test_overflow(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 4);
	struct ibv_async_event ev;
	int cap;

	(void)state;
	ut_async_drain(&dev);
	cap = fill_to_capacity(cq, 10);
	assert_false(enter(cq, 99, IBV_WC_SUCCESS, false));
	assert_false(enter(cq, 98, IBV_WC_LOC_LEN_ERR, true));
	assert_true(ut_async_wait(&dev, &ev, UT_TIMEOUT_MS));
	assert_int_equal(ev.event_type, IBV_EVENT_CQ_ERR);
	assert_ptr_equal(ev.element.cq, ibv_cq_ex_to_cq(&cq->ibcq));
	/* exactly one event for the overflow */
	assert_false(ut_async_wait(&dev, &ev, 50));
	/* the queued entries are intact, the lost ones are gone */
	expect_in_order(cq, 10, cap, 3);
	assert_int_equal(rvt_destroy_cq(cq), 0);
}

/* A producing QP whose send CQ overflows goes to ERR (qp-semantics §11, §13). */
static void test_overflow_moves_qp_to_err(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_cq *cq = ut_cq(&dev, 2);
	struct rvt_cq *rcq = ut_cq(&dev, 64);
	struct rvt_qp *qp = ut_qp(&dev, pd, IBV_QPT_RC, cq, rcq, NULL, NULL, false);
	struct ibv_send_wr wr = { .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_wc wc[8];
	int cap = cq->ibcq.cqe, n;

	(void)state;
	ut_async_drain(&dev);
	ut_connect(&dev, qp, qp->qpn, IBV_ACCESS_REMOTE_WRITE);
	for (int i = 0; i <= cap; i++) {
		wr.wr_id = (uint64_t)i;
		ut_post_send(qp, &wr);
	}
	/* in-process the overflow happens inside post_send; over a link
	 * (URVT_PATH=shm, udp) when the ACKs come back: wait for it, bounded */
	for (int ms = 0; ms < 2000 && ut_state(qp) != IBV_QPS_ERR; ms++)
		ut_sleep_ms(1);
	assert_int_equal(ut_state(qp), IBV_QPS_ERR);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_CQ_ERR, cq, 200), 1);
	n = ut_poll(cq, wc, 8, 100);
	assert_int_equal(n, cap);
	for (int i = 0; i < n; i++) {
		assert_int_equal(wc[i].wr_id, (uint64_t)i);
		assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
	}
	assert_int_equal(rvt_destroy_qp(qp), 0);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_destroy_cq(rcq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

static void test_resize(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 8);
	struct ibv_wc wc[4];
	int max = dev.rdi->dattr.max_cqe;

	(void)state;
	/* move the indices away from 0 first */
	for (int i = 0; i < 5; i++)
		assert_true(enter(cq, (uint64_t)i, IBV_WC_SUCCESS, false));
	expect_in_order(cq, 0, 5, 5);
	for (int i = 0; i < 6; i++)
		assert_true(enter(cq, 100 + (uint64_t)i, IBV_WC_SUCCESS, false));
	assert_int_equal(rvt_resize_cq(cq, 0), -EINVAL);
	assert_int_equal(rvt_resize_cq(cq, -3), -EINVAL);
	assert_int_equal(rvt_resize_cq(cq, max + 1), -EINVAL);
	/* too small for the 6 queued entries (any rounding of 2 or 3 is < 6) */
	assert_int_equal(rvt_resize_cq(cq, 2), -EINVAL);
	assert_int_equal(rvt_resize_cq(cq, 3), -EINVAL);
	/* grow: order preserved, new capacity usable */
	assert_int_equal(rvt_resize_cq(cq, 100), 0);
	assert_true(cq->ibcq.cqe >= 100);
	assert_int_equal(rvt_poll_cq(cq, 2, wc), 2);
	assert_int_equal(wc[0].wr_id, 100);
	assert_int_equal(wc[1].wr_id, 101);
	for (int i = 6; i < cq->ibcq.cqe + 2; i++)
		assert_true(enter(cq, 100 + (uint64_t)i, IBV_WC_SUCCESS, false));
	assert_false(enter(cq, 1, IBV_WC_SUCCESS, false));
	expect_in_order(cq, 102, cq->ibcq.cqe, 8);
	/* shrink with a few entries queued */
	for (int i = 0; i < 3; i++)
		assert_true(enter(cq, 200 + (uint64_t)i, IBV_WC_SUCCESS, false));
	assert_int_equal(rvt_resize_cq(cq, 3), 0);
	assert_true(cq->ibcq.cqe >= 3);
	assert_true(cq->ibcq.cqe < 100);
	expect_in_order(cq, 200, 3, 2);
	ut_async_drain(&dev);
	assert_int_equal(rvt_destroy_cq(cq), 0);
}

static void test_notify_channel(void **state)
{
	int err = 0;
	struct urvt_comp_channel *ch = urvt_create_comp_channel(dev.uctx, &err);
	struct rvt_cq *cq, *got = NULL;
	int fd;

	(void)state;
	assert_non_null(ch);
	cq = cq_try(16, ch, 0, &err);
	assert_non_null(cq);
	assert_ptr_equal(cq->ibcq.channel, &ch->ibch);
	fd = ch->ibch.fd;
	assert_int_equal(urvt_destroy_comp_channel(ch), -EBUSY);

	/* not armed: nothing */
	assert_true(enter(cq, 1, IBV_WC_SUCCESS, true));
	assert_false(readable(fd, 20));

	/* NEXT: any entry, once */
	assert_int_equal(rvt_req_notify_cq(cq, 0), 0);
	assert_false(readable(fd, 0));
	assert_true(enter(cq, 2, IBV_WC_SUCCESS, false));
	assert_true(readable(fd, UT_TIMEOUT_MS));
	assert_int_equal(urvt_get_cq_event(ch, &got), 0);
	assert_ptr_equal(got, cq);
	assert_true(enter(cq, 3, IBV_WC_SUCCESS, true));
	assert_false(readable(fd, 20));

	/* SOLICITED: not for a plain success, yes for a solicited one */
	assert_int_equal(rvt_req_notify_cq(cq, 1), 0);
	assert_true(enter(cq, 4, IBV_WC_SUCCESS, false));
	assert_false(readable(fd, 20));
	assert_true(enter(cq, 5, IBV_WC_SUCCESS, true));
	assert_true(readable(fd, UT_TIMEOUT_MS));
	assert_int_equal(urvt_get_cq_event(ch, &got), 0);
	assert_ptr_equal(got, cq);

	/* SOLICITED: an error entry fires too */
	assert_int_equal(rvt_req_notify_cq(cq, 1), 0);
	assert_true(enter(cq, 6, IBV_WC_REM_ACCESS_ERR, false));
	assert_true(readable(fd, UT_TIMEOUT_MS));
	assert_int_equal(urvt_get_cq_event(ch, &got), 0);

	/* NEXT is not downgraded by a later SOLICITED request */
	assert_int_equal(rvt_req_notify_cq(cq, 0), 0);
	assert_int_equal(rvt_req_notify_cq(cq, 1), 0);
	assert_true(enter(cq, 7, IBV_WC_SUCCESS, false));
	assert_true(readable(fd, UT_TIMEOUT_MS));
	assert_int_equal(urvt_get_cq_event(ch, &got), 0);

	/* SOLICITED upgraded to NEXT */
	assert_int_equal(rvt_req_notify_cq(cq, 1), 0);
	assert_int_equal(rvt_req_notify_cq(cq, 0), 0);
	assert_true(enter(cq, 8, IBV_WC_SUCCESS, false));
	assert_true(readable(fd, UT_TIMEOUT_MS));
	assert_int_equal(urvt_get_cq_event(ch, &got), 0);
	assert_false(readable(fd, 20));

	/* the entries themselves are all there, in order */
	{
		struct ibv_wc wc[8];
		assert_int_equal(rvt_poll_cq(cq, 8, wc), 8);
		for (int i = 0; i < 8; i++)
			assert_int_equal(wc[i].wr_id, (uint64_t)i + 1);
	}
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(urvt_destroy_comp_channel(ch), 0);
}

/*
 * Destroying a CQ drops its unread channel events (the kernel does too): the
 * channel fd stops being readable, and another CQ's event on the same
 * channel is still delivered, in order.
 */
static void test_destroy_drops_unread_events(void **state)
{
	int err = 0;
	struct urvt_comp_channel *ch = urvt_create_comp_channel(dev.uctx, &err);
	struct rvt_cq *a, *b, *got = NULL;

	(void)state;
	assert_non_null(ch);
	a = cq_try(16, ch, 0, &err);
	b = cq_try(16, ch, 0, &err);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(rvt_req_notify_cq(a, 0), 0);
	assert_true(enter(a, 1, IBV_WC_SUCCESS, false));
	assert_int_equal(rvt_req_notify_cq(b, 0), 0);
	assert_true(enter(b, 2, IBV_WC_SUCCESS, false));
	assert_int_equal(rvt_req_notify_cq(a, 0), 0);
	assert_true(enter(a, 3, IBV_WC_SUCCESS, false));
	assert_true(readable(ch->ibch.fd, UT_TIMEOUT_MS));

	assert_int_equal(rvt_destroy_cq(a), 0);
	/* b's event survives and is the only one */
	assert_true(readable(ch->ibch.fd, UT_TIMEOUT_MS));
	assert_int_equal(urvt_get_cq_event(ch, &got), 0);
	assert_ptr_equal(got, b);
	assert_false(readable(ch->ibch.fd, 20));
	assert_int_equal(atomic_load(&b->comp_events_reported), 1);

	assert_int_equal(rvt_destroy_cq(b), 0);
	assert_int_equal(urvt_destroy_comp_channel(ch), 0);
}

/* Through a QP: a solicited SEND wakes a SOLICITED-armed receive CQ. */
static void test_notify_from_qp(void **state)
{
	int err = 0;
	struct urvt_comp_channel *ch = urvt_create_comp_channel(dev.uctx, &err);
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_cq *scq = ut_cq(&dev, 16);
	struct rvt_cq *rcq, *got = NULL;
	struct rvt_qp *qp;
	static uint8_t src[64], dst[64];
	struct rvt_mregion *smr, *dmr;
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	struct ibv_wc wc;

	(void)state;
	assert_non_null(ch);
	rcq = cq_try(16, ch, 0, &err);
	assert_non_null(rcq);
	qp = ut_qp(&dev, pd, IBV_QPT_RC, scq, rcq, NULL, NULL, false);
	smr = ut_mr(pd, src, sizeof(src), 0);
	dmr = ut_mr(pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE);
	ut_connect(&dev, qp, qp->qpn, 0);
	ut_post_recv(qp, 1, dst, sizeof(dst), dmr->ibmr.lkey);
	ut_post_recv(qp, 2, dst, sizeof(dst), dmr->ibmr.lkey);
	assert_int_equal(rvt_req_notify_cq(rcq, 1), 0);

	sge = (struct ibv_sge){ .addr = (uintptr_t)src, .length = 16, .lkey = smr->ibmr.lkey };
	wr = (struct ibv_send_wr){ .wr_id = 10, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND };
	ut_post_send(qp, &wr);
	ut_poll1(rcq, &wc);
	assert_int_equal(wc.wr_id, 1);
	assert_false(readable(ch->ibch.fd, 20));
	wr.send_flags = IBV_SEND_SOLICITED;
	ut_post_send(qp, &wr);
	assert_true(readable(ch->ibch.fd, UT_TIMEOUT_MS));
	assert_int_equal(urvt_get_cq_event(ch, &got), 0);
	assert_ptr_equal(got, rcq);
	ut_poll1(rcq, &wc);
	assert_int_equal(wc.wr_id, 2);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);

	/* destroy with users */
	assert_int_equal(rvt_destroy_cq(rcq), -EBUSY);
	assert_int_equal(rvt_destroy_cq(scq), -EBUSY);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	assert_int_equal(rvt_dereg_mr(smr), 0);
	assert_int_equal(rvt_dereg_mr(dmr), 0);
	assert_int_equal(rvt_destroy_cq(rcq), 0);
	assert_int_equal(rvt_destroy_cq(scq), 0);
	assert_int_equal(urvt_destroy_comp_channel(ch), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/* The same CQ as send and receive CQ counts as used twice. */
static void test_destroy_busy_shared(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_cq *cq = ut_cq(&dev, 4);
	struct rvt_qp *a = ut_qp(&dev, pd, IBV_QPT_UD, cq, cq, NULL, NULL, false);
	struct rvt_qp *b = ut_qp(&dev, pd, IBV_QPT_UC, cq, cq, NULL, NULL, false);

	(void)state;
	assert_int_equal(rvt_destroy_cq(cq), -EBUSY);
	assert_int_equal(rvt_destroy_qp(a), 0);
	assert_int_equal(rvt_destroy_cq(cq), -EBUSY);
	assert_int_equal(rvt_destroy_qp(b), 0);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/* Which entries count as solicited (qp-semantics §11): send CQEs iff failed,
 * receive flush CQEs always. */
static void test_solicited_error_entries(void **state)
{
	int err = 0;
	struct urvt_comp_channel *ch = urvt_create_comp_channel(dev.uctx, &err);
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_cq *scq, *rcq, *got = NULL;
	struct rvt_qp *qp;
	struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_wc wc;

	(void)state;
	assert_non_null(ch);
	scq = cq_try(16, ch, 0, &err);
	rcq = cq_try(16, ch, 0, &err);
	assert_non_null(scq);
	assert_non_null(rcq);
	qp = ut_qp(&dev, pd, IBV_QPT_RC, scq, rcq, NULL, NULL, false);
	ut_connect(&dev, qp, qp->qpn, IBV_ACCESS_REMOTE_WRITE);
	assert_int_equal(rvt_req_notify_cq(scq, 1), 0);
	assert_int_equal(rvt_req_notify_cq(rcq, 1), 0);
	/* a successful send CQE is not solicited */
	ut_post_send(qp, &wr);
	ut_poll1(scq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_false(readable(ch->ibch.fd, 20));
	/* receive flushes are */
	ut_post_recv(qp, 5, NULL, 0, 0);
	ut_modify_state(qp, IBV_QPS_ERR);
	assert_true(readable(ch->ibch.fd, UT_TIMEOUT_MS));
	assert_int_equal(urvt_get_cq_event(ch, &got), 0);
	assert_ptr_equal(got, rcq);
	ut_poll1(rcq, &wc);
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	/* a failed send CQE is */
	wr.wr_id = 2;
	wr.send_flags = 0;
	ut_post_send(qp, &wr);
	assert_true(readable(ch->ibch.fd, UT_TIMEOUT_MS));
	assert_int_equal(urvt_get_cq_event(ch, &got), 0);
	assert_ptr_equal(got, scq);
	ut_poll1(scq, &wc);
	assert_int_equal(wc.wr_id, 2);
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(wc.byte_len, 0);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	assert_int_equal(rvt_destroy_cq(scq), 0);
	assert_int_equal(rvt_destroy_cq(rcq), 0);
	assert_int_equal(urvt_destroy_comp_channel(ch), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_limits),
		cmocka_unit_test(test_capacity),
		cmocka_unit_test(test_poll_order),
		cmocka_unit_test(test_overflow),
		cmocka_unit_test(test_overflow_moves_qp_to_err),
		cmocka_unit_test(test_resize),
		cmocka_unit_test(test_notify_channel),
		cmocka_unit_test(test_destroy_drops_unread_events),
		cmocka_unit_test(test_notify_from_qp),
		cmocka_unit_test(test_destroy_busy_shared),
		cmocka_unit_test(test_solicited_error_entries),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
