/*
 * The object verbs of the drop-in libibverbs: PDs, MRs, CQs, completion
 * channels, SRQs, QPs, AHs, and the op-table functions of ops.h. Each is a
 * thin edge over the core: negative errno inside, positive errno (or NULL
 * with errno set) here, as libibverbs documents.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/mw.h"
#include "core/odp.h"
#include "core/rvt_api.h"
#include "verbs/ops.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                            */
/* ------------------------------------------------------------------ */
static inline int fail_int(int neg)
{
	return -neg;
}

static inline void *fail_ptr(int neg)
{
	errno = -neg;
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Protection domains                                                 */
/* ------------------------------------------------------------------ */
struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	int err = 0;
	struct rvt_pd *pd = rvt_alloc_pd(to_uctx(context), &err);

	return pd ? &pd->ibpd : fail_ptr(err);
}

static bool pd_is_import(struct ibv_pd *pd)
{
	struct rvt_pd *p = ibpd_to_domain(pd);

	return p->real != p && !p->parent;
}

/* ---- thread and parent domains ---- */
struct urvt_td {
	struct ibv_td ibtd;
	_Atomic int usecnt;               /* parent domains naming it */
};

/* A thread domain promises that one thread uses what is made on it;
 * urvt's locks stay, so it is only an object to name. */
struct ibv_td *urvt_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr)
{
	struct urvt_td *td;

	if (attr->comp_mask)
		return fail_ptr(-EINVAL);
	td = calloc(1, sizeof(*td));
	if (!td)
		return fail_ptr(-ENOMEM);
	td->ibtd.context = context;
	return &td->ibtd;
}

int urvt_dealloc_td(struct ibv_td *ibtd)
{
	struct urvt_td *td = container_of(ibtd, struct urvt_td, ibtd);

	if (atomic_load(&td->usecnt))
		return EBUSY;
	free(td);
	return 0;
}

/*
 * ibv_alloc_parent_domain: a PD that stands for attr->pd (MRs, QPs, AHs,
 * SRQs made on it are of that protection domain) and whose QPs', SRQs' and
 * extended CQs' rings come from attr->alloc / free (core/pd.c
 * rvt_buf_alloc) when IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS is given.
 */
struct ibv_pd *urvt_alloc_parent_domain(struct ibv_context *context,
					struct ibv_parent_domain_init_attr *attr)
{
	struct rvt_pd *prot, *pd;
	struct rvt_parent *pa;

	if (attr->comp_mask & ~(uint32_t)(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
					  IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT))
		return fail_ptr(-EINVAL);
	if (!attr->pd || attr->pd->context != context || ibpd_to_domain(attr->pd)->parent ||
	    (attr->td && attr->td->context != context))
		return fail_ptr(-EINVAL);
	if ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) &&
	    (!attr->alloc || !attr->free))
		return fail_ptr(-EINVAL);
	prot = ibpd_to_rvtpd(attr->pd);
	pd = calloc(1, sizeof(*pd));
	pa = calloc(1, sizeof(*pa));
	if (!pd || !pa) {
		free(pd);
		free(pa);
		return fail_ptr(-ENOMEM);
	}
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) {
		pa->alloc = attr->alloc;
		pa->free = attr->free;
	}
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
		pa->pd_context = attr->pd_context;
	pa->td = attr->td;
	if (pa->td)
		atomic_fetch_add(&container_of(pa->td, struct urvt_td, ibtd)->usecnt, 1);
	pd->ibpd.context = context;
	pd->ibpd.handle = prot->ibpd.handle;
	pd->real = prot;
	pd->parent = pa;
	/* the protection domain stays while the parent names it */
	atomic_fetch_add(&prot->usecnt, 1);
	return &pd->ibpd;
}

static int dealloc_parent_domain(struct rvt_pd *pd)
{
	if (atomic_load(&pd->usecnt))
		return EBUSY;
	if (pd->parent->td)
		atomic_fetch_sub(&container_of(pd->parent->td, struct urvt_td, ibtd)->usecnt, 1);
	atomic_fetch_sub(&pd->real->usecnt, 1);
	free(pd->parent);
	free(pd);
	return 0;
}

