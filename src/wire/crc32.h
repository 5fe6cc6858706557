/* SPDX-License-Identifier: MIT */
/*
 * CRC-32 of IEEE 802.3 (reflected polynomial 0xEDB88320, register
 * initialised to all ones, result inverted): the CRC the ICRC is made of
 * (roce-wire §9, docs/wire.md "CRC-32 implementation"). Same calling
 * convention as zlib's crc32(): start with 0, feed the result of one call
 * to the next.
 *
 * Four implementations, chosen once per process from what the CPU has:
 * carry-less multiplication on 512-bit vectors (VPCLMULQDQ + AVX-512F),
 * on 256-bit vectors (VPCLMULQDQ + AVX2), on 128-bit vectors (PCLMULQDQ +
 * SSE4.1), or slicing-by-8 tables everywhere else. All four give the same
 * result for every input.
 */
#ifndef URVT_WIRE_CRC32_H
#define URVT_WIRE_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32's polynomial P without its x^32 term, reflected (bit 31 = x^0) */
#define URVT_CRC32_POLY_REFL 0xedb88320u

uint32_t urvt_crc32(uint32_t crc, const void *buf, size_t len);

/* Copy len bytes from src to dst (not overlapping) and return the CRC of
 * them continued from crc: one pass over the bytes instead of two. */
uint32_t urvt_crc32_copy(uint32_t crc, void *dst, const void *src, size_t len);

/* The implementation in use: "vpclmul512", "vpclmul", "pclmul" or "table". */
const char *urvt_crc32_impl(void);

/* Use implementation name from now on (tests, benchmarks): 0, or -1 if
 * this CPU or build does not have it. */
int urvt_crc32_use(const char *name);

/* a * b mod P in the reflected representation (bit 31 = x^0): the GF(2)
 * product behind CRC shifts (wire/icrc.c), carry-less where the CPU has it. */
uint32_t urvt_gf2_mulmod(uint32_t a, uint32_t b);

#endif
