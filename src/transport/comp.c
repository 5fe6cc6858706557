/*
 * Completer (rc-protocol §4, rxe_comp.c): responses against the send
 * queue, the retransmit timer, retries and flush. Engine context
 * (engine.c): the s_sched holder owns s_last, s_cur, the retry counters
 * and tp.*. Responses reach it through the QP's completer queue (tp.rxq),
 * filled by whichever thread receives them.
 */
#include <string.h>
#include <sys/uio.h>

#include "base/progress.h"
#include "core/odp.h"
#include "core/ruc.h"
#include "core/rvt_api.h"
#include "transport/net.h"
#include "transport/tp.h"
#include "wire/aeth.h"
#include "wire/psn.h"

bool urvt_retire(struct rvt_qp *qp, struct rvt_swqe *wqe, enum ibv_wc_status st)
{
	bool cur = qp->s_cur == qp->s_last;
	bool cma = wqe->wqe_flags & RVT_SWQE_T_CMA;
	uint32_t last = qp->s_last;

	if (qp_tp(qp)->rd_valid && qp_tp(qp)->rd_idx == qp->s_last)
		qp_tp(qp)->rd_valid = false;
	rvt_send_complete(qp, wqe, st);
	/* a reset (modify or destroy) landed: rvt_send_complete retires
	 * nothing any more and the reset discards the rest itself */
	if (qp->s_last == last)
		return false;
	if (cma) {
		qp_tp(qp)->cma_reads--;
		/* it ends without its answer: a push it asked for (req.c
		 * rd_ask_push) must not land in memory that is the
		 * application's again (docs/shm.md "Single copy") */
		if (st != IBV_WC_SUCCESS)
			urvt_tx_cma_fence(qp_net(qp), &qp->remote_av);
	}
	if (cur) {
		/* rvt_send_complete moved s_cur along with s_last */
		qp->s_offset = 0;
		qp_tp(qp)->cur_started = false;
		qp_tp(qp)->cur_valid = false;
	}
	return true;
}

/* Tail-loss probe interval: 1/16 of the retransmit timeout, >= 200 us;
 * under congestion control sooner, from the peer's RTT (cc.c). */
static uint64_t probe_ns(const struct rvt_qp *qp)
{
	uint64_t p = qp->timeout_ns / 16;

	return urvt_cc_probe_ns(qp, p < 200000 ? 200000 : p);
}

/* When the retransmit timer should next look at this QP. */
static uint64_t timer_deadline(const struct rvt_qp *qp)
{
	if (!qp_tp(qp)->probe_sent && probe_ns(qp) < qp->timeout_ns)
		return qp_tp(qp)->progress_ns + probe_ns(qp);
	return qp_tp(qp)->progress_ns + qp->timeout_ns;
}

static void timer_set(struct rvt_qp *qp, uint64_t deadline)
{
	qp_tp(qp)->timer_armed = true;
	qp_tp(qp)->timer_at_ns = deadline;
	urvt_timer_mod(qp->rdi->progress, &qp->s_timer, deadline);
}

/*
 * The timer is pushed back lazily (urvt_comp_timeout), so a QP that keeps
 * moving would still wake the progress thread once per interval, and on a
 * busy CPU that wake-up preempts a polling application for 10-20 us
 * (docs/transport.md "Timers"). Progress in the last quarter of the
 * interval pushes it here instead, from the thread that saw the progress:
 * a lock and at most one timerfd_settime, about once per interval. now is
 * the new progress_ns, so the deadline is a whole interval away. The
 * completer runs only in RTS/SQD (engine.c run_completer checks each
 * packet), where the timer has not been deleted.
 */
static void timer_push(struct rvt_qp *qp, uint64_t now)
{
	uint64_t deadline;

	if (!qp_tp(qp)->timer_armed)
		return;
	deadline = timer_deadline(qp);
	if (qp_tp(qp)->timer_at_ns <= now + (deadline - now) / 4)
		timer_set(qp, deadline);
}

