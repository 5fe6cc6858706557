/* Small portable helpers shared by the core: branch hints, cache-line layout,
 * container_of, and the spinlock used on the posting paths. */
#ifndef URVT_CORE_COMPILER_H
#define URVT_CORE_COMPILER_H

#include <pthread.h>
#include <stdbool.h>
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
 * section (copying one WR). Test-and-test-and-set on a plain int with the
 * __atomic builtins, inline: a locked exchange to take it, a release store
 * to drop it (pthread_spin_lock/unlock cost a PLT call each, and four of
 * them are on every in-process WR). TSan models the acquire/release pair.
 * The one spinlock of every layer (also the transport's packet pool and
 * completer queue); zero-filled memory is an unlocked lock.
 */
typedef struct {
	int locked;
} urvt_spinlock_t;

static inline void urvt_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

static inline void urvt_spin_init(urvt_spinlock_t *l)
{
	__atomic_store_n(&l->locked, 0, __ATOMIC_RELAXED);
}
static inline void urvt_spin_destroy(urvt_spinlock_t *l)
{
	(void)l;
}
static inline void urvt_spin_lock(urvt_spinlock_t *l)
{
	while (__builtin_expect(__atomic_exchange_n(&l->locked, 1, __ATOMIC_ACQUIRE), 0)) {
		while (__atomic_load_n(&l->locked, __ATOMIC_RELAXED))
			urvt_cpu_relax();
	}
}
/* true = taken; no wait (a look first: a held lock's line stays shared) */
static inline bool urvt_spin_trylock(urvt_spinlock_t *l)
{
	return !__atomic_load_n(&l->locked, __ATOMIC_RELAXED) &&
	       !__atomic_exchange_n(&l->locked, 1, __ATOMIC_ACQUIRE);
}
static inline void urvt_spin_unlock(urvt_spinlock_t *l)
{
	__atomic_store_n(&l->locked, 0, __ATOMIC_RELEASE);
}

/* Thread-locals of the hot paths: the initial-exec model is a few
 * instructions, not a __tls_get_addr call (the library is loaded with the
 * program, or dlopened early enough for glibc's static TLS surplus). */
#define URVT_TLS __thread __attribute__((tls_model("initial-exec")))

/* C11-style atomics on plain fields via the GCC builtins (also clang). */
#define READ_ONCE(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define WRITE_ONCE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define load_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

#endif
