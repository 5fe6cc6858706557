/*
 * Completer (rc-protocol.md §4) and the transport's send-engine entry
 * (transport->do_send). Engine context: the s_sched holder owns s_last,
 * s_cur, the retry counters and tp.*. Responses reach it through the QP's
 * completer queue (tp.rxq), filled by whichever thread receives them.
 */
#include <string.h>

#include "base/progress.h"
#include "core/ruc.h"
#include "core/rvt_api.h"
#include "transport/net.h"
#include "transport/tp.h"
#include "wire/aeth.h"
#include "wire/psn.h"

bool urvt_retire(struct rvt_qp *qp, struct rvt_swqe *wqe, enum ibv_wc_status st)
{
	bool cur = qp->s_cur == qp->s_last;
	uint32_t last = qp->s_last;

	if (qp_tp(qp)->rd_valid && qp_tp(qp)->rd_idx == qp->s_last)
		qp_tp(qp)->rd_valid = false;
	rvt_send_complete(qp, wqe, st);
	/* a reset (modify or destroy) landed: rvt_send_complete retires
	 * nothing any more and the reset discards the rest itself */
	if (qp->s_last == last)
		return false;
	if (cur) {
		/* rvt_send_complete moved s_cur along with s_last */
		qp->s_offset = 0;
		qp_tp(qp)->cur_started = false;
		qp_tp(qp)->cur_valid = false;
	}
	return true;
}

/* Forward progress (§4): reload the retry counters, restart the timer base. */
static void progress(struct rvt_qp *qp)
{
	qp->s_retry = qp->retry_cnt;
	qp->s_rnr_retry = qp->rnr_retry;
	qp_tp(qp)->progress_ns = urvt_now_ns();
	qp_tp(qp)->probe_sent = false;
}

/* Tail-loss probe interval: 1/16 of the retransmit timeout, >= 200 us. */
static uint64_t probe_ns(const struct rvt_qp *qp)
{
	uint64_t p = qp->timeout_ns / 16;

	return p < 200000 ? 200000 : p;
}

/* When the retransmit timer should next look at this QP. */
static uint64_t timer_deadline(const struct rvt_qp *qp)
{
	if (!qp_tp(qp)->probe_sent && probe_ns(qp) < qp->timeout_ns)
		return qp_tp(qp)->progress_ns + probe_ns(qp);
	return qp_tp(qp)->progress_ns + qp->timeout_ns;
}

static void advance_comp_psn(struct rvt_qp *qp, uint32_t psn)
{
	if (urvt_psn_cmp(psn, qp_tp(qp)->comp_psn) > 0) {
		qp_tp(qp)->comp_psn = psn;
		progress(qp);
	}
}

/* Complete with an error status and take the QP to ERR (§4 "Error"). */
static void comp_error(struct rvt_qp *qp, struct rvt_swqe *wqe, enum ibv_wc_status st)
{
	URVT_DBG("qp %u: send wr %#llx fails with status %d", qp->qpn,
		 (unsigned long long)wqe->wr_id, (int)st);
	urvt_retire(qp, wqe, st);
	rvt_error_qp(qp, IBV_WC_WR_FLUSH_ERR);
}

/* §4.3: retry from comp_psn, counting against retry_cnt (IBTA: 7 = 7 retries). */
static void comp_retry(struct rvt_qp *qp, bool by_nak)
{
	struct rvt_swqe *wqe;

	if (qp->s_last == load_acquire(&qp->s_head))
		return;
	/* one rewind per NAK'd gap: a duplicate NAK for it changes nothing */
	if (by_nak && qp_tp(qp)->rewind_valid && qp_tp(qp)->rewind_by_nak &&
	    qp_tp(qp)->rewind_psn == qp_tp(qp)->comp_psn)
		return;
	wqe = rvt_get_swqe_ptr(qp, qp->s_last);
	if (!qp->s_retry) {
		qp_count(qp, URVT_CTR_RETRY_EXC, 1);
		comp_error(qp, wqe, IBV_WC_RETRY_EXC_ERR);
		return;
	}
	qp->s_retry--;
	qp_tp(qp)->rewind_valid = true;
	qp_tp(qp)->rewind_by_nak = by_nak;
	qp_tp(qp)->rewind_psn = qp_tp(qp)->comp_psn;
	urvt_req_rewind(qp);
	qp_tp(qp)->progress_ns = urvt_now_ns();
}

