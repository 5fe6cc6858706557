/*
 * The CQ notification path through the public verbs (the built
 * libibverbs.so.1, system <infiniband/verbs.h>): a completion channel fd
 * that poll() reports readable after an armed completion, ibv_get_cq_event
 * handing back the CQ and its context, acks, and the positive-errno edge
 * (EBUSY, EINVAL, NULL + errno) of the CQ verbs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static int setup(void **state)
{
	struct ibv_device **list;
	int n = 0;

	(void)state;
	list = ibv_get_device_list(&n);
	assert_non_null(list);
	assert_true(n >= 1);
	ctx = ibv_open_device(list[0]);
	assert_non_null(ctx);
	ibv_free_device_list(list);
	pd = ibv_alloc_pd(ctx);
	assert_non_null(pd);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	assert_int_equal(ibv_close_device(ctx), 0);
	return 0;
}

static bool readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	struct timespec ts = { 0, 1000000 };
	int got = 0;

	for (int i = 0; i < 3000 && got < n; i++) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		assert_true(r >= 0);
		got += r;
		if (!r)
			nanosleep(&ts, NULL);
	}
	return got;
}

/* An RC QP connected to itself through the device's own GID. */
static struct ibv_qp *self_qp(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	struct ibv_qp_attr a;
	union ibv_gid gid;

	assert_non_null(qp);
	assert_int_equal(ibv_query_gid(ctx, 1, 0, &gid), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 64;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					       IBV_QP_MAX_QP_RD_ATOMIC), 0);
	return qp;
}

static void test_channel_event(void **state)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	void *cq_ctx = (void *)(uintptr_t)0xc0ffee;
	struct ibv_cq *cq, *ev_cq = NULL;
	void *ev_ctx = NULL;
	struct ibv_qp *qp;
	static uint8_t buf[128];
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_send_wr swr, *sbad;
	struct ibv_wc wc[2];

	(void)state;
	assert_non_null(ch);
	cq = ibv_create_cq(ctx, 8, cq_ctx, ch, 0);
	assert_non_null(cq);
	assert_ptr_equal(cq->channel, ch);
	assert_ptr_equal(cq->cq_context, cq_ctx);
	qp = self_qp(cq);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);

	/* nothing armed, nothing readable */
	assert_false(readable(ch->fd, 0));
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	assert_false(readable(ch->fd, 10));

	sge = (struct ibv_sge){ .addr = (uintptr_t)buf + 64, .length = 64, .lkey = mr->lkey };
	rwr = (struct ibv_recv_wr){ .wr_id = 1, .sg_list = &sge, .num_sge = 1 };
	assert_int_equal(ibv_post_recv(qp, &rwr, &rbad), 0);
	memcpy(buf, "hello, channel", 15);
	sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 15, .lkey = mr->lkey };
	swr = (struct ibv_send_wr){ .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				    .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	assert_int_equal(ibv_post_send(qp, &swr, &sbad), 0);

	assert_true(readable(ch->fd, 3000));
	assert_int_equal(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
	assert_ptr_equal(ev_cq, cq);
	assert_ptr_equal(ev_ctx, cq_ctx);
	ibv_ack_cq_events(cq, 1);
	/* one-shot: nothing more until re-armed */
	assert_false(readable(ch->fd, 10));
	assert_int_equal(poll_n(cq, wc, 2), 2);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[1].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[0].wr_id + wc[1].wr_id, 3);
	assert_memory_equal(buf + 64, "hello, channel", 15);

	/* the positive errno edge */
	assert_int_equal(ibv_destroy_cq(cq), EBUSY);
	assert_int_equal(ibv_destroy_comp_channel(ch), -1);
	assert_int_equal(errno, EBUSY);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

static void test_errno_edge(void **state)
{
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr ia;
	struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_SEND }, *bad = NULL;
	struct ibv_device_attr da;

	(void)state;
	assert_int_equal(ibv_query_device(ctx, &da), 0);
	errno = 0;
	assert_null(ibv_create_cq(ctx, 0, NULL, NULL, 0));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors));
	assert_int_equal(errno, EINVAL);
	cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	assert_non_null(cq);
	assert_true(cq->cqe >= 4);
	assert_int_equal(ibv_resize_cq(cq, 0), EINVAL);
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = (uint32_t)da.max_qp_wr + 1;
	ia.cap.max_recv_wr = 1;
	errno = 0;
	assert_null(ibv_create_qp(pd, &ia));
	assert_int_equal(errno, EINVAL);
	ia.cap.max_send_wr = 1;
	qp = ibv_create_qp(pd, &ia);
	assert_non_null(qp);
	/* L1 (qp-semantics §2.2): RESET refuses with a positive errno and bad_wr set */
	assert_int_equal(ibv_post_send(qp, &wr, &bad), EINVAL);
	assert_ptr_equal(bad, &wr);
	assert_int_equal(ibv_dealloc_pd(pd), EBUSY);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_channel_event),
		cmocka_unit_test(test_errno_edge),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
