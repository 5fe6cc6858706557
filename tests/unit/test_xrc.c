/*
 * XRC (qp-semantics §16, xrc.c): domains and the open rules of
 * ibv_open_xrcd, XRC SRQs and their numbers, XRC_SEND / XRC_RECV creation,
 * the state table's XRC masks, ibv_open_qp handles, and traffic: SEND,
 * SEND with immediate, RDMA WRITE, READ, both atomics and ATOMIC_WRITE from an XRC_SEND
 * QP to an XRC target of this process (over a link: XRC has no in-process
 * path), each SEND landing in the SRQ its WR names and completing on that
 * SRQ's CQ.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ut.h"

static struct ut_dev dev;
static char path[] = "/tmp/urvt-xrcd-XXXXXX";
static int fd = -1;

static int setup(void **state)
{
	(void)state;
	ut_open(&dev);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	close(fd);
	unlink(path);
	ut_async_drain(&dev);
	ut_close(&dev);
	return 0;
}

static struct rvt_xrcd *xrcd_try(uint32_t mask, int xfd, int oflags, int *err)
{
	struct ibv_xrcd_init_attr a = { .comp_mask = mask, .fd = xfd, .oflags = oflags };

	*err = 0;
	return rvt_open_xrcd(dev.uctx, &a, err);
}

static struct rvt_xrcd *xrcd_new(void)
{
	int err;
	struct rvt_xrcd *x = xrcd_try(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, -1,
				      O_CREAT, &err);

	assert_non_null(x);
	return x;
}

static struct rvt_srq *xsrq(struct rvt_pd *pd, struct rvt_xrcd *x, struct rvt_cq *cq)
{
	struct ibv_srq_init_attr a = { .attr = { .max_wr = 16, .max_sge = 1 } };
	int err = 0;
	struct rvt_srq *srq = rvt_create_xsrq(pd, x, cq, &a, &err);

	assert_non_null(srq);
	return srq;
}

static struct rvt_qp *xrc_qp(enum ibv_qp_type t, struct rvt_pd *pd, struct rvt_cq *cq,
			     struct rvt_xrcd *x, int *err)
{
	struct ibv_qp_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.qp_type = t;
	if (t == IBV_QPT_XRC_SEND) {
		a.comp_mask = IBV_QP_INIT_ATTR_PD;
		a.pd = pd ? &pd->ibpd : NULL;
		a.send_cq = cq ? (struct ibv_cq *)&cq->ibcq : NULL;
		a.cap.max_send_wr = 16;
		a.cap.max_send_sge = 2;
		/* what an XRC_SEND QP has not is ignored (qp-semantics §16.3) */
		a.cap.max_recv_wr = 7;
		a.cap.max_recv_sge = 3;
	} else {
		a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
		a.xrcd = x ? &x->ibxrcd : NULL;
	}
	*err = 0;
	return rvt_create_qp(dev.uctx, &a, err);
}

/* qp-semantics §16.1 */
static void test_open_xrcd_rules(void **state)
{
	const uint32_t both = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
	struct rvt_xrcd *a, *b, *c, *d;
	int err;

	(void)state;
	assert_null(xrcd_try(IBV_XRCD_INIT_ATTR_FD, -1, O_CREAT, &err));
	assert_int_equal(err, -EINVAL);
	assert_null(xrcd_try(both | IBV_XRCD_INIT_ATTR_RESERVED, -1, O_CREAT, &err));
	assert_int_equal(err, -EOPNOTSUPP);
	assert_null(xrcd_try(both, 12345, O_CREAT, &err));
	assert_int_equal(err, -EBADF);
	/* a file not yet a domain, without O_CREAT */
	assert_null(xrcd_try(both, fd, 0, &err));
	assert_int_equal(err, -EAGAIN);
	a = xrcd_try(both, fd, O_CREAT, &err);
	assert_non_null(a);
	/* the same file, another descriptor: the same domain */
	{
		int fd2 = open(path, O_RDONLY);
		assert_true(fd2 >= 0);
		b = xrcd_try(both, fd2, 0, &err);
		assert_non_null(b);
		close(fd2);
	}
	assert_true(rvt_xrcd_same(a, b));
	assert_null(xrcd_try(both, fd, O_CREAT | O_EXCL, &err));
	assert_int_equal(err, -EINVAL);
	/* fd -1: always a domain of its own */
	c = xrcd_new();
	d = xrcd_new();
	assert_false(rvt_xrcd_same(c, d));
	assert_false(rvt_xrcd_same(a, c));
	assert_int_equal(rvt_close_xrcd(a), 0);
	assert_int_equal(rvt_close_xrcd(c), 0);
	assert_int_equal(rvt_close_xrcd(d), 0);
	/* b still holds the file's domain: opening it again joins it */
	a = xrcd_try(both, fd, 0, &err);
	assert_non_null(a);
	assert_true(rvt_xrcd_same(a, b));
	assert_int_equal(rvt_close_xrcd(a), 0);
	assert_int_equal(rvt_close_xrcd(b), 0);
	/* all handles gone: the file names no domain any more */
	assert_null(xrcd_try(both, fd, 0, &err));
	assert_int_equal(err, -EAGAIN);
}

