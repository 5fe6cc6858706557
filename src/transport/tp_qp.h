/*
 * Per-QP state of the network transport (src/transport): qp->priv, made
 * by the qp_priv_alloc hook (attach.c) at create_qp, reached with
 * qp_tp(qp). Zeroed by qp_priv_alloc and by the qp_reset hook.
 *
 * Lock map:
 *   rxq_*          the QP's completer queue: receive threads append under
 *                  rxq_lock, the send engine (s_sched holder) takes the list.
 *   timeout_fired  set by the retransmit timer, taken by the engine.
 *   engine group   owned by whoever holds the s_sched token (ruc.c).
 *   r_* group      under qp->r_lock (the responder).
 */
#ifndef URVT_TRANSPORT_TP_QP_H
#define URVT_TRANSPORT_TP_QP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/rvt.h"
#include "wire/grh.h"

/* READ/atomic requests one QP may have outstanding (max_rd_atomic <= 16). */
#define URVT_RD_REQS_MAX 16

struct urvt_pktbuf;
struct urvt_stats_qp;
struct urvt_cc_peer;

struct urvt_tp_qp {
	struct {
		urvt_spinlock_t rxq_lock;
		struct urvt_pktbuf *rxq_head, *rxq_tail;
		uint32_t rxq_len;
		_Atomic bool timeout_fired;
		_Atomic(struct urvt_stats_qp *) stats; /* counters file slot, NULL: none */
		_Atomic int cma_pid;      /* the process the last answer by reference came
					     from (recv.c; docs/shm.md "Single copy") */
	} __attribute__((aligned(64)));

	/* ---- requester + completer (s_sched holder) ---- */
	struct {
		bool inited;              /* comp_psn/psn_hi loaded from sq_psn */
		bool timer_armed;         /* s_timer is (or may be) pending */
		bool cur_started;         /* s_cur has had a packet sent this pass */
		bool rewind_valid;        /* rewind_psn holds the last NAK rewind */
		bool rd_valid;            /* rd_sge is positioned for slot rd_idx */
		bool cur_valid;           /* sge is positioned for slot cur_idx */
		bool rewind_by_nak;       /* rewind_psn came from a NAK (dup filter) */
		bool probe_sent;          /* a tail-loss probe went out since progress */
		bool probing;             /* urvt_req_run sends one AckReq packet */
		bool stalled;             /* the requester waits for ACKs (window, credits) */
		bool rtt_valid;           /* rtt_psn is being timed (cc.c) */
		bool ackreq_valid;        /* ackreq_psn: the newest packet with AckReq */
		bool cc_undo;             /* a timeout cut the window: undo if spurious */
		bool cma_off;             /* a pull failed: READs ask for data again */
		bool nak_one;             /* after a PSN-sequence NAK: resend a few packets ... */
		bool nak_wait;            /* ... and wait for the answer past nak_psn (req.c) */
		uint8_t resend_left;      /* packets of that resend still to go */
		uint8_t rd_n, rd_head;    /* READ/atomic requests outstanding (rd_end ring) */
		uint8_t comp_opcode;      /* last READ response taken (rc-protocol §4) */
		uint32_t comp_psn;        /* oldest unacked PSN (rc-protocol §1 comp.psn) */
		uint32_t psn_hi;          /* highest PSN sent + 1 (never rewound) */
		uint32_t rewind_psn;
		uint32_t cur_idx;         /* slot the gather cursor belongs to */
		uint32_t rd_idx;
		uint32_t cma_reads;       /* READ WQEs that asked for answers by reference,
					     not retired: nothing else starts (req.c) */
		uint64_t progress_ns;     /* last forward progress (retransmit timer) */
		uint64_t timer_at_ns;     /* the deadline s_timer was last set for (no progress lock to read it) */
		/* congestion control (cc.c): peer NULL = fixed window (a lossless link, UC, off) */
		struct urvt_cc_peer *peer;
		int64_t cc_charged;       /* bytes this QP has added to peer->inflight */
		uint32_t wnd_max;         /* PSNs in flight at most */
		uint32_t rtt_psn, ackreq_psn;
		uint32_t nak_psn;         /* the PSN the NAK named */
		uint64_t rtt_t0;
		/* end PSN + 1 of each READ/atomic request on the wire, oldest
		 * first: the responder holds one resource per entry (rc-protocol §5) */
		uint32_t rd_end[URVT_RD_REQS_MAX];
		/* UD: where the last rerouted WR went (req.c ud_route):
		 * route 0 is none. Also written by post_ud_direct (core
		 * post.c), under s_hlock with the engine idle and its queue
		 * empty: the engine has no WR that could reroute meanwhile */
		uint32_t ud_route;
		uint16_t ud_route_slot;
		uint8_t ud_route_gid[16];
		struct rvt_sge_state sge; /* gather cursor at s_cur + s_offset */
		struct rvt_sge_state rd_sge; /* READ response scatter cursor */
	} __attribute__((aligned(64)));

	/* ---- responder (qp->r_lock) ---- */
	/* RC requests that arrived past a PSN gap, kept in PSN order until
	 * the gap is filled (resp.c "Past a gap") */
	struct urvt_pktbuf *ooo_head, *ooo_tail;
	uint32_t ooo_n;
	bool ack_hold;                /* they are running: one answer at the end */
	bool ack_due;                 /* an ACK of ack_due_psn is owed at the batch's end */
	bool read_due;                /* READs wait in this thread's batch (txq read_due) */
	uint32_t ack_due_psn, ack_due_msn;
	struct rvt_sge_state r_cur;   /* scatter cursor; qp->r_sge keeps the whole WQE */
	uint32_t r_rdma_total;        /* RETH DMA length of the WRITE in progress */
	bool r_rdma_valid;            /* r_rdma_sge holds an MR reference */
	/* UD: the last GRH image made and what it was made of (resp.c
	 * ud_grh): a peer's datagrams share all but, at most, their length */
	bool grh_valid;
	uint32_t grh_len;
	struct urvt_ipinfo grh_ip;
	uint8_t grh_img[URVT_GRH_BYTES];
};

/* One pointer load on the hot path, as rdmavt drivers reach qp->priv. */
static inline struct urvt_tp_qp *qp_tp(const struct rvt_qp *qp)
{
	return qp->priv;
}

#endif