/* An imported PD deallocates the PD it stands for (the kernel's: the
 * object is shared), then goes itself; a parent domain only itself. */
int ibv_dealloc_pd(struct ibv_pd *pd)
{
	bool import;
	int ret;

	if (ibpd_to_domain(pd)->parent)
		return dealloc_parent_domain(ibpd_to_domain(pd));
	import = pd_is_import(pd); /* before: the PD itself may go */
	ret = rvt_dealloc_pd(ibpd_to_rvtpd(pd));
	if (!ret && import)
		free(container_of(pd, struct rvt_pd, ibpd));
	return fail_int(ret);
}

/* Same device, same share group (ibv_import_device). */
static bool ctx_shares(struct ibv_context *a, struct ibv_context *b)
{
	return to_uctx(a)->rdi == to_uctx(b)->rdi && to_uctx(a)->share_id == to_uctx(b)->share_id;
}

/*
 * ibv_import_pd: another ibv_pd, of context, for the PD with this handle in
 * a context context shares objects with (ibv_import_device). It uses the
 * PD's own protection: objects made on either are of one PD.
 */
struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	struct rvt_pd *real = rvt_find_pd(to_uctx(context)->rdi, pd_handle), *pd;

	if (!real || !ctx_shares(real->ibpd.context, context))
		return fail_ptr(-EINVAL);
	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return fail_ptr(-ENOMEM);
	pd->ibpd.context = context;
	pd->ibpd.handle = pd_handle;
	pd->real = real;
	return &pd->ibpd;
}

/* Drops the imported handle only; the PD stays. */
void ibv_unimport_pd(struct ibv_pd *pd)
{
	if (pd_is_import(pd))
		free(container_of(pd, struct rvt_pd, ibpd));
}

/* ------------------------------------------------------------------ */
/* Memory regions                                                     */
/* ------------------------------------------------------------------ */

/* Optional access bits are hints a provider may ignore (rdma-core drops
 * them when unsupported). */
static unsigned int strip_optional(unsigned int access)
{
	return access & ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	int err = 0;
	struct rvt_mregion *mr;

	mr = rvt_reg_mr(ibpd_to_rvtpd(pd), addr, length, iova, (int)strip_optional(access), &err);
	if (!mr)
		return fail_ptr(err);
	/* what ibv_import_mr names it by: the key (rereg keeps it) */
	mr->ibmr.handle = mr->lkey;
	mr->ibmr.pd = pd;
	return &mr->ibmr;
}

/*
 * Imported MRs (ibv_import_mr): a copy of the MR's ibv_mr for the
 * importing PD, listed so that dereg and unimport know them (the MR
 * structures proper are mr.c's, type-stable).
 */
struct mr_import {
	struct ibv_mr ibmr;
	struct mr_import *next;
};
static pthread_mutex_t mr_import_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mr_import *mr_imports;
static _Atomic int n_mr_imports;

/* Unlist mr if it is an imported one; true if it was. */
static bool mr_unlist_import(struct ibv_mr *mr)
{
	struct mr_import **pp;
	bool found = false;

	if (!atomic_load(&n_mr_imports))
		return false;
	pthread_mutex_lock(&mr_import_lock);
	for (pp = &mr_imports; *pp; pp = &(*pp)->next) {
		if (&(*pp)->ibmr == mr) {
			*pp = (*pp)->next;
			atomic_fetch_sub(&n_mr_imports, 1);
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&mr_import_lock);
	return found;
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	struct rvt_mregion *real;
	struct mr_import *im;

	real = rvt_lookup_key(&to_uctx(pd->context)->rdi->lkey_table, mr_handle);
	if (!real)
		return fail_ptr(-EINVAL);
	if (real->pd != ibpd_to_rvtpd(pd) || !ctx_shares(real->ibmr.context, pd->context)) {
		rvt_put_mr(real);
		return fail_ptr(-EINVAL);
	}
	im = calloc(1, sizeof(*im));
	if (!im) {
		rvt_put_mr(real);
		return fail_ptr(-ENOMEM);
	}
	im->ibmr = real->ibmr;
	im->ibmr.context = pd->context;
	im->ibmr.pd = pd;
	rvt_put_mr(real);
	pthread_mutex_lock(&mr_import_lock);
	im->next = mr_imports;
	mr_imports = im;
	atomic_fetch_add(&n_mr_imports, 1);
	pthread_mutex_unlock(&mr_import_lock);
	return &im->ibmr;
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
	if (mr_unlist_import(mr))
		free(container_of(mr, struct mr_import, ibmr));
}

#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uint64_t)(uintptr_t)addr, (unsigned int)access);
}

