/*
 * Congestion control of the RC requester on lossy links (docs/transport.md
 * "Congestion control"). Not in rxe, which relies on a lossless fabric and
 * a fixed 128-PSN window (rc-protocol §2.2): nothing here shows on the wire
 * except when packets leave, never what they contain.
 *
 * One window per peer (destination GID), shared by every RC QP of the
 * device that sends to it: bytes in flight = the sum over those QPs of
 * (s_psn - comp_psn) x PMTU, READ requests counting the responses they ask
 * for. The window grows with acknowledged bytes (slow start, then additive
 * increase) and shrinks on loss (a PSN-sequence NAK, a gap in READ
 * responses, a timeout: at most once per recovery period) and on queueing
 * delay (RTT far above the smallest seen). Each QP may keep a few packets
 * in flight whatever the peer's window says, so a QP never waits for
 * another QP's ACKs.
 *
 * The QP's requester and completer run under its s_sched token (engine
 * context); QPs on different threads meet only in struct urvt_cc_peer: the
 * in-flight sum is atomic, the window's state is under the peer's lock
 * (taken per RTT sample and per loss, not per packet).
 */
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "transport/tp.h"
#include "wire/psn.h"

/* A QP may always have this many PSNs in flight (no starvation, no wake-up list). */
#define CC_QP_MIN_PSNS 4
/* The largest window of one QP, in bytes (at least 128 PSNs, rxe's window). */
#define CC_QP_MAX_BYTES (2u << 20)
#define CC_QP_MAX_PSNS 1024u
/* Peer window bounds and start (bytes). The upper bound keeps one peer's
 * burst inside what an unprivileged receive socket holds (rmem_max). */
#define CC_MIN_BYTES (64u << 10)
#define CC_MAX_BYTES (4u << 20)
#define CC_INIT_BYTES (1u << 20)
/* Multiplicative decrease on loss (x 7/10) and on a timeout (x 1/2). */
#define CC_LOSS_NUM 7
#define CC_LOSS_DEN 10
/* A loss while srtt <= 2 x min_rtt + this looks random: cut to 9/10 only. */
#define CC_RANDOM_LOSS_SLACK_NS 100000ull
/* Additive increase: this many PMTUs per window acknowledged. */
#define CC_AI_PKTS 8
/* Delay: a smoothed RTT above min_rtt x 8 + 1 ms shrinks the window x 0.85
 * (once per recovery period). Generous, because on a shared host the RTT
 * also holds the time a process waits for a CPU, which no window changes. */
#define CC_DELAY_MUL 8
#define CC_DELAY_ADD_NS 1000000ull
/* Tail-loss probe floor when the RTT is known. The retransmit timer is
 * pushed back lazily: a QP with something in flight wakes the progress
 * thread once per probe interval, and each wake-up takes the CPU from a
 * busy poller for 10-20 us; at 250 us that was every tenth round trip of
 * a ping-pong between two namespaces (docs/transport.md "Timers"). */
#define CC_PTO_MIN_NS 1000000ull
/* After a window cut, the next loss reaction waits 2 x srtt + this: the
 * losses of one burst are one event. */
#define CC_LOSS_HOLD_NS 250000ull

struct urvt_cc_peer {
	uint8_t gid[16];
	_Atomic int64_t inflight;         /* bytes, the sum of the QPs' charges */
	_Atomic uint32_t cwnd;            /* bytes; written under lock */
	_Atomic uint64_t srtt_ns;         /* 0: no sample yet; written under lock */
	_Atomic uint64_t rttvar_ns;
	urvt_spinlock_t lock;
	uint32_t ssthresh;
	uint64_t min_rtt_ns, min_rtt_at;  /* smallest RTT (re-learnt every 10 s) */
	uint64_t hold_until_ns;           /* no further decrease before (recovery) */
	uint64_t ai_acc;                  /* bytes acknowledged since the last +1 PMTU */
	uint32_t undo_cwnd, undo_ssthresh; /* before the last timeout's cut */
};

#define CC_PEERS 256

struct urvt_cc_table {
	pthread_mutex_t lock;
	uint32_t n;
	struct urvt_cc_peer *peer[CC_PEERS];
	struct urvt_cc_peer shared;       /* for every GID past CC_PEERS */
	bool delay_off;                   /* URVT_CC_DELAY=0: loss only, no decrease for delay */
};

