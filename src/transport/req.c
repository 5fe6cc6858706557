/*
 * Requester (rc-protocol §2, §6, §7): turns send WQEs into request
 * packets. Runs in engine context (the s_sched token, core/ruc.c) and owns
 * s_cur, s_offset, s_psn and tp.{sge,cur_*,psn_hi}.
 *
 * WQE positions: [s_last, s_cur) have been sent completely (RC: "pending",
 * waiting for the completer); s_cur is the next to (continue to) send, with
 * s_offset bytes already sent. The PSNs were assigned at post (post.c).
 */
#include <string.h>

#include "core/mw.h"
#include "core/odp.h"
#include "core/ruc.h"
#include "core/rvt_api.h"
#include "transport/tp.h"
#include "wire/psn.h"

/* rc-protocol §2.3 / roce-wire §4: opcode from the WR and the packet's place;
 * base: the QP's opcode prefix (qp->allowed_ops: RC 0x00, UC 0x20, XRC 0xA0,
 * roce-wire §4.5). */
static uint8_t req_opcode(const struct rvt_swqe *wqe, uint8_t base, bool first, bool last)
{
	switch (wqe->opcode) {
	case IBV_WR_SEND:
		return base + (first ? (last ? 0x04 : 0x00) : (last ? 0x02 : 0x01));
	case IBV_WR_SEND_WITH_IMM:
		return base + (first ? (last ? 0x05 : 0x00) : (last ? 0x03 : 0x01));
	case IBV_WR_SEND_WITH_INV: /* RC and XRC only (post table) */
		return base + (first ? (last ? 0x17 : 0x00) : (last ? 0x16 : 0x01));
	case IBV_WR_RDMA_WRITE:
		return base + (first ? (last ? 0x0a : 0x06) : (last ? 0x08 : 0x07));
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return base + (first ? (last ? 0x0b : 0x06) : (last ? 0x09 : 0x07));
	case IBV_WR_RDMA_READ:
		return base + URVT_OP_RC_RDMA_READ_REQUEST;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return base + URVT_OP_RC_COMPARE_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return base + URVT_OP_RC_FETCH_ADD;
	case IBV_WR_ATOMIC_WRITE:
		return base + URVT_OP_RC_ATOMIC_WRITE;
	default:
		return 0xff;
	}
}

void urvt_sge_skip(struct rvt_sge_state *ss, uint32_t n)
{
	while (n && ss->num_sge) {
		uint32_t len = ss->sge.length < n ? ss->sge.length : n;
		ss->sge.vaddr += len;
		ss->sge.length -= len;
		n -= len;
		if (!ss->sge.length) {
			if (--ss->num_sge)
				ss->sge = *ss->sg_list++;
		}
	}
}

/* Position the gather cursor at s_cur + s_offset. */
static void cur_position(struct rvt_qp *qp, struct rvt_swqe *wqe)
{
	rvt_sge_state_init(&qp_tp(qp)->sge, wqe->sg_list, wqe->num_sge, wqe->length);
	urvt_sge_skip(&qp_tp(qp)->sge, qp->s_offset);
	qp_tp(qp)->cur_idx = qp->s_cur;
	qp_tp(qp)->cur_valid = true;
}

/* s_cur moved on to a new WQE. */
static void cur_next(struct rvt_qp *qp)
{
	qp->s_offset = 0;
	qp_tp(qp)->cur_started = false;
	qp_tp(qp)->cur_valid = false;
	qp->s_pkts_since_ackreq = 0;
}

/*
 * rc-protocol §4.3 rewind: restart at the oldest unretired WQE from
 * comp_psn. SEND and WRITE skip the packets already acknowledged; READ asks
 * for the bytes not received yet; every later WQE is resent from its start.
 */
void urvt_req_rewind(struct rvt_qp *qp)
{
	uint32_t head = load_acquire(&qp->s_head);
	struct rvt_swqe *wqe;
	int32_t npsn;

	/* modify/query read s_cur (SQD, ruc.c): atomic stores */
	WRITE_ONCE(qp->s_cur, qp->s_last);
	cur_next(qp);
	qp->s_psn = qp_tp(qp)->comp_psn;
	/* what asked for an ACK may be lost: ask again */
	qp_tp(qp)->ackreq_valid = false;
	if (qp->s_last == head)
		return;
	wqe = rvt_get_swqe_ptr(qp, qp->s_last);
	npsn = urvt_psn_diff(qp_tp(qp)->comp_psn, wqe->psn);
	if (npsn < 0)
		npsn = 0;
	if (npsn > urvt_psn_diff(wqe->lpsn, wqe->psn))
		npsn = urvt_psn_diff(wqe->lpsn, wqe->psn);
	if (wqe->opcode != IBV_WR_ATOMIC_CMP_AND_SWP &&
	    wqe->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) {
		uint64_t off = (uint64_t)npsn * qp->pmtu;
		qp->s_offset = off > wqe->length ? wqe->length : (uint32_t)off;
	}
	qp->s_psn = urvt_psn_add(wqe->psn, (uint32_t)npsn);
	URVT_DBG("qp %u: rewind to psn %#x (wqe psn %#x, offset %u)", qp->qpn, qp->s_psn,
		 wqe->psn, qp->s_offset);
}