struct comp_ctx {
	struct rvt_qp *qp;
	const struct urvt_pkt *pkt;
	struct rvt_swqe *wqe;
	int drop_reason;                  /* COMPST_DROP: URVT_TDROP_* */
	enum ibv_wc_status status;        /* COMPST_ERROR */
	bool *placed;                     /* a piece of an answer by reference:
					     the answer's bytes are read (comp_read_ref) */
	uint64_t *now;                    /* the clock at the first progress of
					     this packet or span (0: not read) */
};

/* Forward progress (rc-protocol §4): reload the retry counters, restart the timer base.
 * The clock is read once per packet or span, whose pieces follow each other at
 * once: a read per piece cost Open MPI's 64 KiB run 4 % of both CPUs
 * (docs/performance.md "MPI on one host"). */
static void progress(struct comp_ctx *c)
{
	struct rvt_qp *qp = c->qp;

	if (!*c->now)
		*c->now = urvt_now_ns();
	qp->s_retry = qp->retry_cnt;
	qp->s_rnr_retry = qp->rnr_retry;
	qp_tp(qp)->progress_ns = *c->now;
	qp_tp(qp)->probe_sent = false;
	timer_push(qp, *c->now);
}

static void advance_comp_psn(struct comp_ctx *c, uint32_t psn)
{
	struct rvt_qp *qp = c->qp;
	struct urvt_tp_qp *tp = qp_tp(qp);
	int32_t n = urvt_psn_diff(psn, tp->comp_psn);

	if (n > 0) {
		tp->comp_psn = psn;
		progress(c);
		/* READ/atomic requests answered in full free their responder
		 * resource (req.c rd_end) */
		while (tp->rd_n && urvt_psn_cmp(tp->rd_end[tp->rd_head], psn) <= 0) {
			tp->rd_head = (uint8_t)((tp->rd_head + 1) % URVT_RD_REQS_MAX);
			tp->rd_n--;
		}
		urvt_cc_acked(qp, (uint32_t)n);
	}
}

/* Complete with an error status and take the QP to ERR (rc-protocol §4 "Error"). */
static void comp_error(struct rvt_qp *qp, struct rvt_swqe *wqe, enum ibv_wc_status st)
{
	URVT_DBG("qp %u: send wr %#llx fails with status %d", qp->qpn,
		 (unsigned long long)wqe->wr_id, (int)st);
	urvt_retire(qp, wqe, st);
	rvt_error_qp(qp, IBV_WC_WR_FLUSH_ERR);
}

/* rc-protocol §4.3: retry from comp_psn, counting against retry_cnt (IBTA: 7 = 7 retries). */
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
	urvt_cc_loss(qp, !by_nak);
	qp_tp(qp)->rewind_valid = true;
	qp_tp(qp)->rewind_by_nak = by_nak;
	qp_tp(qp)->rewind_psn = qp_tp(qp)->comp_psn;
	urvt_req_rewind(qp);
	/* a NAK: the one packet first (req.c urvt_req_run); a timeout: all */
	qp_tp(qp)->nak_one = by_nak && qp->type == IBV_QPT_RC;
	qp_tp(qp)->nak_wait = false;
	qp_tp(qp)->nak_psn = qp_tp(qp)->comp_psn;
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

/*
 * A piece of a READ answer by reference (recv.c comp_enqueue_ref,
 * docs/shm.md "Single copy"): reth.va is where its bytes are in the
 * responder's process, reth.len the bytes from there to the end of the
 * answer. The first piece the completer takes reads all of them into the
 * WQE at off, with one system call; the pieces after it find them there
 * (*placed). 1 ok, 0 drop, -1 they could not be read.
 */