/* qp-semantics §16.2 */
static void test_xrc_srq(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_cq *cq = ut_cq(&dev, 16);
	struct rvt_xrcd *x = xrcd_new();
	struct ibv_srq_init_attr ba = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct rvt_srq *s1, *s2, *basic;
	uint32_t n1, n2;
	int err;

	(void)state;
	s1 = xsrq(pd, x, cq);
	s2 = xsrq(pd, x, cq);
	assert_int_equal(rvt_get_srq_num(s1, &n1), 0);
	assert_int_equal(rvt_get_srq_num(s2, &n2), 0);
	assert_true(n1 && n2 && n1 != n2 && n1 <= URVT_QPN_MASK && n2 <= URVT_QPN_MASK);
	basic = rvt_create_srq(pd, &ba, &err);
	assert_non_null(basic);
	assert_int_equal(rvt_get_srq_num(basic, &n2), -EINVAL);
	/* the lookup of the responder: by number, not after destroy */
	assert_ptr_equal(rvt_xsrq_get(dev.rdi, n1), s1);
	rvt_xsrq_put(dev.rdi, s1);
	assert_null(rvt_xsrq_get(dev.rdi, n1 ^ (1u << 20))); /* another generation */
	assert_null(rvt_xsrq_get(dev.rdi, 0));
	/* the domain and the CQ are in use */
	assert_int_equal(rvt_close_xrcd(x), -EBUSY);
	assert_int_equal(rvt_destroy_cq(cq), -EBUSY);
	assert_int_equal(rvt_destroy_srq(s1), 0);
	assert_null(rvt_xsrq_get(dev.rdi, n1));
	assert_int_equal(rvt_destroy_srq(s2), 0);
	assert_int_equal(rvt_destroy_srq(basic), 0);
	assert_int_equal(rvt_close_xrcd(x), 0);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/* qp-semantics §16.3 */
static void test_xrc_create(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_cq *cq = ut_cq(&dev, 16);
	struct rvt_xrcd *x = xrcd_new();
	struct ibv_qp_init_attr qa;
	struct ibv_qp_attr attr;
	struct ibv_recv_wr wr = { .wr_id = 1 }, *bad;
	struct rvt_qp *s, *r;
	int err;

	(void)state;
	assert_null(xrc_qp(IBV_QPT_XRC_SEND, NULL, cq, NULL, &err));
	assert_int_equal(err, -EINVAL);
	assert_null(xrc_qp(IBV_QPT_XRC_SEND, pd, NULL, NULL, &err));
	assert_int_equal(err, -EINVAL);
	assert_null(xrc_qp(IBV_QPT_XRC_RECV, NULL, NULL, NULL, &err));
	assert_int_equal(err, -EINVAL);
	s = xrc_qp(IBV_QPT_XRC_SEND, pd, cq, NULL, &err);
	assert_non_null(s);
	r = xrc_qp(IBV_QPT_XRC_RECV, NULL, NULL, x, &err);
	assert_non_null(r);
	assert_int_equal(s->ibqp_ex.qp_base.qp_type, IBV_QPT_XRC_SEND);
	assert_int_equal(r->ibqp_ex.qp_base.qp_type, IBV_QPT_XRC_RECV);
	assert_int_equal(rvt_query_qp(s, &attr, 0, &qa), 0);
	assert_int_equal(qa.qp_type, IBV_QPT_XRC_SEND);
	assert_true(qa.cap.max_send_wr >= 16);
	assert_int_equal(qa.cap.max_recv_wr, 0);
	assert_int_equal(rvt_query_qp(r, &attr, 0, &qa), 0);
	assert_int_equal(qa.qp_type, IBV_QPT_XRC_RECV);
	assert_int_equal(qa.cap.max_send_wr, 0);
	/* no receive queue of their own */
	ut_to_init(s, 0, 0);
	ut_to_init(r, IBV_ACCESS_REMOTE_WRITE, 0);
	assert_int_equal(rvt_post_recv(s, &wr, &bad), -EINVAL);
	assert_int_equal(rvt_post_recv(r, &wr, &bad), -EINVAL);
	/* the domain is in use by the target */
	assert_int_equal(rvt_close_xrcd(x), -EBUSY);
	assert_int_equal(rvt_destroy_qp(r), 0);
	assert_int_equal(rvt_destroy_qp(s), 0);
	assert_int_equal(rvt_close_xrcd(x), 0);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/* qp-semantics §16.3: the state table's columns for XRC */
static void test_xrc_state_table(void **state)
{
	const int R = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		      IBV_QP_RQ_PSN;
	const int RC_RTR = R | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	const int RC_RTS = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
	const int INIT = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;

	(void)state;
	/* RESET -> INIT: as RC for both */
	assert_true(rvt_modify_qp_is_ok(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_XRC_SEND, INIT));
	assert_true(rvt_modify_qp_is_ok(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_XRC_RECV, INIT));
	assert_false(rvt_modify_qp_is_ok(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_XRC_SEND,
					 INIT | IBV_QP_QKEY));
	/* INIT -> RTR: the initiator has no responder resources */
	assert_true(rvt_modify_qp_is_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_SEND, R));
	assert_false(rvt_modify_qp_is_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_SEND, RC_RTR));
	assert_false(rvt_modify_qp_is_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_RECV, R));
	assert_true(rvt_modify_qp_is_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_RECV, RC_RTR));
	/* RTR -> RTS: the target sends no requests */
	assert_true(rvt_modify_qp_is_ok(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_XRC_SEND, RC_RTS));
	assert_false(rvt_modify_qp_is_ok(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_XRC_RECV, RC_RTS));
	assert_true(rvt_modify_qp_is_ok(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_XRC_RECV,
					IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN |
						IBV_QP_MIN_RNR_TIMER));
	assert_false(rvt_modify_qp_is_ok(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_XRC_SEND,
					 RC_RTS | IBV_QP_MIN_RNR_TIMER));
	/* SQD -> SQD: the initiator's responder attributes are not its own */
	assert_true(rvt_modify_qp_is_ok(IBV_QPS_SQD, IBV_QPS_SQD, IBV_QPT_XRC_SEND,
					IBV_QP_STATE | IBV_QP_MAX_QP_RD_ATOMIC));
	assert_false(rvt_modify_qp_is_ok(IBV_QPS_SQD, IBV_QPS_SQD, IBV_QPT_XRC_SEND,
					 IBV_QP_STATE | IBV_QP_MAX_DEST_RD_ATOMIC));
	assert_false(rvt_modify_qp_is_ok(IBV_QPS_SQD, IBV_QPS_SQD, IBV_QPT_XRC_RECV,
					 IBV_QP_STATE | IBV_QP_RETRY_CNT));
}