/* Is wqe (the one at s_last) known to the responder at all? */
static bool wqe_sent(struct rvt_qp *qp, struct rvt_swqe *wqe)
{
	return qp->s_last != qp->s_cur || qp_tp(qp)->cur_started || qp->s_offset ||
	       (wqe->wqe_flags & RVT_SWQE_T_SENT);
}

static void comp_drop(struct rvt_qp *qp, int reason)
{
	qp_count(qp, URVT_CTR_DROP_BASE + (enum urvt_ctr)reason, 1);
}

/* READ response payload (§4 step 5). Returns false to drop the packet. */
static bool comp_read_data(struct rvt_qp *qp, struct rvt_swqe *wqe, const struct urvt_pkt *pkt)
{
	uint32_t idx = (uint32_t)urvt_psn_diff(pkt->psn, wqe->psn);
	uint64_t off = (uint64_t)idx * qp->pmtu;
	uint32_t want;
	uint8_t op = pkt->opcode;

	if (off > wqe->length)
		return false;
	want = wqe->length - (uint32_t)off;
	if (want > qp->pmtu)
		want = qp->pmtu;
	/* position in the message must match the opcode */
	switch (op) {
	case URVT_OP_RC_RDMA_READ_RESPONSE_ONLY:
		if (pkt->psn != wqe->psn || wqe->lpsn != wqe->psn)
			return false;
		break;
	case URVT_OP_RC_RDMA_READ_RESPONSE_FIRST:
		if (pkt->psn != wqe->psn || wqe->lpsn == wqe->psn)
			return false;
		break;
	case URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE:
	case URVT_OP_RC_RDMA_READ_RESPONSE_LAST:
		/* inside a READ: only after FIRST/MIDDLE (a rewound READ
		 * resumes with MIDDLE/LAST, §3.8) */
		if (pkt->psn == wqe->psn ||
		    (qp_tp(qp)->comp_opcode != URVT_OP_RC_RDMA_READ_RESPONSE_FIRST &&
		     qp_tp(qp)->comp_opcode != URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE))
			return false;
		if ((op == URVT_OP_RC_RDMA_READ_RESPONSE_LAST) != (pkt->psn == wqe->lpsn))
			return false;
		break;
	}
	if (pkt->paylen != want)
		return false;
	if (!qp_tp(qp)->rd_valid || qp_tp(qp)->rd_idx != qp->s_last || pkt->psn == wqe->psn) {
		rvt_sge_state_init(&qp_tp(qp)->rd_sge, wqe->sg_list, wqe->num_sge, wqe->length);
		urvt_sge_skip(&qp_tp(qp)->rd_sge, (uint32_t)off);
		qp_tp(qp)->rd_valid = true;
		qp_tp(qp)->rd_idx = qp->s_last;
	}
	if (want)
		rvt_copy_sge(&qp_tp(qp)->rd_sge, pkt->payload, want, false, false);
	return true;
}

static const enum ibv_wc_status nak_status[32] = {
	[URVT_NAK_INVALID_REQUEST] = IBV_WC_REM_INV_REQ_ERR,
	[URVT_NAK_REMOTE_ACCESS] = IBV_WC_REM_ACCESS_ERR,
	[URVT_NAK_REMOTE_OP] = IBV_WC_REM_OP_ERR,
	[URVT_NAK_INVALID_RD_REQUEST] = IBV_WC_REM_OP_ERR,
};

