/*
 * PDs, MRs and the key table (qp-semantics §2.6, mr.c): registration
 * rules, key properties, rvt_lkey_ok step by step, rvt_rkey_ok, iova
 * translation, rereg and the references WQEs hold.
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

#include "core/ruc.h"
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

static struct rvt_mregion *reg(struct rvt_pd *pd, void *addr, size_t len, uint64_t iova,
			       int access, int *err)
{
	*err = 0;
	return rvt_reg_mr(pd, addr, len, iova, access, err);
}

static int lkey_ok(struct rvt_pd *pd, struct rvt_sge *isge, struct rvt_sge *last,
		   uint64_t addr, uint32_t len, uint32_t lkey, int acc)
{
	struct ibv_sge sge = { .addr = addr, .length = len, .lkey = lkey };

	memset(isge, 0, sizeof(*isge));
	return rvt_lkey_ok(&dev.rdi->lkey_table, pd, isge, last, &sge, acc);
}

/* rvt_lkey_ok succeeded: drop the reference it took. */
static void expect_lkey_ok(struct rvt_pd *pd, uint64_t addr, uint32_t len, uint32_t lkey, int acc)
{
	struct rvt_sge s = { 0 };

	assert_int_equal(lkey_ok(pd, &s, NULL, addr, len, lkey, acc), 1);
	assert_non_null(s.mr);
	rvt_put_sge(&s);
}

static void expect_lkey_bad(struct rvt_pd *pd, uint64_t addr, uint32_t len, uint32_t lkey, int acc)
{
	struct rvt_sge s = { 0 };

	assert_int_equal(lkey_ok(pd, &s, NULL, addr, len, lkey, acc), -EINVAL);
}

static uint32_t refs(struct rvt_mregion *mr)
{
	return atomic_load(&mr->refcount);
}

/* ---------------------------------------------------------------- */

static void test_pd_busy(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_cq *cq = ut_cq(&dev, 4);
	static char buf[256];
	struct rvt_mregion *mr = ut_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_ah_attr aha;
	struct rvt_ah *ah;
	struct rvt_qp *qp;
	int err = 0;

	(void)state;
	assert_int_equal(rvt_dealloc_pd(pd), -EBUSY);
	assert_int_equal(rvt_dereg_mr(mr), 0);

	qp = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, NULL, false);
	assert_int_equal(rvt_dealloc_pd(pd), -EBUSY);
	assert_int_equal(rvt_destroy_qp(qp), 0);

	ut_loopback_ah_attr(&dev, &aha);
	ah = rvt_create_ah(pd, &aha, &err);
	assert_non_null(ah);
	assert_int_equal(rvt_dealloc_pd(pd), -EBUSY);
	assert_int_equal(rvt_destroy_ah(ah), 0);

	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

static void test_reg_access_rules(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	static char buf[4096];
	struct rvt_mregion *mr;
	int err;
	static const struct {
		int access;
		int err;
	} cases[] = {
		{ IBV_ACCESS_REMOTE_WRITE, -EINVAL },
		{ IBV_ACCESS_REMOTE_ATOMIC, -EINVAL },
		{ IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, -EINVAL },
		{ IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ, -EINVAL },
		{ IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE, 0 }, /* test_odp */
		{ 1 << 15, -EINVAL },
		{ 0, 0 },
		{ IBV_ACCESS_REMOTE_READ, 0 },
		{ IBV_ACCESS_LOCAL_WRITE, 0 },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0 },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, 0 },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			  IBV_ACCESS_REMOTE_ATOMIC, 0 },
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		mr = reg(pd, buf, sizeof(buf), (uintptr_t)buf, cases[i].access, &err);
		if (cases[i].err) {
			assert_null(mr);
			assert_int_equal(err, cases[i].err);
		} else {
			assert_non_null(mr);
			assert_int_equal(mr->ibmr.length, sizeof(buf));
			assert_ptr_equal(mr->ibmr.addr, buf);
			assert_ptr_equal(mr->ibmr.pd, &pd->ibpd);
			assert_int_equal(rvt_dereg_mr(mr), 0);
		}
	}
	/* length 0 */
	assert_null(reg(pd, buf, 0, (uintptr_t)buf, IBV_ACCESS_LOCAL_WRITE, &err));
	assert_int_equal(err, -EINVAL);
	/* length above max_mr_size */
	assert_null(reg(pd, buf, dev.rdi->dattr.max_mr_size + 1, (uintptr_t)buf, 0, &err));
	assert_int_equal(err, -EINVAL);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

