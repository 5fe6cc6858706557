/*
 * post_send / post_recv (rvt_post_send, rvt_post_one_wr, rvt_post_recv;
 * qp-semantics §2-§3). Called from any thread, "from interrupt context":
 * no allocation, no sleeping, one short spinlock per QP, every check in the
 * order rdmavt makes it.
 */
#include <errno.h>
#include <string.h>

#include "core/keys.h"
#include "core/qp_table.h"
#include "core/ruc.h"
#include "core/rvt_api.h"

/* Operation table (qp-semantics §2.3): which QP types may post each opcode. */
enum { OP_RC = 1 << 0, OP_UC = 1 << 1, OP_UD = 1 << 2 };
enum { OPF_ATOMIC = 1 << 3, OPF_RDATOMIC = 1 << 4, OPF_LOCAL = 1 << 5, OPF_INLINE_OK = 1 << 6,
       OPF_VALUE = 1 << 7 /* ATOMIC_WRITE: 8 bytes taken at post time */ };

static const uint8_t post_parms[IBV_WR_ATOMIC_WRITE + 1] = {
	[IBV_WR_RDMA_WRITE] = OP_RC | OP_UC | OPF_INLINE_OK,
	[IBV_WR_RDMA_WRITE_WITH_IMM] = OP_RC | OP_UC | OPF_INLINE_OK,
	[IBV_WR_SEND] = OP_RC | OP_UC | OP_UD | OPF_INLINE_OK,
	[IBV_WR_SEND_WITH_IMM] = OP_RC | OP_UC | OP_UD | OPF_INLINE_OK,
	[IBV_WR_RDMA_READ] = OP_RC | OPF_RDATOMIC,
	[IBV_WR_ATOMIC_CMP_AND_SWP] = OP_RC | OPF_RDATOMIC | OPF_ATOMIC,
	[IBV_WR_ATOMIC_FETCH_AND_ADD] = OP_RC | OPF_RDATOMIC | OPF_ATOMIC,
	[IBV_WR_LOCAL_INV] = OP_RC | OP_UC | OPF_LOCAL,
	[IBV_WR_BIND_MW] = OP_RC | OP_UC | OPF_LOCAL,
	[IBV_WR_SEND_WITH_INV] = OP_RC | OPF_INLINE_OK,
	[IBV_WR_ATOMIC_WRITE] = OP_RC | OPF_RDATOMIC | OPF_VALUE,
};

static inline uint8_t qp_type_bit(enum ibv_qp_type t)
{
	return t == IBV_QPT_RC ? OP_RC : t == IBV_QPT_UC ? OP_UC : OP_UD;
}

/* Free slots in the send ring (qp-semantics §2.4) for a WR going to slot
 * 'head' (s_head, or further on inside an ibv_wr_* batch); s_last moves on
 * the engine's side. */
static inline bool sq_full(struct rvt_qp *qp, uint32_t head)
{
	/* pairs with the release of s_last in rvt_send_complete */
	return head - load_acquire(&qp->s_last) >= qp->max_send_wr;
}

static void put_sges(struct rvt_sge *list, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		rvt_put_sge(&list[i]);
}

/*
 * LOCAL_INV executed at post time (qp-semantics §2.5). Returns 0, or -EINVAL
 * for a key that cannot be invalidated.
 */
static int local_inv_now(struct rvt_qp *qp, uint32_t rkey)
{
	return rvt_invalidate_rkey(qp, rkey);
}

/*
 * ATOMIC_WRITE's 8 bytes (qp-semantics §2.10): inline (the extended API
 * passes its value so), or one SGE of exactly 8 bytes that the lkey
 * check lets the QP read. Taken now, into the WQE: the responder stores
 * them as one 8-byte write.
 */
static int atomic_write_value(struct rvt_qp *qp, const struct ibv_send_wr *wr, uint64_t *val)
{
	struct rvt_sge sge;
	int ret;

	if (wr->num_sge != 1 || wr->sg_list[0].length != sizeof(uint64_t))
		return -EINVAL;
	if (wr->send_flags & IBV_SEND_INLINE) {
		memcpy(val, (const void *)(uintptr_t)wr->sg_list[0].addr, sizeof(*val));
		return 0;
	}
	ret = rvt_lkey_ok(&qp->rdi->lkey_table, qp->pd, &sge, NULL, &wr->sg_list[0], 0);
	if (ret < 0)
		return -EINVAL;
	if (rvt_sge_odp(&sge))
		ret = rvt_odp_copy(val, sge.vaddr, sizeof(*val)) ? 0 : -EFAULT;
	else
		memcpy(val, sge.vaddr, sizeof(*val));
	rvt_put_sge(&sge);
	return ret < 0 ? ret : 0;
}

