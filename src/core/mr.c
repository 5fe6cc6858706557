/*
 * Memory regions and the lkey/rkey table (rdmavt mr.c).
 *
 * Lifetime: MR structures are type-stable (kept on a free list, never freed
 * while the device lives), so rvt_lkey_ok/rvt_rkey_ok can load a table slot
 * and take a reference with an increment-unless-zero without any lock. A
 * reference taken on a recycled structure is detected by re-checking the key
 * (whose generation moved) and dropped again.
 *
 * post_direct (post.c) takes no reference: it uses an MR only while it
 * holds its QP's s_hlock, so dereg and rereg, once the MR is out of the
 * table, wait for every s_hlock (rvt_direct_barrier, qp_table.c, with the
 * memory-ordering argument) before they wait for references and change or
 * free the MR.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/random.h"
#include "core/keys.h"
#include "core/mw.h"
#include "core/qp_table.h"
#include "core/rvt_api.h"

#define SLOT_IN_USE 0x80000000u

int rvt_lkey_table_init(struct rvt_lkey_table *t, uint32_t max)
{
	memset(t, 0, sizeof(*t));
	t->max = max;
	atomic_store_explicit(&t->memo_gen, 1, memory_order_relaxed);
	t->table = calloc(max, sizeof(*t->table));
	t->gen = calloc(max, sizeof(*t->gen));
	if (!t->table || !t->gen) {
		free(t->table);
		free(t->gen);
		return -ENOMEM;
	}
	/* One draw for the table: each slot's first generation comes from it
	 * (slot_gen0), so opening a device neither draws nor writes a
	 * generation per slot (it drew 1 MiB in 1024 system calls and wrote
	 * the 1 MiB array, resident in every process: URVT_MAX_MR slots). */
	t->seed = urvt_random64();
	t->next = 1; /* slot 0 is never used: key 0 stays invalid */
	pthread_mutex_init(&t->lock, NULL);
	return 0;
}

void rvt_lkey_table_fini(struct rvt_lkey_table *t)
{
	struct rvt_mregion *mr = t->free_list;

	while (mr) {
		struct rvt_mregion *n = mr->next_free;
		free(mr);
		mr = n;
	}
	free(t->table);
	free(t->gen);
	pthread_mutex_destroy(&t->lock);
}

/* Slot idx's first generation: its index mixed with the table's secret
 * seed (the splitmix64 finaliser), so that keys are not guessable from
 * one another. gen[idx] counts on from it (0 for a slot never used, as
 * calloc leaves it): the key's generation is their sum. */
static uint32_t slot_gen0(const struct rvt_lkey_table *t, uint32_t idx)
{
	uint64_t z = t->seed + (uint64_t)idx * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)(z ^ (z >> 31));
}

static void mr_free_slot(struct rvt_lkey_table *t, struct rvt_mregion *mr)
{
	uint32_t idx = mr->lkey >> RVT_LKEY_GEN_BITS;

	pthread_mutex_lock(&t->lock);
	/* Odd stride keeps every generation reachable before one repeats;
	 * the mask also clears SLOT_IN_USE (the slot is free from here on). */
	t->gen[idx] = ((t->gen[idx] & RVT_LKEY_GEN_MASK) + 0x9e5) & RVT_LKEY_GEN_MASK;
	mr->next_free = t->free_list;
	t->free_list = mr;
	pthread_mutex_unlock(&t->lock);
}

static void publish_mr(struct rvt_lkey_table *t, struct rvt_mregion *mr)
{
	atomic_store_explicit(&t->table[mr->lkey >> RVT_LKEY_GEN_BITS], mr,
			      memory_order_release);
}

static void unpublish_mr(struct rvt_lkey_table *t, struct rvt_mregion *mr)
{
	atomic_store_explicit(&t->table[mr->lkey >> RVT_LKEY_GEN_BITS], NULL,
			      memory_order_release);
	rvt_key_memo_forget(t);
}

/* Reserve a slot and a recycled or new structure; returns NULL when full. */
static struct rvt_mregion *alloc_slot(struct rvt_lkey_table *t, uint32_t *key)
{
	struct rvt_mregion *mr = NULL;
	uint32_t idx = 0;