static void test_reg_unmapped(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *p = mmap(NULL, (size_t)pg * 3, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct rvt_mregion *mr;
	int err;

	(void)state;
	assert_true(p != MAP_FAILED);
	/* a hole in the middle page */
	assert_int_equal(munmap(p + pg, (size_t)pg), 0);
	assert_null(reg(pd, p, (size_t)pg * 3, (uintptr_t)p, 0, &err));
	assert_int_equal(err, -EFAULT);
	assert_null(reg(pd, p + pg, 16, (uintptr_t)(p + pg), 0, &err));
	assert_int_equal(err, -EFAULT);
	/* ends one byte into the hole */
	assert_null(reg(pd, p, (size_t)pg + 1, (uintptr_t)p, 0, &err));
	assert_int_equal(err, -EFAULT);
	/* the mapped pages alone are fine */
	mr = reg(pd, p, (size_t)pg, (uintptr_t)p, 0, &err);
	assert_non_null(mr);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	mr = reg(pd, p + 2 * pg, (size_t)pg, (uintptr_t)(p + 2 * pg), 0, &err);
	assert_non_null(mr);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	/* NULL */
	assert_null(reg(pd, NULL, 64, 0, 0, &err));
	assert_int_equal(err, -EFAULT);
	munmap(p, (size_t)pg);
	munmap(p + 2 * pg, (size_t)pg);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

#define NKEYS 64
static void test_keys(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	static char buf[NKEYS][64];
	struct rvt_mregion *mr[NKEYS];
	uint32_t key[NKEYS];
	bool all_same_step = true;

	(void)state;
	for (int i = 0; i < NKEYS; i++) {
		mr[i] = ut_mr(pd, buf[i], sizeof(buf[i]), IBV_ACCESS_LOCAL_WRITE);
		key[i] = mr[i]->ibmr.lkey;
		assert_int_equal(mr[i]->ibmr.lkey, mr[i]->ibmr.rkey);
		assert_int_not_equal(key[i], 0);
		for (int j = 0; j < i; j++)
			assert_int_not_equal(key[i], key[j]);
		if (i) {
			assert_int_not_equal(key[i], key[i - 1] + 1);
			if (i > 1 && key[i] - key[i - 1] != key[1] - key[0])
				all_same_step = false;
		}
	}
	assert_false(all_same_step);
	for (int i = 0; i < NKEYS; i++)
		assert_int_equal(rvt_dereg_mr(mr[i]), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/* A key table's first generations come from one seed per table: two
 * tables differ, and opening one writes no generation per slot (the
 * array's pages past the first stay untouched until slots are used). */
static void test_key_table_seed(void **state)
{
	struct rvt_lkey_table a, b;
	long page = sysconf(_SC_PAGESIZE);
	size_t bytes = (size_t)URVT_MAX_MR * sizeof(*a.gen);
	uintptr_t from, to;
	unsigned char *vec;
	size_t resident = 0;

	(void)state;
	assert_int_equal(rvt_lkey_table_init(&a, URVT_MAX_MR), 0);
	assert_int_equal(rvt_lkey_table_init(&b, URVT_MAX_MR), 0);
	assert_true(a.seed != b.seed);
	from = ((uintptr_t)a.gen + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
	to = ((uintptr_t)a.gen + bytes) & ~((uintptr_t)page - 1);
	assert_true(to > from);
	vec = malloc((to - from) / (size_t)page);
	assert_non_null(vec);
	assert_int_equal(mincore((void *)from, to - from, vec), 0);
	for (size_t i = 0; i < (to - from) / (size_t)page; i++)
		resident += vec[i] & 1;
	/* valgrind's calloc writes its blocks (its preload names it) */
	if (!strstr(getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "", "vgpreload"))
		assert_int_equal(resident, 0);
	free(vec);
	rvt_lkey_table_fini(&a);
	rvt_lkey_table_fini(&b);
}

/* A deregistered key never matches again, even after re-registering. */
#define NREREG 300
static void test_dereg_key_dead(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_cq *cq = ut_cq(&dev, 4);
	struct rvt_qp *qp = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, NULL, false);
	static char buf[128];
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	uint32_t *dead = calloc(NREREG, sizeof(*dead));
	struct rvt_sge s = { 0 };

	(void)state;
	assert_non_null(dead);
	for (int i = 0; i < NREREG; i++) {
		struct rvt_mregion *mr = ut_mr(pd, buf, sizeof(buf), acc);
		uint32_t k = mr->ibmr.lkey;

		for (int j = 0; j < i; j++)
			assert_int_not_equal(k, dead[j]);
		expect_lkey_ok(pd, (uintptr_t)buf, 8, k, IBV_ACCESS_LOCAL_WRITE);
		assert_true(rvt_rkey_ok(qp, &s, 8, (uintptr_t)buf, k, IBV_ACCESS_REMOTE_WRITE));
		rvt_put_sge(&s);
		assert_int_equal(rvt_dereg_mr(mr), 0);
		dead[i] = k;
		/* every key deregistered so far stays dead */
		for (int j = 0; j <= i; j += (i > 20 ? 7 : 1)) {
			expect_lkey_bad(pd, (uintptr_t)buf, 8, dead[j], 0);
			assert_false(rvt_rkey_ok(qp, &s, 8, (uintptr_t)buf, dead[j],
						 IBV_ACCESS_REMOTE_WRITE));
		}
	}
	free(dead);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/* qp-semantics §2.6, every step. */
static void test_lkey_ok_steps(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev), *pd2 = ut_pd(&dev);
	static uint8_t buf[4096] __attribute__((aligned(64)));
	uint64_t b = (uintptr_t)buf;
	struct rvt_mregion *mr = ut_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct rvt_mregion *ro = ut_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_READ);
	struct rvt_mregion *hi;
	uint32_t k = mr->ibmr.lkey;
	struct rvt_sge s[4];
	int err;

	(void)state;
	/* 1. lkey 0 */
	expect_lkey_bad(pd, b, 8, 0, 0);
	/* 3. no MR with that index; a key differing only in generation */
	expect_lkey_bad(pd, b, 8, k ^ 1, 0);
	expect_lkey_bad(pd, b, 8, k + (1u << RVT_LKEY_GEN_BITS) * 7919, 0);
	/* 4. other PD; the failed check must not leak a reference */
	expect_lkey_bad(pd2, b, 8, k, 0);
	assert_int_equal(refs(mr), 1);
	/* 5. bounds */
	expect_lkey_ok(pd, b, sizeof(buf), k, 0);
	expect_lkey_ok(pd, b + sizeof(buf) - 1, 1, k, 0);
	expect_lkey_ok(pd, b + sizeof(buf), 0, k, 0);
	expect_lkey_bad(pd, b - 1, 8, k, 0);
	expect_lkey_bad(pd, b, sizeof(buf) + 1, k, 0);
	expect_lkey_bad(pd, b + sizeof(buf) - 7, 8, k, 0);
	expect_lkey_bad(pd, b + sizeof(buf), 1, k, 0);
	expect_lkey_bad(pd, b + 1, UINT32_MAX, k, 0);
	assert_int_equal(refs(mr), 1);
	/* addr + len wrapping past 2^64 must not pass the bounds check */
	hi = reg(pd, buf, sizeof(buf), 0xffffffffffffe000ull, IBV_ACCESS_LOCAL_WRITE, &err);
	assert_non_null(hi);
	expect_lkey_ok(pd, 0xffffffffffffe000ull, sizeof(buf), hi->ibmr.lkey, 0);
	expect_lkey_bad(pd, 0xffffffffffffef00ull, 0x2000, hi->ibmr.lkey, 0);
	expect_lkey_bad(pd, 0xfffffffffffffff0ull, 0x20, hi->ibmr.lkey, 0);
	assert_int_equal(refs(hi), 1);
	assert_int_equal(rvt_dereg_mr(hi), 0);
	/* iova + length overflowing at registration */
	assert_null(reg(pd, buf, sizeof(buf), 0xfffffffffffff800ull, 0, &err));
	assert_int_equal(err, -EINVAL);
	/* 6. access: every required bit */
	expect_lkey_ok(pd, b, 8, ro->ibmr.lkey, 0);
	expect_lkey_bad(pd, b, 8, ro->ibmr.lkey, IBV_ACCESS_LOCAL_WRITE);
	expect_lkey_ok(pd, b, 8, k, IBV_ACCESS_LOCAL_WRITE);
	expect_lkey_bad(pd, b, 8, k, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_int_equal(refs(ro), 1);
	/* 7. stored: reference, translated address, length */
	assert_int_equal(lkey_ok(pd, &s[0], NULL, b + 100, 100, k, 0), 1);
	assert_ptr_equal(s[0].mr, mr);
	assert_ptr_equal(s[0].vaddr, buf + 100);
	assert_int_equal(s[0].length, 100);
	assert_int_equal(s[0].sge_length, 100);
	assert_int_equal(refs(mr), 2);
	/* 2. adjacent merge: same key, starts where the previous ends */
	assert_int_equal(lkey_ok(pd, &s[1], &s[0], b + 200, 50, k, 0), 0);
	assert_int_equal(s[0].length, 150);
	assert_int_equal(s[0].sge_length, 150);
	assert_int_equal(refs(mr), 2);
	/* not adjacent: stored separately */
	assert_int_equal(lkey_ok(pd, &s[1], &s[0], b + 251, 10, k, 0), 1);
	assert_int_equal(refs(mr), 3);
	/* adjacent but another key (same memory): no merge */
	assert_int_equal(lkey_ok(pd, &s[2], &s[1], b + 261, 10, ro->ibmr.lkey, 0), 1);
	assert_ptr_equal(s[2].mr, ro);
	assert_int_equal(s[1].length, 10);
	/* adjacent, same key, but overrunning the MR: no merge and the full
	 * check then fails */
	assert_int_equal(lkey_ok(pd, &s[3], &s[2], b + 271, sizeof(buf), ro->ibmr.lkey, 0),
			 -EINVAL);
	assert_int_equal(s[2].length, 10);
	rvt_put_sge(&s[0]);
	rvt_put_sge(&s[1]);
	rvt_put_sge(&s[2]);
	assert_int_equal(refs(mr), 1);
	assert_int_equal(refs(ro), 1);
	/* deregistered */
	assert_int_equal(rvt_dereg_mr(ro), 0);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	expect_lkey_bad(pd, b, 8, k, 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
	assert_int_equal(rvt_dealloc_pd(pd2), 0);
}

static void test_rkey_ok(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev), *pd2 = ut_pd(&dev);
	struct rvt_cq *cq = ut_cq(&dev, 4);
	struct rvt_qp *qp = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, NULL, false);
	struct rvt_qp *qp2 = ut_qp(&dev, pd2, IBV_QPT_RC, cq, cq, NULL, NULL, false);
	static uint8_t buf[1024];
	const uint64_t iova = 0x5000000;
	struct rvt_mregion *w, *r;
	struct rvt_sge s = { 0 };
	int err;

	(void)state;
	w = reg(pd, buf, sizeof(buf), iova, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &err);
	r = reg(pd, buf, sizeof(buf), iova, IBV_ACCESS_REMOTE_READ, &err);
	assert_non_null(w);
	assert_non_null(r);
	/* bounds against the iova */
	assert_true(rvt_rkey_ok(qp, &s, sizeof(buf), iova, w->ibmr.rkey, IBV_ACCESS_REMOTE_WRITE));
	assert_ptr_equal(s.vaddr, buf);
	assert_int_equal(refs(w), 2);
	rvt_put_sge(&s);
	assert_true(rvt_rkey_ok(qp, &s, 10, iova + 1014, w->ibmr.rkey, IBV_ACCESS_REMOTE_WRITE));
	assert_ptr_equal(s.vaddr, buf + 1014);
	rvt_put_sge(&s);
	assert_false(rvt_rkey_ok(qp, &s, 11, iova + 1014, w->ibmr.rkey, IBV_ACCESS_REMOTE_WRITE));
	assert_false(rvt_rkey_ok(qp, &s, 1, iova - 1, w->ibmr.rkey, IBV_ACCESS_REMOTE_WRITE));
	assert_false(rvt_rkey_ok(qp, &s, 8, (uintptr_t)buf, w->ibmr.rkey,
				 IBV_ACCESS_REMOTE_WRITE));
	assert_false(rvt_rkey_ok(qp, &s, UINT32_MAX, iova + 8, w->ibmr.rkey,
				 IBV_ACCESS_REMOTE_WRITE));
	/* access */
	assert_false(rvt_rkey_ok(qp, &s, 8, iova, w->ibmr.rkey, IBV_ACCESS_REMOTE_READ));
	assert_false(rvt_rkey_ok(qp, &s, 8, iova, w->ibmr.rkey, IBV_ACCESS_REMOTE_ATOMIC));
	assert_false(rvt_rkey_ok(qp, &s, 8, iova, r->ibmr.rkey, IBV_ACCESS_REMOTE_WRITE));
	assert_true(rvt_rkey_ok(qp, &s, 8, iova, r->ibmr.rkey, IBV_ACCESS_REMOTE_READ));
	rvt_put_sge(&s);
	/* PD of the QP */
	assert_false(rvt_rkey_ok(qp2, &s, 8, iova, w->ibmr.rkey, IBV_ACCESS_REMOTE_WRITE));
	/* rkey 0 */
	assert_false(rvt_rkey_ok(qp, &s, 8, iova, 0, IBV_ACCESS_REMOTE_WRITE));
	assert_int_equal(refs(w), 1);
	assert_int_equal(refs(r), 1);
	assert_int_equal(rvt_dereg_mr(w), 0);
	assert_int_equal(rvt_dereg_mr(r), 0);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	assert_int_equal(rvt_destroy_qp(qp2), 0);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
	assert_int_equal(rvt_dealloc_pd(pd2), 0);
}

static void test_iova_translation(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	static uint8_t buf[512];
	const uint64_t iova = 0xabc000000ull;
	struct rvt_mregion *mr;
	struct rvt_sge s = { 0 };
	int err;

	(void)state;
	mr = reg(pd, buf, sizeof(buf), iova, IBV_ACCESS_LOCAL_WRITE, &err);
	assert_non_null(mr);
	assert_int_equal(lkey_ok(pd, &s, NULL, iova + 17, 33, mr->ibmr.lkey, 0), 1);
	assert_ptr_equal(s.vaddr, buf + 17);
	rvt_put_sge(&s);
	/* the host address is not the MR's address space */
	expect_lkey_bad(pd, (uintptr_t)buf + 17, 33, mr->ibmr.lkey, 0);
	assert_int_equal(rvt_dereg_mr(mr), 0);

	/* ZERO_BASED: addresses run from 0 */
	mr = reg(pd, buf, sizeof(buf), 0x1234, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED, &err);
	assert_non_null(mr);
	assert_int_equal(lkey_ok(pd, &s, NULL, 0, sizeof(buf), mr->ibmr.lkey, 0), 1);
	assert_ptr_equal(s.vaddr, buf);
	rvt_put_sge(&s);
	expect_lkey_bad(pd, 1, sizeof(buf), mr->ibmr.lkey, 0);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

static void test_rereg(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev), *pd2 = ut_pd(&dev);
	static uint8_t buf[256], buf2[512];
	struct rvt_mregion *mr = ut_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	uint32_t k = mr->ibmr.lkey;
	struct rvt_sge s = { 0 };
	uint64_t t0;

	(void)state;
	assert_int_equal(rvt_rereg_mr(mr, 0, NULL, NULL, 0, 0), -EINVAL);
	assert_int_equal(rvt_rereg_mr(mr, 1 << 7, NULL, NULL, 0, 0), -EINVAL);
	/* PD */
	assert_int_equal(rvt_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0), 0);
	assert_ptr_equal(mr->ibmr.pd, &pd2->ibpd);
	expect_lkey_bad(pd, (uintptr_t)buf, 8, mr->ibmr.lkey, 0);
	expect_lkey_ok(pd2, (uintptr_t)buf, 8, mr->ibmr.lkey, 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0); /* no longer used */
	pd = NULL;
	/* access */
	assert_int_equal(rvt_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				      IBV_ACCESS_REMOTE_WRITE), -EINVAL);
	assert_int_equal(rvt_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				      1 << 15), -EINVAL);
	expect_lkey_ok(pd2, (uintptr_t)buf, 8, mr->ibmr.lkey, IBV_ACCESS_LOCAL_WRITE);
	assert_int_equal(rvt_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				      IBV_ACCESS_REMOTE_READ), 0);
	expect_lkey_bad(pd2, (uintptr_t)buf, 8, mr->ibmr.lkey, IBV_ACCESS_LOCAL_WRITE);
	expect_lkey_ok(pd2, (uintptr_t)buf, 8, mr->ibmr.lkey, 0);
	/* translation */
	assert_int_equal(rvt_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2,
				      sizeof(buf2), 0), 0);
	assert_ptr_equal(mr->ibmr.addr, buf2);
	assert_int_equal(mr->ibmr.length, sizeof(buf2));
	assert_int_equal(lkey_ok(pd2, &s, NULL, (uintptr_t)buf2 + 300, 200, mr->ibmr.lkey, 0), 1);
	assert_ptr_equal(s.vaddr, buf2 + 300);
	rvt_put_sge(&s);
	if ((uintptr_t)buf + sizeof(buf) <= (uintptr_t)buf2 ||
	    (uintptr_t)buf >= (uintptr_t)buf2 + sizeof(buf2))
		expect_lkey_bad(pd2, (uintptr_t)buf, 8, mr->ibmr.lkey, 0);
	assert_int_equal(rvt_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2, 0, 0),
			 -EINVAL);
	assert_int_equal(rvt_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 64, 0),
			 -EFAULT);
	/* the key is still the MR's key */
	assert_int_equal(mr->ibmr.lkey, k);
	assert_int_equal(mr->ibmr.rkey, k);
	/* EBUSY while something holds a reference */
	assert_int_equal(lkey_ok(pd2, &s, NULL, (uintptr_t)buf2, 8, k, 0), 1);
	t0 = ut_now_ms();
	assert_int_equal(rvt_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				      IBV_ACCESS_LOCAL_WRITE), -EBUSY);
	assert_true(ut_now_ms() - t0 < 2000);
	assert_int_equal(rvt_dereg_mr(mr), -EBUSY);
	/* unchanged by the failed calls */
	expect_lkey_bad(pd2, (uintptr_t)buf2, 8, k, IBV_ACCESS_LOCAL_WRITE);
	rvt_put_sge(&s);
	assert_int_equal(rvt_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				      IBV_ACCESS_LOCAL_WRITE), 0);
	expect_lkey_ok(pd2, (uintptr_t)buf2, 8, k, IBV_ACCESS_LOCAL_WRITE);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	assert_int_equal(rvt_dealloc_pd(pd2), 0);
}

