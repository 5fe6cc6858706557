#include "base/cycles.h"

#include <pthread.h>

#ifdef URVT_HAVE_TSC
#include <cpuid.h>
#endif

bool urvt_cycles_tsc;
static uint64_t cycles_per_ms = 1000000; /* the ns fallback */
static pthread_once_t cycles_once = PTHREAD_ONCE_INIT;

#ifdef URVT_HAVE_TSC
/* CPUID 0x80000007 EDX bit 8: the TSC runs at a constant rate in every
 * power state (invariant TSC), so its ticks measure time. */
static bool tsc_invariant(void)
{
	unsigned a, b, c, d;

	if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
		return false;
	__get_cpuid(0x80000007u, &a, &b, &c, &d);
	return d & (1u << 8);
}
#endif

static void cycles_calibrate(void)
{
#ifdef URVT_HAVE_TSC
	uint64_t t0, t1, c0, c1, rate;

	if (!tsc_invariant())
		return;
	t0 = urvt_now_ns();
	c0 = __rdtsc();
	do
		t1 = urvt_now_ns();
	while (t1 - t0 < 200000);
	c1 = __rdtsc();
	if (c1 <= c0)
		return;
	rate = (c1 - c0) * 1000000ull / (t1 - t0);
	if (!rate)
		return; /* the ns fallback's rate stays */
	cycles_per_ms = rate;
	__atomic_store_n(&urvt_cycles_tsc, true, __ATOMIC_RELEASE);
#endif
}

void urvt_cycles_init(void)
{
	pthread_once(&cycles_once, cycles_calibrate);
}

uint64_t urvt_cycles_from_ns(uint64_t ns)
{
	return ns * cycles_per_ms / 1000000ull;
}
