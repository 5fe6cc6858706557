/*
 * Transmit: per-thread queues of finished packets (rxe_net.c's xmit side).
 * The engines build each packet in place (urvt_build_start/finish: headers,
 * payload, pad, ICRC for the path), and the queue leaves in one
 * urvt_link_send at the end of an engine run or of a receive batch, so the
 * ACKs a batch causes share a system call. Counters and URVT_PCAP are
 * taken here, for every link.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/ruc.h"
#include "transport/tp.h"
#include "wire/icrc.h"
#include "wire/pcap.h"

static URVT_TLS bool tls_in_rx;

bool urvt_in_rx(void)
{
	return tls_in_rx;
}

bool urvt_rx_enter(void)
{
	bool was = tls_in_rx;

	tls_in_rx = true;
	return was;
}

void urvt_rx_leave(bool was)
{
	tls_in_rx = was;
}

void urvt_txq_flush_unless_rx(struct urvt_net *net, struct urvt_txq *q)
{
	if (!tls_in_rx)
		urvt_txq_flush(net, q);
}

static pthread_key_t txq_key;
static pthread_once_t txq_once = PTHREAD_ONCE_INIT;
static URVT_TLS struct urvt_txq *tls_txq;

/*
 * Every thread's queue is also on this list. A thread's own pointer lives
 * in its TLS only: in a child of fork, where the progress thread (and every
 * other) no longer exists, nothing referenced their queues and
 * LeakSanitizer reported each at the child's exit (docs/usage.md
 * "Teardown": fork, the child exits without exec). The lock is held across
 * fork so the child never inherits it taken.
 */
static pthread_mutex_t txq_all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct urvt_txq *txq_all;

static void txq_destroy(void *p)
{
	struct urvt_txq *q = p;

	pthread_mutex_lock(&txq_all_lock);
	if (q->all_prev)
		q->all_prev->all_next = q->all_next;
	else
		txq_all = q->all_next;
	if (q->all_next)
		q->all_next->all_prev = q->all_prev;
	pthread_mutex_unlock(&txq_all_lock);
	free(q);
}

static void txq_fork_prepare(void)
{
	pthread_mutex_lock(&txq_all_lock);
}

static void txq_fork_after(void)
{
	pthread_mutex_unlock(&txq_all_lock);
}

static void txq_key_init(void)
{
	pthread_key_create(&txq_key, txq_destroy);
	pthread_atfork(txq_fork_prepare, txq_fork_after, txq_fork_after);
}

/* q is empty: nothing queued, nothing to build from. */
static void txq_clear(struct urvt_txq *q)
{
	q->n = q->used = 0;
	q->tmpl_qp = NULL;
}

struct urvt_txq *urvt_txq_get(void)
{
	struct urvt_txq *q = tls_txq;

	if (likely(q))
		return q;
	/* Once per thread: the engines never allocate after this. */
	pthread_once(&txq_once, txq_key_init);
	q = aligned_alloc(64, sizeof(*q));
	if (!q)
		return NULL;
	txq_clear(q);
	q->ack_due_n = 0;
	q->read_due_n = 0;
	q->cur_may_wait = false;
	pthread_mutex_lock(&txq_all_lock);
	q->all_prev = NULL;
	q->all_next = txq_all;
	if (txq_all)
		txq_all->all_prev = q;
	txq_all = q;
	pthread_mutex_unlock(&txq_all_lock);
	pthread_setspecific(txq_key, q);
	tls_txq = q;
	return q;
}

struct urvt_txq *urvt_txq_peek(void)
{
	return tls_txq;
}

/* Room for one packet of up to maxlen bytes in q (flushes it first when
 * full); fill it, then txq_commit with the final length. */
static uint8_t *txq_reserve(struct urvt_net *net, struct urvt_txq *q, uint32_t maxlen)
{
	if (q->n == URVT_TXQ_PKTS || q->used + maxlen > URVT_TXQ_BYTES)
		urvt_txq_flush(net, q);
	return q->buf + q->used;
}

