/* SPDX-License-Identifier: MIT */
/* Helpers shared by the wire tests. */
#ifndef URVT_TEST_WIRE_TESTLIB_H
#define URVT_TEST_WIRE_TESTLIB_H

#include <stddef.h>
#include <stdint.h>

#include "wire/hdr.h"
#include "wire/ip.h"

/* xorshift64*: deterministic test randomness */
static inline uint64_t tl_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* Fields with every header filled with distinct, recognisable values. */
void tl_fields(struct urvt_pkt *f, uint8_t opcode, uint32_t paylen, uint64_t seed);

/*
 * Build BTH .. ICRC into buf for f (payload byte i = (i * 7 + seed) & 0xff).
 * Returns the UDP payload length, 0 on failure.
 */
size_t tl_build(uint8_t *buf, size_t cap, const struct urvt_pkt *f, const struct urvt_ipinfo *ip);

/* 127.0.0.1 -> 127.0.0.2 style v4 / 2001:db8::1 -> ::2 v6 addressing. */
void tl_ipinfo(struct urvt_ipinfo *ip, int v6);

#endif