static int comp_read_ref(struct rvt_qp *qp, struct rvt_swqe *wqe, const struct urvt_pkt *pkt,
			 uint64_t off, bool *placed)
{
	struct iovec local[URVT_MAX_SGE], remote;
	struct rvt_sge_state ss;
	uint32_t len = pkt->reth.len, n = 0;
	int pid = atomic_load_explicit(&qp_tp(qp)->cma_pid, memory_order_relaxed);

	if (*placed)
		return 1;
	if (off + len > wqe->length)
		return 0;
	if (!pkt->reth.va) {
		/* pushed: the responder wrote them into our buffers already;
		 * only into a READ that asked for it (req.c rd_ask_push) */
		if (!(wqe->wqe_flags & RVT_SWQE_T_CMA))
			return 0;
		*placed = true;
		return 1;
	}
	rvt_sge_state_init(&ss, wqe->sg_list, wqe->num_sge, wqe->length);
	urvt_sge_skip(&ss, (uint32_t)off);
	for (uint32_t left = len; left;) {
		uint32_t k = ss.sge.length < left ? ss.sge.length : left;

		if (!ss.num_sge || !k || n == URVT_MAX_SGE)
			return 0;
		local[n].iov_base = ss.sge.vaddr;
		local[n++].iov_len = k;
		urvt_sge_skip(&ss, k);
		left -= k;
	}
	remote.iov_base = (void *)(uintptr_t)pkt->reth.va;
	remote.iov_len = len;
	if (!pid || process_vm_readv(pid, local, n, &remote, 1, 0) != (ssize_t)len)
		return -1;
	*placed = true;
	qp_count(qp, URVT_CTR_CMA_PULLS, 1);
	qp_count(qp, URVT_CTR_CMA_BYTES, len);
	/* a piece with data (a replay) places rd_sge again */
	qp_tp(qp)->rd_valid = false;
	return 1;
}

/* READ response payload (rc-protocol §4 step 5). 1 ok, 0 drop the packet,
 * -1 an answer by reference could not be read. */
static int comp_read_data(struct rvt_qp *qp, struct rvt_swqe *wqe, const struct urvt_pkt *pkt,
			  bool *placed)
{
	uint32_t idx = (uint32_t)urvt_psn_diff(pkt->psn, wqe->psn);
	uint64_t off = (uint64_t)idx * qp->pmtu;
	uint32_t want;
	uint8_t op = pkt->opcode;

	if (off > wqe->length)
		return 0;
	want = wqe->length - (uint32_t)off;
	if (want > qp->pmtu)
		want = qp->pmtu;
	/* The data's place follows from the PSN alone (each request asks for
	 * the bytes of its PSNs, rc-protocol §2.3), so any READ response
	 * opcode is taken in order: a READ may have gone out as several
	 * requests (req.c), each answered FIRST..LAST or ONLY, a request
	 * asked for again from its middle is answered MIDDLE..LAST
	 * (rc-protocol §3.8), and after losses the two sides need not agree
	 * on where requests began. Only the WQE's last PSN must end a request. */
	if (pkt->psn == wqe->lpsn && op != URVT_OP_RC_RDMA_READ_RESPONSE_LAST &&
	    op != URVT_OP_RC_RDMA_READ_RESPONSE_ONLY)
		return 0;
	if (pkt->paylen != want)
		return 0;
	if (pkt->cma)
		return comp_read_ref(qp, wqe, pkt, off, placed);
	if (!qp_tp(qp)->rd_valid || qp_tp(qp)->rd_idx != qp->s_last || pkt->psn == wqe->psn) {
		rvt_sge_state_init(&qp_tp(qp)->rd_sge, wqe->sg_list, wqe->num_sge, wqe->length);
		urvt_sge_skip(&qp_tp(qp)->rd_sge, (uint32_t)off);
		qp_tp(qp)->rd_valid = true;
		qp_tp(qp)->rd_idx = qp->s_last;
	}
	if (want)
		rvt_copy_sge(&qp_tp(qp)->rd_sge, pkt->payload, want, false, false);
	return 1;
}

static const enum ibv_wc_status nak_status[32] = {
	[URVT_NAK_INVALID_REQUEST] = IBV_WC_REM_INV_REQ_ERR,
	[URVT_NAK_REMOTE_ACCESS] = IBV_WC_REM_ACCESS_ERR,
	[URVT_NAK_REMOTE_OP] = IBV_WC_REM_OP_ERR,
	[URVT_NAK_INVALID_RD_REQUEST] = IBV_WC_REM_OP_ERR,
};