static void txq_commit(struct urvt_txq *q, uint32_t len, const union urvt_link_addr *dst,
		       unsigned link, struct urvt_stats_qp *qs, enum urvt_txpkt_where where)
{
	struct urvt_txpkt *t = &q->pkt[q->n++];

	t->off = q->used;
	t->len = len;
	if (dst->sa.sa_family == AF_INET) {
		/* field by field: dst was just written so (link.h
		 * urvt_link_gid_addr), and one wide load of narrow stores
		 * waits for them (a store-forwarding stall: half of
		 * build_commit's time at MTU 1500) */
		t->dst.in4.sin_family = AF_INET;
		t->dst.in4.sin_port = dst->in4.sin_port;
		t->dst.in4.sin_addr = dst->in4.sin_addr;
		memset(t->dst.in4.sin_zero, 0, sizeof(t->dst.in4.sin_zero));
	} else if (dst->sa.sa_family == AF_INET6)
		t->dst.in6 = dst->in6;
	else
		t->dst.peer = dst->peer;
	t->link = (uint8_t)link;
	t->where = (uint8_t)where;
	t->may_wait = q->cur_may_wait && where == URVT_TXPKT_QUEUED && link == URVT_LINK_ANY &&
		      len <= URVT_WAIT_ACK_BYTES;
	q->cur_may_wait = false;
	t->qs = qs;
	if (where == URVT_TXPKT_QUEUED)
		q->used += len;
	q->tmpl_qp = NULL;
}

/* The pcap record of a packet: on every link the addresses are the GIDs
 * of the two devices, as on UDP (docs/shm.md). */
static void trace_tx(struct urvt_net *net, const struct urvt_link_tx *t, const uint8_t *dgid)
{
	struct urvt_ipinfo ip = net->ip_tmpl;

	memcpy(ip.dgid, dgid, 16);
	ip.ip_id = t->ip_id;
	urvt_pcap_write(net->pcap, URVT_PCAP_OUT, &ip, t->buf, t->len);
}

/* What the fault injector did, per packet and QP. */
static void count_faults(struct urvt_net *net, struct urvt_stats_qp *qs, unsigned fl)
{
	static const enum urvt_ctr ctr[] = { URVT_CTR_FAULT_DROP, URVT_CTR_FAULT_CORRUPT,
					     URVT_CTR_FAULT_DUP, URVT_CTR_FAULT_REORDER,
					     URVT_CTR_FAULT_DELAY };

	for (unsigned b = 0; b < sizeof(ctr) / sizeof(ctr[0]); b++)
		if (fl & (1u << b))
			tp_count(net, qs, ctr[b], 1);
}

/* pkts packets of bytes in all to a link (its counter link_ctr), counted
 * for qs (NULL: the device): one atomic add per counter, not per packet. */
static void count_tx(struct urvt_ctrs *c, enum urvt_ctr link_ctr, uint64_t pkts, uint64_t bytes)
{
	if (!pkts)
		return;
	urvt_ctr_add(c, URVT_CTR_TX_PKTS, pkts);
	urvt_ctr_add(c, URVT_CTR_TX_BYTES, bytes);
	urvt_ctr_add(c, link_ctr, pkts);
}

/* Packets [first, first + n) of q, all for link k and all queued or all
 * not (built in the link). */
static void flush_run(struct urvt_net *net, struct urvt_txq *q, uint32_t first, uint32_t n,
		      unsigned k, struct urvt_link_tx *tx)
{
	struct urvt_link *l = net->links[k];
	enum urvt_ctr ctr = net->link_ctr[k];
	bool queued = q->pkt[first].where == URVT_TXPKT_QUEUED;
	struct urvt_stats_qp *qs = NULL;
	uint64_t bytes = 0, qs_pkts = 0, qs_bytes = 0;
	unsigned lost = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct urvt_txpkt *t = &q->pkt[first + i];
		/* the receive path holds rx_lock: what it sends (ACKs, READ
		 * responses: RC, recovered if lost) must not wait long on a
		 * peer that may be waiting on us; built in the link, nothing
		 * is left to send */
		if (queued)
			tx[i] = (struct urvt_link_tx){ .buf = q->buf + t->off, .len = t->len,
						       .dst = &t->dst, .patient = !tls_in_rx };
		/* a QP's packets come in runs (one WR's segments) */
		if (t->qs != qs) {
			if (qs)
				count_tx(&qs->c, ctr, qs_pkts, qs_bytes);
			qs = t->qs;
			qs_pkts = qs_bytes = 0;
		}
		qs_pkts++;
		qs_bytes += t->len;
		bytes += t->len;
	}
	/* counted before the peer can see them (a test waits for the reply,
	 * then reads the counters) */
	if (qs)
		count_tx(&qs->c, ctr, qs_pkts, qs_bytes);
	count_tx(&net->stats->dev, ctr, n, bytes);
	if (queued) {
		lost = l ? urvt_link_send(l, tx, n) : n;
	} else {
		for (uint32_t i = 0; i < n; i++) {
			struct urvt_txpkt *t = &q->pkt[first + i];
			lost += t->where == URVT_TXPKT_LOST;
			/* in the link already: wake the receiver once per peer */
			if (t->where == URVT_TXPKT_IN_LINK &&
			    (i + 1 == n || !urvt_link_peer_same(&t[1].dst, &t->dst)))
				l->ops->tx_kick(l, &t->dst);
		}
	}
	if (unlikely(lost)) {
		URVT_DBG("send: %u of %u packets lost (%s)", lost, n, l ? l->ops->name : "no link");
		tp_count(net, NULL, URVT_CTR_TX_ERRORS, lost);
	}
	if (unlikely(queued && (net->pcap || (l && l->faults))))
		for (uint32_t i = 0; i < n; i++) {
			if (tx[i].fault)
				count_faults(net, q->pkt[first + i].qs, tx[i].fault);
			if (net->pcap)
				trace_tx(net, &tx[i], q->pkt[first + i].dgid);
		}
}

