/*
 * Key checks on the posting and receive fast paths (rdmavt rvt_lkey_ok /
 * rvt_rkey_ok, qp-semantics §2.6), inline so post_send, the loopback
 * engine and the responder pay no calls. The table and its lifetime rules
 * are in mr.c: MR structures are type-stable, so a lookup takes a reference
 * with an increment-unless-zero and re-checks the key afterwards.
 */
#ifndef URVT_CORE_KEYS_H
#define URVT_CORE_KEYS_H

#include <errno.h>

#include "core/mw.h"
#include "core/odp.h"
#include "core/rvt.h"

static inline bool mr_get_unless_zero(struct rvt_mregion *mr)
{
	uint32_t r = atomic_load_explicit(&mr->refcount, memory_order_relaxed);

	do {
		if (!r)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&mr->refcount, &r, r + 1,
						       memory_order_acquire,
						       memory_order_relaxed));
	return true;
}

/* Only rvt_dereg_mr drops the owner's reference (1 -> 0, by CAS). */
static inline void rvt_put_mr(struct rvt_mregion *mr)
{
	atomic_fetch_sub_explicit(&mr->refcount, 1, memory_order_release);
}

static inline void rvt_put_sge(struct rvt_sge *sge)
{
	if (sge->mr)
		rvt_put_mr(sge->mr);
	/* relaxed atomic: a dereg may be looking (qp.c sends_have_mr) */
	__atomic_store_n(&sge->mr, NULL, __ATOMIC_RELAXED);
}

/* The MR published in key's slot (A1: pairs with the release publish in
 * mr.c publish_mr()); the caller checks that it still carries key. */
static inline struct rvt_mregion *key_slot(struct rvt_lkey_table *t, uint32_t key)
{
	return atomic_load_explicit(&t->table[key >> RVT_LKEY_GEN_BITS], memory_order_acquire);
}

/* The MR has this key (generation) and no LOCAL_INV took it away. */
static inline bool key_live(const struct rvt_mregion *mr, uint32_t key)
{
	return READ_ONCE(mr->lkey) == key &&
	       !atomic_load_explicit(&mr->lkey_invalid, memory_order_relaxed);
}

/* Look a key up and take a reference; NULL if no live MR has that key. */
static inline struct rvt_mregion *rvt_lookup_key(struct rvt_lkey_table *t, uint32_t key)
{
	struct rvt_mregion *mr;

	if (unlikely((key >> RVT_LKEY_GEN_BITS) >= t->max))
		return NULL;
	mr = key_slot(t, key);
	if (!mr || !mr_get_unless_zero(mr))
		return NULL;
	if (unlikely(!key_live(mr, key))) {
		rvt_put_mr(mr);
		return NULL;
	}
	return mr;
}

/*
 * "[va, va+len) inside [base, base+size)" without overflow. Registration
 * (mr.c) keeps base + size from wrapping 2^64, so a va below base makes
 * va - base wrap to more than size - len: one subtraction covers it.
 */
static inline bool range_ok(uint64_t base, uint64_t size, uint64_t va, uint64_t len)
{
	return len <= size && va - base <= size - len;
}

/* qp-semantics §2.6 steps 4-6 for an MR that has the key: PD, bounds,
 * every access bit asked for (remote checks ask for one). */
static inline bool mr_grants(const struct rvt_mregion *mr, const struct rvt_pd *pd,
			     uint64_t va, uint64_t len, int acc)
{
	return mr->pd == pd && range_ok(mr->iova, mr->length, va, len) &&
	       (mr->access & acc) == acc;
}

/* qp-semantics §2.6, in order. */
static inline int rvt_lkey_ok(struct rvt_lkey_table *t, struct rvt_pd *pd, struct rvt_sge *isge,
		struct rvt_sge *last_sge, const struct ibv_sge *sge, int acc)
{
	struct rvt_mregion *mr;
	uint32_t key = sge->lkey;

