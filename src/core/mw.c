/*
 * Memory windows (qp-semantics §14): type 1 windows are
 * bound by ibv_bind_mw and live on the PD; type 2 windows are bound by an
 * IBV_WR_BIND_MW work request, to the QP that posted it, and invalidated by
 * LOCAL_INV or an incoming SEND_WITH_INV of their rkey. A window sits in the
 * lkey/rkey table beside the MRs (mr.c rvt_alloc_mw: RVT_ACCESS_MW in its
 * access), so one lookup finds either; rvt_rkey_ok (keys.h) hands a
 * window's key to rvt_mw_rkey_ok, which checks it against the window and
 * translates it into the MR under it.
 *
 * mw_lock orders bind/invalidate against the checks of remote accesses:
 * a check sees a window bound with all its fields or not bound. A bound
 * window counts itself in its MR's num_mw, which keeps the MR from being
 * deregistered (EBUSY), so the MR a check finds under the lock is live.
 */
#include <errno.h>

#include "core/keys.h"
#include "core/mw.h"
#include "core/rvt_api.h"

#define MW_ACCESS_OK                                                                  \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |  \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED)
#define MW_REMOTE (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* Caller holds mw_lock. */
static void mw_unbind(struct rvt_mregion *mw)
{
	if (mw->mw_mr)
		atomic_fetch_sub(&mw->mw_mr->num_mw, 1);
	mw->mw_mr = NULL;
	mw->mw_bound = false;
	mw->length = 0;
	mw->access = RVT_ACCESS_MW;
}

void rvt_mw_retire(struct rvt_mregion *mw)
{
	urvt_spin_lock(&mw->mw_lock);
	mw_unbind(mw);
	urvt_spin_unlock(&mw->mw_lock);
}

bool rvt_mw_rkey_ok(struct rvt_qp *qp, struct rvt_sge *sge, uint32_t len, uint64_t va,
		    uint32_t rkey, int acc, struct rvt_mregion *mw)
{
	bool ok = false;

	urvt_spin_lock(&mw->mw_lock);
	/* qp-semantics §14.2 */
	if (mw->mw_bound && mw->lkey == rkey && mw->pd == qp->pd &&
	    (mw->ibmw.type != IBV_MW_TYPE_2 || mw->mw_qpn == qp->qpn) &&
	    range_ok(mw->iova, mw->length, va, len) && (mw->access & acc) == acc &&
	    mr_get_unless_zero(mw->mw_mr)) {
		sge->mr = mw->mw_mr;
		sge->vaddr = mw->vaddr + (va - mw->iova);
		sge->length = len;
		sge->sge_length = len;
		ok = true;
	}
	urvt_spin_unlock(&mw->mw_lock);
	rvt_put_mr(mw);
	return ok;
}

int rvt_mw_invalidate(struct rvt_qp *qp, struct rvt_mregion *mw, uint32_t rkey)
{
	int ret = -EINVAL;

	urvt_spin_lock(&mw->mw_lock);
	/* qp-semantics §14.3 */
	if (mw->ibmw.type == IBV_MW_TYPE_2 && mw->mw_bound && mw->lkey == rkey &&
	    mw->pd == qp->pd && mw->mw_qpn == qp->qpn) {
		mw_unbind(mw);
		ret = 0;
	}
	urvt_spin_unlock(&mw->mw_lock);
	rvt_put_mr(mw);
	return ret;
}

/* qp-semantics §14.1, in order. Caller holds mw_lock; mr is referenced,
 * or NULL for a type 1 unbind. */
static int check_bind(const struct rvt_qp *qp, const struct rvt_swqe *wqe,
		      const struct rvt_mregion *mw, const struct rvt_mregion *mr)
{
	int access = (int)wqe->ex.bind_access;

	if (access & ~MW_ACCESS_OK) /* 1 */
		return -EINVAL;
	if (mw->ibmw.type == IBV_MW_TYPE_1) {
		if (access & IBV_ACCESS_ZERO_BASED) /* 2 */
			return -EINVAL;
	} else {
		if (mw->mw_bound) /* 3 */
			return -EINVAL;
		if (qp->pd != mw->pd)
			return -EINVAL;
		if (!mr || !wqe->wr.bind.length)
			return -EINVAL;
	}
	if (!mr)
		return 0;
	if (mr->pd != mw->pd || (mr->access & IBV_ACCESS_ZERO_BASED))
		return -EINVAL;
	if (!(mr->access & IBV_ACCESS_MW_BIND)) /* 4 */
		return -EINVAL;
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(mr->access & IBV_ACCESS_LOCAL_WRITE)) /* 5 */
		return -EINVAL;
	if (!range_ok(mr->iova, mr->length, wqe->wr.bind.addr, wqe->wr.bind.length)) /* 6 */
		return -EINVAL;
	return 0;
}

int rvt_bind_mw(struct rvt_qp *qp, const struct rvt_swqe *wqe)
{
	struct rvt_lkey_table *t = &qp->rdi->lkey_table;
	struct rvt_mregion *mw = wqe->wr.bind.mw, *mr = NULL;
	int ret;

	if (!mw || !mr_get_unless_zero(mw))
		return -EINVAL;
	if (!rvt_mr_is_mw(mw)) {
		rvt_put_mr(mw);
		return -EINVAL;
	}
	if (wqe->wr.bind.length) {
		mr = wqe->wr.bind.mr_lkey ? rvt_lookup_key(t, wqe->wr.bind.mr_lkey) : NULL;
		if (!mr || rvt_mr_is_mw(mr)) {
			if (mr)
				rvt_put_mr(mr);
			rvt_put_mr(mw);
			return -EINVAL;
		}
	}
	urvt_spin_lock(&mw->mw_lock);
	ret = check_bind(qp, wqe, mw, mr);
	if (!ret) {
		int access = (int)wqe->ex.bind_access;
		uint32_t key = (mw->lkey & ~0xffu) | (wqe->wr.bind.rkey & 0xffu);

		mw_unbind(mw);
		if (mr) {
			atomic_fetch_add(&mr->num_mw, 1);
			mw->mw_mr = mr;
			mw->vaddr = mr->vaddr + (wqe->wr.bind.addr - mr->iova);
			mw->iova = (access & IBV_ACCESS_ZERO_BASED) ? 0 : wqe->wr.bind.addr;
			mw->length = wqe->wr.bind.length;
			mw->access = RVT_ACCESS_MW | (access & MW_REMOTE);
			mw->mw_qpn = qp->qpn;
			mw->mw_bound = true;
		}
		/* the key's low 8 bits are the consumer's (qp-semantics §14.1) */
		WRITE_ONCE(mw->lkey, key);
		if (mw->ibmw.type == IBV_MW_TYPE_2)
			WRITE_ONCE(mw->ibmw.rkey, key);
	}
	urvt_spin_unlock(&mw->mw_lock);
	if (mr)
		rvt_put_mr(mr);
	rvt_put_mr(mw);
	return ret;
}

enum ibv_wc_status rvt_do_local_op(struct rvt_qp *qp, struct rvt_swqe *wqe)
{
	if (wqe->wqe_flags & RVT_SWQE_LOCAL_DONE)
		return IBV_WC_SUCCESS;
	if (wqe->opcode == IBV_WR_BIND_MW)
		return rvt_bind_mw(qp, wqe) ? IBV_WC_MW_BIND_ERR : IBV_WC_SUCCESS;
	return rvt_invalidate_rkey(qp, wqe->ex.invalidate_rkey) ? IBV_WC_LOC_PROT_ERR
								 : IBV_WC_SUCCESS;
}