static void txq_send(struct urvt_net *net, struct urvt_txq *q)
{
	struct urvt_link_tx tx[URVT_TXQ_PKTS];

	if (!q->n)
		return;
	for (uint32_t i = 0, j; i < q->n; i = j) {
		unsigned k = q->pkt[i].link;
		bool queued = q->pkt[i].where == URVT_TXPKT_QUEUED;
		for (j = i + 1; j < q->n && q->pkt[j].link == k &&
				(q->pkt[j].where == URVT_TXPKT_QUEUED) == queued;
		     j++)
			;
		flush_run(net, q, i, j - i, k, tx);
	}
	txq_clear(q);
}

/*
 * ACKs that wait (docs/transport.md "ACKs that wait"). A plain ACK that an
 * application's poll produced does not leave at the end of that receive
 * batch: it waits for what the application does next, usually a send of
 * its own (the reply of a ping-pong). It then leaves after the reply in
 * the same system call, and on UDP in the same GSO send: one trip through
 * the kernel instead of two, the larger part of a small message's round
 * trip. Bounded: what waits leaves at the end of the next receive batch of
 * any thread, empty or not, when the application will block
 * (req_notify_cq), when a QP is reset and at teardown; and ACKs wait only
 * while the application owns the socket (poll.c), whose watchdog runs a
 * batch 2 ms after its last poll. A later ACK to the same QP replaces a
 * waiting one (ACKs are cumulative, rc-protocol §3.10). NAKs, RNR NAKs and
 * READ or atomic responses never wait; a batch that queued one of them
 * sends everything. And only while waiting pays: an application that
 * receives and does not answer (a stream's receiver, which may compute
 * between its polls) would hold its peer's window; a score (wait_score)
 * counts waits a send ended against those a batch ended, and at 0 ACKs
 * leave at once, but for one try every WAIT_RETRY batches.
 */
#define WAIT_SCORE_MAX 8
#define WAIT_RETRY 64
void urvt_txq_next_may_wait(struct urvt_txq *q)
{
	q->cur_may_wait = true;
}

/* q holds only plain ACKs, and nothing waits: they wait (rx_lock held).
 * False, nothing moved, if q holds anything else. */
static bool acks_wait(struct urvt_net *net, struct urvt_txq *q)
{
	uint32_t n = 0;

	if (q->n > URVT_WAIT_ACKS)
		return false;
	for (uint32_t i = 0; i < q->n; i++)
		if (!q->pkt[i].may_wait)
			return false;
	for (uint32_t i = 0; i < q->n; i++) {
		const struct urvt_txpkt *t = &q->pkt[i];
		const uint8_t *b = q->buf + t->off;
		struct urvt_wait_ack *w;
		uint32_t k;
		/* the same destination QP (BTH bytes 5-7) of the same peer */
		for (k = 0; k < n; k++)
			if (urvt_link_addr_same(&net->wait_ack[k].dst, &t->dst) &&
			    !memcmp(net->wait_ack[k].buf + 5, b + 5, 3))
				break;
		if (k < n)
			tp_count(net, net->wait_ack[k].qs, URVT_CTR_ACKS_REPLACED, 1);
		else
			n++;
		w = &net->wait_ack[k];
		w->len = t->len;
		w->dst = t->dst;
		w->qs = t->qs;
		memcpy(w->dgid, t->dgid, sizeof(w->dgid));
		memcpy(w->buf, b, t->len);
		tp_count(net, t->qs, URVT_CTR_ACKS_WAITED, 1);
	}
	atomic_store_explicit(&net->wait_n, n, memory_order_relaxed);
	txq_clear(q);
	return true;
}

