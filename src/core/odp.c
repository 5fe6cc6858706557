/*
 * On-demand paging MRs: fault-free probes and copies (odp.h), and
 * ibv_advise_mr's prefetch.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/keys.h"
#include "core/odp.h"
#include "core/rvt_api.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

static uintptr_t page_mask(void)
{
	static uintptr_t mask;

	if (!mask)
		mask = (uintptr_t)sysconf(_SC_PAGESIZE) - 1;
	return mask;
}

/* Without MADV_POPULATE_* (kernels before 5.14): one byte of each page
 * read through rvt_odp_copy. Writability cannot be asked without writing;
 * the copies stay fault-free, an atomic is not (docs/deviations.md). */
static bool probe_by_reading(uintptr_t start, uintptr_t end)
{
	for (uintptr_t p = start; p < end; p += page_mask() + 1) {
		uint8_t b;
		if (!rvt_odp_copy(&b, (const void *)p, 1))
			return false;
	}
	return true;
}

/* Does this kernel know MADV_POPULATE_READ? Asked once, of a page that is
 * certainly mapped: afterwards EINVAL means "this range cannot be
 * populated so" (a mapping without the permission, or VM_PFNMAP/VM_IO,
 * which an ODP MR cannot reach either). */
static bool have_populate(void)
{
	static _Atomic int known; /* 0 unknown, 1 yes, 2 no */
	static uint8_t here;
	int k = atomic_load_explicit(&known, memory_order_relaxed);

	if (!k) {
		uintptr_t pg = (uintptr_t)&here & ~page_mask();
		k = madvise((void *)pg, page_mask() + 1, MADV_POPULATE_READ) && errno == EINVAL ? 2 : 1;
		atomic_store_explicit(&known, k, memory_order_relaxed);
	}
	return k == 1;
}

bool rvt_odp_probe(const void *addr, uint64_t len, bool write)
{
	uintptr_t start = (uintptr_t)addr & ~page_mask();
	uintptr_t end = (uintptr_t)addr + len;

	if (!len)
		return true;
	if (end < (uintptr_t)addr || end > UINTPTR_MAX - page_mask())
		return false;
	end = (end + page_mask()) & ~page_mask();
	for (int tries = 0; tries < 8; tries++) {
		if (!madvise((void *)start, end - start,
			     write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ))
			return true;
		if (errno == EINVAL && !have_populate())
			return probe_by_reading(start, end);
		/* ENOMEM: not mapped; EFAULT or EINVAL: the access would fault */
		if (errno != EINTR && errno != EAGAIN)
			return false;
	}
	return false;
}

bool rvt_odp_copy(void *dst, const void *src, size_t len)
{
	static _Atomic bool no_pvr;
	uint8_t *d = dst;
	const uint8_t *s = src;

	while (len) {
		struct iovec local = { .iov_base = d, .iov_len = len };
		struct iovec remote = { .iov_base = (void *)s, .iov_len = len };
		ssize_t n;

		if (unlikely(atomic_load_explicit(&no_pvr, memory_order_relaxed))) {
			memmove(d, s, len); /* probed before, see probe_by_reading */
			return true;
		}
		n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
		if (n > 0) {
			d += n;
			s += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == ENOSYS || errno == EPERM)) {
			/* a seccomp policy without process_vm_readv */
			atomic_store(&no_pvr, true);
			continue;
		}
		return false;
	}
	return true;
}

bool rvt_odp_chk_swqe(const struct rvt_swqe *wqe)
{
	bool write = wqe->opcode == IBV_WR_RDMA_READ || wqe->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
		     wqe->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;

	if (wqe->wqe_flags & RVT_SWQE_INLINE)
		return true;
	for (uint32_t i = 0; i < wqe->num_sge; i++) {
		const struct rvt_sge *sge = &wqe->sg_list[i];
		if (rvt_mr_odp(sge->mr) && !rvt_odp_probe(sge->vaddr, sge->sge_length, write))
			return false;
	}
	return true;
}

/*
 * ibv_advise_mr (qp-semantics §15, docs/abi.md): every range must lie in an ODP MR of
 * pd (for PREFETCH_WRITE one with local write); PREFETCH and
 * PREFETCH_WRITE fault the pages in now, PREFETCH_NO_FAULT maps only what
 * is present, which for a software device is nothing to do. With
 * IBV_ADVISE_MR_FLAG_FLUSH the caller learns a range that could not be
 * faulted in (EFAULT); without it the advice is a hint and such a range
 * is left to the access itself.
 */
int rvt_advise_mr(struct rvt_pd *pd, int advice, uint32_t flags, const struct ibv_sge *sg_list,
		  uint32_t num_sge)
{
	struct rvt_lkey_table *t = &to_uctx(pd->ibpd.context)->rdi->lkey_table;
	bool write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;

	if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return -EOPNOTSUPP;
	if (flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH)
		return -EOPNOTSUPP;
	if (!sg_list || !num_sge)
		return -EINVAL;
	for (uint32_t i = 0; i < num_sge; i++) {
		const struct ibv_sge *sge = &sg_list[i];
		struct rvt_mregion *mr = sge->lkey ? rvt_lookup_key(t, sge->lkey) : NULL;
		bool ok;

		if (!mr)
			return -EINVAL;
		if (!rvt_mr_odp(mr) ||
		    !mr_grants(mr, pd, sge->addr, sge->length, write ? IBV_ACCESS_LOCAL_WRITE : 0)) {
			rvt_put_mr(mr);
			return -EINVAL;
		}
		ok = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT ||
		     rvt_odp_probe(mr->vaddr + (sge->addr - mr->iova), sge->length, write);
		rvt_put_mr(mr);
		if (!ok && (flags & IBV_ADVISE_MR_FLAG_FLUSH))
			return -EFAULT;
	}
	return 0;
}
