#include "core/qp_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/ruc.h"
#include "core/rvt_api.h"

#define QPN_SPACE (1u << 24)
#define BITS_PER_MAP (1u << 15)           /* 512 maps x 32768 bits = 2^24 */
#define WORDS_PER_MAP (BITS_PER_MAP / 64)

int rvt_qpn_table_init(struct rvt_qpn_table *t)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	t->map[0] = calloc(WORDS_PER_MAP, sizeof(uint64_t));
	if (!t->map[0])
		return -ENOMEM;
	t->nmaps = 1;
	/* QPN 0 (SMI) and 1 (GSI) are reserved; numbering starts after 1. */
	t->map[0][0] = 0x3;
	t->last = 1;
	t->range = -1;
	return 0;
}

void rvt_qpn_table_set_range(struct rvt_qpn_table *t, uint8_t range)
{
	pthread_mutex_lock(&t->lock);
	t->range = range;
	t->last = (uint32_t)range << 16 | 1;
	pthread_mutex_unlock(&t->lock);
}

void rvt_qpn_table_fini(struct rvt_qpn_table *t)
{
	for (uint32_t i = 0; i < ARRAY_SIZE(t->map); i++)
		free(t->map[i]);
	pthread_mutex_destroy(&t->lock);
}

static bool test_and_set(struct rvt_qpn_table *t, uint32_t qpn)
{
	uint32_t m = qpn / BITS_PER_MAP, bit = qpn % BITS_PER_MAP;
	uint64_t *w;

	if (!t->map[m]) {
		t->map[m] = calloc(WORDS_PER_MAP, sizeof(uint64_t));
		if (!t->map[m])
			return true; /* treat as used: allocation failure */
		t->nmaps++;
	}
	w = &t->map[m][bit / 64];
	if (*w & (1ull << (bit % 64)))
		return true;
	*w |= 1ull << (bit % 64);
	return false;
}

/*
 * Round-robin from the last QPN (qp-semantics §4.3): a destroyed QP's
 * number is free again at once but is only reused after the allocator has
 * wrapped around the 24-bit space.
 */