/* Can the one waiting ACK ride behind q's last packet in its GSO send
 * (same peer over UDP, no longer than it)? The receiver takes a train's
 * responses first (rx.c), so it still sees the ACK before the reply. */
static bool ack_rides_behind(const struct urvt_net *net, const struct urvt_txq *q, uint32_t n)
{
	const struct urvt_txpkt *last = q->n ? &q->pkt[q->n - 1] : NULL;

	return n == 1 && last && last->link == URVT_LINK_ANY &&
	       last->where == URVT_TXPKT_QUEUED && last->len >= net->wait_ack[0].len &&
	       urvt_link_addr_same(&last->dst, &net->wait_ack[0].dst);
}

/* The waiting ACKs join q (rx_lock held): in front (a batch's end: they
 * are older than what it queued; a send: the peer must see an ACK before
 * the reply its request caused, as from rxe) or behind a send's reply
 * when they form one GSO send (ack_rides_behind). */
static void acks_into(struct urvt_net *net, struct urvt_txq *q, bool front)
{
	uint32_t n = atomic_load_explicit(&net->wait_n, memory_order_relaxed);

	if (!n)
		return;
	front = front || !ack_rides_behind(net, q, n);
	if (q->n + n > URVT_TXQ_PKTS || q->used + n * URVT_WAIT_ACK_BYTES > URVT_TXQ_BYTES)
		txq_send(net, q);
	if (front)
		memmove(&q->pkt[n], &q->pkt[0], q->n * sizeof(q->pkt[0]));
	for (uint32_t k = 0; k < n; k++) {
		const struct urvt_wait_ack *w = &net->wait_ack[k];
		struct urvt_txpkt *t = &q->pkt[front ? k : q->n + k];

		memcpy(q->buf + q->used, w->buf, w->len);
		*t = (struct urvt_txpkt){ .off = q->used, .len = w->len, .dst = w->dst,
					  .link = URVT_LINK_ANY, .where = URVT_TXPKT_QUEUED,
					  .qs = w->qs };
		memcpy(t->dgid, w->dgid, sizeof(t->dgid));
		q->used += w->len;
	}
	q->n += n;
	atomic_store_explicit(&net->wait_n, 0, memory_order_relaxed);
}

void urvt_txq_flush(struct urvt_net *net, struct urvt_txq *q)
{
	/* a send outside a receive batch: the ACKs that wait go with it
	 * (trylock: whoever receives sends them at its batch's end) */
	if (unlikely(atomic_load_explicit(&net->wait_n, memory_order_relaxed)) && !tls_in_rx) {
		struct urvt_rx_hold h = urvt_rx_trylock(net, false);
		if (h.how >= 0) {
			if (atomic_load_explicit(&net->wait_n, memory_order_relaxed) &&
			    net->wait_score < WAIT_SCORE_MAX)
				net->wait_score++; /* the wait paid */
			acks_into(net, q, false);
			urvt_rx_unlock(net, h);
		}
	}
	txq_send(net, q);
}

/* May this batch's ACKs wait (rx_lock held)? */
static bool wait_pays(struct urvt_net *net)
{
	if (net->wait_score)
		return true;
	if (++net->wait_retry < WAIT_RETRY)
		return false;
	net->wait_retry = 0;
	net->wait_score = 1; /* try again: the application may answer now */
	return true;
}

void urvt_txq_batch_end(struct urvt_net *net, bool app)
{
	struct urvt_txq *q = urvt_txq_peek();
	bool waiting = atomic_load_explicit(&net->wait_n, memory_order_relaxed) != 0;

	if (!waiting && (!q || !q->n))
		return;
	/* the score is asked last: a batch that could not wait anyway
	 * neither spends nor counts a retry */
	if (app && !waiting && atomic_load_explicit(&net->ack_wait, memory_order_relaxed) &&
	    atomic_load_explicit(&net->aside, memory_order_relaxed) && wait_pays(net) &&
	    acks_wait(net, q))
		return;
	if (waiting) {
		/* a batch, not a send, ended the wait */
		if (app)
			net->wait_score = net->wait_score > 2 ? net->wait_score - 2 : 0;
		if (!q)
			q = urvt_txq_get();
		if (!q)
			return; /* out of memory: they wait for the next batch */
		acks_into(net, q, true);
	}
	txq_send(net, q);
}

