/*
 * What the librdmacm API's files share (cma_priv.h describes the halves):
 *
 *   ucma.c     ids, connect/listen/accept, events, rdma_create_ep, ECE,
 *              multicast;
 *   ucma_qp.c  the application's QPs, CQs and SRQs: creating them and
 *              moving QPs through their states.
 */
#ifndef URVT_RDMACM_UCMA_PRIV_H
#define URVT_RDMACM_UCMA_PRIV_H

#include <errno.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <stdbool.h>

#include "rdmacm/cma_priv.h"

/* Shared by ucma.c and ucma_qp.c */
/* ucma.c */
int ucma_err_ret(int ret);
/* ucma_qp.c */
int ucma_modify_qp_rtr(struct rdma_id_private *p, uint8_t resp_res);
int ucma_modify_qp_rts(struct rdma_id_private *p, uint8_t init_depth);

static inline int ucma_set_errno(int e)
{
	errno = e;
	return -1;
}

/* The id's QP off mc's group, if it was on it (cma_lock held). */
static inline void ucma_detach_mc(struct rdma_cm_id *id, struct cma_multicast *mc)
{
	if (mc->attached && id->qp)
		ibv_detach_mcast(id->qp, &mc->mgid, 0);
	mc->attached = false;
}

static inline void ucma_modify_qp_err(struct rdma_id_private *p)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (p->id.qp)
		ibv_modify_qp(p->id.qp, &a, IBV_QP_STATE);
}

#endif
