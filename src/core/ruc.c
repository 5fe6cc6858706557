/*
 * The send engine, WQE retirement, receive WQE consumption, SGE copies and
 * the in-process loopback path (rdmavt rvt_ruc_loopback, rvt_get_rwqe,
 * rvt_copy_sge, rvt_send_complete; qp-semantics §7, §8, §10).
 */
#include <errno.h>
#include <string.h>

#include "base/progress.h"
#include "core/mw.h"
#include "core/odp.h"
#include "core/ruc.h"
#include "core/rvt_api.h"
#include "core/transport.h"
#include "wire/aeth.h"
#include "wire/crc32.h"
#include "wire/grh.h"
#include "wire/hdr.h"

/* ------------------------------------------------------------------ */
/* SGE copies                                                         */
/* ------------------------------------------------------------------ */

static inline void sge_advance(struct rvt_sge_state *ss, uint32_t len, bool release)
{
	ss->sge.vaddr += len;
	ss->sge.length -= len;
	if (!ss->sge.length) {
		if (release)
			rvt_put_sge(&ss->sge);
		if (--ss->num_sge)
			ss->sge = *ss->sg_list++;
	}
}

static void copy_sge_bytes(struct rvt_sge_state *ss, const uint8_t *src, uint32_t length,
			   bool release, bool last)
{
	while (length) {
		uint32_t len = ss->sge.length < length ? ss->sge.length : length;
		if (rvt_sge_odp(&ss->sge))
			(void)rvt_odp_copy(ss->sge.vaddr, src, len); /* probed (odp.h) */
		else if (last)
			rvt_copy_tail(ss->sge.vaddr, src, len);
		else
			memmove(ss->sge.vaddr, src, len);
		sge_advance(ss, len, release);
		src += len;
		length -= len;
	}
}

/*
 * copy_last: the final 8 bytes (all of a message of 8 bytes or less) are
 * written after the rest, see rvt_copy_tail().
 */
void rvt_copy_sge(struct rvt_sge_state *ss, const void *data, uint32_t length,
		  bool release, bool copy_last)
{
	const uint8_t *src = data;

	if (copy_last) {
		uint32_t head = length > 8 ? length - 8 : 0;
		copy_sge_bytes(ss, src, head, release, false);
		copy_sge_bytes(ss, src + head, length - head, release, true);
		return;
	}
	copy_sge_bytes(ss, src, length, release, false);
}

/* The gather, and with crc set the CRC-32 of what it gathers continued
 * from *crc (one pass over the bytes where the CPU can: wire/crc32.h). */
static inline __attribute__((always_inline)) void copy_from_sge(void *buf,
								 struct rvt_sge_state *ss,
								 uint32_t length, uint32_t *crc)
{
	uint8_t *dst = buf;

	while (length) {
		uint32_t len = ss->sge.length < length ? ss->sge.length : length;
		if (rvt_sge_odp(&ss->sge)) {
			(void)rvt_odp_copy(dst, ss->sge.vaddr, len); /* probed (odp.h) */
			if (crc)
				*crc = urvt_crc32(*crc, dst, len);
		} else if (crc) {
			*crc = urvt_crc32_copy(*crc, dst, ss->sge.vaddr, len);
		} else {
			memmove(dst, ss->sge.vaddr, len);
		}
		sge_advance(ss, len, false);
		dst += len;
		length -= len;
	}
}

void rvt_copy_from_sge(void *buf, struct rvt_sge_state *ss, uint32_t length)
{
	copy_from_sge(buf, ss, length, NULL);
}

uint32_t rvt_copy_from_sge_crc(void *buf, struct rvt_sge_state *ss, uint32_t length,
			       uint32_t crc)
{
	copy_from_sge(buf, ss, length, &crc);
	return crc;
}

/* sge_to_sge when a side is ODP: every piece through rvt_odp_copy (both
 * sides may fault), the last 8 bytes of a copy_last on their own. */
static void odp_sge_to_sge(struct rvt_sge_state *dst, struct rvt_sge_state *src,
			   uint32_t length, bool release, bool copy_last)
{
	uint32_t tail = copy_last ? (length < 8 ? length : 8) : 0;

	while (length) {
		uint32_t len = length - tail ? length - tail : length;
		if (src->sge.length < len)
			len = src->sge.length;
		if (dst->sge.length < len)
			len = dst->sge.length;
		(void)rvt_odp_copy(dst->sge.vaddr, src->sge.vaddr, len); /* probed (odp.h) */
		sge_advance(src, len, false);
		sge_advance(dst, len, release);
		length -= len;
		if (length < tail)
			tail = length;
	}
}

