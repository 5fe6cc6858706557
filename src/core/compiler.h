/* Small portable helpers shared by the core: branch hints, cache-line layout,
 * container_of, and the spinlock used on the posting paths. */
#ifndef URVT_CORE_COMPILER_H
#define URVT_CORE_COMPILER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define URVT_CACHELINE 64
#define __cacheline_aligned __attribute__((aligned(URVT_CACHELINE)))

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline uint32_t urvt_roundup_pow2(uint32_t v)
{
	if (v <= 1)
		return 1;
	return 1u << (32 - __builtin_clz(v - 1));
}

/*
 * The posting verbs must never sleep ("may be called from interrupt
 * context"), so the locks they take are spinlocks held for a bounded, short
 * section (copying one WR). pthread spinlocks are understood by TSan and
 * helgrind.
 */
typedef pthread_spinlock_t urvt_spinlock_t;
static inline void urvt_spin_init(urvt_spinlock_t *l)
{
	pthread_spin_init(l, PTHREAD_PROCESS_PRIVATE);
}
static inline void urvt_spin_destroy(urvt_spinlock_t *l)
{
	pthread_spin_destroy(l);
}
static inline void urvt_spin_lock(urvt_spinlock_t *l)
{
	pthread_spin_lock(l);
}
static inline void urvt_spin_unlock(urvt_spinlock_t *l)
{
	pthread_spin_unlock(l);
}

/* C11-style atomics on plain fields via the GCC builtins (also clang). */
#define READ_ONCE(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define WRITE_ONCE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define load_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

#endif