/* W7: a UD WR names an AH of the QP's PD. */
static inline bool ud_ah_ok(const struct rvt_qp *qp, const struct ibv_send_wr *wr)
{
	return wr->wr.ud.ah && wr->wr.ud.ah->pd == &qp->pd->ibpd;
}

/* The UD WQE's destination: QPN, and the Q_Key (IBTA controlled Q_Key: bit
 * 31 means "use the QP's own", rdmavt). */
static inline void ud_dest(const struct rvt_qp *qp, const struct ibv_send_wr *wr,
			   struct rvt_swqe *wqe)
{
	wqe->wr.ud.remote_qpn = wr->wr.ud.remote_qpn & URVT_QPN_MASK;
	wqe->wr.ud.remote_qkey = (wr->wr.ud.remote_qkey & 0x80000000u) ? qp->qkey
									 : wr->wr.ud.remote_qkey;
}

/* The engine idle, nothing queued, nothing waited for: a WR may run at post
 * time (post_direct, post_ud_direct). s_last is still the engine's to move
 * if a WQE is queued (an RNR wait). */
static inline bool sq_idle(struct rvt_qp *qp)
{
	return !atomic_load_explicit(&qp->s_sched, memory_order_acquire) &&
	       load_acquire(&qp->s_last) == qp->s_head && !qp->s_flags;
}

/*
 * rdmavt's rvt_qp_valid_operation (qp-semantics §2.2 W1-W7, in its order):
 * may this QP post this WR at all? Fills *parms with the opcode's row of
 * post_parms. Returns 0 or -EINVAL.
 */
static inline int rvt_qp_valid_operation(const struct rvt_qp *qp, const struct ibv_send_wr *wr,
					 uint32_t *parms)
{
	uint32_t opcode = wr->opcode;

	/* W1 */
	if (unlikely(wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_send_sge))
		return -EINVAL;
	/* W2, W3 (W4: no privileged opcode in the table) */
	if (unlikely(opcode >= ARRAY_SIZE(post_parms)))
		return -EINVAL;
	*parms = post_parms[opcode];
	if (unlikely(!(*parms & qp_type_bit(qp->type))))
		return -EINVAL;
	/* W5 */
	if (*parms & OPF_ATOMIC) {
		if (unlikely(wr->num_sge == 0 || wr->sg_list[0].length < sizeof(uint64_t) ||
			     (wr->sg_list[0].addr & (sizeof(uint64_t) - 1))))
			return -EINVAL;
	}
	/* W6 */
	if (unlikely((*parms & OPF_RDATOMIC) && !qp->max_rd_atomic))
		return -EINVAL;
	/* W7 */
	if (qp->type == IBV_QPT_UD && unlikely(!ud_ah_ok(qp, wr)))
		return -EINVAL;
	return 0;
}

/*
 * W8: a local operation (LOCAL_INV, BIND_MW). An unfenced LOCAL_INV outside
 * a batch, with no local operation queued, runs now (*local_now). Decided
 * once: the engine may lower local_ops_pending concurrently (it does not
 * take s_hlock). Returns 1 (go on and queue it), 0 (done, no slot: an
 * unsignaled LOCAL_INV run now) or a negative errno.
 */
static inline int rvt_post_chk_local(struct rvt_qp *qp, const struct ibv_send_wr *wr,
				     const struct rvt_post_batch *b, bool *local_now)
{
	/* a bind always runs in the engine (its errors are completions) */
	*local_now = wr->opcode == IBV_WR_LOCAL_INV && !b && !(wr->send_flags & IBV_SEND_FENCE) &&
		     !READ_ONCE(qp->local_ops_pending);
	if (wr->opcode == IBV_WR_BIND_MW && unlikely(!wr->bind_mw.mw))
		return -EINVAL;
	if (*local_now) {
		int ret = local_inv_now(qp, wr->invalidate_rkey);
		if (ret)
			return ret;
		if (!rvt_signaled(qp, wr->send_flags))
			return 0; /* done; no completion will ever be produced */
	}
	return 1;
}

/*
 * The WQE's data for an inline WR: rxe-style (qp-semantics §2.7 decision),
 * copied now into the slot after its SGEs, no lkey check. Returns 0 or
 * -EINVAL (W11's max_inline), with *length and *nsge set.
 */
static inline int rvt_post_from_inline(const struct rvt_qp *qp, const struct ibv_send_wr *wr,
				       struct rvt_swqe *wqe, uint64_t *length, uint32_t *nsge)
{
	uint8_t *buf = (uint8_t *)&wqe->sg_list[qp->max_send_sge ? qp->max_send_sge : 1];
	uint64_t len = 0;

