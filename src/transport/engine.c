/*
 * The transport's send engine (transport->do_send, rxe_requester and
 * rxe_completer's common caller in rxe_comp.c/rxe_req.c): run under the
 * QP's s_sched token (core/ruc.c), it drains the completer queue, handles
 * the timers that fired, then lets the requester send. Also the completer
 * queue itself (responses handed over by the receive path), the
 * retransmit timer hook and the per-QP reset.
 */
#include <sched.h>
#include <string.h>

#include "base/progress.h"
#include "core/ruc.h"
#include "core/rvt_api.h"
#include "transport/net.h"
#include "transport/tp.h"
#include "wire/psn.h"

static void rxq_take(struct rvt_qp *qp, struct urvt_pktbuf **list)
{
	urvt_spin_lock(&qp_tp(qp)->rxq_lock);
	*list = qp_tp(qp)->rxq_head;
	WRITE_ONCE(qp_tp(qp)->rxq_head, NULL);
	qp_tp(qp)->rxq_tail = NULL;
	qp_tp(qp)->rxq_len = 0;
	urvt_spin_unlock(&qp_tp(qp)->rxq_lock);
}

void urvt_rxq_drop(struct rvt_qp *qp)
{
	struct urvt_pktbuf *l;

	if (!READ_ONCE(qp_tp(qp)->rxq_head))
		return;
	rxq_take(qp, &l);
	urvt_pkt_free_list(qp_net(qp), l);
}

/* Wait, at most URVT_COMP_WAIT_NS, for the engine's holder to let go: it
 * ends its run within microseconds unless it is off its CPU, and on a busy
 * machine that is a scheduler slice (200 us timed out in 1 of 10 runs of
 * test_verbs_channel over UDP, each time the order broke; 5 ms in none of
 * 20). Only a response that finds its engine taken waits. */
#define URVT_COMP_WAIT_NS 5000000
static void comp_wait_engine(struct rvt_qp *qp)
{
	uint64_t end = urvt_now_ns() + URVT_COMP_WAIT_NS;

	while (atomic_load_explicit(&qp->s_sched, memory_order_acquire) && urvt_now_ns() < end)
		sched_yield();
}

void urvt_comp_enqueue(struct urvt_net *net, struct rvt_qp *qp, struct urvt_pktbuf *b,
		       bool *consumed)
{
	b->next = NULL;
	urvt_comp_enqueue_list(net, qp, b, b, 1, consumed);
}

void urvt_comp_enqueue_list(struct urvt_net *net, struct rvt_qp *qp, struct urvt_pktbuf *b,
			    struct urvt_pktbuf *last, uint32_t n, bool *consumed)
{
	*consumed = false;
	urvt_spin_lock(&qp_tp(qp)->rxq_lock);
	if (qp_tp(qp)->rxq_len + n > URVT_RXQ_MAX) {
		urvt_spin_unlock(&qp_tp(qp)->rxq_lock);
		tp_count(net, urvt_qp_stats(qp), URVT_CTR_DROP_BASE + URVT_TDROP_RXQ_FULL, n);
		return;
	}
	if (qp_tp(qp)->rxq_tail)
		qp_tp(qp)->rxq_tail->next = b;
	else
		WRITE_ONCE(qp_tp(qp)->rxq_head, b);
	qp_tp(qp)->rxq_tail = last;
	qp_tp(qp)->rxq_len += n;
	urvt_spin_unlock(&qp_tp(qp)->rxq_lock);
	*consumed = true;
	rvt_schedule_send(qp);
	/* Another thread runs the engine (the poster, between its send and
	 * the end of its run, preempted on a busy CPU) and completes this
	 * response when it goes round. The requests behind it in our batch
	 * (the peer's reply) would enter their receive CQEs first: an
	 * application waiting on one channel for its send's completion, then
	 * for the reply's (perftest -e), took them the other way round
	 * (tests/unit/test_verbs_channel.c over shm and UDP); so did one that
	 * polls: tgtd left the iSER login phase at its login response's send
	 * completion, and the initiator's first command, which came after our
	 * ACK of that response, was in first (docs/ecosystem.md). Let the
	 * holder finish first, bounded. */
	if (unlikely(READ_ONCE(qp_tp(qp)->rxq_head) != NULL) && !rvt_engine_on_thread())
		comp_wait_engine(qp);
}

/* One response to the completer; false (and nothing done) once the QP
 * stopped sending: it drops what comes (queued or straight). */
static bool comp_one(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	if (!(ib_rvt_state_ops[rvt_qp_state(qp)] & RVT_PROCESS_SEND_OK))
		return false;
	urvt_comp_pkt(qp, pkt);
	return true;
}

/* The responses queued for the completer, in arrival order. */
static void run_completer(struct urvt_net *net, struct rvt_qp *qp)
{
	struct urvt_pktbuf *list, *b;

	/* an unlocked peek; a packet queued after it comes with another
	 * rvt_schedule_send, so the engine runs again */
	if (!READ_ONCE(qp_tp(qp)->rxq_head))
		return;
	rxq_take(qp, &list);
	for (b = list; b && comp_one(qp, &b->pkt); b = b->next)
		;
	urvt_pkt_free_list(net, list);
}

