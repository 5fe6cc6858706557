/*
 * Memory windows (core/mw.c): alloc/dealloc, binding by IBV_WR_BIND_MW
 * (type 2, and type 1 as ibv_bind_mw posts it), remote WRITE/READ/atomic
 * through a window's rkey (also zero-based), the bind checks (rxe's:
 * MW_BIND on the MR, local write for a writable window, range inside the
 * MR, a free type 2 window, the QP's PD, no zero-based type 1), and the
 * hostile cases: an unbound, invalidated (LOCAL_INV, SEND_WITH_INV) or
 * deallocated window, a range outside the window, an access the window
 * does not grant, another PD's window, a type 2 window bound on another
 * QP, a window's key used as an lkey. Each is refused (REM_ACCESS_ERR
 * from the responder) and touches no memory.
 *
 * QP a is the requester, b the responder that binds the windows. Runs
 * in-process and again over each link (URVT_PATH, CMakeLists.txt).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/mw.h"
#include "ut.h"

static struct ut_dev dev;

#define BUFSZ 8192
#define QP_ACC (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define MR_ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND)

struct pair {
	struct rvt_pd *pd;
	struct rvt_cq *acq, *bcq;
	struct rvt_qp *a, *b;
	uint8_t *abuf, *bbuf;
	struct rvt_mregion *amr, *bmr;
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

static struct pair *pair_new(struct rvt_pd *pd)
{
	struct pair *p = calloc(1, sizeof(*p));
	struct ut_qp_caps caps = { 16, 16, 4, 4, 0 };

	assert_non_null(p);
	p->pd = pd ? pd : ut_pd(&dev);
	p->acq = ut_cq(&dev, 256);
	p->bcq = ut_cq(&dev, 256);
	p->a = ut_qp(&dev, p->pd, IBV_QPT_RC, p->acq, p->acq, NULL, &caps, false);
	p->b = ut_qp(&dev, p->pd, IBV_QPT_RC, p->bcq, p->bcq, NULL, &caps, false);
	p->abuf = aligned_alloc(64, BUFSZ);
	p->bbuf = aligned_alloc(64, BUFSZ);
	assert_non_null(p->abuf);
	assert_non_null(p->bbuf);
	memset(p->abuf, 0, BUFSZ);
	memset(p->bbuf, 0, BUFSZ);
	p->amr = ut_mr(p->pd, p->abuf, BUFSZ, MR_ACC);
	/* b's MR grants no remote access itself: only windows do */
	p->bmr = ut_mr(p->pd, p->bbuf, BUFSZ, MR_ACC);
	ut_connect(&dev, p->a, p->b->qpn, QP_ACC);
	ut_connect(&dev, p->b, p->a->qpn, QP_ACC);
	return p;
}

static void pair_free(struct pair *p, bool free_pd)
{
	ut_async_drain(&dev);
	assert_int_equal(rvt_destroy_qp(p->a), 0);
	assert_int_equal(rvt_destroy_qp(p->b), 0);
	assert_int_equal(rvt_dereg_mr(p->amr), 0);
	assert_int_equal(rvt_dereg_mr(p->bmr), 0);
	assert_int_equal(rvt_destroy_cq(p->acq), 0);
	assert_int_equal(rvt_destroy_cq(p->bcq), 0);
	if (free_pd)
		assert_int_equal(rvt_dealloc_pd(p->pd), 0);
	free(p->abuf);
	free(p->bbuf);
	free(p);
	ut_async_drain(&dev);
}

static struct ibv_wc expect_wc(struct rvt_cq *cq, uint64_t wr_id, enum ibv_wc_status st)
{
	struct ibv_wc wc;

	ut_poll1(cq, &wc);
	if (wc.wr_id != wr_id || wc.status != st)
		fail_msg("completion wr_id %#llx status %d, expected %#llx status %d",
			 (unsigned long long)wc.wr_id, wc.status, (unsigned long long)wr_id, st);
	return wc;
}

static struct rvt_mregion *mw_new(struct rvt_pd *pd, enum ibv_mw_type type)
{
	int err = 0;
	struct rvt_mregion *mw = rvt_alloc_mw(pd, type, &err);

	assert_non_null(mw);
	return mw;
}

/* qp binds mw to [mr base + off, +len) with access; returns the status
 * and, in *rkey, the key the window has after a successful bind. */
