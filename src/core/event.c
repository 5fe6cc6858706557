/*
 * Asynchronous events and completion channels.
 *
 * Each is a bounded queue of event records plus a pipe holding one byte per
 * queued record: the application can poll()/epoll() the pipe's read end and
 * set O_NONBLOCK on it, as with the kernel's uverbs files, and takes one
 * byte per record it reads. Producers never block (a full queue drops the
 * event). Destroying an object removes its queued, unread events (the
 * kernel drops them too) together with as many bytes, read through a second,
 * private non-blocking descriptor of the same pipe, so the fd does not stay
 * readable for events that are gone. An event counts as reported on its
 * object when the application reads it, under the queue lock, so destroy
 * either sees it counted (and waits for the ack) or has removed it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

#include "core/rvt_api.h"

#define EVQ_SIZE 1024u

struct evrec {
	enum ibv_event_type type;
	void *obj;                        /* NULL: cancelled */
};

struct urvt_evq {
	pthread_mutex_t lock;
	int efd;                          /* read end, handed to the application */
	int wfd;                          /* write end, O_NONBLOCK */
	int drain_fd;                     /* read end again, O_NONBLOCK, ours */
	int wait_fd;                      /* the transport's, for wait_event; -1: none yet */
	_Atomic bool wait_busy;           /* a thread waits through wait_event */
	uint32_t own_bytes;               /* bytes the waiter kept for itself (under lock) */
	uint32_t head, tail;
	struct evrec rec[EVQ_SIZE];
};

static struct urvt_evq *evq_create(int *err)
{
	struct urvt_evq *q = calloc(1, sizeof(*q));
	int fds[2];
	char path[64];

	if (!q) {
		*err = -ENOMEM;
		return NULL;
	}
	if (pipe2(fds, O_CLOEXEC)) {
		*err = -errno;
		free(q);
		return NULL;
	}
	q->efd = fds[0];
	q->wfd = fds[1];
	q->wait_fd = -1;
	fcntl(q->wfd, F_SETFL, fcntl(q->wfd, F_GETFL) | O_NONBLOCK);
	/* A second open file description of the read end: its O_NONBLOCK is
	 * ours, whatever the application sets on efd. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", q->efd);
	q->drain_fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	pthread_mutex_init(&q->lock, NULL);
	return q;
}

static void evq_destroy(struct urvt_evq *q)
{
	close(q->efd);
	close(q->wfd);
	if (q->drain_fd >= 0)
		close(q->drain_fd);
	if (q->wait_fd >= 0)
		close(q->wait_fd);
	pthread_mutex_destroy(&q->lock);
	free(q);
}

/* The queue this thread waits on in evq_take_byte: what it pushes there
 * itself (it received while it waited) skips the pipe. */
static _Thread_local struct urvt_evq *tls_waiting_q;

static bool evq_push(struct urvt_evq *q, enum ibv_event_type type, void *obj)
{
	char one = 1;

	pthread_mutex_lock(&q->lock);
	if (q->head - q->tail >= EVQ_SIZE) {
		pthread_mutex_unlock(&q->lock);
		return false; /* the application stopped reading events */
	}
	q->rec[q->head++ % EVQ_SIZE] = (struct evrec){ .type = type, .obj = obj };
	/* under the lock: bytes and records move together */
	if (tls_waiting_q == q)
		q->own_bytes++;
	else if (write(q->wfd, &one, 1) != 1) {
		/* cannot happen: the pipe holds more bytes than EVQ_SIZE */
	}
	pthread_mutex_unlock(&q->lock);
	return true;
}

enum evq_ready { EVQ_NONE, EVQ_OWN, EVQ_IN_PIPE };

/* Under one lock: a byte the waiter kept for itself (taken), else whether
 * a record's byte is in the pipe (or a reader is taking it); leaving
 * (all_to_pipe), the kept bytes go to the pipe, where poll() sees them. */
static enum evq_ready evq_take_own(struct urvt_evq *q, bool all_to_pipe)
{
	enum evq_ready r = EVQ_NONE;