/*
 * Straight to the completer. A response the receive path hands over is
 * copied into a buffer for the engine, which may run on another thread
 * later, after the receive slot was reused. When the engine is free now
 * and nothing waits in the completer's queue, the receiving thread takes
 * it and completes the response itself, reading its payload where it lies
 * (a READ response span in the shm ring or a READ response in the socket's
 * receive buffer: one copy, to the READ's buffers, instead of two), in the
 * order the queue would have given.
 * So does a thread whose run of the QP's engine receives at its end (a
 * requester stalled on its window, urvt_tp_do_send): tls_stalled_qp.
 */
static URVT_TLS struct rvt_qp *tls_stalled_qp;

bool urvt_comp_direct_begin(struct rvt_qp *qp)
{
	uint32_t idle = 0;

	/* the queue's only writer is the receive path, which is us */
	if (READ_ONCE(qp_tp(qp)->rxq_head))
		return false;
	/* our own engine run waits for these responses: they are its
	 * completer's next work, done here instead of in its next round */
	if (tls_stalled_qp == qp)
		return true;
	if (!atomic_compare_exchange_strong_explicit(&qp->s_sched, &idle, 1, memory_order_acq_rel,
						     memory_order_relaxed))
		return false;
	if (likely(qp_tp(qp)->inited)) /* engine state: read with the token */
		return true;
	rvt_schedule_send_held(qp);
	return false;
}

void urvt_comp_direct_pkt(struct rvt_qp *qp, const struct urvt_pkt *pkt)
{
	comp_one(qp, pkt);
}

void urvt_comp_direct_end(struct rvt_qp *qp)
{
	if (tls_stalled_qp == qp)
		rvt_schedule_send(qp); /* a mark: that run goes round, and sends */
	else
		rvt_schedule_send_held(qp);
}

/* The retransmit and RNR timers that fired since the last run. */
static void run_timers(struct rvt_qp *qp, struct urvt_txq *q)
{
	if (atomic_load_explicit(&qp_tp(qp)->timeout_fired, memory_order_relaxed) &&
	    atomic_exchange(&qp_tp(qp)->timeout_fired, false))
		urvt_comp_timeout(qp, q);
	if ((qp->s_flags & RVT_S_WAIT_RNR) && atomic_exchange(&qp->s_rnr_fired, false)) {
		/* rc-protocol §4.4: resend from the NAK'd PSN */
		qp->s_flags &= ~RVT_S_WAIT_RNR;
		urvt_req_rewind(qp);
		qp_tp(qp)->progress_ns = urvt_now_ns();
	}
}

static void tp_do_send(struct rvt_qp *qp)
{
	struct urvt_net *net = qp_net(qp);
	int ops = ib_rvt_state_ops[rvt_qp_state(qp)];
	struct urvt_txq *q;

	if (!(ops & RVT_PROCESS_OR_FLUSH_SEND)) {
		urvt_rxq_drop(qp);
		return;
	}
	if (ops & RVT_FLUSH_SEND) {
		urvt_comp_flush(qp);
		return;
	}
	if (unlikely(!qp_tp(qp)->inited)) {
		qp_tp(qp)->comp_psn = qp_tp(qp)->psn_hi = qp->s_psn;
		qp_tp(qp)->inited = true;
		urvt_cc_qp_setup(qp);
	}
	q = urvt_txq_get();
	if (unlikely(!q))
		return;

	run_completer(net, qp);
	run_timers(qp, q);
	ops = ib_rvt_state_ops[rvt_qp_state(qp)];
	if (ops & RVT_FLUSH_SEND) {
		urvt_comp_flush(qp);
	} else {
		qp_tp(qp)->stalled = false;
		urvt_req_run(qp, q);
		urvt_comp_arm_timer(qp);
	}
	urvt_cc_sync(qp);
	urvt_txq_flush_unless_rx(net, q);
	/* post_send with the requester stalled on ACKs: receive them now if
	 * no one else is (trylock); they come back through rvt_schedule_send,
	 * which runs this engine again before the token is released */
	if (qp_tp(qp)->stalled && !urvt_in_rx() && !urvt_progress_on_thread(qp->rdi->progress)) {
		struct rvt_qp *outer = tls_stalled_qp;

		tls_stalled_qp = qp;
		urvt_net_poll_stalled(qp->rdi);
		tls_stalled_qp = outer;
	}
}

void urvt_tp_do_send(struct rvt_qp *qp)
{
	tp_do_send(qp);
	/* the application's verb, after its packets are out (its clock read
	 * was on a ping-pong's way, urvt_ud_send) */
	urvt_net_app_posts(qp);
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

	urvt_rxq_drop(qp);
	if (net) {
		urvt_resp_ooo_drop(qp);
		/* its last ACK may be owed (resp.c) or wait (tx.c): the
		 * peer's WR completes */
		urvt_resp_ack_owed_send(qp);
		urvt_net_acks_flush(net, !urvt_in_rx());
	}
	atomic_store(&qp_tp(qp)->timeout_fired, false);
	/* READs that asked for pushes end unanswered (docs/shm.md "Single copy") */
	if (net && qp_tp(qp)->cma_reads)
		urvt_tx_cma_fence(net, &qp->remote_av);
	urvt_cc_qp_release(qp);
	if (qp_tp(qp)->r_rdma_valid)
		rvt_put_sge(&qp->r_rdma_sge);
	if (net)
		urvt_stats_release(net, qp);
	memset(&qp_tp(qp)->inited, 0,
	       sizeof(struct urvt_tp_qp) - offsetof(struct urvt_tp_qp, inited));
}