static void peer_init(struct urvt_cc_peer *p, const uint8_t gid[16])
{
	memcpy(p->gid, gid, 16);
	urvt_spin_init(&p->lock);
	atomic_store(&p->cwnd, CC_INIT_BYTES);
	p->ssthresh = CC_MAX_BYTES;
}

int urvt_cc_init(struct urvt_net *net)
{
	struct urvt_cc_table *t;

	if (urvt_env_off("URVT_CC"))
		return 0; /* no table: every QP keeps the fixed window */
	t = calloc(1, sizeof(*t));
	if (!t)
		return -1;
	t->delay_off = urvt_env_off("URVT_CC_DELAY");
	pthread_mutex_init(&t->lock, NULL);
	peer_init(&t->shared, (const uint8_t[16]){ 0 });
	net->cc = t;
	return 0;
}

void urvt_cc_fini(struct urvt_net *net)
{
	struct urvt_cc_table *t = net->cc;

	if (!t)
		return;
	for (uint32_t i = 0; i < t->n; i++) {
		urvt_spin_destroy(&t->peer[i]->lock);
		free(t->peer[i]);
	}
	urvt_spin_destroy(&t->shared.lock);
	pthread_mutex_destroy(&t->lock);
	free(t);
	net->cc = NULL;
}

static struct urvt_cc_peer *peer_get(struct urvt_net *net, const uint8_t gid[16])
{
	struct urvt_cc_table *t = net->cc;
	struct urvt_cc_peer *p = NULL;

