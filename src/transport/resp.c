/*
 * Responder (rc-protocol §3, §6, §7): executes request packets and
 * sends ACKs, NAKs, READ responses and atomic ACKs. Runs on the receiving
 * thread (progress thread or an inline poller) under qp->r_lock, one packet
 * at a time in arrival order. Status choices for local completions follow
 * the in-process path (core/ruc.c loopback): invalid request ->
 * LOC_QP_OP_ERR, oversized SEND -> LOC_LEN_ERR, access -> LOC_PROT_ERR.
 */
#include <string.h>

#include "core/ruc.h"
#include "core/rvt_api.h"
#include "transport/tp.h"
#include "wire/aeth.h"
#include "wire/grh.h"
#include "wire/psn.h"

enum resp_res {
	RESP_OK,
	RESP_DROP,          /* silently (UC/UD rules) */
	RESP_RNR,           /* class B: RNR NAK */
	RESP_NAK_INV,       /* class C: invalid request */
	RESP_NAK_LEN,       /* class C, oversized SEND: invalid request + LOC_LEN_ERR */
	RESP_NAK_ACCESS,    /* class C: remote access error */
	RESP_NAK_OP,        /* class A: remote operational error */
	RESP_INV_FAIL,      /* class J: SEND_WITH_INV of a bad key */
};

/* The NAK a failed remote target check earns (core/keys.h rvt_chk_rkey). */
static inline enum resp_res rkey_nak(enum rvt_rkey_res r)
{
	return r == RVT_RKEY_INV ? RESP_NAK_INV : RESP_NAK_ACCESS;
}

/* What the responder of a connected QP replies to (port 4791, roce-wire §1.2). */
static inline const struct urvt_av *peer_av(struct rvt_qp *qp)
{
	return &qp->remote_av;
}

static void ack_build(struct rvt_qp *qp, uint8_t opcode, uint8_t syn, uint32_t psn,
		      uint32_t msn, uint64_t orig);

/*
 * ACKs of a batch (rc-protocol §3.10: an ACK for a PSN acknowledges every
 * PSN before it). Within one receive batch a QP's plain ACKs are owed, not
 * built: only the newest leaves, at the batch's end, or first thing when
 * the QP answers anything else (a NAK, a READ or atomic response), so the
 * peer sees its answers in the order they were made. A batch of many small
 * messages to one QP costs one ACK instead of one each, on both sides.
 * Outside a receive batch (the in-process path, a forwarded packet) and
 * once URVT_ACKS_DUE QPs owe one, an ACK leaves at once.
 */
static void ack_owe(struct rvt_qp *qp, uint32_t psn)
{
	struct urvt_tp_qp *tp = qp_tp(qp);
	struct urvt_txq *q;

	if (tp->ack_due) {
		tp->ack_due_psn = psn;
		tp->ack_due_msn = qp->r_msn;
		qp_count(qp, URVT_CTR_ACKS_COALESCED, 1);
		return;
	}
	q = urvt_in_rx() ? urvt_txq_get() : NULL;
	if (!q || q->ack_due_n == URVT_ACKS_DUE) {
		urvt_send_ack(qp, URVT_AETH_SYN_ACK_UNLIMITED, psn);
		return;
	}
	q->ack_due[q->ack_due_n].rdi = qp->rdi;
	q->ack_due[q->ack_due_n++].qpn = qp->qpn;
	tp->ack_due = true;
	tp->ack_due_psn = psn;
	tp->ack_due_msn = qp->r_msn;
}

/* The owed ACK leaves now, unless what the QP sends next is a plain ACK,
 * which covers it (its PSN is never older). Caller holds r_lock. */
static void ack_pay(struct rvt_qp *qp, bool covered)
{
	struct urvt_tp_qp *tp = qp_tp(qp);

	if (likely(!tp->ack_due))
		return;
	tp->ack_due = false;
	if (covered) {
		qp_count(qp, URVT_CTR_ACKS_COALESCED, 1);
		return;
	}
	/* with the MSN of its time: a READ may have counted since */
	ack_build(qp, URVT_OP_RC_ACKNOWLEDGE, URVT_AETH_SYN_ACK_UNLIMITED, tp->ack_due_psn,
		  tp->ack_due_msn, 0);
	qp_count(qp, URVT_CTR_ACKS_SENT, 1);
}

void urvt_resp_acks_due_flush(struct urvt_txq *q)
{
	for (uint32_t i = 0; i < q->ack_due_n; i++) {
		struct rvt_qp *qp = rvt_lookup_qpn(q->ack_due[i].rdi, q->ack_due[i].qpn);

		if (!qp)
			continue; /* destroyed meanwhile: its reset forgot the ACK */
		/* what was executed is acknowledged, also by a QP that went
		 * to ERR since (a full CQ): as rxe's ACK, sent before that */
		bool fast = urvt_bias_take_noted(&qp->r_lock);
		ack_pay(qp, false);
		urvt_bias_leave(&qp->r_lock, fast);
		rvt_put_qp(qp);
	}
	q->ack_due_n = 0;
}

void urvt_resp_ack_owed_send(struct rvt_qp *qp)
{
	struct urvt_txq *q;
	bool owed, fast = urvt_bias_take_noted(&qp->r_lock);

	owed = qp_tp(qp)->ack_due;
	ack_pay(qp, false);
	urvt_bias_leave(&qp->r_lock, fast);
	q = owed ? urvt_txq_peek() : NULL;
	if (q)
		urvt_txq_flush_unless_rx(qp_net(qp), q);
}

/*
 * An ACKNOWLEDGE (syndrome syn) or an ATOMIC ACKNOWLEDGE (original value
 * orig) for psn with MSN msn: no payload (rxe send_common_ack).
 */
static void ack_build(struct rvt_qp *qp, uint8_t opcode, uint8_t syn, uint32_t psn,
		      uint32_t msn, uint64_t orig)
{
	struct urvt_txq *q = urvt_txq_get();
	struct urvt_pkt f;
	uint32_t h;
	uint8_t *p;

	if (unlikely(!q))
		return;
	/* an XRC target answers with the XRC twins (roce-wire §4.5) */
	urvt_pkt_init(&f, qp->allowed_ops + opcode, qp->remote_qpn, psn);
	f.aeth.syn = syn;
	f.aeth.msn = msn;
	f.atmack_orig = orig;
	/* to a same-host peer: straight into its ring (~700 -> ~300
	 * instructions, on the way of every RC ping-pong's reply) */
	if (urvt_build_ack_now(qp, q, &f, peer_av(qp)->route))
		return;
	p = urvt_build_start(qp, q, &f, peer_av(qp), &h);
	if (opcode == URVT_OP_RC_ACKNOWLEDGE && urvt_aeth_syn_type(syn) == URVT_AETH_ACK)
		urvt_txq_next_may_wait(q); /* tx.c "ACKs that wait" */
	urvt_build_finish(qp, q, p, h);
}

static void ack_pkt(struct rvt_qp *qp, uint8_t opcode, uint8_t syn, uint32_t psn, uint64_t orig)
{
	ack_pay(qp, opcode == URVT_OP_RC_ACKNOWLEDGE && urvt_aeth_syn_type(syn) == URVT_AETH_ACK);
	ack_build(qp, opcode, syn, psn, qp->r_msn, orig);
}