	pthread_mutex_lock(&q->lock);
	if (q->own_bytes && !all_to_pipe) {
		q->own_bytes--;
		r = EVQ_OWN;
	} else if (q->head != q->tail) {
		r = EVQ_IN_PIPE;
	}
	for (; all_to_pipe && q->own_bytes; q->own_bytes--) {
		char one = 1;
		if (write(q->wfd, &one, 1) != 1)
			break; /* cannot happen, as in evq_push */
	}
	pthread_mutex_unlock(&q->lock);
	return r;
}

/*
 * One byte of the pipe, blocking unless the application set O_NONBLOCK.
 * On a completion channel (rdi given) that is empty and may block, the
 * transport receives in this thread while it waits (transport.h
 * wait_event): the byte is then there without a second thread's wake-up.
 * One thread at a time (wait_busy): the wait state is the channel's.
 */
static int evq_take_byte(struct urvt_evq *q, struct rvt_dev_info *rdi)
{
	const struct urvt_transport_ops *t = rdi ? rdi->transport : NULL;
	char b;

	if (t && t->wait_event && q->drain_fd >= 0 &&
	    !atomic_exchange_explicit(&q->wait_busy, true, memory_order_acquire)) {
		bool got = false;
		int ret = 0;
		tls_waiting_q = q;
		for (;;) {
			enum evq_ready r = evq_take_own(q, false);
			/* no record, no byte: a read that would find the pipe
			 * empty is not worth its system call */
			got = r == EVQ_OWN ||
			      (r == EVQ_IN_PIPE && read(q->drain_fd, &b, 1) == 1);
			if (got)
				break;
			/* only now, about to block: may it? */
			if (fcntl(q->efd, F_GETFL) & O_NONBLOCK)
				break;
			ret = t->wait_event(rdi, q->efd, &q->wait_fd);
			if (ret < 0)
				break;
		}
		tls_waiting_q = NULL;
		evq_take_own(q, true);
		atomic_store_explicit(&q->wait_busy, false, memory_order_release);
		if (got)
			return 0;
		/* interrupted, as the read would have been */
		if (ret == -EINTR)
			return ret;
	}
	return read(q->efd, &b, 1) < 0 ? -errno : 0;
}

/*
 * Take the next record: one byte then one record. A byte whose record was
 * removed by a destroy meanwhile finds the queue empty: wait for the next
 * one.
 */
static int evq_pop(struct urvt_evq *q, struct evrec *out, void (*count)(const struct evrec *),
		   struct rvt_dev_info *rdi)
{
	for (;;) {
		bool got = false;
		int ret = evq_take_byte(q, rdi);

		if (ret)
			return ret;
		pthread_mutex_lock(&q->lock);
		if (q->tail != q->head) {
			*out = q->rec[q->tail++ % EVQ_SIZE];
			count(out);
			got = true;
		}
		pthread_mutex_unlock(&q->lock);
		if (got)
			return 0;
	}
}

/* Remove obj's records, keeping the order of the others, and their bytes. */
static void evq_cancel(struct urvt_evq *q, const void *obj)
{
	uint32_t keep = q->tail, removed = 0;
	char sink[64];

	pthread_mutex_lock(&q->lock);
	keep = q->tail;
	for (uint32_t i = q->tail; i != q->head; i++) {
		struct evrec r = q->rec[i % EVQ_SIZE];
		if (r.obj == obj)
			removed++;
		else
			q->rec[keep++ % EVQ_SIZE] = r;
	}
	q->head = keep;
	for (; removed && q->own_bytes; removed--)
		q->own_bytes--;
	while (removed && q->drain_fd >= 0) {
		ssize_t n = read(q->drain_fd, sink, removed < sizeof(sink) ? removed : sizeof(sink));
		if (n <= 0)
			break; /* a reader already took the byte: it will find no record */
		removed -= (uint32_t)n;
	}
	pthread_mutex_unlock(&q->lock);
}

int urvt_context_init(struct urvt_context *uctx, struct rvt_dev_info *rdi)
{
	int err = 0;

	uctx->async_q = evq_create(&err);
	if (!uctx->async_q)
		return err;
	uctx->rdi = rdi;
	uctx->vctx.context.async_fd = uctx->async_q->efd;
	return 0;
}

void urvt_context_fini(struct urvt_context *uctx)
{
	evq_destroy(uctx->async_q);
}

/* What an async event is about: the element of struct ibv_async_event it fills. */
enum ev_class { EV_QP, EV_CQ, EV_SRQ, EV_PORT, EV_DEVICE };

static enum ev_class ev_class(enum ibv_event_type type)
{
	switch (type) {
	case IBV_EVENT_CQ_ERR:
		return EV_CQ;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return EV_SRQ;
	case IBV_EVENT_DEVICE_FATAL:
		return EV_DEVICE;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		return EV_PORT;
	default:
		return EV_QP;
	}
}

/* Count an event the application read on its object, so destroy waits for its ack. */
static void count_reported(const struct evrec *r)
{
	switch (ev_class(r->type)) {
	case EV_CQ:
		atomic_fetch_add(&((struct rvt_cq *)r->obj)->async_events_reported, 1);
		break;
	case EV_SRQ:
		atomic_fetch_add(&((struct rvt_srq *)r->obj)->async_events_reported, 1);
		break;
	case EV_QP:
		atomic_fetch_add(&((struct rvt_qp *)r->obj)->async_events_reported, 1);
		break;
	default:
		break;
	}
}

void urvt_dispatch_async_event(struct urvt_context *uctx, enum ibv_event_type type,
			       void *obj)
{
	evq_push(uctx->async_q, type, obj);
}

void urvt_cancel_async_events(struct urvt_context *uctx, const void *obj)
{
	evq_cancel(uctx->async_q, obj);
}

int urvt_get_async_event(struct urvt_context *uctx, struct ibv_async_event *event)
{
	struct evrec rec = { 0 };
	int ret = evq_pop(uctx->async_q, &rec, count_reported, NULL);

	if (ret)
		return ret;
	memset(event, 0, sizeof(*event));
	event->event_type = rec.type;
	switch (ev_class(rec.type)) {
	case EV_CQ:
		event->element.cq = ibv_cq_ex_to_cq(&((struct rvt_cq *)rec.obj)->ibcq);
		break;
	case EV_SRQ:
		event->element.srq = &((struct rvt_srq *)rec.obj)->ibsrq;
		break;
	case EV_QP:
		event->element.qp = &((struct rvt_qp *)rec.obj)->ibqp_ex.qp_base;
		break;
	case EV_PORT:
		event->element.port_num = 1;
		break;
	case EV_DEVICE:
		break;
	}
	return 0;
}

/* Ack: bump the object's completed count and wake a destroy waiting on it. */
void urvt_ack_async_event(struct ibv_async_event *event)
{
	pthread_mutex_t *m = NULL;
	pthread_cond_t *c = NULL;
	uint32_t *done = NULL;

	switch (ev_class(event->event_type)) {
	case EV_CQ:
		m = &event->element.cq->mutex;
		c = &event->element.cq->cond;
		done = &event->element.cq->async_events_completed;
		break;
	case EV_SRQ:
		m = &event->element.srq->mutex;
		c = &event->element.srq->cond;
		done = &event->element.srq->events_completed;
		break;
	case EV_QP:
		m = &event->element.qp->mutex;
		c = &event->element.qp->cond;
		done = &event->element.qp->events_completed;
		break;
	default:
		return;
	}
	pthread_mutex_lock(m);
	++*done;
	pthread_cond_signal(c);
	pthread_mutex_unlock(m);
}

struct urvt_comp_channel *urvt_create_comp_channel(struct urvt_context *uctx, int *err)
{
	struct urvt_comp_channel *ch = calloc(1, sizeof(*ch));