	for (int i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (unlikely(len > qp->max_inline))
		return -EINVAL;
	len = 0;
	for (int i = 0; i < wr->num_sge; i++) {
		memcpy(buf + len, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
		len += wr->sg_list[i].length;
	}
	if (len) {
		wqe->sg_list[0] = (struct rvt_sge){ .mr = NULL, .vaddr = buf,
						    .length = (uint32_t)len,
						    .sge_length = (uint32_t)len };
		*nsge = 1;
	}
	wqe->wqe_flags = RVT_SWQE_INLINE;
	*length = len;
	return 0;
}

/*
 * W10: the WQE's SGEs, each lkey checked (and referenced). Deviation:
 * LOCAL_WRITE only for READ and atomics, not for SEND_WITH_INV sources
 * (qp-semantics §2.2 note). Returns 0, or -EINVAL with no reference kept.
 */
static inline int rvt_post_from_sges(struct rvt_qp *qp, const struct ibv_send_wr *wr,
				     uint32_t parms, struct rvt_swqe *wqe, uint64_t *length,
				     uint32_t *nsge)
{
	uint32_t acc = (parms & OPF_RDATOMIC) ? IBV_ACCESS_LOCAL_WRITE : 0, j = 0;
	uint64_t len = 0;
	int odp = 0;

	if (unlikely(wr->send_flags & IBV_SEND_INLINE) && !(parms & OPF_LOCAL))
		return -EINVAL; /* inline only for SEND and RDMA WRITE */
	for (int i = 0; i < wr->num_sge; i++) {
		int ret;
		if (!wr->sg_list[i].length)
			continue;
		ret = rvt_lkey_ok(&qp->rdi->lkey_table, qp->pd, &wqe->sg_list[j],
				  j ? &wqe->sg_list[j - 1] : NULL, &wr->sg_list[i], acc);
		if (unlikely(ret < 0)) {
			put_sges(wqe->sg_list, j);
			return -EINVAL;
		}
		j += (uint32_t)ret;
		odp |= wqe->sg_list[j - 1].mr->access; /* ret 0: merged into j - 1 */
		len += wr->sg_list[i].length;
	}
	/* its pages are looked at when the WQE starts (core/odp.h) */
	wqe->wqe_flags = (odp & IBV_ACCESS_ON_DEMAND) ? RVT_SWQE_ODP : 0;
	*length = len;
	*nsge = j;
	return 0;
}

/*
 * W11 [driver, hfi1]: the message length; for UD also the WQE's address
 * (its AV copied into the ring's slot) and Q_Key. Returns 0 or -EINVAL.
 */
static inline int rvt_post_chk_length(struct rvt_qp *qp, const struct ibv_send_wr *wr,
				      struct rvt_swqe *wqe, uint32_t head, uint64_t length)
{
	struct rvt_ah *ah;

	if (qp->type != IBV_QPT_UD)
		return unlikely(length > URVT_MAX_MSG_SZ) ? -EINVAL : 0;
	ah = ibah_to_rvtah(wr->wr.ud.ah);
	if (unlikely(length > qp->pmtu))
		return -EINVAL;
	qp->s_ud_av[head & qp->s_mask] = ah->av;
	wqe->ud_av = &qp->s_ud_av[head & qp->s_mask];
	ud_dest(qp, wr, wqe);
	return 0;
}

/* The WR's own fields into the WQE: the common ones, then the opcode's. */
static inline void rvt_post_from_wr(struct rvt_swqe *wqe, const struct ibv_send_wr *wr,
				    uint64_t length, uint32_t nsge, uint64_t value)
{
	wqe->wr_id = wr->wr_id;
	wqe->opcode = wr->opcode;
	wqe->send_flags = wr->send_flags;
	wqe->ex.imm_data = wr->imm_data; /* union with invalidate_rkey */
	wqe->length = (uint32_t)length;
	wqe->num_sge = (uint16_t)nsge;
	wqe->xrc_srqn = wr->qp_type.xrc.remote_srqn & URVT_QPN_MASK; /* XRC_SEND's XRCETH */
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		wqe->wr.rdma.remote_addr = wr->wr.rdma.remote_addr;
		wqe->wr.rdma.rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		wqe->wr.atomic.remote_addr = wr->wr.atomic.remote_addr;
		wqe->wr.atomic.compare_add = wr->wr.atomic.compare_add;
		wqe->wr.atomic.swap = wr->wr.atomic.swap;
		wqe->wr.atomic.rkey = wr->wr.atomic.rkey;
		break;
	case IBV_WR_ATOMIC_WRITE:
		/* addressed as an RDMA WRITE; the value in the atomic fields */
		wqe->wr.atomic.remote_addr = wr->wr.rdma.remote_addr;
		wqe->wr.atomic.rkey = wr->wr.rdma.rkey;
		wqe->wr.atomic.compare_add = value;
		wqe->wr.atomic.swap = 0;
		break;
	case IBV_WR_BIND_MW:
		wqe->wr.bind.mw = ibmw_to_rvtmw(wr->bind_mw.mw);
		wqe->wr.bind.addr = wr->bind_mw.bind_info.addr;
		wqe->wr.bind.length = wr->bind_mw.bind_info.length;
		wqe->wr.bind.rkey = wr->bind_mw.rkey;
		wqe->wr.bind.mr_lkey = wr->bind_mw.bind_info.mr ? wr->bind_mw.bind_info.mr->lkey : 0;
		wqe->ex.bind_access = wr->bind_mw.bind_info.mw_access_flags;
		break;
	default:
		break;
	}
}

/*
 * The WQE's place in the send sequence: SSN and PSN range, taken from the
 * QP's counters (or the batch's, which rvt_post_batch_end commits). A local
 * operation has none; it counts in local_ops_pending unless it already ran.
 */
static inline void rvt_post_from_seq(struct rvt_qp *qp, struct rvt_swqe *wqe,
				     struct rvt_post_batch *b, uint32_t parms, bool local_now,
				     uint64_t length)
{
	if (parms & OPF_LOCAL) {
		if (local_now)
			wqe->wqe_flags |= RVT_SWQE_LOCAL_DONE;
		else if (b)
			b->n_local++; /* added to local_ops_pending on commit */
		else
			__atomic_fetch_add(&qp->local_ops_pending, 1, __ATOMIC_RELAXED);
		wqe->ssn = wqe->psn = wqe->lpsn = 0;
	} else {
		uint32_t shift = (uint32_t)__builtin_ctz(qp->pmtu);
		uint32_t *ssn = b ? &b->ssn : &qp->s_ssn;
		uint32_t *next_psn = b ? &b->next_psn : &qp->s_next_psn;
		wqe->ssn = (*ssn)++;
		wqe->psn = *next_psn;
		wqe->lpsn = (wqe->psn + (qp->type != IBV_QPT_UD && length ?
					 (length - 1) >> shift : 0)) & URVT_QPN_MASK;
		*next_psn = (wqe->lpsn + 1) & URVT_QPN_MASK;
	}
}

/*
 * Check one WR (qp-semantics §2.2 W1-W11, in rdmavt's order) and fill the
 * send slot after the ones already taken: s_head for post_send, s_head + b->n
 * inside an ibv_wr_* batch. The caller publishes the slot (advances s_head).
 * Caller holds s_hlock. Returns 1 (slot filled), 0 (executed at post time,
 * no slot: an unsignaled LOCAL_INV) or a negative errno (nothing kept).
 *
 * A batch (b != NULL) may still be discarded by wr_abort or a later failure,
 * so it must leave no trace before rvt_post_batch_end: its PSN/SSN counters
 * run in b, and a local operation is always queued (as with IBV_SEND_FENCE)
 * rather than executed here, where it could not be undone.
 */
static int rvt_post_one_wr(struct rvt_qp *qp, const struct ibv_send_wr *wr,
			   struct rvt_post_batch *b)
{
	uint32_t head = qp->s_head + (b ? b->n : 0);
	uint64_t length = 0; /* 64-bit: 32 SGEs of up to 4 GiB must not wrap (W11, inline) */
	uint64_t value = 0;
	uint32_t parms, nsge = 0;
	bool is_inline, local_now = false;
	struct rvt_swqe *wqe;
	int ret;

