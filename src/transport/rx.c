/*
 * Receive: one batch from the link, every packet of it classified and
 * processed (recv.c) before the next batch, by one thread at a time
 * (rx_lock). The responses the responder queued on this thread leave in
 * one send at the end of the batch. Who calls it: poll.c.
 */
#include "transport/tp.h"

int urvt_net_rx_batch(struct urvt_net *net)
{
	struct urvt_link_rx *rx = net->rx;
	struct urvt_txq *txq;
	bool was_in_rx;
	int got;

	got = urvt_link_recv(net->link, rx, URVT_RX_BATCH);
	if (got <= 0)
		return 0;
	txq = urvt_txq_get();
	was_in_rx = urvt_rx_enter();
	for (int i = 0; i < got; i++) {
		const struct urvt_link_rx *r = &rx[i];
		/* a GRO train: packets of seg bytes, the last may be shorter */
		uint32_t seg = r->seg ? r->seg : r->len;

		if (r->trunc) {
			tp_count(net, NULL, URVT_CTR_DROP_BASE + URVT_TDROP_OVERSIZE, 1);
			continue;
		}
		for (uint32_t off = 0; off < r->len; off += seg) {
			uint32_t n = r->len - off < seg ? r->len - off : seg;
			struct urvt_ipinfo ip = r->ip;
			urvt_ctr_add(&net->shm->dev, URVT_CTR_RX_PKTS, 1);
			urvt_ctr_add(&net->shm->dev, URVT_CTR_RX_BYTES, n);
			urvt_recv_pkt(net, r->data + off, n, &ip);
		}
	}
	urvt_rx_leave(was_in_rx);
	if (txq && !was_in_rx)
		urvt_txq_flush(net, txq);
	return got;
}

void urvt_net_rx_drain(struct urvt_net *net)
{
	/* bounded, so timers and work get their turn */
	for (int i = 0; i < 64; i++)
		if (urvt_net_rx_batch(net) < URVT_RX_BATCH)
			break;
}
