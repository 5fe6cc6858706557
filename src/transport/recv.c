/*
 * Receive classification (rc-protocol §3 preamble, rxe_recv.c): parse,
 * ICRC, destination QP, opcode class vs QP type, QP state, addresses, P_Key,
 * Q_Key. Every failure is a silent drop counted by reason; nothing here
 * trusts the packet beyond what urvt_pkt_parse bounds-checked.
 */
#include <string.h>

#include "core/rvt_api.h"
#include "transport/tp.h"
#include "wire/icrc.h"
#include "wire/pcap.h"
#include "wire/psn.h"

/* Counted against qp if known (its reference stays the caller's). */
static void drop(struct urvt_net *net, struct rvt_qp *qp, int reason)
{
	if (reason < 0)
		reason = -reason;
	tp_count(net, qp ? urvt_qp_stats(qp) : NULL, URVT_CTR_DROP_BASE + (enum urvt_ctr)reason, 1);
	URVT_DBG("drop %s (qp %u)", reason < URVT_DROP_NUM ? urvt_wire_drop_str(reason) :
				     urvt_ctr_name[URVT_CTR_DROP_BASE + reason] + 5,
		 qp ? qp->qpn : 0);
}

/* The QP's opcode class: its opcode prefix (qp-semantics §4.4). */
static enum urvt_transport qp_transport(const struct rvt_qp *qp)
{
	return urvt_opcode_transport(qp->allowed_ops);
}

/* Straight to the completer when this thread can run the QP's engine now
 * (engine.c "Straight to the completer"): true, done; false, nothing was. */
static bool comp_direct(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	if (!urvt_comp_direct_begin(qp))
		return false;
	urvt_comp_direct_pkt(qp, pkt);
	urvt_comp_direct_end(qp);
	return true;
}

/*
 * A READ response span (docs/shm.md "Spans"): the completer takes one PMTU
 * at a time, as from any other link, so the span is cut into the packets
 * it stands for. Straight to the completer when this thread can run it
 * now (engine.c: one copy, from the ring); else copied into one buffer per
 * PMTU and queued. 0, or the drop reason for what could not be queued.
 */
static int comp_enqueue_span(struct urvt_net *net, struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	uint32_t n = pkt->span_more + 1, pmtu = qp->pmtu;
	struct urvt_pkt piece;

	if (!urvt_span_len_ok(pkt->opcode, pkt->paylen, n, pmtu))
		return URVT_DROP_BAD_LENGTH;
	if (comp_direct(qp, pkt)) { /* cut there (comp.c comp_span) */
		qp_count(qp, URVT_CTR_COMP_DIRECT, n);
		return 0;
	}
	struct urvt_pktbuf *head = NULL, *tail = NULL;
	bool consumed;

	for (uint32_t j = 0; j < n; j++) {
		struct urvt_pktbuf *b = urvt_pkt_alloc(net);

		if (unlikely(!b)) {
			urvt_pkt_free_list(net, head);
			return URVT_TDROP_NO_BUF;
		}
		urvt_span_piece(pkt, j, pmtu, &piece);
		memcpy(b->data, piece.payload, piece.paylen);
		b->len = piece.paylen;
		b->pkt = piece;
		b->pkt.hdr_len = 0;
		b->pkt.bth = b->pkt.payload = b->data;
		b->next = NULL;
		if (tail)
			tail->next = b;
		else
			head = b;
		tail = b;
	}
	/* one hand-over for all (a full queue is counted there) */
	urvt_comp_enqueue_list(net, qp, head, tail, n, &consumed);
	if (!consumed)
		urvt_pkt_free_list(net, head);
	return 0;
}

/*
 * A READ answer by reference from process pid (docs/shm.md "Single copy"):
 * its payload says where the bytes of its PSNs are. The completer reads
 * them (comp.c) when it takes the answer, here or from its queue; the
 * answer keeps the address in reth.va (a response has no RETH) and no
 * payload. 0, or the drop reason.
 */