#undef ibv_reg_mr_iova
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
			       int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
		 int access)
{
	struct rvt_mregion *rmr = ibmr_to_rvtmr(mr);
	int ret;

	/* libibverbs' own input rules come first, with its error codes. */
	if ((flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) || !flags ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) ||
	    ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	/* pd means something only with CHANGE_PD (callers pass anything else) */
	ret = rvt_rereg_mr(rmr, flags,
			   pd && (flags & IBV_REREG_MR_CHANGE_PD) ? ibpd_to_rvtpd(pd) : NULL, addr, length,
			   (int)strip_optional((unsigned int)access));
	if (ret) {
		errno = -ret;
		return IBV_REREG_MR_ERR_CMD;
	}
	return 0;
}

/* An imported MR deregisters the MR it stands for (shared, as the
 * kernel's), then goes itself. */
int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct rvt_mregion *real;
	int ret;

	if (!mr_unlist_import(mr)) {
		ret = rvt_dereg_mr(ibmr_to_rvtmr(mr));
		if (!ret)
			urvt_dm_mr_deregistered(mr);
		return fail_int(ret);
	}
	real = rvt_lookup_key(&to_uctx(mr->context)->rdi->lkey_table, mr->lkey);
	ret = real ? 0 : -EINVAL;
	if (real) {
		rvt_put_mr(real);
		ret = rvt_dereg_mr(real);
		if (!ret)
			urvt_dm_mr_deregistered(&real->ibmr);
	}
	if (ret) {
		/* still listed: the caller may try again */
		struct mr_import *im = container_of(mr, struct mr_import, ibmr);

		pthread_mutex_lock(&mr_import_lock);
		im->next = mr_imports;
		mr_imports = im;
		atomic_fetch_add(&n_mr_imports, 1);
		pthread_mutex_unlock(&mr_import_lock);
		return fail_int(ret);
	}
	free(container_of(mr, struct mr_import, ibmr));
	return 0;
}

/* verbs_context->advise_mr (the header's inline ibv_advise_mr) */
int urvt_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		   struct ibv_sge *sg_list, uint32_t num_sge)
{
	return -rvt_advise_mr(ibpd_to_rvtpd(pd), (int)advice, flags, sg_list, num_sge);
}

/* Memory windows (core/mw.c): types 1 and 2; any other type EOPNOTSUPP. */
struct ibv_mw *urvt_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	int err = 0;
	struct rvt_mregion *mw = rvt_alloc_mw(ibpd_to_rvtpd(pd), type, &err);

	return mw ? &mw->ibmw : fail_ptr(err);
}

/*
 * ibv_bind_mw of a type 1 window (the header's inline wrapper has checked
 * the type, the MR's PD and addr/length without an MR): posted as an
 * IBV_WR_BIND_MW, with the next key (ibv_inc_rkey), which the window has
 * from now on; a failing bind completes with IBV_WC_MW_BIND_ERR.
 */
int urvt_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind)
{
	struct ibv_send_wr wr, *bad;
	int ret;

	if (mw->type != IBV_MW_TYPE_1)
		return EINVAL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = mw_bind->wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = mw_bind->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = mw_bind->bind_info;
	ret = urvt_post_send(qp, &wr, &bad);
	if (!ret)
		mw->rkey = wr.bind_mw.rkey;
	return ret;
}

int urvt_dealloc_mw(struct ibv_mw *mw)
{
	return fail_int(rvt_dealloc_mw(ibmw_to_rvtmw(mw)));
}