	pthread_mutex_lock(&t->lock);
	for (uint32_t i = 0; i < t->n && !p; i++)
		if (!memcmp(t->peer[i]->gid, gid, 16))
			p = t->peer[i];
	if (!p && t->n < CC_PEERS) {
		p = calloc(1, sizeof(*p));
		if (p) {
			peer_init(p, gid);
			t->peer[t->n++] = p;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return p ? p : &t->shared;
}

/* First engine run of an RC QP: its window limit and its peer. */
void urvt_cc_qp_setup(struct rvt_qp *qp)
{
	struct urvt_tp_qp *tp = qp_tp(qp);
	struct urvt_net *net = qp_net(qp);
	uint32_t w;

	tp->wnd_max = URVT_MAX_UNACKED_PSNS;
	tp->peer = NULL;
	/* over a lossless link: rxe's fixed window, nothing to adapt */
	if (qp->type != IBV_QPT_RC || !net->cc ||
	    (qp->remote_av.route && net->links[urvt_route_link(qp->remote_av.route)]->lossless))
		return;
	w = CC_QP_MAX_BYTES / (qp->pmtu ? qp->pmtu : 4096);
	if (w > CC_QP_MAX_PSNS)
		w = CC_QP_MAX_PSNS;
	if (w > tp->wnd_max)
		tp->wnd_max = w;
	tp->peer = peer_get(net, qp->remote_av.attr.grh.dgid.raw);
}

static int64_t qp_inflight_bytes(const struct rvt_qp *qp)
{
	int32_t d = urvt_psn_diff(qp->s_psn, qp_tp(qp)->comp_psn);

	return d > 0 ? (int64_t)d * qp->pmtu : 0;
}

uint32_t urvt_cc_allow(struct rvt_qp *qp, uint32_t psn)
{
	struct urvt_tp_qp *tp = qp_tp(qp);
	int32_t base = urvt_psn_diff(psn, tp->comp_psn);
	int64_t room;
	uint32_t a, c;

	if (base < 0)
		base = 0;
	if ((uint32_t)base >= tp->wnd_max)
		return 0;
	a = tp->wnd_max - (uint32_t)base;
	if (!tp->peer)
		return a;
	/* what the peer's window leaves, this QP's own charge given back */
	room = (int64_t)atomic_load_explicit(&tp->peer->cwnd, memory_order_relaxed) -
	       atomic_load_explicit(&tp->peer->inflight, memory_order_relaxed) + tp->cc_charged -
	       (int64_t)base * qp->pmtu;
	c = room > 0 ? (uint32_t)(room / qp->pmtu) : 0;
	if ((uint32_t)base < CC_QP_MIN_PSNS && c < CC_QP_MIN_PSNS - (uint32_t)base)
		c = CC_QP_MIN_PSNS - (uint32_t)base;
	return c < a ? c : a;
}

void urvt_cc_sync(struct rvt_qp *qp)
{
	struct urvt_tp_qp *tp = qp_tp(qp);
	int64_t now;

	if (!tp->peer)
		return;
	now = qp_inflight_bytes(qp);
	if (now != tp->cc_charged) {
		atomic_fetch_add_explicit(&tp->peer->inflight, now - tp->cc_charged,
					  memory_order_relaxed);
		tp->cc_charged = now;
	}
}

void urvt_cc_qp_release(struct rvt_qp *qp)
{
	struct urvt_tp_qp *tp = qp_tp(qp);

	if (tp->peer && tp->cc_charged)
		atomic_fetch_sub_explicit(&tp->peer->inflight, tp->cc_charged,
					  memory_order_relaxed);
	tp->cc_charged = 0;
	tp->peer = NULL;
}

/* Under p->lock: shrink to cwnd x num / den, at most once per recovery period. */
static bool peer_decrease(struct urvt_cc_peer *p, uint64_t now, uint32_t num, uint32_t den,
			  bool force)
{
	uint64_t srtt = atomic_load_explicit(&p->srtt_ns, memory_order_relaxed);
	uint64_t c = atomic_load_explicit(&p->cwnd, memory_order_relaxed);

	if (!force && now < p->hold_until_ns)
		return false;
	c = c * num / den;
	if (c < CC_MIN_BYTES)
		c = CC_MIN_BYTES;
	atomic_store_explicit(&p->cwnd, (uint32_t)c, memory_order_relaxed);
	p->ssthresh = (uint32_t)c;
	p->ai_acc = 0;
	/* one reaction per round trip: the losses of one burst are one event */
	p->hold_until_ns = now + (srtt ? 2 * srtt : 0) + CC_LOSS_HOLD_NS;
	return true;
}

void urvt_cc_acked(struct rvt_qp *qp, uint32_t npsn)
{
	struct urvt_tp_qp *tp = qp_tp(qp);
	struct urvt_cc_peer *p = tp->peer;
	uint64_t bytes = (uint64_t)npsn * qp->pmtu, now = 0, rtt = 0;
	uint32_t c;

	if (!p)
		return;
	/* one RTT sample per round trip, Karn's rule (none after a rewind) */
	if (tp->rtt_valid && urvt_psn_cmp(tp->comp_psn, tp->rtt_psn) > 0) {
		tp->rtt_valid = false;
		now = urvt_now_ns();
		rtt = now > tp->rtt_t0 ? now - tp->rtt_t0 : 1;
	}
	urvt_spin_lock(&p->lock);
	c = atomic_load_explicit(&p->cwnd, memory_order_relaxed);
	if (rtt) {
		uint64_t s = atomic_load_explicit(&p->srtt_ns, memory_order_relaxed);
		uint64_t v = atomic_load_explicit(&p->rttvar_ns, memory_order_relaxed);
		if (!s) {
			s = rtt;
			v = rtt / 2;
		} else {
			uint64_t d = s > rtt ? s - rtt : rtt - s;
			v = (3 * v + d) / 4;
			s = (7 * s + rtt) / 8;
		}
		atomic_store_explicit(&p->srtt_ns, s, memory_order_relaxed);
		atomic_store_explicit(&p->rttvar_ns, v, memory_order_relaxed);
		if (!p->min_rtt_ns || rtt < p->min_rtt_ns || now - p->min_rtt_at > 10000000000ull) {
			p->min_rtt_ns = rtt;
			p->min_rtt_at = now;
		}
		/* queueing delay far above the path's own: shrink before the
		 * receiver's socket overflows */
		if (!qp_net(qp)->cc->delay_off && s > p->min_rtt_ns * CC_DELAY_MUL + CC_DELAY_ADD_NS &&
		    peer_decrease(p, now, 85, 100, false)) {
			urvt_spin_unlock(&p->lock);
			qp_count(qp, URVT_CTR_CC_DELAY, 1);
			return;
		}
	}
	if (c < p->ssthresh) {
		c = c + bytes > CC_MAX_BYTES ? CC_MAX_BYTES : c + (uint32_t)bytes;
	} else {
		p->ai_acc += bytes * CC_AI_PKTS;
		while (p->ai_acc >= c && c < CC_MAX_BYTES) {
			p->ai_acc -= c;
			c += qp->pmtu;
		}
		if (c > CC_MAX_BYTES)
			c = CC_MAX_BYTES;
	}
	atomic_store_explicit(&p->cwnd, c, memory_order_relaxed);
	urvt_spin_unlock(&p->lock);
}

void urvt_cc_loss(struct rvt_qp *qp, bool timeout)
{
	struct urvt_cc_peer *p = qp_tp(qp)->peer;
	bool cut;

	qp_tp(qp)->rtt_valid = false;
	if (!p)
		return;
	urvt_spin_lock(&p->lock);
	if (timeout) {
		uint32_t c = atomic_load_explicit(&p->cwnd, memory_order_relaxed);
		uint32_t ss = p->ssthresh;
		cut = peer_decrease(p, urvt_now_ns(), 1, 2, false);
		if (cut) {
			p->undo_cwnd = c;
			p->undo_ssthresh = ss;
		}
		/* every QP the same stall timed out may undo the one cut */
		qp_tp(qp)->cc_undo = p->undo_cwnd != 0;
	} else {
		/* a loss without queueing delay (srtt near the path's own) is
		 * more likely random (corruption, a lossy hop) than a full
		 * queue: cut less (TCP Veno's reasoning) */
		uint64_t srtt = atomic_load_explicit(&p->srtt_ns, memory_order_relaxed);
		bool queued = !srtt || !p->min_rtt_ns ||
			      srtt > 2 * p->min_rtt_ns + CC_RANDOM_LOSS_SLACK_NS;
		cut = queued ? peer_decrease(p, urvt_now_ns(), CC_LOSS_NUM, CC_LOSS_DEN, false)
			     : peer_decrease(p, urvt_now_ns(), 9, 10, false);
		p->undo_cwnd = 0;
		qp_tp(qp)->cc_undo = false;
	}
	urvt_spin_unlock(&p->lock);
	if (cut)
		qp_count(qp, URVT_CTR_CC_LOSS, 1);
}

/* The originals of what a timeout resent were acknowledged (the ACK passed
 * the resend cursor): nothing was lost, the peer or this process had only
 * been off the CPU. The timeout's cut is undone (as TCP's F-RTO/Eifel). */
void urvt_cc_undo(struct rvt_qp *qp)
{
	struct urvt_cc_peer *p = qp_tp(qp)->peer;

	qp_tp(qp)->cc_undo = false;
	if (!p)
		return;
	urvt_spin_lock(&p->lock);
	if (p->undo_cwnd) {
		if (p->undo_cwnd > atomic_load_explicit(&p->cwnd, memory_order_relaxed))
			atomic_store_explicit(&p->cwnd, p->undo_cwnd, memory_order_relaxed);
		p->ssthresh = p->undo_ssthresh;
		p->undo_cwnd = 0;
		urvt_spin_unlock(&p->lock);
		qp_count(qp, URVT_CTR_CC_UNDO, 1);
		return;
	}
	urvt_spin_unlock(&p->lock);
}

void urvt_cc_sent(struct rvt_qp *qp, uint32_t psn)
{
	struct urvt_tp_qp *tp = qp_tp(qp);

	if (tp->peer && !tp->rtt_valid) {
		tp->rtt_valid = true;
		tp->rtt_psn = psn;
		tp->rtt_t0 = urvt_now_ns();
	}
}

uint64_t urvt_cc_probe_ns(const struct rvt_qp *qp, uint64_t dflt)
{
	const struct urvt_cc_peer *p = qp_tp(qp)->peer;
	uint64_t s, pto;

	if (!p)
		return dflt;
	s = atomic_load_explicit(&p->srtt_ns, memory_order_relaxed);
	if (!s)
		return dflt;
	pto = 2 * s + 4 * atomic_load_explicit(&p->rttvar_ns, memory_order_relaxed);
	if (pto < CC_PTO_MIN_NS)
		pto = CC_PTO_MIN_NS;
	return pto < dflt ? pto : dflt;
}

uint32_t urvt_cc_cwnd(const struct rvt_qp *qp)
{
	const struct urvt_cc_peer *p = qp_tp(qp)->peer;

	return p ? atomic_load_explicit(&p->cwnd, memory_order_relaxed) : 0;
}