static void comp_rnr(struct rvt_qp *qp, struct rvt_swqe *wqe, const struct urvt_pkt *pkt)
{
	qp_count(qp, URVT_CTR_RNR_NAKS_RCVD, 1);
	if (qp->s_flags & RVT_S_WAIT_RNR)
		return;
	/* everything before the NAK'd PSN is acknowledged */
	advance_comp_psn(qp, pkt->psn);
	if (!qp->s_rnr_retry) {
		qp_count(qp, URVT_CTR_RNR_RETRY_EXC, 1);
		comp_error(qp, wqe, IBV_WC_RNR_RETRY_EXC_ERR);
		return;
	}
	/* the PSN-sequence NAK the in-flight packets will cause is no news */
	qp_tp(qp)->rewind_valid = true;
	qp_tp(qp)->rewind_by_nak = true;
	qp_tp(qp)->rewind_psn = qp_tp(qp)->comp_psn;
	URVT_DBG("qp %u: RNR NAK psn %#x, wait %u us", qp->qpn, pkt->psn,
		 urvt_rnr_timer_us[urvt_aeth_syn_value(pkt->aeth.syn)]);
	/* §4.4: one retry used (7 = infinite), then the timer */
	rvt_add_rnr_timer(qp, urvt_aeth_syn_value(pkt->aeth.syn));
}