/* ------------------------------------------------------------------ */
/* Completion channels and CQs                                        */
/* ------------------------------------------------------------------ */
struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	int err = 0;
	struct urvt_comp_channel *ch = urvt_create_comp_channel(to_uctx(context), &err);

	return ch ? &ch->ibch : fail_ptr(err);
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	int ret = urvt_destroy_comp_channel(container_of(channel, struct urvt_comp_channel, ibch));

	if (ret) {
		errno = -ret;
		return -1;
	}
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct rvt_cq *rcq;
	int ret = urvt_get_cq_event(container_of(channel, struct urvt_comp_channel, ibch), &rcq);

	if (ret) {
		errno = -ret;
		return -1;
	}
	*cq = ibv_cq_ex_to_cq(&rcq->ibcq);
	*cq_context = rcq->ibcq.cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	int err = 0;
	struct rvt_cq *cq;

	cq = rvt_create_cq(to_uctx(context), cqe,
			   channel ? container_of(channel, struct urvt_comp_channel, ibch) : NULL,
			   comp_vector, NULL, &err);
	if (!cq)
		return fail_ptr(err);
	cq->ibcq.cq_context = cq_context;
	return ibv_cq_ex_to_cq(&cq->ibcq);
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	return fail_int(rvt_resize_cq(ibcq_to_rvtcq(cq), cqe));
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct rvt_cq *rcq = ibcq_to_rvtcq(cq);

	if (atomic_load(&rcq->usecnt))
		return EBUSY;
	/* Unread events are dropped; read ones must be acknowledged first
	 * (rdma-core waits for that). */
	urvt_cancel_async_events(rcq->uctx, rcq);
	if (rcq->channel)
		urvt_comp_channel_cancel(rcq->channel, rcq);
	pthread_mutex_lock(&cq->mutex);
	while (cq->comp_events_completed != atomic_load(&rcq->comp_events_reported) ||
	       cq->async_events_completed != atomic_load(&rcq->async_events_reported))
		pthread_cond_wait(&cq->cond, &cq->mutex);
	pthread_mutex_unlock(&cq->mutex);
	return fail_int(rvt_destroy_cq(rcq));
}

int urvt_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	return rvt_app_poll_cq(ibcq_to_rvtcq(cq), num_entries, wc);
}

int urvt_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return fail_int(rvt_req_notify_cq(ibcq_to_rvtcq(cq), solicited_only));
}

/* ---- ibv_create_cq_ex: the start/next/end_poll iterator ---- */
static inline struct rvt_cq *excq(struct ibv_cq_ex *cq)
{
	return container_of(cq, struct rvt_cq, ibcq);
}

static inline struct ibv_wc *ex_entry(struct rvt_cq *cq)
{
	return &cq->queue[cq->ex_cur & cq->mask];
}

/* Load the entry at ex_cur into the public wr_id/status fields, if any. */
static int ex_load(struct rvt_cq *cq)
{
	if (cq->ex_cur == load_acquire(&cq->head))
		return ENOENT;
	cq->ibcq.wr_id = ex_entry(cq)->wr_id;
	cq->ibcq.status = ex_entry(cq)->status;
	return 0;
}

static int ex_start_poll(struct ibv_cq_ex *ibcq, struct ibv_poll_cq_attr *attr)
{
	struct rvt_cq *cq = excq(ibcq);
	int ret;

	if (attr->comp_mask)
		return EINVAL;
	/* the plain way in: the lock is held until end_poll (an owner's
	 * fast section would have to say which way it came in) */
	urvt_bias_lock(&cq->c_lock);
	cq->ex_cur = cq->tail;
	ret = ex_load(cq);
	if (ret)
		urvt_bias_unlock(&cq->c_lock); /* no end_poll follows ENOENT */
	return ret;
}

/*
 * ex_cur stays on the entry handed out last until the next one exists:
 * end_poll then always consumes exactly that entry. (Stepping past it
 * first and letting end_poll guess from 'head' lost an entry whenever a
 * producer added one between next_poll's ENOENT and end_poll.)
 */