void urvt_net_acks_flush(struct urvt_net *net, bool wait)
{
	if (!net || !atomic_load_explicit(&net->wait_n, memory_order_relaxed))
		return;
	struct urvt_rx_hold h = wait ? urvt_rx_lock(net, false) : urvt_rx_trylock(net, false);

	if (h.how < 0)
		return; /* the one receiving sends them (or this thread, around us) */
	urvt_txq_batch_end(net, false);
	urvt_rx_unlock(net, h);
}

_Static_assert(URVT_QPN_ANY == URVT_LINK_QPN_ANY, "one value for an unknown QPN");

void urvt_tp_av_resolve(struct rvt_dev_info *rdi, struct urvt_av *av)
{
	struct urvt_net *net = rdi->transport_priv;
	union urvt_link_addr a;
	bool per_wr = false;

	av->route = 0;
	/* an unknown QPN (an AH) is resolved as slot 0's: links try the
	 * process without a slot only (link.h resolve) */
	av->route_slot = av->dqpn == URVT_QPN_ANY ? 0 : (uint16_t)(av->dqpn >> 16);
	if (!net)
		return;
	/* the links that reach some peers only cost less: first come first */
	for (unsigned k = 1; k < net->nlinks; k++) {
		struct urvt_link *l = net->links[k];
		int ret = urvt_link_resolve(l, av->attr.grh.dgid.raw, av->dqpn, &a);
		if (ret >= 0 && a.sa.sa_family == URVT_LINK_AF_PEER) {
			av->route = urvt_route(k, a.peer.id);
			if (ret == URVT_LINK_REACH_GID)
				av->route_slot = URVT_ROUTE_SLOT_ANY;
			URVT_DBG("route to %s: %s peer %u", "gid", l->ops->name, a.peer.id);
			return;
		}
		per_wr |= l->ops->lookup != NULL;
	}
	/* no link can find another slot's peer per WR: UDP for all */
	if (!per_wr)
		av->route_slot = URVT_ROUTE_SLOT_ANY;
}

void urvt_tp_ud_reroute(struct urvt_net *net, struct urvt_av *av, uint32_t qpn)
{
	const uint8_t *gid = av->attr.grh.dgid.raw;
	union urvt_link_addr a;

	av->route = 0;
	av->route_slot = (uint16_t)(qpn >> 16);
	for (unsigned k = 1; k < net->nlinks; k++) {
		struct urvt_link *l = net->links[k];
		if (!l->ops->lookup)
			continue;
		int ret = l->ops->lookup(l, gid, qpn, &a);
		if (ret >= 0 && a.sa.sa_family == URVT_LINK_AF_PEER) {
			av->route = urvt_route(k, a.peer.id);
			return;
		}
		if (l->ops->resolve_later)
			l->ops->resolve_later(l, gid, qpn);
	}
}

/* Multicast groups are links[0]'s (UDP: an IP multicast group per GID,
 * docs/multicast.md); what the other links' peers send to a group goes
 * over it too (no peer has the group's GID). */
int urvt_tp_mcast_join(struct rvt_dev_info *rdi, const union ibv_gid *gid)
{
	struct urvt_net *net = rdi->transport_priv;
	struct urvt_link *l = net ? net->links[URVT_LINK_ANY] : NULL;

	return l && l->ops->mcast_join ? l->ops->mcast_join(l, gid->raw) : -EOPNOTSUPP;
}

void urvt_tp_mcast_leave(struct rvt_dev_info *rdi, const union ibv_gid *gid)
{
	struct urvt_net *net = rdi->transport_priv;
	struct urvt_link *l = net ? net->links[URVT_LINK_ANY] : NULL;

	if (l && l->ops->mcast_leave)
		l->ops->mcast_leave(l, gid->raw);
}

void urvt_net_tx_ipinfo(struct urvt_net *net, const struct urvt_av *av, struct urvt_ipinfo *ip)
{
	*ip = net->ip_tmpl;
	ip->sport = av->udp_sport;
	memcpy(ip->dgid, av->attr.grh.dgid.raw, 16);
}

/* The link address of the peer route names on its link (route != 0): only the
 * peer member is ever read (txq_commit copies it alone). Written in
 * place, not zeroed and returned by value: the wide copies of the union
 * read back two fresh narrow stores, a store-forwarding stall that was
 * most of urvt_build_finish's time in a 64 KiB WRITE's sender. */