static int comp_enqueue_ref(struct urvt_net *net, struct rvt_qp *qp, struct urvt_pkt *pkt, int pid)
{
	struct urvt_cma_ref ref;
	struct urvt_pktbuf *b;
	bool consumed;

	if (pkt->paylen != sizeof(ref))
		return URVT_DROP_BAD_LENGTH;
	memcpy(&ref, pkt->payload, sizeof(ref)); /* once: the peer may write on */
	if (ref.zero || !urvt_span_len_ok(pkt->opcode, ref.len, pkt->span_more + 1, qp->pmtu))
		return URVT_DROP_BAD_LENGTH;
	pkt->paylen = ref.len;
	pkt->payload = NULL;
	pkt->reth.va = ref.addr;
	atomic_store_explicit(&qp_tp(qp)->cma_pid, pid, memory_order_relaxed);
	if (comp_direct(qp, pkt))
		return 0;
	b = urvt_pkt_alloc(net);
	if (unlikely(!b))
		return URVT_TDROP_NO_BUF;
	b->len = 0;
	b->pkt = *pkt;
	b->pkt.bth = b->data;
	urvt_comp_enqueue(net, qp, b, &consumed);
	if (!consumed)
		urvt_pkt_free(net, b);
	return 0;
}

/* A READ request that may be answered by reference, or such an answer, is
 * heard from urvt's same-host link only (docs/shm.md "Single copy"; flags
 * URVT_RX_SPANS); from anywhere else the bit is BTH's reserved 0, and the
 * push address such a request may carry (hdr.c) is the payload an opcode
 * without one must not have. Whether the peer's memory can be read is the
 * reader's question (comp.c: a pid of 0 fails the read, and the READ is
 * asked for again with data), not a reason to drop: a same-host peer whose
 * pid we cannot see, or whose device has URVT_CMA=0, still gets its READs.
 * 0, or the drop reason. */
static int cma_check(struct urvt_pkt *pkt, unsigned flags)
{
	pkt->cma = pkt->cma && (flags & URVT_RX_SPANS) &&
		   (pkt->opcode == URVT_OP_RC_RDMA_READ_REQUEST ||
		    (pkt->opcode >= URVT_OP_RC_RDMA_READ_RESPONSE_FIRST &&
		     pkt->opcode <= URVT_OP_RC_RDMA_READ_RESPONSE_ONLY));
	return pkt->paylen && !pkt->cma && !(pkt->mask & URVT_PAYLOAD_MASK) ? URVT_DROP_BAD_LENGTH
									    : 0;
}

/* A packet for qp (referenced by the caller, who drops the reference): the
 * checks of the QP, then the responder or the completer. cma_pid: the
 * sending process, if its memory may be read (link.h urvt_link_rx.cma_pid). */