	pthread_mutex_lock(&t->lock);
	for (uint32_t n = 0; n < t->max; n++) {
		uint32_t i = t->next + n;
		if (i >= t->max)
			i = i - t->max + 1;
		if (i == 0)
			continue;
		if (!(t->gen[i] & SLOT_IN_USE)) {
			idx = i;
			break;
		}
	}
	if (idx) {
		t->gen[idx] |= SLOT_IN_USE;
		t->next = idx + 1 < t->max ? idx + 1 : 1;
		if (t->free_list) {
			mr = t->free_list;
			t->free_list = mr->next_free;
		}
	}
	pthread_mutex_unlock(&t->lock);
	if (!idx)
		return NULL;
	if (!mr)
		mr = calloc(1, sizeof(*mr));
	if (!mr) {
		pthread_mutex_lock(&t->lock);
		t->gen[idx] &= ~SLOT_IN_USE;
		pthread_mutex_unlock(&t->lock);
		return NULL;
	}
	*key = (idx << RVT_LKEY_GEN_BITS) | ((t->gen[idx] + slot_gen0(t, idx)) & RVT_LKEY_GEN_MASK);
	return mr;
}

#define ACCESS_SUPPORTED                                                               \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |  \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |       \
	 IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING)

static int check_access(int access)
{
	if (access & ~ACCESS_SUPPORTED)
		return -EINVAL;
	/* Core rule: remote write/atomic need local write. */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE))
		return -EINVAL;
	return 0;
}

/*
 * The kernel pins the pages and fails with EFAULT if any is not mapped;
 * mincore() tells the same without pinning.
 */
static int check_mapped(void *addr, size_t length)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~((uintptr_t)pg - 1);
	uintptr_t end = (uintptr_t)addr + length;
	unsigned char vec[256];

	if (end < (uintptr_t)addr)
		return -EFAULT;
	while (start < end) {
		size_t chunk = (size_t)pg * sizeof(vec);
		if (chunk > end - start)
			chunk = end - start;
		if (mincore((void *)start, chunk, vec))
			return errno == ENOMEM ? -EFAULT : -errno;
		start += chunk;
	}
	return 0;
}

struct rvt_mregion *rvt_reg_mr(struct rvt_pd *pd, void *addr, size_t length,
			       uint64_t iova, int access, int *err)
{
	struct urvt_context *uctx = to_uctx(pd->ibpd.context);
	struct rvt_dev_info *rdi = uctx->rdi;
	struct rvt_mregion *mr;
	uint32_t key;
	int ret;

	ret = check_access(access);
	if (ret)
		goto err;
	if ((access & IBV_ACCESS_ON_DEMAND) && !addr && length == SIZE_MAX) {
		/* Implicit ODP (qp-semantics §15): the whole address space,
		 * addressed by virtual address. */
		if (iova) {
			ret = -EINVAL;
			goto err;
		}
	} else if (!length || length > URVT_MAX_MR_SIZE) {
		ret = -EINVAL;
		goto err;
	}
	if (access & IBV_ACCESS_ZERO_BASED)
		iova = 0;
	if (iova + length < iova) {
		ret = -EINVAL;
		goto err;
	}
	/* ODP: pages are looked at when they are accessed (odp.h) */
	if (!(access & IBV_ACCESS_ON_DEMAND)) {
		ret = check_mapped(addr, length);
		if (ret)
			goto err;
	}
	if (atomic_fetch_add(&rdi->n_mrs, 1) >= (int)URVT_MAX_MR - 1) {
		ret = -ENOMEM;
		goto err_count;
	}
	mr = alloc_slot(&rdi->lkey_table, &key);
	if (!mr) {
		ret = -ENOMEM;
		goto err_count;
	}
	memset(&mr->ibmr, 0, sizeof(mr->ibmr));
	mr->ibmr.context = pd->ibpd.context;
	mr->ibmr.pd = &pd->ibpd;
	mr->ibmr.addr = addr;
	mr->ibmr.length = length;
	mr->ibmr.lkey = key;
	mr->ibmr.rkey = key;
	mr->lkey = key;
	mr->vaddr = addr;
	mr->iova = iova;
	mr->length = length;
	mr->access = access;
	mr->pd = pd;
	atomic_store(&mr->lkey_invalid, false);
	mr->next_free = NULL;
	atomic_store(&mr->num_mw, 0);
	atomic_store(&mr->refcount, 1);
	atomic_fetch_add(&pd->usecnt, 1);
	publish_mr(&rdi->lkey_table, mr);
	return mr;

err_count:
	atomic_fetch_sub(&rdi->n_mrs, 1);
err:
	*err = ret;
	return NULL;
}