/*
 * qp-semantics §5.5 (rvt_qp_mr_clean): deregistering an MR that a queued
 * send WQE gathers from puts the QP in ERR; the flush drops the reference
 * and the dereg succeeds. A QP that does not use the MR is left alone.
 */
static void test_dereg_errors_a_qp_with_a_queued_wqe(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_cq *cq = ut_cq(&dev, 16);
	struct rvt_qp *qp = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, NULL, false);
	struct rvt_qp *other = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, NULL, false);
	static uint8_t buf[64], obuf[64];
	struct rvt_mregion *mr = ut_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct rvt_mregion *omr = ut_mr(pd, obuf, sizeof(obuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 32, .lkey = mr->ibmr.lkey };
	struct ibv_sge osge = { .addr = (uintptr_t)obuf, .length = 32, .lkey = omr->ibmr.lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr owr = { .wr_id = 8, .sg_list = &osge, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	uint32_t key = mr->ibmr.lkey;
	struct ibv_wc wc;

	(void)state;
	ut_connect(&dev, qp, qp->qpn, 0);
	ut_connect(&dev, other, other->qpn, 0);
	/* SQD: accepted and queued, not started */
	ut_modify_state(qp, IBV_QPS_SQD);
	ut_modify_state(other, IBV_QPS_SQD);
	ut_post_send(qp, &wr);
	ut_post_send(other, &owr);
	assert_int_equal(refs(mr), 2);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	assert_int_equal(ut_state(qp), IBV_QPS_ERR);
	assert_int_equal(ut_state(other), IBV_QPS_SQD);
	expect_lkey_bad(pd, (uintptr_t)buf, 8, key, 0);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.wr_id, 7);
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	ut_cq_empty(cq, 50);
	/* the other QP's WQE still holds its own MR */
	assert_int_equal(refs(omr), 2);
	ut_modify_state(other, IBV_QPS_ERR);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.wr_id, 8);
	assert_int_equal(rvt_dereg_mr(omr), 0);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	assert_int_equal(rvt_destroy_qp(other), 0);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/*
 * The same for the responder: a receive WQE taken for a message in
 * progress completes IBV_WC_LOC_PROT_ERR, and a WRITE's target lets go.
 * Both are taken here the way the responder takes them, under r_lock.
 */
static void test_dereg_errors_a_receive_in_progress(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_cq *cq = ut_cq(&dev, 16);
	struct rvt_qp *qp = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, NULL, false);
	static uint8_t buf[64];
	struct rvt_mregion *mr = ut_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_wc wc;

	(void)state;
	ut_connect(&dev, qp, qp->qpn, 0);
	ut_post_recv(qp, 21, buf, 32, mr->ibmr.lkey);
	ut_post_recv(qp, 22, buf + 32, 32, mr->ibmr.lkey);
	urvt_bias_lock(&qp->r_lock);
	assert_int_equal(rvt_get_rwqe(qp, false), 1);
	urvt_bias_unlock(&qp->r_lock);
	assert_int_equal(refs(mr), 2);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	assert_int_equal(ut_state(qp), IBV_QPS_ERR);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.wr_id, 21);
	assert_int_equal(wc.status, IBV_WC_LOC_PROT_ERR);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.wr_id, 22);
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