void urvt_comp_pkt(struct rvt_qp *qp, struct urvt_pktbuf *b)
{
	const struct urvt_pkt *pkt = &b->pkt;
	uint32_t psn = pkt->psn;
	uint8_t op = pkt->opcode;
	struct rvt_swqe *wqe;
	int32_t diff;

	/* a response for a PSN never sent */
	if (urvt_psn_cmp(psn, qp_tp(qp)->psn_hi) >= 0) {
		comp_drop(qp, URVT_TDROP_BAD_RESP);
		return;
	}
	/* §4 steps 1-4 */
	for (;;) {
		if (qp->s_last == load_acquire(&qp->s_head)) {
			comp_drop(qp, URVT_TDROP_STALE_RESP);
			return;
		}
		wqe = rvt_get_swqe_ptr(qp, qp->s_last);
		if (!wqe_sent(qp, wqe)) {
			comp_drop(qp, URVT_TDROP_STALE_RESP);
			return;
		}
		if (urvt_psn_cmp(psn, wqe->lpsn) <= 0)
			break;
		if (!(wqe->wqe_flags & RVT_SWQE_T_SENT)) {
			comp_drop(qp, URVT_TDROP_BAD_RESP);
			return;
		}
		if (wqe_is_rd_atomic(wqe)) {
			/* the responder moved past a READ/atomic whose
			 * response is missing: ask again */
			comp_retry(qp, true);
			return;
		}
		/* §4.1 coalesced ACK: this SEND/WRITE is done */
		advance_comp_psn(qp, urvt_psn_next(wqe->lpsn));
		if (!urvt_retire(qp, wqe, IBV_WC_SUCCESS))
			return;
	}
	diff = urvt_psn_cmp(psn, qp_tp(qp)->comp_psn);
	if (diff < 0) {
		/* old or duplicate response */
		comp_drop(qp, URVT_TDROP_STALE_RESP);
		return;
	}
	if (diff > 0 && wqe_is_rd_atomic(wqe) && op != URVT_OP_RC_ACKNOWLEDGE) {
		/* a gap in the READ responses: rewind once for it */
		comp_drop(qp, URVT_TDROP_BAD_RESP);
		comp_retry(qp, true);
		return;
	}

	switch (op) {
	case URVT_OP_RC_RDMA_READ_RESPONSE_FIRST:
	case URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE:
	case URVT_OP_RC_RDMA_READ_RESPONSE_LAST:
	case URVT_OP_RC_RDMA_READ_RESPONSE_ONLY:
		if (wqe->opcode != IBV_WR_RDMA_READ) {
			comp_error(qp, wqe, IBV_WC_FATAL_ERR); /* rc-protocol §4 step 5 */
			return;
		}
		if ((pkt->mask & URVT_AETH_MASK) &&
		    urvt_aeth_syn_type(pkt->aeth.syn) != URVT_AETH_ACK) {
			comp_drop(qp, URVT_TDROP_BAD_RESP);
			return;
		}
		if (!comp_read_data(qp, wqe, pkt)) {
			comp_drop(qp, URVT_TDROP_BAD_RESP);
			return;
		}
		qp_tp(qp)->comp_opcode = op;
		advance_comp_psn(qp, urvt_psn_next(psn));
		if (op == URVT_OP_RC_RDMA_READ_RESPONSE_LAST ||
		    op == URVT_OP_RC_RDMA_READ_RESPONSE_ONLY) {
			qp_tp(qp)->comp_opcode = 0;
			urvt_retire(qp, wqe, IBV_WC_SUCCESS);
		}
		return;

	case URVT_OP_RC_ATOMIC_ACKNOWLEDGE:
		if (wqe->opcode != IBV_WR_ATOMIC_CMP_AND_SWP &&
		    wqe->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) {
			comp_error(qp, wqe, IBV_WC_BAD_RESP_ERR);
			return;
		}
		if (urvt_aeth_syn_type(pkt->aeth.syn) != URVT_AETH_ACK || psn != wqe->psn) {
			comp_drop(qp, URVT_TDROP_BAD_RESP);
			return;
		}
		/* the original value goes to the first SGE (checked >= 8 at post) */
		if (wqe->num_sge) {
			uint64_t orig = pkt->atmack_orig;
			memcpy(wqe->sg_list[0].vaddr, &orig, sizeof(orig));
		}
		advance_comp_psn(qp, urvt_psn_next(psn));
		urvt_retire(qp, wqe, IBV_WC_SUCCESS);
		return;

	case URVT_OP_RC_ACKNOWLEDGE:
		break;
	default:
		comp_drop(qp, URVT_TDROP_BAD_RESP);
		return;
	}

	switch (urvt_aeth_syn_type(pkt->aeth.syn)) {
	case URVT_AETH_ACK:
		qp_count(qp, URVT_CTR_ACKS_RCVD, 1);
		if (wqe_is_rd_atomic(wqe))
			return; /* an ACK cannot complete a READ/atomic */
		advance_comp_psn(qp, urvt_psn_next(psn));
		if (psn == wqe->lpsn)
			urvt_retire(qp, wqe, IBV_WC_SUCCESS);
		return;
	case URVT_AETH_RNR_NAK:
		comp_rnr(qp, wqe, pkt);
		return;
	case URVT_AETH_NAK: {
		uint8_t code = urvt_aeth_syn_value(pkt->aeth.syn);
		if (code == URVT_NAK_PSN_SEQ_ERR) {
			qp_count(qp, URVT_CTR_NAK_RCVD_SEQ, 1);
			/* everything before the NAK'd PSN arrived */
			advance_comp_psn(qp, psn);
			if (qp->s_flags & RVT_S_WAIT_RNR)
				return;
			URVT_DBG("qp %u: NAK psn-seq %#x", qp->qpn, psn);
			comp_retry(qp, true);
			return;
		}
		qp_count(qp, code == URVT_NAK_INVALID_REQUEST ? URVT_CTR_NAK_RCVD_INV :
			     code == URVT_NAK_REMOTE_ACCESS ? URVT_CTR_NAK_RCVD_ACCESS :
							      URVT_CTR_NAK_RCVD_OP, 1);
		comp_error(qp, wqe, nak_status[code] ? nak_status[code] : IBV_WC_REM_OP_ERR);
		return;
	}
	default:
		comp_drop(qp, URVT_TDROP_BAD_RESP);
		return;
	}
}

