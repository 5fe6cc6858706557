// SPDX-License-Identifier: MIT
/* PSN/MSN arithmetic (roce-wire §6) and AETH syndrome/tables (roce-wire §8,
 * qp-semantics §9.1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testlib.h"
#include "wire/aeth.h"
#include "wire/psn.h"

static int sign(int64_t v)
{
	return (v > 0) - (v < 0);
}

static void test_psn_cmp(void **state)
{
	(void)state;
	assert_int_equal(urvt_psn_cmp(5, 5), 0);
	assert_true(urvt_psn_cmp(6, 5) > 0);
	assert_true(urvt_psn_cmp(5, 6) < 0);
	/* wrap at 2^24 */
	assert_true(urvt_psn_cmp(0, 0xffffff) > 0);
	assert_true(urvt_psn_cmp(0xffffff, 0) < 0);
	assert_true(urvt_psn_cmp(3, 0xfffffe) > 0);
	/* half window: 2^23 - 1 ahead is after, 2^23 ahead is before */
	assert_true(urvt_psn_cmp(0x7fffff, 0) > 0);
	assert_true(urvt_psn_cmp(0x800000, 0) < 0);
	assert_true(urvt_psn_cmp(0x800005, 5) < 0);
	assert_true(urvt_psn_cmp(0x10, 0x800011) > 0);
	/* bits above 24 are ignored */
	assert_int_equal(urvt_psn_cmp(0x1000005, 5), 0);
	assert_true(urvt_psn_cmp(0xff000006, 5) > 0);
	assert_int_equal(urvt_msn_cmp(0, 0xffffff) > 0, 1);
}

static void test_psn_arith(void **state)
{
	(void)state;
	assert_int_equal(urvt_psn_add(0xffffff, 1), 0);
	assert_int_equal(urvt_psn_add(0xfffff0, 0x20), 0x10);
	assert_int_equal(urvt_psn_next(0xffffff), 0);
	assert_int_equal(urvt_psn_sub(0, 1), 0xffffff);
	assert_int_equal(urvt_msn_add(0xffffff, 2), 1);
	assert_int_equal(urvt_psn_diff(0, 0xffffff), 1);
	assert_int_equal(urvt_psn_diff(0xffffff, 0), -1);
	assert_int_equal(urvt_psn_diff(0x7fffff, 0), 0x7fffff);
	assert_int_equal(urvt_psn_diff(0x800000, 0), -0x800000);
	assert_int_equal(urvt_psn_diff(10, 10), 0);

	uint64_t s = 99;
	for (int i = 0; i < 100000; i++) {
		uint32_t a = (uint32_t)tl_rand(&s) & URVT_PSN_MASK;
		uint32_t b = (uint32_t)tl_rand(&s) & URVT_PSN_MASK;
		int32_t d = urvt_psn_diff(a, b);
		assert_int_equal(sign(d), sign(urvt_psn_cmp(a, b)));
		assert_int_equal(urvt_psn_add(b, (uint32_t)d), a);
		if (urvt_psn_diff(a, b) != -0x800000)
			assert_int_equal(sign(urvt_psn_cmp(a, b)), -sign(urvt_psn_cmp(b, a)));
	}
}

static void test_aeth_syndrome(void **state)
{
	(void)state;
	/* bytes from the vectors (test-vectors §4, V8-V10) */
	assert_int_equal(urvt_aeth_syn_ack(URVT_AETH_CREDIT_INVALID), 0x1f);
	assert_int_equal(urvt_aeth_syn_rnr(0x0e), 0x2e);
	assert_int_equal(urvt_aeth_syn_nak(URVT_NAK_PSN_SEQ_ERR), 0x60);
	assert_int_equal(urvt_aeth_syn_nak(URVT_NAK_REMOTE_OP), 0x63);
	assert_int_equal(urvt_aeth_syn_type(0x1f), URVT_AETH_ACK);
	assert_int_equal(urvt_aeth_syn_type(0x2c), URVT_AETH_RNR_NAK);
	assert_int_equal(urvt_aeth_syn_value(0x2c), 0x0c);
	assert_int_equal(urvt_aeth_syn_type(0x41), URVT_AETH_RESERVED);
	assert_int_equal(urvt_aeth_syn_type(0x61), URVT_AETH_NAK);
	assert_int_equal(urvt_aeth_syn_value(0x61), URVT_NAK_INVALID_REQUEST);
	assert_int_equal(urvt_aeth_word(0x1f, 0x1000005), 0x1f000005);
	for (int c = 0; c < 32; c++) {
		assert_int_equal(urvt_aeth_syn_value(urvt_aeth_syn_rnr((uint8_t)c)), c);
		assert_int_equal(urvt_aeth_syn_type(urvt_aeth_syn_ack((uint8_t)c)), URVT_AETH_ACK);
	}
}

static void test_tables(void **state)
{
	(void)state;
	assert_int_equal(urvt_credit_table[0], 0);
	assert_int_equal(urvt_credit_table[5], 6);
	assert_int_equal(urvt_credit_table[0x0f], 192);
	assert_int_equal(urvt_credit_table[0x1e], 32768);
	assert_true(urvt_credit_table[0x1f] == URVT_CREDITS_UNLIMITED);
	for (int i = 1; i < 31; i++)
		assert_true(urvt_credit_table[i] > urvt_credit_table[i - 1]);
	for (uint32_t n = 0; n < 70000; n++) {
		uint8_t c = urvt_credit_code(n);
		assert_true(c < 0x1f);
		assert_true(urvt_credit_table[c] <= n);
		if (c < 0x1e)
			assert_true(urvt_credit_table[c + 1] > n);
	}
	assert_int_equal(urvt_rnr_timer_us[0x00], 655360);
	assert_int_equal(urvt_rnr_timer_us[0x01], 10);
	assert_int_equal(urvt_rnr_timer_us[0x0e], 1280);
	assert_int_equal(urvt_rnr_timer_us[0x19], 61440); /* not rxe's 61.41 ms */
	assert_int_equal(urvt_rnr_timer_us[0x1f], 491520);
	for (int i = 2; i < 32; i++)
		assert_true(urvt_rnr_timer_us[i] > urvt_rnr_timer_us[i - 1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_psn_cmp),
		cmocka_unit_test(test_psn_arith),
		cmocka_unit_test(test_aeth_syndrome),
		cmocka_unit_test(test_tables),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