/* qp-semantics §16.6 */
static void test_open_qp(void **state)
{
	struct rvt_xrcd *x = xrcd_new(), *other = xrcd_new();
	struct ibv_qp_open_attr oa;
	struct rvt_qp *r, *h;
	int err;

	(void)state;
	r = xrc_qp(IBV_QPT_XRC_RECV, NULL, NULL, x, &err);
	assert_non_null(r);
	ut_to_init(r, 0, 0); /* published */
	memset(&oa, 0, sizeof(oa));
	oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
	oa.qp_num = r->qpn;
	oa.qp_type = IBV_QPT_XRC_RECV;
	oa.xrcd = &other->ibxrcd;
	assert_null(rvt_open_qp(dev.uctx, &oa, &err));
	assert_int_equal(err, -EINVAL);
	oa.xrcd = &x->ibxrcd;
	oa.qp_num = r->qpn + 1000;
	assert_null(rvt_open_qp(dev.uctx, &oa, &err));
	assert_int_equal(err, -ENOENT);
	oa.qp_num = r->qpn;
	oa.comp_mask &= ~(uint32_t)IBV_QP_OPEN_ATTR_TYPE;
	assert_null(rvt_open_qp(dev.uctx, &oa, &err));
	assert_int_equal(err, -EINVAL);
	oa.comp_mask |= IBV_QP_OPEN_ATTR_TYPE;
	h = rvt_open_qp(dev.uctx, &oa, &err);
	assert_ptr_equal(h, r);
	/* two handles: the first put is not the last */
	assert_false(rvt_xrc_handle_put(r));
	assert_true(rvt_xrc_handle_put(r));
	assert_int_equal(rvt_destroy_qp(r), 0);
	assert_int_equal(rvt_close_xrcd(x), 0);
	assert_int_equal(rvt_close_xrcd(other), 0);
}