/* Move length bytes from one SGE cursor to another (loopback data path). */
static void sge_to_sge(struct rvt_sge_state *dst, struct rvt_sge_state *src, uint32_t length,
		       bool release, bool copy_last)
{
	uint32_t head = copy_last && length > 8 ? length - 8 : (copy_last ? 0 : length);

	if (!length)
		return;
	if (rvt_sge_odp(&src->sge) || rvt_sge_odp(&dst->sge) || src->num_sge > 1 ||
	    dst->num_sge > 1) {
		/* a later segment may be ODP too: look at them all (rare) */
		bool odp = rvt_sge_odp(&src->sge) || rvt_sge_odp(&dst->sge);
		for (uint32_t i = 0; !odp && i + 1 < src->num_sge; i++)
			odp = rvt_sge_odp(&src->sg_list[i]);
		for (uint32_t i = 0; !odp && i + 1 < dst->num_sge; i++)
			odp = rvt_sge_odp(&dst->sg_list[i]);
		if (odp) {
			odp_sge_to_sge(dst, src, length, release, copy_last);
			return;
		}
	}
	/* One segment holds the whole message on each side: the usual case. */
	if (likely(src->sge.length >= length && dst->sge.length >= length)) {
		if (copy_last)
			rvt_copy_last(dst->sge.vaddr, src->sge.vaddr, length);
		else
			memmove(dst->sge.vaddr, src->sge.vaddr, length);
		sge_advance(src, length, false);
		sge_advance(dst, length, release);
		return;
	}
	while (head) {
		uint32_t len = src->sge.length < head ? src->sge.length : head;
		rvt_copy_sge(dst, src->sge.vaddr, len, release, false);
		sge_advance(src, len, false);
		head -= len;
		length -= len;
	}
	if (length) {
		uint8_t tail[8];
		rvt_copy_from_sge(tail, src, length);
		rvt_copy_sge(dst, tail, length, release, true);
	}
}

/* ------------------------------------------------------------------ */
/* Receive WQEs                                                       */
/* ------------------------------------------------------------------ */
void rvt_release_rsge(struct rvt_qp *qp)
{
	struct rvt_sge_state *ss = &qp->r_sge;

	if (!qp->r_wrid_valid)
		return;
	/* The current segment, then the ones not reached yet. */
	if (ss->num_sge) {
		rvt_put_sge(&ss->sge);
		for (uint32_t i = 1; i < ss->num_sge; i++)
			rvt_put_sge(&ss->sg_list[i - 1]);
	}
	ss->num_sge = 0;
	qp->r_flags &= ~RVT_R_REUSE_SGE;
}

/* rvt_get_rwqe (qp-semantics §7). Caller holds qp->r_lock. */
int rvt_get_rwqe(struct rvt_qp *qp, bool wr_id_only)
{
	struct rvt_srq *srq = qp->srq;
	struct rvt_rq *rq = srq ? &srq->rq : &qp->rq;
	struct rvt_pd *pd = srq ? srq->pd : qp->pd;
	struct rvt_rwqe *wqe;
	uint32_t tail, j = 0, len = 0;
	bool bad = false, fire_limit = false, fast;

	/* A WQE kept by a dropped UD packet is used again, untouched. */
	if (qp->r_flags & RVT_R_REUSE_SGE) {
		qp->r_flags &= ~RVT_R_REUSE_SGE;
		return 1;
	}
	fast = urvt_bias_take_noted(&rq->c_lock);
	if (!(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_RECV_OK)) {
		urvt_bias_leave(&rq->c_lock, fast);
		return 0;
	}
	tail = rq->tail;
	/* RQ-C1: pairs with the release of head in rvt_rq_post_one (RQ-P1). */
	if (tail == load_acquire(&rq->head)) {
		urvt_bias_leave(&rq->c_lock, fast);
		return 0;
	}
	wqe = rvt_get_rwqe_ptr(rq, tail);
	qp->r_wr_id = wqe->wr_id;
	if (!wr_id_only) {
		for (uint32_t i = 0; i < wqe->num_sge; i++) {
			int ret;
			if (!wqe->sg_list[i].length)
				continue;
			ret = rvt_lkey_ok(&qp->rdi->lkey_table, pd, &qp->r_sg_list[j], NULL,
					  &wqe->sg_list[i], IBV_ACCESS_LOCAL_WRITE);
			if (ret < 0) {
				bad = true;
				break;
			}
			/* an ODP buffer must be writable (core/odp.h); a merged
			 * segment (ret 0) is probed again as a whole */
			if (rvt_sge_odp(&qp->r_sg_list[j - !ret]) &&
			    !rvt_odp_probe(qp->r_sg_list[j - !ret].vaddr,
					   qp->r_sg_list[j - !ret].sge_length, true)) {
				j += (uint32_t)ret;
				bad = true;
				break;
			}
			j += (uint32_t)ret;
			len += wqe->sg_list[i].length;
		}
	}
	/* RQ-C2: the slot is free for post_recv once tail moves (RQ-P0);
	 * everything needed has been copied out above. */
	store_release(&rq->tail, tail + 1);
	if (srq) {
		uint32_t limit = atomic_load_explicit(&srq->limit, memory_order_relaxed);
		if (limit && load_acquire(&rq->head) - rq->tail < limit) {
			atomic_store(&srq->limit, 0);
			fire_limit = true;
		}
	}
	urvt_bias_leave(&rq->c_lock, fast);
	if (fire_limit)
		urvt_dispatch_async_event(srq->uctx, IBV_EVENT_SRQ_LIMIT_REACHED, srq);

	if (bad) {
		struct ibv_wc wc = {
			.wr_id = qp->r_wr_id,
			.status = IBV_WC_LOC_PROT_ERR,
			.opcode = IBV_WC_RECV,
			.qp_num = qp->qpn,
		};
		for (uint32_t i = 0; i < j; i++)
			rvt_put_sge(&qp->r_sg_list[i]);
		rvt_cq_enter(qp->recv_cq, &wc, true);
		return -1;
	}
	qp->r_len = len;
	qp->r_rcv_len = 0;
	rvt_sge_state_init(&qp->r_sge, qp->r_sg_list, j, len);
	qp->r_wrid_valid = true;
	return 1;
}

