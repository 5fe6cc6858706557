/* Completion queues (rdmavt cq.c, qp-semantics §11). */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/rvt_api.h"

static int ring_alloc(struct rvt_pd *domain, uint32_t cqe, struct ibv_wc **queue,
		      uint32_t *size, bool *custom)
{
	/* rxe rounds the ring up to a power of two and reports the slack as
	 * usable capacity; indices run free and are masked on access. */
	uint32_t n = urvt_roundup_pow2(cqe + 1);

	*queue = rvt_buf_alloc(domain, n, sizeof(**queue), RVT_RES_TYPE_CQ, custom);
	if (!*queue)
		return -ENOMEM;
	*size = n;
	return 0;
}

struct rvt_cq *rvt_create_cq(struct urvt_context *uctx, int cqe,
			     struct urvt_comp_channel *ch, int comp_vector,
			     const struct ibv_cq_init_attr_ex *ex, int *err)
{
	struct rvt_dev_info *rdi = uctx->rdi;
	struct rvt_cq *cq;
	int ret;

	if (cqe < 1 || (uint32_t)cqe > (uint32_t)rdi->dattr.max_cqe ||
	    comp_vector < 0 || comp_vector >= uctx->vctx.context.num_comp_vectors) {
		ret = -EINVAL;
		goto err;
	}
	if (atomic_fetch_add(&rdi->n_cqs, 1) >= URVT_MAX_CQ) {
		ret = -ENOMEM;
		goto err_count;
	}
	if (posix_memalign((void **)&cq, URVT_CACHELINE, sizeof(*cq))) {
		ret = -ENOMEM;
		goto err_count;
	}
	memset(cq, 0, sizeof(*cq));
	/* a parent domain's allocators make the ring (IBV_CQ_INIT_ATTR_MASK_PD) */
	if (ex && (ex->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD)) {
		cq->domain = ex->parent_domain ? ibpd_to_domain(ex->parent_domain) : NULL;
		if (!cq->domain || !cq->domain->parent ||
		    cq->domain->ibpd.context != &uctx->vctx.context) {
			ret = -EINVAL;
			goto err_free;
		}
	}
	ret = ring_alloc(cq->domain, (uint32_t)cqe, &cq->queue, &cq->ring_size, &cq->queue_custom);
	if (ret)
		goto err_free;
	cq->mask = cq->ring_size - 1;
	cq->cqe = cq->ring_size - 1;
	cq->uctx = uctx;
	cq->channel = ch;
	if (ex) {
		cq->ex = true;
		cq->wc_flags = ex->wc_flags;
		cq->ts_clock = ex->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
		cq->ts_wall = ex->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
	}
	if (cq->ts_clock || cq->ts_wall) {
		cq->ts = calloc(cq->ring_size, sizeof(*cq->ts));
		if (!cq->ts) {
			ret = -ENOMEM;
			goto err_free_queue;
		}
	}
	urvt_bias_init(&cq->p_lock);
	urvt_bias_init(&cq->c_lock);
	cq->ibcq.context = &uctx->vctx.context;
	cq->ibcq.channel = ch ? &ch->ibch : NULL;
	cq->ibcq.cqe = (int)cq->cqe;
	pthread_mutex_init(&cq->ibcq.mutex, NULL);
	pthread_cond_init(&cq->ibcq.cond, NULL);
	if (ch)
		__atomic_fetch_add(&ch->ibch.refcnt, 1, __ATOMIC_RELAXED);
	rvt_domain_get(cq->domain);
	urvt_ctx_hold(cq->ibcq.context);
	return cq;

err_free_queue:
	rvt_buf_free(cq->domain, cq->queue, RVT_RES_TYPE_CQ, cq->queue_custom);
err_free:
	free(cq);
err_count:
	atomic_fetch_sub(&rdi->n_cqs, 1);
err:
	*err = ret;
	return NULL;
}