/* ------------------------------------------------------------------ */
/* Traffic                                                            */
/* ------------------------------------------------------------------ */
struct xfix {
	struct rvt_pd *pd;
	struct rvt_cq *scq, *cq1, *cq2;
	struct rvt_xrcd *x;
	struct rvt_srq *srq1, *srq2;
	struct rvt_qp *s, *r;
	struct rvt_mregion *mr;
	uint8_t *buf;
};

#define XBUF 65536

static void connect_pair(struct xfix *f)
{
	struct ibv_qp_attr a;

	ut_to_init(f->s, 0, 0);
	ut_to_init(f->r, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				 IBV_ACCESS_REMOTE_ATOMIC, 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.rq_psn = 0x100;
	ut_loopback_ah_attr(&dev, &a.ah_attr);
	a.dest_qp_num = f->r->qpn;
	assert_int_equal(rvt_modify_qp(f->s, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
							 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN),
			 0);
	a.dest_qp_num = f->s->qpn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	assert_int_equal(rvt_modify_qp(f->r, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
							 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
							 IBV_QP_MAX_DEST_RD_ATOMIC |
							 IBV_QP_MIN_RNR_TIMER),
			 0);
	/* XRC never takes the in-process path (qp-semantics §16.5) */
	assert_false(f->s->remote_av.loopback);
	assert_false(f->r->remote_av.loopback);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x100;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	assert_int_equal(rvt_modify_qp(f->s, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
							 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
							 IBV_QP_MAX_QP_RD_ATOMIC),
			 0);
	a.sq_psn = 0x100;
	assert_int_equal(rvt_modify_qp(f->r, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT),
			 0);
}

static void xfix_init(struct xfix *f)
{
	int err;

	memset(f, 0, sizeof(*f));
	f->pd = ut_pd(&dev);
	f->scq = ut_cq(&dev, 64);
	f->cq1 = ut_cq(&dev, 64);
	f->cq2 = ut_cq(&dev, 64);
	f->x = xrcd_new();
	f->srq1 = xsrq(f->pd, f->x, f->cq1);
	f->srq2 = xsrq(f->pd, f->x, f->cq2);
	f->s = xrc_qp(IBV_QPT_XRC_SEND, f->pd, f->scq, NULL, &err);
	f->r = xrc_qp(IBV_QPT_XRC_RECV, NULL, NULL, f->x, &err);
	assert_non_null(f->s);
	assert_non_null(f->r);
	f->buf = calloc(1, XBUF);
	assert_non_null(f->buf);
	f->mr = ut_mr(f->pd, f->buf, XBUF,
		      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			      IBV_ACCESS_REMOTE_ATOMIC);
	connect_pair(f);
}

static void xfix_fini(struct xfix *f)
{
	assert_int_equal(rvt_destroy_qp(f->s), 0);
	assert_int_equal(rvt_destroy_qp(f->r), 0);
	assert_int_equal(rvt_destroy_srq(f->srq1), 0);
	assert_int_equal(rvt_destroy_srq(f->srq2), 0);
	assert_int_equal(rvt_close_xrcd(f->x), 0);
	assert_int_equal(rvt_dereg_mr(f->mr), 0);
	free(f->buf);
	rvt_destroy_cq(f->scq);
	rvt_destroy_cq(f->cq1);
	rvt_destroy_cq(f->cq2);
	rvt_dealloc_pd(f->pd);
}

static void srq_post(struct rvt_srq *srq, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	assert_int_equal(rvt_post_srq_recv(srq, &wr, &bad), 0);
}

static void xsend(struct xfix *f, enum ibv_wr_opcode op, uint32_t srqn, uint64_t wr_id,
		  void *src, uint32_t len, uint64_t raddr, uint64_t add, uint64_t swap)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src, .length = len, .lkey = f->mr->lkey };
	struct ibv_send_wr wr;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = op;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htobe32(0x1234abcd);
	wr.qp_type.xrc.remote_srqn = srqn;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = f->mr->lkey;
		wr.wr.atomic.compare_add = add;
		wr.wr.atomic.swap = swap;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = f->mr->lkey;
	}
	ut_post_send(f->s, &wr);
}

static void expect_send_ok(struct xfix *f, uint64_t wr_id)
{
	struct ibv_wc wc;

	ut_poll1(f->scq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, wr_id);
}

