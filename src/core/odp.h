/*
 * On-demand paging MRs (IBV_ACCESS_ON_DEMAND; qp-semantics §15) in a
 * software device.
 *
 * Nothing is pinned, so an ODP MR may cover pages that are not mapped, or
 * not writable, when the device gets to them. Such an access must end as
 * it does on an ODP NIC whose page fault fails: the operation completes in
 * error (local: LOC_PROT_ERR; remote: a NAK with REM_ACCESS_ERR), the
 * process gets no signal. Two tools, in odp.c:
 *  - rvt_odp_probe, at the points where keys are checked (rvt_chk_rkey for
 *    remote targets, rvt_get_rwqe for receive buffers, rvt_odp_chk_swqe
 *    when a send WQE starts): the pages are faulted in as the access would
 *    (madvise MADV_POPULATE_READ/WRITE, without touching a byte), a range
 *    that cannot be is refused there, before anything has happened;
 *  - rvt_odp_copy, for every byte moved to or from an ODP segment: a copy
 *    through process_vm_readv on our own process, which returns EFAULT
 *    where a memcpy would take SIGSEGV (a page unmapped after the probe).
 * Non-ODP MRs keep their pinned-semantics memcpy: the copy paths test
 * one access bit of the segment's MR and make no system call.
 */
#ifndef URVT_CORE_ODP_H
#define URVT_CORE_ODP_H

#include "core/rvt.h"

static inline bool rvt_mr_odp(const struct rvt_mregion *mr)
{
	return mr && (mr->access & IBV_ACCESS_ON_DEMAND);
}

static inline bool rvt_sge_odp(const struct rvt_sge *sge)
{
	return unlikely(rvt_mr_odp(sge->mr));
}

/* Fault [addr, addr+len) in for reading (write false) or writing; false
 * if some page cannot be (not mapped, or without that permission). */
bool rvt_odp_probe(const void *addr, uint64_t len, bool write);
/* Copy len bytes without faulting; false if a page on either side was
 * not accessible (then the bytes after it are not copied). */
bool rvt_odp_copy(void *dst, const void *src, size_t len);
/* The local segments of a send WQE with RVT_SWQE_ODP: readable (SEND,
 * WRITE sources) or writable (READ, atomic results). */
bool rvt_odp_chk_swqe(const struct rvt_swqe *wqe);
/* ibv_advise_mr: prefetch the ranges of ODP MRs of pd (rvt_* errno). */
int rvt_advise_mr(struct rvt_pd *pd, int advice, uint32_t flags, const struct ibv_sge *sg_list,
		  uint32_t num_sge);

#endif