static void comp_rnr(struct comp_ctx *c, struct rvt_swqe *wqe, const struct urvt_pkt *pkt)
{
	struct rvt_qp *qp = c->qp;

	qp_count(qp, URVT_CTR_RNR_NAKS_RCVD, 1);
	if (qp->s_flags & RVT_S_WAIT_RNR)
		return;
	/* everything before the NAK'd PSN is acknowledged */
	advance_comp_psn(c, pkt->psn);
	/* the RNR timer's resend goes on from here: no wait for an answer
	 * to a resend after a PSN-sequence NAK (req.c) */
	qp_tp(qp)->nak_one = qp_tp(qp)->nak_wait = false;
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
	/* rc-protocol §4.4: one retry used (7 = infinite), then the timer */
	rvt_add_rnr_timer(qp, urvt_aeth_syn_value(pkt->aeth.syn));
}

/*
 * The completer's steps for one response, as rxe_completer names them: each
 * state does one check or one action and names the next. The packet is
 * done at COMPST_DONE (used) or COMPST_DROP (counted by reason).
 */
enum comp_state {
	COMPST_GET_WQE,     /* the WQE the PSN belongs to; coalesced ACKs retire older ones */
	COMPST_CHECK_PSN,   /* old, duplicate, or a gap in READ responses */
	COMPST_CHECK_ACK,   /* the opcode against the WQE's operation */
	COMPST_READ,        /* READ response payload into the WQE's SGEs */
	COMPST_ATOMIC,      /* the original value into the first SGE */
	COMPST_SYNDROME,    /* an ACKNOWLEDGE: ACK, RNR NAK or NAK */
	COMPST_ERROR_RETRY, /* rewind from comp_psn (go-back-N) */
	COMPST_ERROR,       /* complete in error, QP to ERR */
	COMPST_DROP,
	COMPST_DONE,
};

static const char *const comp_state_name[] = {
	[COMPST_GET_WQE] = "GET_WQE",         [COMPST_CHECK_PSN] = "CHECK_PSN",
	[COMPST_CHECK_ACK] = "CHECK_ACK",     [COMPST_READ] = "READ",
	[COMPST_ATOMIC] = "ATOMIC",           [COMPST_SYNDROME] = "SYNDROME",
	[COMPST_ERROR_RETRY] = "ERROR_RETRY", [COMPST_ERROR] = "ERROR",
	[COMPST_DROP] = "DROP",               [COMPST_DONE] = "DONE",
};

static enum comp_state comp_drop_as(struct comp_ctx *c, int reason)
{
	c->drop_reason = reason;
	return COMPST_DROP;
}

static enum comp_state comp_fail(struct comp_ctx *c, enum ibv_wc_status st)
{
	c->status = st;
	return COMPST_ERROR;
}

/* rc-protocol §4 steps 1-2: coalesced ACKs retire every SEND/WRITE before the PSN. */
static enum comp_state comp_get_wqe(struct comp_ctx *c)
{
	struct rvt_qp *qp = c->qp;
	uint32_t psn = c->pkt->psn;

	for (;;) {
		if (qp->s_last == load_acquire(&qp->s_head))
			return comp_drop_as(c, URVT_TDROP_STALE_RESP);
		c->wqe = rvt_get_swqe_ptr(qp, qp->s_last);
		if (!wqe_sent(qp, c->wqe))
			return comp_drop_as(c, URVT_TDROP_STALE_RESP);
		if (urvt_psn_cmp(psn, c->wqe->lpsn) <= 0)
			return COMPST_CHECK_PSN;
		if (!(c->wqe->wqe_flags & RVT_SWQE_T_SENT))
			return comp_drop_as(c, URVT_TDROP_BAD_RESP);
		/* the responder moved past a READ/atomic whose response is
		 * missing: ask again */
		if (rvt_swqe_rd_atomic(c->wqe))
			return COMPST_ERROR_RETRY;
		/* rc-protocol §4.1: this SEND/WRITE is done */
		advance_comp_psn(c, urvt_psn_next(c->wqe->lpsn));
		if (!urvt_retire(qp, c->wqe, IBV_WC_SUCCESS))
			return COMPST_DONE; /* a reset landed */
	}
}

/* rc-protocol §4 step 3. */
static enum comp_state comp_check_psn(struct comp_ctx *c)
{
	int32_t diff = urvt_psn_cmp(c->pkt->psn, qp_tp(c->qp)->comp_psn);

