/*
 * Pushes of READ data between two processes of the shm link (docs/shm.md
 * "Single copy"): a responder writes part of a READ's bytes straight into
 * the requester's buffers with process_vm_writev, while the requester reads
 * the rest out of the responder. A write into another process must never
 * land in memory that is no longer the READ's: the requester's epoch (in
 * the ring that carries its requests) says which requests may still be
 * pushed to, and the responder's busy count says a push is under way; the
 * two are checked crosswise, so either the responder sees the new epoch or
 * the requester sees it busy and waits.
 */
#include "base/timer.h"
#include "link/shm_priv.h"

/* How long a fence waits for a push under way: one push is a copy of at
 * most a few hundred KiB (microseconds); a peer stopped in the middle of
 * one (a debugger) is not waited for beyond this. */
#define SHM_CMA_FENCE_NS 100000000ull

uint32_t shm_cma_epoch(struct urvt_link *l, const union urvt_link_addr *dst)
{
	struct shm_peer *p = shm_tx_enter(shm_of(l), dst);
	uint32_t e;

	if (!p)
		return 0;
	e = atomic_load_explicit(&p->tx_ctrl->cma_epoch, memory_order_relaxed);
	shm_tx_leave(p);
	return e;
}

void shm_cma_fence(struct urvt_link *l, const union urvt_link_addr *dst)
{
	struct shm_peer *p = shm_tx_enter(shm_of(l), dst);
	uint64_t end;

	/* a peer that is not up reads no more requests: nothing to wait for */
	if (!p)
		return;
	atomic_fetch_add_explicit(&p->tx_ctrl->cma_epoch, 1, memory_order_seq_cst);
	end = urvt_now_ns() + SHM_CMA_FENCE_NS;
	while (atomic_load_explicit(&p->tx_ctrl->cma_busy, memory_order_seq_cst) &&
	       urvt_now_ns() < end)
		sched_yield();
	shm_tx_leave(p);
}

bool shm_cma_push(struct urvt_link *l, const union urvt_link_addr *dst, uint32_t epoch,
		  const struct iovec *local, unsigned nl, const struct iovec *remote, unsigned nr,
		  size_t len)
{
	struct shm_peer *p = shm_tx_enter(shm_of(l), dst);
	bool ok = false;

	if (!p)
		return false;
	atomic_fetch_add_explicit(&p->rx_ctrl->cma_busy, 1, memory_order_seq_cst);
	if (p->pid && atomic_load_explicit(&p->rx_ctrl->cma_epoch, memory_order_seq_cst) == epoch)
		ok = process_vm_writev(p->pid, local, nl, remote, nr, 0) == (ssize_t)len;
	atomic_fetch_sub_explicit(&p->rx_ctrl->cma_busy, 1, memory_order_release);
	shm_tx_leave(p);
	return ok;
}
