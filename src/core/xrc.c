/*
 * XRC (qp-semantics §16): XRC domains, XRC SRQs and their numbers, the SRQ
 * lookup of the XRC target's responder, shared XRC_RECV QPs (ibv_open_qp).
 * The XRC QPs themselves are RC QPs to the engines (core/rvt.h struct
 * rvt_qp, qp.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/qp_table.h"
#include "core/rvt_api.h"

/* ------------------------------------------------------------------ */
/* Domains                                                            */
/* ------------------------------------------------------------------ */

/*
 * A domain is named by the inode of the file ibv_open_xrcd was given (fd
 * -1: a domain of its own). The list is the process's: domains are not
 * shared with other processes (docs/deviations.md).
 */
struct rvt_xrcd_dom {
	dev_t dev;
	ino_t ino;
	bool named;                       /* opened by a file */
	int refcount;                     /* handles, under dom_lock */
	struct rvt_xrcd_dom *next;
};

static pthread_mutex_t dom_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rvt_xrcd_dom *dom_list;

/* qp-semantics §16.1: the rules of the kernel's open_xrcd. Caller holds dom_lock. */
static int dom_get(const struct ibv_xrcd_init_attr *attr, struct rvt_xrcd_dom **out)
{
	struct rvt_xrcd_dom *d;
	struct stat st;

	if (attr->fd != -1) {
		if (fstat(attr->fd, &st))
			return -EBADF;
		for (d = dom_list; d; d = d->next) {
			if (d->named && d->dev == st.st_dev && d->ino == st.st_ino)
				break;
		}
		if (d) {
			if (attr->oflags & O_EXCL)
				return -EINVAL;
			d->refcount++;
			*out = d;
			return 0;
		}
		if (!(attr->oflags & O_CREAT))
			return -EAGAIN;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	if (attr->fd != -1) {
		d->named = true;
		d->dev = st.st_dev;
		d->ino = st.st_ino;
	}
	d->refcount = 1;
	d->next = dom_list;
	dom_list = d;
	*out = d;
	return 0;
}

static void dom_put(struct rvt_xrcd_dom *d)
{
	struct rvt_xrcd_dom **pp;

	pthread_mutex_lock(&dom_lock);
	if (--d->refcount == 0) {
		for (pp = &dom_list; *pp; pp = &(*pp)->next) {
			if (*pp == d) {
				*pp = d->next;
				break;
			}
		}
		free(d);
	}
	pthread_mutex_unlock(&dom_lock);
}

struct rvt_xrcd *rvt_open_xrcd(struct urvt_context *uctx, const struct ibv_xrcd_init_attr *attr,
			       int *err)
{
	struct rvt_xrcd *x;
	int ret;

	if (attr->comp_mask & ~(uint32_t)(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS)) {
		*err = -EOPNOTSUPP;
		return NULL;
	}
	if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) ||
	    !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS)) {
		*err = -EINVAL;
		return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		*err = -ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&dom_lock);
	ret = dom_get(attr, &x->dom);
	pthread_mutex_unlock(&dom_lock);
	if (ret) {
		free(x);
		*err = ret;
		return NULL;
	}
	x->uctx = uctx;
	x->ibxrcd.context = &uctx->vctx.context;
	urvt_ctx_hold(x->ibxrcd.context);
	return x;
}

int rvt_close_xrcd(struct rvt_xrcd *x)
{
	if (atomic_load(&x->usecnt))
		return -EBUSY;
	dom_put(x->dom);
	urvt_ctx_drop(x->ibxrcd.context);
	free(x);
	return 0;
}

bool rvt_xrcd_same(const struct rvt_xrcd *a, const struct rvt_xrcd *b)
{
	return a && b && a->dom == b->dom;
}

/* ------------------------------------------------------------------ */
/* XRC SRQ numbers                                                    */
/* ------------------------------------------------------------------ */
#define XSRQ_SLOTS (1u << RVT_XSRQ_IDX_BITS)
#define XSRQ_GEN_MASK ((1u << (24 - RVT_XSRQ_IDX_BITS)) - 1)

void rvt_xsrq_table_init(struct rvt_xsrq_table *t)
{
	pthread_mutex_init(&t->lock, NULL);
	atomic_store(&t->slot, NULL);
	t->next = 1;
}

void rvt_xsrq_table_fini(struct rvt_xsrq_table *t)
{
	free(atomic_load(&t->slot));
	atomic_store(&t->slot, NULL);
	pthread_mutex_destroy(&t->lock);
}