static void recv_on_qp(struct urvt_net *net, struct rvt_qp *qp, struct urvt_pkt *pkt,
		       const uint8_t *data, uint32_t len, const struct urvt_ipinfo *ip,
		       unsigned flags, int cma_pid)
{
	struct urvt_pktbuf *b;
	int ret, state;
	bool consumed;

	{
		struct urvt_stats_qp *qs = urvt_qp_stats(qp);
		/* the QP's own slot: we hold rx_lock, the only writer */
		if (likely(qs != &urvt_stats_overflow)) {
			urvt_ctr_add_rx(&qs->c, URVT_CTR_RX_PKTS, 1);
			urvt_ctr_add_rx(&qs->c, URVT_CTR_RX_BYTES, len);
		} else {
			urvt_ctr_add(&qs->c, URVT_CTR_RX_PKTS, 1);
			urvt_ctr_add(&qs->c, URVT_CTR_RX_BYTES, len);
		}
	}
	ret = urvt_opcode_chk_transport(pkt->opcode, qp_transport(qp));
	if (unlikely(ret))
		goto drop_qp;
	if (unlikely(rvt_qp_is_xrc(qp))) {
		/* roce-wire §4.5: requests go to the XRC target (XRC_RECV,
		 * the QP with a domain), responses to the initiator; from here
		 * on the RC engines see the RC opcode (the XRCETH stays in
		 * pkt->xrc_srqn) */
		if (!!(pkt->mask & URVT_REQ_MASK) != !!qp->xrcd) {
			ret = URVT_DROP_QPT_MISMATCH;
			goto drop_qp;
		}
		pkt->opcode -= URVT_OP_XRC_BASE;
	}
	/* QP state: requests in RTR/RTS/SQD(/SQE), responses in RTS/SQD */
	state = rvt_qp_state(qp);
	if (pkt->mask & URVT_REQ_MASK) {
		if (unlikely(!(ib_rvt_state_ops[state] & RVT_PROCESS_RECV_OK))) {
			ret = URVT_TDROP_BAD_STATE;
			goto drop_qp;
		}
	} else if (unlikely(state != IBV_QPS_RTS && state != IBV_QPS_SQD)) {
		ret = URVT_TDROP_BAD_STATE;
		goto drop_qp;
	}
	if (unlikely(!urvt_pkey_match(pkt->pkey, URVT_DEFAULT_PKEY))) {
		ret = URVT_DROP_BAD_PKEY;
		goto drop_qp;
	}
	if (qp->type == IBV_QPT_UD) {
		/* rc-protocol §7: Q_Key of the QP */
		if (unlikely(pkt->deth.qkey != qp->qkey)) {
			ret = URVT_DROP_BAD_QKEY;
			goto drop_qp;
		}
	} else {
		/* roce-wire §12 (rxe check_addr): from the QP's peer, to us */
		if (unlikely(memcmp(ip->sgid, qp->remote_av.attr.grh.dgid.raw, 16) ||
			     memcmp(ip->dgid, net->rdi->gid.raw, 16))) {
			ret = URVT_DROP_BAD_ADDR;
			goto drop_qp;
		}
	}
	/* a span's PSN count is heard from a link that joins PMTUs only
	 * (docs/shm.md "Spans"), for a SEND or WRITE; the responder checks
	 * its length against it as for one PMTU */
	if (!(flags & URVT_RX_SPANS) || qp->type == IBV_QPT_UD ||
	    ((pkt->mask & URVT_REQ_MASK) ? !(pkt->mask & (URVT_SEND_MASK | URVT_WRITE_MASK))
					  : !(pkt->mask & URVT_PAYLOAD_MASK))) /* READ responses */
		pkt->span_more = 0;
	if (unlikely(pkt->cma) && (ret = cma_check(pkt, flags)))
		goto drop_qp;
	if (pkt->mask & URVT_REQ_MASK) {
		/* an RDMA WRITE that completes nothing: its reader polls
		 * memory (net.c app_linger); writers hold rx_lock */
		if ((pkt->mask & (URVT_WRITE_MASK | URVT_COMP_MASK)) == URVT_WRITE_MASK) {
			_Atomic uint32_t *c = pkt->mask & URVT_END_MASK ? &net->rx_mem_writes :
									  &net->rx_mem_pkts;
			atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
					      memory_order_relaxed);
		}
		urvt_resp_rcv(qp, pkt, ip);
		return;
	}
	if (unlikely(pkt->cma)) {
		ret = comp_enqueue_ref(net, qp, pkt, cma_pid);
		if (ret)
			goto drop_qp;
		return;
	}
	if (unlikely(pkt->span_more)) {
		ret = comp_enqueue_span(net, qp, pkt);
		if (ret)
			goto drop_qp;
		return;
	}
	/* a response: straight to the completer when this thread can run it
	 * now (engine.c urvt_comp_direct_begin), else a copy goes to the QP's
	 * completer (the receive slot is reused at once); ACKs are a few
	 * bytes, READ responses one PMTU */
	if (comp_direct(qp, pkt))
		return;
	b = len <= URVT_PKTBUF_DATA ? urvt_pkt_alloc(net) : NULL;
	if (unlikely(!b)) {
		ret = URVT_TDROP_NO_BUF;
		goto drop_qp;
	}
	memcpy(b->data, data, len);
	b->len = len;
	b->pkt = *pkt;
	b->pkt.bth = b->data;
	b->pkt.payload = b->data + pkt->hdr_len;
	urvt_comp_enqueue(net, qp, b, &consumed);
	if (!consumed)
		urvt_pkt_free(net, b);
	return;
drop_qp:
	drop(net, qp, ret);
}

/* Destination QPN 0xFFFFFF (rc-protocol §7): a UD SEND to a multicast
 * group, for every QP attached to it that passes the checks a UD packet
 * meets. Returns a drop reason if nobody takes it. */