	if (diff < 0)
		return comp_drop_as(c, URVT_TDROP_STALE_RESP); /* old or duplicate */
	if (diff > 0 && rvt_swqe_rd_atomic(c->wqe) && c->pkt->opcode != URVT_OP_RC_ACKNOWLEDGE) {
		/* a gap in the READ responses: rewind once for it */
		comp_drop(c->qp, URVT_TDROP_BAD_RESP);
		return COMPST_ERROR_RETRY;
	}
	return COMPST_CHECK_ACK;
}

/* rc-protocol §4 step 4. */
static enum comp_state comp_check_ack(struct comp_ctx *c)
{
	const struct urvt_pkt *pkt = c->pkt;
	struct rvt_swqe *wqe = c->wqe;

	switch (pkt->opcode) {
	case URVT_OP_RC_RDMA_READ_RESPONSE_FIRST:
	case URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE:
	case URVT_OP_RC_RDMA_READ_RESPONSE_LAST:
	case URVT_OP_RC_RDMA_READ_RESPONSE_ONLY:
		/* qp-semantics §2.10: ATOMIC_WRITE's answer, empty */
		if (wqe->opcode == IBV_WR_ATOMIC_WRITE) {
			if (pkt->opcode != URVT_OP_RC_RDMA_READ_RESPONSE_ONLY || pkt->paylen ||
			    pkt->psn != wqe->psn ||
			    urvt_aeth_syn_type(pkt->aeth.syn) != URVT_AETH_ACK)
				return comp_drop_as(c, URVT_TDROP_BAD_RESP);
			return COMPST_ATOMIC;
		}
		if (wqe->opcode != IBV_WR_RDMA_READ)
			return comp_fail(c, IBV_WC_FATAL_ERR); /* rc-protocol §4 step 5 */
		if ((pkt->mask & URVT_AETH_MASK) &&
		    urvt_aeth_syn_type(pkt->aeth.syn) != URVT_AETH_ACK)
			return comp_drop_as(c, URVT_TDROP_BAD_RESP);
		return COMPST_READ;
	case URVT_OP_RC_ATOMIC_ACKNOWLEDGE:
		if (wqe->opcode != IBV_WR_ATOMIC_CMP_AND_SWP &&
		    wqe->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD)
			return comp_fail(c, IBV_WC_BAD_RESP_ERR);
		if (urvt_aeth_syn_type(pkt->aeth.syn) != URVT_AETH_ACK || pkt->psn != wqe->psn)
			return comp_drop_as(c, URVT_TDROP_BAD_RESP);
		return COMPST_ATOMIC;
	case URVT_OP_RC_ACKNOWLEDGE:
		return COMPST_SYNDROME;
	default:
		return comp_drop_as(c, URVT_TDROP_BAD_RESP);
	}
}

static enum comp_state comp_read(struct comp_ctx *c)
{
	struct rvt_qp *qp = c->qp;
	uint8_t op = c->pkt->opcode;

	int r = comp_read_data(qp, c->wqe, c->pkt, c->placed);

	if (unlikely(r < 0)) {
		/* the responder's memory cannot be read from here (no
		 * ptrace access, the process went, the region was unmapped):
		 * ask again, for the data this time */
		qp_count(qp, URVT_CTR_CMA_FAILS, 1);
		qp_tp(qp)->cma_off = true;
		return COMPST_ERROR_RETRY;
	}
	if (!r)
		return comp_drop_as(c, URVT_TDROP_BAD_RESP);
	qp_tp(qp)->comp_opcode = op;
	advance_comp_psn(c, urvt_psn_next(c->pkt->psn));
	if (op == URVT_OP_RC_RDMA_READ_RESPONSE_LAST || op == URVT_OP_RC_RDMA_READ_RESPONSE_ONLY) {
		/* the end of one request; the WQE is done with its last PSN */
		qp_tp(qp)->comp_opcode = 0;
		if (c->pkt->psn == c->wqe->lpsn)
			urvt_retire(qp, c->wqe, IBV_WC_SUCCESS);
	}
	return COMPST_DONE;
}