static int ex_next_poll(struct ibv_cq_ex *ibcq)
{
	struct rvt_cq *cq = excq(ibcq);

	if (cq->ex_cur + 1 == load_acquire(&cq->head))
		return ENOENT;
	cq->ex_cur++;
	store_release(&cq->tail, cq->ex_cur);
	return ex_load(cq);
}

static void ex_end_poll(struct ibv_cq_ex *ibcq)
{
	struct rvt_cq *cq = excq(ibcq);

	cq->ex_cur++;
	store_release(&cq->tail, cq->ex_cur);
	urvt_bias_unlock(&cq->c_lock);
}

static enum ibv_wc_opcode ex_read_opcode(struct ibv_cq_ex *cq)
{
	return ex_entry(excq(cq))->opcode;
}
static uint32_t ex_read_vendor_err(struct ibv_cq_ex *cq)
{
	return ex_entry(excq(cq))->vendor_err;
}
static uint32_t ex_read_byte_len(struct ibv_cq_ex *cq)
{
	return ex_entry(excq(cq))->byte_len;
}
static __be32 ex_read_imm_data(struct ibv_cq_ex *cq)
{
	return ex_entry(excq(cq))->imm_data;
}
static uint32_t ex_read_qp_num(struct ibv_cq_ex *cq)
{
	return ex_entry(excq(cq))->qp_num;
}
static uint32_t ex_read_src_qp(struct ibv_cq_ex *cq)
{
	return ex_entry(excq(cq))->src_qp;
}
static unsigned int ex_read_wc_flags(struct ibv_cq_ex *cq)
{
	return ex_entry(excq(cq))->wc_flags;
}
static uint32_t ex_read_slid(struct ibv_cq_ex *cq)
{
	return ex_entry(excq(cq))->slid;
}
static uint8_t ex_read_sl(struct ibv_cq_ex *cq)
{
	return ex_entry(excq(cq))->sl;
}
static uint8_t ex_read_dlid_path_bits(struct ibv_cq_ex *cq)
{
	return ex_entry(excq(cq))->dlid_path_bits;
}
/* The stamps cq.c took when the entry was made (device.c: the clock). */
static uint64_t ex_read_completion_ts(struct ibv_cq_ex *cq)
{
	struct rvt_cq *c = excq(cq);

	return c->ts[c->ex_cur & c->mask].clock;
}
static uint64_t ex_read_completion_wallclock_ns(struct ibv_cq_ex *cq)
{
	struct rvt_cq *c = excq(cq);

	return c->ts[c->ex_cur & c->mask].wall;
}

#define URVT_CQ_EX_WC_FLAGS                                                              \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |          \
	 IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |                \
	 IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |            \
	 IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)

struct ibv_cq_ex *urvt_create_cq_ex(struct ibv_context *context,
				    struct ibv_cq_init_attr_ex *attr)
{
	int err = 0;
	struct rvt_cq *cq;

	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
		return fail_ptr(-EINVAL);
	/* Flow tags, tag matching, VLANs: nothing to report them from. */
	if (attr->wc_flags & ~(uint64_t)URVT_CQ_EX_WC_FLAGS)
		return fail_ptr(-EOPNOTSUPP);
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED))
		return fail_ptr(-EOPNOTSUPP);
	cq = rvt_create_cq(to_uctx(context), (int)attr->cqe,
			   attr->channel ? container_of(attr->channel, struct urvt_comp_channel,
							ibch) : NULL,
			   (int)attr->comp_vector, attr, &err);
	if (!cq)
		return fail_ptr(err);
	cq->ibcq.cq_context = attr->cq_context;
	cq->ibcq.start_poll = ex_start_poll;
	cq->ibcq.next_poll = ex_next_poll;
	cq->ibcq.end_poll = ex_end_poll;
	cq->ibcq.read_opcode = ex_read_opcode;
	cq->ibcq.read_vendor_err = ex_read_vendor_err;
	cq->ibcq.read_wc_flags = ex_read_wc_flags;
	if (attr->wc_flags & IBV_WC_EX_WITH_BYTE_LEN)
		cq->ibcq.read_byte_len = ex_read_byte_len;
	if (attr->wc_flags & IBV_WC_EX_WITH_IMM)
		cq->ibcq.read_imm_data = ex_read_imm_data;
	if (attr->wc_flags & IBV_WC_EX_WITH_QP_NUM)
		cq->ibcq.read_qp_num = ex_read_qp_num;
	if (attr->wc_flags & IBV_WC_EX_WITH_SRC_QP)
		cq->ibcq.read_src_qp = ex_read_src_qp;
	if (attr->wc_flags & IBV_WC_EX_WITH_SLID)
		cq->ibcq.read_slid = ex_read_slid;
	if (attr->wc_flags & IBV_WC_EX_WITH_SL)
		cq->ibcq.read_sl = ex_read_sl;
	if (attr->wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS)
		cq->ibcq.read_dlid_path_bits = ex_read_dlid_path_bits;
	if (attr->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
		cq->ibcq.read_completion_ts = ex_read_completion_ts;
	if (attr->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
		cq->ibcq.read_completion_wallclock_ns = ex_read_completion_wallclock_ns;
	return &cq->ibcq;
}

/* ------------------------------------------------------------------ */
/* Shared receive queues                                              */
/* ------------------------------------------------------------------ */
struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	int err = 0;
	struct rvt_srq *srq = rvt_create_srq(ibpd_to_domain(pd), attr, &err);

	if (!srq)
		return fail_ptr(err);
	srq->ibsrq.srq_context = attr->srq_context;
	return &srq->ibsrq;
}

