/* Receive rings and shared receive queues (rdmavt srq.c, qp-semantics §3, §12). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/rvt_api.h"

int rvt_rq_init(struct rvt_rq *rq, uint32_t max_wr, uint32_t max_sge, struct rvt_pd *domain,
		uint32_t type)
{
	uint32_t size = urvt_roundup_pow2(max_wr + 1);

	rq->size = size;
	rq->mask = size - 1;
	rq->max_sge = max_sge;
	rq->stride = (uint32_t)(sizeof(struct rvt_rwqe) + max_sge * sizeof(struct ibv_sge));
	/* as qp.c: only a parent domain is kept */
	rq->wq_domain = domain && domain->parent ? domain : NULL;
	domain = rq->wq_domain;
	rq->wq_type = type;
	rq->wq = rvt_buf_alloc(domain, size, rq->stride, type, &rq->wq_custom);
	if (!rq->wq)
		return -ENOMEM;
	rq->head = 0;
	rq->tail = 0;
	urvt_bias_init(&rq->p_lock);
	urvt_bias_init(&rq->c_lock);
	return 0;
}

void rvt_rq_fini(struct rvt_rq *rq)
{
	if (!rq->wq)
		return;
	urvt_spin_destroy(&rq->p_lock.lock);
	urvt_spin_destroy(&rq->c_lock.lock);
	rvt_buf_free(rq->wq_domain, rq->wq, rq->wq_type, rq->wq_custom);
	rq->wq = NULL;
}

/* Capacity reported to the user: one slot of the power-of-two ring is kept
 * free, as rxe does. */
static inline uint32_t rq_capacity(const struct rvt_rq *rq)
{
	return rq->size - 1;
}

/* pd may be a parent domain: its allocators make the ring (rvt_buf_alloc). */
struct rvt_srq *rvt_create_srq(struct rvt_pd *domain, struct ibv_srq_init_attr *attr, int *err)
{
	struct rvt_pd *pd = domain->real;
	struct urvt_context *uctx = to_uctx(domain->ibpd.context);
	struct rvt_dev_info *rdi = uctx->rdi;
	struct rvt_srq *srq;
	int ret;

	if (!attr->attr.max_sge || attr->attr.max_sge > (uint32_t)rdi->dattr.max_srq_sge ||
	    !attr->attr.max_wr || attr->attr.max_wr > (uint32_t)rdi->dattr.max_srq_wr) {
		ret = -EINVAL;
		goto err;
	}
	if (atomic_fetch_add(&rdi->n_srqs, 1) >= URVT_MAX_SRQ) {
		ret = -ENOMEM;
		goto err_count;
	}
	if (posix_memalign((void **)&srq, URVT_CACHELINE, sizeof(*srq))) {
		ret = -ENOMEM;
		goto err_count;
	}
	memset(srq, 0, sizeof(*srq));
	ret = rvt_rq_init(&srq->rq, attr->attr.max_wr, attr->attr.max_sge, domain,
			  RVT_RES_TYPE_SRQ);
	if (ret)
		goto err_free;
	srq->uctx = uctx;
	srq->pd = pd;
	srq->max_wr = rq_capacity(&srq->rq);
	/* Stored as given: armed if non-zero, not checked against max_wr
	 * (qp-semantics §12). */
	atomic_store(&srq->limit, attr->attr.srq_limit);
	srq->ibsrq.context = domain->ibpd.context;
	srq->ibsrq.pd = &domain->ibpd;
	pthread_mutex_init(&srq->ibsrq.mutex, NULL);
	pthread_cond_init(&srq->ibsrq.cond, NULL);
	attr->attr.max_wr = srq->max_wr;
	atomic_fetch_add(&pd->usecnt, 1);
	rvt_domain_get(domain);
	return srq;

err_free:
	free(srq);
err_count:
	atomic_fetch_sub(&rdi->n_srqs, 1);
err:
	*err = ret;
	return NULL;
}