int rvt_destroy_cq(struct rvt_cq *cq)
{
	struct rvt_dev_info *rdi = cq->uctx->rdi;

	if (atomic_load(&cq->usecnt))
		return -EBUSY;
	/* a receive batch that entered a CQE before the last QP went still
	 * holds its event: it signals it at the batch's end, soon */
	while (atomic_load_explicit(&cq->events_held, memory_order_acquire))
		sched_yield();
	urvt_cancel_async_events(cq->uctx, cq);
	if (cq->channel)
		urvt_comp_channel_cancel(cq->channel, cq);
	if (cq->channel)
		__atomic_fetch_sub(&cq->channel->ibch.refcnt, 1, __ATOMIC_RELEASE);
	urvt_spin_destroy(&cq->p_lock.lock);
	urvt_spin_destroy(&cq->c_lock.lock);
	pthread_mutex_destroy(&cq->ibcq.mutex);
	pthread_cond_destroy(&cq->ibcq.cond);
	rvt_buf_free(cq->domain, cq->queue, RVT_RES_TYPE_CQ, cq->queue_custom);
	rvt_domain_put(cq->domain);
	free(cq->ts);
	urvt_ctx_drop(&cq->uctx->vctx.context);
	free(cq);
	atomic_fetch_sub(&rdi->n_cqs, 1);
	return 0;
}

int rvt_resize_cq(struct rvt_cq *cq, int cqe)
{
	struct ibv_wc *queue, *old;
	struct rvt_cq_ts *ts = NULL, *old_ts;
	uint32_t size, head, tail, n;
	bool custom, old_custom;
	int ret;

	if (cqe < 1 || (uint32_t)cqe > (uint32_t)cq->uctx->rdi->dattr.max_cqe)
		return -EINVAL;
	ret = ring_alloc(cq->domain, (uint32_t)cqe, &queue, &size, &custom);
	if (ret)
		return ret;
	if (cq->ts) {
		ts = calloc(size, sizeof(*ts));
		if (!ts) {
			rvt_buf_free(cq->domain, queue, RVT_RES_TYPE_CQ, custom);
			return -ENOMEM;
		}
	}
	/* Both ends stop while the entries move, in order, to the new ring. */
	urvt_bias_lock(&cq->c_lock);
	urvt_bias_lock(&cq->p_lock);
	head = cq->head;
	tail = cq->tail;
	n = head - tail;
	if (n > size - 1) {
		urvt_bias_unlock(&cq->p_lock);
		urvt_bias_unlock(&cq->c_lock);
		rvt_buf_free(cq->domain, queue, RVT_RES_TYPE_CQ, custom);
		free(ts);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < n; i++) {
		queue[i] = cq->queue[(tail + i) & cq->mask];
		if (ts)
			ts[i] = cq->ts[(tail + i) & cq->mask];
	}
	old = cq->queue;
	old_ts = cq->ts;
	old_custom = cq->queue_custom;
	cq->queue = queue;
	cq->queue_custom = custom;
	cq->ts = ts;
	cq->ring_size = size;
	cq->mask = size - 1;
	cq->cqe = size - 1;
	cq->ibcq.cqe = (int)cq->cqe;
	cq->tail = 0;
	cq->head = n;
	urvt_bias_unlock(&cq->p_lock);
	urvt_bias_unlock(&cq->c_lock);
	rvt_buf_free(cq->domain, old, RVT_RES_TYPE_CQ, old_custom);
	free(old_ts);
	return 0;
}

/*
 * Remove every completion of QP qpn from the CQ, the others kept in order:
 * a QP taken to RESET starts a new life with nothing of its old one left to
 * poll (qp.c rvt_reset_qp; docs/deviations.md). Both ends stop, as for
 * resize.
 */