static int recv_mcast(struct urvt_net *net, struct urvt_pkt *pkt, const uint8_t *data,
		      uint32_t len, const struct urvt_ipinfo *ip)
{
	struct rvt_qp *qps[URVT_MAX_MCAST_QP_ATTACH];
	unsigned n;

	if (!rvt_gid_is_mcast(ip->dgid) ||
	    urvt_opcode_chk_transport(pkt->opcode, URVT_TRANSPORT_UD))
		return URVT_TDROP_MCAST;
	n = rvt_mcast_qps(net->rdi, ip->dgid, qps, URVT_MAX_MCAST_QP_ATTACH);
	if (!n)
		return URVT_TDROP_MCAST;
	for (unsigned i = 0; i < n; i++) {
		struct urvt_pkt each = *pkt; /* the engines may write theirs */
		recv_on_qp(net, qps[i], &each, data, len, ip, 0, 0);
		rvt_put_qp(qps[i]);
	}
	return 0;
}

void urvt_recv_release(struct rvt_qp **held)
{
	if (held && *held) {
		rvt_put_qp(*held);
		*held = NULL;
	}
}

void urvt_recv_pkt(struct urvt_net *net, const uint8_t *data, uint32_t len,
		   const struct urvt_ipinfo *ip, unsigned flags, int cma_pid, struct rvt_qp **held)
{
	struct urvt_pkt pktv, *pkt = &pktv;
	struct urvt_ipinfo checked;
	uint8_t hdr[URVT_HDR_MAX];
	struct rvt_qp *qp;
	int ret;

	if (flags & URVT_RX_SHARED) {
		/* the sender may still write the ring: parse a private copy of
		 * the headers (and nothing past them: not the ICRC at the end,
		 * which the full parser reads); the payload is only ever copied
		 * out, once */
		uint32_t n = len < URVT_HDR_MAX ? len : URVT_HDR_MAX;
		/* two fixed copies that overlap, not a call for n bytes: a
		 * small message's every receive (docs/performance-history.md
		 * "MPI on one host") */
		_Static_assert(URVT_HDR_MAX <= 64, "two 32-byte halves cover it");
		if (n >= 32) {
			memcpy(hdr, data, 32);
			memcpy(hdr + n - 32, data + n - 32, 32);
		} else {
			memcpy(hdr, data, n);
		}
		ret = urvt_pkt_parse_hdrs(hdr, len, pkt);
		pkt->payload = data + pkt->hdr_len;
	} else {
		ret = urvt_pkt_parse(data, len, pkt);
	}
	if (unlikely(ret))
		goto drop_pkt;
	/* IPv4: the ID is not visible to a UDP socket, verify without it
	 * (docs/wire.md); IPv6: exact */
	if (likely(!(flags & URVT_RX_NO_ICRC))) {
		/* it recovers the IPv4 ID and DF into the copy (each packet of
		 * a GRO train has its own), which the GRH image then shows */
		checked = *ip;
		ret = urvt_icrc_check(&checked, data, len,
				      urvt_ipinfo_is_v4(ip) ? URVT_ICRC_V4_ID_UNKNOWN : 0);
		if (unlikely(ret))
			goto drop_pkt;
		ip = &checked;
	}
	if (unlikely(net->pcap))
		urvt_pcap_write(net->pcap, URVT_PCAP_IN, ip, data, len);
	if (unlikely(!pkt->dest_qpn)) { /* roce-wire §12: no SMI */
		ret = URVT_DROP_BAD_QPN;
		goto drop_pkt;
	}
	/* the held QP's number cannot change while it is referenced (a
	 * recycled structure is cleared only at refcount 0: core/qp.c) */
	if (held && *held && (*held)->qpn == pkt->dest_qpn) {
		recv_on_qp(net, *held, pkt, data, len, ip, flags, cma_pid);
		return;
	}
	urvt_recv_release(held);
	if (unlikely(pkt->dest_qpn == URVT_MULTICAST_QPN)) {
		ret = recv_mcast(net, pkt, data, len, ip);
		if (ret)
			goto drop_pkt;
		return;
	}
	qp = rvt_lookup_qpn(net->rdi, pkt->dest_qpn);
	if (unlikely(!qp)) {
		ret = URVT_DROP_NO_QP;
		goto drop_pkt;
	}
	recv_on_qp(net, qp, pkt, data, len, ip, flags, cma_pid);
	if (held)
		*held = qp;
	else
		rvt_put_qp(qp);
	return;

drop_pkt:
	drop(net, NULL, ret);
}