static void test_dereg_errors_a_write_in_progress(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_cq *cq = ut_cq(&dev, 16);
	struct rvt_qp *qp = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, NULL, false);
	static uint8_t buf[64];
	struct rvt_mregion *mr = ut_mr(pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

	(void)state;
	ut_connect(&dev, qp, qp->qpn, IBV_ACCESS_REMOTE_WRITE);
	urvt_bias_lock(&qp->r_lock);
	assert_true(rvt_rkey_ok(qp, &qp->r_rdma_sge, 16, (uintptr_t)buf, mr->ibmr.rkey,
				IBV_ACCESS_REMOTE_WRITE));
	urvt_bias_unlock(&qp->r_lock);
	assert_int_equal(refs(mr), 2);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	assert_int_equal(ut_state(qp), IBV_QPS_ERR);
	assert_null(qp->r_rdma_sge.mr);
	ut_cq_empty(cq, 50);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/* RESET discards a queued WQE without a completion but drops its references. */
static void test_reset_drops_refs(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct rvt_cq *cq = ut_cq(&dev, 16);
	struct rvt_qp *qp = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, NULL, false);
	static uint8_t buf[64];
	struct rvt_mregion *mr = ut_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge[2] = {
		{ .addr = (uintptr_t)buf, .length = 16, .lkey = mr->ibmr.lkey },
		{ .addr = (uintptr_t)buf + 32, .length = 16, .lkey = mr->ibmr.lkey },
	};
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = sge, .num_sge = 2,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };

	(void)state;
	ut_connect(&dev, qp, qp->qpn, 0);
	ut_modify_state(qp, IBV_QPS_SQD);
	ut_post_send(qp, &wr);
	ut_post_send(qp, &wr);
	assert_int_equal(refs(mr), 5);
	ut_modify_state(qp, IBV_QPS_RESET);
	assert_int_equal(refs(mr), 1);
	ut_cq_empty(cq, 20);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/* The slot cursor wraps around the whole key table: a slot used again gets
 * a new generation, so the old key stays dead. */