/* LOCAL_INV or BIND_MW reaching the requester (rc-protocol §2.1: done at
 * once, in order). */
static void req_local_op(struct rvt_qp *qp, struct rvt_swqe *wqe)
{
	/* s_cur == s_last: moves s_cur too */
	rvt_send_complete(qp, wqe, rvt_do_local_op(qp, wqe));
	cur_next(qp);
}

/* Note a packet with this PSN went out. */
static void sent_psn(struct rvt_qp *qp, uint32_t psn, uint32_t npsn)
{
	uint32_t next = urvt_psn_add(psn, npsn);

	if (urvt_psn_cmp(psn, qp_tp(qp)->psn_hi) < 0)
		qp_count(qp, URVT_CTR_RETRANSMITS, 1);
	/* nothing was outstanding: the retransmit timer starts now (rc-protocol §4.2) */
	if (qp_tp(qp)->psn_hi == qp_tp(qp)->comp_psn)
		qp_tp(qp)->progress_ns = urvt_now_ns();
	if (urvt_psn_cmp(next, qp_tp(qp)->psn_hi) > 0)
		qp_tp(qp)->psn_hi = next;
	qp->s_psn = next;
	qp_tp(qp)->cur_started = true;
}

/* A packet that asks for an ACK is in flight (sent after comp_psn). */
static bool ackreq_in_flight(const struct urvt_tp_qp *tp)
{
	return tp->ackreq_valid && urvt_psn_cmp(tp->ackreq_psn, tp->comp_psn) >= 0;
}

/*
 * PMTUs the next packet of s_cur takes: 1, or to a peer whose link joins
 * them (a span, docs/shm.md "Spans") as many as the link takes, the
 * message has left and the window allows. RC and UC only: their
 * responders count a span's PSNs (resp.c); an XRC target or a probe gets
 * single packets.
 */
static uint32_t req_span_pmtus(struct rvt_qp *qp, uint32_t remaining, uint32_t allow)
{
	uint32_t n, left;

	if (remaining <= qp->pmtu || (qp->type != IBV_QPT_RC && qp->type != IBV_QPT_UC) ||
	    qp_tp(qp)->probing)
		return 1;
	n = urvt_tx_span(qp_net(qp), &qp->remote_av) / qp->pmtu;
	if (n <= 1)
		return 1;
	left = (remaining + qp->pmtu - 1) / qp->pmtu;
	if (n > left)
		n = left;
	if (n > URVT_BTH_SPAN_MAX + 1)
		n = URVT_BTH_SPAN_MAX + 1;
	return n < allow ? n : allow > 1 ? allow : 1;
}

/* rc-protocol §2.3: AckReq on the last packet and every
 * URVT_MAX_PKT_PER_ACK packets in between, and on probes; with a fixed
 * window also on the packet that fills it (its ACK covers them all), under
 * congestion control also whenever none is in flight and the window is near
 * its end (it may close under a QP because of other QPs: an ACK must be on
 * its way). For the next packet, of npsn PSNs, that allow lets go. */
static bool req_wants_ack(const struct rvt_qp *qp, uint32_t npsn, bool last, uint32_t allow)
{
	const struct urvt_tp_qp *tp = qp_tp(qp);

	return last || qp->s_pkts_since_ackreq + npsn >= URVT_MAX_PKT_PER_ACK || tp->probing ||
	       tp->resend_left == 1 || (qp->type == IBV_QPT_RC && allow <= npsn) ||
	       (tp->peer && allow <= URVT_MAX_PKT_PER_ACK && !ackreq_in_flight(tp));
}

/* A SEND/WRITE packet of npsn PSNs from psn went out, asking for an ACK
 * or not: what the requester counts for AckReq, the window and the timer. */
static void req_sent(struct rvt_qp *qp, uint32_t psn, uint32_t npsn, bool ackreq)
{
	uint32_t lpsn = urvt_psn_add(psn, npsn - 1);

	qp->s_pkts_since_ackreq += npsn;
	if (ackreq) {
		qp->s_pkts_since_ackreq = 0;
		qp_tp(qp)->ackreq_psn = lpsn;
		qp_tp(qp)->ackreq_valid = true;
		if (urvt_psn_cmp(psn, qp_tp(qp)->psn_hi) >= 0)
			urvt_cc_sent(qp, lpsn);
	}
	sent_psn(qp, psn, npsn);
}

