/*
 * A spinlock with a fast owner (a biased lock), for the locks one thread
 * nearly always takes: a QP's send queue (a verbs program posts to a QP
 * from one thread, yet ibv_post_send must be safe from many), and on the
 * receive side a CQ's two ends, a QP's r_lock and a receive queue's two
 * ends (the thread that receives and polls). The locked exchange that takes
 * a spinlock is a full fence on x86: 4 of the 12 ns an in-process RDMA
 * WRITE costs on this project's machines, and ~0.02 us of a 0.5 us UD
 * one-way between two processes (docs/performance-history.md "No locked
 * RMW per WR (2026-12-04)" and "MPI on one host").
 *
 * A thread that takes the lock many times in a row, with nobody else
 * taking it, becomes its owner (urvt_bias_note). From then on it enters
 * with plain stores and loads (urvt_bias_enter/exit). Anybody else takes
 * the spinlock and, when an owner is set, revokes it: clears the owner,
 * has membarrier(2) run a full fence on every CPU running a thread of this
 * process, then waits until the owner is out of its section (busy 0).
 *
 * Why that excludes the owner (docs/performance-history.md "No locked RMW per WR"): the owner
 * stores busy, then loads owner; the revoker stores owner, then fences
 * every CPU, then loads busy. If the owner's load comes after the fence on
 * its CPU, it sees owner cleared and backs off; if it came before, so did
 * its store of busy, which the fence made visible, and the revoker waits.
 *
 * The owner may also take the spinlock itself (its slow path): it is not
 * inside a fast section then, so it revokes nothing. Where membarrier is
 * refused (an old kernel, a seccomp filter) nobody ever becomes owner and
 * this is the plain spinlock.
 */
#ifndef URVT_BASE_BIASLOCK_H
#define URVT_BASE_BIASLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/compiler.h"

struct urvt_biaslock {
	urvt_spinlock_t lock;
	_Atomic uintptr_t owner; /* the fast owner's urvt_self(), or 0 */
	_Atomic int busy;        /* the owner is inside a fast section */
	/* under lock: who may become owner, and how soon */
	uintptr_t candidate;     /* the last thread that noted a take */
	uint32_t streak;         /* its takes in a row */
	uint32_t revokes;        /* changes of candidate: each doubles the streak */
};

/* This thread's mark: the address of a thread-local (initial-exec, so a
 * register read and an add). A thread that ends may pass its mark on to a
 * new one; being out of every section, it leaves nothing to exclude. */
extern URVT_TLS char urvt_self_mark;
static inline uintptr_t urvt_self(void)
{
	return (uintptr_t)&urvt_self_mark;
}

void urvt_bias_init(struct urvt_biaslock *b);
/* membarrier(2) answered: owners can be granted (after urvt_bias_init). */
bool urvt_bias_available(void);
/* Out of line: the revoke (lock held, owner set and not this thread). */
void urvt_bias_revoke(struct urvt_biaslock *b);
/* Out of line: a try's revoke (lock held, owner set and not this thread);
 * false when the owner is inside its section, which a try does not wait
 * for (the owner is out of the bias either way). */
bool urvt_bias_try_revoke(struct urvt_biaslock *b);
/* Lock held, by a thread that would like to own it (a poster). */
void urvt_bias_note(struct urvt_biaslock *b);

/* The owner's entry: true = inside, no lock taken (leave with _exit). */
static inline bool urvt_bias_enter(struct urvt_biaslock *b)
{
	const uintptr_t me = urvt_self();

	if (atomic_load_explicit(&b->owner, memory_order_relaxed) != me)
		return false;
	atomic_store_explicit(&b->busy, 1, memory_order_relaxed);
	/* compiler order only: the revoker's membarrier is the CPU fence */
	atomic_signal_fence(memory_order_seq_cst);
	if (likely(atomic_load_explicit(&b->owner, memory_order_relaxed) == me))
		return true;
	atomic_store_explicit(&b->busy, 0, memory_order_release); /* revoked meanwhile */
	return false;
}

static inline void urvt_bias_exit(struct urvt_biaslock *b)
{
	/* pairs with the revoker's acquire: it sees the whole section */
	atomic_store_explicit(&b->busy, 0, memory_order_release);
}

static inline void urvt_bias_lock(struct urvt_biaslock *b)
{
	uintptr_t o;

	urvt_spin_lock(&b->lock);
	o = atomic_load_explicit(&b->owner, memory_order_relaxed);
	if (unlikely(o) && o != urvt_self())
		urvt_bias_revoke(b);
}

static inline void urvt_bias_unlock(struct urvt_biaslock *b)
{
	urvt_spin_unlock(&b->lock);
}

/*
 * A barrier, not an exclusion: once urvt_bias_fence() has returned, and then
 * urvt_bias_wait(b), every section of b that began before the fence has
 * ended, the owner's fast ones included, and the owner keeps its place.
 * What the caller stored before the fence is seen by every section after
 * it (the same two-sided argument as the revoke). One fence serves many
 * locks (a dereg waits for every QP of the device).
 */
void urvt_bias_fence(void);
static inline void urvt_bias_wait(struct urvt_biaslock *b)
{
	urvt_spin_lock(&b->lock);
	while (atomic_load_explicit(&b->busy, memory_order_acquire))
		urvt_cpu_relax();
	urvt_spin_unlock(&b->lock);
}

/* Either way in: the fast entry, else the lock. Returns which, for _leave. */
static inline bool urvt_bias_take(struct urvt_biaslock *b)
{
	if (urvt_bias_enter(b))
		return true;
	urvt_bias_lock(b);
	return false;
}

static inline void urvt_bias_leave(struct urvt_biaslock *b, bool fast)
{
	if (fast)
		urvt_bias_exit(b);
	else
		urvt_bias_unlock(b);
}

/*
 * Either way in without waiting, for a lock that is also tried (the
 * transport's receive side, which a thread skips when another receives):
 * 1 = in the fast way, 0 = in by the lock (leave with urvt_bias_leave
 * either way), -1 = somebody is inside. An owner elsewhere loses the bias;
 * while it is still inside its section (now or since a failed try's
 * revoke: busy set, owner clear) the try fails. The caller keeps its own
 * thread from trying again inside (the fast way would let it in).
 */
static inline int urvt_bias_try(struct urvt_biaslock *b)
{
	uintptr_t o;

	if (urvt_bias_enter(b))
		return 1;
	if (!urvt_spin_trylock(&b->lock))
		return -1;
	o = atomic_load_explicit(&b->owner, memory_order_relaxed);
	if (unlikely(o) && o != urvt_self()) {
		if (urvt_bias_try_revoke(b))
			return 0;
	} else if (likely(!atomic_load_explicit(&b->busy, memory_order_acquire))) {
		return 0;
	}
	urvt_spin_unlock(&b->lock);
	return -1;
}

/* A data path's way in (a post, a completion, a receive): the fast way for
 * its owner, else the lock, which counts towards owning it (urvt_bias_note).
 * Control paths take urvt_bias_lock, which only revokes. */
static inline bool urvt_bias_take_noted(struct urvt_biaslock *b)
{
	bool fast = urvt_bias_take(b);

	if (!fast)
		urvt_bias_note(b);
	return fast;
}

#endif