static void peer_dst(union urvt_link_addr *dst, uint32_t route)
{
	/* one 4-byte store, which the 4-byte copy of it can forward */
	const uint16_t peer[2] = { URVT_LINK_AF_PEER, (uint16_t)route };

	_Static_assert(sizeof(dst->peer) == sizeof(peer), "family, then id");
	memcpy(&dst->peer, peer, sizeof(peer));
}

/* The link of route if it builds packets in place (a same-host peer's:
 * one copy fewer, docs/shm.md "The rings") and no trace wants them
 * queued; else NULL. */
static struct urvt_link *in_place_link(const struct urvt_net *net, uint32_t route)
{
	struct urvt_link *l = route ? net->links[urvt_route_link(route)] : NULL;

	return l && l->builds_in_place && likely(!net->pcap) ? l : NULL;
}

uint32_t urvt_tx_span(const struct urvt_net *net, const struct urvt_av *av)
{
	const struct urvt_link *l;
	uint32_t span;

	/* a trace records every packet as it would cross UDP: no spans */
	if (!av->route || unlikely(net->pcap))
		return 0;
	l = net->links[urvt_route_link(av->route)];
	if (!l->ops->tx_span)
		return 0;
	span = l->ops->tx_span((struct urvt_link *)l);
	return span < URVT_SPAN_PKT_MAX - 128 ? span : URVT_SPAN_PKT_MAX - 128;
}

bool urvt_tx_cma(const struct urvt_net *net, const struct urvt_av *av)
{
	/* a trace records every packet as it would cross UDP */
	return av->route && !net->pcap && net->links[urvt_route_link(av->route)]->cma;
}

bool urvt_tx_cma_epoch(const struct urvt_net *net, const struct urvt_av *av, uint32_t *epoch)
{
	struct urvt_link *l = net->links[urvt_route_link(av->route)];
	union urvt_link_addr dst;

	if (!l->cma_push || !l->ops->cma_epoch)
		return false;
	peer_dst(&dst, av->route);
	*epoch = l->ops->cma_epoch(l, &dst);
	return true;
}

void urvt_tx_cma_fence(const struct urvt_net *net, const struct urvt_av *av)
{
	struct urvt_link *l = av->route ? net->links[urvt_route_link(av->route)] : NULL;
	union urvt_link_addr dst;

	if (!l || !l->ops->cma_fence)
		return;
	peer_dst(&dst, av->route);
	l->ops->cma_fence(l, &dst);
}

bool urvt_tx_cma_push(const struct urvt_net *net, const struct urvt_av *av, uint32_t epoch,
		      const struct iovec *local, unsigned nl, const struct iovec *remote,
		      unsigned nr, size_t len)
{
	struct urvt_link *l = net->links[urvt_route_link(av->route)];
	union urvt_link_addr dst;

	if (!l->ops->cma_push)
		return false;
	peer_dst(&dst, av->route);
	return l->ops->cma_push(l, &dst, epoch, local, nl, remote, nr, len);
}

uint8_t *urvt_build_start(struct rvt_qp *qp, struct urvt_txq *q, const struct urvt_pkt *f,
			  const struct urvt_av *av, uint32_t *hlen)
{
	struct urvt_net *net = qp_net(qp);
	uint8_t *p = NULL;

	q->cur_av = av;
	q->cur_where = URVT_TXPKT_QUEUED;
	q->cur_may_wait = false;
	struct urvt_link *l = in_place_link(net, av->route);
	/* headers, payload, pad and ICRC; more than URVT_PKT_MAX for a span
	 * only (urvt_tx_span) */
	uint64_t most = (uint64_t)URVT_HDR_MAX + f->paylen + urvt_pad_for(f->paylen) +
			URVT_ICRC_BYTES;
	/* a PMTU 4096 packet's headers are shorter than URVT_HDR_MAX; a
	 * length no engine builds fails at the finish, as before */
	if (f->paylen <= URVT_PKT_MAX - URVT_HDR_MAX || most > URVT_SPAN_PKT_MAX)
		most = most < URVT_PKT_MAX ? most : URVT_PKT_MAX;
	q->cur_cap = most > URVT_PKT_MAX ? (uint32_t)most : URVT_PKT_MAX;
	if (l) {
		union urvt_link_addr dst;
		peer_dst(&dst, av->route);
		if (q->n == URVT_TXQ_PKTS)
			urvt_txq_flush(net, q); /* a slot for it, before the lock */
		/* the shared-memory link rewinds a ring for small packets only
		 * (link/shm.c tx_rewind_due): what it reserves is what it sees */
		p = l->ops->tx_reserve(l, &dst, (uint32_t)most,
				       tls_in_rx ? URVT_TX_WAIT_RX : URVT_TX_WAIT_PATIENT);
		q->cur_where = p ? URVT_TXPKT_IN_LINK : URVT_TXPKT_LOST;
	}
	if (!p)
		p = txq_reserve(net, q, q->cur_cap); /* a lost one is built here, unsent */
	*hlen = (uint32_t)urvt_pkt_build_hdr(p, q->cur_cap, f);
	return p;
}