struct ibv_srq *urvt_create_srq_ex(struct ibv_context *context,
				   struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq_init_attr basic;

	if (attr->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
					  IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
					  IBV_SRQ_INIT_ATTR_TM))
		return fail_ptr(-EINVAL);
	if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC &&
	    attr->srq_type != IBV_SRQT_XRC)
		return fail_ptr(-EOPNOTSUPP);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd ||
	    attr->pd->context != context)
		return fail_ptr(-EINVAL);
	basic.srq_context = attr->srq_context;
	basic.attr = attr->attr;
	if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type == IBV_SRQT_XRC) {
		/* qp-semantics §16.2: an XRC SRQ has a domain and a CQ */
		const uint32_t need = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
		struct rvt_srq *srq;
		int err = 0;

		if ((attr->comp_mask & need) != need || !attr->xrcd || !attr->cq ||
		    attr->xrcd->context != context || attr->cq->context != context)
			return fail_ptr(-EINVAL);
		srq = rvt_create_xsrq(ibpd_to_rvtpd(attr->pd), ibxrcd_to_rvtxrcd(attr->xrcd),
				      ibcq_to_rvtcq(attr->cq), &basic, &err);
		if (!srq)
			return fail_ptr(err);
		srq->ibsrq.srq_context = attr->srq_context;
		attr->attr = basic.attr;
		return &srq->ibsrq;
	}
	{
		struct ibv_srq *srq = ibv_create_srq(attr->pd, &basic);
		if (srq)
			attr->attr = basic.attr;
		return srq;
	}
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask)
{
	return fail_int(rvt_modify_srq(ibsrq_to_rvtsrq(srq), srq_attr, srq_attr_mask));
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr)
{
	return fail_int(rvt_query_srq(ibsrq_to_rvtsrq(srq), srq_attr));
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct rvt_srq *rsrq = ibsrq_to_rvtsrq(srq);

	if (atomic_load(&rsrq->usecnt))
		return EBUSY;
	urvt_cancel_async_events(rsrq->uctx, rsrq);
	pthread_mutex_lock(&srq->mutex);
	while (srq->events_completed != atomic_load(&rsrq->async_events_reported))
		pthread_cond_wait(&srq->cond, &srq->mutex);
	pthread_mutex_unlock(&srq->mutex);
	return fail_int(rvt_destroy_srq(rsrq));
}

int urvt_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num)
{
	return fail_int(rvt_get_srq_num(ibsrq_to_rvtsrq(srq), srq_num));
}

/* ------------------------------------------------------------------ */
/* XRC domains (qp-semantics §16.1)                                   */
/* ------------------------------------------------------------------ */
struct ibv_xrcd *urvt_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *attr)
{
	int err = 0;
	struct rvt_xrcd *x = rvt_open_xrcd(to_uctx(context), attr, &err);