static enum ibv_wc_status bind(struct rvt_qp *qp, struct rvt_cq *cq, struct rvt_mregion *mw,
			       struct rvt_mregion *mr, size_t off, uint64_t len, int access,
			       uint32_t *rkey)
{
	uint32_t key = ibv_inc_rkey(mw->lkey);
	struct ibv_send_wr wr = { .wr_id = 0xb1d, .opcode = IBV_WR_BIND_MW,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_wc wc;

	wr.bind_mw.mw = &mw->ibmw;
	wr.bind_mw.rkey = key;
	wr.bind_mw.bind_info.mr = mr ? &mr->ibmr : NULL;
	wr.bind_mw.bind_info.addr = mr ? (uintptr_t)mr->vaddr + off : 0;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = (unsigned int)access;
	ut_post_send(qp, &wr);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.wr_id, 0xb1d);
	if (wc.status == IBV_WC_SUCCESS) {
		assert_int_equal(wc.opcode, IBV_WC_BIND_MW);
		assert_int_equal(mw->lkey, key);
		if (rkey)
			*rkey = key;
	}
	return wc.status;
}

/* a's one-SGE WR against raddr/rkey; its completion status. */
static enum ibv_wc_status rdma(struct pair *p, int opcode, size_t aoff, uint32_t len,
			       uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)p->abuf + aoff, .length = len,
			       .lkey = p->amr->ibmr.lkey };
	struct ibv_send_wr wr = { .wr_id = 0x200, .sg_list = &sge, .num_sge = 1,
				  .opcode = (enum ibv_wr_opcode)opcode,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_wc wc;

	if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 3;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	ut_post_send(p->a, &wr);
	ut_poll1(p->acq, &wc);
	assert_int_equal(wc.wr_id, 0x200);
	return wc.status;
}

static uint64_t bva(struct pair *p, size_t off)
{
	return (uintptr_t)p->bbuf + off;
}