	/* 1. lkey 0 is the kernel's DMA MR: never valid for a user PD. */
	if (unlikely(!key))
		return -EINVAL;
	/* 2. adjacent merge with the previous segment of the same MR */
	if (last_sge && last_sge->mr && last_sge->mr->lkey == key &&
	    (uintptr_t)last_sge->vaddr + last_sge->sge_length ==
		    (uintptr_t)last_sge->mr->vaddr + (sge->addr - last_sge->mr->iova)) {
		mr = last_sge->mr;
		if (range_ok(mr->iova, mr->length, sge->addr, sge->length) &&
		    (uint64_t)last_sge->sge_length + sge->length <= UINT32_MAX) {
			last_sge->length += sge->length;
			last_sge->sge_length += sge->length;
			return 0;
		}
	}
	/* 3./4. lookup, published, key generation; 4.-6. PD, bounds, access */
	mr = rvt_lookup_key(t, key);
	if (unlikely(!mr))
		return -EINVAL;
	/* a window's key is an rkey only */
	if (unlikely(rvt_mr_is_mw(mr) || !mr_grants(mr, pd, sge->addr, sge->length, acc))) {
		rvt_put_mr(mr);
		return -EINVAL;
	}
	isge->mr = mr;
	isge->vaddr = mr->vaddr + (sge->addr - mr->iova);
	isge->length = sge->length;
	isge->sge_length = sge->length;
	return 1;
}

static inline bool rvt_rkey_ok(struct rvt_qp *qp, struct rvt_sge *sge, uint32_t len, uint64_t vaddr,
		 uint32_t rkey, int acc)
{
	struct rvt_mregion *mr;

	if (unlikely(!rkey))
		return false;
	mr = rvt_lookup_key(&qp->rdi->lkey_table, rkey);
	if (unlikely(!mr))
		return false;
	if (unlikely(rvt_mr_is_mw(mr)))
		return rvt_mw_rkey_ok(qp, sge, len, vaddr, rkey, acc, mr);
	if (unlikely(!mr_grants(mr, qp->pd, vaddr, len, acc))) {
		rvt_put_mr(mr);
		return false;
	}
	sge->mr = mr;
	sge->vaddr = mr->vaddr + (vaddr - mr->iova);
	sge->length = len;
	sge->sge_length = len;
	return true;
}

/* What a remote target earns: rvt_chk_rkey's answer. */
enum rvt_rkey_res {
	RVT_RKEY_OK,
	RVT_RKEY_INV,  /* invalid request (NAK 0x61 / REM_INV_REQ_ERR) */
	RVT_RKEY_ACC,  /* remote access error (NAK 0x62 / REM_ACCESS_ERR) */
};

/*
 * The responder's check of a remote READ, WRITE or atomic target, one rule
 * for the in-process path (ruc.c rvt_ruc_loopback) and the UDP responder
 * (transport/resp.c); rxe's check_rkey, with the QP's access bit of its
 * check_op_valid. acc is the one access bit the operation needs; an atomic
 * asks for 8 bytes. In order (rc-protocol §3, qp-semantics §10):
 *  - the QP does not allow acc, or len is beyond max_msg_sz: invalid;
 *  - len 0: nothing to check, no key (rc-protocol §3.6); sge is left empty;
 *  - an atomic va not 8-aligned: invalid ("misaligned atomic");
 *  - the rkey check (rvt_rkey_ok; for a memory window's rkey
 *    rvt_mw_rkey_ok, core/mw.c): access error;
 *  - an ODP MR whose pages in the range cannot be faulted in for the
 *    access (odp.h): access error, as an ODP NIC's failed page fault;
 *  - an atomic whose host word is not 8-aligned (an MR registered with an
 *    iova that differs from its address mod 8): invalid, so no __atomic
 *    ever runs on a misaligned word.
 * On RVT_RKEY_OK with len > 0, sge holds an MR reference (rvt_put_sge).
 */