	if (!x)
		return fail_ptr(err);
	return &x->ibxrcd;
}

int urvt_close_xrcd(struct ibv_xrcd *xrcd)
{
	return fail_int(rvt_close_xrcd(ibxrcd_to_rvtxrcd(xrcd)));
}

int urvt_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	return fail_int(rvt_post_srq_recv(ibsrq_to_rvtsrq(srq), wr, bad_wr));
}

/* ------------------------------------------------------------------ */
/* Queue pairs                                                        */
/* ------------------------------------------------------------------ */
struct ibv_qp *urvt_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	int err = 0;
	struct rvt_qp *qp;

	if ((attr->comp_mask & IBV_QP_INIT_ATTR_PD) && attr->pd && attr->pd->context != context)
		return fail_ptr(-EINVAL);
	/* The ibv_wr_* API (qp_ex.c): operations are vetted before anything
	 * is built, as rxe does. */
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		err = urvt_qp_ex_check(attr);
		if (err)
			return fail_ptr(err);
	}
	qp = rvt_create_qp(to_uctx(context), attr, &err);
	if (!qp)
		return fail_ptr(err);
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		err = urvt_qp_ex_init(qp);
		if (err) {
			rvt_destroy_qp(qp);
			return fail_ptr(err);
		}
	}
	return &qp->ibqp_ex.qp_base;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex ex;
	struct ibv_qp *qp;

	memset(&ex, 0, sizeof(ex));
	ex.qp_context = qp_init_attr->qp_context;
	ex.send_cq = qp_init_attr->send_cq;
	ex.recv_cq = qp_init_attr->recv_cq;
	ex.srq = qp_init_attr->srq;
	ex.cap = qp_init_attr->cap;
	ex.qp_type = qp_init_attr->qp_type;
	ex.sq_sig_all = qp_init_attr->sq_sig_all;
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd;
	qp = urvt_create_qp_ex(pd->context, &ex);
	if (qp)
		qp_init_attr->cap = ex.cap;
	return qp;
}

/*
 * ibv_open_qp's handle of an XRC_RECV QP (qp-semantics §16.6): modify,
 * query and destroy reach the QP through it; 'handle' marks it (urvt's own
 * QPs leave that kernel field 0).
 */
#define URVT_QP_OPENED 0xffffffffu
struct urvt_qp_handle {
	struct ibv_qp ibqp;
	struct rvt_qp *qp;
};

static struct rvt_qp *to_rvtqp(struct ibv_qp *qp)
{
	if (unlikely(qp->handle == URVT_QP_OPENED))
		return container_of(qp, struct urvt_qp_handle, ibqp)->qp;
	return ibqp_to_rvtqp(qp);
}

struct ibv_qp *urvt_open_qp(struct ibv_context *context, struct ibv_qp_open_attr *attr)
{
	struct urvt_qp_handle *h = calloc(1, sizeof(*h));
	int err = 0;

	if (!h)
		return fail_ptr(-ENOMEM);
	h->qp = rvt_open_qp(to_uctx(context), attr, &err);
	if (!h->qp) {
		free(h);
		return fail_ptr(err);
	}
	h->ibqp.context = context;
	h->ibqp.qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : NULL;
	h->ibqp.qp_num = h->qp->qpn;
	h->ibqp.qp_type = IBV_QPT_XRC_RECV;
	h->ibqp.state = (enum ibv_qp_state)rvt_qp_state(h->qp);
	h->ibqp.handle = URVT_QP_OPENED;
	pthread_mutex_init(&h->ibqp.mutex, NULL);
	pthread_cond_init(&h->ibqp.cond, NULL);
	return &h->ibqp;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	int ret = rvt_query_qp(to_rvtqp(qp), attr, attr_mask, init_attr);

	if (!ret)
		qp->state = attr->qp_state;
	return fail_int(ret);
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	int ret = rvt_modify_qp(to_rvtqp(qp), attr, attr_mask);

	if (!ret && (attr_mask & IBV_QP_STATE))
		qp->state = attr->qp_state;
	return fail_int(ret);
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct rvt_qp *rqp = to_rvtqp(qp);
	void *wr_priv = rqp->wr_priv; /* the struct may be reused once destroyed */
	bool last;
	int ret;