static void test_xrc_traffic(void **state)
{
	struct xfix f;
	struct ibv_wc wc;
	uint8_t *src, *dst1, *dst2, *wtarget;
	uint64_t *atom, *res;

	(void)state;
	xfix_init(&f);
	src = f.buf;
	dst1 = f.buf + 16384;
	dst2 = f.buf + 32768;
	wtarget = f.buf + 49152;
	atom = (uint64_t *)(void *)(f.buf + 60000 - 60000 % 8);
	res = atom + 1;
	ut_fill(src, 8192, 7);
	srq_post(f.srq1, 11, dst1, 8192, f.mr->lkey);
	srq_post(f.srq2, 22, dst2, 8192, f.mr->lkey);

	/* a SEND of several packets to SRQ 2: its CQ, not SRQ 1's */
	xsend(&f, IBV_WR_SEND, f.srq2->srq_num, 1, src, 5000, 0, 0, 0);
	expect_send_ok(&f, 1);
	ut_poll1(f.cq2, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 22);
	assert_int_equal(wc.opcode, IBV_WC_RECV);
	assert_int_equal(wc.byte_len, 5000);
	assert_int_equal(wc.qp_num, f.r->qpn);
	assert_memory_equal(dst2, src, 5000);
	ut_cq_empty(f.cq1, 10);

	/* SEND with immediate to SRQ 1 */
	xsend(&f, IBV_WR_SEND_WITH_IMM, f.srq1->srq_num, 2, src + 100, 64, 0, 0, 0);
	expect_send_ok(&f, 2);
	ut_poll1(f.cq1, &wc);
	assert_int_equal(wc.wr_id, 11);
	assert_true(wc.wc_flags & IBV_WC_WITH_IMM);
	assert_int_equal(be32toh(wc.imm_data), 0x1234abcd);
	assert_memory_equal(dst1, src + 100, 64);

	/* WRITE, READ back, atomics: the SRQ's PD checks the R_Key */
	xsend(&f, IBV_WR_RDMA_WRITE, f.srq1->srq_num, 3, src, 3000, (uintptr_t)wtarget, 0, 0);
	expect_send_ok(&f, 3);
	assert_memory_equal(wtarget, src, 3000);
	memset(src + 8192, 0, 3000);
	xsend(&f, IBV_WR_RDMA_READ, f.srq1->srq_num, 4, src + 8192, 3000, (uintptr_t)wtarget, 0,
	      0);
	expect_send_ok(&f, 4);
	assert_memory_equal(src + 8192, wtarget, 3000);
	*atom = 40;
	xsend(&f, IBV_WR_ATOMIC_FETCH_AND_ADD, f.srq1->srq_num, 5, res, 8, (uintptr_t)atom, 2, 0);
	expect_send_ok(&f, 5);
	assert_int_equal(*res, 40);
	assert_int_equal(*atom, 42);
	xsend(&f, IBV_WR_ATOMIC_CMP_AND_SWP, f.srq1->srq_num, 6, res, 8, (uintptr_t)atom, 42, 7);
	expect_send_ok(&f, 6);
	assert_int_equal(*res, 42);
	assert_int_equal(*atom, 7);
	/* ATOMIC_WRITE (opcode 0xBD) */
	{
		uint64_t v = 0x1122334455667788ull;
		memcpy(src, &v, 8);
		xsend(&f, IBV_WR_ATOMIC_WRITE, f.srq1->srq_num, 9, src, 8, (uintptr_t)atom, 0, 0);
		expect_send_ok(&f, 9);
		assert_true(*atom == v);
	}

	/* RNR: SRQ 1 is empty now; the SEND waits for a receive (rnr_retry 7) */
	xsend(&f, IBV_WR_SEND, f.srq1->srq_num, 7, src, 16, 0, 0, 0);
	ut_cq_empty(f.scq, 30);
	srq_post(f.srq1, 33, dst1, 8192, f.mr->lkey);
	expect_send_ok(&f, 7);
	ut_poll1(f.cq1, &wc);
	assert_int_equal(wc.wr_id, 33);

	/* an SRQ number of nobody: NAK invalid request, the sender's
	 * completion says so */
	xsend(&f, IBV_WR_SEND, f.srq1->srq_num ^ (1u << 20), 8, src, 16, 0, 0, 0);
	ut_poll1(f.scq, &wc);
	assert_int_equal(wc.wr_id, 8);
	assert_int_equal(wc.status, IBV_WC_REM_INV_REQ_ERR);
	assert_int_equal(ut_state(f.r), IBV_QPS_ERR);
	ut_cq_empty(f.cq1, 10);
	ut_cq_empty(f.cq2, 10);
	ut_async_drain(&dev);
	xfix_fini(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_xrcd_rules),
		cmocka_unit_test(test_xrc_srq),
		cmocka_unit_test(test_xrc_create),
		cmocka_unit_test(test_xrc_state_table),
		cmocka_unit_test(test_open_qp),
		cmocka_unit_test(test_xrc_traffic),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