void rvt_cq_clean(struct rvt_cq *cq, uint32_t qpn)
{
	uint32_t tail, head, keep;

	urvt_bias_lock(&cq->c_lock);
	urvt_bias_lock(&cq->p_lock);
	tail = cq->tail;
	head = cq->head;
	keep = tail;
	for (uint32_t i = tail; i != head; i++) {
		const struct ibv_wc *wc = &cq->queue[i & cq->mask];

		if (wc->qp_num == qpn)
			continue;
		if (keep != i) {
			cq->queue[keep & cq->mask] = *wc;
			if (cq->ts)
				cq->ts[keep & cq->mask] = cq->ts[i & cq->mask];
		}
		keep++;
	}
	store_release(&cq->head, keep);
	urvt_bias_unlock(&cq->p_lock);
	urvt_bias_unlock(&cq->c_lock);
}

static void notify_channel(struct rvt_cq *cq)
{
	/* comp_events_reported counts events the application read
	 * (urvt_get_cq_event), as the kernel's does: destroy_cq must not wait
	 * for events still sitting unread in the channel. */
	if (cq->channel)
		urvt_comp_channel_notify(cq->channel, cq);
}

/*
 * Completion events held by this thread's receive batch. A responder
 * enters the receive CQE before it queues the ACK, and the ACK leaves at
 * the batch's end; an event signalled at once could wake the application,
 * which on a busy CPU preempts the receiver and answers before the ACK is
 * out. The peer then sees our reply before the ACK of its request, and an
 * application that waits for its send completion and then for its receive
 * on one channel (perftest's -e) gets the two events the other way round.
 * On a kernel driver the responder runs in softirq and its ACK leaves
 * before the woken thread runs. A CQ fires once per arm, so a batch holds
 * a few; past RVT_HELD_EVENTS they are signalled at once.
 */
#define RVT_HELD_EVENTS 32
static URVT_TLS struct {
	bool on;
	uint32_t n;
	struct rvt_cq *cq[RVT_HELD_EVENTS];
} held_events;

bool rvt_cq_events_hold(void)
{
	bool was = held_events.on;

	held_events.on = true;
	return was;
}

void rvt_cq_events_release(bool was_held)
{
	if (was_held)
		return;
	held_events.on = false;
	/* in the order the CQEs were entered */
	for (uint32_t i = 0; i < held_events.n; i++) {
		struct rvt_cq *cq = held_events.cq[i];

		notify_channel(cq);
		/* destroy_cq waits for this (rvt_destroy_cq) */
		atomic_fetch_sub_explicit(&cq->events_held, 1, memory_order_release);
	}
	held_events.n = 0;
}

uint32_t rvt_cq_events_held(void)
{
	return held_events.n;
}

void rvt_cq_events_first(uint32_t since, const struct rvt_cq *cq)
{
	struct rvt_cq *others[RVT_HELD_EVENTS];
	uint32_t n_others = 0, out = since;

	/* nearly always: no event, or one (nothing to order) */
	if (held_events.n - since < 2)
		return;

	/* a stable partition: each group keeps its order */
	for (uint32_t i = since; i < held_events.n; i++) {
		if (held_events.cq[i] == cq)
			held_events.cq[out++] = held_events.cq[i];
		else
			others[n_others++] = held_events.cq[i];
	}
	memcpy(&held_events.cq[out], others, n_others * sizeof(others[0]));
}

static void raise_event(struct rvt_cq *cq)
{
	if (held_events.on && held_events.n < RVT_HELD_EVENTS && cq->channel) {
		atomic_fetch_add_explicit(&cq->events_held, 1, memory_order_relaxed);
		held_events.cq[held_events.n++] = cq;
		return;
	}
	notify_channel(cq);
}