/* How long dereg waits for the references a QP in ERR is still dropping
 * (rdmavt waits 5 s, then fails with EBUSY), and rereg, which has no QP to
 * clean, for the short ones of a copy in flight. */
#define RVT_DEREG_WAIT_NS (5000ull * 1000 * 1000)
#define RVT_REREG_WAIT_NS (100ull * 1000 * 1000)

/*
 * Wait (bounded) until only the owner's reference remains: WQEs and
 * responder state hold references while they use the region.
 */
static bool wait_idle(struct rvt_mregion *mr, uint64_t wait_ns)
{
	/* by the clock, not by a count of sleeps: a loaded machine stretches
	 * each usleep */
	uint64_t end = urvt_now_ns() + wait_ns;

	while (atomic_load(&mr->refcount) != 1) {
		if (urvt_now_ns() > end)
			return false;
		usleep(100);
	}
	return true;
}

/* Take an MR or window out of the table and free its slot. */
static int mr_retire(struct rvt_dev_info *rdi, struct rvt_mregion *mr)
{
	struct rvt_pd *pd = mr->pd;
	uint32_t one = 1;

	/* qp-semantics §5.5: the QPs that hold it go to ERR and let go */
	if (atomic_load(&mr->refcount) != 1 && !rvt_mr_is_mw(mr))
		rvt_dereg_clean_qps(&rdi->qp_table, mr);
	for (;;) {
		if (!wait_idle(mr, RVT_DEREG_WAIT_NS))
			return -EBUSY;
		unpublish_mr(&rdi->lkey_table, mr);
		/* No new lookup finds it; post_direct's use no reference:
		 * wait for those that found it before. */
		rvt_direct_barrier(&rdi->qp_table);
		/* A lookup that raced with unpublish holds a reference now:
		 * publish again and wait for it to go. */
		if (atomic_compare_exchange_strong(&mr->refcount, &one, 0)) {
			/* a window bound to it meanwhile (a bind holds a
			 * reference while it counts itself in num_mw) */
			if (!atomic_load(&mr->num_mw))
				break;
			atomic_store(&mr->refcount, 1);
			publish_mr(&rdi->lkey_table, mr);
			return -EBUSY;
		}
		one = 1;
		publish_mr(&rdi->lkey_table, mr);
	}
	atomic_fetch_sub(&pd->usecnt, 1);
	atomic_fetch_sub(&rdi->n_mrs, 1);
	/* One critical section moves the generation on and frees the slot:
	 * a slot freed first could be taken (and keyed with the old
	 * generation, i.e. the dead key) before the generation moved. */
	mr_free_slot(&rdi->lkey_table, mr);
	return 0;
}

int rvt_dereg_mr(struct rvt_mregion *mr)
{
	/* memory windows are bound to it (qp-semantics §14.3) */
	if (atomic_load(&mr->num_mw))
		return -EBUSY;
	return mr_retire(to_uctx(mr->ibmr.context)->rdi, mr);
}

int rvt_rereg_mr(struct rvt_mregion *mr, int flags, struct rvt_pd *pd, void *addr,
		 size_t length, int access)
{
	struct rvt_dev_info *rdi = to_uctx(mr->ibmr.context)->rdi;
	uint32_t one = 1;
	int ret;

	if (flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
		      IBV_REREG_MR_CHANGE_ACCESS))
		return -EINVAL;
	if (!flags)
		return -EINVAL;
	if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
		ret = check_access(access);
		if (ret)
			return ret;
	}
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		if (!length || length > URVT_MAX_MR_SIZE)
			return -EINVAL;
		ret = check_mapped(addr, length);
		if (ret)
			return ret;
	}
	if (!wait_idle(mr, RVT_REREG_WAIT_NS))
		return -EBUSY;
	/* Take it out of the table while it changes: lookups miss, no one
	 * sees a half-updated region. */
	unpublish_mr(&rdi->lkey_table, mr);
	/* and post_direct's, which take no reference, are done with it */
	rvt_direct_barrier(&rdi->qp_table);
	/* A lookup that found the slot before unpublish may still take a
	 * reference and read the fields: from 0 it gets none (as for dereg)
	 * until the release of 1 below publishes the new ones. */
	if (!atomic_compare_exchange_strong(&mr->refcount, &one, 0)) {
		publish_mr(&rdi->lkey_table, mr);
		return -EBUSY;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		atomic_fetch_sub(&mr->pd->usecnt, 1);
		mr->pd = pd;
		mr->ibmr.pd = &pd->ibpd;
		atomic_fetch_add(&pd->usecnt, 1);
	}
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		mr->access = access;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		mr->vaddr = addr;
		mr->iova = (uint64_t)(uintptr_t)addr;
		mr->length = length;
		mr->ibmr.addr = addr;
		mr->ibmr.length = length;
	}
	atomic_store_explicit(&mr->refcount, 1, memory_order_release);
	publish_mr(&rdi->lkey_table, mr);
	return 0;
}