/* Move the queued WQEs, in order, into a ring of a new size. */
static int srq_resize(struct rvt_srq *srq, uint32_t max_wr)
{
	struct rvt_rq nrq;
	uint32_t n;
	int ret = rvt_rq_init(&nrq, max_wr, srq->rq.max_sge, srq->rq.wq_domain, srq->rq.wq_type);

	if (ret)
		return ret;
	urvt_bias_lock(&srq->rq.c_lock);
	urvt_bias_lock(&srq->rq.p_lock);
	n = srq->rq.head - srq->rq.tail;
	if (n > rq_capacity(&nrq)) {
		urvt_bias_unlock(&srq->rq.p_lock);
		urvt_bias_unlock(&srq->rq.c_lock);
		rvt_rq_fini(&nrq);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < n; i++)
		memcpy(rvt_get_rwqe_ptr(&nrq, i), rvt_get_rwqe_ptr(&srq->rq, srq->rq.tail + i),
		       srq->rq.stride);
	rvt_buf_free(srq->rq.wq_domain, srq->rq.wq, srq->rq.wq_type, srq->rq.wq_custom);
	srq->rq.wq = nrq.wq;
	srq->rq.wq_custom = nrq.wq_custom;
	srq->rq.size = nrq.size;
	srq->rq.mask = nrq.mask;
	srq->rq.tail = 0;
	srq->rq.head = n;
	srq->max_wr = rq_capacity(&nrq);
	urvt_bias_unlock(&srq->rq.p_lock);
	urvt_bias_unlock(&srq->rq.c_lock);
	urvt_spin_destroy(&nrq.p_lock.lock);
	urvt_spin_destroy(&nrq.c_lock.lock);
	return 0;
}

int rvt_modify_srq(struct rvt_srq *srq, struct ibv_srq_attr *attr, int attr_mask)
{
	struct rvt_dev_info *rdi = srq->uctx->rdi;
	int ret;

	if (attr_mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return -EINVAL;
	if (attr_mask & IBV_SRQ_MAX_WR) {
		uint32_t limit = (attr_mask & IBV_SRQ_LIMIT) ? attr->srq_limit
							      : atomic_load(&srq->limit);
		if (!attr->max_wr || attr->max_wr > (uint32_t)rdi->dattr.max_srq_wr)
			return -EINVAL;
		if (limit > attr->max_wr)
			return -EINVAL;
		ret = srq_resize(srq, attr->max_wr);
		if (ret)
			return ret;
		attr->max_wr = srq->max_wr;
		if (attr_mask & IBV_SRQ_LIMIT)
			atomic_store(&srq->limit, attr->srq_limit);
		return 0;
	}
	if (attr_mask & IBV_SRQ_LIMIT) {
		/* rdmavt: limit >= ring size (max_wr + 1) is invalid. */
		if (attr->srq_limit > srq->max_wr)
			return -EINVAL;
		atomic_store(&srq->limit, attr->srq_limit);
	}
	return 0;
}

int rvt_query_srq(struct rvt_srq *srq, struct ibv_srq_attr *attr)
{
	attr->max_wr = srq->max_wr;
	attr->max_sge = srq->rq.max_sge;
	attr->srq_limit = atomic_load(&srq->limit);
	return 0;
}

int rvt_destroy_srq(struct rvt_srq *srq)
{
	struct rvt_dev_info *rdi = srq->uctx->rdi;

	if (atomic_load(&srq->usecnt))
		return -EBUSY;
	rvt_xsrq_destroy(srq);
	urvt_cancel_async_events(srq->uctx, srq);
	atomic_fetch_sub(&srq->pd->usecnt, 1);
	rvt_rq_fini(&srq->rq);
	rvt_domain_put(srq->rq.wq_domain);
	pthread_mutex_destroy(&srq->ibsrq.mutex);
	pthread_cond_destroy(&srq->ibsrq.cond);
	free(srq);
	atomic_fetch_sub(&rdi->n_srqs, 1);
	return 0;
}

/* Copy one receive WR into the ring; caller holds p_lock. */
int rvt_rq_post_one(struct rvt_rq *rq, const struct ibv_recv_wr *wr)
{
	uint32_t head = rq->head;
	struct rvt_rwqe *wqe;

	if ((uint32_t)wr->num_sge > rq->max_sge)
		return -EINVAL;
	/* RQ-P0, full check: pairs with the consumer's release of tail (RQ-C2). */
	if (head - load_acquire(&rq->tail) >= rq_capacity(rq))
		return -ENOMEM;
	wqe = rvt_get_rwqe_ptr(rq, head);
	wqe->wr_id = wr->wr_id;
	wqe->num_sge = (uint32_t)wr->num_sge;
	if (wr->num_sge)
		memcpy(wqe->sg_list, wr->sg_list, (size_t)wr->num_sge * sizeof(struct ibv_sge));
	/* RQ-P1: publish the WQE to the consumer (RQ-C1 in rvt_get_rwqe). */
	store_release(&rq->head, head + 1);
	return 0;
}

int rvt_post_srq_recv(struct rvt_srq *srq, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr)
{
	int ret = 0;
	bool fast = urvt_bias_take_noted(&srq->rq.p_lock);

	for (; wr; wr = wr->next) {
		ret = rvt_rq_post_one(&srq->rq, wr);
		if (ret) {
			*bad_wr = wr;
			break;
		}
	}
	urvt_bias_leave(&srq->rq.p_lock, fast);
	return ret;
}