	ret = rvt_qp_valid_operation(qp, wr, &parms); /* W1-W7 */
	if (unlikely(ret))
		return ret;
	if (parms & OPF_LOCAL) { /* W8 */
		ret = rvt_post_chk_local(qp, wr, b, &local_now);
		if (ret <= 0)
			return ret;
	}
	/* W9 */
	if (unlikely(sq_full(qp, head)))
		return -ENOMEM;

	wqe = rvt_get_swqe_ptr(qp, head);
	is_inline = (wr->send_flags & IBV_SEND_INLINE) && (parms & OPF_INLINE_OK);
	if (parms & OPF_VALUE) {
		ret = atomic_write_value(qp, wr, &value);
		if (ret)
			return ret;
		length = sizeof(value);
		wqe->wqe_flags = 0;
	} else {
		ret = is_inline ? rvt_post_from_inline(qp, wr, wqe, &length, &nsge) :
				  rvt_post_from_sges(qp, wr, parms, wqe, &length, &nsge);
		if (ret)
			return ret;
	}
	if (unlikely(rvt_post_chk_length(qp, wr, wqe, head, length))) { /* W11 */
		if (!is_inline)
			put_sges(wqe->sg_list, nsge);
		return -EINVAL;
	}
	rvt_post_from_wr(wqe, wr, length, nsge, value);
	rvt_post_from_seq(qp, wqe, b, parms, local_now, length);
	return 1;
}

/*
 * Direct execution: the in-process fast path. An RDMA WRITE of one SGE on
 * an RC/UC QP in RTS whose peer is a QP of this process, posted alone to
 * an empty send queue whose engine is idle, is executed here and now,
 * without a trip through the ring: exactly what rvt_post_one_wr and then
 * the engine (rvt_ruc_loopback, rvt_send_complete) would do at once, in
 * the same order.
 *
 * Everything happens under s_hlock, completion included:
 *  - no WR can be queued behind this one before it has completed, and
 *    modify (SQD, ERR, attributes) waits for it;
 *  - the engine is idle when we look (s_sched 0, acquire: whatever an
 *    earlier run completed is in the CQ before ours), and a run that
 *    starts meanwhile (progress thread, RNR timer, another QP's error
 *    path) finds the ring empty, with s_head frozen by s_hlock, and does
 *    nothing; so the engine token is not needed.
 *
 * Anything unusual (an error to report, RNR, a peer not ready) leaves
 * nothing behind and returns false: the WR then takes the ordinary path,
 * which reports or executes it as before.
 */
#define RVT_DIRECT_MAX 4096 /* bytes copied under s_hlock */

/* The send completion of a direct WR (rvt_send_complete, signaled case). */
static __attribute__((noinline)) void direct_complete(struct rvt_qp *qp, uint64_t wr_id,
						      enum ibv_wc_opcode opcode, uint32_t len)
{
	struct ibv_wc wc = {
		.wr_id = wr_id,
		.status = IBV_WC_SUCCESS,
		.opcode = opcode,
		.byte_len = len,
		.qp_num = qp->qpn,
	};