static bool all_zero(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

static void test_mw_alloc(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_mregion *m1, *m2;
	int err = 0;

	(void)state;
	assert_true(dev.rdi->dattr.max_mw > 0);
	assert_true(dev.rdi->dattr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
	m1 = mw_new(pd, IBV_MW_TYPE_1);
	m2 = mw_new(pd, IBV_MW_TYPE_2);
	assert_int_equal(m1->ibmw.type, IBV_MW_TYPE_1);
	assert_int_equal(m2->ibmw.type, IBV_MW_TYPE_2);
	assert_ptr_equal(m1->ibmw.pd, &pd->ibpd);
	assert_int_not_equal(m1->ibmw.rkey, 0);
	assert_int_not_equal(m1->ibmw.rkey, m2->ibmw.rkey);
	assert_null(rvt_alloc_mw(pd, (enum ibv_mw_type)3, &err));
	assert_int_equal(err, -EOPNOTSUPP);
	assert_int_equal(rvt_dealloc_pd(pd), -EBUSY); /* windows use it */
	assert_int_equal(rvt_dealloc_mw(m1), 0);
	assert_int_equal(rvt_dealloc_mw(m2), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/* A bound type 2 window carries WRITE, READ and atomics into its MR. */
static void test_mw_type2_traffic(void **state)
{
	struct pair *p = pair_new(NULL);
	struct rvt_mregion *mw = mw_new(p->pd, IBV_MW_TYPE_2), *zb = mw_new(p->pd, IBV_MW_TYPE_2);
	uint32_t rkey, zkey;
	uint64_t v;

	(void)state;
	assert_int_equal(bind(p->b, p->bcq, mw, p->bmr, 1024, 4096, QP_ACC, &rkey),
			 IBV_WC_SUCCESS);
	ut_fill(p->abuf, 4096, 5);
	assert_int_equal(rdma(p, IBV_WR_RDMA_WRITE, 0, 4096, bva(p, 1024), rkey), IBV_WC_SUCCESS);
	assert_true(ut_check(p->bbuf + 1024, 4096, 5));
	assert_true(all_zero(p->bbuf, 1024));
	assert_true(all_zero(p->bbuf + 5120, BUFSZ - 5120));
	ut_fill(p->bbuf + 2000, 100, 6);
	assert_int_equal(rdma(p, IBV_WR_RDMA_READ, 4096, 100, bva(p, 2000), rkey), IBV_WC_SUCCESS);
	assert_true(ut_check(p->abuf + 4096, 100, 6));
	v = 10;
	memcpy(p->bbuf + 1024, &v, 8);
	assert_int_equal(rdma(p, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, bva(p, 1024), rkey),
			 IBV_WC_SUCCESS);
	memcpy(&v, p->bbuf + 1024, 8);
	assert_int_equal(v, 13);

	/* zero-based: remote addresses are offsets into the window */
	assert_int_equal(bind(p->b, p->bcq, zb, p->bmr, 6000, 1000,
			      IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED, &zkey), IBV_WC_SUCCESS);
	ut_fill(p->abuf, 64, 7);
	assert_int_equal(rdma(p, IBV_WR_RDMA_WRITE, 0, 64, 10, zkey), IBV_WC_SUCCESS);
	assert_true(ut_check(p->bbuf + 6010, 64, 7));
	/* the MR cannot go while windows are bound to it */
	assert_int_equal(rvt_dereg_mr(p->bmr), -EBUSY);
	assert_int_equal(rvt_dealloc_mw(mw), 0);
	assert_int_equal(rvt_dealloc_mw(zb), 0);
	ut_cq_empty(p->acq, 5);
	ut_cq_empty(p->bcq, 5);
	pair_free(p, true);
}

/* A type 1 window: bound, rebound elsewhere (the old range is gone),
 * unbound by a bind of length 0. */
static void test_mw_type1(void **state)
{
	struct pair *p = pair_new(NULL);
	struct rvt_mregion *mw = mw_new(p->pd, IBV_MW_TYPE_1);
	uint32_t k1, k2, k3;

	(void)state;
	assert_int_equal(bind(p->b, p->bcq, mw, p->bmr, 0, 512, IBV_ACCESS_REMOTE_WRITE, &k1),
			 IBV_WC_SUCCESS);
	ut_fill(p->abuf, 16, 8);
	assert_int_equal(rdma(p, IBV_WR_RDMA_WRITE, 0, 16, bva(p, 100), k1), IBV_WC_SUCCESS);
	assert_true(ut_check(p->bbuf + 100, 16, 8));
	/* rebind: a new key for [4096, 4608) */
	assert_int_equal(bind(p->b, p->bcq, mw, p->bmr, 4096, 512, IBV_ACCESS_REMOTE_WRITE, &k2),
			 IBV_WC_SUCCESS);
	assert_int_not_equal(k1, k2);
	assert_int_equal(rdma(p, IBV_WR_RDMA_WRITE, 0, 16, bva(p, 4100), k2), IBV_WC_SUCCESS);
	assert_true(ut_check(p->bbuf + 4100, 16, 8));
	/* unbind */
	assert_int_equal(bind(p->b, p->bcq, mw, p->bmr, 0, 0, 0, &k3), IBV_WC_SUCCESS);
	assert_int_equal(atomic_load(&p->bmr->num_mw), 0);
	memset(p->bbuf, 0, BUFSZ);
	assert_int_equal(rdma(p, IBV_WR_RDMA_WRITE, 0, 16, bva(p, 4100), k3), IBV_WC_REM_ACCESS_ERR);
	assert_true(all_zero(p->bbuf, BUFSZ));
	assert_int_equal(rvt_dealloc_mw(mw), 0);
	pair_free(p, true);
}

/* rxe's bind checks: each completes IBV_WC_MW_BIND_ERR and binds nothing. */
static void test_mw_bind_checks(void **state)
{
	struct pair *p = pair_new(NULL);
	struct rvt_pd *pd2 = ut_pd(&dev);
	struct rvt_mregion *mw = mw_new(p->pd, IBV_MW_TYPE_2), *t1 = mw_new(p->pd, IBV_MW_TYPE_1);
	struct rvt_mregion *other_pd_mw = mw_new(pd2, IBV_MW_TYPE_2);
	struct rvt_mregion *nobind = ut_mr(p->pd, p->bbuf, BUFSZ, IBV_ACCESS_LOCAL_WRITE);
	struct rvt_mregion *ro = ut_mr(p->pd, p->bbuf, BUFSZ, IBV_ACCESS_MW_BIND);
	uint32_t key = mw->lkey, rkey;

	(void)state;
	/* MR without MW_BIND (C10-73) */
	assert_int_equal(bind(p->b, p->bcq, mw, nobind, 0, 64, IBV_ACCESS_REMOTE_READ, NULL),
			 IBV_WC_MW_BIND_ERR);
	/* a writable window on an MR without local write (C10-74) */
	assert_int_equal(bind(p->b, p->bcq, mw, ro, 0, 64, IBV_ACCESS_REMOTE_WRITE, NULL),
			 IBV_WC_MW_BIND_ERR);
	/* outside the MR (C10-75) */
	assert_int_equal(bind(p->b, p->bcq, mw, p->bmr, BUFSZ - 8, 64, IBV_ACCESS_REMOTE_READ, NULL),
			 IBV_WC_MW_BIND_ERR);
	/* type 2 with no MR or length 0 (o10-37.2.40) */
	assert_int_equal(bind(p->b, p->bcq, mw, p->bmr, 0, 0, IBV_ACCESS_REMOTE_READ, NULL),
			 IBV_WC_MW_BIND_ERR);
	/* zero-based type 1 (o10-36.2.2) */
	assert_int_equal(bind(p->b, p->bcq, t1, p->bmr, 0, 64,
			      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED, NULL),
			 IBV_WC_MW_BIND_ERR);
	/* a window of another PD (C10-72) */
	assert_int_equal(bind(p->b, p->bcq, other_pd_mw, p->bmr, 0, 64, IBV_ACCESS_REMOTE_READ,
			      NULL), IBV_WC_MW_BIND_ERR);
	/* an access bit a window cannot have */
	assert_int_equal(bind(p->b, p->bcq, mw, p->bmr, 0, 64, IBV_ACCESS_MW_BIND, NULL),
			 IBV_WC_MW_BIND_ERR);
	assert_int_equal(mw->lkey, key); /* nothing bound */
	assert_false(mw->mw_bound);
	/* a bound type 2 window is not free (o10-37.2.30) */
	assert_int_equal(bind(p->b, p->bcq, mw, p->bmr, 0, 64, IBV_ACCESS_REMOTE_READ, &rkey),
			 IBV_WC_SUCCESS);
	assert_int_equal(bind(p->b, p->bcq, mw, p->bmr, 64, 64, IBV_ACCESS_REMOTE_READ, NULL),
			 IBV_WC_MW_BIND_ERR);
	assert_int_equal(mw->lkey, rkey);
	assert_int_equal(mw->iova, (uintptr_t)p->bbuf);
	/* a window's key is no lkey */
	{
		struct ibv_sge sge = { .addr = (uintptr_t)p->bbuf, .length = 8, .lkey = rkey };
		struct ibv_send_wr wr = { .opcode = IBV_WR_SEND, .sg_list = &sge, .num_sge = 1 };
		struct ibv_send_wr *bad;
		assert_int_equal(rvt_post_send(p->b, &wr, &bad), -EINVAL);
	}
	assert_int_equal(rvt_dealloc_mw(mw), 0);
	assert_int_equal(rvt_dealloc_mw(t1), 0);
	assert_int_equal(rvt_dealloc_mw(other_pd_mw), 0);
	assert_int_equal(rvt_dereg_mr(nobind), 0);
	assert_int_equal(rvt_dereg_mr(ro), 0);
	assert_int_equal(rvt_dealloc_pd(pd2), 0);
	pair_free(p, true);
}

enum hostile {
	H_UNBOUND,      /* a type 2 window never bound */
	H_LOCAL_INV,    /* invalidated by the binding QP's LOCAL_INV */
	H_SEND_INV,     /* invalidated by the peer's SEND_WITH_INV */
	H_DEALLOC,      /* deallocated */
	H_PAST_END,     /* the range runs past the window's end */
	H_BEFORE,       /* the range starts before the window */
	H_NO_WRITE,     /* a read-only window written */
	H_NO_ATOMIC,    /* an atomic on a window without REMOTE_ATOMIC */
	H_OTHER_QP,     /* a type 2 window bound on another QP */
	H_OTHER_PD,     /* a window of another PD */
	H_OLD_KEY,      /* a type 1 window's key before its rebind */
	NHOSTILE
};

/*
 * Each case: REM_ACCESS_ERR for the requester, both QPs of that pair to
 * ERR, and not a byte of b's buffer changed.
 */
static void test_mw_hostile(void **state)
{
	(void)state;
	for (int c = 0; c < NHOSTILE; c++) {
		struct pair *p = pair_new(NULL), *q = NULL;
		struct rvt_mregion *mw = mw_new(p->pd, c == H_OLD_KEY ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2);
		int op = IBV_WR_RDMA_WRITE, acc = QP_ACC;
		uint64_t va = bva(p, 1024);
		uint32_t rkey = mw->lkey, len = 64;
		struct pair *target = p;
		bool dealloced = false;

		if (c == H_NO_WRITE)
			acc = IBV_ACCESS_REMOTE_READ;
		if (c == H_NO_ATOMIC) {
			acc = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
			op = IBV_WR_ATOMIC_FETCH_AND_ADD;
			len = 8;
		}
		if (c != H_UNBOUND)
			assert_int_equal(bind(p->b, p->bcq, mw, p->bmr, 1024, 1024, acc, &rkey),
					 IBV_WC_SUCCESS);
		switch (c) {
		case H_LOCAL_INV: {
			struct ibv_send_wr wr = { .wr_id = 0x11, .opcode = IBV_WR_LOCAL_INV,
						  .send_flags = IBV_SEND_SIGNALED,
						  .invalidate_rkey = rkey };
			ut_post_send(p->b, &wr);
			expect_wc(p->bcq, 0x11, IBV_WC_SUCCESS);
			break;
		}
		case H_SEND_INV: {
			struct ibv_send_wr wr = { .wr_id = 0x12, .opcode = IBV_WR_SEND_WITH_INV,
						  .send_flags = IBV_SEND_SIGNALED,
						  .invalidate_rkey = rkey };
			struct ibv_wc wc;
			ut_post_recv(p->b, 0x13, NULL, 0, 0);
			ut_post_send(p->a, &wr);
			expect_wc(p->acq, 0x12, IBV_WC_SUCCESS);
			wc = expect_wc(p->bcq, 0x13, IBV_WC_SUCCESS);
			assert_true(wc.wc_flags & IBV_WC_WITH_INV);
			assert_int_equal(wc.invalidated_rkey, rkey);
			break;
		}
		case H_DEALLOC:
			assert_int_equal(rvt_dealloc_mw(mw), 0);
			dealloced = true;
			break;
		case H_PAST_END:
			va = bva(p, 2048 - 32);
			break;
		case H_BEFORE:
			va = bva(p, 1000);
			break;
		case H_OTHER_QP:
			/* same PD, another pair: b2 is not the window's QP */
			q = pair_new(p->pd);
			target = q;
			break;
		case H_OTHER_PD:
			q = pair_new(NULL);
			target = q;
			break;
		case H_OLD_KEY: {
			uint32_t k2;
			assert_int_equal(bind(p->b, p->bcq, mw, p->bmr, 1024, 1024, acc, &k2),
					 IBV_WC_SUCCESS);
			assert_int_not_equal(k2, rkey);
			break;
		}
		default:
			break;
		}
		ut_fill(target->abuf, 64, 9);
		if (rdma(target, op, 0, len, va, rkey) != IBV_WC_REM_ACCESS_ERR)
			fail_msg("case %d: not refused", c);
		assert_int_equal(ut_state(target->a), IBV_QPS_ERR);
		assert_true(all_zero(p->bbuf, BUFSZ));
		if (q)
			assert_true(all_zero(q->bbuf, BUFSZ));
		if (!dealloced)
			assert_int_equal(rvt_dealloc_mw(mw), 0);
		if (c == H_OTHER_QP) {
			pair_free(q, false);
			pair_free(p, true);
		} else {
			if (q)
				pair_free(q, true);
			pair_free(p, true);
		}
	}
}

/* The control for test_mw_hostile: the same WRITE through a good window lands. */
static void test_mw_control(void **state)
{
	struct pair *p = pair_new(NULL);
	struct rvt_mregion *mw = mw_new(p->pd, IBV_MW_TYPE_2);
	uint32_t rkey;

	(void)state;
	assert_int_equal(bind(p->b, p->bcq, mw, p->bmr, 1024, 1024, QP_ACC, &rkey), IBV_WC_SUCCESS);
	ut_fill(p->abuf, 64, 9);
	assert_int_equal(rdma(p, IBV_WR_RDMA_WRITE, 0, 64, bva(p, 2048 - 64), rkey), IBV_WC_SUCCESS);
	assert_true(ut_check(p->bbuf + 2048 - 64, 64, 9));
	assert_int_equal(rvt_dealloc_mw(mw), 0);
	pair_free(p, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mw_alloc),
		cmocka_unit_test(test_mw_type2_traffic),
		cmocka_unit_test(test_mw_type1),
		cmocka_unit_test(test_mw_bind_checks),
		cmocka_unit_test(test_mw_control),
		cmocka_unit_test(test_mw_hostile),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
