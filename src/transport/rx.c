/*
 * Receive: one batch from a link, every packet of it classified and
 * processed (recv.c) before the next batch, by one thread at a time
 * (rx_lock). The responses the responder queued on this thread leave in
 * one send at the end of the batch. Who calls it: poll.c.
 */
#include "core/rvt_api.h"
#include "transport/tp.h"

/* One batch of link k; returns the datagrams read. */
static int rx_link(struct urvt_net *net, unsigned k)
{
	struct urvt_link_rx *rx = net->rx;
	int got = urvt_link_recv(net->links[k], rx, URVT_RX_BATCH);
	uint64_t pkts = 0, bytes = 0;
	struct rvt_qp *held = NULL; /* recv.c: one lookup per run of one QP */

	for (int i = 0; i < got; i++) {
		const struct urvt_link_rx *r = &rx[i];
		/* a GRO train: packets of seg bytes, the last may be shorter */
		uint32_t seg = r->seg ? r->seg : r->len;

		if (r->trunc) {
			tp_count(net, NULL, URVT_CTR_DROP_BASE + URVT_TDROP_OVERSIZE, 1);
			continue;
		}
		/* a train's responses go first: a peer's ACK that waited for
		 * its reply rides behind the reply in one GSO send (tx.c
		 * acks_into), yet was made before it; completing our send
		 * first gives the application the order rxe would (the send's
		 * completion, then the reply's) */
		bool train = r->len > seg;
		for (int pass = train ? 0 : 1; pass < 2; pass++)
			for (uint32_t off = 0; off < r->len; off += seg) {
				uint32_t n = r->len - off < seg ? r->len - off : seg;
				bool resp = urvt_opcode[r->data[off]].mask & URVT_ACK_MASK;
				if (train && resp != (pass == 0))
					continue;
				pkts++;
				bytes += n;
				urvt_recv_pkt(net, r->data + off, n, &r->ip,
					      (r->no_icrc ? URVT_RX_NO_ICRC : 0) |
						      (r->shared ? URVT_RX_SHARED : 0) |
						      (r->spans ? URVT_RX_SPANS : 0),
					      r->cma_pid, &held);
			}
	}
	urvt_recv_release(&held);
	/* the device's counters once per batch (the QP's, in recv_on_qp, stay
	 * per packet), and as plain adds: every receiving thread holds
	 * rx_lock, and these three counters have no other writer */
	if (pkts) {
		urvt_ctr_add_rx(&net->stats->dev, URVT_CTR_RX_PKTS, pkts);
		urvt_ctr_add_rx(&net->stats->dev, URVT_CTR_RX_BYTES, bytes);
		urvt_ctr_add_rx(&net->stats->dev, net->link_ctr[k] + 1, pkts);
	}
	return got > 0 ? got : 0;
}

int urvt_net_rx_links(struct urvt_net *net, bool all, bool app)
{
	bool was_in_rx, events_held;
	int got = 0;

	/* the process exits (net.c): its memory is going away */
	if (unlikely(atomic_load_explicit(&net->exiting, memory_order_relaxed)))
		return 0;
	was_in_rx = urvt_rx_enter();
	/* the completion events of the batch wait for its responses (cq.c) */
	events_held = rvt_cq_events_hold();

	for (unsigned k = 0; k < net->nlinks; k++)
		if (net->links[k] && (all || net->links[k]->cheap_poll))
			got += rx_link(net, k);
	/* the READs the batch let wait (resp.c "READs of a batch"), then the
	 * ACKs it owes (resp.c "ACKs of a batch"), still as the receive path:
	 * they must not wait long on a full ring either */
	if (!was_in_rx) {
		struct urvt_txq *q = urvt_txq_peek();
		if (q && q->read_due_n)
			urvt_resp_reads_due_flush(q);
		if (q && q->ack_due_n)
			urvt_resp_acks_due_flush(q);
	}
	urvt_rx_leave(was_in_rx);
	/* responses the responder queued on this thread (an application's
	 * plain ACKs may wait for its next send), and ACKs that waited */
	if (!was_in_rx)
		urvt_txq_batch_end(net, app);
	rvt_cq_events_release(events_held);
	return got;
}

bool urvt_net_rx_pending(struct urvt_net *net)
{
	for (unsigned k = 0; k < net->nlinks; k++)
		if (net->links[k] && net->links[k]->cheap_poll && urvt_link_pending(net->links[k]))
			return true;
	return false;
}

int urvt_net_rx_batch(struct urvt_net *net)
{
	return urvt_net_rx_links(net, true, false);
}

int urvt_net_rx_drain_links(struct urvt_net *net, bool all)
{
	int got = 0;

	/* bounded, so timers and work get their turn */
	for (int i = 0; i < 64; i++) {
		int n = urvt_net_rx_links(net, all, false);
		got += n;
		if (n < URVT_RX_BATCH)
			break;
	}
	return got;
}