/* ACKNOWLEDGE with syndrome syn for psn (rc-protocol §3.10; rxe send_ack).
 * Caller holds r_lock. */
void urvt_send_ack(struct rvt_qp *qp, uint8_t syn, uint32_t psn)
{
	ack_pkt(qp, URVT_OP_RC_ACKNOWLEDGE, syn, psn, 0);
	switch (urvt_aeth_syn_type(syn)) {
	case URVT_AETH_ACK:
		qp_count(qp, URVT_CTR_ACKS_SENT, 1);
		break;
	case URVT_AETH_RNR_NAK:
		qp_count(qp, URVT_CTR_RNR_NAKS_SENT, 1);
		break;
	default:
		switch (urvt_aeth_syn_value(syn)) {
		case URVT_NAK_PSN_SEQ_ERR:
			qp_count(qp, URVT_CTR_NAK_SENT_SEQ, 1);
			break;
		case URVT_NAK_INVALID_REQUEST:
			qp_count(qp, URVT_CTR_NAK_SENT_INV, 1);
			break;
		case URVT_NAK_REMOTE_ACCESS:
			qp_count(qp, URVT_CTR_NAK_SENT_ACCESS, 1);
			break;
		default:
			qp_count(qp, URVT_CTR_NAK_SENT_OP, 1);
			break;
		}
		URVT_DBG("qp %u: NAK %#x psn %#x", qp->qpn, syn, psn);
		break;
	}
}

/* rxe send_atomic_ack */
static void send_atomic_ack(struct rvt_qp *qp, uint32_t psn, uint64_t orig)
{
	ack_pkt(qp, URVT_OP_RC_ATOMIC_ACKNOWLEDGE, URVT_AETH_SYN_ACK_UNLIMITED, psn, orig);
}

/* Write len bytes from local into the requester at remote (n segments
 * each) with one system call, if the push's epoch is still its epoch;
 * counted as one push. */
static bool cma_push(struct rvt_qp *qp, uint32_t epoch, const struct iovec *local,
		     const struct iovec *remote, unsigned n, size_t len)
{
	if (!urvt_tx_cma_push(qp_net(qp), peer_av(qp), epoch, local, n, remote, n, len))
		return false;
	qp_count(qp, URVT_CTR_CMA_PUSHES, 1);
	qp_count(qp, URVT_CTR_CMA_PUSH_BYTES, len);
	return true;
}

/* Write the last push->len bytes at ss into the requester (docs/shm.md
 * "Single copy"); false: it must read them itself. */
static bool read_push(struct rvt_qp *qp, const struct rvt_sge_state *ss,
		      const struct urvt_cma_push *push)
{
	struct iovec local = { .iov_base = ss->sge.vaddr, .iov_len = push->len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)push->addr, .iov_len = push->len };

	return cma_push(qp, push->epoch, &local, &remote, 1, push->len);
}

/*
 * rc-protocol §3.9 READ responses for len bytes at src (NULL when len is 0),
 * first PSN psn. restart: FIRST/ONLY opcodes (a new READ or a replay from its
 * first PSN); otherwise a replay from the middle continues with MIDDLE/LAST.
 * by_ref: each says where its bytes are instead of carrying them, and with
 * push the last push->len bytes are written into the requester (docs/shm.md
 * "Single copy"); placed: all of them were (reads_pay).
 */
static void read_respond(struct rvt_qp *qp, struct rvt_sge *src, uint32_t len, uint32_t psn,
			 bool restart, bool by_ref, const struct urvt_cma_push *push, bool placed)
{
	struct urvt_txq *q = urvt_txq_get();
	/* to a peer whose link joins PMTUs: spans of them (docs/shm.md
	 * "Spans"; the requester's receive path cuts them up again); by
	 * reference, the most a span's PSN count can say */
	uint32_t k = by_ref ? URVT_BTH_SPAN_MAX + 1 : urvt_tx_span(qp_net(qp), peer_av(qp)) / qp->pmtu;
	uint32_t span = (k > 1 ? (k > URVT_BTH_SPAN_MAX + 1 ? URVT_BTH_SPAN_MAX + 1 : k) : 1) *
			qp->pmtu;
	struct rvt_sge_state ss;
	uint32_t left = len;
	/* a push (exec_read): answers for the bytes before it first, so that
	 * the requester reads those while we write the rest */
	uint32_t push_at = push ? len - push->len : len;
	bool first = true, pushed = false;

	if (unlikely(!q))
		return;
	ack_pay(qp, false);
	if (src)
		rvt_sge_state_init(&ss, src, 1, len);
	do {
		uint32_t done = len - left, h;
		uint32_t paylen = left > span ? span : left;
		struct urvt_pkt f;
		uint8_t op, *p;
		bool last;

		if (done < push_at && done + paylen > push_at)
			paylen = push_at - done;
		else if (done == push_at && push)
			pushed = read_push(qp, &ss, push);
		last = paylen == left;

		if (first && restart)
			op = last ? URVT_OP_RC_RDMA_READ_RESPONSE_ONLY
				  : URVT_OP_RC_RDMA_READ_RESPONSE_FIRST;
		else
			op = last ? URVT_OP_RC_RDMA_READ_RESPONSE_LAST
				  : URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE;
		urvt_pkt_init(&f, qp->allowed_ops + op, qp->remote_qpn, psn);
		f.paylen = paylen;
		f.span_more = paylen ? (paylen - 1) / qp->pmtu : 0;
		f.aeth.syn = URVT_AETH_SYN_ACK_UNLIMITED; /* FIRST/LAST/ONLY only */
		f.aeth.msn = qp->r_msn;
		if (by_ref) {
			/* where the bytes are, not the bytes */
			struct urvt_cma_ref ref = { .addr = pushed || placed ? 0 : (uintptr_t)ss.sge.vaddr,
						    .len = paylen };

			f.cma = true;
			f.paylen = sizeof(ref);
			p = urvt_build_start(qp, q, &f, peer_av(qp), &h);
			memcpy(p + h, &ref, sizeof(ref));
			urvt_build_finish(qp, q, p, h + sizeof(ref));
			urvt_sge_skip(&ss, paylen);
			qp_count(qp, URVT_CTR_CMA_REFS_SENT, 1);
			qp_count(qp, URVT_CTR_CMA_REF_BYTES, paylen);
		} else if (op != URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE ||
			   !urvt_build_next_middle(qp, q, f.opcode, psn, false, &ss, paylen)) {
			/* a MIDDLE after one is built from it (docs/transport.md
			 * "A message's middle packets") */
			p = urvt_build_start(qp, q, &f, peer_av(qp), &h);
			urvt_build_finish_sge(qp, q, p, h, &ss, paylen);
		}
		left -= paylen;
		psn = urvt_psn_add(psn, f.span_more + 1);
		first = false;
	} while (left);
}

/* Enter a receive completion; an overflowing CQ takes the QP to ERR. */
static bool recv_complete(struct rvt_qp *qp, struct ibv_wc *wc, bool se)
{
	rvt_release_rsge(qp);
	qp->r_wrid_valid = false;
	if (!rvt_cq_enter(qp->recv_cq, wc, se))
		return rvt_error_qp_locked(qp, IBV_WC_LOC_QP_OP_ERR);
	return false;
}

