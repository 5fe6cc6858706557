/*
 * Queue pairs: create, modify (the IB state table), query, reset, error
 * flush and destroy (rdmavt qp.c; qp-semantics §4-§7).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "core/qp_table.h"
#include "core/rvt_api.h"
#include "core/ruc.h"
#include "core/transport.h"

/* qp-semantics §1 */
const int ib_rvt_state_ops[IBV_QPS_ERR + 1] = {
	[IBV_QPS_RESET] = 0,
	[IBV_QPS_INIT] = RVT_POST_RECV_OK,
	[IBV_QPS_RTR] = RVT_POST_RECV_OK | RVT_PROCESS_RECV_OK,
	[IBV_QPS_RTS] = RVT_POST_RECV_OK | RVT_PROCESS_RECV_OK | RVT_POST_SEND_OK |
			RVT_PROCESS_SEND_OK | RVT_PROCESS_NEXT_SEND_OK,
	[IBV_QPS_SQD] = RVT_POST_RECV_OK | RVT_PROCESS_RECV_OK | RVT_POST_SEND_OK |
			RVT_PROCESS_SEND_OK,
	[IBV_QPS_SQE] = RVT_POST_RECV_OK | RVT_PROCESS_RECV_OK | RVT_POST_SEND_OK |
			RVT_FLUSH_SEND,
	[IBV_QPS_ERR] = RVT_POST_RECV_OK | RVT_FLUSH_RECV | RVT_POST_SEND_OK | RVT_FLUSH_SEND,
};

const char *const rvt_qp_state_name[IBV_QPS_ERR + 1] = {
	[IBV_QPS_RESET] = "RESET", [IBV_QPS_INIT] = "INIT", [IBV_QPS_RTR] = "RTR",
	[IBV_QPS_RTS] = "RTS",     [IBV_QPS_SQD] = "SQD",   [IBV_QPS_SQE] = "SQE",
	[IBV_QPS_ERR] = "ERR",
};

/* ------------------------------------------------------------------ */
/* The state-transition table (ib_modify_qp_is_ok), qp-semantics §5.2 */
/* ------------------------------------------------------------------ */
enum { T_RC, T_UC, T_UD, T_XI, T_XT, T_NTYPES }; /* XI: XRC_SEND, XT: XRC_RECV */

struct qp_transition {
	bool valid;
	int req[T_NTYPES];
	int opt[T_NTYPES];
};

#define PKEY IBV_QP_PKEY_INDEX
#define PORT IBV_QP_PORT
#define ACC IBV_QP_ACCESS_FLAGS
#define QKEY IBV_QP_QKEY
#define AV IBV_QP_AV
#define MTU IBV_QP_PATH_MTU
#define DQPN IBV_QP_DEST_QPN
#define RQPSN IBV_QP_RQ_PSN
#define SQPSN IBV_QP_SQ_PSN
#define MAXDEST IBV_QP_MAX_DEST_RD_ATOMIC
#define MAXRD IBV_QP_MAX_QP_RD_ATOMIC
#define MINRNR IBV_QP_MIN_RNR_TIMER
#define TMO IBV_QP_TIMEOUT
#define RETRY IBV_QP_RETRY_CNT
#define RNR IBV_QP_RNR_RETRY
#define ALT IBV_QP_ALT_PATH
#define MIG IBV_QP_PATH_MIG_STATE
#define CUR IBV_QP_CUR_STATE
#define SQDN IBV_QP_EN_SQD_ASYNC_NOTIFY

#define ALL_VALID { .valid = true }

static const struct qp_transition qp_state_table[IBV_QPS_ERR + 1][IBV_QPS_ERR + 1] = {
	[IBV_QPS_RESET] = {
		[IBV_QPS_RESET] = ALL_VALID,
		[IBV_QPS_INIT] = {
			.valid = true,
			.req = { [T_RC] = PKEY | PORT | ACC, [T_UC] = PKEY | PORT | ACC,
				 [T_UD] = PKEY | PORT | QKEY, [T_XI] = PKEY | PORT | ACC,
				 [T_XT] = PKEY | PORT | ACC },
		},
	},
	[IBV_QPS_INIT] = {
		[IBV_QPS_RESET] = ALL_VALID,
		[IBV_QPS_ERR] = ALL_VALID,
		[IBV_QPS_INIT] = {
			.valid = true,
			.opt = { [T_RC] = PKEY | PORT | ACC, [T_UC] = PKEY | PORT | ACC,
				 [T_UD] = PKEY | PORT | QKEY, [T_XI] = PKEY | PORT | ACC,
				 [T_XT] = PKEY | PORT | ACC },
		},
		[IBV_QPS_RTR] = {
			.valid = true,
			.req = { [T_RC] = AV | MTU | DQPN | RQPSN | MAXDEST | MINRNR,
				 [T_UC] = AV | MTU | DQPN | RQPSN,
				 [T_XI] = AV | MTU | DQPN | RQPSN,
				 [T_XT] = AV | MTU | DQPN | RQPSN | MAXDEST | MINRNR },
			.opt = { [T_RC] = ALT | ACC | PKEY, [T_UC] = ALT | ACC | PKEY,
				 [T_UD] = PKEY | QKEY, [T_XI] = ALT | ACC | PKEY,
				 [T_XT] = ALT | ACC | PKEY },
		},
	},
	[IBV_QPS_RTR] = {
		[IBV_QPS_RESET] = ALL_VALID,
		[IBV_QPS_ERR] = ALL_VALID,
		[IBV_QPS_RTS] = {
			.valid = true,
			.req = { [T_RC] = TMO | RETRY | RNR | SQPSN | MAXRD, [T_UC] = SQPSN,
				 [T_UD] = SQPSN, [T_XI] = TMO | RETRY | RNR | SQPSN | MAXRD,
				 [T_XT] = TMO | SQPSN },
			.opt = { [T_RC] = CUR | ALT | ACC | MINRNR | MIG,
				 [T_UC] = CUR | ALT | ACC | MIG, [T_UD] = CUR | QKEY,
				 [T_XI] = CUR | ALT | ACC | MIG, [T_XT] = CUR | ALT | ACC | MINRNR | MIG },
		},
	},
	[IBV_QPS_RTS] = {
		[IBV_QPS_RESET] = ALL_VALID,
		[IBV_QPS_ERR] = ALL_VALID,
		[IBV_QPS_RTS] = {
			.valid = true,
			.opt = { [T_RC] = CUR | ACC | ALT | MIG | MINRNR,
				 [T_UC] = CUR | ACC | ALT | MIG, [T_UD] = CUR | QKEY,
				 [T_XI] = CUR | ACC | ALT | MIG, [T_XT] = CUR | ACC | ALT | MIG | MINRNR },
		},
		[IBV_QPS_SQD] = {
			.valid = true,
			.opt = { [T_RC] = SQDN, [T_UC] = SQDN, [T_UD] = SQDN, [T_XI] = SQDN,
				 [T_XT] = SQDN },
		},
	},
	[IBV_QPS_SQD] = {
		[IBV_QPS_RESET] = ALL_VALID,
		[IBV_QPS_ERR] = ALL_VALID,
		[IBV_QPS_RTS] = {
			.valid = true,
			.opt = { [T_RC] = CUR | ALT | ACC | MINRNR | MIG,
				 [T_UC] = CUR | ALT | ACC | MIG, [T_UD] = CUR | QKEY,
				 [T_XI] = CUR | ALT | ACC | MIG, [T_XT] = CUR | ALT | ACC | MINRNR | MIG },
		},
		[IBV_QPS_SQD] = {
			.valid = true,
			.opt = { [T_RC] = PORT | AV | TMO | RETRY | RNR | MAXRD | MAXDEST | ALT |
					  ACC | PKEY | MINRNR | MIG,
				 [T_UC] = AV | ALT | ACC | PKEY | MIG, [T_UD] = PKEY | QKEY,
				 [T_XI] = PORT | AV | TMO | RETRY | RNR | MAXRD | ALT | ACC | PKEY |
					  MIG,
				 [T_XT] = PORT | AV | TMO | MAXDEST | ALT | ACC | PKEY | MINRNR | MIG },
		},
	},
	[IBV_QPS_SQE] = {
		[IBV_QPS_RESET] = ALL_VALID,
		[IBV_QPS_ERR] = ALL_VALID,
		[IBV_QPS_RTS] = {
			.valid = true,
			.opt = { [T_UC] = CUR | ACC, [T_UD] = CUR | QKEY },
		},
	},
	[IBV_QPS_ERR] = {
		[IBV_QPS_RESET] = ALL_VALID,
		[IBV_QPS_ERR] = ALL_VALID,
	},
};

