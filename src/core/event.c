/*
 * Asynchronous events and completion channels. Both are pipes so that the
 * application can poll()/epoll() their fd and set O_NONBLOCK on it, exactly
 * as with the kernel's uverbs files: the async pipe carries fixed-size event
 * records, a completion channel carries one CQ pointer per notification.
 * Writers never block (O_NONBLOCK write end); writes below PIPE_BUF are
 * atomic, so concurrent producers cannot interleave records.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rvt_api.h"

struct async_record {
	enum ibv_event_type type;
	void *obj;
};

static int make_pipe(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC))
		return -errno;
	/* Producers must never block; readers block unless they ask not to. */
	fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
	return 0;
}

int urvt_context_init(struct urvt_context *uctx, struct rvt_dev_info *rdi)
{
	int fds[2];
	int ret = make_pipe(fds);

	if (ret)
		return ret;
	uctx->rdi = rdi;
	uctx->vctx.context.async_fd = fds[0];
	uctx->async_wfd = fds[1];
	return 0;
}

void urvt_context_fini(struct urvt_context *uctx)
{
	close(uctx->vctx.context.async_fd);
	close(uctx->async_wfd);
}

/* Count an event the application read on its object, so destroy waits for its ack. */
static void count_reported(enum ibv_event_type type, void *obj)
{
	switch (type) {
	case IBV_EVENT_CQ_ERR: {
		struct rvt_cq *cq = obj;
		atomic_fetch_add(&cq->async_events_reported, 1);
		break;
	}
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct rvt_srq *srq = obj;
		atomic_fetch_add(&srq->async_events_reported, 1);
		break;
	}
	case IBV_EVENT_DEVICE_FATAL:
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		break;
	default: {
		struct rvt_qp *qp = obj;
		atomic_fetch_add(&qp->async_events_reported, 1);
		break;
	}
	}
}

void urvt_dispatch_async_event(struct urvt_context *uctx, enum ibv_event_type type,
			       void *obj)
{
	struct async_record rec;

	/* no uninitialised padding into the pipe (valgrind) */
	memset(&rec, 0, sizeof(rec));
	rec.type = type;
	rec.obj = obj;
	/* The object's reported count is bumped when the application reads
	 * the event (urvt_get_async_event), as the kernel's is: destroy must
	 * not wait for an event the application never read (perftest reads
	 * none, and a COMM_EST raised before its RTR->RTS hung destroy_qp). */
	if (write(uctx->async_wfd, &rec, sizeof(rec)) != (ssize_t)sizeof(rec)) {
		/* Pipe full: the application stopped reading events. */
	}
}

int urvt_get_async_event(struct urvt_context *uctx, struct ibv_async_event *event)
{
	struct async_record rec;
	ssize_t n = read(uctx->vctx.context.async_fd, &rec, sizeof(rec));

	if (n < 0)
		return -errno;
	if (n != (ssize_t)sizeof(rec))
		return -EIO;
	count_reported(rec.type, rec.obj);
	memset(event, 0, sizeof(*event));
	event->event_type = rec.type;
	switch (rec.type) {
	case IBV_EVENT_CQ_ERR:
		event->element.cq = ibv_cq_ex_to_cq(&((struct rvt_cq *)rec.obj)->ibcq);
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		event->element.srq = &((struct rvt_srq *)rec.obj)->ibsrq;
		break;
	case IBV_EVENT_DEVICE_FATAL:
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		event->element.port_num = 1;
		break;
	default:
		event->element.qp = &((struct rvt_qp *)rec.obj)->ibqp_ex.qp_base;
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

	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR: {
		struct ibv_cq *cq = event->element.cq;
		m = &cq->mutex;
		c = &cq->cond;
		done = &cq->async_events_completed;
		break;
	}
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct ibv_srq *srq = event->element.srq;
		m = &srq->mutex;
		c = &srq->cond;
		done = &srq->events_completed;
		break;
	}
	case IBV_EVENT_DEVICE_FATAL:
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		return;
	default: {
		struct ibv_qp *qp = event->element.qp;
		m = &qp->mutex;
		c = &qp->cond;
		done = &qp->events_completed;
		break;
	}
	}
	pthread_mutex_lock(m);
	++*done;
	pthread_cond_signal(c);
	pthread_mutex_unlock(m);
}

struct urvt_comp_channel *urvt_create_comp_channel(struct urvt_context *uctx, int *err)
{
	struct urvt_comp_channel *ch = calloc(1, sizeof(*ch));
	int fds[2];

	if (!ch) {
		*err = -ENOMEM;
		return NULL;
	}
	*err = make_pipe(fds);
	if (*err) {
		free(ch);
		return NULL;
	}
	ch->ibch.context = &uctx->vctx.context;
	ch->ibch.fd = fds[0];
	ch->ibch.refcnt = 0;
	ch->wfd = fds[1];
	return ch;
}

int urvt_destroy_comp_channel(struct urvt_comp_channel *ch)
{
	/* rdma-core refuses while CQs still use the channel. */
	if (__atomic_load_n(&ch->ibch.refcnt, __ATOMIC_ACQUIRE))
		return -EBUSY;
	close(ch->ibch.fd);
	close(ch->wfd);
	free(ch);
	return 0;
}

int urvt_get_cq_event(struct urvt_comp_channel *ch, struct rvt_cq **cq)
{
	struct rvt_cq *p;
	ssize_t n = read(ch->ibch.fd, &p, sizeof(p));

	if (n < 0)
		return -errno;
	if (n != (ssize_t)sizeof(p))
		return -EIO;
	atomic_fetch_add(&p->comp_events_reported, 1);
	*cq = p;
	return 0;
}