static void wc_init(struct rvt_qp *qp, struct ibv_wc *wc, enum ibv_wc_opcode op, uint32_t len)
{
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = qp->r_wr_id;
	wc->status = IBV_WC_SUCCESS;
	wc->opcode = op;
	wc->byte_len = len;
	wc->qp_num = qp->qpn;
	wc->src_qp = qp->remote_qpn;
	wc->pkey_index = qp->pkey_index;
}

/* Release the WRITE target (its MR reference). */
static void rdma_done(struct rvt_qp *qp)
{
	if (qp_tp(qp)->r_rdma_valid) {
		rvt_put_sge(&qp->r_rdma_sge);
		qp_tp(qp)->r_rdma_valid = false;
	}
}

/* A receive WQE for a SEND's first packet (or reuse the one a dropped UC
 * message left behind). 1 ok, 0 none, -1 bad WQE. */
static int take_rwqe(struct rvt_qp *qp, bool wr_id_only)
{
	int ret;

	if (qp->r_wrid_valid) {
		qp_tp(qp)->r_cur = qp->r_sge;
		qp->r_rcv_len = 0;
		return 1;
	}
	ret = rvt_get_rwqe(qp, wr_id_only);
	if (ret > 0) {
		qp_tp(qp)->r_cur = qp->r_sge;
		qp->r_rcv_len = 0;
	}
	return ret;
}

/* The PMTUs a SEND/WRITE packet stands for: 1, or a span's (recv.c,
 * docs/shm.md "Spans"); its last PSN. */
static uint32_t span_bytes(const struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	return (pkt->span_more + 1) * qp->pmtu;
}

static uint32_t pkt_lpsn(const struct urvt_pkt *pkt)
{
	return urvt_psn_add(pkt->psn, pkt->span_more);
}

/* rc-protocol §3.5 payload length of SEND/WRITE packets by position; a
 * span is as long as its PMTUs would be, each but the last full. */
static bool len_ok(const struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	uint32_t m = pkt->mask, span = span_bytes(qp, pkt);

	if (m & (URVT_FIRST_MASK | URVT_MIDDLE_MASK))
		return pkt->paylen == span;
	if (pkt->span_more && pkt->paylen <= span - qp->pmtu)
		return false; /* its last PMTU would be empty */
	if (m & URVT_ONLY_MASK)
		return pkt->paylen <= span;
	return pkt->paylen >= 1 && pkt->paylen <= span; /* LAST */
}

/* SEND packet execution (RC and UC). */
static enum resp_res exec_send(struct rvt_qp *qp, const struct urvt_pkt *pkt, bool *lastwqe)
{
	struct ibv_wc wc;

	if (pkt->mask & URVT_START_MASK) {
		int ret = take_rwqe(qp, false);
		if (ret < 0)
			return RESP_NAK_OP;
		if (ret == 0)
			return RESP_RNR;
	} else if (!qp->r_wrid_valid) {
		return RESP_NAK_INV;
	}
	if (!len_ok(qp, pkt))
		return RESP_NAK_INV;
	if (qp->r_rcv_len + pkt->paylen > qp->r_len)
		return RESP_NAK_LEN;
	if (pkt->paylen)
		rvt_copy_sge(&qp_tp(qp)->r_cur, pkt->payload, pkt->paylen, false, false);
	qp->r_rcv_len += pkt->paylen;
	if (!(pkt->mask & URVT_END_MASK))
		return RESP_OK;

	wc_init(qp, &wc, IBV_WC_RECV, qp->r_rcv_len);
	if (pkt->mask & URVT_IMMDT_MASK) {
		wc.wc_flags |= IBV_WC_WITH_IMM;
		wc.imm_data = htobe32(pkt->immdt);
	}
	if (pkt->mask & URVT_IETH_MASK) {
		if (rvt_invalidate_rkey(qp, pkt->ieth_rkey))
			return RESP_INV_FAIL;
		wc.wc_flags |= IBV_WC_WITH_INV;
		wc.invalidated_rkey = pkt->ieth_rkey;
	}
	qp->r_msn = urvt_msn_add(qp->r_msn, 1);
	*lastwqe |= recv_complete(qp, &wc, pkt->se);
	return RESP_OK;
}

/* The receive WQE of a WRITE WITH IMMEDIATE, wr_id only (unless a dropped
 * UC SEND left one). */
static enum resp_res take_imm_rwqe(struct rvt_qp *qp)
{
	int ret;

	if (qp->r_wrid_valid)
		return RESP_OK;
	ret = rvt_get_rwqe(qp, true);
	if (ret < 0)
		return RESP_NAK_OP;
	return ret ? RESP_OK : RESP_RNR;
}

/* RDMA WRITE packet execution (RC and UC). */
static enum resp_res exec_write(struct rvt_qp *qp, const struct urvt_pkt *pkt, bool *lastwqe)
{
	bool imm = pkt->mask & URVT_IMMDT_MASK;
	struct rvt_sge_state ss;
	uint32_t left;

	/* rc-protocol §3.3, before the receive WQE: a forbidden WRITE never
	 * waits for one */
	if (!(qp->qp_access_flags & IBV_ACCESS_REMOTE_WRITE))
		return RESP_NAK_INV;
	/* RC: WRITE WITH IMMEDIATE needs its receive WQE before anything
	 * else (RNR before the key, as rxe) */
	if (imm && qp->type == IBV_QPT_RC) {
		enum resp_res r = take_imm_rwqe(qp);
		if (r != RESP_OK)
			return r;
	}
	if (pkt->mask & URVT_START_MASK) {
		enum rvt_rkey_res r;

		rdma_done(qp);
		qp_tp(qp)->r_rdma_total = pkt->reth.len;
		memset(&qp->r_rdma_sge, 0, sizeof(qp->r_rdma_sge));
		r = rvt_chk_rkey(qp, &qp->r_rdma_sge, pkt->reth.va, pkt->reth.len, pkt->reth.rkey,
				 IBV_ACCESS_REMOTE_WRITE);
		if (r != RVT_RKEY_OK)
			return rkey_nak(r);
		/* rc-protocol §3.6: 0 bytes, no key */
		qp_tp(qp)->r_rdma_valid = pkt->reth.len != 0;
	}
	/* rc-protocol §3.6: PMTU-sized packets while more than a PMTU is left,
	 * then the rest (a span: its PMTUs, the last one with the rest) */
	left = qp->r_rdma_sge.length;
	if (left > span_bytes(qp, pkt)) {
		if (pkt->paylen != span_bytes(qp, pkt) || (pkt->mask & URVT_END_MASK))
			return RESP_NAK_INV;
	} else if (pkt->paylen != left || !(pkt->mask & URVT_END_MASK) ||
		   (pkt->span_more && left <= span_bytes(qp, pkt) - qp->pmtu)) {
		return RESP_NAK_INV;
	}
	/* UC: only once the packet passed every check, so that a dropped
	 * message leaves its receive WQE posted (rc-protocol §6; a WQE taken
	 * for its wr_id only has no SGEs a later SEND could reuse) */
	if (imm && qp->type != IBV_QPT_RC) {
		enum resp_res r = take_imm_rwqe(qp);
		if (r != RESP_OK)
			return r;
	}
	if (pkt->paylen) {
		ss.sge = qp->r_rdma_sge;
		ss.sg_list = NULL;
		ss.num_sge = 1;
		ss.total_len = left;
		/* the final bytes land last (a peer may poll them) */
		rvt_copy_sge(&ss, pkt->payload, pkt->paylen, false,
			     !!(pkt->mask & URVT_END_MASK));
		qp->r_rdma_sge.vaddr = ss.sge.vaddr;
		qp->r_rdma_sge.length = ss.sge.length;
	}
	if (!(pkt->mask & URVT_END_MASK))
		return RESP_OK;
	rdma_done(qp);
	qp->r_msn = urvt_msn_add(qp->r_msn, 1);
	if (imm) {
		struct ibv_wc wc;
		wc_init(qp, &wc, IBV_WC_RECV_RDMA_WITH_IMM, qp_tp(qp)->r_rdma_total);
		wc.wc_flags = IBV_WC_WITH_IMM;
		wc.imm_data = htobe32(pkt->immdt);
		*lastwqe |= recv_complete(qp, &wc, pkt->se);
	}
	return RESP_OK;
}