/*
 * The message's next packets while they are middle packets of one PMTU to
 * UDP, each built from the one before (tx.c urvt_build_next_middle) after
 * the checks req_run makes per packet that can change between them (the
 * QP's state, RNR wait, the window): most of a long message's packets.
 * Not for a probe or a resend, whose packets req_run counts. psn: the
 * next packet's; op: the middle opcode of the WQE.
 */
static void req_send_middles(struct rvt_qp *qp, struct rvt_swqe *wqe, struct urvt_txq *q,
			     uint8_t op, uint32_t psn)
{
	struct urvt_tp_qp *tp = qp_tp(qp);
	bool rc = qp->type == IBV_QPT_RC;

	while (!tp->probing && !tp->resend_left && wqe->length - qp->s_offset > qp->pmtu &&
	       (ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_SEND_OK) &&
	       !(qp->s_flags & RVT_S_WAIT_RNR)) {
		uint32_t allow = rc ? urvt_cc_allow(qp, psn) : UINT32_MAX;
		bool ackreq;

		if (!allow)
			return; /* req_run stalls */
		ackreq = req_wants_ack(qp, 1, false, allow);
		if (!urvt_build_next_middle(qp, q, op, psn, ackreq, &tp->sge, qp->pmtu))
			return;
		qp->s_offset += qp->pmtu;
		req_sent(qp, psn, 1, ackreq);
		psn = urvt_psn_add(psn, 1);
	}
}

/* One SEND/WRITE packet of s_cur (one PMTU, or a span of several), and
 * the middle packets that may follow it at once. Returns true when the
 * last packet went out. */
