/*
 * On-demand paging MRs (core/odp.h): registration over memory that is not
 * mapped, implicit ODP, data moved through ODP MRs by every RC opcode, and
 * the hostile cases: an access to a page that is not mapped, or lacks the
 * permission the access needs, completes in error (remote: REM_ACCESS_ERR
 * for the requester; local source or target: LOC_PROT_ERR; receive
 * buffer: LOC_PROT_ERR on the receive, REM_OP_ERR for the sender) and the
 * process takes no signal. ibv_advise_mr's rules (rvt_advise_mr).
 *
 * QP a is the requester, b the responder, each with its own CQ. Runs
 * in-process and again over each link (URVT_PATH, CMakeLists.txt).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/odp.h"
#include "ut.h"

static struct ut_dev dev;
static size_t pg;

#define ODP_RW (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define QP_ACC (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/*
 * Four pages per side, each side's MR is ODP over all four; then page 1
 * is unmapped, page 2 read-only, page 3 inaccessible (PROT_NONE). Page 0
 * stays read-write.
 */
enum { PG_RW, PG_GONE, PG_RO, PG_NONE, NPG };

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
	pg = (size_t)sysconf(_SC_PAGESIZE);
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

static uint8_t *holey_map(void)
{
	uint8_t *m = mmap(NULL, NPG * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	assert_true(m != MAP_FAILED);
	memset(m, 0, NPG * pg);
	return m;
}

static void make_holes(uint8_t *m)
{
	assert_int_equal(munmap(m + PG_GONE * pg, pg), 0);
	assert_int_equal(mprotect(m + PG_RO * pg, pg, PROT_READ), 0);
	assert_int_equal(mprotect(m + PG_NONE * pg, pg, PROT_NONE), 0);
}

static void unmap_holey(uint8_t *m)
{
	munmap(m, NPG * pg); /* the hole too: munmap of a hole is fine */
}

static struct pair *pair_new(bool holes)
{
	struct pair *p = calloc(1, sizeof(*p));
	struct ut_qp_caps caps = { 16, 16, 4, 4, 0 };

	assert_non_null(p);
	p->pd = ut_pd(&dev);
	p->acq = ut_cq(&dev, 256);
	p->bcq = ut_cq(&dev, 256);
	p->a = ut_qp(&dev, p->pd, IBV_QPT_RC, p->acq, p->acq, NULL, &caps, false);
	p->b = ut_qp(&dev, p->pd, IBV_QPT_RC, p->bcq, p->bcq, NULL, &caps, false);
	p->abuf = holey_map();
	p->bbuf = holey_map();
	p->amr = ut_mr(p->pd, p->abuf, NPG * pg, ODP_RW);
	p->bmr = ut_mr(p->pd, p->bbuf, NPG * pg, ODP_RW);
	if (holes) {
		make_holes(p->abuf);
		make_holes(p->bbuf);
	}
	ut_connect(&dev, p->a, p->b->qpn, QP_ACC);
	ut_connect(&dev, p->b, p->a->qpn, QP_ACC);
	return p;
}

static void pair_free(struct pair *p)
{
	ut_async_drain(&dev);
	assert_int_equal(rvt_destroy_qp(p->a), 0);
	assert_int_equal(rvt_destroy_qp(p->b), 0);
	assert_int_equal(atomic_load(&p->amr->refcount), 1);
	assert_int_equal(atomic_load(&p->bmr->refcount), 1);
	assert_int_equal(rvt_dereg_mr(p->amr), 0);
	assert_int_equal(rvt_dereg_mr(p->bmr), 0);
	assert_int_equal(rvt_destroy_cq(p->acq), 0);
	assert_int_equal(rvt_destroy_cq(p->bcq), 0);
	assert_int_equal(rvt_dealloc_pd(p->pd), 0);
	unmap_holey(p->abuf);
	unmap_holey(p->bbuf);
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

/* One WR of one SGE [abuf+aoff, +len) (lkey: a's MR unless given). */
static void post1(struct pair *p, int opcode, size_t aoff, uint32_t len, uint64_t raddr,
		  uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)p->abuf + aoff, .length = len,
			       .lkey = p->amr->ibmr.lkey };
	struct ibv_send_wr wr = { .wr_id = 0x100 + (uint64_t)opcode, .sg_list = &sge,
				  .num_sge = 1, .opcode = (enum ibv_wr_opcode)opcode,
				  .send_flags = IBV_SEND_SIGNALED };

	if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 5;
		wr.wr.atomic.swap = 9;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	ut_post_send(p->a, &wr);
}

static uint64_t bva(struct pair *p, size_t off)
{
	return (uintptr_t)p->bbuf + off;
}

/* Registration: ODP over memory that is not mapped is fine, pinned is not;
 * implicit ODP is the whole address space, only as ODP and at iova 0. */