static int type_index(enum ibv_qp_type type)
{
	switch (type) {
	case IBV_QPT_RC:
		return T_RC;
	case IBV_QPT_UC:
		return T_UC;
	case IBV_QPT_XRC_SEND:
		return T_XI;
	case IBV_QPT_XRC_RECV:
		return T_XT;
	default:
		return T_UD;
	}
}

bool rvt_modify_qp_is_ok(int cur, int next, enum ibv_qp_type type, int mask)
{
	const struct qp_transition *t;
	int ti = type_index(type);

	if (cur < 0 || cur > IBV_QPS_ERR || next < 0 || next > IBV_QPS_ERR)
		return false;
	if ((mask & CUR) && cur != IBV_QPS_RTR && cur != IBV_QPS_RTS &&
	    cur != IBV_QPS_SQD && cur != IBV_QPS_SQE)
		return false;
	t = &qp_state_table[cur][next];
	if (!t->valid)
		return false;
	if ((mask & t->req[ti]) != t->req[ti])
		return false;
	if (mask & ~(t->req[ti] | t->opt[ti] | IBV_QP_STATE))
		return false;
	return true;
}

/* ------------------------------------------------------------------ */
/* Create                                                             */
/* ------------------------------------------------------------------ */
static uint32_t mtu_bytes(enum ibv_mtu mtu)
{
	return 128u << mtu; /* IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5 */
}

#define SUPPORTED_COMP_MASK (IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)

/*
 * qp-semantics §16.3: an XRC_SEND QP has a PD and a send CQ and no receive
 * side; an XRC_RECV QP has an XRC domain and nothing else (its receive
 * side is the SRQs of the domain, its send side the responses). What they
 * do not have is ignored, as the kernel does; rvt_qp_init_attr_drop_xrc
 * zeroes it.
 */
static int rvt_qp_chk_init_xrc(struct rvt_dev_info *rdi, const struct ibv_qp_init_attr_ex *a)
{
	if (a->qp_type == IBV_QPT_XRC_RECV) {
		if (!(a->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !a->xrcd)
			return -EINVAL;
		return 0;
	}
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || !a->send_cq)
		return -EINVAL;
	if (a->cap.max_send_sge > (uint32_t)rdi->dattr.max_sge ||
	    a->cap.max_send_wr > (uint32_t)rdi->dattr.max_qp_wr ||
	    a->cap.max_inline_data > URVT_MAX_INLINE || !a->cap.max_send_wr)
		return -EINVAL;
	return 0;
}

/* qp-semantics §4.1 C1-C6 (C5: no SMI/GSI QPs here); C7-C9 follow in rvt_create_qp.
 * rxe_qp_chk_init: nothing is allocated before it passes. */
static int rvt_qp_chk_init(struct rvt_dev_info *rdi, const struct ibv_qp_init_attr_ex *a)
{
	const struct ibv_qp_cap *cap = &a->cap;

	if (a->comp_mask & ~(SUPPORTED_COMP_MASK | IBV_QP_INIT_ATTR_CREATE_FLAGS |
			     IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
			     IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
			     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		return -EINVAL;
	/* C1: no create flags but SOURCE_QPN, and that only for the GSI QP
	 * (UD, source QPN 1): the one QP that sends and receives as QPN 1 */
	if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) {
		if (a->create_flags & ~(uint32_t)IBV_QP_CREATE_SOURCE_QPN)
			return -EOPNOTSUPP;
		if (a->qp_type != IBV_QPT_UD || a->source_qpn != URVT_GSI_QPN)
			return -EINVAL;
	}
	if (a->comp_mask & (IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE |
			    IBV_QP_INIT_ATTR_RX_HASH))
		return -EOPNOTSUPP;
	if (a->qp_type == IBV_QPT_XRC_SEND || a->qp_type == IBV_QPT_XRC_RECV)
		return rvt_qp_chk_init_xrc(rdi, a);
	if (a->comp_mask & IBV_QP_INIT_ATTR_XRCD)
		return -EINVAL;
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || !a->send_cq || !a->recv_cq)
		return -EINVAL;
	/* C2 */
	if (cap->max_send_sge > (uint32_t)rdi->dattr.max_sge ||
	    cap->max_send_wr > (uint32_t)rdi->dattr.max_qp_wr ||
	    cap->max_inline_data > URVT_MAX_INLINE)
		return -EINVAL;
	if (!a->srq) {
		/* C3, C4 */
		if (cap->max_recv_sge > (uint32_t)rdi->dattr.max_sge ||
		    cap->max_recv_wr > (uint32_t)rdi->dattr.max_qp_wr)
			return -EINVAL;
		if (!cap->max_send_sge && !cap->max_send_wr && !cap->max_recv_sge &&
		    !cap->max_recv_wr)
			return -EINVAL;
	}
	/* C6, after the cap checks as in rdmavt (qp-semantics §4.1 order) */
	if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD)
		return -EOPNOTSUPP;
	return 0;
}

static void rvt_init_qp(struct rvt_qp *qp)
{
	/* qp-semantics §4.2 / §5.4: the RESET values. */
	qp->remote_qpn = 0;
	qp->qkey = 0;
	WRITE_ONCE(qp->qp_access_flags, 0); /* post_direct reads it (lb_barrier) */
	qp->s_flags = 0;
	qp->s_head = qp->s_last = qp->s_cur = qp->s_acked = 0;
	qp->s_ssn = 1;
	qp->s_next_psn = qp->s_psn = qp->s_last_psn = qp->s_sending_psn = 0;
	qp->s_acked_psn = URVT_QPN_MASK; /* sq_psn - 1 */
	qp->s_rd_atomic_outstanding = 0;
	qp->s_pkts_since_ackreq = 0;
	qp->s_offset = 0;
	qp->local_ops_pending = 0;
	qp->r_psn = qp->r_ack_psn = qp->r_msn = 0;
	qp->r_state = qp->type == IBV_QPT_UC ? 0x22 : 0x02; /* SEND_LAST of RC/UC */
	qp->r_flags = 0;
	qp->r_nak_state = 0;
	qp->r_wrid_valid = false;
	qp->r_sent_nak = false;
	qp->r_drop_msg = false;
	qp->r_head_ack = qp->r_tail_ack = 0;
	qp->comm_est = false;
	qp->sq_draining = 0;
	/* the GSI QP always has the well-known Q_Key 0x80010000 */
	if (qp->qpn == URVT_GSI_QPN)
		qp->qkey = URVT_GSI_QKEY;
}