/* ------------------------------------------------------------------ */
/* Send completion                                                    */
/* ------------------------------------------------------------------ */
void rvt_put_swqe(struct rvt_swqe *wqe)
{
	if (wqe->wqe_flags & RVT_SWQE_INLINE)
		return;
	for (uint32_t i = 0; i < wqe->num_sge; i++)
		rvt_put_sge(&wqe->sg_list[i]);
}

static const enum ibv_wc_opcode wr_to_wc_opcode[IBV_WR_ATOMIC_WRITE + 1] = {
	[IBV_WR_RDMA_WRITE] = IBV_WC_RDMA_WRITE,
	[IBV_WR_RDMA_WRITE_WITH_IMM] = IBV_WC_RDMA_WRITE,
	[IBV_WR_SEND] = IBV_WC_SEND,
	[IBV_WR_SEND_WITH_IMM] = IBV_WC_SEND,
	[IBV_WR_RDMA_READ] = IBV_WC_RDMA_READ,
	[IBV_WR_ATOMIC_CMP_AND_SWP] = IBV_WC_COMP_SWAP,
	[IBV_WR_ATOMIC_FETCH_AND_ADD] = IBV_WC_FETCH_ADD,
	[IBV_WR_LOCAL_INV] = IBV_WC_LOCAL_INV,
	[IBV_WR_BIND_MW] = IBV_WC_BIND_MW,
	[IBV_WR_SEND_WITH_INV] = IBV_WC_SEND,
	[IBV_WR_ATOMIC_WRITE] = IBV_WC_ATOMIC_WRITE,
};

/*
 * ATOMIC_WRITE's target (qp-semantics §2.10), one rule for the in-process
 * path and the responder: remote write access for 8 bytes, an aligned
 * address, then one atomic 8-byte store of the bytes as they came.
 */
enum rvt_rkey_res rvt_atomic_write(struct rvt_qp *qp, uint64_t va, uint32_t rkey, uint64_t val)
{
	struct rvt_sge sge;
	enum rvt_rkey_res r = rvt_chk_rkey(qp, &sge, va, sizeof(val), rkey,
					   IBV_ACCESS_REMOTE_WRITE);

	if (r != RVT_RKEY_OK)
		return r;
	if (va & (sizeof(val) - 1)) {
		rvt_put_sge(&sge);
		return RVT_RKEY_INV;
	}
	__atomic_store_n((uint64_t *)(void *)sge.vaddr, val, __ATOMIC_SEQ_CST);
	rvt_put_sge(&sge);
	return RVT_RKEY_OK;
}

/*
 * rvt_send_complete / rvt_qp_complete_swqe (qp-semantics §2.9): retire the
 * oldest WQE, then write its CQE if it is signaled or failed. Engine context.
 */
void rvt_send_complete(struct rvt_qp *qp, struct rvt_swqe *wqe, enum ibv_wc_status status)
{
	bool signal = rvt_signaled(qp, wqe->send_flags) || status != IBV_WC_SUCCESS;
	struct ibv_wc wc;

	if (!(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_OR_FLUSH_SEND))
		return;
	if (signal) {
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = wqe->wr_id;
		wc.status = status;
		wc.opcode = wr_to_wc_opcode[wqe->opcode];
		wc.byte_len = wqe->length;
		wc.qp_num = qp->qpn;
	}
	if (rvt_swqe_rd_atomic(wqe)) {
		if (qp->s_rd_atomic_outstanding)
			qp->s_rd_atomic_outstanding--;
	}
	if ((wqe->opcode == IBV_WR_LOCAL_INV || wqe->opcode == IBV_WR_BIND_MW) &&
	    !(wqe->wqe_flags & RVT_SWQE_LOCAL_DONE) && qp->local_ops_pending)
		__atomic_fetch_sub(&qp->local_ops_pending, 1, __ATOMIC_RELAXED);
	rvt_put_swqe(wqe);
	/* s_cur and sq_draining are also read by modify/query (SQD): atomic
	 * accesses, engine is the only writer of s_cur */
	if (qp->s_cur == qp->s_last)
		WRITE_ONCE(qp->s_cur, qp->s_cur + 1);
	if (qp->s_acked == qp->s_last)
		qp->s_acked++;
	/* S1: the slot is free for post_send (acquire in sq_full). */
	store_release(&qp->s_last, qp->s_last + 1);
	if (READ_ONCE(qp->sq_draining) && qp->s_last == load_acquire(&qp->s_head))
		WRITE_ONCE(qp->sq_draining, 0);
	if (signal && !rvt_cq_enter(qp->send_cq, &wc, status != IBV_WC_SUCCESS))
		rvt_error_qp(qp, IBV_WC_LOC_QP_OP_ERR);
}