/* A responder resource (rc-protocol §3.4): ring of max_dest_rd_atomic entries. */
static struct rvt_ack_entry *res_alloc(struct rvt_qp *qp)
{
	uint32_t n = qp->max_dest_rd_atomic;
	struct rvt_ack_entry *e;

	if (qp->r_head_ack >= n)
		qp->r_head_ack = 0;
	e = &qp->r_ack_queue[qp->r_head_ack];
	qp->r_head_ack = (qp->r_head_ack + 1) % n;
	return e;
}

/* A responder resource for the READ/atomic request pkt (PSNs pkt->psn to
 * lpsn, its target): what a duplicate is answered from (rc_duplicate). */
static struct rvt_ack_entry *res_save(struct rvt_qp *qp, const struct urvt_pkt *pkt,
				      uint32_t lpsn, uint64_t va, uint32_t rkey, uint32_t len)
{
	struct rvt_ack_entry *e = res_alloc(qp);

	e->psn = pkt->psn;
	e->lpsn = lpsn;
	e->opcode = pkt->opcode;
	e->valid = 1;
	e->va = va;
	e->rkey = rkey;
	e->length = len;
	return e;
}

/* Answer the READ request pkt for len bytes at sge by reference (docs/shm.md
 * "Single copy")? Where the requester asked (recv.c passes that on only
 * from a link whose peer can read us) and the bytes are worth a system
 * call. Not ODP memory: its pages may not be there yet. */
static bool read_by_ref(struct rvt_qp *qp, const struct urvt_pkt *pkt, const struct rvt_sge *sge,
			uint32_t len)
{
	return pkt->cma && len >= URVT_CMA_MIN && !rvt_sge_odp(sge) &&
	       urvt_tx_cma(qp_net(qp), peer_av(qp));
}

/* Does the READ request pkt for len bytes ask for a push we can make: its
 * last bytes, from a PMTU boundary (req.c rd_ask_push)? Then *push. */
static bool read_push_asked(struct rvt_qp *qp, const struct urvt_pkt *pkt, uint32_t len,
			    struct urvt_cma_push *push)
{
	if (pkt->paylen != sizeof(*push))
		return false;
	memcpy(push, pkt->payload, sizeof(*push)); /* once: the ring is shared */
	if (push->whole && push->whole != push->addr - (len - push->len))
		push->whole = 0; /* not the same buffer: not the whole */
	return push->addr && push->len && push->len < len && !((len - push->len) % qp->pmtu);
}

/*
 * READs of a batch (docs/shm.md "Single copy", READs of a batch). A
 * requester asks several READs at a time (UCX 8), and each push or read by
 * reference is a system call that costs about a microsecond beyond its
 * copy. So a READ that asked for a push into one buffer waits for the end
 * of the receive batch (rx.c); there the first 3/8 of a QP's waiting READs
 * are answered by reference, each read whole by the requester, while the
 * rest are written into the requester in one call and answered as pushed.
 * A READ that waited alone, or READs that land on the same bytes, are
 * split as any other (read_respond). Until they are answered the QP
 * answers nothing else: every request packet but the next such READ, and
 * every NAK, pays them first (reads_pay), and nothing waits behind held
 * packets (ooo_drain answers once at its end).
 */
static bool read_wait(struct rvt_qp *qp, const struct rvt_sge *sge, uint32_t len, uint32_t psn,
		      const struct urvt_cma_push *push)
{
	struct urvt_txq *q;
	struct urvt_read_due *e;

	if (!push->whole || len > URVT_CMA_UNEVEN_MAX || qp_tp(qp)->ack_hold || !urvt_in_rx())
		return false;
	q = urvt_txq_get();
	if (!q || q->read_due_n == URVT_READS_DUE)
		return false;
	e = &q->read_due[q->read_due_n++];
	rvt_get_qp(qp);
	e->qp = qp;
	e->sge = *sge;
	e->len = len;
	e->psn = psn;
	e->push = *push;
	qp_tp(qp)->read_due = true;
	return true;
}

/* Write the waiting READs d[0..n) whole into the requester with one call,
 * as far as they name one epoch, and answer them: as pushed, or by
 * reference where the push could not be made. */
static void reads_push(struct rvt_qp *qp, struct urvt_read_due *d, uint32_t n)
{
	struct iovec local[URVT_READS_DUE], remote[URVT_READS_DUE];
	size_t total = 0;
	uint32_t m;
	bool pushed;

	for (m = 0; m < n && d[m].push.epoch == d[0].push.epoch; m++) {
		local[m].iov_base = d[m].sge.vaddr;
		remote[m].iov_base = (void *)(uintptr_t)d[m].push.whole;
		local[m].iov_len = remote[m].iov_len = d[m].len;
		total += d[m].len;
	}
	pushed = cma_push(qp, d[0].push.epoch, local, remote, m, total);
	if (pushed)
		qp_count(qp, URVT_CTR_CMA_PUSH_READS, m);
	for (uint32_t i = 0; i < n; i++)
		read_respond(qp, &d[i].sge, d[i].len, d[i].psn, true, true, NULL, pushed && i < m);
}

/* Do two of the waiting READs d[0..k) land on the same bytes of the
 * requester (a benchmark that reads into one buffer)? Read whole by the
 * two processes at once, those bytes would bounce between their caches. */
static bool reads_overlap(const struct urvt_read_due *d, uint32_t k)
{
	for (uint32_t i = 0; i < k; i++)
		for (uint32_t j = i + 1; j < k; j++)
			if (d[i].push.whole < d[j].push.whole + d[j].len &&
			    d[j].push.whole < d[i].push.whole + d[i].len)
				return true;
	return false;
}

