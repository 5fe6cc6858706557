/*
 * base/cycles.h: the heuristics' clock advances with time at the rate its
 * calibration says, whether it is the TSC or the CLOCK_MONOTONIC fallback.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <unistd.h>

#include "base/cycles.h"

/* 20 ms of CLOCK_MONOTONIC, as counted by urvt_cycles, is within 10 % of
 * urvt_cycles_from_ns(20 ms); best of 5 (a loaded machine may stop this
 * thread between the two reads of a pair). */
static void test_cycles_rate(void **state)
{
	double best = 1e9;
	(void)state;

	urvt_cycles_init();
	urvt_cycles_init(); /* once only */
	assert_true(urvt_cycles_from_ns(1000000) > 0);
	for (int k = 0; k < 5; k++) {
		uint64_t t0 = urvt_now_ns(), c0 = urvt_cycles(), t1, c1;
		usleep(20000);
		c1 = urvt_cycles();
		t1 = urvt_now_ns();
		assert_true(c1 > c0);
		double err = (double)(c1 - c0) / (double)urvt_cycles_from_ns(t1 - t0) - 1.0;
		if (err < 0)
			err = -err;
		if (err < best)
			best = err;
	}
	assert_true(best < 0.10);
}

/* Later reads never go back, on this thread. */
static void test_cycles_monotonic(void **state)
{
	uint64_t last = urvt_cycles();
	(void)state;

	for (int i = 0; i < 100000; i++) {
		uint64_t c = urvt_cycles();
		assert_true(c >= last);
		last = c;
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cycles_rate),
		cmocka_unit_test(test_cycles_monotonic),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