static enum comp_state comp_atomic(struct comp_ctx *c)
{
	/* the original value goes to the first SGE (checked >= 8 at post);
	 * ATOMIC_WRITE has none */
	if (c->wqe->num_sge && c->wqe->opcode != IBV_WR_ATOMIC_WRITE) {
		uint64_t orig = c->pkt->atmack_orig;
		if (rvt_sge_odp(&c->wqe->sg_list[0])) /* probed when it started */
			(void)rvt_odp_copy(c->wqe->sg_list[0].vaddr, &orig, sizeof(orig));
		else
			memcpy(c->wqe->sg_list[0].vaddr, &orig, sizeof(orig));
	}
	advance_comp_psn(c, urvt_psn_next(c->pkt->psn));
	urvt_retire(c->qp, c->wqe, IBV_WC_SUCCESS);
	return COMPST_DONE;
}

static enum comp_state comp_syndrome(struct comp_ctx *c)
{
	struct rvt_qp *qp = c->qp;
	const struct urvt_pkt *pkt = c->pkt;
	uint8_t code;

	switch (urvt_aeth_syn_type(pkt->aeth.syn)) {
	case URVT_AETH_ACK:
		qp_count(qp, URVT_CTR_ACKS_RCVD, 1);
		if (rvt_swqe_rd_atomic(c->wqe))
			return COMPST_DONE; /* an ACK cannot complete a READ/atomic */
		advance_comp_psn(c, urvt_psn_next(pkt->psn));
		if (pkt->psn == c->wqe->lpsn)
			urvt_retire(qp, c->wqe, IBV_WC_SUCCESS);
		return COMPST_DONE;
	case URVT_AETH_RNR_NAK:
		comp_rnr(c, c->wqe, pkt);
		return COMPST_DONE;
	case URVT_AETH_NAK:
		code = urvt_aeth_syn_value(pkt->aeth.syn);
		if (code == URVT_NAK_PSN_SEQ_ERR) {
			qp_count(qp, URVT_CTR_NAK_RCVD_SEQ, 1);
			/* everything before the NAK'd PSN arrived, except inside a
			 * READ asked for in pieces (req.c): the responder
			 * expects the next piece while responses of the earlier
			 * ones may be lost; comp_psn stays until they are in */
			if (!rvt_swqe_rd_atomic(c->wqe))
				advance_comp_psn(c, pkt->psn);
			if (qp->s_flags & RVT_S_WAIT_RNR)
				return COMPST_DONE;
			URVT_DBG("qp %u: NAK psn-seq %#x", qp->qpn, pkt->psn);
			return COMPST_ERROR_RETRY;
		}
		qp_count(qp, code == URVT_NAK_INVALID_REQUEST ? URVT_CTR_NAK_RCVD_INV :
			     code == URVT_NAK_REMOTE_ACCESS ? URVT_CTR_NAK_RCVD_ACCESS :
							      URVT_CTR_NAK_RCVD_OP, 1);
		return comp_fail(c, nak_status[code] ? nak_status[code] : IBV_WC_REM_OP_ERR);
	default:
		return comp_drop_as(c, URVT_TDROP_BAD_RESP);
	}
}

static enum comp_state comp_run(struct rvt_qp *qp, const struct urvt_pkt *pkt, bool *placed,
				 uint64_t *now)
{
	struct comp_ctx c = { .qp = qp, .pkt = pkt, .placed = placed, .now = now };
	enum comp_state st = COMPST_GET_WQE;

	/* a response for a PSN never sent */
	if (urvt_psn_cmp(c.pkt->psn, qp_tp(qp)->psn_hi) >= 0)
		st = comp_drop_as(&c, URVT_TDROP_BAD_RESP);
	/* each state moves forward or ends: at most a few steps per packet
	 * (GET_WQE loops over the WQEs an ACK retires) */
	for (;;) {
		URVT_DBG("qp %u: comp psn %#x %s", qp->qpn, c.pkt->psn, comp_state_name[st]);
		switch (st) {
		case COMPST_GET_WQE:
			st = comp_get_wqe(&c);
			break;
		case COMPST_CHECK_PSN:
			st = comp_check_psn(&c);
			break;
		case COMPST_CHECK_ACK:
			st = comp_check_ack(&c);
			break;
		case COMPST_READ:
			st = comp_read(&c);
			break;
		case COMPST_ATOMIC:
			st = comp_atomic(&c);
			break;
		case COMPST_SYNDROME:
			st = comp_syndrome(&c);
			break;
		case COMPST_ERROR_RETRY:
			comp_retry(qp, true);
			return st;
		case COMPST_ERROR:
			comp_error(qp, c.wqe, c.status);
			return st;
		case COMPST_DROP:
			comp_drop(qp, c.drop_reason);
			return st;
		case COMPST_DONE:
			return st;
		}
	}
}