/* Give srq a number and publish it (last: the SRQ is complete). */
static int xsrq_publish(struct rvt_xsrq_table *t, struct rvt_srq *srq)
{
	struct rvt_xsrq_slot *slots;
	int ret = -ENOMEM;

	pthread_mutex_lock(&t->lock);
	slots = atomic_load(&t->slot);
	if (!slots) {
		slots = calloc(XSRQ_SLOTS, sizeof(*slots));
		/* release: a lookup that sees the table sees it zeroed */
		atomic_store_explicit(&t->slot, slots, memory_order_release);
	}
	if (slots) {
		/* slot 0 is never used: SRQ number 0 names nothing */
		for (uint32_t n = 0; n < XSRQ_SLOTS - 1; n++) {
			uint32_t i = t->next;
			struct rvt_xsrq_slot *s = &slots[i];

			t->next = i + 1 < XSRQ_SLOTS ? i + 1 : 1;
			if (atomic_load(&s->srq) || atomic_load(&s->users))
				continue;
			s->gen = (s->gen + 1) & XSRQ_GEN_MASK;
			srq->srq_num = s->gen << RVT_XSRQ_IDX_BITS | i;
			atomic_store(&s->srq, srq);
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

static void xsrq_unpublish(struct rvt_xsrq_table *t, struct rvt_srq *srq)
{
	struct rvt_xsrq_slot *s = &atomic_load(&t->slot)[srq->srq_num & (XSRQ_SLOTS - 1)];

	atomic_store(&s->srq, NULL);
	/* pairs with the users increment in rvt_xsrq_get: a packet that got
	 * the SRQ is done with it when users drains */
	while (atomic_load(&s->users))
		sched_yield();
}

struct rvt_srq *rvt_xsrq_get(struct rvt_dev_info *rdi, uint32_t srq_num)
{
	struct rvt_xsrq_table *t = &rdi->xsrq_table;
	struct rvt_xsrq_slot *slots = atomic_load_explicit(&t->slot, memory_order_acquire);
	struct rvt_xsrq_slot *s;
	struct rvt_srq *srq;

	if (unlikely(!slots))
		return NULL;
	s = &slots[srq_num & (XSRQ_SLOTS - 1)];
	atomic_fetch_add(&s->users, 1);
	srq = atomic_load(&s->srq);
	if (!srq || srq->srq_num != (srq_num & URVT_QPN_MASK)) {
		atomic_fetch_sub(&s->users, 1);
		return NULL;
	}
	return srq;
}

void rvt_xsrq_put(struct rvt_dev_info *rdi, struct rvt_srq *srq)
{
	struct rvt_xsrq_slot *slots = atomic_load_explicit(&rdi->xsrq_table.slot,
							   memory_order_relaxed);

	atomic_fetch_sub(&slots[srq->srq_num & (XSRQ_SLOTS - 1)].users, 1);
}

/* ------------------------------------------------------------------ */
/* XRC SRQs                                                           */
/* ------------------------------------------------------------------ */
struct rvt_srq *rvt_create_xsrq(struct rvt_pd *pd, struct rvt_xrcd *xrcd, struct rvt_cq *cq,
				struct ibv_srq_init_attr *attr, int *err)
{
	struct rvt_dev_info *rdi = to_uctx(pd->ibpd.context)->rdi;
	struct rvt_srq *srq;
	int ret;

	if (xrcd->uctx->rdi != rdi || cq->uctx->rdi != rdi) {
		*err = -EINVAL;
		return NULL;
	}
	srq = rvt_create_srq(pd, attr, err);
	if (!srq)
		return NULL;
	srq->xrcd = xrcd;
	srq->cq = cq;
	ret = xsrq_publish(&rdi->xsrq_table, srq);
	if (ret) {
		srq->xrcd = NULL;
		srq->cq = NULL;
		rvt_destroy_srq(srq);
		*err = ret;
		return NULL;
	}
	atomic_fetch_add(&xrcd->usecnt, 1);
	atomic_fetch_add(&cq->usecnt, 1);
	return srq;
}

void rvt_xsrq_destroy(struct rvt_srq *srq)
{
	if (!srq->xrcd)
		return;
	xsrq_unpublish(&srq->uctx->rdi->xsrq_table, srq);
	atomic_fetch_sub(&srq->xrcd->usecnt, 1);
	atomic_fetch_sub(&srq->cq->usecnt, 1);
	srq->xrcd = NULL;
	srq->cq = NULL;
}

int rvt_get_srq_num(struct rvt_srq *srq, uint32_t *srq_num)
{
	if (!srq->xrcd)
		return -EINVAL;
	*srq_num = srq->srq_num;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Shared XRC_RECV QPs                                                */
/* ------------------------------------------------------------------ */
struct rvt_qp *rvt_open_qp(struct urvt_context *uctx, const struct ibv_qp_open_attr *attr,
			   int *err)
{
	const uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
	struct rvt_qp *qp;

	if (attr->comp_mask & ~(uint32_t)(need | IBV_QP_OPEN_ATTR_CONTEXT)) {
		*err = -EINVAL;
		return NULL;
	}
	if ((attr->comp_mask & need) != need || attr->qp_type != IBV_QPT_XRC_RECV ||
	    !attr->xrcd) {
		*err = -EINVAL;
		return NULL;
	}
	qp = rvt_lookup_qpn(uctx->rdi, attr->qp_num & URVT_QPN_MASK);
	if (!qp) {
		*err = -ENOENT; /* not created, or still in RESET */
		return NULL;
	}
	if (qp->ibqp_ex.qp_base.qp_type != IBV_QPT_XRC_RECV ||
	    !rvt_xrcd_same(qp->xrcd, ibxrcd_to_rvtxrcd(attr->xrcd))) {
		rvt_put_qp(qp);
		*err = -EINVAL;
		return NULL;
	}
	atomic_fetch_add(&qp->xrc_handles, 1);
	rvt_put_qp(qp);
	return qp;
}

bool rvt_xrc_handle_put(struct rvt_qp *qp)
{
	return atomic_fetch_sub(&qp->xrc_handles, 1) == 1;
}