/*
 * A packet built straight into l, a link that builds in place (in_place_link),
 * at once (the ACK and UD fast paths): the room for it, bytes at most, without waiting
 * (a full queue's flush could wait, so none then either); NULL: build it
 * the general way. The caller builds it at the returned place, then
 * now_commit.
 */
static uint8_t *now_reserve(struct urvt_link *l, struct urvt_txq *q, uint32_t route,
			    uint32_t bytes, union urvt_link_addr *dst)
{
	if (!l || q->n == URVT_TXQ_PKTS)
		return NULL;
	peer_dst(dst, route);
	return l->ops->tx_reserve(l, dst, bytes, URVT_TX_WAIT_NOW);
}

static void now_commit(struct rvt_qp *qp, struct urvt_txq *q, struct urvt_link *l,
		       const union urvt_link_addr *dst, uint32_t route, uint32_t total)
{
	l->ops->tx_commit(l, dst, total);
	txq_commit(q, total, dst, urvt_route_link(route), urvt_qp_stats(qp), URVT_TXPKT_IN_LINK);
}

bool urvt_build_ack_now(struct rvt_qp *qp, struct urvt_txq *q, const struct urvt_pkt *f,
			uint32_t route)
{
	uint32_t mask = urvt_opcode[f->opcode].mask;
	struct urvt_link *l = in_place_link(qp_net(qp), route);
	union urvt_link_addr dst;
	uint8_t *p;

	if (!l || !l->lossless || !(mask & URVT_AETH_MASK) || (mask & URVT_PAYLOAD_MASK))
		return false;
	/* what urvt_build_start reserves for it: the ring's rewinds alike */
	p = now_reserve(l, q, route, URVT_HDR_MAX + URVT_ICRC_BYTES, &dst);
	if (!p)
		return false;
	now_commit(qp, q, l, &dst, route,
		   (uint32_t)urvt_pkt_pad_no_icrc(p, urvt_pkt_build_ack(p, f), 0));
	return true;
}

bool urvt_build_ud_now(struct rvt_qp *qp, struct urvt_txq *q, const struct urvt_pkt *f,
		       uint32_t route, struct rvt_sge_state *ss)
{
	struct urvt_link *l = in_place_link(qp_net(qp), route);
	union urvt_link_addr dst;
	uint32_t hlen;
	uint8_t *p = now_reserve(
		l, q, route, URVT_HDR_MAX + f->paylen + urvt_pad_for(f->paylen) + URVT_ICRC_BYTES,
		&dst);

	if (!p)
		return false;
	hlen = (uint32_t)urvt_pkt_build_ud_send(p, f);
	if (f->paylen)
		rvt_copy_from_sge(p + hlen, ss, f->paylen);
	now_commit(qp, q, l, &dst, route, (uint32_t)urvt_pkt_pad_no_icrc(p, hlen, f->paylen));
	return true;
}

/* The packet at p is total bytes (0: it could not be finished), built to
 * link; it leaves the ring's lock if built there, joins the queue. */
static void build_commit(struct rvt_qp *qp, struct urvt_txq *q, uint32_t len, size_t total,
			 unsigned link, const union urvt_link_addr *dst)
{
	struct urvt_net *net = qp_net(qp);

	/* built in the link (urvt_build_start): it leaves its lock here */
	if (q->cur_where == URVT_TXPKT_IN_LINK)
		net->links[link]->ops->tx_commit(net->links[link], dst,
						 (uint32_t)(total ? total : len));
	if (unlikely(!total))
		return; /* cannot happen for lengths the engines build */
	txq_commit(q, (uint32_t)total, dst, link, urvt_qp_stats(qp),
		   (enum urvt_txpkt_where)q->cur_where);
	if (unlikely(net->pcap))
		memcpy(q->pkt[q->n - 1].dgid, q->cur_av->attr.grh.dgid.raw, 16);
}