bool urvt_span_len_ok(uint8_t opcode, uint32_t len, uint32_t n, uint32_t pmtu)
{
	bool ends = opcode == URVT_OP_RC_RDMA_READ_RESPONSE_LAST ||
		    opcode == URVT_OP_RC_RDMA_READ_RESPONSE_ONLY;

	/* each PMTU full but the last of a LAST/ONLY */
	return len <= n * pmtu && len > (n - 1) * pmtu && (ends || len == n * pmtu);
}

void urvt_span_piece(const struct urvt_pkt *pkt, uint32_t j, uint32_t pmtu, struct urvt_pkt *o)
{
	uint32_t n = pkt->span_more + 1, off = j * pmtu;
	uint8_t op = pkt->opcode;
	bool starts = op == URVT_OP_RC_RDMA_READ_RESPONSE_FIRST ||
		      op == URVT_OP_RC_RDMA_READ_RESPONSE_ONLY;
	bool ends = op == URVT_OP_RC_RDMA_READ_RESPONSE_LAST ||
		    op == URVT_OP_RC_RDMA_READ_RESPONSE_ONLY;

	*o = *pkt;
	if (j == 0 && starts)
		op = j == n - 1 && ends ? URVT_OP_RC_RDMA_READ_RESPONSE_ONLY
					: URVT_OP_RC_RDMA_READ_RESPONSE_FIRST;
	else
		op = j == n - 1 && ends ? URVT_OP_RC_RDMA_READ_RESPONSE_LAST
					: URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE;
	o->opcode = op;
	o->mask = urvt_opcode[op].mask;
	o->psn = urvt_psn_add(pkt->psn, j);
	o->paylen = pkt->paylen - off < pmtu ? pkt->paylen - off : pmtu;
	o->span_more = 0;
	if (pkt->cma) {
		/* by reference (comp_read_ref): where this piece's bytes are,
		 * and the bytes to the answer's end */
		o->reth.va = pkt->reth.va ? pkt->reth.va + off : 0; /* 0: pushed */
		o->reth.len = pkt->paylen - off;
	} else {
		o->payload = pkt->payload + off;
	}
}

/*
 * The span's pieces j..span_more-1, all MIDDLE and a PMTU each, taken at
 * once when each would pass comp_run's steps and change only comp_psn,
 * comp_opcode and the bytes: the piece before was taken (comp_psn is piece
 * j's PSN), the WQE at s_last is the READ they belong to and ends at or
 * after the span's last PSN and byte, and their bytes are in place (by
 * reference) or follow rd_sge's place. An answer of 32 KiB by reference is
 * 8 pieces, and comp_run per piece was a tenth of the CPU that reads Open
 * MPI's 64 KiB messages (docs/performance.md "MPI on one host"). Returns
 * the pieces taken, 0 for none (comp_run takes them one by one).
 */