static void test_odp_reg(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	uint8_t *m = holey_map();
	struct rvt_mregion *mr;
	int err = 0;

	(void)state;
	make_holes(m);
	mr = rvt_reg_mr(pd, m, NPG * pg, (uintptr_t)m, IBV_ACCESS_LOCAL_WRITE, &err);
	assert_null(mr);
	assert_int_equal(err, -EFAULT);
	mr = rvt_reg_mr(pd, m, NPG * pg, (uintptr_t)m, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND,
			&err);
	assert_non_null(mr);
	assert_true(rvt_mr_odp(mr));
	assert_int_equal(rvt_dereg_mr(mr), 0);

	/* implicit */
	mr = rvt_reg_mr(pd, NULL, SIZE_MAX, 0, IBV_ACCESS_LOCAL_WRITE, &err);
	assert_null(mr);
	assert_int_equal(err, -EINVAL);
	mr = rvt_reg_mr(pd, NULL, SIZE_MAX, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND, &err);
	assert_null(mr);
	assert_int_equal(err, -EINVAL);
	mr = rvt_reg_mr(pd, NULL, SIZE_MAX, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND, &err);
	assert_non_null(mr);
	assert_int_equal(mr->iova, 0);
	assert_int_equal(mr->length, UINT64_MAX);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	/* HUGETLB is a hint that comes with ODP registrations */
	mr = rvt_reg_mr(pd, m, pg, (uintptr_t)m, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB, &err);
	assert_non_null(mr);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
	unmap_holey(m);
}

/* Every RC opcode through ODP MRs on both sides moves the right bytes. */
static void test_odp_traffic(void **state)
{
	struct pair *p = pair_new(false);
	struct ibv_wc wc;
	uint64_t v;

	(void)state;
	/* SEND into an ODP receive buffer, 2 pages: crosses a page */
	ut_fill(p->abuf, 2 * pg, 11);
	ut_post_recv(p->b, 1, p->bbuf, 2 * pg, p->bmr->ibmr.lkey);
	post1(p, IBV_WR_SEND, 0, 2 * pg, 0, 0);
	expect_wc(p->acq, 0x100 + IBV_WR_SEND, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 2 * pg);
	assert_true(ut_check(p->bbuf, 2 * pg, 11));

	/* WRITE */
	ut_fill(p->abuf, 3000, 12);
	post1(p, IBV_WR_RDMA_WRITE, 0, 3000, bva(p, 100), p->bmr->ibmr.rkey);
	expect_wc(p->acq, 0x100 + IBV_WR_RDMA_WRITE, IBV_WC_SUCCESS);
	assert_true(ut_check(p->bbuf + 100, 3000, 12));

	/* READ */
	ut_fill(p->bbuf + pg, 5000, 13);
	post1(p, IBV_WR_RDMA_READ, 8, 5000, bva(p, pg), p->bmr->ibmr.rkey);
	expect_wc(p->acq, 0x100 + IBV_WR_RDMA_READ, IBV_WC_SUCCESS);
	assert_true(ut_check(p->abuf + 8, 5000, 13));

	/* atomics */
	v = 40;
	memcpy(p->bbuf + 64, &v, 8);
	post1(p, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, bva(p, 64), p->bmr->ibmr.rkey);
	expect_wc(p->acq, 0x100 + IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WC_SUCCESS);
	memcpy(&v, p->abuf, 8);
	assert_int_equal(v, 40);
	memcpy(&v, p->bbuf + 64, 8);
	assert_int_equal(v, 45);
	post1(p, IBV_WR_ATOMIC_CMP_AND_SWP, 16, 8, bva(p, 64), p->bmr->ibmr.rkey);
	expect_wc(p->acq, 0x100 + IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WC_SUCCESS);
	memcpy(&v, p->abuf + 16, 8);
	assert_int_equal(v, 45); /* compare 5 failed: unchanged */
	memcpy(&v, p->bbuf + 64, 8);
	assert_int_equal(v, 45);
	ut_cq_empty(p->acq, 5);
	ut_cq_empty(p->bcq, 5);
	pair_free(p);
}

