/* A cheap clock for heuristics that compare short intervals (poll.c: did
 * the application wait elsewhere between two verbs?): the CPU's
 * time-stamp counter where it ticks at a constant rate, else
 * CLOCK_MONOTONIC in ns. Reading it costs 12 ns here against 30 for
 * clock_gettime (docs/performance.md). Never for deadlines or anything
 * another clock is compared with: those stay on urvt_now_ns. */
#ifndef URVT_BASE_CYCLES_H
#define URVT_BASE_CYCLES_H

#include <stdbool.h>
#include <stdint.h>

#include "base/timer.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define URVT_HAVE_TSC 1
#endif

extern bool urvt_cycles_tsc; /* set once by urvt_cycles_init */

static inline uint64_t urvt_cycles(void)
{
#ifdef URVT_HAVE_TSC
	if (__atomic_load_n(&urvt_cycles_tsc, __ATOMIC_RELAXED))
		return __rdtsc();
#endif
	return urvt_now_ns();
}

/* Decides the source once (a 200 us calibration against CLOCK_MONOTONIC
 * the first time); safe to call from any thread, any number of times. */
void urvt_cycles_init(void);
/* ns as an interval of urvt_cycles() (urvt_cycles_init first). */
uint64_t urvt_cycles_from_ns(uint64_t ns);

#endif