static bool req_send_write(struct rvt_qp *qp, struct rvt_swqe *wqe, struct urvt_txq *q,
			   uint32_t psn, uint32_t allow)
{
	uint32_t remaining = wqe->length - qp->s_offset;
	uint32_t npsn = req_span_pmtus(qp, remaining, allow);
	uint32_t span = npsn * qp->pmtu;
	uint32_t paylen = remaining > span ? span : remaining;
	bool first = qp->s_offset == 0, last = remaining <= span;
	struct urvt_pkt f;
	uint32_t h;
	uint8_t *p;

	urvt_pkt_init(&f, req_opcode(wqe, qp->allowed_ops, first, last), qp->remote_qpn, psn);
	f.xrc_srqn = wqe->xrc_srqn; /* XRC only: the only opcodes with an XRCETH */
	f.paylen = paylen;
	f.span_more = npsn - 1;
	f.ackreq = req_wants_ack(qp, npsn, last, allow);
	if (last) {
		f.se = (wqe->send_flags & IBV_SEND_SOLICITED) &&
		       (urvt_opcode[f.opcode].mask & URVT_SE_OK_MASK);
		if (wqe->opcode == IBV_WR_SEND_WITH_IMM ||
		    wqe->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
			f.immdt = be32toh(wqe->ex.imm_data);
		if (wqe->opcode == IBV_WR_SEND_WITH_INV)
			f.ieth_rkey = wqe->ex.invalidate_rkey;
	}
	if (first && (urvt_opcode[f.opcode].mask & URVT_RETH_MASK)) {
		f.reth.va = wqe->wr.rdma.remote_addr;
		f.reth.rkey = wqe->wr.rdma.rkey;
		f.reth.len = wqe->length;
	}
	p = urvt_build_start(qp, q, &f, &qp->remote_av, &h);
	urvt_build_finish_sge(qp, q, p, h, &qp_tp(qp)->sge, paylen);
	qp->s_offset += paylen;
	req_sent(qp, psn, npsn, f.ackreq);
	if (!first && !last && paylen == qp->pmtu)
		req_send_middles(qp, wqe, q, f.opcode, urvt_psn_add(psn, 1));
	return last;
}

/* End PSN + 1 of the READ request on the wire that holds psn (a rewind asks
 * again inside it, so the responder's resource for it replays: rc-protocol
 * §3.8); 0 if none does. */
static uint32_t rd_req_end(const struct urvt_tp_qp *tp, uint32_t psn)
{
	for (uint32_t i = 0; i < tp->rd_n; i++) {
		uint32_t e = tp->rd_end[(tp->rd_head + i) % URVT_RD_REQS_MAX];
		if (urvt_psn_cmp(e, psn) > 0)
			return e;
	}
	return 0;
}

/* A new READ/atomic request ending at end (exclusive) is on the wire. */
static void rd_req_push(struct urvt_tp_qp *tp, uint32_t end)
{
	tp->rd_end[(tp->rd_head + tp->rd_n) % URVT_RD_REQS_MAX] = end;
	tp->rd_n++;
}

/* Requests the responder can hold for us (max_rd_atomic, rc-protocol §5). */
static uint32_t rd_req_cap(const struct rvt_qp *qp)
{
	return qp->max_rd_atomic < URVT_RD_REQS_MAX ? qp->max_rd_atomic : URVT_RD_REQS_MAX;
}

/*
 * May this READ request be answered by reference (docs/shm.md "Single
 * copy"): the responder names where its bytes are and our completer reads
 * them from its process? Then the WQE holds back what follows it until it
 * is done (urvt_req_run).
 */
static bool rd_ask_cma(struct rvt_qp *qp, struct rvt_swqe *wqe, uint32_t len)
{
	struct urvt_tp_qp *tp = qp_tp(qp);

	if (len < URVT_CMA_MIN || tp->cma_off || (wqe->wqe_flags & RVT_SWQE_ODP) ||
	    !urvt_tx_cma(qp_net(qp), &qp->remote_av))
		return false;
	if (!(wqe->wqe_flags & RVT_SWQE_T_CMA)) {
		wqe_flags_set(wqe, RVT_SWQE_T_CMA);
		tp->cma_reads++;
	}
	return true;
}

/*
 * Ask the responder to write the last part of this request's left bytes
 * (from a PMTU boundary, inside one SGE) straight into our buffer while we
 * read the first out of it: two cores copy at once (docs/shm.md "Single
 * copy"). We read half, or 3/8 of a READ of up to URVT_CMA_UNEVEN_MAX:
 * there the requester has the rendezvous's other steps to run too (Open
 * MPI 64 KiB with UCX_PROTO_ENABLE=y 13.2-13.8 GB/s at 3/8, 12.0-12.7 at
 * 1/4, 12.5-13.0 at 1/2; ib_read_bw 32, 64 and 128 KiB 5-13 % above 1/4;
 * 1 MiB best at half). The bytes start at WQE offset off. sizeof(*push),
 * or 0: not asked.
 */
static uint32_t rd_ask_push(struct rvt_qp *qp, struct rvt_swqe *wqe, uint32_t off, uint32_t left,
			    struct urvt_cma_push *push)
{
	uint32_t ours = left <= URVT_CMA_UNEVEN_MAX ? left / 8 * URVT_CMA_PULL_EIGHTHS : left / 2;
	uint32_t pull = (ours + qp->pmtu - 1) / qp->pmtu * qp->pmtu;
	uint64_t o = (uint64_t)off + pull;

	uint32_t epoch;

	if (pull >= left || !urvt_tx_cma_epoch(qp_net(qp), &qp->remote_av, &epoch))
		return 0;
	for (uint32_t i = 0; i < wqe->num_sge; i++) {
		const struct rvt_sge *g = &wqe->sg_list[i];

		if (o < g->sge_length) {
			if (o + (left - pull) > g->sge_length)
				return 0;
			push->addr = (uintptr_t)g->vaddr + o;
			push->len = left - pull;
			push->epoch = epoch;
			/* the first byte in the same buffer: all of them are */
			push->whole = o >= pull ? push->addr - pull : 0;
			return sizeof(*push);
		}
		o -= g->sge_length;
	}
	return 0;
}

/*
 * READ request (rc-protocol §2.3 RETH with the remainder) or atomic
 * (AtomicETH). Under congestion control a READ is asked for in pieces that
 * fit the window, each an ordinary READ request for the next bytes (the
 * PSNs are the ones the whole READ takes, rc-protocol §2.3), so the
 * responses, which nobody acknowledges, stay inside the window too.
 * Returns 1 when the WQE's last request went out, 0 when more follow, -1
 * when the windows or the responder's resources make it wait.
 */
static int req_rd_atomic(struct rvt_qp *qp, struct rvt_swqe *wqe, struct urvt_txq *q,
			 uint32_t psn, uint32_t allow)
{
	struct urvt_tp_qp *tp = qp_tp(qp);
	bool resend = urvt_psn_cmp(psn, tp->psn_hi) < 0;
	int32_t base = urvt_psn_diff(psn, tp->comp_psn);
	struct urvt_pkt f;
	struct urvt_cma_push push;
	const void *pay = &wqe->wr.atomic.compare_add;
	uint32_t h, npsn = 1;
	uint8_t *p;
	int ret = 1;

	if (!resend && tp->peer && tp->rd_n >= rd_req_cap(qp))
		return -1;
	urvt_pkt_init(&f, req_opcode(wqe, qp->allowed_ops, true, true), qp->remote_qpn, psn);
	f.xrc_srqn = wqe->xrc_srqn;
	f.ackreq = true;
	if (wqe->opcode == IBV_WR_RDMA_READ) {
		uint32_t left = wqe->length - qp->s_offset;
		/* rc-protocol §2.3: a READ takes max(1, ceil(len / PMTU)) PSNs */
		npsn = left ? (left + qp->pmtu - 1) / qp->pmtu : 1;
		if (tp->peer) {
			uint32_t n = npsn, e;
			if (resend) {
				e = rd_req_end(tp, psn);
				if (e && urvt_psn_diff(e, psn) > 0)
					n = (uint32_t)urvt_psn_diff(e, psn);
			} else {
				uint32_t div = qp->max_rd_atomic < 4 ? qp->max_rd_atomic : 4;
				uint32_t cmax = tp->wnd_max / (div ? div : 1);
				n = npsn < cmax ? npsn : cmax;
				/* not in pieces below half the largest unless that is
				 * all: each request costs a responder resource */
				if (n > allow && allow < cmax / 2 && base > 0)
					return -1;
				if (n > allow && allow)
					n = allow;
			}
			if (n > allow && base > 0)
				return -1;
			if (n < npsn) {
				npsn = n;
				left = n * qp->pmtu;
				ret = 0;
			}
		}
		f.reth.va = wqe->wr.rdma.remote_addr + qp->s_offset;
		f.reth.rkey = wqe->wr.rdma.rkey;
		f.reth.len = left;
		f.cma = rd_ask_cma(qp, wqe, left);
		/* a request asked again never asks for a push: an answer that
		 * completes the WQE must not be followed by a write into it */
		if (f.cma && !resend) {
			f.paylen = rd_ask_push(qp, wqe, qp->s_offset, left, &push);
			pay = &push;
		}
		qp->s_offset += left;
	} else if (wqe->opcode == IBV_WR_ATOMIC_WRITE) {
		/* qp-semantics §2.10: RETH for 8 bytes, the value as payload */
		f.reth.va = wqe->wr.atomic.remote_addr;
		f.reth.rkey = wqe->wr.atomic.rkey;
		f.reth.len = sizeof(uint64_t);
		f.paylen = sizeof(uint64_t);
	} else {
		f.atmeth.va = wqe->wr.atomic.remote_addr;
		f.atmeth.rkey = wqe->wr.atomic.rkey;
		if (wqe->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
			f.atmeth.swap_add = wqe->wr.atomic.swap;
			f.atmeth.comp = wqe->wr.atomic.compare_add;
		} else {
			f.atmeth.swap_add = wqe->wr.atomic.compare_add;
		}
	}
	p = urvt_build_start(qp, q, &f, &qp->remote_av, &h);
	if (f.paylen)
		memcpy(p + h, pay, f.paylen);
	urvt_build_finish(qp, q, p, h + f.paylen);
	tp->ackreq_psn = urvt_psn_add(psn, npsn - 1);
	tp->ackreq_valid = true;
	if (!resend) {
		if (tp->peer)
			rd_req_push(tp, urvt_psn_add(psn, npsn));
		urvt_cc_sent(qp, psn);
	}
	sent_psn(qp, psn, npsn);
	return ret;
}

/* The requester waits for ACKs (a window or the responder's resources). */
static void stall(struct rvt_qp *qp)
{
	if (!qp_tp(qp)->stalled && qp_tp(qp)->peer)
		qp_count(qp, URVT_CTR_CC_STALLS, 1);
	qp_tp(qp)->stalled = true;
}

static void req_run(struct rvt_qp *qp, struct urvt_txq *q);

/* A packet went out: does this run stop here (a probe: after one; a
 * resend after a NAK: after resend_left)? */
static bool run_ends(struct rvt_qp *qp)
{
	struct urvt_tp_qp *tp = qp_tp(qp);

	if (tp->probing)
		return true;
	return tp->resend_left && !--tp->resend_left;
}

/* Packets resent after a PSN-sequence NAK before the requester waits for
 * the answer: one GSO send's worth (link/udp.c: at most 64 packets, 65000
 * bytes), what a drop of one datagram on the path costs (nftables and
 * NICs drop a GSO train whole): 15 at MTU 4096, 59 at 1024 */
static uint8_t nak_resend_pkts(const struct rvt_qp *qp)
{
	uint32_t n = 65000 / (qp->pmtu + 64);

	return (uint8_t)(n < 1 ? 1 : n > 64 ? 64 : n);
}

/*
 * After a PSN-sequence NAK (comp.c): the NAK'd packet and a few after it
 * (nak_resend_pkts), the last with AckReq, then nothing until an answer
 * acknowledges the NAK'd one. A responder that held
 * what came past the gap (resp.c "Past a gap") answers with an ACK of all
 * it has, or the NAK of its next gap, and the requester goes on from
 * there instead of resending the window; one that dropped them (rxe)
 * ACKs those packets and the requester resends the rest as before
 * (go-back-N), one round trip later. Lost answers: the tail-loss probe
 * and the retransmit timer, as for any packet.
 */
void urvt_req_run(struct rvt_qp *qp, struct urvt_txq *q)
{
	struct urvt_tp_qp *tp = qp_tp(qp);

	/* a tail-loss probe goes out whatever the wait (its answer ends it) */
	if (unlikely(tp->nak_wait) && !tp->probing) {
		if (urvt_psn_cmp(tp->comp_psn, tp->nak_psn) <= 0) {
			stall(qp);
			return;
		}
		tp->nak_wait = false;
	}
	if (unlikely(tp->nak_one) && !tp->probing) {
		uint32_t psn = qp->s_psn;
		tp->resend_left = nak_resend_pkts(qp);
		req_run(qp, q);
		tp->resend_left = 0;
		if (qp->s_psn != psn) {
			tp->nak_one = false;
			tp->nak_wait = true;
			stall(qp);
		}
		return;
	}
	req_run(qp, q);
}

static void req_run(struct rvt_qp *qp, struct urvt_txq *q)
{
	bool rc = qp->type == IBV_QPT_RC;

	/* an ACK for the originals passed what a rewind is resending: the
	 * responder has them, go on from the acknowledged PSN (and a timeout
	 * that rewound was spurious) */
	if (rc && !qp_tp(qp)->probing &&
	    urvt_psn_cmp(qp_tp(qp)->comp_psn, qp->s_psn) > 0) {
		qp_count(qp, URVT_CTR_ACK_SKIPS, 1);
		if (qp_tp(qp)->cc_undo)
			urvt_cc_undo(qp);
		urvt_req_rewind(qp);
	}

	for (;;) {
		int ops = ib_rvt_state_ops[rvt_qp_state(qp)];
		struct rvt_swqe *wqe;
		uint32_t head, psn, allow;
		bool started;

		if (!(ops & RVT_PROCESS_SEND_OK) || (qp->s_flags & RVT_S_WAIT_RNR))
			return;
		/* S0': pairs with the release of s_head in post.c */
		head = load_acquire(&qp->s_head);
		if (qp->s_cur == head)
			return;
		wqe = rvt_get_swqe_ptr(qp, qp->s_cur);
		started = qp_tp(qp)->cur_started || qp->s_offset || (wqe->wqe_flags & RVT_SWQE_T_SENT);
		if (!started) {
			/* SQD: finish what is in progress, start nothing new */
			if (!(ops & RVT_PROCESS_NEXT_SEND_OK))
				return;
			if (wqe->opcode == IBV_WR_LOCAL_INV || wqe->opcode == IBV_WR_BIND_MW) {
				if (qp->s_cur != qp->s_last)
					return; /* runs once everything before it is done */
				req_local_op(qp, wqe);
				continue;
			}
			/* an ODP page fault that cannot be served (core/odp.h):
			 * LOC_PROT_ERR once everything before it completed */
			if (unlikely(wqe->wqe_flags & RVT_SWQE_ODP) && !rvt_odp_chk_swqe(wqe)) {
				if (qp->s_cur != qp->s_last)
					return;
				rvt_send_complete(qp, wqe, IBV_WC_LOC_PROT_ERR);
				rvt_error_qp(qp, IBV_WC_WR_FLUSH_ERR);
				return;
			}
			/* rc-protocol §2.2 fence, rxe rule: wait until it is the oldest */
			if ((wqe->send_flags & IBV_SEND_FENCE) && qp->s_cur != qp->s_last)
				return;
			/* an answer by reference is read after the responder went
			 * on: nothing that could make it change what it answered
			 * (a WRITE, a SEND it reacts to, an atomic) may reach it
			 * before the answer is read (docs/shm.md "Single copy") */
			if (qp_tp(qp)->cma_reads && wqe->opcode != IBV_WR_RDMA_READ)
				return;
			if (rvt_swqe_rd_atomic(wqe) && !(wqe->wqe_flags & RVT_SWQE_T_CREDIT)) {
				/* rc-protocol §2.2 initiator depth */
				if (qp->s_rd_atomic_outstanding >= qp->max_rd_atomic) {
					qp_tp(qp)->stalled = true;
					return;
				}
				qp->s_rd_atomic_outstanding++;
				wqe_flags_set(wqe, RVT_SWQE_T_CREDIT);
			}
		}
		if (!qp_tp(qp)->cur_valid || qp_tp(qp)->cur_idx != qp->s_cur)
			cur_position(qp, wqe);
		psn = urvt_psn_add(wqe->psn, qp->s_offset / qp->pmtu);
		/* rc-protocol §2.2: at most wnd_max PSNs (rxe: 128) past the
		 * oldest unacknowledged, and what the peer's congestion
		 * window leaves (cc.c) */
		allow = rc ? urvt_cc_allow(qp, psn) : UINT32_MAX;
		if (!allow) {
			stall(qp);
			return;
		}
		if (rvt_swqe_rd_atomic(wqe)) {
			int r = req_rd_atomic(qp, wqe, q, psn, allow);
			if (r < 0) {
				stall(qp);
				return;
			}
			if (!r) {
				if (run_ends(qp))
					return;
				continue;
			}
		} else if (!req_send_write(qp, wqe, q, psn, allow)) {
			if (run_ends(qp))
				return;
			continue;
		}
		/* the last packet of the WQE went out */
		wqe_flags_set(wqe, RVT_SWQE_T_SENT);
		if (!rc) {
			/* rc-protocol §6: UC completes when the last packet is sent;
			 * every earlier UC WQE already did, so this is s_last */
			rvt_send_complete(qp, wqe, IBV_WC_SUCCESS);
		} else {
			WRITE_ONCE(qp->s_cur, qp->s_cur + 1);
		}
		cur_next(qp);
		if (run_ends(qp))
			return;
	}
}

/*
 * Tail-loss probe (urvt; not in rxe): the oldest unacknowledged packet
 * again, with AckReq, then the requester carries on where it was. A lost
 * NAK or ACK (rxe NAKs a PSN gap only once) then costs a probe interval
 * instead of a retransmit timeout; probes never count against retry_cnt.
 */
void urvt_req_probe(struct rvt_qp *qp, struct urvt_txq *q)
{
	uint32_t cur = qp->s_cur, off = qp->s_offset, psn = qp->s_psn;
	uint32_t pkts = qp->s_pkts_since_ackreq;
	bool started = qp_tp(qp)->cur_started;

	urvt_req_rewind(qp);
	qp_tp(qp)->probing = true;
	urvt_req_run(qp, q);
	qp_tp(qp)->probing = false;
	if (!(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_SEND_OK))
		return;
	WRITE_ONCE(qp->s_cur, cur);
	qp->s_offset = off;
	qp->s_psn = psn;
	qp->s_pkts_since_ackreq = pkts;
	qp_tp(qp)->cur_started = started;
	qp_tp(qp)->cur_valid = false;
}

/*
 * The route of a UD WQE whose AV's route is for another QPN slot (an AH:
 * the slot is the WR's, docs/shm.md). The QP remembers where its last
 * rerouted WR went: UCX's UD traffic names one peer per AH, and looking
 * it up for every WR (the link's peer table) was ~100 instructions of
 * each send (callgrind of Open MPI over ud_verbs when this came in). The
 * remembered route can be stale (the peer left); the link then refuses it
 * and the caller asks again.
 */
/* The route the QP remembers for av's GID and qpn's slot, or 0. */
static uint32_t ud_route_remembered(const struct rvt_qp *qp, const struct urvt_av *av,
				    uint32_t qpn)
{
	const struct urvt_tp_qp *tq = qp_tp(qp);

	return tq->ud_route_slot == (uint16_t)(qpn >> 16) &&
			       !memcmp(tq->ud_route_gid, av->attr.grh.dgid.raw, 16)
		       ? tq->ud_route
		       : 0;
}

static bool ud_route(struct rvt_qp *qp, struct urvt_av *av, uint32_t qpn, bool fresh)
{
	struct urvt_tp_qp *tq = qp_tp(qp);
	uint16_t slot = (uint16_t)(qpn >> 16);
	uint32_t route = fresh ? 0 : ud_route_remembered(qp, av, qpn);

	if (route) {
		av->route = route;
		av->route_slot = slot;
		return true;
	}
	urvt_tp_ud_reroute(qp_net(qp), av, qpn);
	tq->ud_route = av->route;
	tq->ud_route_slot = slot;
	memcpy(tq->ud_route_gid, av->attr.grh.dgid.raw, 16);
	return false;
}

/* rc-protocol §7: the UD packet of wqe (DETH with the WR's Q_Key and our
 * QPN). */
static void ud_pkt_of(const struct rvt_qp *qp, const struct rvt_swqe *wqe, struct urvt_pkt *f)
{
	urvt_pkt_init(f,
		      wqe->opcode == IBV_WR_SEND_WITH_IMM ? URVT_OP_UD_SEND_ONLY_WITH_IMMEDIATE
							  : URVT_OP_UD_SEND_ONLY,
		      wqe->wr.ud.remote_qpn, wqe->psn);
	f->ackreq = true; /* rxe sets it on every last packet; ignored by receivers */
	f->se = !!(wqe->send_flags & IBV_SEND_SOLICITED);
	f->paylen = wqe->length;
	f->deth.qkey = wqe->wr.ud.remote_qkey;
	f->deth.sqp = qp->qpn;
	if (wqe->opcode == IBV_WR_SEND_WITH_IMM)
		f->immdt = be32toh(wqe->ex.imm_data);
}

/* One UD packet; last: nothing follows it now, send it. */
static void ud_send(struct rvt_qp *qp, struct rvt_swqe *wqe, struct urvt_txq *q, bool last)
{
	struct rvt_sge_state ss;
	struct urvt_pkt f;
	uint32_t h;
	uint8_t *p;

	ud_pkt_of(qp, wqe, &f);
	/* the AH's route is for one slot of its GID; the WR's QPN may name
	 * another process there (docs/shm.md) */
	bool remembered = !urvt_av_route_fits(wqe->ud_av, wqe->wr.ud.remote_qpn) &&
			  ud_route(qp, wqe->ud_av, wqe->wr.ud.remote_qpn, false);
	rvt_sge_state_init(&ss, wqe->sg_list, wqe->num_sge, wqe->length);
	p = urvt_build_start(qp, q, &f, wqe->ud_av, &h);
	if (unlikely(remembered && q->cur_where == URVT_TXPKT_LOST)) {
		/* the peer it remembered is gone: as the AV's own route would
		 * have been looked up, once more (nothing was queued yet) */
		ud_route(qp, wqe->ud_av, wqe->wr.ud.remote_qpn, true);
		p = urvt_build_start(qp, q, &f, wqe->ud_av, &h);
	}
	urvt_build_finish_sge(qp, q, p, h, &ss, wqe->length);
	if (last)
		urvt_txq_flush_unless_rx(qp_net(qp), q);
}

void urvt_ud_send(struct rvt_qp *qp, struct rvt_swqe *wqe)
{
	struct urvt_txq *q = urvt_txq_get();

	/* the caller retires this WQE next; send now unless more follow */
	if (likely(q))
		ud_send(qp, wqe, q, qp->s_last + 1 == load_acquire(&qp->s_head));
	/* as the RC engine does (urvt_tp_do_send), once the packet is out
	 * (its clock read was on a ping-pong's way): UCX's ud_verbs answered
	 * more than 5 us after its completions and was taken for a leaver,
	 * each message then costing the progress thread a wake-up */
	urvt_net_app_posts(qp);
}

/* Only to a peer whose packets are built in the link's memory (the same
 * host), and only with room there now: the caller holds the QP's s_hlock,
 * which a wait for a full ring would hold too (and with it the QP's other
 * posters, its modify, every MR's dereg); the engine waits without it.
 * A remembered peer that is gone is the engine's too (ud_send looks its
 * route up again). */
bool urvt_ud_send_direct(struct rvt_qp *qp, struct rvt_swqe *wqe)
{
	struct urvt_txq *q = urvt_txq_get();
	uint32_t qpn = wqe->wr.ud.remote_qpn, route;
	struct rvt_sge_state ss;
	struct urvt_pkt f;

	if (unlikely(!q))
		return false;
	/* wqe->ud_av is the AH's own AV, left as it is: for a WR's QPN of
	 * another slot (an AH of a shared GID, one per peer host for all its
	 * processes) the QP's remembered route; a slot not met before is
	 * looked up on a copy, as on the engine's snapshot */
	if (urvt_av_route_fits(wqe->ud_av, qpn)) {
		route = wqe->ud_av->route;
	} else if (!(route = ud_route_remembered(qp, wqe->ud_av, qpn))) {
		struct urvt_av snap = *wqe->ud_av;

		ud_route(qp, &snap, qpn, false);
		route = snap.route;
	}
	ud_pkt_of(qp, wqe, &f);
	rvt_sge_state_init(&ss, wqe->sg_list, wqe->num_sge, wqe->length);
	if (!urvt_build_ud_now(qp, q, &f, route, &ss))
		return false;
	urvt_txq_flush_unless_rx(qp_net(qp), q);
	urvt_net_app_posts(qp);
	return true;
}
