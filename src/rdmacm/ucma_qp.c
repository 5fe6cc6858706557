/*
 * The application's QPs, CQs and SRQs through the librdmacm API
 * (ucma_priv.h; librdmacm's cma.c): rdma_create_qp and friends, their CQs
 * and completion channels, ECE, and the QP state changes a connection
 * makes (librdmacm's ucma_modify_qp_*), with the attributes cma.c computes.
 */
#include "rdmacm/ucma_priv.h"

#include <stdlib.h>
#include <rdma/rdma_verbs.h>
#include <string.h>

/* The connection's attributes for state (cma_init_qp_attr) into a, mask. */
static int ucma_conn_qp_attr(struct rdma_id_private *p, enum ibv_qp_state state,
			     struct ibv_qp_attr *a, int *mask)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = state;
	return cma_init_qp_attr(p, a, mask);
}

int ucma_modify_qp_rtr(struct rdma_id_private *p, uint8_t resp_res)
{
	struct ibv_qp_attr a;
	int mask, ret;

	if (!p->id.qp)
		return 0;
	/* INIT again first: the connection's access flags */
	ret = ucma_conn_qp_attr(p, IBV_QPS_INIT, &a, &mask);
	if (!ret)
		ret = -ibv_modify_qp(p->id.qp, &a, mask);
	if (!ret)
		ret = ucma_conn_qp_attr(p, IBV_QPS_RTR, &a, &mask);
	if (ret)
		return ret;
	if (resp_res != RDMA_MAX_RESP_RES)
		a.max_dest_rd_atomic = resp_res;
	return -ibv_modify_qp(p->id.qp, &a, mask);
}

int ucma_modify_qp_rts(struct rdma_id_private *p, uint8_t init_depth)
{
	struct ibv_qp_attr a;
	int mask, ret;

	if (!p->id.qp)
		return 0;
	ret = ucma_conn_qp_attr(p, IBV_QPS_RTS, &a, &mask);
	if (ret)
		return ret;
	if (init_depth != RDMA_MAX_INIT_DEPTH)
		a.max_rd_atomic = init_depth;
	return -ibv_modify_qp(p->id.qp, &a, mask);
}

static int ucma_init_conn_qp(struct rdma_id_private *p, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT };
	int mask, ret = cma_init_qp_attr(p, &a, &mask);

	return ret ? ret : -ibv_modify_qp(qp, &a, mask);
}

static int ucma_init_ud_qp(struct rdma_id_private *p, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT };
	int mask, ret = cma_init_qp_attr(p, &a, &mask);

	if (ret)
		return ret;
	ret = ibv_modify_qp(qp, &a, mask);
	if (ret)
		return -ret;
	a.qp_state = IBV_QPS_RTR;
	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	if (ret)
		return -ret;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return -ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

/* ------------------------------------------------------------------ */
static void ucma_destroy_cqs(struct rdma_cm_id *id)
{
	if (id->recv_cq) {
		ibv_destroy_cq(id->recv_cq);
		if (id->send_cq && id->send_cq != id->recv_cq)
			ibv_destroy_cq(id->send_cq);
		id->send_cq = NULL;
		id->recv_cq = NULL;
	} else if (id->send_cq) {
		ibv_destroy_cq(id->send_cq);
		id->send_cq = NULL;
	}
	if (id->recv_cq_channel) {
		ibv_destroy_comp_channel(id->recv_cq_channel);
		if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel)
			ibv_destroy_comp_channel(id->send_cq_channel);
		id->send_cq_channel = NULL;
		id->recv_cq_channel = NULL;
	} else if (id->send_cq_channel) {
		ibv_destroy_comp_channel(id->send_cq_channel);
		id->send_cq_channel = NULL;
	}
}

static int ucma_create_cqs(struct rdma_cm_id *id, uint32_t send_size, uint32_t recv_size)
{
	if (recv_size) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel)
			goto err;
		id->recv_cq = ibv_create_cq(id->verbs, (int)recv_size, id, id->recv_cq_channel, 0);
		if (!id->recv_cq)
			goto err;
	}
	if (send_size) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel)
			goto err;
		id->send_cq = ibv_create_cq(id->verbs, (int)send_size, id, id->send_cq_channel, 0);
		if (!id->send_cq)
			goto err;
	}
	return 0;