	/* a reset that came meanwhile discards it, as it would the WQE */
	if (!(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_OR_FLUSH_SEND))
		return;
	if (!rvt_cq_enter(qp->send_cq, &wc, false))
		rvt_error_qp(qp, IBV_WC_LOC_QP_OP_ERR);
}

/* The first WRITE a peer in RTR takes in raises COMM_EST (as ruc.c's
 * loopback does); comm_est is the peer's r_lock's. */
static __attribute__((noinline)) void direct_comm_est(struct rvt_qp *peer)
{
	bool raise;

	urvt_bias_lock(&peer->r_lock);
	raise = !peer->comm_est && rvt_qp_state(peer) == IBV_QPS_RTR;
	if (raise)
		peer->comm_est = true;
	urvt_bias_unlock(&peer->r_lock);
	if (raise)
		urvt_dispatch_async_event(peer->uctx, IBV_EVENT_COMM_EST, peer);
}

/* A direct WRITE that passed its checks: where its bytes come from and go. */
struct direct_write {
	const uint8_t *src;
	uint8_t *dst;
	uint32_t len;
	int pstate; /* the peer's state as checked */
};

/*
 * Caller holds s_hlock and has seen the QP in RTS. True: the WRITE can be
 * done now (post_direct_run), d filled; false: nothing was changed.
 * The lkey and the peer's rkey are checked without MR references
 * (rvt_direct_key_ok): s_hlock, held from the lookups to the end of the
 * copy, is what a dereg or rereg waits for (qp_table.c rvt_direct_barrier).
 * The peer's state and access flags are read without its r_lock, for the
 * same reason: a modify of the peer waits for the s_hlock of every QP that
 * caches it (qp.c lb_barrier), so a WRITE checked against its old state
 * has landed before that modify returns. (r_lock was an atomic exchange
 * per WR: 59 -> 84 M WR/s in bench/loopback_rate here.)
 */
static inline __attribute__((always_inline)) bool
post_direct(struct rvt_qp *qp, const struct ibv_send_wr *wr, struct direct_write *d)
{
	const struct ibv_sge *sg = wr->sg_list;
	struct rvt_lkey_table *keys;
	struct rvt_qp *peer;
	uint32_t gen;

	if (wr->opcode != IBV_WR_RDMA_WRITE || wr->num_sge != 1 || wr->next)
		return false;
	d->len = sg->length;
	if (d->len - 1 >= RVT_DIRECT_MAX) /* 0: no SGE at all, the ordinary path */
		return false;
	/* The peer as cached by modify (qp.c lb_cache: the QP remote_qpn
	 * names, of the same type; remote_qpn only moves in INIT->RTR and
	 * reset, and every modify ends with lb_cache); without one the
	 * engine looks it up, as it always did. */
	peer = qp->lb_peer;
	if (unlikely(!peer))
		return false;
	if (!sq_idle(qp))
		return false;
	keys = &qp->rdi->lkey_table;
	gen = rvt_key_memo_gen(keys);
	/* W10 (or inline: W11's max_inline), as rvt_post_one_wr */
	if (wr->send_flags & IBV_SEND_INLINE) {
		if (d->len > qp->max_inline)
			return false;
		d->src = (const uint8_t *)(uintptr_t)sg->addr;
	} else {
		uint8_t *src;

		if (unlikely(!rvt_direct_key_ok(keys, gen, qp->pd, sg->lkey, sg->addr, d->len, 0,
						&qp->lb_lkey_memo, &src)))
			return false;
		d->src = src;
	}
	/* rvt_ruc_loopback */
	d->pstate = rvt_qp_state(peer);
	if (unlikely(!(ib_rvt_state_ops[d->pstate] & RVT_PROCESS_RECV_OK) ||
		     !(READ_ONCE(peer->qp_access_flags) & IBV_ACCESS_REMOTE_WRITE)))
		return false;
	return likely(rvt_direct_key_ok(keys, gen, peer->pd, wr->wr.rdma.rkey,
					wr->wr.rdma.remote_addr, d->len, IBV_ACCESS_REMOTE_WRITE,
					&qp->lb_rkey_memo, &d->dst));
}

/*
 * The rest of a checked WRITE for every case but the plain one
 * (post_direct_run): the copy, COMM_EST, the completion, then s_hlock is
 * left. Out of line and reached by a tail call, so rvt_post_send calls
 * nothing on the plain case's way (with the checks split from the doing:
 * 154 -> 138 instructions per WR in bench/loopback_rate's callgrind row).
 */
#define DIRECT_FAST 1u    /* s_hlock was taken the fast way */
#define DIRECT_PEER_RTR 2u /* the peer is in RTR: this WRITE may raise COMM_EST */

static __attribute__((noinline)) int
post_direct_finish(struct rvt_qp *qp, const struct ibv_send_wr *wr, uint8_t *dst,
		   const uint8_t *src, uint32_t len, unsigned flags)
{
	rvt_copy_last(dst, src, len);
	if (unlikely(flags & DIRECT_PEER_RTR))
		direct_comm_est(qp->lb_peer);
	if (rvt_signaled(qp, wr->send_flags))
		direct_complete(qp, wr->wr_id, IBV_WC_RDMA_WRITE, len);
	urvt_bias_leave(&qp->s_hlock, flags & DIRECT_FAST);
	return 0;
}

/* The checked WRITE done, s_hlock left; returns 0. */
static inline __attribute__((always_inline)) int
post_direct_run(struct rvt_qp *qp, const struct ibv_send_wr *wr, const struct direct_write *d,
		bool fast)
{
	uint32_t psn;

	/* The SSN and PSNs it would have taken. */
	qp->s_ssn++;
	psn = (qp->s_next_psn + ((d->len - 1) >> __builtin_ctz(qp->pmtu))) & URVT_QPN_MASK;
	qp->s_next_psn = (psn + 1) & URVT_QPN_MASK;
	qp->s_rnr_retry = qp->rnr_retry;
	/* The plain case: 8 bytes (a copy without a call, ruc.h), no
	 * completion, the peer past RTR. */
	if (likely(d->len == 8 && d->pstate != IBV_QPS_RTR &&
		   !rvt_signaled(qp, wr->send_flags))) {
		rvt_copy_last(d->dst, d->src, 8);
		urvt_bias_leave(&qp->s_hlock, fast);
		return 0;
	}
	return post_direct_finish(qp, wr, d->dst, d->src, d->len,
				  (fast ? DIRECT_FAST : 0) |
					  (d->pstate == IBV_QPS_RTR ? DIRECT_PEER_RTR : 0));
}

/*
 * UD direct: a UD SEND of one packet, posted alone to an empty send queue
 * whose engine is idle, goes to the transport at once from a WQE on the
 * stack (transport->ud_send_direct): what rvt_post_one_wr, the engine's UD
 * branch and rvt_send_complete would do, in that order, without the trip
 * through the ring (the slot, the AV's snapshot, the engine token). A UD
 * send completes as soon as its packet is out, so under s_hlock, as for
 * post_direct, nothing can queue behind it before it has completed.
 *
 * Only the plain case is taken; anything else (an error to report, an
 * opcode or flag the plain case has no use for, a destination in this
 * process, a route the transport would have to change) leaves nothing
 * behind and returns false: the ordinary path then reports or queues it.
 * SGEs by lkey are checked as post_direct checks them (rvt_direct_key_ok,
 * no reference: s_hlock is held until the gather is done); inline data
 * is gathered from the application's buffers straight into the packet.
 */
#define RVT_UD_DIRECT_SGE 4

static __attribute__((noinline)) bool post_ud_direct(struct rvt_qp *qp,
						     const struct ibv_send_wr *wr)
{
	union { /* a WQE and room for its SGEs, as a slot of the ring has */
		struct rvt_swqe wqe;
		uint8_t room[sizeof(struct rvt_swqe) + RVT_UD_DIRECT_SGE * sizeof(struct rvt_sge)];
	} d;
	bool inl = wr->send_flags & IBV_SEND_INLINE;
	struct rvt_swqe *wqe = &d.wqe;
	struct rvt_ah *ah;
	uint64_t len = 0;
	uint32_t n = 0, gen;

	if ((wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) || wr->next ||
	    (wr->send_flags & ~(unsigned)(IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE)) ||
	    (uint32_t)wr->num_sge > RVT_UD_DIRECT_SGE || (uint32_t)wr->num_sge > qp->max_send_sge ||
	    !ud_ah_ok(qp, wr) || !sq_idle(qp)) /* W1, W7 */
		return false;
	ah = ibah_to_rvtah(wr->wr.ud.ah);
	ud_dest(qp, wr, wqe);
	if (rvt_ud_to_self(qp->rdi, &ah->av, wqe->wr.ud.remote_qpn))
		return false; /* the engine's ud_loopback */
	/* W10 (W11's max_inline for inline data), as rvt_post_from_sges and
	 * rvt_post_from_inline; zero-length SGEs take no segment */
	gen = rvt_key_memo_gen(&qp->rdi->lkey_table);
	for (int i = 0; i < wr->num_sge; i++) {
		const struct ibv_sge *sg = &wr->sg_list[i];
		uint8_t *va = (uint8_t *)(uintptr_t)sg->addr;

		if (!sg->length)
			continue;
		if (!inl && unlikely(!rvt_direct_key_ok(&qp->rdi->lkey_table, gen, qp->pd, sg->lkey,
							sg->addr, sg->length, 0,
							&qp->lb_lkey_memo, &va)))
			return false;
		wqe->sg_list[n++] = (struct rvt_sge){ .vaddr = va, .length = sg->length,
						      .sge_length = sg->length };
		len += sg->length;
	}
	/* W11 */
	if ((inl && len > qp->max_inline) || len > qp->pmtu)
		return false;

	wqe->wr_id = wr->wr_id;
	wqe->opcode = wr->opcode;
	wqe->send_flags = wr->send_flags;
	wqe->ex.imm_data = wr->imm_data;
	wqe->length = (uint32_t)len;
	wqe->num_sge = (uint16_t)n;
	wqe->wqe_flags = inl ? RVT_SWQE_INLINE : 0;
	wqe->ud_av = &ah->av;
	wqe->ssn = qp->s_ssn;
	wqe->psn = wqe->lpsn = qp->s_next_psn;
	if (!qp->rdi->transport->ud_send_direct(qp, wqe))
		return false;
	/* the WR is taken: its place in the send sequence, the same values */
	rvt_post_from_seq(qp, wqe, NULL, 0, false, len);
	if (rvt_signaled(qp, wr->send_flags))
		direct_complete(qp, wr->wr_id, IBV_WC_SEND, wqe->length);
	return true;
}

/* Everything but post_direct: a UD SEND sent now (post_ud_direct), else the
 * send queue (caller holds s_hlock). Out of line, so the direct path's
 * frame stays small. */
static __attribute__((noinline)) int post_send_queued(struct rvt_qp *qp, struct ibv_send_wr *wr,
						      struct ibv_send_wr **bad_wr, int state,
						      bool fast)
{
	int ret = 0, posted = 0;

	if (state == IBV_QPS_RTS && qp->ud_direct && wr && post_ud_direct(qp, wr)) {
		urvt_bias_leave(&qp->s_hlock, fast);
		return 0;
	}
	/* L1 (decision: *bad_wr is set, as libibverbs documents) */
	if (unlikely(!(ib_rvt_state_ops[state] & RVT_POST_SEND_OK))) {
		urvt_bias_leave(&qp->s_hlock, fast);
		*bad_wr = wr;
		return -EINVAL;
	}
	for (; wr; wr = wr->next) {
		ret = rvt_post_one_wr(qp, wr, NULL);
		if (unlikely(ret < 0)) {
			*bad_wr = wr;
			break;
		}
		/* S0: publish the slot to the engine (acquire of s_head in rvt_do_send). */
		if (ret)
			store_release(&qp->s_head, qp->s_head + 1);
		ret = 0;
		posted++;
	}
	urvt_bias_leave(&qp->s_hlock, fast);
	if (posted)
		rvt_schedule_send(qp);
	return ret;
}

/* Once s_hlock is held: a WRITE done at once (post_direct_run), else the rest. */
static inline __attribute__((always_inline)) int
post_send_held(struct rvt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr, bool fast)
{
	int state = rvt_qp_state(qp);
	struct direct_write d;

	if (state == IBV_QPS_RTS && qp->lb_direct && wr && post_direct(qp, wr, &d))
		return post_direct_run(qp, wr, &d, fast);
	return post_send_queued(qp, wr, bad_wr, state, fast);
}

/* s_hlock the slow way: the lock, which counts towards owning it. */
static __attribute__((noinline)) int post_send_locked(struct rvt_qp *qp, struct ibv_send_wr *wr,
						      struct ibv_send_wr **bad_wr)
{
	return post_send_held(qp, wr, bad_wr, urvt_bias_take_noted(&qp->s_hlock));
}

/* s_hlock is taken the fast way by the QP's one posting thread
 * (base/biaslock.h); a post that takes the lock counts towards that.
 * Every call here is a tail call (post_direct_finish, post_send_queued,
 * post_send_locked), so the direct WRITE's path saves no registers. */
int rvt_post_send(struct rvt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	if (unlikely(!urvt_bias_enter(&qp->s_hlock)))
		return post_send_locked(qp, wr, bad_wr);
	return post_send_held(qp, wr, bad_wr, true);
}

/*
 * The ibv_wr_* API (verbs/qp_ex.c) posts through the same rvt_post_one_wr.
 * Its contract differs from post_send in one way: ibv_wr_complete either
 * posts the whole batch or none of it (ibv_wr_post(3): "the entire posting
 * will be aborted"). So the slots are filled as the WRs come and s_head is
 * advanced once, at the end. s_hlock is held from start to end, as
 * providers hold their SQ lock between wr_start and wr_complete/wr_abort.
 */
_Thread_local char rvt_batch_marker;

void rvt_post_batch_start(struct rvt_qp *qp, struct rvt_post_batch *b)
{
	urvt_bias_lock(&qp->s_hlock);
	atomic_store_explicit(&qp->s_batch_owner, (uintptr_t)&rvt_batch_marker,
			      memory_order_relaxed);
	b->n = 0;
	b->n_local = 0;
	b->ssn = qp->s_ssn;
	b->next_psn = qp->s_next_psn;
	/* L1 first, so it wins over any WR's error as it does in post_send. */
	b->err = (ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_POST_SEND_OK) ? 0 : -EINVAL;
}

void rvt_post_batch_add(struct rvt_qp *qp, struct rvt_post_batch *b,
			const struct ibv_send_wr *wr)
{
	int ret;

	if (unlikely(b->err))
		return; /* nothing after the first failure is looked at */
	ret = rvt_post_one_wr(qp, wr, b);
	if (unlikely(ret < 0))
		b->err = ret;
	else
		b->n += (uint32_t)ret;
}

int rvt_post_batch_end(struct rvt_qp *qp, struct rvt_post_batch *b, bool commit)
{
	int ret = commit ? b->err : 0;
	uint32_t n = b->n; /* b belongs to the next batch once s_hlock is dropped */

	atomic_store_explicit(&qp->s_batch_owner, 0, memory_order_relaxed);

	/* L1 again: a reset stores RESET without s_hlock (it takes s_hlock
	 * only later, to drop the WQEs, and waits for us there). */
	if (commit && !ret && !(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_POST_SEND_OK))
		ret = -EINVAL;
	if (!commit || ret) {
		/* Unpublished slots: only their MR references need undoing. */
		for (uint32_t i = 0; i < n; i++)
			rvt_put_swqe(rvt_get_swqe_ptr(qp, qp->s_head + i));
		urvt_bias_unlock(&qp->s_hlock);
		return ret;
	}
	if (b->n_local)
		__atomic_fetch_add(&qp->local_ops_pending, b->n_local, __ATOMIC_RELAXED);
	qp->s_ssn = b->ssn;
	qp->s_next_psn = b->next_psn;
	/* S0 for the whole batch (acquire of s_head in rvt_do_send). */
	store_release(&qp->s_head, qp->s_head + n);
	urvt_bias_unlock(&qp->s_hlock);
	if (n)
		rvt_schedule_send(qp);
	return 0;
}

int rvt_post_recv(struct rvt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct rvt_rq *rq = &qp->rq;
	int ret = 0;
	bool fast;

	/* R1 (qp-semantics §3.1) */
	/* an XRC QP has no receive queue of its own (qp-semantics §16.3) */
	if (unlikely(qp->srq || rvt_qp_is_xrc(qp) ||
		     !(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_POST_RECV_OK))) {
		*bad_wr = wr;
		return -EINVAL;
	}
	fast = urvt_bias_take_noted(&rq->p_lock);
	for (; wr; wr = wr->next) {
		/* R4: in ERR the WR completes at once with a flush (checked under
		 * p_lock, which rvt_error_qp's flush also takes). */
		if (unlikely(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_FLUSH_RECV)) {
			struct ibv_wc wc = {
				.wr_id = wr->wr_id,
				.status = IBV_WC_WR_FLUSH_ERR,
				.opcode = IBV_WC_RECV,
				.qp_num = qp->qpn,
			};
			/* R2/R3 are still checked first */
			if ((uint32_t)wr->num_sge > rq->max_sge) {
				ret = -EINVAL;
			} else if (rq->head - load_acquire(&rq->tail) >= rq->size - 1) {
				ret = -ENOMEM;
			} else {
				rvt_cq_enter(qp->recv_cq, &wc, true);
				continue;
			}
		} else {
			ret = rvt_rq_post_one(rq, wr);
		}
		if (unlikely(ret)) {
			*bad_wr = wr;
			break;
		}
	}
	urvt_bias_leave(&rq->p_lock, fast);
	return ret;
}
