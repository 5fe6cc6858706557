/*
 * ATOMIC_WRITE (qp-semantics §2.10): 8 bytes stored at the responder in
 * one write, answered by an empty READ RESPONSE ONLY, completed as
 * IBV_WC_ATOMIC_WRITE; the post checks (RC only, one SGE of exactly 8
 * bytes or 8 inline bytes, a readable lkey, max_rd_atomic) and the hostile
 * targets: an rkey without remote write, a range past the MR, an address
 * off 8 bytes, a QP that allows no remote write, another PD's key. Each
 * is refused with rxe's status and changes no byte of the target.
 *
 * QP a is the requester, b the responder. Runs in-process and again over
 * each link (URVT_PATH, CMakeLists.txt).
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

#define BUFSZ 4096
#define VAL 0x1122334455667788ull

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

/* b's QP allows qp_acc, its buffer's MR grants mr_acc. */
static struct pair *pair_new(int qp_acc, int mr_acc)
{
	struct pair *p = calloc(1, sizeof(*p));
	struct ut_qp_caps caps = { 16, 16, 2, 2, 16 };

	assert_non_null(p);
	p->pd = ut_pd(&dev);
	p->acq = ut_cq(&dev, 64);
	p->bcq = ut_cq(&dev, 64);
	p->a = ut_qp(&dev, p->pd, IBV_QPT_RC, p->acq, p->acq, NULL, &caps, false);
	p->b = ut_qp(&dev, p->pd, IBV_QPT_RC, p->bcq, p->bcq, NULL, &caps, false);
	p->abuf = aligned_alloc(64, BUFSZ);
	p->bbuf = aligned_alloc(64, BUFSZ);
	assert_non_null(p->abuf);
	assert_non_null(p->bbuf);
	memset(p->abuf, 0, BUFSZ);
	memset(p->bbuf, 0, BUFSZ);
	p->amr = ut_mr(p->pd, p->abuf, BUFSZ, IBV_ACCESS_LOCAL_WRITE);
	p->bmr = ut_mr(p->pd, p->bbuf, BUFSZ, IBV_ACCESS_LOCAL_WRITE | mr_acc);
	ut_connect(&dev, p->a, p->b->qpn, IBV_ACCESS_REMOTE_WRITE);
	ut_connect(&dev, p->b, p->a->qpn, qp_acc);
	return p;
}

static void pair_free(struct pair *p)
{
	ut_async_drain(&dev);
	assert_int_equal(rvt_destroy_qp(p->a), 0);
	assert_int_equal(rvt_destroy_qp(p->b), 0);
	assert_int_equal(rvt_dereg_mr(p->amr), 0);
	assert_int_equal(rvt_dereg_mr(p->bmr), 0);
	assert_int_equal(rvt_destroy_cq(p->acq), 0);
	assert_int_equal(rvt_destroy_cq(p->bcq), 0);
	assert_int_equal(rvt_dealloc_pd(p->pd), 0);
	free(p->abuf);
	free(p->bbuf);
	free(p);
	ut_async_drain(&dev);
}

static void wr_init(struct ibv_send_wr *wr, struct ibv_sge *sge, uint64_t raddr, uint32_t rkey)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = 0x300;
	wr->sg_list = sge;
	wr->num_sge = 1;
	wr->opcode = IBV_WR_ATOMIC_WRITE;
	wr->send_flags = IBV_SEND_SIGNALED;
	wr->wr.rdma.remote_addr = raddr;
	wr->wr.rdma.rkey = rkey;
}

/* One ATOMIC_WRITE of v from a's buffer at aoff; its completion's status. */
static enum ibv_wc_status awrite(struct pair *p, uint64_t v, size_t aoff, uint64_t raddr,
				 uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)p->abuf + aoff, .length = 8,
			       .lkey = p->amr->ibmr.lkey };
	struct ibv_send_wr wr;
	struct ibv_wc wc;

	memcpy(p->abuf + aoff, &v, sizeof(v));
	wr_init(&wr, &sge, raddr, rkey);
	ut_post_send(p->a, &wr);
	ut_poll1(p->acq, &wc);
	assert_int_equal(wc.wr_id, 0x300);
	if (wc.status == IBV_WC_SUCCESS)
		assert_int_equal(wc.opcode, IBV_WC_ATOMIC_WRITE);
	return wc.status;
}