/* Answer the READs of qp that wait in this thread's batch (r_lock held). */
static void reads_pay(struct rvt_qp *qp)
{
	struct urvt_txq *q = urvt_txq_peek();
	struct urvt_read_due d[URVT_READS_DUE];
	uint32_t k = 0, n = 0, by_ref;

	qp_tp(qp)->read_due = false;
	if (!q)
		return;
	for (uint32_t i = 0; i < q->read_due_n; i++) {
		if (q->read_due[i].qp == qp)
			d[k++] = q->read_due[i];
		else
			q->read_due[n++] = q->read_due[i];
	}
	q->read_due_n = n;
	if (!(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_RECV_OK)) {
		/* reset or error meanwhile: nothing more is answered */
	} else if (k == 1 || reads_overlap(d, k)) {
		/* each split between the two processes, as any READ */
		for (uint32_t i = 0; i < k; i++)
			read_respond(qp, &d[i].sge, d[i].len, d[i].psn, true, true, &d[i].push,
				     false);
	} else {
		/* the requester reads its share of them, the first */
		by_ref = (k * URVT_CMA_PULL_EIGHTHS + 4) / 8;
		for (uint32_t i = 0; i < by_ref; i++)
			read_respond(qp, &d[i].sge, d[i].len, d[i].psn, true, true, NULL, false);
		reads_push(qp, d + by_ref, k - by_ref);
	}
	for (uint32_t i = 0; i < k; i++) {
		rvt_put_sge(&d[i].sge);
		rvt_put_qp(qp);
	}
}

void urvt_resp_reads_due_flush(struct urvt_txq *q)
{
	while (q->read_due_n) {
		struct rvt_qp *qp = q->read_due[0].qp;
		bool fast;

		rvt_get_qp(qp); /* reads_pay puts the entries' references */
		fast = urvt_bias_take_noted(&qp->r_lock);
		reads_pay(qp);
		urvt_bias_leave(&qp->r_lock, fast);
		rvt_put_qp(qp);
	}
}

static enum resp_res exec_read(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	struct rvt_sge sge;
	struct urvt_cma_push push;
	uint32_t len = pkt->reth.len, npkts;
	enum rvt_rkey_res r;
	bool by_ref, push_asked;

	if (!qp->max_dest_rd_atomic)
		return RESP_NAK_INV; /* no responder resources */
	r = rvt_chk_rkey(qp, &sge, pkt->reth.va, len, pkt->reth.rkey, IBV_ACCESS_REMOTE_READ);
	if (r != RVT_RKEY_OK)
		return rkey_nak(r);
	/* IBTA C9-148: the MSN counts the READ now */
	qp->r_msn = urvt_msn_add(qp->r_msn, 1);
	npkts = len ? (len + qp->pmtu - 1) / qp->pmtu : 1;
	res_save(qp, pkt, urvt_psn_add(pkt->psn, npkts - 1), pkt->reth.va, pkt->reth.rkey, len);
	by_ref = read_by_ref(qp, pkt, &sge, len);
	push_asked = by_ref && read_push_asked(qp, pkt, len, &push);
	if (!push_asked || !read_wait(qp, &sge, len, pkt->psn, &push)) {
		if (unlikely(qp_tp(qp)->read_due))
			reads_pay(qp);
		read_respond(qp, len ? &sge : NULL, len, pkt->psn, true, by_ref,
			     push_asked ? &push : NULL, false);
		if (len)
			rvt_put_sge(&sge);
	}
	qp->r_psn = qp->r_ack_psn = urvt_psn_add(pkt->psn, npkts);
	return RESP_OK;
}