int rvt_alloc_qpn(struct rvt_qpn_table *t, uint32_t *qpn)
{
	uint32_t cand, lo, end;
	int ret = -ENOMEM;

	pthread_mutex_lock(&t->lock);
	/* the whole space (QPN 0 and 1 reserved), or the slot's 65536 */
	lo = t->range >= 0 ? (uint32_t)t->range << 16 : 2;
	end = t->range >= 0 ? lo + 0x10000 : QPN_SPACE;
	cand = t->last;
	for (uint32_t n = 0; n < end - lo; n++) {
		cand++;
		if (cand >= end || cand < lo)
			cand = lo;
		/* Skip whole full words quickly. */
		if (t->map[cand / BITS_PER_MAP] &&
		    t->map[cand / BITS_PER_MAP][(cand % BITS_PER_MAP) / 64] == ~0ull &&
		    cand % 64 == 0) {
			cand += 63;
			n += 63;
			continue;
		}
		if (!test_and_set(t, cand)) {
			t->last = cand;
			*qpn = cand;
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void rvt_free_qpn(struct rvt_qpn_table *t, uint32_t qpn)
{
	uint32_t m = qpn / BITS_PER_MAP, bit = qpn % BITS_PER_MAP;

	pthread_mutex_lock(&t->lock);
	if (t->map[m])
		t->map[m][bit / 64] &= ~(1ull << (bit % 64));
	pthread_mutex_unlock(&t->lock);
}

int rvt_qp_table_init(struct rvt_qp_table *t)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_init(&t->lb_lock, NULL);
	pthread_mutex_init(&t->all_lock, NULL);
	return 0;
}

void rvt_qp_table_fini(struct rvt_qp_table *t)
{
	struct rvt_qp *qp = t->free_list;

	for (uint32_t i = 0; i < RVT_QPT_PAGES; i++)
		free((void *)t->page[i]);
	while (qp) {
		struct rvt_qp *n = qp->next_free;
		free(qp);
		qp = n;
	}
	pthread_mutex_destroy(&t->lock);
	pthread_mutex_destroy(&t->lb_lock);
	pthread_mutex_destroy(&t->all_lock);
}

static _Atomic(struct rvt_qp *) *slot_of(struct rvt_qp_table *t, uint32_t qpn, bool create)
{
	uint32_t pg = (qpn & URVT_QPN_MASK) >> RVT_QPT_PAGE_SHIFT;
	_Atomic(struct rvt_qp *) *page = __atomic_load_n(&t->page[pg], __ATOMIC_ACQUIRE);

	if (!page && create) {
		pthread_mutex_lock(&t->lock);
		page = t->page[pg];
		if (!page) {
			page = calloc(1u << RVT_QPT_PAGE_SHIFT, sizeof(*page));
			if (page)
				__atomic_store_n(&t->page[pg], page, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&t->lock);
	}
	if (!page)
		return NULL;
	return &page[qpn & ((1u << RVT_QPT_PAGE_SHIFT) - 1)];
}

int rvt_qp_table_insert(struct rvt_qp_table *t, struct rvt_qp *qp)
{
	_Atomic(struct rvt_qp *) *slot = slot_of(t, qp->qpn, true);

	if (!slot)
		return -ENOMEM;
	/* Publish last: a lookup never sees a half-built QP. */
	atomic_store_explicit(slot, qp, memory_order_release);
	return 0;
}

void rvt_qp_table_remove(struct rvt_qp_table *t, struct rvt_qp *qp)
{
	_Atomic(struct rvt_qp *) *slot = slot_of(t, qp->qpn, false);

	if (slot && atomic_load_explicit(slot, memory_order_relaxed) == qp)
		atomic_store_explicit(slot, NULL, memory_order_release);
}

bool rvt_qp_table_contains(struct rvt_qp_table *t, struct rvt_qp *qp)
{
	_Atomic(struct rvt_qp *) *slot = slot_of(t, qp->qpn, false);

	return slot && atomic_load_explicit(slot, memory_order_acquire) == qp;
}

struct rvt_qp *rvt_qp_struct_alloc(struct rvt_qp_table *t)
{
	struct rvt_qp *qp;

	pthread_mutex_lock(&t->lock);
	qp = t->free_list;
	if (qp)
		t->free_list = qp->next_free;
	pthread_mutex_unlock(&t->lock);
	if (!qp && posix_memalign((void **)&qp, URVT_CACHELINE, sizeof(*qp)))
		return NULL;
	return qp;
}

void rvt_qp_struct_free(struct rvt_qp_table *t, struct rvt_qp *qp)
{
	pthread_mutex_lock(&t->lock);
	qp->next_free = t->free_list;
	t->free_list = qp;
	pthread_mutex_unlock(&t->lock);
}

/* Called by create once s_hlock is initialised, before the QP can post. */
void rvt_qp_all_add(struct rvt_qp_table *t, struct rvt_qp *qp)
{
	pthread_mutex_lock(&t->all_lock);
	qp->all_prev = NULL;
	qp->all_next = t->all_head;
	if (t->all_head)
		t->all_head->all_prev = qp;
	t->all_head = qp;
	pthread_mutex_unlock(&t->all_lock);
}

/* Called by destroy after its reset, before s_hlock and the structure go. */
void rvt_qp_all_del(struct rvt_qp_table *t, struct rvt_qp *qp)
{
	pthread_mutex_lock(&t->all_lock);
	if (qp->all_prev)
		qp->all_prev->all_next = qp->all_next;
	else
		t->all_head = qp->all_next;
	if (qp->all_next)
		qp->all_next->all_prev = qp->all_prev;
	qp->all_next = qp->all_prev = NULL;
	pthread_mutex_unlock(&t->all_lock);
}

/* all_lock keeps each QP alive while it is looked at (as for the barrier
 * below: the lock order is the same); rvt_qp_mr_clean takes s_hlock, then r_lock, never both. */
void rvt_dereg_clean_qps(struct rvt_qp_table *t, const struct rvt_mregion *mr)
{
	pthread_mutex_lock(&t->all_lock);
	for (struct rvt_qp *qp = t->all_head; qp; qp = qp->all_next)
		rvt_qp_mr_clean(qp, mr);
	pthread_mutex_unlock(&t->all_lock);
}

/*
 * The MR retirement barrier. post_direct (post.c) checks the lkey and the
 * peer's rkey without taking MR references: it finds the MR in the key
 * table, checks it and copies, all under the sender's s_hlock. A retiring
 * MR (mr.c: dereg, rereg) is first withdrawn from the table (release store
 * of NULL in its slot), then this takes and drops the s_hlock of every QP
 * of the device, one after another.
 *
 * Why that is enough. s_hlock is taken by an acquire exchange and dropped
 * by a release store, so the critical sections of one QP are totally
 * ordered, each one happening-before the next. For a post_direct P on QP q
 * and the barrier's visit B of q, either
 *  - P's section comes before B's: P's unlock synchronizes with B's lock,
 *    so P's copy (and every read of the MR's fields) happens-before the
 *    barrier returns, hence before the caller frees or changes the MR and
 *    before the application reuses or unmaps the region; or
 *  - B's section comes first: the NULL store is sequenced before B's lock,
 *    B's unlock synchronizes with P's lock, and P's (acquire) load of the
 *    slot comes after that, so by coherence it reads NULL or a later value
 *    (never the retired MR: the slot only gets it back by rereg's or a
 *    failed dereg's publish, which are release stores made after the
 *    barrier and the change, so P then sees the MR complete).
 * A post_direct by the QP's fast owner (base/biaslock.h) takes no lock:
 * there the fence before the visits and the visit's wait for the owner's
 * busy flag make the same two cases (P's busy store seen by B's wait, or
 * the NULL store seen by P's load of the slot).
 * A QP is on the list from before it can post (create) until after its
 * reset took s_hlock (destroy), and all_lock is held throughout, so a QP
 * cannot be destroyed and its structure recycled (s_hlock reinitialised)
 * while the barrier holds or waits for its lock. Lock order: all_lock, then
 * s_hlock; nothing takes all_lock under a spinlock. The cost is on dereg
 * and rereg (one lock per QP of the device), none on the data path.
 */
void rvt_direct_barrier(struct rvt_qp_table *t)
{
	pthread_mutex_lock(&t->all_lock);
	/* one fence for every QP's fast owner (base/biaslock.h), none revoked */
	urvt_bias_fence();
	for (struct rvt_qp *qp = t->all_head; qp; qp = qp->all_next)
		rvt_direct_wait(qp); /* a dereg between wr_start and wr_complete skips its own */
	pthread_mutex_unlock(&t->all_lock);
}
