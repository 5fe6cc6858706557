/* The biased lock's slow side: grants, revokes and membarrier (biaslock.h). */
#include "base/biaslock.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

URVT_TLS char urvt_self_mark;

/* Takes in a row before a thread is made owner; doubled every time another
 * posting thread took the lock in between (up to 2^10 times), so threads
 * that post in turns settle on the plain lock. A revoke by a control path
 * (modify, query, a barrier) only restarts the streak. */
#define BIAS_STREAK 64
#define BIAS_MAX_DOUBLINGS 10

static pthread_once_t mb_once = PTHREAD_ONCE_INIT;
static bool mb_ready;
static _Atomic bool granted; /* an owner was ever made: fences are needed */

static int membarrier(int cmd)
{
	return (int)syscall(__NR_membarrier, cmd, 0, 0);
}

static void mb_register(void)
{
	mb_ready = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

/* A full fence on every CPU that runs a thread of this process. The
 * registration was made before any owner was granted; should the private
 * command still fail, the global one fences every CPU (slower, the same
 * guarantee). */
static void fence_all_threads(void)
{
	if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
		return;
	if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
	    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
		return;
	if (membarrier(MEMBARRIER_CMD_GLOBAL) == 0)
		return;
	/* Nothing fences the owner's CPU: no way to exclude it is left. */
	abort();
}

/* At creation (a control path), so no post ever makes the syscall. */
void urvt_bias_init(struct urvt_biaslock *b)
{
	pthread_once(&mb_once, mb_register);
	urvt_spin_init(&b->lock);
	atomic_store_explicit(&b->owner, 0, memory_order_relaxed);
	atomic_store_explicit(&b->busy, 0, memory_order_relaxed);
	b->candidate = 0;
	b->streak = 0;
	b->revokes = 0;
}

bool urvt_bias_available(void)
{
	pthread_once(&mb_once, mb_register);
	return mb_ready;
}

void urvt_bias_fence(void)
{
	/* With no owner ever made there is no fast section to fence; the
	 * caller's stores go out before that look, and a grant after it
	 * (a seq_cst store, then the owner's loads) sees them. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&granted, memory_order_seq_cst))
		fence_all_threads();
}

void urvt_bias_revoke(struct urvt_biaslock *b)
{
	atomic_store_explicit(&b->owner, 0, memory_order_relaxed);
	fence_all_threads();
	while (atomic_load_explicit(&b->busy, memory_order_acquire))
		urvt_cpu_relax();
	b->streak = 0;
}

bool urvt_bias_try_revoke(struct urvt_biaslock *b)
{
	atomic_store_explicit(&b->owner, 0, memory_order_relaxed);
	fence_all_threads();
	b->streak = 0;
	return !atomic_load_explicit(&b->busy, memory_order_acquire);
}

void urvt_bias_note(struct urvt_biaslock *b)
{
	const uintptr_t me = urvt_self();

	if (b->candidate != me) {
		/* posting threads take turns: wait longer before a grant */
		if (b->candidate && b->revokes < BIAS_MAX_DOUBLINGS)
			b->revokes++;
		b->candidate = me;
		b->streak = 1;
		return;
	}
	if (++b->streak < (uint32_t)BIAS_STREAK << b->revokes)
		return;
	b->streak = 0;
	if (mb_ready) {
		atomic_store_explicit(&granted, true, memory_order_seq_cst);
		atomic_store_explicit(&b->owner, me, memory_order_relaxed);
	}
}
