// SPDX-License-Identifier: MIT
#include "wire/aeth.h"

/* roce-wire §8 */
const uint32_t urvt_credit_table[32] = {
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
	URVT_CREDITS_UNLIMITED,
};

/* qp-semantics §9.1 in µs; 0x19 is 61.44 ms (rxe's 61.41 is a typo). */
const uint32_t urvt_rnr_timer_us[32] = {
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
};

uint8_t urvt_credit_code(uint32_t n_rwqe)
{
	uint8_t lo = 0, hi = 0x1e; /* table[lo] <= n always (table[0] == 0) */

	while (lo < hi) {
		uint8_t mid = (uint8_t)((lo + hi + 1) / 2);
		if (urvt_credit_table[mid] <= n_rwqe)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}
