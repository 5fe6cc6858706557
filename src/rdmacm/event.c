/*
 * Event channels. The fd of a channel is an eventfd that is readable
 * exactly while the channel has queued events (it holds a count of one),
 * so select/poll/epoll on channel->fd work as on the kernel's rdma_cm
 * file, and an application that set O_NONBLOCK on it gets EAGAIN from
 * rdma_get_cm_event on an empty channel.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rdmacm/cma_priv.h"

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct ucma_channel *ch;
	int ret = cma_init();

	if (ret) {
		errno = -ret;
		return NULL;
	}
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ch->ch.fd = eventfd(0, EFD_CLOEXEC);
	if (ch->ch.fd < 0) {
		free(ch);
		return NULL;
	}
	return &ch->ch;
}

/*
 * A thread may be in rdma_get_cm_event on the channel (rping of rdma-core
 * 44 destroys it under its CM thread at exit): on the kernel's file that
 * read stays blocked. Here the thread may have been woken by the last
 * event and wait for cma_lock: the channel stays allocated until the last
 * such thread has seen it dead; that thread frees it and then stays
 * blocked, as the read would. (One still in poll() keeps the eventfd's
 * file open and is not woken by the close: the channel is left to it.)
 */
void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct ucma_channel *ch = to_uch(channel);
	bool in_use;

	pthread_mutex_lock(&cma_lock);
	while (ch->head) {
		struct cma_event *e = ch->head;
		ch->head = e->next;
		cma_event_free(e);
	}
	ch->tail = NULL;
	ch->dead = true;
	in_use = ch->waiters != 0;
	close(ch->ch.fd);
	pthread_mutex_unlock(&cma_lock);
	if (!in_use)
		free(ch);
}

static void signal_set(struct ucma_channel *ch, bool on)
{
	uint64_t v = 1;

	if (on == ch->signalled)
		return;
	ch->signalled = on;
	/* the count is 0 or 1, so neither call can block */
	if (on) {
		if (write(ch->ch.fd, &v, sizeof(v)) != sizeof(v))
			ch->signalled = false;
	} else if (read(ch->ch.fd, &v, sizeof(v)) != sizeof(v)) {
		ch->signalled = true;
	}
}

struct cma_event *cma_event_alloc(struct rdma_id_private *owner, struct rdma_cm_id *id,
				  enum rdma_cm_event_type type, int status)
{
	struct cma_event *evt = calloc(1, sizeof(*evt));

	if (!evt)
		return NULL;
	evt->id_priv = owner;
	evt->event.id = id;
	evt->event.event = type;
	evt->event.status = status;
	return evt;
}

void cma_event_free(struct cma_event *evt)
{
	free(evt);
}

void cma_event_queue(struct ucma_channel *ch, struct cma_event *evt)
{
	CM_DBG("urvt-cm[%d]: event %s status %d id %p", (int)getpid(),
	       rdma_event_str(evt->event.event), evt->event.status, (void *)evt->event.id);
	evt->next = NULL;
	if (ch->tail)
		ch->tail->next = evt;
	else
		ch->head = evt;
	ch->tail = evt;
	signal_set(ch, true);
}

static void unlink_after(struct ucma_channel *ch, struct cma_event *prev, struct cma_event *e)
{
	if (prev)
		prev->next = e->next;
	else
		ch->head = e->next;
	if (ch->tail == e)
		ch->tail = prev;
	e->next = NULL;
}

void cma_event_discard(struct rdma_id_private *id_priv)
{
	struct ucma_channel *ch = to_uch(id_priv->id.channel);
	struct cma_event *e, *prev = NULL, *next;

	if (!ch)
		return;
	for (e = ch->head; e; e = next) {
		next = e->next;
		if (e->id_priv != id_priv && e->event.id != &id_priv->id) {
			prev = e;
			continue;
		}
		unlink_after(ch, prev, e);
		if (e->event.event == RDMA_CM_EVENT_CONNECT_REQUEST)
			e->id_priv->backlog++; /* as if the listener had taken it */
		/* a connection nobody will accept: leave it as the kernel
		 * does when its listener goes */
		if (e->event.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->event.id != &id_priv->id) {
			struct rdma_id_private *conn = to_id_priv(e->event.id);
			cma_destroy(conn);
			cma_id_free(conn);
		}
		cma_event_free(e);
	}
	if (!ch->head)
		signal_set(ch, false);
}

void cma_event_move(struct rdma_id_private *id_priv, struct ucma_channel *to)
{
	struct ucma_channel *from = to_uch(id_priv->id.channel);
	struct cma_event *e, *prev = NULL, *next;

	for (e = from->head; e; e = next) {
		next = e->next;
		if (e->id_priv != id_priv) {
			prev = e;
			continue;
		}
		unlink_after(from, prev, e);
		cma_event_queue(to, e);
	}
	if (!from->head)
		signal_set(from, false);
}

/* The channel was destroyed while this thread waited on it (cma_lock
 * held): the last waiter frees it; each stays blocked, holding nothing. */
static _Noreturn void channel_gone(struct ucma_channel *ch)
{
	if (!ch->waiters)
		free(ch);
	pthread_mutex_unlock(&cma_lock);
	for (;;)
		pause();
}

int cma_event_get(struct ucma_channel *ch, struct cma_event **out)
{
	for (;;) {
		struct pollfd p = { .fd = ch->ch.fd, .events = POLLIN };
		struct cma_event *e = ch->head;
		int fl, n;

		if (e) {
			ch->head = e->next;
			if (!ch->head) {
				ch->tail = NULL;
				signal_set(ch, false);
			}
			e->next = NULL;
			*out = e;
			return 0;
		}
		fl = fcntl(ch->ch.fd, F_GETFL);
		if (fl >= 0 && (fl & O_NONBLOCK))
			return -EAGAIN;
		/* wait for the fd without the lock (as the kernel's read does) */
		ch->waiters++;
		pthread_mutex_unlock(&cma_lock);
		n = poll(&p, 1, -1);
		pthread_mutex_lock(&cma_lock);
		ch->waiters--;
		if (ch->dead)
			channel_gone(ch); /* does not return */
		if (n < 0 && errno == EINTR)
			return -EINTR;
	}
}

void cma_event_complete(struct rdma_id_private *id_priv)
{
	id_priv->events_completed++;
	pthread_cond_broadcast(&id_priv->cond);
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct cma_event *evt;

	if (!event) {
		errno = EINVAL;
		return -1;
	}
	evt = (struct cma_event *)event;
	pthread_mutex_lock(&cma_lock);
	cma_event_complete(evt->id_priv);
	pthread_mutex_unlock(&cma_lock);
	cma_event_free(evt);
	return 0;
}