static bool is_gsi_create(const struct ibv_qp_init_attr_ex *a)
{
	return (a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
	       (a->create_flags & IBV_QP_CREATE_SOURCE_QPN);
}

/* QPN for a new QP: the next free one, or 1 for the (single) GSI QP. */
static int qpn_get(struct rvt_dev_info *rdi, const struct ibv_qp_init_attr_ex *a, uint32_t *qpn)
{
	bool busy = false;

	if (!is_gsi_create(a))
		return rvt_alloc_qpn(&rdi->qpn_table, qpn);
	if (!atomic_compare_exchange_strong(&rdi->gsi_busy, &busy, true))
		return -EBUSY;
	*qpn = URVT_GSI_QPN;
	return 0;
}

static void qpn_put(struct rvt_dev_info *rdi, uint32_t qpn)
{
	if (qpn == URVT_GSI_QPN)
		atomic_store(&rdi->gsi_busy, false); /* its bit stays reserved */
	else
		rvt_free_qpn(&rdi->qpn_table, qpn);
}

/*
 * What an XRC type does not have (rvt_qp_chk_init_xrc) is cleared in the
 * caller's copy of the attributes, so that the steps after see nothing of it.
 */
static void rvt_qp_init_attr_drop_xrc(struct ibv_qp_init_attr_ex *attr)
{
	if (attr->qp_type != IBV_QPT_XRC_SEND && attr->qp_type != IBV_QPT_XRC_RECV)
		return;
	memset(&attr->cap, 0, attr->qp_type == IBV_QPT_XRC_RECV ? sizeof(attr->cap) : 0);
	attr->cap.max_recv_wr = attr->cap.max_recv_sge = 0;
	attr->recv_cq = NULL;
	attr->srq = NULL;
	if (attr->qp_type == IBV_QPT_XRC_RECV) {
		attr->pd = NULL;
		attr->send_cq = NULL;
	} else {
		attr->xrcd = NULL;
	}
}

/* rxe_qp_from_init's first half: the new QP's objects, type and send ring
 * geometry, from the checked attributes. Allocates nothing. */
static void rvt_qp_from_init(struct rvt_qp *qp, struct urvt_context *uctx,
			     const struct ibv_qp_init_attr_ex *attr)
{
	uint32_t sge_slots, inline_bytes;

	qp->rdi = uctx->rdi;
	qp->uctx = uctx;
	qp->pd = attr->pd ? ibpd_to_rvtpd(attr->pd) : NULL;
	qp->send_cq = attr->send_cq ? ibcq_to_rvtcq(attr->send_cq) : NULL;
	qp->recv_cq = attr->recv_cq ? ibcq_to_rvtcq(attr->recv_cq) : NULL;
	qp->srq = attr->srq ? ibsrq_to_rvtsrq(attr->srq) : NULL;
	if (attr->qp_type == IBV_QPT_XRC_SEND || attr->qp_type == IBV_QPT_XRC_RECV) {
		qp->type = IBV_QPT_RC; /* the RC engines (struct rvt_qp) */
		qp->allowed_ops = URVT_OP_XRC_BASE;
		qp->xrcd = attr->xrcd ? ibxrcd_to_rvtxrcd(attr->xrcd) : NULL;
		atomic_store(&qp->xrc_handles, 1);
	} else {
		qp->type = attr->qp_type;
		qp->allowed_ops = attr->qp_type == IBV_QPT_RC ? 0x00 :
				  attr->qp_type == IBV_QPT_UC ? 0x20 : 0x60;
	}
	qp->sq_sig_all = attr->sq_sig_all;

	/* Send ring: power of two; one slot kept free as rxe does. */
	qp->s_size = urvt_roundup_pow2(attr->cap.max_send_wr + 1);
	qp->s_mask = qp->s_size - 1;
	qp->max_send_wr = qp->s_size - 1;
	qp->max_send_sge = attr->cap.max_send_sge;
	qp->max_inline = attr->cap.max_inline_data;
	inline_bytes = (qp->max_inline + 7) & ~7u;
	sge_slots = qp->max_send_sge ? qp->max_send_sge : 1;
	qp->s_stride = (uint32_t)((sizeof(struct rvt_swqe) + sge_slots * sizeof(struct rvt_sge) +
				   inline_bytes + URVT_CACHELINE - 1) & ~(size_t)(URVT_CACHELINE - 1));
	/* only a parent domain is kept (its allocators, its count): an
	 * imported PD's struct may be unimported before the QP goes */
	qp->domain = attr->pd && ibpd_to_domain(attr->pd)->parent ? ibpd_to_domain(attr->pd) : NULL;
}

/* The responder's SGE list and ACK queue, and the receive queue unless an SRQ. */
static void rvt_qp_free_rq(struct rvt_qp *qp)
{
	free(qp->r_sg_list);
	free(qp->r_ack_queue);
	if (!qp->srq)
		rvt_rq_fini(&qp->rq);
}

/*
 * The QP's queues and buffers: send ring (and UD's AV slots), receive
 * queue unless an SRQ, responder SGE list and ACK queue, the transport's
 * per-QP state (rdmavt qp_priv_alloc). Returns 0, or -ENOMEM with nothing
 * left allocated.
 */
static int rvt_qp_alloc_queues(struct rvt_qp *qp, const struct ibv_qp_init_attr_ex *attr)
{
	struct rvt_dev_info *rdi = qp->rdi;
	int ret = -ENOMEM;

	qp->s_wq = rvt_buf_alloc(qp->domain, qp->s_size, qp->s_stride, RVT_RES_TYPE_QP,
				 &qp->s_wq_custom);
	if (!qp->s_wq)
		return -ENOMEM;
	if (qp->type == IBV_QPT_UD) {
		qp->s_ud_av = calloc(qp->s_size, sizeof(*qp->s_ud_av));
		if (!qp->s_ud_av)
			goto err_swq;
	}
	if (!qp->srq) {
		qp->max_recv_sge = attr->cap.max_recv_sge;
		ret = rvt_rq_init(&qp->rq, attr->cap.max_recv_wr, attr->cap.max_recv_sge,
				  qp->domain, RVT_RES_TYPE_QP);
		if (ret)
			goto err_udav;
		qp->r_max_sge = qp->max_recv_sge;
	} else {
		qp->r_max_sge = qp->srq->rq.max_sge;
	}
	/* an XRC target takes each message's WQE from the SRQ its packet
	 * names (qp-semantics §16.4): any SRQ's SGEs must fit */
	if (qp->xrcd)
		qp->r_max_sge = URVT_MAX_SGE;
	qp->r_sg_list = calloc(qp->r_max_sge ? qp->r_max_sge : 1, sizeof(*qp->r_sg_list));
	qp->r_ack_queue = calloc(URVT_MAX_RD_ATOMIC + 1, sizeof(*qp->r_ack_queue));
	ret = -ENOMEM;
	if (!qp->r_sg_list || !qp->r_ack_queue)
		goto err_rq;
	if (rdi->transport && rdi->transport->qp_priv_alloc) {
		qp->priv = rdi->transport->qp_priv_alloc(qp);
		if (!qp->priv)
			goto err_rq;
	}
	return 0;

err_rq:
	rvt_qp_free_rq(qp);
err_udav:
	free(qp->s_ud_av);
err_swq:
	rvt_buf_free(qp->domain, qp->s_wq, RVT_RES_TYPE_QP, qp->s_wq_custom);
	return ret;
}

/* Undoes rvt_qp_alloc_queues. */
static void rvt_qp_free_queues(struct rvt_qp *qp)
{
	if (qp->priv)
		qp->rdi->transport->qp_priv_free(qp, qp->priv);
	rvt_qp_free_rq(qp);
	free(qp->s_ud_av);
	rvt_buf_free(qp->domain, qp->s_wq, RVT_RES_TYPE_QP, qp->s_wq_custom);
}

/* The locks, timers and RESET values of a QP whose QPN is taken. */
static void rvt_qp_init_state(struct rvt_qp *qp)
{
	pthread_mutex_init(&qp->state_lock, NULL);
	urvt_bias_init(&qp->s_hlock);
	urvt_bias_init(&qp->r_lock);
	/* both only set a flag and schedule the engine: a busy poller may
	 * run them (base/progress.h urvt_progress_set_poller) */
	urvt_timer_init_pollable(&qp->s_timer, rvt_retry_timer_fn);
	urvt_timer_init_pollable(&qp->s_rnr_timer, rvt_rnr_timer_fn);
	urvt_work_init(&qp->s_work, rvt_send_work_fn);
	atomic_store(&qp->state, IBV_QPS_RESET);
	qp->port_num = 1;
	qp->pmtu = mtu_bytes(qp->rdi->port_attr.active_mtu);
	qp->path_mtu = qp->rdi->port_attr.active_mtu;
	qp->path_mig_state = IBV_MIG_MIGRATED;
	rvt_init_qp(qp);
}

/*
 * The finished QP: its capabilities back to the caller, its ibv_qp filled,
 * references on the objects it uses, then live (refcount 1) and listed.
 * Lookups may take references once it is published (RESET -> INIT).
 */
static void rvt_qp_publish(struct rvt_qp *qp, const struct ibv_qp_init_attr_ex *attr,
			   struct ibv_qp_init_attr_ex *user_attr)
{
	struct ibv_qp *ibqp = &qp->ibqp_ex.qp_base;

	qp->cap.max_send_wr = qp->max_send_wr;
	qp->cap.max_send_sge = qp->max_send_sge;
	qp->cap.max_inline_data = qp->max_inline;
	qp->cap.max_recv_wr = qp->srq ? 0 : qp->rq.size - 1;
	qp->cap.max_recv_sge = qp->srq ? 0 : qp->max_recv_sge;
	user_attr->cap = qp->cap;

	ibqp->context = &qp->uctx->vctx.context;
	ibqp->qp_context = attr->qp_context;
	ibqp->pd = attr->pd;
	ibqp->send_cq = attr->send_cq;
	ibqp->recv_cq = attr->recv_cq;
	ibqp->srq = attr->srq;
	ibqp->qp_num = qp->qpn;
	ibqp->state = IBV_QPS_RESET;
	ibqp->qp_type = attr->qp_type;
	pthread_mutex_init(&ibqp->mutex, NULL);
	pthread_cond_init(&ibqp->cond, NULL);

	if (qp->pd)
		atomic_fetch_add(&qp->pd->usecnt, 1);
	if (qp->send_cq) {
		atomic_fetch_add(&qp->send_cq->usecnt, 1);
		if (qp->type == IBV_QPT_UD)
			atomic_fetch_add(&qp->send_cq->ud_send_uses, 1);
	}
	if (qp->recv_cq)
		atomic_fetch_add(&qp->recv_cq->usecnt, 1);
	if (qp->srq)
		atomic_fetch_add(&qp->srq->usecnt, 1);
	rvt_domain_get(qp->domain);
	if (qp->xrcd)
		atomic_fetch_add(&qp->xrcd->usecnt, 1);
	atomic_store_explicit(&qp->refcount, 1, memory_order_release);
	rvt_qp_all_add(&qp->rdi->qp_table, qp);
}

struct rvt_qp *rvt_create_qp(struct urvt_context *uctx, struct ibv_qp_init_attr_ex *user_attr,
			     int *err)
{
	/* a copy: what an XRC type does not have is cleared in it, not in
	 * the caller's */
	struct ibv_qp_init_attr_ex copy = *user_attr, *attr = &copy;
	struct rvt_dev_info *rdi = uctx->rdi;
	struct rvt_qp *qp;
	int ret;

	ret = rvt_qp_chk_init(rdi, attr);
	if (ret)
		goto err;
	rvt_qp_init_attr_drop_xrc(attr);
	qp = rvt_qp_struct_alloc(&rdi->qp_table);
	if (!qp) {
		ret = -ENOMEM;
		goto err;
	}
	/* The refcount stays untouched: a racing lookup may be probing it. */
	memset(qp, 0, offsetof(struct rvt_qp, refcount));
	qp->next_free = NULL;
	rvt_qp_from_init(qp, uctx, attr);
	ret = rvt_qp_alloc_queues(qp, attr);
	if (ret)
		goto err_struct;
	/* C8b, then C9 last */
	ret = qpn_get(rdi, attr, &qp->qpn);
	if (ret)
		goto err_queues;
	if (atomic_fetch_add(&rdi->n_qps, 1) >= (int)rdi->dattr.max_qp) {
		ret = -ENOMEM;
		goto err_count;
	}
	rvt_qp_init_state(qp);
	rvt_qp_publish(qp, attr, user_attr);
	return qp;

err_count:
	atomic_fetch_sub(&rdi->n_qps, 1);
	qpn_put(rdi, qp->qpn);
err_queues:
	rvt_qp_free_queues(qp);
err_struct:
	rvt_qp_struct_free(&rdi->qp_table, qp);
err:
	*err = ret;
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Reset, error                                                       */
/* ------------------------------------------------------------------ */

/* Wait until no thread runs this QP's send engine. */
static void wait_send_idle(struct rvt_qp *qp)
{
	while (atomic_load_explicit(&qp->s_sched, memory_order_acquire))
		sched_yield();
}

/* Drop the MR references of every send WQE still in the ring. */
static void drop_send_wqes(struct rvt_qp *qp)
{
	for (uint32_t i = qp->s_last; i != qp->s_head; i++) {
		struct rvt_swqe *wqe = rvt_get_swqe_ptr(qp, i);
		rvt_put_swqe(wqe);
	}
}

/*
 * The loopback peer cache. A QP that sends to another QP of this process
 * keeps a pointer to it (lb_peer) from modify on, so post_direct needs no
 * QPN lookup and no reference get/put per WR. The pointer holds no
 * reference; instead every QP lists the QPs caching it (lb_cachers), and
 * its destroy clears their lb_peer (lb_evict) before the structure can be
 * recycled. post_direct reads lb_peer under the sender's s_hlock, which
 * every writer takes, so a peer it holds cannot be evicted under it.
 * Lock order: state_lock, qp_table.lb_lock, s_hlock.
 */
static void lb_set(struct rvt_qp *qp, struct rvt_qp *peer)
{
	urvt_bias_lock(&qp->s_hlock);
	WRITE_ONCE(qp->lb_peer, peer);
	urvt_bias_unlock(&qp->s_hlock);
}

/* Caller holds lb_lock. */
static void lb_unlink(struct rvt_qp *qp)
{
	struct rvt_qp *peer = qp->lb_peer, **pp;

	if (!peer)
		return;
	for (pp = &peer->lb_cachers; *pp; pp = &(*pp)->lb_next) {
		if (*pp == qp) {
			*pp = qp->lb_next;
			break;
		}
	}
	qp->lb_next = NULL;
	lb_set(qp, NULL);
}

/* After modify (state_lock held, no spinlock): cache the peer, or drop it. */
static void lb_cache(struct rvt_qp *qp)
{
	struct rvt_qp_table *t = &qp->rdi->qp_table;
	struct rvt_qp *peer = NULL;
	int state = rvt_qp_state(qp);

	if (qp->lb_direct &&
	    (state == IBV_QPS_RTR || state == IBV_QPS_RTS || state == IBV_QPS_SQD)) {
		peer = rvt_lookup_qpn(qp->rdi, qp->remote_qpn);
		/* another type there: the engine's path (it drops the WR) */
		if (peer && peer->type != qp->type) {
			rvt_put_qp(peer);
			peer = NULL;
		}
	}
	if (peer == READ_ONCE(qp->lb_peer)) {
		/* nothing to change (a peer found holds on to its place) */
		if (peer)
			rvt_put_qp(peer);
		return;
	}
	/* The reference keeps the peer's destroy (lb_evict) from passing
	 * its reset until it is listed. */
	pthread_mutex_lock(&t->lb_lock);
	lb_unlink(qp);
	if (peer) {
		qp->lb_next = peer->lb_cachers;
		peer->lb_cachers = qp;
		lb_set(qp, peer);
	}
	pthread_mutex_unlock(&t->lb_lock);
	if (peer)
		rvt_put_qp(peer);
}

/*
 * After a modify of qp: every post_direct into qp that read its state or
 * access flags before the change has finished (it holds its sender's
 * s_hlock from those reads to the end of its copy, post.c), so no WRITE
 * checked against the old attributes lands after the modify returns.
 */
static void lb_barrier(struct rvt_qp *qp)
{
	struct rvt_qp_table *t = &qp->rdi->qp_table;

	pthread_mutex_lock(&t->lb_lock);
	if (qp->lb_cachers)
		urvt_bias_fence(); /* for the senders' fast owners, none revoked */
	for (struct rvt_qp *s = qp->lb_cachers; s; s = s->lb_next)
		rvt_direct_wait(s);
	pthread_mutex_unlock(&t->lb_lock);
}

/* Destroy, after reset: no QP may keep a pointer to this one. */
static void lb_evict(struct rvt_qp *qp)
{
	struct rvt_qp_table *t = &qp->rdi->qp_table;
	struct rvt_qp *s;

	pthread_mutex_lock(&t->lb_lock);
	while ((s = qp->lb_cachers)) {
		qp->lb_cachers = s->lb_next;
		s->lb_next = NULL;
		lb_set(s, NULL);
	}
	pthread_mutex_unlock(&t->lb_lock);
}

/*
 * _rvt_reset_qp (qp-semantics §5.4): stop everything, withdraw the QP
 * from lookups, discard both queues without completions. Caller holds
 * state_lock and no spinlock.
 */
static void rvt_reset_qp(struct rvt_qp *qp)
{
	struct urvt_progress *p = qp->rdi->progress;

	/* Its own peer cache goes (modify to RTR/RTS makes a new one). */
	if (READ_ONCE(qp->lb_peer)) {
		pthread_mutex_lock(&qp->rdi->qp_table.lb_lock);
		lb_unlink(qp);
		pthread_mutex_unlock(&qp->rdi->qp_table.lb_lock);
	}
	if (rvt_qp_state(qp) != IBV_QPS_RESET) {
		/* 1. Everyone that looks at the state from now on backs off. */
		urvt_bias_lock(&qp->r_lock);
		atomic_store_explicit(&qp->state, IBV_QPS_RESET, memory_order_release);
		urvt_bias_unlock(&qp->r_lock);
		/* 2. Engines and timer handlers already past their state check. */
		wait_send_idle(qp);
		urvt_timer_del_sync(p, &qp->s_timer);
		urvt_timer_del_sync(p, &qp->s_rnr_timer);
		urvt_progress_cancel_work_sync(p, &qp->s_work);
		wait_send_idle(qp);
		/* 3. No new lookups; wait for in-flight ones (packets, loopback). */
		rvt_qp_table_remove(&qp->rdi->qp_table, qp);
		while (atomic_load_explicit(&qp->refcount, memory_order_acquire) > 1)
			sched_yield();
		/* 3b. the transport's queued packets and per-QP state */
		if (qp->rdi->transport && qp->rdi->transport->qp_reset)
			qp->rdi->transport->qp_reset(qp);
		/* 4. Discard the send WQEs and the responder's references. */
		urvt_bias_lock(&qp->s_hlock);
		drop_send_wqes(qp);
		urvt_bias_unlock(&qp->s_hlock);
		urvt_bias_lock(&qp->r_lock);
		rvt_release_rsge(qp);
		urvt_bias_unlock(&qp->r_lock);
		/* 5. Its completions still in the CQs go too, flushes
		 * included: nothing of this life is polled in the next one
		 * (as mlx4/mlx5 clean their CQs; docs/deviations.md). */
		if (qp->send_cq) /* an XRC target has none: its SRQs' CQs are shared */
			rvt_cq_clean(qp->send_cq, qp->qpn);
		if (qp->recv_cq && qp->recv_cq != qp->send_cq)
			rvt_cq_clean(qp->recv_cq, qp->qpn);
	}
	/* Reinitialise (always). Posted receives are dropped (qp-semantics §5.4). */
	urvt_bias_lock(&qp->s_hlock);
	urvt_bias_lock(&qp->r_lock);
	rvt_init_qp(qp);
	if (!qp->srq) {
		urvt_bias_lock(&qp->rq.c_lock);
		urvt_bias_lock(&qp->rq.p_lock);
		qp->rq.head = qp->rq.tail = 0;
		urvt_bias_unlock(&qp->rq.p_lock);
		urvt_bias_unlock(&qp->rq.c_lock);
	}
	urvt_bias_unlock(&qp->r_lock);
	urvt_bias_unlock(&qp->s_hlock);
}

/* Flush every posted receive WQE with WR_FLUSH_ERR; caller holds r_lock. */
static void flush_rq(struct rvt_qp *qp)
{
	struct rvt_rq *rq = &qp->rq;
	struct ibv_wc wc = {
		.status = IBV_WC_WR_FLUSH_ERR,
		.opcode = IBV_WC_RECV,
		.qp_num = qp->qpn,
	};

	urvt_bias_lock(&rq->c_lock);
	/* p_lock too: a post_recv that saw a non-ERR state has finished
	 * queueing, and one that comes later sees ERR (rvt_post_recv). */
	urvt_bias_lock(&rq->p_lock);
	while (rq->tail != rq->head) {
		wc.wr_id = rvt_get_rwqe_ptr(rq, rq->tail)->wr_id;
		store_release(&rq->tail, rq->tail + 1);
		rvt_cq_enter(qp->recv_cq, &wc, true);
	}
	urvt_bias_unlock(&rq->p_lock);
	urvt_bias_unlock(&rq->c_lock);
}

/*
 * rvt_error_qp (qp-semantics §5.5). Caller holds qp->r_lock. Returns
 * true if IBV_EVENT_QP_LAST_WQE_REACHED should be raised (SRQ QPs).
 */
bool rvt_error_qp_locked(struct rvt_qp *qp, enum ibv_wc_status err)
{
	int state = rvt_qp_state(qp);

	if (state == IBV_QPS_ERR || state == IBV_QPS_RESET)
		return false;
	atomic_store_explicit(&qp->state, IBV_QPS_ERR, memory_order_release);
	urvt_timer_del(qp->rdi->progress, &qp->s_timer);
	urvt_timer_del(qp->rdi->progress, &qp->s_rnr_timer);
	/* 3. The send engine flushes the send queue (not from here: we may be
	 * inside another QP's engine). */
	urvt_progress_queue_work(qp->rdi->progress, &qp->s_work);
	/* 4./5. a receive in progress completes with the cause */
	if (qp->r_wrid_valid) {
		struct ibv_wc wc = {
			.wr_id = qp->r_wr_id,
			.status = err,
			.opcode = IBV_WC_RECV,
			.qp_num = qp->qpn,
		};
		rvt_release_rsge(qp);
		qp->r_wrid_valid = false;
		/* an XRC target between two packets has no CQ: the SRQ's WQE
		 * goes without a completion (docs/deviations.md) */
		if (qp->recv_cq)
			rvt_cq_enter(qp->recv_cq, &wc, true);
	}
	/* a WRITE in progress lets go of its target: no packet is taken in
	 * ERR, and reset forgets the rest (transport qp_reset) */
	rvt_put_sge(&qp->r_rdma_sge);
	/* 6./7. */
	if (!qp->srq) {
		flush_rq(qp);
		return false;
	}
	return true;
}

void rvt_error_qp(struct rvt_qp *qp, enum ibv_wc_status err)
{
	bool lastwqe;

	urvt_bias_lock(&qp->r_lock);
	lastwqe = rvt_error_qp_locked(qp, err);
	urvt_bias_unlock(&qp->r_lock);
	if (lastwqe)
		urvt_dispatch_async_event(qp->uctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp);
}

/* The segment in use or one after it belongs to mr. */
static bool ss_has_mr(const struct rvt_sge_state *ss, const struct rvt_mregion *mr)
{
	if (!ss->num_sge)
		return false;
	if (ss->sge.mr == mr)
		return true;
	for (uint32_t i = 0; i + 1 < ss->num_sge; i++)
		if (ss->sg_list[i].mr == mr)
			return true;
	return false;
}

/*
 * A posted, unretired send WQE gathers from mr. s_hlock holds the posters
 * off; the engine may retire a WQE meanwhile, and its put clears the
 * segment's mr with a relaxed store (keys.h rvt_put_sge) that this loads:
 * a WQE retired under our eyes reads NULL or mr, never a torn pointer.
 */
static bool sends_have_mr(struct rvt_qp *qp, const struct rvt_mregion *mr)
{
	bool found = false;

	if (rvt_batch_is_mine(qp))
		return false;
	urvt_bias_lock(&qp->s_hlock);
	for (uint32_t n = load_acquire(&qp->s_last); !found && n != qp->s_head; n++) {
		struct rvt_swqe *wqe = rvt_get_swqe_ptr(qp, n);

		if (__atomic_load_n(&wqe->wqe_flags, __ATOMIC_RELAXED) & RVT_SWQE_INLINE)
			continue;
		for (uint32_t i = 0; !found && i < wqe->num_sge; i++)
			found = __atomic_load_n(&wqe->sg_list[i].mr, __ATOMIC_RELAXED) == mr;
	}
	urvt_bias_unlock(&qp->s_hlock);
	return found;
}

/*
 * rvt_qp_mr_clean (qp-semantics §5.5): an MR being deregistered while a QP
 * still uses it (a receive in progress, a WRITE's target, a send WQE) puts
 * that QP in ERR with IBV_WC_LOC_PROT_ERR, which drops the references, so
 * the dereg can finish instead of leaving the region reachable. SMI and
 * GSI are left alone, as in rdmavt: the dereg waits for them.
 */
void rvt_qp_mr_clean(struct rvt_qp *qp, const struct rvt_mregion *mr)
{
	bool sends, lastwqe = false;

	if (qp->qpn <= 1)
		return;
	sends = sends_have_mr(qp, mr);
	urvt_bias_lock(&qp->r_lock);
	if (sends || (qp->r_wrid_valid && ss_has_mr(&qp->r_sge, mr)) || qp->r_rdma_sge.mr == mr)
		lastwqe = rvt_error_qp_locked(qp, IBV_WC_LOC_PROT_ERR);
	urvt_bias_unlock(&qp->r_lock);
	if (lastwqe)
		urvt_dispatch_async_event(qp->uctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp);
}

/* ------------------------------------------------------------------ */
/* Modify                                                             */
/* ------------------------------------------------------------------ */
static int rvt_qp_chk_mig(struct rvt_qp *qp, const struct ibv_qp_attr *attr, int new_state)
{
	switch (attr->path_mig_state) {
	case IBV_MIG_REARM:
		if (qp->path_mig_state == IBV_MIG_ARMED || new_state != IBV_QPS_RTS)
			return -EINVAL;
		return 0;
	case IBV_MIG_MIGRATED:
		if (qp->path_mig_state == IBV_MIG_REARM ||
		    (new_state != IBV_QPS_RTS && new_state != IBV_QPS_SQD))
			return -EINVAL;
		return 0;
	default:
		return -EINVAL;
	}
}

#define RVT_KNOWN_QP_MASK ((1 << 21) - 1)

/*
 * rxe_qp_chk_attr (qp-semantics §5.1 steps 4-5): the transition in the
 * state table, then rdmavt's checks of the attributes given (plus the
 * device limits it leaves out). *av is the path of IBV_QP_AV, resolved
 * here. Caller holds state_lock. Returns 0 or -EINVAL.
 */
static int rvt_qp_chk_attr(struct rvt_qp *qp, const struct ibv_qp_attr *attr, int attr_mask,
			   int cur, int next, struct urvt_av *av)
{
	struct rvt_dev_info *rdi = qp->rdi;

	/* 4. the state table */
	if (!rvt_modify_qp_is_ok(cur, next, qp->ibqp_ex.qp_base.qp_type, attr_mask))
		return -EINVAL;
	/* 5. rdmavt's extra checks (plus the device limits it leaves out) */
	if (attr_mask & IBV_QP_AV) {
		uint32_t dqpn = attr_mask & IBV_QP_DEST_QPN ? attr->dest_qp_num : qp->remote_qpn;
		if (rvt_av_from_attr(rdi, &attr->ah_attr, av, dqpn))
			return -EINVAL;
		/* XRC has no in-process path: to a QP of this process too it
		 * goes over a link (qp-semantics §16.5) */
		if (rvt_qp_is_xrc(qp) && av->loopback)
			rvt_av_via_link(rdi, av);
	}
	if (attr_mask & IBV_QP_ALT_PATH)
		return -EINVAL; /* no alternate paths on a RoCE port */
	if ((attr_mask & IBV_QP_PKEY_INDEX) && attr->pkey_index >= URVT_PKEY_TABLE_LEN)
		return -EINVAL;
	if ((attr_mask & IBV_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31)
		return -EINVAL;
	if ((attr_mask & IBV_QP_PORT) &&
	    (attr->port_num == 0 || attr->port_num > URVT_PORT_COUNT))
		return -EINVAL;
	if ((attr_mask & IBV_QP_DEST_QPN) && attr->dest_qp_num > URVT_QPN_MASK)
		return -EINVAL;
	if ((attr_mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7)
		return -EINVAL;
	if ((attr_mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7)
		return -EINVAL;
	if ((attr_mask & IBV_QP_PATH_MTU) &&
	    (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096))
		return -EINVAL;
	if ((attr_mask & IBV_QP_PATH_MIG_STATE) && rvt_qp_chk_mig(qp, attr, next))
		return -EINVAL;
	if ((attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC) &&
	    attr->max_dest_rd_atomic > rdi->dattr.max_qp_rd_atom)
		return -EINVAL;
	/* rdmavt leaves this unchecked; rxe checks it. urvt enforces the limit
	 * it reports (max_qp_init_rd_atom). */
	if ((attr_mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
	    attr->max_rd_atomic > rdi->dattr.max_qp_init_rd_atom)
		return -EINVAL;
	/* ACCESS_FLAGS, QKEY, TIMEOUT, the PSNs: stored as given (qp-semantics §5.1). */
	return 0;
}

/*
 * rxe_qp_from_attr (step 7, first half): store the checked attributes.
 * Caller holds s_hlock and r_lock; the engines read them only after an
 * acquire of a state that lets them run (rvt_qp_publish_state).
 */
static void rvt_qp_from_attr(struct rvt_qp *qp, const struct ibv_qp_attr *attr, int attr_mask,
			     const struct urvt_av *av)
{
	struct rvt_dev_info *rdi = qp->rdi;

	if (attr_mask & IBV_QP_PKEY_INDEX)
		qp->pkey_index = attr->pkey_index;
	if (attr_mask & IBV_QP_PORT)
		qp->port_num = attr->port_num;
	if (attr_mask & IBV_QP_DEST_QPN)
		qp->remote_qpn = attr->dest_qp_num;
	if (attr_mask & IBV_QP_SQ_PSN) {
		qp->s_next_psn = qp->s_psn = qp->s_sending_psn = attr->sq_psn & URVT_QPN_MASK;
		qp->s_last_psn = qp->s_acked_psn = (attr->sq_psn - 1) & URVT_QPN_MASK;
	}
	if (attr_mask & IBV_QP_RQ_PSN)
		qp->r_psn = qp->r_ack_psn = attr->rq_psn & URVT_QPN_MASK;
	if (attr_mask & IBV_QP_ACCESS_FLAGS)
		WRITE_ONCE(qp->qp_access_flags, (int)attr->qp_access_flags); /* post_direct */
	if (attr_mask & IBV_QP_AV)
		qp->remote_av = *av;
	if (attr_mask & IBV_QP_PATH_MIG_STATE)
		qp->path_mig_state = attr->path_mig_state;
	if (attr_mask & IBV_QP_PATH_MTU) {
		enum ibv_mtu m = attr->path_mtu < rdi->port_attr.active_mtu ?
					 attr->path_mtu : rdi->port_attr.active_mtu;
		qp->path_mtu = m;
		qp->pmtu = mtu_bytes(m);
	}
	if (attr_mask & IBV_QP_RETRY_CNT)
		qp->retry_cnt = qp->s_retry = attr->retry_cnt;
	if (attr_mask & IBV_QP_RNR_RETRY)
		qp->rnr_retry = qp->s_rnr_retry = attr->rnr_retry;
	if (attr_mask & IBV_QP_MIN_RNR_TIMER)
		qp->min_rnr_timer = attr->min_rnr_timer;
	if (attr_mask & IBV_QP_TIMEOUT) {
		/* stored as given (query reports it, qp-semantics §6.2), clamped
		 * to 31 for the timer only (qp-semantics §5.1); 4.096 us << timeout,
		 * 0 = no retransmit timer (IBTA/rxe) */
		qp->timeout = attr->timeout;
		qp->timeout_ns = attr->timeout ? 4096ull << (attr->timeout > 31 ? 31 : attr->timeout) : 0;
	}
	if (attr_mask & IBV_QP_QKEY)
		qp->qkey = attr->qkey;
	if (attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		qp->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (attr_mask & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->max_rd_atomic = attr->max_rd_atomic;
	/* the same test as rvt_do_send's for the loopback engine */
	qp->lb_direct = qp->type != IBV_QPT_UD && (qp->remote_av.loopback || !rdi->transport) &&
			qp->max_send_wr && qp->max_send_sge;
	qp->ud_direct = qp->type == IBV_QPT_UD && rdi->transport && rdi->transport->ud_send_direct;
}

/*
 * Step 7, second half: the new state, stored with release after the
 * attributes. Caller holds s_hlock and r_lock. Sets *lastwqe when ERR must
 * raise IBV_EVENT_QP_LAST_WQE_REACHED; returns true when the send engine
 * must run (to flush in ERR, or to resume SQD -> RTS).
 */
static bool rvt_qp_publish_state(struct rvt_qp *qp, int cur, int next, bool *lastwqe)
{
	switch (next) {
	case IBV_QPS_RESET:
		return false;
	case IBV_QPS_RTR:
		qp->comm_est = false;
		atomic_store_explicit(&qp->state, next, memory_order_release);
		return false;
	case IBV_QPS_SQD:
		/* the engine moves s_last/s_cur concurrently (atomic reads) */
		WRITE_ONCE(qp->sq_draining, load_acquire(&qp->s_last) != qp->s_head &&
						    READ_ONCE(qp->s_cur) != load_acquire(&qp->s_last));
		atomic_store_explicit(&qp->state, next, memory_order_release);
		return false;
	case IBV_QPS_ERR:
		*lastwqe = rvt_error_qp_locked(qp, IBV_WC_WR_FLUSH_ERR);
		return true;
	default:
		atomic_store_explicit(&qp->state, next, memory_order_release);
		/* SQD -> RTS resumes a queue that was held */
		return next == IBV_QPS_RTS && cur == IBV_QPS_SQD;
	}
}

int rvt_modify_qp(struct rvt_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct urvt_av av;
	int cur, next, ret = 0;
	bool lastwqe = false, run_engine;

	/* 1. (v6.x) bits past DEST_QPN, e.g. RATE_LIMIT */
	if (attr_mask & ~RVT_KNOWN_QP_MASK)
		return -EOPNOTSUPP;
	pthread_mutex_lock(&qp->state_lock);
	cur = (attr_mask & IBV_QP_CUR_STATE) ? (int)attr->cur_qp_state : rvt_qp_state(qp);
	next = (attr_mask & IBV_QP_STATE) ? (int)attr->qp_state : cur;
	/* 4.-5. */
	if (rvt_qp_chk_attr(qp, attr, attr_mask, cur, next, &av)) {
		pthread_mutex_unlock(&qp->state_lock);
		return -EINVAL;
	}

	/* 6. state actions that must run unlocked (reset waits for engines) */
	if (next == IBV_QPS_RESET)
		rvt_reset_qp(qp); /* RESET -> RESET reinitialises too (qp-semantics §5.4) */

	/* 7. apply the attributes, then the new state */
	urvt_bias_lock(&qp->s_hlock);
	urvt_bias_lock(&qp->r_lock);
	rvt_qp_from_attr(qp, attr, attr_mask, &av);
	run_engine = rvt_qp_publish_state(qp, cur, next, &lastwqe);
	urvt_bias_unlock(&qp->r_lock);
	urvt_bias_unlock(&qp->s_hlock);

	/* 8. RESET -> INIT publishes the QP for lookups by QPN. */
	if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT)
		ret = rvt_qp_table_insert(&qp->rdi->qp_table, qp);
	/* 8b. the loopback peer, for post_direct; and the senders that
	 * cache this QP see its new state and access flags */
	lb_cache(qp);
	lb_barrier(qp);
	pthread_mutex_unlock(&qp->state_lock);

	/* 9. */
	if (lastwqe)
		urvt_dispatch_async_event(qp->uctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp);
	if (run_engine)
		rvt_schedule_send(qp);
	return ret;
}

int rvt_query_qp(struct rvt_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	(void)attr_mask; /* rdmavt ignores it and fills everything */
	pthread_mutex_lock(&qp->state_lock);
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = (enum ibv_qp_state)rvt_qp_state(qp);
	attr->cur_qp_state = attr->qp_state;
	attr->path_mtu = qp->path_mtu;
	attr->path_mig_state = qp->path_mig_state;
	attr->qkey = qp->qkey;
	/* the PSNs move under their locks (post_send: s_hlock, responder:
	 * r_lock) while query runs; take them for the read */
	urvt_bias_lock(&qp->r_lock);
	attr->rq_psn = qp->r_psn & URVT_QPN_MASK;
	urvt_bias_unlock(&qp->r_lock);
	urvt_bias_lock(&qp->s_hlock);
	attr->sq_psn = qp->s_next_psn & URVT_QPN_MASK;
	urvt_bias_unlock(&qp->s_hlock);
	attr->dest_qp_num = qp->remote_qpn;
	attr->qp_access_flags = (unsigned int)qp->qp_access_flags;
	attr->cap = qp->cap;
	attr->ah_attr = qp->remote_av.attr;
	attr->pkey_index = qp->pkey_index;
	attr->en_sqd_async_notify = 0;
	attr->sq_draining = rvt_qp_state(qp) == IBV_QPS_SQD && READ_ONCE(qp->s_cur) != READ_ONCE(qp->s_last);
	attr->max_rd_atomic = qp->max_rd_atomic;
	attr->max_dest_rd_atomic = qp->max_dest_rd_atomic;
	attr->min_rnr_timer = qp->min_rnr_timer;
	attr->port_num = qp->port_num;
	attr->timeout = qp->timeout;
	attr->retry_cnt = qp->retry_cnt;
	attr->rnr_retry = qp->rnr_retry;
	if (init_attr) {
		memset(init_attr, 0, sizeof(*init_attr));
		init_attr->qp_context = qp->ibqp_ex.qp_base.qp_context;
		init_attr->send_cq = qp->ibqp_ex.qp_base.send_cq;
		init_attr->recv_cq = qp->ibqp_ex.qp_base.recv_cq;
		init_attr->srq = qp->ibqp_ex.qp_base.srq;
		init_attr->cap = qp->cap;
		init_attr->qp_type = qp->ibqp_ex.qp_base.qp_type;
		init_attr->sq_sig_all = qp->sq_sig_all;
	}
	pthread_mutex_unlock(&qp->state_lock);
	return 0;
}

/* rdmavt rvt_destroy_qp: legal in any state, even with traffic in flight. */
int rvt_destroy_qp(struct rvt_qp *qp)
{
	struct rvt_dev_info *rdi = qp->rdi;
	uint32_t one = 1;

	/* off its multicast groups first: no delivery takes a new reference */
	rvt_mcast_detach_all(qp);
	pthread_mutex_lock(&qp->state_lock);
	rvt_reset_qp(qp);
	pthread_mutex_unlock(&qp->state_lock);
	/* Out of the table since the reset: no QP can cache it any more. */
	lb_evict(qp);
	/* Reset: no new events. Unread ones go, as the kernel drops them; the
	 * structure may be recycled for another QP. */
	urvt_cancel_async_events(qp->uctx, qp);
	/* Drop the owner's reference last; lookups already fail (not in the
	 * table), so only short-lived holders can still be draining. */
	while (!atomic_compare_exchange_weak(&qp->refcount, &one, 0)) {
		one = 1;
		sched_yield();
	}
	qpn_put(rdi, qp->qpn);
	atomic_fetch_sub(&rdi->n_qps, 1);
	if (qp->pd)
		atomic_fetch_sub(&qp->pd->usecnt, 1);
	if (qp->send_cq) {
		if (qp->type == IBV_QPT_UD)
			atomic_fetch_sub(&qp->send_cq->ud_send_uses, 1);
		atomic_fetch_sub(&qp->send_cq->usecnt, 1);
	}
	if (qp->recv_cq)
		atomic_fetch_sub(&qp->recv_cq->usecnt, 1);
	if (qp->xrcd)
		atomic_fetch_sub(&qp->xrcd->usecnt, 1);
	if (qp->srq)
		atomic_fetch_sub(&qp->srq->usecnt, 1);
	else
		rvt_rq_fini(&qp->rq);
	/* off the MR barrier's list before s_hlock and the structure go */
	rvt_qp_all_del(&rdi->qp_table, qp);
	urvt_spin_destroy(&qp->r_lock.lock);
	pthread_mutex_destroy(&qp->state_lock);
	pthread_mutex_destroy(&qp->ibqp_ex.qp_base.mutex);
	pthread_cond_destroy(&qp->ibqp_ex.qp_base.cond);
	rvt_buf_free(qp->domain, qp->s_wq, RVT_RES_TYPE_QP, qp->s_wq_custom);
	rvt_domain_put(qp->domain);
	free(qp->s_ud_av);
	free(qp->r_sg_list);
	free(qp->r_ack_queue);
	if (qp->priv)
		rdi->transport->qp_priv_free(qp, qp->priv);
	qp->priv = NULL;
	rvt_qp_struct_free(&rdi->qp_table, qp);
	return 0;
}