/* ------------------------------------------------------------------ */
/* Loopback (rvt_ruc_loopback, qp-semantics §10)                      */
/* ------------------------------------------------------------------ */
/* The first three are rvt_chk_rkey's answers (keys.h), so they pass through. */
enum lb_result {
	LB_OK = RVT_RKEY_OK,
	LB_INV = RVT_RKEY_INV,
	LB_ACC = RVT_RKEY_ACC,
	LB_RNR,
	LB_OP_ERR,
	LB_LOC_QP_OP,
};

/*
 * Enter a receive completion; a full CQ puts the responder in ERR. Returns
 * true if the caller must raise LAST_WQE_REACHED (after unlocking r_lock).
 */
static bool responder_complete(struct rvt_qp *qp, struct ibv_wc *wc, bool solicited)
{
	qp->r_wrid_valid = false;
	if (!rvt_cq_enter(qp->recv_cq, wc, solicited))
		return rvt_error_qp_locked(qp, IBV_WC_LOC_QP_OP_ERR);
	return false;
}

/* Execute one RC/UC WQE against the responder; caller holds qp->r_lock. */
static enum lb_result loopback_execute(struct rvt_qp *sqp, struct rvt_qp *qp,
				       struct rvt_swqe *wqe, struct ibv_wc *wc, bool *recv_cqe)
{
	struct rvt_sge_state src;
	enum rvt_rkey_res rres;
	struct rvt_sge rsge;
	int ret;

	rvt_sge_state_init(&src, wqe->sg_list, wqe->num_sge, wqe->length);
	*recv_cqe = false;
	/* only the opcodes that produce a receive completion fill wc */
	if ((1u << wqe->opcode) & (1u << IBV_WR_RDMA_WRITE_WITH_IMM | 1u << IBV_WR_SEND |
				   1u << IBV_WR_SEND_WITH_IMM | 1u << IBV_WR_SEND_WITH_INV))
		memset(wc, 0, sizeof(*wc));