static bool all_zero(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

static void test_aw_traffic(void **state)
{
	struct pair *p = pair_new(IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_WRITE);
	uint64_t got, v = VAL;
	struct ibv_sge sge = { .addr = (uintptr_t)&v, .length = 8 };
	struct ibv_send_wr wr;
	struct ibv_wc wc;

	(void)state;
	assert_int_equal(awrite(p, VAL, 0, (uintptr_t)p->bbuf + 64, p->bmr->ibmr.rkey),
			 IBV_WC_SUCCESS);
	memcpy(&got, p->bbuf + 64, 8);
	assert_true(got == VAL);
	/* exactly those 8 bytes */
	assert_true(all_zero(p->bbuf, 64) && all_zero(p->bbuf + 72, BUFSZ - 72));
	/* the value is taken at post time: changing the source after the post
	 * changes nothing */
	for (uint64_t i = 1; i <= 20; i++)
		assert_int_equal(awrite(p, VAL + i, 8 * i, (uintptr_t)p->bbuf + 128,
					p->bmr->ibmr.rkey),
				 IBV_WC_SUCCESS);
	memcpy(&got, p->bbuf + 128, 8);
	assert_true(got == VAL + 20);
	/* inline: the value from anywhere, no lkey */
	wr_init(&wr, &sge, (uintptr_t)p->bbuf + 256, p->bmr->ibmr.rkey);
	wr.send_flags |= IBV_SEND_INLINE;
	ut_post_send(p->a, &wr);
	v = 0; /* taken at post */
	ut_poll1(p->acq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_ATOMIC_WRITE);
	memcpy(&got, p->bbuf + 256, 8);
	assert_true(got == VAL);
	pair_free(p);
}

static void test_aw_post_checks(void **state)
{
	struct pair *p = pair_new(IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_WRITE);
	struct ibv_sge sge[2] = { { .addr = (uintptr_t)p->abuf, .length = 8,
				    .lkey = p->amr->ibmr.lkey },
				  { .addr = (uintptr_t)p->abuf + 8, .length = 8,
				    .lkey = p->amr->ibmr.lkey } };
	struct ibv_send_wr wr, *bad = NULL;
	struct ut_qp_caps caps = { 4, 4, 2, 2, 16 };
	struct rvt_qp *uc, *nord;

	(void)state;
	wr_init(&wr, sge, (uintptr_t)p->bbuf, p->bmr->ibmr.rkey);
	wr.num_sge = 0;
	assert_int_equal(rvt_post_send(p->a, &wr, &bad), -EINVAL);
	assert_ptr_equal(bad, &wr);
	wr.num_sge = 2; /* 16 bytes */
	assert_int_equal(rvt_post_send(p->a, &wr, &bad), -EINVAL);
	wr.num_sge = 1;
	sge[0].length = 4;
	assert_int_equal(rvt_post_send(p->a, &wr, &bad), -EINVAL);
	sge[0].length = 8;
	sge[0].lkey ^= 0x100; /* nobody's */
	assert_int_equal(rvt_post_send(p->a, &wr, &bad), -EINVAL);
	sge[0].lkey = p->amr->ibmr.lkey;
	/* RC only */
	uc = ut_qp(&dev, p->pd, IBV_QPT_UC, p->acq, p->acq, NULL, &caps, false);
	ut_connect(&dev, uc, p->b->qpn, IBV_ACCESS_REMOTE_WRITE);
	assert_int_equal(rvt_post_send(uc, &wr, &bad), -EINVAL);
	/* a responder resource: not without max_rd_atomic */
	nord = ut_qp(&dev, p->pd, IBV_QPT_RC, p->acq, p->acq, NULL, &caps, false);
	ut_to_init(nord, IBV_ACCESS_REMOTE_WRITE, 0);
	ut_to_rtr(&dev, nord, p->b->qpn, 1);
	ut_to_rts(nord, 7, 7, 0);
	assert_int_equal(rvt_post_send(nord, &wr, &bad), -EINVAL);
	assert_true(all_zero(p->bbuf, BUFSZ));
	assert_int_equal(rvt_destroy_qp(uc), 0);
	assert_int_equal(rvt_destroy_qp(nord), 0);
	pair_free(p);
}

static void test_aw_hostile(void **state)
{
	static const struct {
		const char *what;
		int qp_acc, mr_acc;
		size_t off;               /* into b's buffer */
		bool stranger;            /* another PD's MR's key */
		enum ibv_wc_status want;
	} cases[] = {
		{ "MR without remote write", IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ, 64,
		  false, IBV_WC_REM_ACCESS_ERR },
		{ "past the MR's end", IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_WRITE, BUFSZ - 4,
		  false, IBV_WC_REM_ACCESS_ERR },
		{ "address off 8 bytes", IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_WRITE, 68,
		  false, IBV_WC_REM_INV_REQ_ERR },
		{ "QP without remote write", IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, 64,
		  false, IBV_WC_REM_INV_REQ_ERR },
		{ "another PD's key", IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_WRITE, 64, true,
		  IBV_WC_REM_ACCESS_ERR },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct pair *p = pair_new(cases[i].qp_acc, cases[i].mr_acc);
		struct rvt_pd *other = ut_pd(&dev);
		uint8_t *obuf = aligned_alloc(64, BUFSZ);
		struct rvt_mregion *omr;
		enum ibv_wc_status st;

		assert_non_null(obuf);
		memset(obuf, 0, BUFSZ);
		omr = ut_mr(other, obuf, BUFSZ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		st = awrite(p, VAL, 0,
			    (uintptr_t)(cases[i].stranger ? obuf : p->bbuf) + cases[i].off,
			    cases[i].stranger ? omr->ibmr.rkey : p->bmr->ibmr.rkey);
		if (st != cases[i].want)
			fail_msg("%s: status %d, expected %d", cases[i].what, st, cases[i].want);
		if (!all_zero(p->bbuf, BUFSZ) || !all_zero(obuf, BUFSZ))
			fail_msg("%s: the target changed", cases[i].what);
		assert_int_equal(rvt_dereg_mr(omr), 0);
		assert_int_equal(rvt_dealloc_pd(other), 0);
		free(obuf);
		pair_free(p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_aw_traffic),
		cmocka_unit_test(test_aw_post_checks),
		cmocka_unit_test(test_aw_hostile),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
