/* QPN allocation (rdmavt alloc_qpn/free_qpn) and QPN -> QP lookup. */
#ifndef URVT_CORE_QP_TABLE_H
#define URVT_CORE_QP_TABLE_H

#include "core/rvt.h"

int rvt_qpn_table_init(struct rvt_qpn_table *t);
void rvt_qpn_table_fini(struct rvt_qpn_table *t);
/* Next free QPN after the last one handed out (never 0 or 1); -ENOMEM when full. */
int rvt_alloc_qpn(struct rvt_qpn_table *t, uint32_t *qpn);
void rvt_free_qpn(struct rvt_qpn_table *t, uint32_t qpn);
/* From now on hand out range << 16 | n only (the host registry's slot). */
void rvt_qpn_table_set_range(struct rvt_qpn_table *t, uint8_t range);

int rvt_qp_table_init(struct rvt_qp_table *t);
void rvt_qp_table_fini(struct rvt_qp_table *t);
/* Publish / withdraw a QP for lookups by QPN. */
int rvt_qp_table_insert(struct rvt_qp_table *t, struct rvt_qp *qp);
void rvt_qp_table_remove(struct rvt_qp_table *t, struct rvt_qp *qp);
bool rvt_qp_table_contains(struct rvt_qp_table *t, struct rvt_qp *qp);
/* The list of every QP of the device (create .. destroy). */
void rvt_qp_all_add(struct rvt_qp_table *t, struct rvt_qp *qp);
void rvt_qp_all_del(struct rvt_qp_table *t, struct rvt_qp *qp);
/* rvt_qp_mr_clean on every QP of the device (mr.c: dereg). */
void rvt_dereg_clean_qps(struct rvt_qp_table *t, const struct rvt_mregion *mr);
/* Wait until every post_direct running now has finished (mr.c: dereg/rereg). */
void rvt_direct_barrier(struct rvt_qp_table *t);
/* One per thread: its address marks the owner of an ibv_wr_* batch (post.c). */
extern _Thread_local char rvt_batch_marker;

/* This thread's own ibv_wr_* batch holds qp's s_hlock: taking it would
 * deadlock. Only this thread stores its marker, so the relaxed load is exact. */
static inline bool rvt_batch_is_mine(struct rvt_qp *qp)
{
	return atomic_load_explicit(&qp->s_batch_owner, memory_order_relaxed) ==
	       (uintptr_t)&rvt_batch_marker;
}
/* After urvt_bias_fence(): the post_direct running on qp now, if any, has
 * finished (one its owner entered the fast way included). Skipped for this
 * thread's own ibv_wr_* batch, which holds s_hlock: waiting would deadlock,
 * and no post_direct can run on qp while this thread holds it. */
static inline void rvt_direct_wait(struct rvt_qp *qp)
{
	if (!rvt_batch_is_mine(qp))
		urvt_bias_wait(&qp->s_hlock);
}
/* Type-stable QP structures: recycled through the table's free list. */
struct rvt_qp *rvt_qp_struct_alloc(struct rvt_qp_table *t);
void rvt_qp_struct_free(struct rvt_qp_table *t, struct rvt_qp *qp);

/* Another reference to a QP the caller holds one to. */
static inline void rvt_get_qp(struct rvt_qp *qp)
{
	atomic_fetch_add_explicit(&qp->refcount, 1, memory_order_relaxed);
}

/*
 * QPN -> referenced QP, or NULL (the receive and loopback fast paths;
 * inline). Increment-unless-zero: a dying or recycled QP has refcount 0;
 * the structure may have been reused for another QP meanwhile, so the QPN
 * and the slot are checked again after the reference is taken.
 */
static inline void rvt_put_qp(struct rvt_qp *qp)
{
	atomic_fetch_sub_explicit(&qp->refcount, 1, memory_order_release);
}

static inline struct rvt_qp *rvt_lookup_qpn(struct rvt_dev_info *rdi, uint32_t qpn)
{
	struct rvt_qp_table *t = &rdi->qp_table;
	_Atomic(struct rvt_qp *) *page, *slot;
	struct rvt_qp *qp;
	uint32_t r;

	page = __atomic_load_n(&t->page[(qpn & URVT_QPN_MASK) >> RVT_QPT_PAGE_SHIFT],
			       __ATOMIC_ACQUIRE);
	if (unlikely(!page))
		return NULL;
	slot = &page[qpn & ((1u << RVT_QPT_PAGE_SHIFT) - 1)];
	qp = atomic_load_explicit(slot, memory_order_acquire);
	if (!qp)
		return NULL;
	r = atomic_load_explicit(&qp->refcount, memory_order_relaxed);
	do {
		if (!r)
			return NULL;
	} while (!atomic_compare_exchange_weak_explicit(&qp->refcount, &r, r + 1,
						       memory_order_acquire,
						       memory_order_relaxed));
	if (unlikely(READ_ONCE(qp->qpn) != qpn ||
		     atomic_load_explicit(slot, memory_order_acquire) != qp)) {
		rvt_put_qp(qp);
		return NULL;
	}
	return qp;
}

#endif