	/* an XRC_RECV QP lives until its last handle goes (qp-semantics §16.6) */
	if (rqp->ibqp_ex.qp_base.qp_type == IBV_QPT_XRC_RECV) {
		last = rvt_xrc_handle_put(rqp);
		if (qp->handle == URVT_QP_OPENED) {
			pthread_mutex_destroy(&qp->mutex);
			pthread_cond_destroy(&qp->cond);
			free(container_of(qp, struct urvt_qp_handle, ibqp));
		}
		if (!last)
			return 0;
		qp = &rqp->ibqp_ex.qp_base;
	}

	pthread_mutex_lock(&qp->mutex);
	while (qp->events_completed != atomic_load(&rqp->async_events_reported))
		pthread_cond_wait(&qp->cond, &qp->mutex);
	pthread_mutex_unlock(&qp->mutex);
	/* the kernel's verbs core: not while attached to a multicast group */
	if (rvt_mcast_groups_of(rqp))
		return fail_int(-EBUSY);
	ret = rvt_destroy_qp(rqp);
	if (!ret)
		urvt_qp_ex_fini(wr_priv);
	return fail_int(ret);
}

int urvt_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	return fail_int(rvt_post_send(ibqp_to_rvtqp(qp), wr, bad_wr));
}

int urvt_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	return fail_int(rvt_post_recv(ibqp_to_rvtqp(qp), wr, bad_wr));
}

/* Data placement order is not promised beyond what IBTA requires. */
int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp;
	(void)op;
	(void)flags;
	return 0;
}

/* Enhanced connection establishment needs vendor options: not provided. */
int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

/* UD multicast (core/mcast.c, docs/multicast.md). */
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return fail_int(rvt_attach_mcast(ibqp_to_rvtqp(qp), gid, lid));
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return fail_int(rvt_detach_mcast(ibqp_to_rvtqp(qp), gid, lid));
}

/* ------------------------------------------------------------------ */
/* Address handles                                                    */
/* ------------------------------------------------------------------ */
struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	int err = 0;
	struct rvt_ah *ah = rvt_create_ah(ibpd_to_rvtpd(pd), attr, &err);

	return ah ? &ah->ibah : fail_ptr(err);
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
	return fail_int(rvt_destroy_ah(ibah_to_rvtah(ah)));
}

/*
 * The reply address of a UD receive: the GRH image holds the sender's IP
 * header (roce-wire §11). IPv4: 20 zero bytes then the IPv4 header;
 * IPv6: the IPv6 header.
 */
int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
			struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
	const uint8_t *g = (const uint8_t *)grh;
	static const uint8_t zero[20];
	struct rvt_dev_info *rdi = to_uctx(context)->rdi;

	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	ah_attr->is_global = 1;
	ah_attr->grh.sgid_index = 0;
	ah_attr->grh.hop_limit = 0xff;
	if (!memcmp(g, zero, sizeof(zero)) && (g[20] >> 4) == 4) {
		uint8_t *d = ah_attr->grh.dgid.raw;
		memset(d, 0, 10);
		d[10] = d[11] = 0xff;
		memcpy(d + 12, g + 20 + 12, 4); /* IPv4 source address */
		ah_attr->grh.traffic_class = g[21];
		if (memcmp(g + 20 + 16, &rdi->gid.raw[12], 4))
			return EINVAL; /* not addressed to our GID */
	} else {
		uint32_t vtf = be32toh(grh->version_tclass_flow);
		ah_attr->grh.dgid = grh->sgid;
		ah_attr->grh.traffic_class = (uint8_t)(vtf >> 20);
		ah_attr->grh.flow_label = vtf & 0xfffff;
		if (memcmp(grh->dgid.raw, rdi->gid.raw, 16))
			return EINVAL;
	}
	return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
				     uint8_t port_num)
{
	struct ibv_ah_attr attr;
	int ret = ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr);

	if (ret)
		return fail_ptr(-ret);
	return ibv_create_ah(pd, &attr);
}
