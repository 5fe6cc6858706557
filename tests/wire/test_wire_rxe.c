// SPDX-License-Identifier: MIT
/* Real Linux rxe traffic (shared/vectors/rxe): parse, opcodes, ICRC, unknown-ID recovery. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "rxe_check.h"

static void test_rxe_captures(void **state)
{
	(void)state;
	const char *dir = getenv("URVT_RXE_DIR");
	int n = 0;

	if (!dir)
		dir = URVT_RXE_DIR;
	assert_int_equal(rxe_check_all(dir, &n), 0);
	assert_int_equal(n, RXE_TOTAL_PACKETS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rxe_captures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