static void test_key_slot_reuse(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	static char buf[64];
	uint32_t max = dev.rdi->lkey_table.max, dead[4], reused = 0;
	struct rvt_mregion *mr;
	uint64_t t0 = ut_now_ms();

	(void)state;
	for (int i = 0; i < 4; i++) {
		mr = ut_mr(pd, buf, sizeof(buf), 0);
		dead[i] = mr->ibmr.lkey;
		assert_int_equal(rvt_dereg_mr(mr), 0);
	}
	for (uint32_t n = 0; n < max + 8; n++) {
		mr = ut_mr(pd, buf, sizeof(buf), 0);
		for (int i = 0; i < 4; i++) {
			assert_int_not_equal(mr->ibmr.lkey, dead[i]);
			if ((mr->ibmr.lkey >> RVT_LKEY_GEN_BITS) == (dead[i] >> RVT_LKEY_GEN_BITS))
				reused++;
		}
		assert_int_equal(rvt_dereg_mr(mr), 0);
	}
	/* every old slot came round again */
	assert_true(reused >= 4);
	for (int i = 0; i < 4; i++)
		expect_lkey_bad(pd, (uintptr_t)buf, 8, dead[i], 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
	print_message("%u registrations in %llu ms\n", max + 8,
		      (unsigned long long)(ut_now_ms() - t0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pd_busy),
		cmocka_unit_test(test_reg_access_rules),
		cmocka_unit_test(test_reg_unmapped),
		cmocka_unit_test(test_keys),
		cmocka_unit_test(test_key_table_seed),
		cmocka_unit_test(test_dereg_key_dead),
		cmocka_unit_test(test_lkey_ok_steps),
		cmocka_unit_test(test_rkey_ok),
		cmocka_unit_test(test_iova_translation),
		cmocka_unit_test(test_rereg),
		cmocka_unit_test(test_dereg_errors_a_qp_with_a_queued_wqe),
		cmocka_unit_test(test_dereg_errors_a_receive_in_progress),
		cmocka_unit_test(test_dereg_errors_a_write_in_progress),
		cmocka_unit_test(test_reset_drops_refs),
		cmocka_unit_test(test_key_slot_reuse),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