static inline uint64_t clock_ns(clockid_t id)
{
	struct timespec t;

	clock_gettime(id, &t); /* vDSO: no system call */
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Only CQs that asked for timestamps pay for them (one or two vDSO reads). */
static void cq_stamp(const struct rvt_cq *cq, struct rvt_cq_ts *ts)
{
	if (cq->ts_clock)
		ts->clock = clock_ns(CLOCK_MONOTONIC);
	if (cq->ts_wall)
		ts->wall = clock_ns(CLOCK_REALTIME);
}

bool rvt_cq_enter(struct rvt_cq *cq, const struct ibv_wc *wc, bool solicited)
{
	uint32_t head;
	int notify;
	bool fire = false, fast = urvt_bias_take_noted(&cq->p_lock);

	head = cq->head;
	/* CQ-P0: pairs with the consumer's release of tail (CQ-C2). */
	if (unlikely(head - load_acquire(&cq->tail) >= cq->cqe)) {
		bool first = !cq->overflow;
		cq->overflow = true;
		urvt_bias_leave(&cq->p_lock, fast);
		if (first)
			urvt_dispatch_async_event(cq->uctx, IBV_EVENT_CQ_ERR, cq);
		return false;
	}
	cq->queue[head & cq->mask] = *wc;
	if (unlikely(cq->ts))
		cq_stamp(cq, &cq->ts[head & cq->mask]);
	/* CQ-P1: publish the entry to poll_cq (CQ-C1). */
	store_release(&cq->head, head + 1);
	notify = atomic_load_explicit(&cq->notify, memory_order_relaxed);
	if (notify == RVT_CQ_NOTIFY_NEXT ||
	    (notify == RVT_CQ_NOTIFY_SOLICITED && (solicited || wc->status != IBV_WC_SUCCESS))) {
		atomic_store_explicit(&cq->notify, RVT_CQ_NOTIFY_NONE, memory_order_relaxed);
		fire = true;
	}
	urvt_bias_leave(&cq->p_lock, fast);
	if (fire)
		raise_event(cq);
	return true;
}

int rvt_poll_cq(struct rvt_cq *cq, int num_entries, struct ibv_wc *wc)
{
	uint32_t tail, avail;
	bool fast;
	int n;

	if (unlikely(num_entries < 0))
		return -EINVAL;
	fast = urvt_bias_take_noted(&cq->c_lock);
	tail = cq->tail;
	/* CQ-C1: pairs with the producer's release of head (CQ-P1). */
	avail = load_acquire(&cq->head) - tail;
	n = (int)avail < num_entries ? (int)avail : num_entries;
	for (int i = 0; i < n; i++)
		wc[i] = cq->queue[(tail + (uint32_t)i) & cq->mask];
	/* CQ-C2: the slots may be reused once the producer sees this (CQ-P0). */
	store_release(&cq->tail, tail + (uint32_t)n);
	urvt_bias_leave(&cq->c_lock, fast);
	return n;
}

int rvt_app_poll_cq(struct rvt_cq *cq, int num_entries, struct ibv_wc *wc)
{
	const struct urvt_transport_ops *t = cq->uctx->rdi->transport;

	if (t && t->poll_cq)
		return t->poll_cq(cq, num_entries, wc);
	return rvt_poll_cq(cq, num_entries, wc);
}

int rvt_req_notify_cq(struct rvt_cq *cq, int solicited_only)
{
	const struct urvt_transport_ops *t = cq->uctx->rdi->transport;
	int want = solicited_only ? RVT_CQ_NOTIFY_SOLICITED : RVT_CQ_NOTIFY_NEXT;
	bool fast;

	/* the application will block: the transport must receive for it */
	if (t && t->app_blocks)
		t->app_blocks(cq->uctx->rdi);
	/* the way in completions take: arming does not revoke their owner */
	fast = urvt_bias_take(&cq->p_lock);
	/* IBTA C11-31/32: an armed NEXT is never downgraded to SOLICITED. */
	if (atomic_load_explicit(&cq->notify, memory_order_relaxed) != RVT_CQ_NOTIFY_NEXT)
		atomic_store_explicit(&cq->notify, want, memory_order_relaxed);
	urvt_bias_leave(&cq->p_lock, fast);
	return 0;
}
