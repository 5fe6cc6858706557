/*
 * Resource exhaustion (docs/security.md): 100 000 QPs in one process (time and
 * memory per idle QP reported, everything freed), MRs up to the device's
 * max_mr then ENOMEM, and the device usable again afterwards. Nothing may
 * crash or leak: the ASan build runs this with LeakSanitizer, and the
 * plain build runs a small count under valgrind memcheck
 * (URVT_RES_SMALL=1: 2000 QPs, 2000 MRs, no exhaustion run).
 *
 * URVT_RES_QPS=N overrides the QP count.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/rvt_api.h"
#include "ut.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static struct ut_dev dev;
static struct rvt_pd *pd;
static bool small;

static int setup(void **state)
{
	const char *s = getenv("URVT_RES_SMALL");

	small = s && strcmp(s, "0");
	ut_open(&dev);
	pd = ut_pd(&dev);
	return 0;
}

static int teardown(void **state)
{
	rvt_dealloc_pd(pd);
	ut_close(&dev);
	return 0;
}

static long rss_kib(void)
{
	long pages = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &res) != 2)
			res = 0;
		fclose(f);
	}
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static double now_s(void)
{
	return (double)ut_now_ms() / 1000.0;
}

static void test_many_qps(void **state)
{
	const char *env = getenv("URVT_RES_QPS");
	int n = env ? atoi(env) : small ? 2000 : SANITIZED ? 20000 : 100000;
	struct ut_qp_caps caps = { .send_wr = 1, .recv_wr = 1, .send_sge = 1, .recv_sge = 1 };
	struct rvt_cq *cq = ut_cq(&dev, 16);
	struct rvt_qp **qps = calloc((size_t)n, sizeof(*qps));
	long rss0, rss1;
	double t0, t1, t2;

	assert_non_null(qps);
	assert_true(n > 0 && n <= dev.rdi->dattr.max_qp);
	rss0 = rss_kib();
	t0 = now_s();
	for (int i = 0; i < n; i++) {
		qps[i] = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, &caps, false);
		ut_to_init(qps[i], IBV_ACCESS_REMOTE_WRITE, 0);
	}
	t1 = now_s();
	rss1 = rss_kib();
	assert_int_equal(atomic_load(&dev.rdi->n_qps), n);
	/* every one is found by its QPN, and QPNs are distinct */
	for (int i = 0; i < n; i += 97) {
		struct rvt_qp *q = rvt_lookup_qpn(dev.rdi, qps[i]->qpn);
		assert_ptr_equal(q, qps[i]);
		rvt_put_qp(q);
		if (i)
			assert_true(qps[i]->qpn != qps[i - 1]->qpn);
	}
	for (int i = 0; i < n; i++)
		assert_int_equal(rvt_destroy_qp(qps[i]), 0);
	t2 = now_s();
	assert_int_equal(atomic_load(&dev.rdi->n_qps), 0);
	printf("%d QPs (RC, INIT, 1 WR/1 SGE each): create+INIT %.2f s (%.1f us/QP), "
	       "RSS +%ld MiB = %ld bytes per idle QP, destroy %.2f s%s\n",
	       n, t1 - t0, (t1 - t0) * 1e6 / n, (rss1 - rss0) / 1024,
	       (rss1 - rss0) * 1024 / n, t2 - t1, SANITIZED ? " (sanitizer build)" : "");
	/* the device still works: a QP can be created and destroyed */
	qps[0] = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, &caps, false);
	assert_int_equal(rvt_destroy_qp(qps[0]), 0);
	free(qps);
	assert_int_equal(rvt_destroy_cq(cq), 0);
}

/* Register 4 KiB MRs (all over one page) until the device refuses. */
static void test_max_mr(void **state)
{
	uint32_t max = (uint32_t)dev.rdi->dattr.max_mr, cap = small ? 2000 : max + 1, n = 0;
	struct rvt_mregion **mrs = calloc((size_t)cap, sizeof(*mrs));
	uint8_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double t0 = now_s();
	int err = 0;

	assert_non_null(mrs);
	assert_true(page != MAP_FAILED);
	while (n < cap) {
		mrs[n] = rvt_reg_mr(pd, page, 4096, (uint64_t)(uintptr_t)page,
				    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &err);
		if (!mrs[n])
			break;
		n++;
	}
	if (small) {
		assert_int_equal(n, cap);
	} else {
		/* exactly max_mr, then ENOMEM */
		assert_int_equal(err, -ENOMEM);
		assert_int_equal(n, max);
	}
	/* keys are unique among live MRs (sampled) and never 0 */
	for (uint32_t i = 1; i < n; i += 101) {
		assert_true(mrs[i]->lkey != 0);
		assert_true(mrs[i]->lkey != mrs[i - 1]->lkey);
	}
	printf("%u MRs registered in %.2f s, then %s\n", n, now_s() - t0,
	       small ? "(small run)" : "ENOMEM");
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(rvt_dereg_mr(mrs[i]), 0);
	assert_int_equal(atomic_load(&dev.rdi->n_mrs), 0);
	/* usable again; an old key is dead */
	mrs[0] = rvt_reg_mr(pd, page, 4096, (uint64_t)(uintptr_t)page, IBV_ACCESS_LOCAL_WRITE, &err);
	assert_non_null(mrs[0]);
	assert_int_equal(rvt_dereg_mr(mrs[0]), 0);
	free(mrs);
	munmap(page, 4096);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_many_qps),
		cmocka_unit_test(test_max_mr),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