void urvt_build_finish(struct rvt_qp *qp, struct urvt_txq *q, uint8_t *p, uint32_t len)
{
	struct urvt_net *net = qp_net(qp);
	const struct urvt_av *av = q->cur_av;
	struct urvt_ipinfo ip;
	union urvt_link_addr dst;
	unsigned link;
	size_t total;

	if (av->route) {
		/* a lossless link: no ICRC, unless a trace wants one */
		link = urvt_route_link(av->route);
		peer_dst(&dst, av->route);
		if (likely(!net->pcap) && net->links[link]->lossless) {
			total = urvt_pkt_finish_no_icrc(p, q->cur_cap, len);
		} else {
			urvt_net_tx_ipinfo(net, av, &ip);
			total = urvt_pkt_finish(p, q->cur_cap, len, &ip);
		}
	} else {
		link = URVT_LINK_ANY;
		urvt_net_tx_ipinfo(net, av, &ip);
		total = urvt_pkt_finish(p, q->cur_cap, len, &ip);
		urvt_link_gid_addr(av->attr.grh.dgid.raw, &dst);
	}
	build_commit(qp, q, len, total, link, &dst);
}

void urvt_build_finish_sge(struct rvt_qp *qp, struct urvt_txq *q, uint8_t *p, uint32_t hlen,
			   struct rvt_sge_state *ss, uint32_t paylen)
{
	struct urvt_net *net = qp_net(qp);
	const struct urvt_av *av = q->cur_av;
	struct urvt_ipinfo ip;
	union urvt_link_addr dst;
	uint32_t crc, start = 0;
	size_t total;

	if (av->route || !paylen) {
		if (paylen)
			rvt_copy_from_sge(p + hlen, ss, paylen);
		urvt_build_finish(qp, q, p, hlen + paylen);
		return;
	}
	/* UDP: the ICRC is computed while the payload is gathered, one pass
	 * over it (docs/wire.md "CRC-32 implementation") */
	urvt_net_tx_ipinfo(net, av, &ip);
	total = urvt_pkt_finish_begin(p, q->cur_cap, hlen, paylen, &ip, &crc);
	if (likely(total)) {
		start = crc;
		crc = rvt_copy_from_sge_crc(p + hlen, ss, paylen, crc);
		urvt_pkt_finish_end(p, hlen + paylen, crc);
	}
	urvt_link_gid_addr(av->attr.grh.dgid.raw, &dst);
	build_commit(qp, q, hlen + paylen, total, URVT_LINK_ANY, &dst);
	/* what the next packet of the message can be built from: queued here
	 * (not in a link's memory), no pad, no trace */
	if (hlen == URVT_BTH_BYTES && total == hlen + paylen + URVT_ICRC_BYTES &&
	    q->cur_where == URVT_TXPKT_QUEUED && likely(!net->pcap)) {
		q->tmpl_qp = qp;
		q->tmpl_end = q->used;
		q->tmpl_crc = start;
	}
}

bool urvt_build_next_middle(struct rvt_qp *qp, struct urvt_txq *q, uint8_t op, uint32_t psn,
			    bool ackreq, struct rvt_sge_state *ss, uint32_t paylen)
{
	uint32_t len = URVT_BTH_BYTES + paylen + URVT_ICRC_BYTES, crc;
	const struct urvt_txpkt *was;
	struct urvt_txpkt *t;
	const uint8_t *wb;
	uint8_t *p;

	if (q->tmpl_qp != qp || q->tmpl_end != q->used || q->n == URVT_TXQ_PKTS ||
	    q->used + len > URVT_TXQ_BYTES)
		return false;
	was = &q->pkt[q->n - 1];
	wb = q->buf + was->off;
	if (was->len != len || bth_opcode(wb) != op)
		return false;
	p = q->buf + q->used;
	memcpy(p, wb, URVT_BTH_BYTES);
	/* BTH bytes 8..11: AckReq, no span (UDP), the PSN (urvt_pkt_build_hdr) */
	urvt_put_be32(p + 8, (ackreq ? 0x80000000u : 0) | (psn & 0xffffffu));
	q->tmpl_crc = urvt_icrc_start_next(q->tmpl_crc, wb, p);
	crc = rvt_copy_from_sge_crc(p + URVT_BTH_BYTES, ss, paylen, q->tmpl_crc);
	urvt_pkt_finish_end(p, URVT_BTH_BYTES + paylen, crc);
	t = &q->pkt[q->n++];
	*t = *was;
	t->off = q->used;
	q->used += len;
	q->tmpl_end = q->used;
	return true;
}