	if (!ch) {
		*err = -ENOMEM;
		return NULL;
	}
	ch->q = evq_create(err);
	if (!ch->q) {
		free(ch);
		return NULL;
	}
	ch->ibch.context = &uctx->vctx.context;
	ch->ibch.fd = ch->q->efd;
	ch->ibch.refcnt = 0;
	urvt_ctx_hold(ch->ibch.context);
	return ch;
}

int urvt_destroy_comp_channel(struct urvt_comp_channel *ch)
{
	/* rdma-core refuses while CQs still use the channel. */
	if (__atomic_load_n(&ch->ibch.refcnt, __ATOMIC_ACQUIRE))
		return -EBUSY;
	evq_destroy(ch->q);
	urvt_ctx_drop(ch->ibch.context);
	free(ch);
	return 0;
}

void urvt_comp_channel_notify(struct urvt_comp_channel *ch, struct rvt_cq *cq)
{
	evq_push(ch->q, IBV_EVENT_CQ_ERR /* unused */, cq);
}

void urvt_comp_channel_cancel(struct urvt_comp_channel *ch, const struct rvt_cq *cq)
{
	evq_cancel(ch->q, cq);
}

static void count_comp(const struct evrec *r)
{
	atomic_fetch_add(&((struct rvt_cq *)r->obj)->comp_events_reported, 1);
}

int urvt_get_cq_event(struct urvt_comp_channel *ch, struct rvt_cq **cq)
{
	struct evrec rec = { 0 };
	int ret = evq_pop(ch->q, &rec, count_comp, to_uctx(ch->ibch.context)->rdi);

	if (ret)
		return ret;
	*cq = rec.obj;
	return 0;
}