err:
	ucma_destroy_cqs(id);
	return -1;
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq *srq;

	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return ucma_set_errno(EINVAL);
	if (!id->verbs)
		return ucma_set_errno(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if (attr->srq_type == IBV_SRQT_XRC)
		return ucma_set_errno(EOPNOTSUPP); /* urvt has no XRC domains */
	srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq)
		return -1;
	if (!id->pd)
		id->pd = attr->pd;
	id->srq = srq;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ex;
	int ret;

	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, attr, sizeof(*attr));
	ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	ex.srq_type = IBV_SRQT_BASIC;
	ex.pd = pd;
	ret = rdma_create_srq_ex(id, &ex);
	memcpy(attr, &ex, sizeof(*attr));
	return ret;
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
	ucma_destroy_cqs(id);
}

/* ECE (librdmacm's ucma_init_ece / ucma_set_local_ece): the provider's, if it has any. */
static int ucma_init_ece(struct rdma_id_private *p, struct ibv_qp *qp)
{
	struct ibv_ece ece = { 0 };
	int ret = ibv_query_ece(qp, &ece);

	if (ret && ret != EOPNOTSUPP)
		return -ret;
	p->local_ece.vendor_id = ece.vendor_id;
	p->local_ece.options = ece.options;
	if (!p->remote_ece.vendor_id)
		return 0;
	if (p->remote_ece.vendor_id != p->local_ece.vendor_id) {
		ece.vendor_id = p->local_ece.vendor_id;
		ece.options = 0;
	} else {
		ece.vendor_id = p->remote_ece.vendor_id;
		ece.options = p->remote_ece.options;
	}
	ret = ibv_set_ece(qp, &ece);
	return ret && ret != EOPNOTSUPP ? -ret : 0;
}

static int ucma_set_local_ece(struct rdma_id_private *p, struct ibv_qp *qp)
{
	struct ibv_ece ece = { 0 };
	int ret;

	if (!p->remote_ece.vendor_id)
		return 0;
	ret = ibv_query_ece(qp, &ece);
	if (ret && ret != EOPNOTSUPP)
		return -ret;
	p->local_ece.options = ece.options;
	return 0;
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct rdma_id_private *p = to_id_priv(id);
	struct ibv_qp *qp;
	int ret;

	if (id->qp || !id->verbs)
		return ucma_set_errno(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd;
	} else if (id->verbs != attr->pd->context) {
		return ucma_set_errno(EINVAL);
	}
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return ucma_set_errno(EINVAL);
	if (id->qp_type == IBV_QPT_XRC_RECV)
		return ucma_set_errno(EOPNOTSUPP);
	if (ucma_create_cqs(id, attr->send_cq || id->send_cq ? 0 : attr->cap.max_send_wr,
			    attr->recv_cq || id->recv_cq ? 0 : attr->cap.max_recv_wr))
		return -1;
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		ret = -errno;
		goto err_cqs;
	}
	pthread_mutex_lock(&cma_lock);
	ret = ucma_init_ece(p, qp);
	if (!ret)
		ret = id->qp_type == IBV_QPT_UD ? ucma_init_ud_qp(p, qp) : ucma_init_conn_qp(p, qp);
	if (!ret)
		ret = ucma_set_local_ece(p, qp);
	if (!ret) {
		id->pd = qp->pd;
		id->qp = qp;
	}
	pthread_mutex_unlock(&cma_lock);
	if (ret)
		goto err_qp;
	return 0;
err_qp:
	ibv_destroy_qp(qp);
err_cqs:
	ucma_destroy_cqs(id);
	return ucma_err_ret(ret);
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex ex;
	int ret;

	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, qp_init_attr, sizeof(*qp_init_attr));
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd ? pd : id->pd;
	ret = rdma_create_qp_ex(id, &ex);
	memcpy(qp_init_attr, &ex, sizeof(*qp_init_attr));
	return ret;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	/* librdmacm would hand NULL to ibv_destroy_qp and crash; Debian's
	 * qperf 0.4.11 -cm1 does this on its listener at every test's end */
	if (!id->qp)
		return;
	/* an attached QP cannot be destroyed (EBUSY): detach it from the
	 * id's groups first (docs/multicast.md) */
	pthread_mutex_lock(&cma_lock);
	for (struct cma_multicast *mc = to_id_priv(id)->mc_list; mc; mc = mc->next)
		ucma_detach_mc(id, mc);
	pthread_mutex_unlock(&cma_lock);
	ibv_destroy_qp(id->qp);
	pthread_mutex_lock(&cma_lock);
	id->qp = NULL;
	pthread_mutex_unlock(&cma_lock);
	ucma_destroy_cqs(id);
}
