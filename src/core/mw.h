/*
 * Memory windows, type 1 and type 2 (core/mw.c): an rkey that grants
 * remote access to a part of an MR, bound and invalidated by work requests
 * (IBV_WR_BIND_MW, LOCAL_INV, SEND_WITH_INV).
 */
#ifndef URVT_CORE_MW_H
#define URVT_CORE_MW_H

#include "core/rvt.h"

struct rvt_mregion *rvt_alloc_mw(struct rvt_pd *pd, enum ibv_mw_type type, int *err);
int rvt_dealloc_mw(struct rvt_mregion *mw);
/* Unbind a window that is going away (dealloc). */
void rvt_mw_retire(struct rvt_mregion *mw);

/* rvt_rkey_ok for a key that names a window (mw referenced by the
 * caller's lookup; dropped here): on success sge holds a reference on
 * the MR under the window. */
bool rvt_mw_rkey_ok(struct rvt_qp *qp, struct rvt_sge *sge, uint32_t len, uint64_t va,
		    uint32_t rkey, int acc, struct rvt_mregion *mw);
/* LOCAL_INV / SEND_WITH_INV of a window's rkey (mw referenced, dropped). */
int rvt_mw_invalidate(struct rvt_qp *qp, struct rvt_mregion *mw, uint32_t rkey);
/* Execute an IBV_WR_BIND_MW WQE: 0 or -EINVAL (IBV_WC_MW_BIND_ERR). */
int rvt_bind_mw(struct rvt_qp *qp, const struct rvt_swqe *wqe);
/* The local operation a WQE carries (LOCAL_INV or BIND_MW) reaching the
 * engine: its completion status. Engine context. */
enum ibv_wc_status rvt_do_local_op(struct rvt_qp *qp, struct rvt_swqe *wqe);

#endif