	switch (wqe->opcode) {
	case IBV_WR_SEND_WITH_INV:
		if (!rvt_invalidate_rkey(qp, wqe->ex.invalidate_rkey)) {
			wc->wc_flags = IBV_WC_WITH_INV;
			wc->invalidated_rkey = wqe->ex.invalidate_rkey;
		}
		/* fall through */
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		ret = rvt_get_rwqe(qp, false);
		if (ret < 0)
			return LB_OP_ERR;
		if (ret == 0)
			return LB_RNR;
		if (wqe->length > qp->r_len)
			return LB_INV; /* oversized SEND */
		if (wqe->opcode == IBV_WR_SEND_WITH_IMM) {
			wc->wc_flags = IBV_WC_WITH_IMM;
			wc->imm_data = wqe->ex.imm_data;
		}
		sge_to_sge(&qp->r_sge, &src, wqe->length, true, false);
		rvt_release_rsge(qp);
		wc->opcode = IBV_WC_RECV;
		*recv_cqe = true;
		return LB_OK;

	case IBV_WR_RDMA_WRITE_WITH_IMM:
		/* before the receive WQE: a forbidden WRITE never waits for one */
		if (!(qp->qp_access_flags & IBV_ACCESS_REMOTE_WRITE))
			return LB_INV;
		ret = rvt_get_rwqe(qp, true);
		if (ret < 0)
			return LB_OP_ERR;
		if (ret == 0)
			return LB_RNR;
		wc->wc_flags = IBV_WC_WITH_IMM;
		wc->imm_data = wqe->ex.imm_data;
		wc->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
		*recv_cqe = true;
		/* fall through */
	case IBV_WR_RDMA_WRITE:
		rres = rvt_chk_rkey(qp, &rsge, wqe->wr.rdma.remote_addr, wqe->length,
				    wqe->wr.rdma.rkey, IBV_ACCESS_REMOTE_WRITE);
		if (rres != RVT_RKEY_OK)
			return (enum lb_result)rres;
		if (wqe->length) {
			struct rvt_sge_state dst;
			rvt_sge_state_init(&dst, &rsge, 1, wqe->length);
			sge_to_sge(&dst, &src, wqe->length, true, true);
		}
		return LB_OK;

	case IBV_WR_RDMA_READ:
		rres = rvt_chk_rkey(qp, &rsge, wqe->wr.rdma.remote_addr, wqe->length,
				    wqe->wr.rdma.rkey, IBV_ACCESS_REMOTE_READ);
		if (rres != RVT_RKEY_OK)
			return (enum lb_result)rres;
		if (wqe->length) {
			struct rvt_sge_state rsrc;
			rvt_sge_state_init(&rsrc, &rsge, 1, wqe->length);
			sge_to_sge(&src, &rsrc, wqe->length, false, false);
			rvt_put_sge(&rsge);
		}
		return LB_OK;

	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD: {
		uint64_t *target, orig;
		rres = rvt_chk_rkey(qp, &rsge, wqe->wr.atomic.remote_addr, sizeof(uint64_t),
				    wqe->wr.atomic.rkey, IBV_ACCESS_REMOTE_ATOMIC);
		if (rres != RVT_RKEY_OK)
			return (enum lb_result)rres;
		target = (uint64_t *)(void *)rsge.vaddr;
		if (wqe->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			orig = __atomic_fetch_add(target, wqe->wr.atomic.compare_add,
						  __ATOMIC_SEQ_CST);
		} else {
			orig = wqe->wr.atomic.compare_add;
			__atomic_compare_exchange_n(target, &orig, wqe->wr.atomic.swap, false,
						    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		}
		rvt_put_sge(&rsge);
		/* the original value goes to the requester's first SGE */
		rvt_copy_sge(&src, &orig, sizeof(orig), false, false);
		return LB_OK;
	}
	case IBV_WR_ATOMIC_WRITE:
		return (enum lb_result)rvt_atomic_write(qp, wqe->wr.atomic.remote_addr,
							wqe->wr.atomic.rkey,
							wqe->wr.atomic.compare_add);
	default:
		return LB_LOC_QP_OP;
	}
}

/* RNR: retry later from the progress thread, or give up (qp-semantics §10 table). */
static bool loopback_rnr(struct rvt_qp *sqp, struct rvt_swqe *wqe, struct rvt_qp *qp)
{
	if (sqp->type == IBV_QPT_UC) {
		rvt_send_complete(sqp, wqe, IBV_WC_SUCCESS);
		return true;
	}
	if (!sqp->s_rnr_retry) {
		rvt_send_complete(sqp, wqe, IBV_WC_RNR_RETRY_EXC_ERR);
		rvt_error_qp(sqp, IBV_WC_WR_FLUSH_ERR);
		return true;
	}
	rvt_add_rnr_timer(sqp, qp->min_rnr_timer);
	return false;
}

static bool ruc_loopback_one(struct rvt_qp *sqp, struct rvt_swqe *wqe);

/*
 * Returns true if the WQE was retired (the engine may continue).
 *
 * The responder's receive completion is entered before the sender's send
 * completion, and its event, signalled at once, woke the peer application,
 * which could answer (on another CPU) before our send's completion was
 * entered: the sender then took the reply's receive event before its own
 * send's, the other way round from rxe, whose ACK completes the send before
 * the peer's application runs; perftest -e (send and receive CQs on one
 * channel) then hangs (tests/unit/test_verbs_channel.c, in-process). The
 * events of one loopback WQE are held until both CQEs are in, and the
 * sender's goes first (core/cq.c rvt_cq_events_hold).
 */
static bool rvt_ruc_loopback(struct rvt_qp *sqp, struct rvt_swqe *wqe)
{
	bool was_held = rvt_cq_events_hold();
	uint32_t since = rvt_cq_events_held();
	bool done = ruc_loopback_one(sqp, wqe);

	rvt_cq_events_first(since, sqp->send_cq);
	rvt_cq_events_release(was_held);
	return done;
}

static bool ruc_loopback_one(struct rvt_qp *sqp, struct rvt_swqe *wqe)
{
	enum ibv_wc_status send_status = IBV_WC_SUCCESS, recv_status = IBV_WC_SUCCESS;
	struct rvt_qp *qp;
	struct ibv_wc wc;
	enum lb_result res;
	bool recv_cqe, lastwqe = false, rfast;

	qp = rvt_lookup_qpn(sqp->rdi, sqp->remote_qpn);
	if (!qp || qp->type != sqp->type ||
	    !(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_RECV_OK)) {
		/* The packet would be dropped: RC times out, UC just loses it. */
		if (qp)
			rvt_put_qp(qp);
		if (sqp->type == IBV_QPT_RC) {
			rvt_send_complete(sqp, wqe, IBV_WC_RETRY_EXC_ERR);
			rvt_error_qp(sqp, IBV_WC_WR_FLUSH_ERR);
		} else {
			rvt_send_complete(sqp, wqe, IBV_WC_SUCCESS);
		}
		return true;
	}

	rfast = urvt_bias_take_noted(&qp->r_lock);
	/* Re-check under the lock: the responder may have left RTR/RTS. */
	if (!(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_RECV_OK))
		res = LB_INV;
	else
		res = loopback_execute(sqp, qp, wqe, &wc, &recv_cqe);
	switch (res) {
	case LB_OK:
		if (recv_cqe) {
			wc.wr_id = qp->r_wr_id;
			wc.status = IBV_WC_SUCCESS;
			wc.byte_len = wqe->length;
			wc.qp_num = qp->qpn;
			wc.src_qp = sqp->qpn;
			lastwqe = responder_complete(qp, &wc, wqe->send_flags & IBV_SEND_SOLICITED);
		}
		if (!qp->comm_est && rvt_qp_state(qp) == IBV_QPS_RTR) {
			qp->comm_est = true;
			urvt_bias_leave(&qp->r_lock, rfast);
			urvt_dispatch_async_event(qp->uctx, IBV_EVENT_COMM_EST, qp);
		} else {
			urvt_bias_leave(&qp->r_lock, rfast);
		}
		if (lastwqe)
			urvt_dispatch_async_event(qp->uctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp);
		rvt_put_qp(qp);
		sqp->s_rnr_retry = sqp->rnr_retry;
		rvt_send_complete(sqp, wqe, IBV_WC_SUCCESS);
		return true;
	case LB_RNR:
		urvt_bias_leave(&qp->r_lock, rfast);
		{
			bool done = loopback_rnr(sqp, wqe, qp);
			rvt_put_qp(qp);
			return done;
		}
	case LB_OP_ERR:
		/* the bad WQE already completed with LOC_PROT_ERR */
		send_status = IBV_WC_REM_OP_ERR;
		recv_status = IBV_WC_LOC_QP_OP_ERR;
		break;
	case LB_INV:
		send_status = sqp->type == IBV_QPT_RC ? IBV_WC_REM_INV_REQ_ERR : IBV_WC_SUCCESS;
		/* An oversized SEND reports the IBTA local length error on the
		 * receive (as hardware does; rdmavt says LOC_QP_OP_ERR,
		 * rxe REM_INV_REQ_ERR; see docs/deviations.md). */
		recv_status = (qp->r_wrid_valid && wqe->length > qp->r_len &&
			       (wqe->opcode == IBV_WR_SEND || wqe->opcode == IBV_WR_SEND_WITH_IMM ||
				wqe->opcode == IBV_WR_SEND_WITH_INV)) ?
				      IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_QP_OP_ERR;
		break;
	case LB_ACC:
		send_status = IBV_WC_REM_ACCESS_ERR;
		recv_status = IBV_WC_LOC_PROT_ERR;
		break;
	case LB_LOC_QP_OP:
		urvt_bias_leave(&qp->r_lock, rfast);
		rvt_put_qp(qp);
		rvt_send_complete(sqp, wqe, IBV_WC_LOC_QP_OP_ERR);
		if (sqp->type == IBV_QPT_RC)
			rvt_error_qp(sqp, IBV_WC_WR_FLUSH_ERR);
		return true;
	}
	/* The responder goes to ERR (rvt_rc_error), then the requester. */
	lastwqe = rvt_error_qp_locked(qp, recv_status);
	urvt_bias_leave(&qp->r_lock, rfast);
	if (lastwqe)
		urvt_dispatch_async_event(qp->uctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp);
	rvt_put_qp(qp);
	rvt_send_complete(sqp, wqe, send_status);
	if (sqp->type == IBV_QPT_RC)
		rvt_error_qp(sqp, IBV_WC_WR_FLUSH_ERR);
	return true;
}

/*
 * UD to a QP of this process (rdmavt drivers' ud_loopback): Q_Key check,
 * the 40-byte GRH image, then the payload. Drops are silent; the sender's
 * WQE always completes successfully.
 */
static void ud_loopback(struct rvt_qp *sqp, struct rvt_swqe *wqe)
{
	struct rvt_dev_info *rdi = sqp->rdi;
	struct rvt_qp *qp = rvt_lookup_qpn(rdi, wqe->wr.ud.remote_qpn);
	struct urvt_ipinfo ip;
	uint8_t grh[URVT_GRH_BYTES];
	struct rvt_sge_state src;
	struct ibv_wc wc;
	uint32_t roce_len;
	bool lastwqe = false, rfast;
	int ret;

	if (!qp)
		return;
	if (qp->type != IBV_QPT_UD || wqe->wr.ud.remote_qkey != qp->qkey ||
	    !(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_RECV_OK))
		goto out_put;

	rfast = urvt_bias_take_noted(&qp->r_lock);
	ret = rvt_get_rwqe(qp, false);
	if (ret < 0) {
		lastwqe = rvt_error_qp_locked(qp, IBV_WC_LOC_QP_OP_ERR);
		urvt_bias_leave(&qp->r_lock, rfast);
		if (lastwqe)
			urvt_dispatch_async_event(qp->uctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp);
		goto out_put;
	}
	if (ret == 0)
		goto out_unlock;
	if (wqe->length + URVT_GRH_BYTES > qp->r_len) {
		/* too small: dropped, the WQE waits for the next packet */
		qp->r_flags |= RVT_R_REUSE_SGE;
		goto out_unlock;
	}
	/* The IP header this packet would have had on the wire. */
	memset(&ip, 0, sizeof(ip));
	memcpy(ip.sgid, rdi->gid.raw, 16);
	memcpy(ip.dgid, wqe->ud_av->attr.grh.dgid.raw, 16);
	ip.sport = URVT_ROCE_UDP_PORT;
	ip.dport = URVT_ROCE_UDP_PORT;
	ip.tclass = wqe->ud_av->attr.grh.traffic_class;
	ip.hop_limit = wqe->ud_av->attr.grh.hop_limit;
	ip.flow_label = wqe->ud_av->attr.grh.flow_label;
	ip.df = true;
	/* BTH + DETH (+ ImmDt) + payload + pad + ICRC */
	roce_len = 12 + 8 + (wqe->opcode == IBV_WR_SEND_WITH_IMM ? 4 : 0) +
		   ((wqe->length + 3) & ~3u) + 4;
	urvt_grh_fill(grh, &ip, roce_len);
	rvt_copy_sge(&qp->r_sge, grh, URVT_GRH_BYTES, true, false);
	rvt_sge_state_init(&src, wqe->sg_list, wqe->num_sge, wqe->length);
	sge_to_sge(&qp->r_sge, &src, wqe->length, true, false);
	rvt_release_rsge(qp);

	memset(&wc, 0, sizeof(wc));
	wc.wr_id = qp->r_wr_id;
	wc.status = IBV_WC_SUCCESS;
	wc.opcode = IBV_WC_RECV;
	wc.byte_len = wqe->length + URVT_GRH_BYTES;
	wc.qp_num = qp->qpn;
	wc.src_qp = sqp->qpn;
	wc.wc_flags = IBV_WC_GRH;
	if (wqe->opcode == IBV_WR_SEND_WITH_IMM) {
		wc.wc_flags |= IBV_WC_WITH_IMM;
		wc.imm_data = wqe->ex.imm_data;
	}
	wc.pkey_index = qp->pkey_index;
	/* the GRH image is an IP header as on the network, so sl names its
	 * type as there (transport/resp.c ud_rcv), not the AV's SL as rdmavt */
	wc.sl = urvt_ipinfo_is_v4(&ip) ? 2 : 1;
	lastwqe = responder_complete(qp, &wc, wqe->send_flags & IBV_SEND_SOLICITED);
out_unlock:
	urvt_bias_leave(&qp->r_lock, rfast);
	if (lastwqe)
		urvt_dispatch_async_event(qp->uctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp);
out_put:
	rvt_put_qp(qp);
}

/* ------------------------------------------------------------------ */
/* The engine                                                         */
/* ------------------------------------------------------------------ */
static void flush_send_queue(struct rvt_qp *qp)
{
	uint32_t head = load_acquire(&qp->s_head);

	while (qp->s_last != head) {
		struct rvt_swqe *wqe = rvt_get_swqe_ptr(qp, qp->s_last);
		/* A reset (modify or destroy) may land mid-flush: it discards
		 * the rest itself, and rvt_send_complete no longer retires
		 * anything, so looping on would never end. */
		if (!(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_FLUSH_SEND))
			return;
		rvt_send_complete(qp, wqe, IBV_WC_WR_FLUSH_ERR);
	}
}

/* A queued LOCAL_INV or BIND_MW reaching the engine (qp-semantics §2.5). */
static void do_local_op(struct rvt_qp *qp, struct rvt_swqe *wqe)
{
	rvt_send_complete(qp, wqe, rvt_do_local_op(qp, wqe));
}

static void rvt_do_send(struct rvt_qp *qp)
{
	/* Nothing to do outside RTS/SQD/SQE/ERR. Looked at first: a run
	 * queued while the QP was in ERR may start after it went RESET ->
	 * INIT -> RTR, and the state (acquire) orders the AV that modify
	 * wrote before it. The transport's completer queue is empty there
	 * (dropped at reset; responses are accepted only in RTS/SQD). */
	if (!(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_OR_FLUSH_SEND))
		return;
	/* Remote RC/UC peers: the protocol engines (src/transport) run the
	 * whole requester and completer, flush and RNR/retry waits included
	 * (they keep state across calls the loop below would not see). */
	if (qp->type != IBV_QPT_UD && qp->rdi->transport && !qp->remote_av.loopback) {
		qp->rdi->transport->do_send(qp);
		return;
	}
	for (;;) {
		int ops = ib_rvt_state_ops[rvt_qp_state(qp)];
		struct rvt_swqe *wqe;
		uint32_t head;

		if (!(ops & RVT_PROCESS_OR_FLUSH_SEND))
			return;
		if (ops & RVT_FLUSH_SEND) {
			flush_send_queue(qp);
			return;
		}
		if (qp->s_flags & RVT_S_WAIT_RNR) {
			if (!atomic_exchange(&qp->s_rnr_fired, false))
				return;
			qp->s_flags &= ~RVT_S_WAIT_RNR;
		}
		if (qp->s_flags & RVT_S_WAIT_ACK)
			return;
		/* S0': pairs with the release of s_head in rvt_post_one_wr. */
		head = load_acquire(&qp->s_head);
		if (qp->s_last == head)
			return;
		/* SQD: finish what is in progress, start nothing new. */
		if (!(ops & RVT_PROCESS_NEXT_SEND_OK) && qp->s_cur == qp->s_last)
			return;
		wqe = rvt_get_swqe_ptr(qp, qp->s_last);
		if (wqe->opcode == IBV_WR_LOCAL_INV || wqe->opcode == IBV_WR_BIND_MW) {
			do_local_op(qp, wqe);
			continue;
		}
		if (unlikely(wqe->wqe_flags & RVT_SWQE_ODP) && !rvt_odp_chk_swqe(wqe)) {
			/* an ODP page fault that cannot be served (core/odp.h) */
			rvt_send_complete(qp, wqe, IBV_WC_LOC_PROT_ERR);
			rvt_error_qp(qp, IBV_WC_WR_FLUSH_ERR);
			continue;
		}
		if (qp->type == IBV_QPT_UD) {
			if (rvt_ud_to_self(qp->rdi, wqe->ud_av, wqe->wr.ud.remote_qpn))
				ud_loopback(qp, wqe);
			else if (qp->rdi->transport)
				qp->rdi->transport->ud_send(qp, wqe);
			rvt_send_complete(qp, wqe, IBV_WC_SUCCESS);
			continue;
		}
		if (qp->remote_av.loopback || !qp->rdi->transport) {
			if (!rvt_ruc_loopback(qp, wqe))
				return;
			continue;
		}
		/* Remote RC/UC peers: the protocol engines take over. */
		qp->rdi->transport->do_send(qp);
		return;
	}
}

/* engines this thread runs now (nested: a stalled post receives inline) */
static URVT_TLS unsigned engines_on_thread;

bool rvt_engine_on_thread(void)
{
	return engines_on_thread != 0;
}

void rvt_schedule_send_held(struct rvt_qp *qp)
{
	uint32_t seen;

	engines_on_thread++;
	do {
		seen = atomic_load_explicit(&qp->s_sched, memory_order_acquire);
		rvt_do_send(qp);
	} while (atomic_fetch_sub_explicit(&qp->s_sched, seen, memory_order_acq_rel) != seen);
	engines_on_thread--;
}

void rvt_schedule_send(struct rvt_qp *qp)
{
	/* Whoever moves s_sched from 0 runs the engine; others leave a mark
	 * that makes the runner go round once more. */
	if (atomic_fetch_add_explicit(&qp->s_sched, 1, memory_order_acq_rel))
		return;
	rvt_schedule_send_held(qp);
}

void rvt_schedule_send_async(struct rvt_qp *qp)
{
	urvt_progress_queue_work(qp->rdi->progress, &qp->s_work);
}

void rvt_send_work_fn(struct urvt_work *w)
{
	rvt_schedule_send(container_of(w, struct rvt_qp, s_work));
}

void rvt_add_rnr_timer(struct rvt_qp *qp, uint8_t code)
{
	if (qp->rnr_retry != 7)
		qp->s_rnr_retry--;
	qp->s_flags |= RVT_S_WAIT_RNR;
	atomic_store(&qp->s_rnr_fired, false);
	urvt_timer_mod(qp->rdi->progress, &qp->s_rnr_timer, urvt_now_ns() + urvt_rnr_timer_ns(code));
}

void rvt_rnr_timer_fn(struct urvt_timer *t)
{
	struct rvt_qp *qp = container_of(t, struct rvt_qp, s_rnr_timer);

	/* s_flags is engine state: the engine clears WAIT_RNR when it sees this. */
	atomic_store(&qp->s_rnr_fired, true);
	rvt_schedule_send(qp);
}

void rvt_retry_timer_fn(struct urvt_timer *t)
{
	struct rvt_qp *qp = container_of(t, struct rvt_qp, s_timer);

	if (qp->rdi->transport)
		qp->rdi->transport->retry_timeout(qp);
}
