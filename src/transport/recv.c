/*
 * Receive classification (rc-protocol.md §3 preamble, rxe_recv.c): parse,
 * ICRC, destination QP, opcode class vs QP type, QP state, addresses, P_Key,
 * Q_Key. Every failure is a silent drop counted by reason; nothing here
 * trusts the packet beyond what urvt_pkt_parse bounds-checked.
 */
#include <string.h>

#include "core/rvt_api.h"
#include "transport/tp.h"
#include "wire/icrc.h"
#include "wire/pcap.h"

static bool drop(struct urvt_net *net, struct rvt_qp *qp, int reason)
{
	if (reason < 0)
		reason = -reason;
	tp_count(net, qp ? urvt_qp_stats(qp) : NULL, URVT_CTR_DROP_BASE + (enum urvt_ctr)reason, 1);
	URVT_DBG("drop %s (qp %u)", reason < URVT_DROP_NUM ? urvt_wire_drop_str(reason) :
				     urvt_ctr_name[URVT_CTR_DROP_BASE + reason] + 5,
		 qp ? qp->qpn : 0);
	if (qp)
		rvt_put_qp(qp);
	return false;
}

static enum urvt_transport qp_transport(const struct rvt_qp *qp)
{
	return qp->type == IBV_QPT_RC ? URVT_TRANSPORT_RC :
	       qp->type == IBV_QPT_UC ? URVT_TRANSPORT_UC : URVT_TRANSPORT_UD;
}

bool urvt_recv_pkt(struct urvt_net *net, struct urvt_pktbuf *b, struct urvt_ipinfo *ip)
{
	struct urvt_pkt *pkt = &b->pkt;
	struct rvt_qp *qp;
	int ret, state;
	bool consumed;

	ret = urvt_pkt_parse(b->data, b->len, pkt);
	if (unlikely(ret))
		return drop(net, NULL, ret);
	/* IPv4: the ID is not visible to a UDP socket, verify without it
	 * (docs/wire.md); IPv6: exact */
	ret = urvt_icrc_check(ip, b->data, b->len,
			      urvt_ipinfo_is_v4(ip) ? URVT_ICRC_V4_ID_UNKNOWN : 0);
	if (unlikely(ret))
		return drop(net, NULL, ret);
	if (unlikely(net->pcap))
		urvt_pcap_write(net->pcap, URVT_PCAP_IN, ip, b->data, b->len);
	if (unlikely(!pkt->dest_qpn))
		return drop(net, NULL, URVT_DROP_BAD_QPN); /* roce-wire §12: no SMI */
	if (unlikely(pkt->dest_qpn == URVT_MULTICAST_QPN))
		return drop(net, NULL, URVT_TDROP_MCAST);
	qp = rvt_lookup_qpn(net->rdi, pkt->dest_qpn);
	if (unlikely(!qp))
		return drop(net, NULL, URVT_DROP_NO_QP);
	{
		struct urvt_stats_qp *qs = urvt_qp_stats(qp);
		urvt_ctr_add(&qs->c, URVT_CTR_RX_PKTS, 1);
		urvt_ctr_add(&qs->c, URVT_CTR_RX_BYTES, b->len);
	}
	ret = urvt_opcode_chk_transport(pkt->opcode, qp_transport(qp));
	if (unlikely(ret))
		return drop(net, qp, ret);
	/* QP state: requests in RTR/RTS/SQD(/SQE), responses in RTS/SQD */
	state = rvt_qp_state(qp);
	if (pkt->mask & URVT_REQ_MASK) {
		if (unlikely(!(ib_rvt_state_ops[state] & RVT_PROCESS_RECV_OK)))
			return drop(net, qp, URVT_TDROP_BAD_STATE);
	} else if (unlikely(state != IBV_QPS_RTS && state != IBV_QPS_SQD)) {
		return drop(net, qp, URVT_TDROP_BAD_STATE);
	}
	if (unlikely(!urvt_pkey_match(pkt->pkey, URVT_DEFAULT_PKEY)))
		return drop(net, qp, URVT_DROP_BAD_PKEY);
	if (qp->type == IBV_QPT_UD) {
		/* §7: Q_Key of the QP */
		if (unlikely(pkt->deth.qkey != qp->qkey))
			return drop(net, qp, URVT_DROP_BAD_QKEY);
	} else {
		/* roce-wire §12 (rxe check_addr): from the QP's peer, to us */
		if (unlikely(memcmp(ip->sgid, qp->remote_av.attr.grh.dgid.raw, 16) ||
			     memcmp(ip->dgid, net->rdi->gid.raw, 16)))
			return drop(net, qp, URVT_DROP_BAD_ADDR);
	}
	if (pkt->mask & URVT_REQ_MASK) {
		urvt_resp_rcv(qp, pkt, ip);
		rvt_put_qp(qp);
		return false;
	}
	urvt_comp_enqueue(net, qp, b, &consumed);
	rvt_put_qp(qp);
	return consumed;
}