static uint32_t comp_span_middles(struct rvt_qp *qp, const struct urvt_pkt *pkt, uint32_t j,
				  bool *placed, uint64_t *now)
{
	struct urvt_tp_qp *tp = qp_tp(qp);
	uint32_t n = j < pkt->span_more ? pkt->span_more - j : 0;
	uint32_t psn = urvt_psn_add(pkt->psn, j), last = urvt_psn_add(pkt->psn, pkt->span_more);
	struct comp_ctx c = { .qp = qp, .pkt = pkt, .placed = placed, .now = now };
	struct rvt_swqe *wqe;

	if (n < 2 || psn != tp->comp_psn || urvt_psn_cmp(last, tp->psn_hi) >= 0 ||
	    qp->s_last == load_acquire(&qp->s_head))
		return 0;
	wqe = rvt_get_swqe_ptr(qp, qp->s_last);
	if (wqe->opcode != IBV_WR_RDMA_READ || !wqe_sent(qp, wqe) || urvt_psn_cmp(psn, wqe->psn) <= 0 ||
	    urvt_psn_cmp(last, wqe->lpsn) > 0 ||
	    (uint64_t)urvt_psn_diff(last, wqe->psn) * qp->pmtu > wqe->length)
		return 0;
	if (pkt->cma) {
		if (!*placed)
			return 0;
	} else {
		if (!tp->rd_valid || tp->rd_idx != qp->s_last)
			return 0;
		rvt_copy_sge(&tp->rd_sge, pkt->payload + (size_t)j * qp->pmtu, n * qp->pmtu, false,
			     false);
	}
	tp->comp_opcode = URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE;
	advance_comp_psn(&c, last);
	return n;
}

/* A READ response span (docs/shm.md "Spans") or answer by reference
 * ("Single copy"): its PMTU pieces, in order, as packets from any link
 * would come; after a piece that rewinds or fails the QP, or one dropped
 * that was not old (the next would be a gap, and a second rewind), none. */
static void comp_span(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	bool placed = false;
	uint64_t now = 0;

	for (uint32_t j = 0; j <= pkt->span_more; j++) {
		struct urvt_pkt piece;
		enum comp_state st;

		urvt_span_piece(pkt, j, qp->pmtu, &piece);
		st = comp_run(qp, &piece, &placed, &now);
		if (st == COMPST_ERROR_RETRY || st == COMPST_ERROR ||
		    (st == COMPST_DROP && urvt_psn_cmp(piece.psn, qp_tp(qp)->comp_psn) >= 0))
			return;
		if (st == COMPST_DONE)
			j += comp_span_middles(qp, pkt, j + 1, &placed, &now);
	}
}

void urvt_comp_pkt(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	uint64_t now = 0; /* comp_ctx.now */

	if (unlikely(pkt->span_more || pkt->cma))
		comp_span(qp, pkt);
	else
		(void)comp_run(qp, pkt, NULL, &now);
}

/* Retransmit timer expiry (rc-protocol §4.2), engine context. */
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
		timer_set(qp, deadline);
		return;
	}
	if (now < qp_tp(qp)->progress_ns + qp->timeout_ns) {
		/* probe first; the real timeout stays where it was */
		qp_tp(qp)->probe_sent = true;
		qp_count(qp, URVT_CTR_PROBES, 1);
		urvt_req_probe(qp, q);
		timer_set(qp, timer_deadline(qp));
		return;
	}
	qp_count(qp, URVT_CTR_TIMEOUTS, 1);
	URVT_DBG("qp %u: retransmit timeout at psn %#x (retries left %u)", qp->qpn,
		 qp_tp(qp)->comp_psn, qp->s_retry);
	comp_retry(qp, false);
}

/* ERR/SQE: flush every send WQE (qp-semantics §5.5 step 3). */
void urvt_comp_flush(struct rvt_qp *qp)
{
	urvt_rxq_drop(qp);
	/* nothing of this QP is in flight any more for its peer's window */
	urvt_cc_qp_release(qp);
	qp->s_flags &= ~(RVT_S_WAIT_RNR | RVT_S_WAIT_ACK);
	qp_tp(qp)->timer_armed = false;
	while (qp->s_last != load_acquire(&qp->s_head))
		if (!urvt_retire(qp, rvt_get_swqe_ptr(qp, qp->s_last), IBV_WC_WR_FLUSH_ERR))
			return;
}

/* rc-protocol §4.2: one timer while anything is unacknowledged. */
void urvt_comp_arm_timer(struct rvt_qp *qp)
{
	if (qp->type == IBV_QPT_RC && qp->timeout_ns && !qp_tp(qp)->timer_armed &&
	    urvt_psn_diff(qp_tp(qp)->psn_hi, qp_tp(qp)->comp_psn) > 0 &&
	    !(qp->s_flags & RVT_S_WAIT_RNR))
		timer_set(qp, timer_deadline(qp));
}