/* Retransmit timer expiry (§4.2), engine context. */
void urvt_comp_timeout(struct rvt_qp *qp, struct urvt_txq *q)
{
	uint64_t now, deadline;

	qp_tp(qp)->timer_armed = false;
	if (urvt_psn_diff(qp_tp(qp)->psn_hi, qp_tp(qp)->comp_psn) <= 0 || !qp->timeout_ns ||
	    (qp->s_flags & RVT_S_WAIT_RNR))
		return;
	/* the timer is armed once and pushed back lazily: ACKs only record
	 * the time of progress */
	now = urvt_now_ns();
	deadline = timer_deadline(qp);
	if (now < deadline) {
		qp_tp(qp)->timer_armed = true;
		urvt_timer_mod(qp->rdi->progress, &qp->s_timer, deadline);
		return;
	}
	if (now < qp_tp(qp)->progress_ns + qp->timeout_ns) {
		/* probe first; the real timeout stays where it was */
		qp_tp(qp)->probe_sent = true;
		qp_count(qp, URVT_CTR_PROBES, 1);
		urvt_req_probe(qp, q);
		qp_tp(qp)->timer_armed = true;
		urvt_timer_mod(qp->rdi->progress, &qp->s_timer, timer_deadline(qp));
		return;
	}
	qp_count(qp, URVT_CTR_TIMEOUTS, 1);
	URVT_DBG("qp %u: retransmit timeout at psn %#x (retries left %u)", qp->qpn,
		 qp_tp(qp)->comp_psn, qp->s_retry);
	comp_retry(qp, false);
}

static void rxq_take(struct rvt_qp *qp, struct urvt_pktbuf **list)
{
	urvt_spin_lock(&qp_tp(qp)->rxq_lock);
	*list = qp_tp(qp)->rxq_head;
	WRITE_ONCE(qp_tp(qp)->rxq_head, NULL);
	qp_tp(qp)->rxq_tail = NULL;
	qp_tp(qp)->rxq_len = 0;
	urvt_spin_unlock(&qp_tp(qp)->rxq_lock);
}

static void rxq_drop(struct rvt_qp *qp)
{
	struct urvt_pktbuf *l;

	if (!READ_ONCE(qp_tp(qp)->rxq_head))
		return;
	rxq_take(qp, &l);
	urvt_pkt_free_list(qp_net(qp), l);
}

void urvt_comp_enqueue(struct urvt_net *net, struct rvt_qp *qp, struct urvt_pktbuf *b,
		       bool *consumed)
{
	*consumed = false;
	urvt_spin_lock(&qp_tp(qp)->rxq_lock);
	if (qp_tp(qp)->rxq_len >= URVT_RXQ_MAX) {
		urvt_spin_unlock(&qp_tp(qp)->rxq_lock);
		tp_count(net, urvt_qp_stats(qp), URVT_CTR_DROP_BASE + URVT_TDROP_RXQ_FULL, 1);
		return;
	}
	b->next = NULL;
	if (qp_tp(qp)->rxq_tail)
		qp_tp(qp)->rxq_tail->next = b;
	else
		WRITE_ONCE(qp_tp(qp)->rxq_head, b);
	qp_tp(qp)->rxq_tail = b;
	qp_tp(qp)->rxq_len++;
	urvt_spin_unlock(&qp_tp(qp)->rxq_lock);
	*consumed = true;
	rvt_schedule_send(qp);
}

/* ERR/SQE: flush every send WQE (qp-semantics §5.5 step 3). */
void urvt_comp_flush(struct rvt_qp *qp)
{
	rxq_drop(qp);
	qp->s_flags &= ~(RVT_S_WAIT_RNR | RVT_S_WAIT_ACK);
	qp_tp(qp)->timer_armed = false;
	while (qp->s_last != load_acquire(&qp->s_head))
		if (!urvt_retire(qp, rvt_get_swqe_ptr(qp, qp->s_last), IBV_WC_WR_FLUSH_ERR))
			return;
}