/* An implicit ODP MR: the rkey reaches any address of the process. */
static void test_odp_implicit(void **state)
{
	struct pair *p = pair_new(false);
	struct rvt_mregion *imr;
	uint8_t *target = malloc(10000);
	int err = 0;

	(void)state;
	assert_non_null(target);
	memset(target, 0, 10000);
	imr = rvt_reg_mr(p->pd, NULL, SIZE_MAX, 0, ODP_RW, &err);
	assert_non_null(imr);
	ut_fill(p->abuf, 9000, 21);
	post1(p, IBV_WR_RDMA_WRITE, 0, 9000, (uintptr_t)target + 7, imr->ibmr.rkey);
	expect_wc(p->acq, 0x100 + IBV_WR_RDMA_WRITE, IBV_WC_SUCCESS);
	assert_true(ut_check(target + 7, 9000, 21));
	/* and a receive buffer anywhere, by its lkey */
	ut_post_recv(p->b, 1, target, 100, imr->ibmr.lkey);
	post1(p, IBV_WR_SEND, 0, 100, 0, 0);
	expect_wc(p->acq, 0x100 + IBV_WR_SEND, IBV_WC_SUCCESS);
	expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
	assert_true(ut_check(target, 100, 21));
	/* address 0 is never mapped: an access error, no signal */
	post1(p, IBV_WR_RDMA_READ, 0, 8, 0, imr->ibmr.rkey);
	expect_wc(p->acq, 0x100 + IBV_WR_RDMA_READ, IBV_WC_REM_ACCESS_ERR);
	assert_int_equal(ut_state(p->a), IBV_QPS_ERR);
	assert_int_equal(rvt_dereg_mr(imr), 0);
	pair_free(p);
	free(target);
}

/*
 * The remote target's page: not mapped, read-only, or PROT_NONE. Each
 * access the page does not allow is NAKed (REM_ACCESS_ERR, both QPs to
 * ERR) and writes nothing; a READ of the read-only page works.
 */
static void test_odp_remote_fault(void **state)
{
	static const struct {
		int opcode;
		int page;
		enum ibv_wc_status st;
	} c[] = {
		{ IBV_WR_RDMA_WRITE, PG_GONE, IBV_WC_REM_ACCESS_ERR },
		{ IBV_WR_RDMA_WRITE, PG_RO, IBV_WC_REM_ACCESS_ERR },
		{ IBV_WR_RDMA_WRITE, PG_NONE, IBV_WC_REM_ACCESS_ERR },
		{ IBV_WR_RDMA_READ, PG_GONE, IBV_WC_REM_ACCESS_ERR },
		{ IBV_WR_RDMA_READ, PG_NONE, IBV_WC_REM_ACCESS_ERR },
		{ IBV_WR_RDMA_READ, PG_RO, IBV_WC_SUCCESS },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, PG_RO, IBV_WC_REM_ACCESS_ERR },
		{ IBV_WR_ATOMIC_CMP_AND_SWP, PG_GONE, IBV_WC_REM_ACCESS_ERR },
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(c); i++) {
		struct pair *p = pair_new(true);
		bool atomic = c[i].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
			      c[i].opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
		/* WRITE/READ into the unmapped page from the last 100 bytes of
		 * page 0, into the others from their start */
		size_t off = c[i].page == PG_GONE && !atomic ? pg - 100 : (size_t)c[i].page * pg;
		uint32_t len = atomic ? 8 : 200;

		ut_fill(p->abuf, 256, 31);
		post1(p, c[i].opcode, 0, len, bva(p, off), p->bmr->ibmr.rkey);
		expect_wc(p->acq, 0x100 + (uint64_t)c[i].opcode, c[i].st);
		if (c[i].st != IBV_WC_SUCCESS) {
			assert_int_equal(ut_state(p->a), IBV_QPS_ERR);
			/* nothing landed in page 0 */
			for (size_t j = pg - 100; j < pg; j++)
				assert_int_equal(p->bbuf[j], 0);
		}
		pair_free(p);
	}
}

/*
 * The requester's own ODP pages: a SEND or WRITE source that is not
 * mapped, a READ or atomic result going to a read-only page. The WQE
 * completes with LOC_PROT_ERR, the QP goes to ERR, the responder sees
 * nothing (its receive stays posted, then is flushed by nobody: b is
 * still RTS).
 */
static void test_odp_local_fault(void **state)
{
	static const struct {
		int opcode;
		int page;
	} c[] = {
		{ IBV_WR_SEND, PG_GONE },
		{ IBV_WR_SEND, PG_NONE },
		{ IBV_WR_RDMA_WRITE, PG_GONE },
		{ IBV_WR_RDMA_READ, PG_RO },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, PG_RO },
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(c); i++) {
		struct pair *p = pair_new(true);

		ut_post_recv(p->b, 1, p->bbuf, 64, p->bmr->ibmr.lkey);
		post1(p, c[i].opcode, (size_t)c[i].page * pg, 8, bva(p, 0), p->bmr->ibmr.rkey);
		expect_wc(p->acq, 0x100 + (uint64_t)c[i].opcode, IBV_WC_LOC_PROT_ERR);
		assert_int_equal(ut_state(p->a), IBV_QPS_ERR);
		ut_cq_empty(p->bcq, 20);
		assert_int_equal(ut_state(p->b), IBV_QPS_RTS);
		pair_free(p);
	}
}

/* A receive buffer in a page that is not writable: LOC_PROT_ERR on the
 * receive, REM_OP_ERR for the sender (as for a bad receive lkey). */
