/* Protection domains and address handles. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/rvt_api.h"
#include "core/transport.h"
#include "wire/hdr.h"

struct rvt_pd *rvt_alloc_pd(struct urvt_context *uctx, int *err)
{
	struct rvt_dev_info *rdi = uctx->rdi;
	struct rvt_pd *pd;

	if (atomic_fetch_add(&rdi->n_pds, 1) >= URVT_MAX_PD) {
		atomic_fetch_sub(&rdi->n_pds, 1);
		*err = -ENOMEM;
		return NULL;
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		atomic_fetch_sub(&rdi->n_pds, 1);
		*err = -ENOMEM;
		return NULL;
	}
	pd->ibpd.context = &uctx->vctx.context;
	pd->real = pd;
	/* A handle, as the kernel's uverbs object id: what ibv_import_pd
	 * names it by. Never 0; not reused before 2^32 allocations. */
	pthread_mutex_lock(&rdi->lock);
	if (!++rdi->pd_last_handle)
		++rdi->pd_last_handle;
	pd->ibpd.handle = rdi->pd_last_handle;
	pd->next = rdi->pd_list;
	if (pd->next)
		pd->next->prev = pd;
	rdi->pd_list = pd;
	pthread_mutex_unlock(&rdi->lock);
	urvt_ctx_hold(pd->ibpd.context);
	return pd;
}

int rvt_dealloc_pd(struct rvt_pd *pd)
{
	struct rvt_dev_info *rdi = to_uctx(pd->ibpd.context)->rdi;

	/* The kernel refuses to free a PD that objects still reference. */
	if (atomic_load(&pd->usecnt))
		return -EBUSY;
	pthread_mutex_lock(&rdi->lock);
	if (pd->prev)
		pd->prev->next = pd->next;
	else
		rdi->pd_list = pd->next;
	if (pd->next)
		pd->next->prev = pd->prev;
	pthread_mutex_unlock(&rdi->lock);
	atomic_fetch_sub(&rdi->n_pds, 1);
	urvt_ctx_drop(pd->ibpd.context);
	free(pd);
	return 0;
}

void *rvt_buf_alloc(struct rvt_pd *domain, size_t n, size_t size, uint32_t type, bool *custom)
{
	const struct rvt_parent *pa = domain ? domain->parent : NULL;
	void *buf;

	*custom = false;
	if (n && size > SIZE_MAX / n)
		return NULL;
	if (pa && pa->alloc) {
		buf = pa->alloc(&domain->ibpd, pa->pd_context, n * size, URVT_CACHELINE, type);
		if (buf != IBV_ALLOCATOR_USE_DEFAULT) {
			if (buf) {
				memset(buf, 0, n * size);
				*custom = true;
			}
			return buf;
		}
	}
	return calloc(n, size);
}

void rvt_buf_free(struct rvt_pd *domain, void *buf, uint32_t type, bool custom)
{
	if (!buf)
		return;
	if (custom)
		domain->parent->free(&domain->ibpd, domain->parent->pd_context, buf, type);
	else
		free(buf);
}

void rvt_domain_get(struct rvt_pd *domain)
{
	if (domain && domain->parent)
		atomic_fetch_add(&domain->usecnt, 1);
}

void rvt_domain_put(struct rvt_pd *domain)
{
	if (domain && domain->parent)
		atomic_fetch_sub(&domain->usecnt, 1);
}

struct rvt_pd *rvt_find_pd(struct rvt_dev_info *rdi, uint32_t handle)
{
	struct rvt_pd *pd;

	pthread_mutex_lock(&rdi->lock);
	for (pd = rdi->pd_list; pd && pd->ibpd.handle != handle; pd = pd->next)
		;
	pthread_mutex_unlock(&rdi->lock);
	return pd;
}

/*
 * RoCE address vectors must carry a GRH (the GID is the IP address);
 * qp-semantics §5.1 (AV: driver check) and roce-wire §12. The destination
 * LID means nothing on a RoCE port: the kernel's verbs core never hands it
 * to a RoCE driver, so rdmavt's multicast-LID refusal does not apply and any
 * dlid is accepted and kept (UCX puts its UDP source port base, 0xC000,
 * there; docs/deviations.md).
 */
int rvt_av_from_attr(struct rvt_dev_info *rdi, const struct ibv_ah_attr *attr,
		     struct urvt_av *av, uint32_t dqpn)
{
	if (attr->port_num < 1 || attr->port_num > URVT_PORT_COUNT)
		return -EINVAL;
	if (!attr->is_global)
		return -EINVAL;
	if (attr->grh.sgid_index >= rdi->port_attr.gid_tbl_len)
		return -EINVAL;

	memset(av, 0, sizeof(*av));
	av->attr = *attr;
	/* our GID may be other processes' too (docs/host-identity.md): the
	 * QPN says whose QP it is; an AH's WRs are checked one by one */
	av->dqpn = dqpn;
	av->loopback = !rdi->no_inproc && !memcmp(attr->grh.dgid.raw, rdi->gid.raw, 16) &&
		       (dqpn == URVT_QPN_ANY || rvt_qpn_is_mine(rdi, dqpn));
	/* urvt sends from the bound RoCEv2 port itself (rxe accepts any) */
	av->udp_sport = URVT_ROCE_UDP_PORT;
	if ((!av->loopback || dqpn == URVT_QPN_ANY) && rdi->transport && rdi->transport->av_resolve)
		rdi->transport->av_resolve(rdi, av);
	return 0;
}

void rvt_av_via_link(struct rvt_dev_info *rdi, struct urvt_av *av)
{
	av->loopback = false;
	if (rdi->transport && rdi->transport->av_resolve)
		rdi->transport->av_resolve(rdi, av);
}

struct rvt_ah *rvt_create_ah(struct rvt_pd *pd, const struct ibv_ah_attr *attr, int *err)
{
	struct urvt_context *uctx = to_uctx(pd->ibpd.context);
	struct rvt_dev_info *rdi = uctx->rdi;
	struct rvt_ah *ah;
	int ret;

	if (atomic_fetch_add(&rdi->n_ahs, 1) >= URVT_MAX_AH) {
		ret = -ENOMEM;
		goto err_count;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah) {
		ret = -ENOMEM;
		goto err_count;
	}
	ret = rvt_av_from_attr(rdi, attr, &ah->av, URVT_QPN_ANY);
	if (ret)
		goto err_free;
	ah->ibah.context = pd->ibpd.context;
	ah->ibah.pd = &pd->ibpd;
	atomic_fetch_add(&pd->usecnt, 1);
	return ah;

err_free:
	free(ah);
err_count:
	atomic_fetch_sub(&rdi->n_ahs, 1);
	*err = ret;
	return NULL;
}

int rvt_destroy_ah(struct rvt_ah *ah)
{
	struct rvt_dev_info *rdi = to_uctx(ah->ibah.context)->rdi;

	atomic_fetch_sub(&ibpd_to_rvtpd(ah->ibah.pd)->usecnt, 1);
	atomic_fetch_sub(&rdi->n_ahs, 1);
	free(ah);
	return 0;
}