static enum resp_res exec_atomic(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	struct rvt_ack_entry *e;
	struct rvt_sge sge;
	uint64_t *target, orig;
	enum rvt_rkey_res r;

	if (!qp->max_dest_rd_atomic)
		return RESP_NAK_INV; /* no responder resources */
	r = rvt_chk_rkey(qp, &sge, pkt->atmeth.va, sizeof(uint64_t), pkt->atmeth.rkey,
			 IBV_ACCESS_REMOTE_ATOMIC);
	if (r != RVT_RKEY_OK)
		return rkey_nak(r);
	target = (uint64_t *)(void *)sge.vaddr;
	if (pkt->opcode == URVT_OP_RC_FETCH_ADD) {
		orig = __atomic_fetch_add(target, pkt->atmeth.swap_add, __ATOMIC_SEQ_CST);
	} else {
		orig = pkt->atmeth.comp;
		__atomic_compare_exchange_n(target, &orig, pkt->atmeth.swap_add, false,
					    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	}
	rvt_put_sge(&sge);
	qp->r_msn = urvt_msn_add(qp->r_msn, 1);
	/* saved: a duplicate gets this value again, never a second execution */
	e = res_save(qp, pkt, pkt->psn, pkt->atmeth.va, pkt->atmeth.rkey, 8);
	e->atomic_data = orig;
	send_atomic_ack(qp, pkt->psn, orig);
	qp->r_psn = qp->r_ack_psn = urvt_psn_next(pkt->psn);
	return RESP_OK;
}

/* ATOMIC_WRITE (qp-semantics §2.10): a responder resource, the 8-byte
 * store, an empty READ RESPONSE ONLY. */
static enum resp_res exec_atomic_write(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	enum rvt_rkey_res r;
	uint64_t val;

	if (!qp->max_dest_rd_atomic)
		return RESP_NAK_INV; /* no responder resources */
	if (pkt->paylen != sizeof(val) || pkt->reth.len != sizeof(val))
		return RESP_NAK_INV;
	memcpy(&val, pkt->payload, sizeof(val));
	r = rvt_atomic_write(qp, pkt->reth.va, pkt->reth.rkey, val);
	if (r != RVT_RKEY_OK)
		return rkey_nak(r);
	qp->r_msn = urvt_msn_add(qp->r_msn, 1);
	/* saved: a duplicate is answered again, never executed again */
	res_save(qp, pkt, pkt->psn, pkt->reth.va, pkt->reth.rkey, sizeof(val));
	read_respond(qp, NULL, 0, pkt->psn, true, false, NULL, false);
	qp->r_psn = qp->r_ack_psn = urvt_psn_next(pkt->psn);
	return RESP_OK;
}

/* rc-protocol §3.8 duplicates (RC): re-ACK, replay READ, resend the saved
 * atomic result. */
static void rc_duplicate(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	uint32_t n = qp->max_dest_rd_atomic;

	qp_count(qp, URVT_CTR_DUP_REQUESTS, 1);
	if (pkt->mask & (URVT_SEND_MASK | URVT_WRITE_MASK)) {
		urvt_send_ack(qp, URVT_AETH_SYN_ACK_UNLIMITED, urvt_psn_sub(qp->r_ack_psn, 1));
		return;
	}
	for (uint32_t i = 0; i < n && i <= URVT_MAX_RD_ATOMIC; i++) {
		struct rvt_ack_entry *e = &qp->r_ack_queue[i];
		if (!e->valid || e->opcode != pkt->opcode)
			continue;
		if (urvt_psn_cmp(pkt->psn, e->psn) < 0 || urvt_psn_cmp(pkt->psn, e->lpsn) > 0)
			continue;
		if (pkt->mask & URVT_ATOMIC_MASK) {
			if (pkt->psn == e->psn)
				send_atomic_ack(qp, pkt->psn, e->atomic_data);
			return;
		}
		if (pkt->mask & URVT_ATOMIC_WRITE_MASK) {
			if (pkt->psn == e->psn)
				read_respond(qp, NULL, 0, pkt->psn, true, false, NULL, false);
			return;
		}
		/* READ: the duplicate must ask for a part of the original */
		{
			uint64_t va = pkt->reth.va, end = va + pkt->reth.len;
			struct rvt_sge sge;
			if (pkt->reth.rkey != e->rkey || va < e->va || end > e->va + e->length)
				break;
			if (rvt_chk_rkey(qp, &sge, va, pkt->reth.len, pkt->reth.rkey,
					 IBV_ACCESS_REMOTE_READ) != RVT_RKEY_OK)
				break;
			read_respond(qp, pkt->reth.len ? &sge : NULL, pkt->reth.len, pkt->psn,
				     pkt->psn == e->psn, read_by_ref(qp, pkt, &sge, pkt->reth.len),
				     NULL, false); /* a replay never pushes (req.c rd_ask_push) */
			if (pkt->reth.len)
				rvt_put_sge(&sge);
			return;
		}
	}
	/* not (or no longer) known: the requester will time out */
	qp_count(qp, URVT_CTR_DROP_BASE + URVT_TDROP_RESP_SILENT, 1);
}

static bool is_mid_send(uint8_t op)
{
	op &= 0x1f;
	return op == 0x00 || op == 0x01; /* SEND_FIRST, SEND_MIDDLE */
}

static bool is_mid_write(uint8_t op)
{
	op &= 0x1f;
	return op == 0x06 || op == 0x07; /* WRITE_FIRST, WRITE_MIDDLE */
}

/* rc-protocol §3.2: is pkt allowed after the previous accepted opcode? */
static bool seq_ok(uint8_t prev, const struct urvt_pkt *pkt)
{
	uint32_t m = pkt->mask;

	if (is_mid_send(prev))
		return (m & URVT_SEND_MASK) && (m & (URVT_MIDDLE_MASK | URVT_LAST_MASK));
	if (is_mid_write(prev))
		return (m & URVT_WRITE_MASK) && (m & (URVT_MIDDLE_MASK | URVT_LAST_MASK));
	return m & URVT_START_MASK;
}

/* Send the NAK a failed request earns and move the responder to ERR. */
static bool rc_fail(struct rvt_qp *qp, const struct urvt_pkt *pkt, enum resp_res res)
{
	enum ibv_wc_status st;
	uint8_t syn;

	switch (res) {
	case RESP_NAK_INV:
		syn = urvt_aeth_syn_nak(URVT_NAK_INVALID_REQUEST);
		st = IBV_WC_LOC_QP_OP_ERR;
		break;
	case RESP_NAK_LEN:
		syn = urvt_aeth_syn_nak(URVT_NAK_INVALID_REQUEST);
		st = IBV_WC_LOC_LEN_ERR;
		break;
	case RESP_NAK_ACCESS:
		syn = urvt_aeth_syn_nak(URVT_NAK_REMOTE_ACCESS);
		st = IBV_WC_LOC_PROT_ERR;
		break;
	case RESP_NAK_OP:
		syn = urvt_aeth_syn_nak(URVT_NAK_REMOTE_OP);
		st = IBV_WC_LOC_QP_OP_ERR;
		break;
	default: /* RESP_INV_FAIL: class J, no NAK of its own */
		syn = 0;
		st = IBV_WC_REM_INV_REQ_ERR;
		break;
	}
	if (unlikely(qp_tp(qp)->read_due))
		reads_pay(qp); /* their PSNs come first */
	if (syn)
		urvt_send_ack(qp, syn, pkt->psn);
	rdma_done(qp);
	return rvt_error_qp_locked(qp, st);
}

/*
 * Past a gap. rc-protocol §3.1: a request past the expected PSN is not
 * executed and earns one PSN-sequence NAK; the requester resends from the
 * expected PSN (go-back-N). Under loss that resends a window for every
 * lost packet. So an RC request that comes past a gap is held, in PSN
 * order, instead of dropped; when the missing packet arrives the held
 * ones are executed in order (each as if it had just come) and one ACK --
 * or the NAK of the next gap, which acknowledges everything before it --
 * tells the requester, whose resend skips what arrived (resend_skips). On
 * the wire this is a responder that catches up fast: nothing runs out of
 * order, nothing is acknowledged that was not executed. The held copies
 * are pool buffers, only while half the pool is free; none for XRC.
 */
#define OOO_MAX 256   /* held packets per QP */
#define OOO_SPAN 1024 /* how far past the expected PSN a packet may be held */

static void ooo_hold(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	struct urvt_tp_qp *tp = qp_tp(qp);
	struct urvt_pktbuf **pp = &tp->ooo_head, *b;

	if (qp->xrcd || urvt_psn_diff(pkt->psn, qp->r_psn) >= OOO_SPAN || tp->ooo_n >= OOO_MAX || pkt->len > URVT_PKTBUF_DATA ||
	    pkt->len < pkt->hdr_len)
		return;
	/* packets come in PSN order but for the lost ones: mostly appended */
	if (tp->ooo_tail && urvt_psn_cmp(pkt->psn, tp->ooo_tail->pkt.psn) > 0)
		pp = &tp->ooo_tail->next;
	else
		while (*pp && urvt_psn_cmp((*pp)->pkt.psn, pkt->psn) < 0)
			pp = &(*pp)->next;
	if (*pp && (*pp)->pkt.psn == pkt->psn)
		return; /* held already */
	b = urvt_pkt_alloc_spare(qp_net(qp));
	if (!b)
		return;
	/* headers and payload may lie apart (a shared packet's parsed
	 * headers are a private copy: recv.c) */
	memcpy(b->data, pkt->bth, pkt->hdr_len);
	memcpy(b->data + pkt->hdr_len, pkt->payload, pkt->len - pkt->hdr_len);
	b->len = pkt->len;
	b->pkt = *pkt;
	b->pkt.bth = b->data;
	b->pkt.payload = b->data + pkt->hdr_len;
	b->next = *pp;
	if (!b->next)
		tp->ooo_tail = b;
	*pp = b;
	tp->ooo_n++;
	qp_count(qp, URVT_CTR_OOO_HELD, 1);
}

void urvt_resp_ooo_drop(struct rvt_qp *qp)
{
	struct urvt_tp_qp *tp = qp_tp(qp);

	urvt_pkt_free_list(qp_net(qp), tp->ooo_head);
	tp->ooo_head = tp->ooo_tail = NULL;
	tp->ooo_n = 0;
}

static bool rc_rcv(struct rvt_qp *qp, const struct urvt_pkt *pkt);

/*
 * The packet that fills the gap (psn == r_psn, start) has just been
 * executed, its ACK held back (ack_hold): the held ones that follow it
 * now, their ACKs held back too, then one answer for all -- an ACK of
 * the last, or the NAK of the next gap. One answer, or the requester
 * would go on from the first ACK and resend what is here already. No
 * answer if no held packet ran and the packet did not ask for one: a
 * go-back-N resend is passing through (its next packet is on its way).
 */
static bool ooo_drain(struct rvt_qp *qp, uint32_t start, bool ackreq)
{
	struct urvt_tp_qp *tp = qp_tp(qp);
	bool lastwqe = false, answered = false;
	uint32_t done = 0;

	while (tp->ooo_head) {
		struct urvt_pktbuf *b = tp->ooo_head;
		int32_t d = urvt_psn_cmp(b->pkt.psn, qp->r_psn);
		uint32_t before = qp->r_psn;

		if (d > 0)
			break;
		tp->ooo_head = b->next;
		if (!tp->ooo_head)
			tp->ooo_tail = NULL;
		tp->ooo_n--;
		if (d == 0) {
			lastwqe |= rc_rcv(qp, &b->pkt);
			if (qp->r_psn == before ||
			    !(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_RECV_OK)) {
				/* NAKed (RNR, error): the requester resends from here */
				urvt_pkt_free(qp_net(qp), b);
				urvt_resp_ooo_drop(qp);
				return lastwqe;
			}
			qp_count(qp, URVT_CTR_OOO_EXECUTED, 1);
			done++;
			/* READ and atomic requests are answered by their responses */
			answered = b->pkt.mask & (URVT_READ_MASK | URVT_ATOMIC_MASK |
						  URVT_ATOMIC_WRITE_MASK);
		}
		urvt_pkt_free(qp_net(qp), b);
	}
	if (qp->r_psn == start)
		return lastwqe; /* the gap's packet itself was NAKed */
	/* nothing held ran and nothing asked: an ordinary packet of a
	 * resend in progress, no answer (its next packet is on its way) */
	if (!done && !ackreq)
		return lastwqe;
	if (tp->ooo_head) {
		/* the next gap: its NAK acknowledges everything before it */
		qp->r_sent_nak = true;
		urvt_send_ack(qp, urvt_aeth_syn_nak(URVT_NAK_PSN_SEQ_ERR), qp->r_psn);
	} else if (!answered || qp->r_psn != urvt_psn_next(start)) {
		urvt_send_ack(qp, URVT_AETH_SYN_ACK_UNLIMITED, urvt_psn_sub(qp->r_psn, 1));
	}
	return lastwqe;
}

static bool rc_rcv(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	int32_t diff = urvt_psn_cmp(pkt->psn, qp->r_psn);
	enum resp_res res;
	bool lastwqe = false;

	/* rc-protocol §3.1 PSN check */
	if (diff > 0) {
		qp_count(qp, URVT_CTR_SEQ_ERRORS, 1);
		if (!qp->r_sent_nak) {
			qp->r_sent_nak = true;
			urvt_send_ack(qp, urvt_aeth_syn_nak(URVT_NAK_PSN_SEQ_ERR), qp->r_psn);
		}
		ooo_hold(qp, pkt);
		return false;
	}
	if (diff < 0) {
		rc_duplicate(qp, pkt);
		return false;
	}
	qp->r_sent_nak = false;
	/* rc-protocol §3.2 opcode sequence */
	if (!seq_ok(qp->r_state, pkt))
		return rc_fail(qp, pkt, RESP_NAK_INV);

	if (pkt->mask & URVT_SEND_MASK)
		res = exec_send(qp, pkt, &lastwqe);
	else if (pkt->mask & URVT_WRITE_MASK)
		res = exec_write(qp, pkt, &lastwqe);
	else if (pkt->mask & URVT_READ_MASK)
		res = exec_read(qp, pkt);
	else if (pkt->mask & URVT_ATOMIC_MASK)
		res = exec_atomic(qp, pkt);
	else if (pkt->mask & URVT_ATOMIC_WRITE_MASK)
		res = exec_atomic_write(qp, pkt);
	else
		res = RESP_NAK_INV; /* FLUSH: not supported */

	switch (res) {
	case RESP_OK:
		break;
	case RESP_RNR:
		/* rc-protocol §3.4: nothing changes; the requester resends this PSN */
		urvt_send_ack(qp, urvt_aeth_syn_rnr(qp->min_rnr_timer), pkt->psn);
		return lastwqe;
	default:
		return rc_fail(qp, pkt, res) || lastwqe;
	}
	qp->r_state = pkt->opcode;
	if (pkt->mask & (URVT_READ_MASK | URVT_ATOMIC_MASK | URVT_ATOMIC_WRITE_MASK))
		return lastwqe; /* answered by their responses */
	qp->r_psn = qp->r_ack_psn = urvt_psn_next(pkt_lpsn(pkt));
	/* rc-protocol §3.10: ACK only what asks for it (coalescing); while
	 * held packets run, one answer comes at the end (ooo_drain) */
	if (pkt->ackreq && !qp_tp(qp)->ack_hold)
		ack_owe(qp, pkt_lpsn(pkt));
	return lastwqe;
}

/*
 * An XRC target's request (roce-wire §3.1, qp-semantics §16.4): the RC
 * responder with the SRQ, PD and CQ of the SRQ the XRCETH names, for this
 * packet. An SRQ that does not exist or is of another XRC domain, or the
 * next packet of a message naming another SRQ than its first, earns NAK
 * Invalid Request before anything is executed.
 */
static bool xrc_rcv(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	struct rvt_srq *srq = rvt_xsrq_get(qp->rdi, pkt->xrc_srqn);
	bool lastwqe;

	/* the continuation rule only for the packet the responder expects: a
	 * duplicate or a packet past a gap is the RC responder's (re-ACK,
	 * replay, PSN-sequence NAK) and takes no WQE */
	if (unlikely(!srq || !rvt_xrcd_same(srq->xrcd, qp->xrcd) ||
		     (!(pkt->mask & URVT_START_MASK) && pkt->psn == qp->r_psn &&
		      pkt->xrc_srqn != qp->r_xrc_srqn))) {
		if (srq)
			rvt_xsrq_put(qp->rdi, srq);
		qp_count(qp, URVT_CTR_XRC_BAD_SRQ, 1);
		return rc_fail(qp, pkt, RESP_NAK_INV);
	}
	qp->srq = srq;
	qp->pd = srq->pd;
	qp->recv_cq = srq->cq;
	if ((pkt->mask & URVT_START_MASK) && pkt->psn == qp->r_psn)
		qp->r_xrc_srqn = pkt->xrc_srqn;
	lastwqe = rc_rcv(qp, pkt);
	qp->srq = NULL;
	qp->pd = NULL;
	qp->recv_cq = NULL;
	rvt_xsrq_put(qp->rdi, srq);
	return lastwqe;
}

/* UC: forget a partially received message (rc-protocol §6); the WQE is
 * kept for reuse. */
static void uc_reset_msg(struct rvt_qp *qp)
{
	if (qp->r_wrid_valid) {
		qp_tp(qp)->r_cur = qp->r_sge;
		qp->r_rcv_len = 0;
	}
	rdma_done(qp);
	qp->r_state = URVT_OP_UC_SEND_LAST;
}

static bool uc_rcv(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	enum resp_res res;
	bool lastwqe = false;

	if (qp->r_drop_msg || pkt->psn != qp->r_psn || !seq_ok(qp->r_state, pkt)) {
		/* rc-protocol §6: a gap or a sequence error loses the rest of the
		 * message; a FIRST/ONLY starts a new one (the expected PSN resyncs) */
		if (pkt->psn != qp->r_psn && !qp->r_drop_msg)
			qp_count(qp, URVT_CTR_SEQ_ERRORS, 1);
		uc_reset_msg(qp);
		if (!(pkt->mask & URVT_START_MASK)) {
			qp->r_drop_msg = true;
			qp->r_psn = urvt_psn_next(pkt_lpsn(pkt));
			qp_count(qp, URVT_CTR_DROP_BASE + URVT_TDROP_RESP_SILENT, 1);
			return false;
		}
		qp->r_drop_msg = false;
	}
	if (pkt->mask & URVT_SEND_MASK) {
		res = exec_send(qp, pkt, &lastwqe);
	} else {
		res = exec_write(qp, pkt, &lastwqe);
	}
	qp->r_psn = urvt_psn_next(pkt_lpsn(pkt));
	switch (res) {
	case RESP_OK:
		qp->r_state = pkt->opcode;
		return lastwqe;
	case RESP_NAK_OP:
		/* a malformed receive WQE (already completed LOC_PROT_ERR) */
		return rvt_error_qp_locked(qp, IBV_WC_LOC_QP_OP_ERR) || lastwqe;
	case RESP_INV_FAIL:
		return rvt_error_qp_locked(qp, IBV_WC_REM_INV_REQ_ERR) || lastwqe;
	default:
		/* UC never NAKs: drop the message (rc-protocol §6) */
		uc_reset_msg(qp);
		qp->r_drop_msg = !(pkt->mask & URVT_END_MASK);
		qp_count(qp, URVT_CTR_DROP_BASE + URVT_TDROP_RESP_SILENT, 1);
		return lastwqe;
	}
}

/* A payload up to this size goes into the receive buffer in one copy with
 * the GRH image before it (from the ring, still read once): a copy into
 * the scatter list was a small message's larger cost than the bytes. */
#define UD_JOIN_MAX 64

/* roce-wire §11: the GRH image of the IP header a UD packet of roce_len
 * bytes arrived with, into img: the QP's last one again when it is the
 * same (a same-host peer's datagrams differ in their length at most;
 * a UDP peer's in their IPv4 ID too), else made and kept. */
static void ud_grh(struct rvt_qp *qp, uint8_t *img, const struct urvt_ipinfo *ip,
		   uint32_t roce_len)
{
	struct urvt_tp_qp *tq = qp_tp(qp);

	if (!tq->grh_valid || tq->grh_len != roce_len || !urvt_ipinfo_same(&tq->grh_ip, ip)) {
		tq->grh_valid = !urvt_grh_fill(tq->grh_img, ip, roce_len);
		tq->grh_len = roce_len;
		tq->grh_ip = *ip;
	}
	memcpy(img, tq->grh_img, URVT_GRH_BYTES);
}

/* rc-protocol §7 UD receive: GRH image + payload into one receive WQE. */
static bool ud_rcv(struct rvt_qp *qp, const struct urvt_pkt *pkt, const struct urvt_ipinfo *ip)
{
	uint8_t img[URVT_GRH_BYTES + UD_JOIN_MAX]; /* the GRH image, maybe the payload */
	struct ibv_wc wc;
	int ret;

	if (pkt->paylen > qp->pmtu)
		goto drop;
	ret = rvt_get_rwqe(qp, false);
	if (ret < 0)
		return rvt_error_qp_locked(qp, IBV_WC_LOC_QP_OP_ERR);
	if (ret == 0)
		goto drop;
	if (pkt->paylen + URVT_GRH_BYTES > qp->r_len) {
		/* too small: dropped; the WQE waits for the next packet */
		qp->r_flags |= RVT_R_REUSE_SGE;
		goto drop;
	}
	/* roce-wire §11: the IP header this packet arrived with */
	ud_grh(qp, img, ip, pkt->len);
	if (pkt->paylen <= UD_JOIN_MAX) {
		memcpy(img + URVT_GRH_BYTES, pkt->payload, pkt->paylen);
		rvt_copy_sge(&qp->r_sge, img, URVT_GRH_BYTES + pkt->paylen, true, false);
	} else {
		rvt_copy_sge(&qp->r_sge, img, URVT_GRH_BYTES, true, false);
		rvt_copy_sge(&qp->r_sge, pkt->payload, pkt->paylen, true, false);
	}
	wc_init(qp, &wc, IBV_WC_RECV, pkt->paylen + URVT_GRH_BYTES);
	wc.src_qp = pkt->deth.sqp;
	wc.wc_flags = IBV_WC_GRH;
	/* RoCE has no SL; like ConnectX, say which IP header the GRH image
	 * holds (2: IPv4, 1: IPv6): UCX's UD transport (Debian's 1.13) reads
	 * it to find the destination address in the image (docs/deviations.md) */
	wc.sl = urvt_ipinfo_is_v4(ip) ? 2 : 1;
	if (pkt->mask & URVT_IMMDT_MASK) {
		wc.wc_flags |= IBV_WC_WITH_IMM;
		wc.imm_data = htobe32(pkt->immdt);
	}
	return recv_complete(qp, &wc, pkt->se);
drop:
	qp_count(qp, URVT_CTR_DROP_BASE + URVT_TDROP_RESP_SILENT, 1);
	return false;
}

void urvt_resp_rcv(struct rvt_qp *qp, struct urvt_pkt *pkt, const struct urvt_ipinfo *ip)
{
	bool comm_est = false, lastwqe = false, fast = urvt_bias_take_noted(&qp->r_lock);

	/* re-check under the lock: modify/reset/error may have run */
	if (!(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_RECV_OK)) {
		urvt_bias_leave(&qp->r_lock, fast);
		qp_count(qp, URVT_CTR_DROP_BASE + URVT_TDROP_BAD_STATE, 1);
		return;
	}
	/* READs of a batch: answered before anything but the next such READ */
	if (unlikely(qp_tp(qp)->read_due) &&
	    !(pkt->cma && pkt->opcode == URVT_OP_RC_RDMA_READ_REQUEST && pkt->psn == qp->r_psn))
		reads_pay(qp);
	switch (qp->type) {
	case IBV_QPT_RC:
		if (unlikely(qp_tp(qp)->ooo_head) && pkt->psn == qp->r_psn && !qp->xrcd) {
			uint32_t start = qp->r_psn;
			qp_tp(qp)->ack_hold = true;
			lastwqe = rc_rcv(qp, pkt);
			lastwqe |= ooo_drain(qp, start, pkt->ackreq);
			qp_tp(qp)->ack_hold = false;
			break;
		}
		lastwqe = qp->xrcd ? xrc_rcv(qp, pkt) : rc_rcv(qp, pkt);
		break;
	case IBV_QPT_UC:
		lastwqe = uc_rcv(qp, pkt);
		break;
	default:
		lastwqe = ud_rcv(qp, pkt, ip);
		break;
	}
	/* qp-semantics §5.6: the first packet in RTR */
	if (qp->type != IBV_QPT_UD && !qp->comm_est && rvt_qp_state(qp) == IBV_QPS_RTR) {
		qp->comm_est = true;
		comm_est = true;
	}
	urvt_bias_leave(&qp->r_lock, fast);
	if (comm_est)
		urvt_dispatch_async_event(qp->uctx, IBV_EVENT_COMM_EST, qp);
	if (lastwqe)
		urvt_dispatch_async_event(qp->uctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp);
}
