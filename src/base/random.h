/* Random values for urvt's own identifiers (urvt_random64). */
#ifndef URVT_BASE_RANDOM_H
#define URVT_BASE_RANDOM_H

#include <stdint.h>
#include <sys/random.h>
#include <sys/types.h>

#include "base/timer.h"

/*
 * 64 bits from the kernel's random source (getrandom), for values that must
 * not be guessable from one another (key generations, connection IDs, a
 * forwarding secret). Should the kernel give none, the clock mixed with
 * this stack's address: different per call and per process, not secret.
 */
static inline uint64_t urvt_random64(void)
{
	uint64_t v;

	if (getrandom(&v, sizeof(v), 0) == (ssize_t)sizeof(v))
		return v;
	return urvt_now_ns() ^ (uint64_t)(uintptr_t)&v << 20;
}

#endif
