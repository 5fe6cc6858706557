/* SPDX-License-Identifier: MIT */
/* 24-bit PSN and MSN arithmetic (roce-wire §6). */
#ifndef URVT_WIRE_PSN_H
#define URVT_WIRE_PSN_H

#include <stdint.h>

#define URVT_PSN_MASK 0xffffffu
#define URVT_PSN_HALF 0x800000u /* comparison half-window, 2^23 */
#define URVT_MSN_MASK 0xffffffu

/*
 * <0 if a is before b, 0 if equal, >0 if a is after b, modulo 2^24 with a
 * half-window of 2^23 (roce-wire §6: diff = (int32)((a - b) << 8)). Bits
 * above 24 are ignored. a exactly 2^23 away from b compares as "before".
 */
static inline int32_t urvt_psn_cmp(uint32_t a, uint32_t b)
{
	return (int32_t)((a - b) << 8);
}

static inline uint32_t urvt_psn_add(uint32_t psn, uint32_t n)
{
	return (psn + n) & URVT_PSN_MASK;
}

static inline uint32_t urvt_psn_sub(uint32_t psn, uint32_t n)
{
	return (psn - n) & URVT_PSN_MASK;
}

static inline uint32_t urvt_psn_next(uint32_t psn)
{
	return urvt_psn_add(psn, 1);
}

/* Signed distance a - b in [-2^23, 2^23 - 1]; consistent with urvt_psn_cmp. */
static inline int32_t urvt_psn_diff(uint32_t a, uint32_t b)
{
	uint32_t d = (a - b) & URVT_PSN_MASK;

	return d & URVT_PSN_HALF ? (int32_t)d - (int32_t)(URVT_PSN_MASK + 1) : (int32_t)d;
}

/* MSN uses the same 24-bit rule (rvt_cmp_msn). */
static inline int32_t urvt_msn_cmp(uint32_t a, uint32_t b)
{
	return urvt_psn_cmp(a, b);
}

static inline uint32_t urvt_msn_add(uint32_t msn, uint32_t n)
{
	return (msn + n) & URVT_MSN_MASK;
}

#endif /* URVT_WIRE_PSN_H */