static void test_odp_recv_fault(void **state)
{
	(void)state;
	for (int page = PG_GONE; page < NPG; page++) {
		struct pair *p = pair_new(true);

		ut_post_recv(p->b, 1, p->bbuf + (size_t)page * pg, 64, p->bmr->ibmr.lkey);
		post1(p, IBV_WR_SEND, 0, 16, 0, 0);
		expect_wc(p->bcq, 1, IBV_WC_LOC_PROT_ERR);
		expect_wc(p->acq, 0x100 + IBV_WR_SEND, IBV_WC_REM_OP_ERR);
		pair_free(p);
	}
}

/* ibv_advise_mr: ODP MRs of the PD only, known advice and flags, in
 * range, write needs local write; FLUSH reports what cannot be faulted. */
static void test_advise_mr(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev), *pd2 = ut_pd(&dev);
	uint8_t *m = holey_map();
	struct rvt_mregion *odp, *pinned, *ro;
	struct ibv_sge sge;
	int err = 0;

	(void)state;
	pinned = ut_mr(pd, m, NPG * pg, IBV_ACCESS_LOCAL_WRITE);
	odp = ut_mr(pd, m, NPG * pg, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	ro = rvt_reg_mr(pd, m, NPG * pg, (uintptr_t)m, IBV_ACCESS_ON_DEMAND, &err);
	assert_non_null(ro);
	make_holes(m);

	sge = (struct ibv_sge){ (uintptr_t)m, (uint32_t)pg, odp->ibmr.lkey };
	assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), 0);
	assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
				       IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), 0);
	assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1), 0);
	assert_int_equal(rvt_advise_mr(pd, 7, 0, &sge, 1), -EOPNOTSUPP);
	assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 2, &sge, 1), -EOPNOTSUPP);
	assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0), -EINVAL);
	/* another PD's, a pinned MR, a dead key, out of range */
	assert_int_equal(rvt_advise_mr(pd2, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), -EINVAL);
	sge.lkey = pinned->ibmr.lkey;
	assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), -EINVAL);
	sge.lkey = odp->ibmr.lkey ^ 1;
	assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), -EINVAL);
	sge.lkey = odp->ibmr.lkey;
	sge.length = (uint32_t)(NPG * pg + 1);
	assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), -EINVAL);
	/* write advice on an MR without local write */
	sge = (struct ibv_sge){ (uintptr_t)m, (uint32_t)pg, ro->ibmr.lkey };
	assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1), -EINVAL);
	assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), 0);
	/* the pages that are not there: EFAULT with FLUSH, a hint without */
	for (int page = PG_GONE; page < NPG; page++) {
		sge = (struct ibv_sge){ (uintptr_t)m + (size_t)page * pg, (uint32_t)pg,
					odp->ibmr.lkey };
		assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
					       IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), -EFAULT);
		assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1),
				 0);
	}
	sge.addr = (uintptr_t)m + PG_RO * pg;
	assert_int_equal(rvt_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH,
				       IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), 0);
	assert_int_equal(rvt_dereg_mr(pinned), 0);
	assert_int_equal(rvt_dereg_mr(odp), 0);
	assert_int_equal(rvt_dereg_mr(ro), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
	assert_int_equal(rvt_dealloc_pd(pd2), 0);
	unmap_holey(m);
}

/* The probe and the copy on their own. */
static void test_odp_primitives(void **state)
{
	uint8_t *m = holey_map();
	uint8_t buf[64];

	(void)state;
	make_holes(m);
	assert_true(rvt_odp_probe(m, pg, true));
	assert_false(rvt_odp_probe(m + pg - 1, 2, false)); /* into the hole */
	assert_true(rvt_odp_probe(m + PG_RO * pg, pg, false));
	assert_false(rvt_odp_probe(m + PG_RO * pg, pg, true));
	assert_false(rvt_odp_probe(m + PG_NONE * pg, 1, false));
	assert_true(rvt_odp_probe(m + PG_NONE * pg, 0, true));
	memset(m, 7, 64);
	assert_true(rvt_odp_copy(buf, m, 64));
	assert_int_equal(buf[63], 7);
	assert_false(rvt_odp_copy(buf, m + PG_GONE * pg, 8));
	assert_false(rvt_odp_copy(m + PG_RO * pg, buf, 8));
	assert_false(rvt_odp_copy(buf, m + PG_NONE * pg, 8));
	unmap_holey(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_odp_primitives),
		cmocka_unit_test(test_odp_reg),
		cmocka_unit_test(test_odp_traffic),
		cmocka_unit_test(test_odp_implicit),
		cmocka_unit_test(test_odp_remote_fault),
		cmocka_unit_test(test_odp_local_fault),
		cmocka_unit_test(test_odp_recv_fault),
		cmocka_unit_test(test_advise_mr),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