/*
 * rdmavt rvt_invalidate_rkey: the key must name a live MR of the QP's PD;
 * afterwards every lkey/rkey check against it fails until it is
 * deregistered. (rxe only invalidates fast-registration MRs; urvt has none,
 * so it follows rdmavt, which accepts any MR.)
 */
int rvt_invalidate_rkey(struct rvt_qp *qp, uint32_t rkey)
{
	struct rvt_mregion *mr;

	if (!rkey)
		return -EINVAL;
	mr = rvt_lookup_key(&qp->rdi->lkey_table, rkey);
	if (!mr)
		return -EINVAL;
	if (rvt_mr_is_mw(mr))
		return rvt_mw_invalidate(qp, mr, rkey);
	if (mr->pd != qp->pd) {
		rvt_put_mr(mr);
		return -EINVAL;
	}
	atomic_store(&mr->lkey_invalid, true);
	rvt_key_memo_forget(&qp->rdi->lkey_table);
	rvt_put_mr(mr);
	return 0;
}

/*
 * Memory windows (core/mw.c, qp-semantics §14) take a slot of the key table like an MR and
 * count against max_mr with them. A type 1 window starts unbound with its
 * rkey; a type 2 window is free until a BIND_MW gives it a range.
 */
struct rvt_mregion *rvt_alloc_mw(struct rvt_pd *pd, enum ibv_mw_type type, int *err)
{
	struct rvt_dev_info *rdi = to_uctx(pd->ibpd.context)->rdi;
	struct rvt_mregion *mw;
	uint32_t key;

	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
		*err = -EOPNOTSUPP;
		return NULL;
	}
	if (atomic_fetch_add(&rdi->n_mrs, 1) >= (int)URVT_MAX_MR - 1)
		goto err_count;
	mw = alloc_slot(&rdi->lkey_table, &key);
	if (!mw)
		goto err_count;
	memset(&mw->ibmr, 0, sizeof(mw->ibmr));
	memset(&mw->ibmw, 0, sizeof(mw->ibmw));
	mw->ibmw.context = pd->ibpd.context;
	mw->ibmw.pd = &pd->ibpd;
	mw->ibmw.rkey = key;
	mw->ibmw.handle = key;
	mw->ibmw.type = type;
	mw->ibmr.context = pd->ibpd.context; /* for mr_retire */
	mw->lkey = key;
	mw->vaddr = NULL;
	mw->iova = 0;
	mw->length = 0;
	mw->access = RVT_ACCESS_MW;
	mw->pd = pd;
	mw->mw_bound = false;
	mw->mw_mr = NULL;
	mw->mw_qpn = 0;
	atomic_store(&mw->lkey_invalid, false);
	mw->next_free = NULL;
	atomic_store(&mw->num_mw, 0);
	atomic_store(&mw->refcount, 1);
	atomic_fetch_add(&pd->usecnt, 1);
	publish_mr(&rdi->lkey_table, mw);
	return mw;

err_count:
	atomic_fetch_sub(&rdi->n_mrs, 1);
	*err = -ENOMEM;
	return NULL;
}

int rvt_dealloc_mw(struct rvt_mregion *mw)
{
	/* unbound first: its key grants nothing from here on */
	rvt_mw_retire(mw);
	return mr_retire(to_uctx(mw->ibmw.context)->rdi, mw);
}