static inline enum rvt_rkey_res rvt_chk_rkey(struct rvt_qp *qp, struct rvt_sge *sge,
					     uint64_t va, uint32_t len, uint32_t rkey, int acc)
{
	const bool atomic = acc == IBV_ACCESS_REMOTE_ATOMIC;

	if (unlikely(!(qp->qp_access_flags & acc) || len > URVT_MAX_MSG_SZ))
		return RVT_RKEY_INV;
	if (!len) {
		*sge = (struct rvt_sge){ 0 };
		return RVT_RKEY_OK;
	}
	if (atomic && unlikely(va & (sizeof(uint64_t) - 1)))
		return RVT_RKEY_INV;
	if (unlikely(!rvt_rkey_ok(qp, sge, len, va, rkey, acc)))
		return RVT_RKEY_ACC;
	if (rvt_sge_odp(sge) && !rvt_odp_probe(sge->vaddr, len, acc != IBV_ACCESS_REMOTE_READ)) {
		rvt_put_sge(sge);
		return RVT_RKEY_ACC;
	}
	if (atomic && unlikely((uintptr_t)sge->vaddr & (sizeof(uint64_t) - 1))) {
		rvt_put_sge(sge);
		return RVT_RKEY_INV;
	}
	return RVT_RKEY_OK;
}

/*
 * post_direct's key check (post.c): rvt_lookup_key and mr_grants without
 * the reference. The caller holds the sender's s_hlock from the lookup
 * until it is done with the region: a retiring MR leaves the table first
 * and then waits for every s_hlock (qp_table.c rvt_direct_barrier), which
 * is what the reference did for the ordinary path. So an MR found in its
 * slot here stays registered, unchanged, until the caller drops s_hlock.
 * True with *host the host address of va, or false (also for an ODP MR,
 * whose bytes the ordinary path copies, odp.h, and a memory window's key,
 * mw.c).
 *
 * m remembers the last key that passed and its MR's fields, good while
 * memo_gen reads gen (rvt_key_memo_gen, read by the caller before its
 * lookups; it moves when an MR leaves the table or a LOCAL_INV takes a
 * key). The lookup's dependent loads (slot, MR, its key, PD, range) were
 * a third of an in-process WRITE's instructions (docs/performance.md); a
 * remembered key costs compares on the QP's own line.
 */
static inline uint32_t rvt_key_memo_gen(const struct rvt_lkey_table *t)
{
	/* read before the lookups: a change that comes after them leaves the
	 * memo behind */
	return atomic_load_explicit(&t->memo_gen, memory_order_relaxed);
}

/* always_inline: out of line it cost a call and its register saves twice
 * per WRITE (168 -> 205 instructions per WR) */
static inline __attribute__((always_inline)) bool
rvt_direct_key_ok(struct rvt_lkey_table *t, uint32_t gen, struct rvt_pd *pd, uint32_t key,
		  uint64_t va, uint32_t len, int acc, struct rvt_key_memo *m, uint8_t **host)
{
	struct rvt_mregion *mr;

	if (likely(m->gen == gen && m->key == key && m->pd == pd)) {
		*host = m->vaddr + (va - m->iova);
		return (m->access & acc) == acc && range_ok(m->iova, m->length, va, len);
	}
	/* No "!key" or "idx < max" test: every index a key can hold is in
	 * the table (below), and slot 0 is never published, so key 0 finds
	 * no MR. Pairs too with the barrier (see above). */
	_Static_assert(URVT_MAX_MR == 1ull << (32 - RVT_LKEY_GEN_BITS),
		       "the table holds every key index (device.c sizes it URVT_MAX_MR)");
	mr = key_slot(t, key);
	if (unlikely(!mr || !key_live(mr, key) || !mr_grants(mr, pd, va, len, acc) ||
		     (mr->access & (IBV_ACCESS_ON_DEMAND | RVT_ACCESS_MW))))
		return false;
	*m = (struct rvt_key_memo){ .gen = gen, .key = key, .access = mr->access, .pd = pd,
				    .vaddr = mr->vaddr, .iova = mr->iova, .length = mr->length };
	*host = mr->vaddr + (va - mr->iova);
	return true;
}

/* Whatever post_direct remembers of any key is stale. An MR leaving the
 * table calls it before the retirement barrier, which makes every later
 * post_direct see it; a LOCAL_INV has no barrier, and a WRITE ordered
 * after it by the application (its completion polled) sees it as it sees
 * lkey_invalid. */
static inline void rvt_key_memo_forget(struct rvt_lkey_table *t)
{
	atomic_fetch_add_explicit(&t->memo_gen, 1, memory_order_release);
}

#endif