/* transport->do_send: completer, timers, then requester. */
void urvt_tp_do_send(struct rvt_qp *qp)
{
	struct urvt_net *net = qp_net(qp);
	int ops = ib_rvt_state_ops[rvt_qp_state(qp)];
	struct urvt_pktbuf *list, *b;
	struct urvt_txq *q;

	/* an application thread posts: it is back from wherever it waited
	 * (net.c "Who receives") */
	if (unlikely(atomic_load_explicit(&net->app_ret_ns, memory_order_relaxed)) &&
	    !urvt_in_rx() && !urvt_progress_on_thread(qp->rdi->progress))
		urvt_net_app_active(qp->rdi);
	if (!(ops & RVT_PROCESS_OR_FLUSH_SEND)) {
		rxq_drop(qp);
		return;
	}
	if (ops & RVT_FLUSH_SEND) {
		urvt_comp_flush(qp);
		return;
	}
	if (unlikely(!qp_tp(qp)->inited)) {
		qp_tp(qp)->comp_psn = qp_tp(qp)->psn_hi = qp->s_psn;
		qp_tp(qp)->inited = true;
	}
	q = urvt_txq_get();
	if (unlikely(!q))
		return;

	/* an unlocked peek; a packet queued after it comes with another
	 * rvt_schedule_send, so the engine runs again */
	if (READ_ONCE(qp_tp(qp)->rxq_head)) {
		rxq_take(qp, &list);
		for (b = list; b; b = b->next) {
			if (!(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_SEND_OK))
				break;
			urvt_comp_pkt(qp, b);
		}
		urvt_pkt_free_list(net, list);
	}
	if (atomic_load_explicit(&qp_tp(qp)->timeout_fired, memory_order_relaxed) &&
	    atomic_exchange(&qp_tp(qp)->timeout_fired, false))
		urvt_comp_timeout(qp, q);
	if ((qp->s_flags & RVT_S_WAIT_RNR) && atomic_exchange(&qp->s_rnr_fired, false)) {
		/* §4.4: resend from the NAK'd PSN */
		qp->s_flags &= ~RVT_S_WAIT_RNR;
		urvt_req_rewind(qp);
		qp_tp(qp)->progress_ns = urvt_now_ns();
	}
	ops = ib_rvt_state_ops[rvt_qp_state(qp)];
	if (ops & RVT_FLUSH_SEND) {
		urvt_comp_flush(qp);
	} else {
		qp_tp(qp)->stalled = false;
		urvt_req_run(qp, q);
		/* §4.2: one timer while anything is unacknowledged */
		if (qp->type == IBV_QPT_RC && qp->timeout_ns && !qp_tp(qp)->timer_armed &&
		    urvt_psn_diff(qp_tp(qp)->psn_hi, qp_tp(qp)->comp_psn) > 0 &&
		    !(qp->s_flags & RVT_S_WAIT_RNR)) {
			qp_tp(qp)->timer_armed = true;
			urvt_timer_mod(qp->rdi->progress, &qp->s_timer, timer_deadline(qp));
		}
	}
	urvt_txq_flush_unless_rx(net, q);
	/* post_send with the requester stalled on ACKs: receive them now if
	 * no one else is (trylock); they come back through rvt_schedule_send,
	 * which runs this engine again before the token is released */
	if (qp_tp(qp)->stalled && !urvt_in_rx() && !urvt_progress_on_thread(qp->rdi->progress))
		urvt_net_poll(qp->rdi);
}

void urvt_tp_retry_timeout(struct rvt_qp *qp)
{
	/* responses may be waiting in the socket (a busy application that
	 * stopped polling): take them in before judging the timer */
	urvt_net_drain(qp->rdi);
	atomic_store(&qp_tp(qp)->timeout_fired, true);
	rvt_schedule_send(qp);
}

/* transport->qp_reset: nothing may refer to the QP afterwards. */
void urvt_tp_qp_reset(struct rvt_qp *qp)
{
	struct urvt_net *net = qp_net(qp);

	rxq_drop(qp);
	atomic_store(&qp_tp(qp)->timeout_fired, false);
	if (qp_tp(qp)->r_rdma_valid)
		rvt_put_sge(&qp->r_rdma_sge);
	if (net)
		urvt_stats_release(net, qp);
	memset(&qp_tp(qp)->inited, 0,
	       sizeof(struct urvt_tp_qp) - offsetof(struct urvt_tp_qp, inited));
}
