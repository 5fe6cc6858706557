/*
 * The IB CM state machine (cm.h). Follows the kernel's cm.c message for
 * message, so a peer running Linux's CM (rxe, a RoCE NIC) sees the same
 * exchanges; differences are noted where they are made:
 *
 *  - a message that names an existing connection must come from that
 *    connection's peer GID (and a DREQ must name our QPN): a third party
 *    cannot forge REP/RTU/DREQ/DREP/REJ/MRA for someone else's connection;
 *  - the number of cm_ids is bounded (CM_MAX_IDS): a REQ flood beyond it is
 *    dropped, counted;
 *  - an outstanding MAD stops being retransmitted once the state it was
 *    sent in is left (REJ, timewait), instead of running out its retries.
 *
 * Lifetime: a cm_id is freed only by the reap work on the progress thread
 * (cm_reap), after its timers were deleted: a timer handler that is about
 * to run finds it marked dead under the lock and returns.
 */
#include "rdmacm/cm.h"

#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <sys/random.h>

#include "base/compiler.h"
#include "base/progress.h"
#include "base/timer.h"

#define CM_MAX_IDS 65536
#define CM_HASH_BITS 12
#define CM_HASH_SIZE (1u << CM_HASH_BITS)
#define CM_HI_TID 0x75727674u             /* "urvt": our half of every TID */
/* A REQ / SIDR_REQ for a service nobody listens on waits this long for a
 * listener before it is rejected (docs/rdmacm.md: start-up races) */
#define CM_UNMATCHED_NS (250ull * 1000000)
#define CM_UNMATCHED_MAX 64

/* sets of states, for the checks handlers open with */
#define CM_STATE(s) (1u << (s))
#define CM_ANY_STATE (~0u)

const char *const ib_cm_state_str[IB_CM_NSTATES] = {
	[IB_CM_IDLE] = "IDLE",
	[IB_CM_LISTEN] = "LISTEN",
	[IB_CM_REQ_SENT] = "REQ_SENT",
	[IB_CM_REQ_RCVD] = "REQ_RCVD",
	[IB_CM_MRA_REQ_SENT] = "MRA_REQ_SENT",
	[IB_CM_MRA_REQ_RCVD] = "MRA_REQ_RCVD",
	[IB_CM_REP_SENT] = "REP_SENT",
	[IB_CM_REP_RCVD] = "REP_RCVD",
	[IB_CM_MRA_REP_SENT] = "MRA_REP_SENT",
	[IB_CM_MRA_REP_RCVD] = "MRA_REP_RCVD",
	[IB_CM_ESTABLISHED] = "ESTABLISHED",
	[IB_CM_DREQ_SENT] = "DREQ_SENT",
	[IB_CM_DREQ_RCVD] = "DREQ_RCVD",
	[IB_CM_TIMEWAIT] = "TIMEWAIT",
	[IB_CM_SIDR_REQ_SENT] = "SIDR_REQ_SENT",
	[IB_CM_SIDR_REQ_RCVD] = "SIDR_REQ_RCVD",
};

struct cm_id_private {
	struct ib_cm_id id;
	struct cm_device *dev;

	/* tables (cm_device), each with its own link */
	struct cm_id_private *lid_next;   /* local ID */
	struct cm_id_private *rid_next;   /* (remote ID, remote CA GUID) */
	struct cm_id_private *rqp_next;   /* (remote QPN, remote CA GUID) */
	struct cm_id_private *sidr_next;  /* SIDR_REQs being answered */
	struct cm_id_private *listen_next;
	struct cm_id_private *reap_next;
	bool in_rid, in_rqp, in_sidr, in_listen;
	bool user_gone;                   /* ib_destroy_cm_id called */
	bool dead;                        /* on the reap list */

	/* the one message awaiting a response (the kernel's cm_id_priv->msg) */
	struct cm_mad msg;
	bool msg_active;
	enum ib_cm_state msg_state;       /* the state it belongs to */
	unsigned int msg_retries;         /* sends left after this one */
	uint64_t msg_timeout_ms;
	struct urvt_timer msg_timer;
	struct urvt_timer tw_timer;

	union ibv_gid dgid;               /* the peer's GID: MADs go to, and come from, it */
	struct cm_path path;
	uint8_t av_timeout;               /* the QP's local ACK timeout */
	uint64_t tid;
	uint64_t remote_ca_guid;
	uint32_t local_qpn, remote_qpn, sq_psn, rq_psn;
	uint64_t timeout_ms;
	uint16_t pkey;
	uint8_t path_mtu;
	uint8_t max_cm_retries, responder_resources, initiator_depth;
	uint8_t retry_count, rnr_retry_count, service_timeout, target_ack_delay;
	enum ibv_qp_type qp_type;
	/* kept for repeating an RTU, MRA or DREP to a duplicate */
	uint8_t private_data[IB_CM_RTU_PRIVATE_DATA_SIZE];
	uint8_t private_data_len;
};

struct cm_unmatched {
	struct cm_mad m;
	union ibv_gid sgid;
	uint64_t deadline_ns;
};

struct cm_device {
	const struct cm_dev_ops *ops;
	void *ops_ctx;
	struct urvt_progress *progress;
	pthread_mutex_t *lock;
	union ibv_gid gid;
	uint64_t node_guid;               /* network order, as on the wire */
	uint8_t ack_delay;

	uint32_t next_id, id_operand;     /* local IDs: counter ^ random */
	struct cm_id_private *lid[CM_HASH_SIZE];
	struct cm_id_private *rid[CM_HASH_SIZE];
	struct cm_id_private *rqp[CM_HASH_SIZE];
	struct cm_id_private *sidr[CM_HASH_SIZE];
	struct cm_id_private *listen;
	struct cm_id_private *reap;
	struct urvt_work reap_work;
	/* requests waiting for a listener, in arrival order */
	struct cm_unmatched unmatched[CM_UNMATCHED_MAX];
	unsigned int n_unmatched;
	struct urvt_timer unmatched_timer;
	struct cm_counters ctr;
};

int cm_debug;

void cm_dbg_printf(const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	/* one write: lines of two processes sharing a terminal stay whole */
	if (write(STDERR_FILENO, buf, (size_t)n) < 0)
		return;
}

static void dbg_mad(const char *dir, const union ibv_gid *gid, const struct cm_mad *m)
{
	const uint8_t *g = gid->raw;

	CM_DBG("urvt-cm[%d]: %s %s %s %u.%u.%u.%u comm %08x/%08x", (int)getpid(), dir,
	       cm_attr_str(cm_mad_attr_id(m)), *dir == 't' ? "to" : "from", g[12], g[13], g[14],
	       g[15], (unsigned int)cm_get(m, CM_REQ_LOCAL_COMM_ID),
	       (unsigned int)cm_get(m, CM_REJ_REMOTE_COMM_ID));
}

static inline uint8_t min_u8(uint8_t a, uint8_t b)
{
	return a < b ? a : b;
}

static inline struct cm_id_private *to_priv(struct ib_cm_id *id)
{
	return container_of(id, struct cm_id_private, id);
}

static uint32_t hash32(uint64_t v)
{
	v *= 0x9e3779b97f4a7c15ull;
	return (uint32_t)(v >> (64 - CM_HASH_BITS));
}

/* ------------------------------------------------------------------ */
/* Tables                                                             */
/* ------------------------------------------------------------------ */

/* Unlink p from the chain at *head (via its link at offset off). */
#define CHAIN_DEL(headp, p, link)                                                  \
	do {                                                                       \
		struct cm_id_private **pp_ = (headp);                              \
		while (*pp_ && *pp_ != (p))                                        \
			pp_ = &(*pp_)->link;                                       \
		if (*pp_)                                                          \
			*pp_ = (p)->link;                                          \
		(p)->link = NULL;                                                  \
	} while (0)

static struct cm_id_private *lid_find(struct cm_device *dev, uint32_t local_id)
{
	struct cm_id_private *p = dev->lid[hash32(local_id)];

	while (p && p->id.local_id != local_id)
		p = p->lid_next;
	return p;
}

/* The kernel's cm_acquire_id: the id owning local_id whose remote ID is remote_id. */
static struct cm_id_private *cm_acquire_id(struct cm_device *dev, uint32_t local_id,
					   uint32_t remote_id)
{
	struct cm_id_private *p = lid_find(dev, local_id);

	if (!p || p->dead || p->id.remote_id != remote_id)
		return NULL;
	return p;
}

static uint32_t rid_hash(uint32_t remote_id, uint64_t guid)
{
	return hash32(((uint64_t)remote_id << 32) ^ guid);
}

static struct cm_id_private *rid_find(struct cm_device *dev, uint32_t remote_id, uint64_t guid)
{
	struct cm_id_private *p = dev->rid[rid_hash(remote_id, guid)];

	while (p && !(p->id.remote_id == remote_id && p->remote_ca_guid == guid))
		p = p->rid_next;
	return p;
}

/* Insert p by (its remote ID, remote CA GUID); the existing one if taken. */
static struct cm_id_private *rid_insert(struct cm_id_private *p)
{
	struct cm_device *dev = p->dev;
	struct cm_id_private *cur = rid_find(dev, p->id.remote_id, p->remote_ca_guid);
	uint32_t h = rid_hash(p->id.remote_id, p->remote_ca_guid);

	if (cur)
		return cur;
	p->rid_next = dev->rid[h];
	dev->rid[h] = p;
	p->in_rid = true;
	return NULL;
}

static struct cm_id_private *rqp_insert(struct cm_id_private *p)
{
	struct cm_device *dev = p->dev;
	uint32_t h = rid_hash(p->remote_qpn, p->remote_ca_guid);
	struct cm_id_private *cur = dev->rqp[h];

	while (cur && !(cur->remote_qpn == p->remote_qpn &&
			cur->remote_ca_guid == p->remote_ca_guid))
		cur = cur->rqp_next;
	if (cur)
		return cur;
	p->rqp_next = dev->rqp[h];
	dev->rqp[h] = p;
	p->in_rqp = true;
	return NULL;
}

/* The kernel's cm_cleanup_timewait: out of the remote ID and QPN tables. */
static void cm_cleanup_remote(struct cm_id_private *p)
{
	struct cm_device *dev = p->dev;

	if (p->in_rid) {
		CHAIN_DEL(&dev->rid[rid_hash(p->id.remote_id, p->remote_ca_guid)], p, rid_next);
		p->in_rid = false;
	}
	if (p->in_rqp) {
		CHAIN_DEL(&dev->rqp[rid_hash(p->remote_qpn, p->remote_ca_guid)], p, rqp_next);
		p->in_rqp = false;
	}
}

static uint32_t sidr_hash(uint32_t remote_id, const union ibv_gid *gid)
{
	uint64_t g;

	memcpy(&g, gid->raw + 8, sizeof(g));
	return rid_hash(remote_id, g);
}

static struct cm_id_private *sidr_insert(struct cm_id_private *p)
{
	struct cm_device *dev = p->dev;
	uint32_t h = sidr_hash(p->id.remote_id, &p->dgid);
	struct cm_id_private *cur = dev->sidr[h];

	while (cur && !(cur->id.remote_id == p->id.remote_id &&
			!memcmp(&cur->dgid, &p->dgid, sizeof(p->dgid))))
		cur = cur->sidr_next;
	if (cur)
		return cur;
	p->sidr_next = dev->sidr[h];
	dev->sidr[h] = p;
	p->in_sidr = true;
	return NULL;
}

static void sidr_remove(struct cm_id_private *p)
{
	if (!p->in_sidr)
		return;
	CHAIN_DEL(&p->dev->sidr[sidr_hash(p->id.remote_id, &p->dgid)], p, sidr_next);
	p->in_sidr = false;
}

static struct cm_id_private *cm_find_listen(struct cm_device *dev, uint64_t service_id)
{
	for (struct cm_id_private *p = dev->listen; p; p = p->listen_next)
		if (p->id.service_id == service_id && !p->dead)
			return p;
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Sending                                                            */
/* ------------------------------------------------------------------ */
static int cm_send(struct cm_device *dev, const union ibv_gid *dgid, const struct cm_mad *m)
{
	int ret = dev->ops->send(dev->ops_ctx, dgid, m);

	dbg_mad(ret ? "tx-failed" : "tx", dgid, m);
	if (ret)
		dev->ctr.tx_errors++;
	else
		dev->ctr.tx++;
	return ret;
}

static uint64_t cm_form_tid(struct cm_id_private *p)
{
	return (uint64_t)CM_HI_TID << 32 | p->id.local_id;
}

static void cm_arm_msg(struct cm_id_private *p)
{
	urvt_timer_mod(p->dev->progress, &p->msg_timer,
		       urvt_now_ns() + p->msg_timeout_ms * 1000000ull);
}

/* Send p->msg, expecting a response while p stays in state; resent up to
 * max_cm_retries times, timeout_ms apart (a lost send is one more retry). */
static void cm_send_msg(struct cm_id_private *p, enum ib_cm_state state)
{
	p->msg_active = true;
	p->msg_state = state;
	p->msg_retries = p->max_cm_retries;
	p->msg_timeout_ms = p->timeout_ms;
	cm_send(p->dev, &p->dgid, &p->msg);
	cm_arm_msg(p);
}

static void cm_cancel_msg(struct cm_id_private *p)
{
	p->msg_active = false;
	urvt_timer_del(p->dev->progress, &p->msg_timer);
}

static void save_private_data(struct cm_id_private *p, const void *data, uint8_t len)
{
	if (len > sizeof(p->private_data))
		len = sizeof(p->private_data);
	if (data && len)
		memcpy(p->private_data, data, len);
	p->private_data_len = data ? len : 0;
}

/* ------------------------------------------------------------------ */
/* Lifetime                                                           */
/* ------------------------------------------------------------------ */
static void cm_reap(struct urvt_work *w)
{
	struct cm_device *dev = container_of(w, struct cm_device, reap_work);
	struct cm_id_private *list;

	pthread_mutex_lock(dev->lock);
	list = dev->reap;
	dev->reap = NULL;
	pthread_mutex_unlock(dev->lock);
	while (list) {
		struct cm_id_private *p = list;
		list = p->reap_next;
		/* on the progress thread, outside any handler: returns at once */
		urvt_timer_del_sync(dev->progress, &p->msg_timer);
		urvt_timer_del_sync(dev->progress, &p->tw_timer);
		free(p);
	}
}

/* Out of every table, timers off, onto the reap list. */
static void cm_free_id(struct cm_id_private *p)
{
	struct cm_device *dev = p->dev;

	if (p->dead)
		return;
	p->dead = true;
	cm_cancel_msg(p);
	urvt_timer_del(dev->progress, &p->tw_timer);
	cm_cleanup_remote(p);
	sidr_remove(p);
	CHAIN_DEL(&dev->lid[hash32(p->id.local_id)], p, lid_next);
	if (p->in_listen) {
		CHAIN_DEL(&dev->listen, p, listen_next);
		p->in_listen = false;
	}
	dev->ctr.ids--;
	p->reap_next = dev->reap;
	dev->reap = p;
	urvt_progress_queue_work(dev->progress, &dev->reap_work);
}

static void cm_timeout_handler(struct urvt_timer *t);
static void cm_timewait_handler(struct urvt_timer *t);

static struct cm_id_private *cm_alloc_id(struct cm_device *dev, ib_cm_handler handler,
					 void *context, int *err)
{
	struct cm_id_private *p;
	uint32_t id;

	if (dev->ctr.ids >= CM_MAX_IDS) {
		*err = -ENOMEM;
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		*err = -ENOMEM;
		return NULL;
	}
	/* cyclic, never 0, never one in use (the kernel's xa_alloc_cyclic) */
	do {
		id = dev->next_id++ ^ dev->id_operand;
	} while (!id || lid_find(dev, id));
	p->dev = dev;
	p->id.cm_handler = handler;
	p->id.context = context;
	p->id.local_id = id;
	p->id.state = IB_CM_IDLE;
	urvt_timer_init(&p->msg_timer, cm_timeout_handler);
	urvt_timer_init(&p->tw_timer, cm_timewait_handler);
	p->lid_next = dev->lid[hash32(id)];
	dev->lid[hash32(id)] = p;
	dev->ctr.ids++;
	return p;
}

struct ib_cm_id *ib_create_cm_id(struct cm_device *dev, ib_cm_handler handler, void *context,
				 int *err)
{
	struct cm_id_private *p = cm_alloc_id(dev, handler, context, err);

	return p ? &p->id : NULL;
}

/* The kernel's cm_reset_to_idle. */
static void cm_reset_to_idle(struct cm_id_private *p)
{
	p->id.state = IB_CM_IDLE;
	cm_cancel_msg(p);
	cm_cleanup_remote(p);
}

/* The kernel's cm_enter_timewait: convert(av timeout) ms, then IDLE. */
static void cm_enter_timewait(struct cm_id_private *p)
{
	cm_cancel_msg(p);
	cm_cleanup_remote(p);
	p->id.state = IB_CM_TIMEWAIT;
	urvt_timer_mod(p->dev->progress, &p->tw_timer,
		       urvt_now_ns() + cm_convert_to_ms(p->av_timeout) * 1000000ull);
}

static void cm_destroy_id(struct cm_id_private *p, int err);

/* Hand ev to the id's user; a nonzero answer destroys the id. */
static void cm_deliver(struct cm_id_private *p, const struct ib_cm_event *ev)
{
	int ret;

	if (p->user_gone || p->dead || !p->id.cm_handler)
		return;
	ret = p->id.cm_handler(&p->id, ev);
	if (ret)
		cm_destroy_id(p, ret);
}

/* ------------------------------------------------------------------ */
/* Message formats                                                    */
/* ------------------------------------------------------------------ */
static void cm_format_rej(struct cm_mad *m, struct cm_id_private *p, enum ib_cm_rej_reason reason,
			  const void *ari, uint8_t ari_length, const void *pdata, uint8_t len)
{
	cm_mad_init(m, CM_REJ_ATTR_ID, p->tid);
	cm_set(m, CM_REJ_REMOTE_COMM_ID, p->id.remote_id);
	switch (p->id.state) {
	case IB_CM_REQ_RCVD:
		/* nothing of ours exists for the peer yet */
		cm_set(m, CM_REJ_LOCAL_COMM_ID, 0);
		cm_set(m, CM_REJ_MESSAGE_REJECTED, CM_MSG_RESPONSE_REQ);
		break;
	case IB_CM_MRA_REQ_SENT:
		cm_set(m, CM_REJ_LOCAL_COMM_ID, p->id.local_id);
		cm_set(m, CM_REJ_MESSAGE_REJECTED, CM_MSG_RESPONSE_REQ);
		break;
	case IB_CM_REP_RCVD:
	case IB_CM_MRA_REP_SENT:
		cm_set(m, CM_REJ_LOCAL_COMM_ID, p->id.local_id);
		cm_set(m, CM_REJ_MESSAGE_REJECTED, CM_MSG_RESPONSE_REP);
		break;
	default:
		cm_set(m, CM_REJ_LOCAL_COMM_ID, p->id.local_id);
		cm_set(m, CM_REJ_MESSAGE_REJECTED, CM_MSG_RESPONSE_OTHER);
		break;
	}
	cm_set(m, CM_REJ_REASON, reason);
	if (ari && ari_length) {
		cm_set(m, CM_REJ_REJECTED_INFO_LENGTH, ari_length);
		memcpy(cm_data(m) + CM_REJ_ARI, ari, ari_length);
	}
	if (pdata && len)
		memcpy(cm_data(m) + CM_REJ_PRIVATE_DATA, pdata, len);
}

static void cm_format_mra(struct cm_mad *m, struct cm_id_private *p,
			  enum cm_msg_response mraed, uint8_t service_timeout,
			  const void *pdata, uint8_t len)
{
	cm_mad_init(m, CM_MRA_ATTR_ID, p->tid);
	cm_set(m, CM_MRA_MESSAGE_MRAED, mraed);
	cm_set(m, CM_MRA_LOCAL_COMM_ID, p->id.local_id);
	cm_set(m, CM_MRA_REMOTE_COMM_ID, p->id.remote_id);
	cm_set(m, CM_MRA_SERVICE_TIMEOUT, service_timeout);
	if (pdata && len)
		memcpy(cm_data(m) + CM_MRA_PRIVATE_DATA, pdata,
		       len > IB_CM_MRA_PRIVATE_DATA_SIZE ? IB_CM_MRA_PRIVATE_DATA_SIZE : len);
}

static void cm_format_rtu(struct cm_mad *m, struct cm_id_private *p, const void *pdata,
			  uint8_t len)
{
	cm_mad_init(m, CM_RTU_ATTR_ID, p->tid);
	cm_set(m, CM_RTU_LOCAL_COMM_ID, p->id.local_id);
	cm_set(m, CM_RTU_REMOTE_COMM_ID, p->id.remote_id);
	if (pdata && len)
		memcpy(cm_data(m) + CM_RTU_PRIVATE_DATA, pdata, len);
}

static void cm_format_drep(struct cm_mad *m, struct cm_id_private *p, const void *pdata,
			   uint8_t len)
{
	cm_mad_init(m, CM_DREP_ATTR_ID, p->tid);
	cm_set(m, CM_DREP_LOCAL_COMM_ID, p->id.local_id);
	cm_set(m, CM_DREP_REMOTE_COMM_ID, p->id.remote_id);
	if (pdata && len)
		memcpy(cm_data(m) + CM_DREP_PRIVATE_DATA, pdata, len);
}

/* A REJ answering a message no cm_id takes (the kernel's cm_issue_rej). */
static void cm_issue_rej(struct cm_device *dev, const struct cm_mad *rcv,
			 const union ibv_gid *to, enum ib_cm_rej_reason reason,
			 enum cm_msg_response rejected, const void *ari, uint8_t ari_length)
{
	struct cm_mad m;

	cm_mad_init(&m, CM_REJ_ATTR_ID, cm_mad_tid(rcv));
	/* the comm IDs swap sides: the same two fields in every message */
	cm_set(&m, CM_REJ_REMOTE_COMM_ID, cm_get(rcv, CM_REJ_LOCAL_COMM_ID));
	cm_set(&m, CM_REJ_LOCAL_COMM_ID, cm_get(rcv, CM_REJ_REMOTE_COMM_ID));
	cm_set(&m, CM_REJ_MESSAGE_REJECTED, rejected);
	cm_set(&m, CM_REJ_REASON, reason);
	if (ari && ari_length) {
		cm_set(&m, CM_REJ_REJECTED_INFO_LENGTH, ari_length);
		memcpy(cm_data(&m) + CM_REJ_ARI, ari, ari_length);
	}
	cm_send(dev, to, &m);
}

/* ------------------------------------------------------------------ */
/* Timers                                                             */
/* ------------------------------------------------------------------ */

/* The outstanding MAD's answer did not come: resend, or give up as the
 * kernel's cm_process_send_error does. */
static void cm_timeout_handler(struct urvt_timer *t)
{
	struct cm_id_private *p = container_of(t, struct cm_id_private, msg_timer);
	struct cm_device *dev = p->dev;
	struct ib_cm_event ev;

	pthread_mutex_lock(dev->lock);
	if (p->dead || !p->msg_active)
		goto out;
	if (p->msg_state != p->id.state) {
		/* moved on without cancelling: nothing to retry */
		p->msg_active = false;
		goto out;
	}
	if (p->msg_retries) {
		p->msg_retries--;
		dev->ctr.retries++;
		cm_send(dev, &p->dgid, &p->msg);
		cm_arm_msg(p);
		goto out;
	}
	p->msg_active = false;
	memset(&ev, 0, sizeof(ev));
	switch (p->id.state) {
	case IB_CM_REQ_SENT:
	case IB_CM_MRA_REQ_RCVD:
		cm_reset_to_idle(p);
		ev.event = IB_CM_REQ_ERROR;
		break;
	case IB_CM_REP_SENT:
	case IB_CM_MRA_REP_RCVD:
		cm_reset_to_idle(p);
		ev.event = IB_CM_REP_ERROR;
		break;
	case IB_CM_DREQ_SENT:
		cm_enter_timewait(p);
		ev.event = IB_CM_DREQ_ERROR;
		break;
	case IB_CM_SIDR_REQ_SENT:
		p->id.state = IB_CM_IDLE;
		ev.event = IB_CM_SIDR_REQ_ERROR;
		break;
	default:
		goto out;
	}
	cm_deliver(p, &ev);
out:
	pthread_mutex_unlock(dev->lock);
}

static void cm_timewait_handler(struct urvt_timer *t)
{
	struct cm_id_private *p = container_of(t, struct cm_id_private, tw_timer);
	struct cm_device *dev = p->dev;
	struct ib_cm_event ev = { .event = IB_CM_TIMEWAIT_EXIT };

	pthread_mutex_lock(dev->lock);
	if (p->dead || p->id.state != IB_CM_TIMEWAIT)
		goto out;
	p->id.state = IB_CM_IDLE;
	if (p->user_gone)
		cm_free_id(p);
	else
		cm_deliver(p, &ev);
out:
	pthread_mutex_unlock(dev->lock);
}

/* ------------------------------------------------------------------ */
/* Sends requested by the user (the kernel's ib_send_cm_*)            */
/* ------------------------------------------------------------------ */
/* The opening of every ib_send_cm_* of one message: its private data fits
 * (max bytes) and the id is in one of states; else the call is -EINVAL. */
static bool cm_send_allowed(const struct ib_cm_id *id, const void *private_data, size_t len,
			    size_t max, uint32_t states)
{
	return !(private_data && len > max) && (states & CM_STATE(id->state));
}

static void path_to_av(struct cm_id_private *p, const struct cm_path *path)
{
	p->path = *path;
	p->dgid = path->dgid;
	p->pkey = path->pkey;
	/* the kernel's cm_init_av_by_path */
	p->av_timeout = (uint8_t)(path->packet_life_time + 1);
}

int ib_send_cm_req(struct ib_cm_id *id, const struct ib_cm_req_param *param)
{
	struct cm_id_private *p = to_priv(id);
	const struct cm_path *pri = param->primary_path;
	struct cm_mad *m = &p->msg;

	if (!pri || (param->qp_type != IBV_QPT_RC && param->qp_type != IBV_QPT_UC) ||
	    !cm_send_allowed(id, param->private_data, param->private_data_len,
			     IB_CM_REQ_PRIVATE_DATA_SIZE, CM_STATE(IB_CM_IDLE)))
		return -EINVAL;
	path_to_av(p, pri);
	id->service_id = param->service_id;
	p->timeout_ms = cm_convert_to_ms(pri->packet_life_time) * 2 +
			cm_convert_to_ms(param->remote_cm_response_timeout);
	p->max_cm_retries = param->max_cm_retries;
	p->initiator_depth = param->initiator_depth;
	p->responder_resources = param->responder_resources;
	p->retry_count = param->retry_count;
	p->path_mtu = pri->mtu;
	p->qp_type = param->qp_type;
	p->local_qpn = param->qp_num & 0xffffff;
	p->rq_psn = param->starting_psn & 0xffffff;
	p->tid = cm_form_tid(p);

	cm_mad_init(m, CM_REQ_ATTR_ID, p->tid);
	cm_mad_set_attr_mod(m, param->ece.attr_mod);
	cm_set(m, CM_REQ_LOCAL_COMM_ID, id->local_id);
	cm_set(m, CM_REQ_VENDOR_ID, param->ece.vendor_id);
	cm_set(m, CM_REQ_SERVICE_ID, param->service_id);
	cm_set(m, CM_REQ_LOCAL_CA_GUID, be64toh(p->dev->node_guid));
	cm_set(m, CM_REQ_LOCAL_QPN, p->local_qpn);
	cm_set(m, CM_REQ_RESPONDER_RESOURCES, param->responder_resources);
	cm_set(m, CM_REQ_INITIATOR_DEPTH, param->initiator_depth);
	cm_set(m, CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT, param->remote_cm_response_timeout);
	cm_set(m, CM_REQ_TRANSPORT_SERVICE_TYPE,
	       param->qp_type == IBV_QPT_UC ? CM_TRANSPORT_UC : CM_TRANSPORT_RC);
	cm_set(m, CM_REQ_END_TO_END_FLOW_CONTROL, param->flow_control);
	cm_set(m, CM_REQ_STARTING_PSN, p->rq_psn);
	cm_set(m, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT, param->local_cm_response_timeout);
	cm_set(m, CM_REQ_RETRY_COUNT, param->retry_count);
	cm_set(m, CM_REQ_PARTITION_KEY, pri->pkey);
	cm_set(m, CM_REQ_PATH_PACKET_PAYLOAD_MTU, pri->mtu);
	cm_set(m, CM_REQ_RNR_RETRY_COUNT, param->rnr_retry_count);
	cm_set(m, CM_REQ_MAX_CM_RETRIES, param->max_cm_retries);
	cm_set(m, CM_REQ_SRQ, param->srq);
	memcpy(cm_data(m) + CM_REQ_PRIMARY_LOCAL_PORT_GID, pri->sgid.raw, 16);
	memcpy(cm_data(m) + CM_REQ_PRIMARY_REMOTE_PORT_GID, pri->dgid.raw, 16);
	if (pri->hop_limit <= 1) {
		cm_set(m, CM_REQ_PRIMARY_LOCAL_PORT_LID, 0);
		cm_set(m, CM_REQ_PRIMARY_REMOTE_PORT_LID, 0);
	} else {
		/* routed: the LIDs are unknown, as the kernel marks them */
		cm_set(m, CM_REQ_PRIMARY_LOCAL_PORT_LID, 0xffff);
		cm_set(m, CM_REQ_PRIMARY_REMOTE_PORT_LID, 0xffff);
	}
	cm_set(m, CM_REQ_PRIMARY_FLOW_LABEL, pri->flow_label);
	cm_set(m, CM_REQ_PRIMARY_PACKET_RATE, pri->rate);
	cm_set(m, CM_REQ_PRIMARY_TRAFFIC_CLASS, pri->traffic_class);
	cm_set(m, CM_REQ_PRIMARY_HOP_LIMIT, pri->hop_limit);
	cm_set(m, CM_REQ_PRIMARY_SL, pri->sl);
	cm_set(m, CM_REQ_PRIMARY_SUBNET_LOCAL, pri->hop_limit <= 1);
	cm_set(m, CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT,
	       cm_ack_timeout(p->dev->ack_delay, pri->packet_life_time));
	if (param->private_data && param->private_data_len)
		memcpy(cm_data(m) + CM_REQ_PRIVATE_DATA, param->private_data,
		       param->private_data_len);

	id->state = IB_CM_REQ_SENT;
	cm_send_msg(p, IB_CM_REQ_SENT);
	return 0;
}

int ib_send_cm_rep(struct ib_cm_id *id, const struct ib_cm_rep_param *param)
{
	struct cm_id_private *p = to_priv(id);
	struct cm_mad *m = &p->msg;

	if (!cm_send_allowed(id, param->private_data, param->private_data_len,
			     IB_CM_REP_PRIVATE_DATA_SIZE,
			     CM_STATE(IB_CM_REQ_RCVD) | CM_STATE(IB_CM_MRA_REQ_SENT)))
		return -EINVAL;
	cm_mad_init(m, CM_REP_ATTR_ID, p->tid);
	cm_mad_set_attr_mod(m, param->ece.attr_mod);
	cm_set(m, CM_REP_LOCAL_COMM_ID, id->local_id);
	cm_set(m, CM_REP_REMOTE_COMM_ID, id->remote_id);
	cm_set(m, CM_REP_STARTING_PSN, param->starting_psn & 0xffffff);
	cm_set(m, CM_REP_RESPONDER_RESOURCES, param->responder_resources);
	cm_set(m, CM_REP_TARGET_ACK_DELAY, p->dev->ack_delay);
	cm_set(m, CM_REP_FAILOVER_ACCEPTED, param->failover_accepted);
	cm_set(m, CM_REP_RNR_RETRY_COUNT, param->rnr_retry_count);
	cm_set(m, CM_REP_LOCAL_CA_GUID, be64toh(p->dev->node_guid));
	cm_set(m, CM_REP_INITIATOR_DEPTH, param->initiator_depth);
	cm_set(m, CM_REP_END_TO_END_FLOW_CONTROL, param->flow_control);
	cm_set(m, CM_REP_SRQ, param->srq);
	cm_set(m, CM_REP_LOCAL_QPN, param->qp_num & 0xffffff);
	cm_set(m, CM_REP_VENDOR_ID_H, (param->ece.vendor_id >> 16) & 0xff);
	cm_set(m, CM_REP_VENDOR_ID_M, (param->ece.vendor_id >> 8) & 0xff);
	cm_set(m, CM_REP_VENDOR_ID_L, param->ece.vendor_id & 0xff);
	if (param->private_data && param->private_data_len)
		memcpy(cm_data(m) + CM_REP_PRIVATE_DATA, param->private_data,
		       param->private_data_len);

	id->state = IB_CM_REP_SENT;
	p->initiator_depth = param->initiator_depth;
	p->responder_resources = param->responder_resources;
	p->rq_psn = param->starting_psn & 0xffffff;
	p->local_qpn = param->qp_num & 0xffffff;
	cm_send_msg(p, IB_CM_REP_SENT);
	return 0;
}

int ib_send_cm_rtu(struct ib_cm_id *id, const void *private_data, uint8_t len)
{
	struct cm_id_private *p = to_priv(id);
	struct cm_mad m;

	if (!cm_send_allowed(id, private_data, len, IB_CM_RTU_PRIVATE_DATA_SIZE,
			     CM_STATE(IB_CM_REP_RCVD) | CM_STATE(IB_CM_MRA_REP_SENT)))
		return -EINVAL;
	cm_format_rtu(&m, p, private_data, len);
	cm_send(p->dev, &p->dgid, &m);
	id->state = IB_CM_ESTABLISHED;
	save_private_data(p, private_data, len);
	return 0;
}

int ib_send_cm_dreq(struct ib_cm_id *id, const void *private_data, uint8_t len)
{
	struct cm_id_private *p = to_priv(id);
	struct cm_mad *m = &p->msg;

	if (!cm_send_allowed(id, private_data, len, IB_CM_DREQ_PRIVATE_DATA_SIZE,
			     CM_STATE(IB_CM_ESTABLISHED)))
		return -EINVAL;
	cm_mad_init(m, CM_DREQ_ATTR_ID, cm_form_tid(p));
	cm_set(m, CM_DREQ_LOCAL_COMM_ID, id->local_id);
	cm_set(m, CM_DREQ_REMOTE_COMM_ID, id->remote_id);
	cm_set(m, CM_DREQ_REMOTE_QPN_EECN, p->remote_qpn);
	if (private_data && len)
		memcpy(cm_data(m) + CM_DREQ_PRIVATE_DATA, private_data, len);
	id->state = IB_CM_DREQ_SENT;
	cm_send_msg(p, IB_CM_DREQ_SENT);
	return 0;
}

int ib_send_cm_drep(struct ib_cm_id *id, const void *private_data, uint8_t len)
{
	struct cm_id_private *p = to_priv(id);
	struct cm_mad m;

	if (!cm_send_allowed(id, private_data, len, IB_CM_DREP_PRIVATE_DATA_SIZE,
			     CM_STATE(IB_CM_DREQ_RCVD)))
		return -EINVAL;
	save_private_data(p, private_data, len);
	cm_enter_timewait(p);
	cm_format_drep(&m, p, private_data, len);
	cm_send(p->dev, &p->dgid, &m);
	return 0;
}

int ib_send_cm_rej(struct ib_cm_id *id, enum ib_cm_rej_reason reason, const void *ari,
		   uint8_t ari_length, const void *private_data, uint8_t len)
{
	struct cm_id_private *p = to_priv(id);
	struct cm_mad m;

	if ((private_data && len > IB_CM_REJ_PRIVATE_DATA_SIZE) ||
	    (ari && ari_length > IB_CM_REJ_ARI_LENGTH))
		return -EINVAL;
	switch (id->state) {
	case IB_CM_REQ_SENT:
	case IB_CM_MRA_REQ_RCVD:
	case IB_CM_REQ_RCVD:
	case IB_CM_MRA_REQ_SENT:
	case IB_CM_REP_RCVD:
	case IB_CM_MRA_REP_SENT:
		cm_format_rej(&m, p, reason, ari, ari_length, private_data, len);
		cm_reset_to_idle(p);
		break;
	case IB_CM_REP_SENT:
	case IB_CM_MRA_REP_RCVD:
		cm_format_rej(&m, p, reason, ari, ari_length, private_data, len);
		cm_enter_timewait(p);
		break;
	default:
		return -EINVAL;
	}
	cm_send(p->dev, &p->dgid, &m);
	return 0;
}

int ib_send_cm_mra(struct ib_cm_id *id, uint8_t service_timeout, const void *private_data,
		   uint8_t len)
{
	struct cm_id_private *p = to_priv(id);
	enum cm_msg_response mraed;
	enum ib_cm_state next;
	struct cm_mad m;

	if (private_data && len > IB_CM_MRA_PRIVATE_DATA_SIZE)
		return -EINVAL;
	switch (id->state) {
	case IB_CM_REQ_RCVD:
		next = IB_CM_MRA_REQ_SENT;
		mraed = CM_MSG_RESPONSE_REQ;
		break;
	case IB_CM_REP_RCVD:
		next = IB_CM_MRA_REP_SENT;
		mraed = CM_MSG_RESPONSE_REP;
		break;
	default:
		return -EINVAL;
	}
	if (!(service_timeout & IB_CM_MRA_FLAG_DELAY)) {
		cm_format_mra(&m, p, mraed, service_timeout, private_data, len);
		cm_send(p->dev, &p->dgid, &m);
	}
	id->state = next;
	p->service_timeout = service_timeout & 0x1f;
	save_private_data(p, private_data, len);
	return 0;
}

int ib_send_cm_sidr_req(struct ib_cm_id *id, const struct ib_cm_sidr_req_param *param)
{
	struct cm_id_private *p = to_priv(id);
	struct cm_mad *m = &p->msg;

	if (!param->path ||
	    !cm_send_allowed(id, param->private_data, param->private_data_len,
			     IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE, CM_STATE(IB_CM_IDLE)))
		return -EINVAL;
	path_to_av(p, param->path);
	id->service_id = param->service_id;
	p->timeout_ms = param->timeout_ms;
	p->max_cm_retries = param->max_cm_retries;
	p->tid = cm_form_tid(p);
	cm_mad_init(m, CM_SIDR_REQ_ATTR_ID, p->tid);
	cm_set(m, CM_SIDR_REQ_REQUESTID, id->local_id);
	cm_set(m, CM_SIDR_REQ_PARTITION_KEY, param->path->pkey);
	cm_set(m, CM_SIDR_REQ_SERVICEID, param->service_id);
	if (param->private_data && param->private_data_len)
		memcpy(cm_data(m) + CM_SIDR_REQ_PRIVATE_DATA, param->private_data,
		       param->private_data_len);
	id->state = IB_CM_SIDR_REQ_SENT;
	cm_send_msg(p, IB_CM_SIDR_REQ_SENT);
	return 0;
}

int ib_send_cm_sidr_rep(struct ib_cm_id *id, const struct ib_cm_sidr_rep_param *param)
{
	struct cm_id_private *p = to_priv(id);
	struct cm_mad m;

	if ((param->info && param->info_length > IB_CM_SIDR_REP_INFO_LENGTH) ||
	    !cm_send_allowed(id, param->private_data, param->private_data_len,
			     IB_CM_SIDR_REP_PRIVATE_DATA_SIZE, CM_STATE(IB_CM_SIDR_REQ_RCVD)))
		return -EINVAL;
	cm_mad_init(&m, CM_SIDR_REP_ATTR_ID, p->tid);
	cm_mad_set_attr_mod(&m, param->ece.attr_mod);
	cm_set(&m, CM_SIDR_REP_REQUESTID, id->remote_id);
	cm_set(&m, CM_SIDR_REP_STATUS, param->status);
	cm_set(&m, CM_SIDR_REP_QPN, param->qp_num & 0xffffff);
	cm_set(&m, CM_SIDR_REP_SERVICEID, id->service_id);
	cm_set(&m, CM_SIDR_REP_Q_KEY, param->qkey);
	cm_set(&m, CM_SIDR_REP_VENDOR_ID_H, (param->ece.vendor_id >> 8) & 0xffff);
	cm_set(&m, CM_SIDR_REP_VENDOR_ID_L, param->ece.vendor_id & 0xff);
	if (param->info && param->info_length) {
		cm_set(&m, CM_SIDR_REP_ADDITIONAL_INFORMATION_LENGTH, param->info_length);
		memcpy(cm_data(&m) + CM_SIDR_REP_ADDITIONAL_INFORMATION, param->info,
		       param->info_length);
	}
	if (param->private_data && param->private_data_len)
		memcpy(cm_data(&m) + CM_SIDR_REP_PRIVATE_DATA, param->private_data,
		       param->private_data_len);
	cm_send(p->dev, &p->dgid, &m);
	id->state = IB_CM_IDLE;
	sidr_remove(p);
	return 0;
}

int ib_cm_listen(struct ib_cm_id *id, uint64_t service_id)
{
	struct cm_id_private *p = to_priv(id);

	if (id->state != IB_CM_IDLE)
		return -EINVAL;
	id->service_id = service_id;
	id->state = IB_CM_LISTEN;
	p->listen_next = p->dev->listen;
	p->dev->listen = p;
	p->in_listen = true;
	/* a request may be waiting for this listener (cm_defer): look now,
	 * from the progress thread, once our caller has finished */
	if (p->dev->n_unmatched)
		urvt_timer_mod(p->dev->progress, &p->dev->unmatched_timer, urvt_now_ns());
	return 0;
}

int ib_cm_notify(struct ib_cm_id *id, enum ibv_event_type event)
{
	struct cm_id_private *p = to_priv(id);
	struct ib_cm_event ev = { .event = IB_CM_USER_ESTABLISHED };

	if (event != IBV_EVENT_COMM_EST)
		return -EINVAL; /* no alternate paths to migrate to on RoCE */
	switch (id->state) {
	case IB_CM_REP_SENT:
	case IB_CM_MRA_REP_RCVD:
		id->state = IB_CM_ESTABLISHED;
		cm_cancel_msg(p);
		cm_deliver(p, &ev);
		return 0;
	case IB_CM_ESTABLISHED:
		return -EISCONN;
	default:
		return -EINVAL;
	}
}

/* The kernel's cm_destroy_id: say goodbye in the way the state asks for. */
static void cm_destroy_id(struct cm_id_private *p, int err)
{
	struct ib_cm_id *id = &p->id;
	uint64_t guid = p->dev->node_guid;

	if (p->dead || p->user_gone)
		return;
	p->user_gone = true;
retest:
	switch (id->state) {
	case IB_CM_LISTEN:
		CHAIN_DEL(&p->dev->listen, p, listen_next);
		p->in_listen = false;
		id->state = IB_CM_IDLE;
		break;
	case IB_CM_SIDR_REQ_SENT:
		cm_cancel_msg(p);
		id->state = IB_CM_IDLE;
		break;
	case IB_CM_SIDR_REQ_RCVD: {
		struct ib_cm_sidr_rep_param rep = { .status = IB_SIDR_REJECT };
		ib_send_cm_sidr_rep(id, &rep);
		break;
	}
	case IB_CM_REQ_SENT:
	case IB_CM_MRA_REQ_RCVD:
		cm_cancel_msg(p);
		ib_send_cm_rej(id, IB_CM_REJ_TIMEOUT, &guid, sizeof(guid), NULL, 0);
		break;
	case IB_CM_REQ_RCVD:
		if (err == -ENOMEM) {
			/* no reject: a retried REQ may find room */
			cm_reset_to_idle(p);
			break;
		}
		ib_send_cm_rej(id, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0);
		break;
	case IB_CM_REP_SENT:
	case IB_CM_MRA_REP_RCVD:
		cm_cancel_msg(p);
		/* fall through */
	case IB_CM_MRA_REQ_SENT:
	case IB_CM_REP_RCVD:
	case IB_CM_MRA_REP_SENT:
		ib_send_cm_rej(id, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0);
		break;
	case IB_CM_ESTABLISHED:
		ib_send_cm_dreq(id, NULL, 0);
		goto retest;
	case IB_CM_DREQ_SENT:
		cm_enter_timewait(p);
		break;
	case IB_CM_DREQ_RCVD:
		ib_send_cm_drep(id, NULL, 0);
		break;
	default:
		break;
	}
	/* the timewait outlives the user; anything else goes now */
	if (id->state != IB_CM_TIMEWAIT)
		cm_free_id(p);
}

void ib_destroy_cm_id(struct ib_cm_id *id)
{
	cm_destroy_id(to_priv(id), 0);
}

/* ------------------------------------------------------------------ */
/* QP attributes (the kernel's cm_init_qp_*_attr)                     */
/* ------------------------------------------------------------------ */
int ib_cm_init_qp_attr(struct ib_cm_id *id, struct ibv_qp_attr *a, int *mask)
{
	struct cm_id_private *p = to_priv(id);
	enum ib_cm_state s = id->state;
	bool connecting = s == IB_CM_REQ_RCVD || s == IB_CM_MRA_REQ_SENT || s == IB_CM_REP_RCVD ||
			  s == IB_CM_MRA_REP_SENT || s == IB_CM_REP_SENT ||
			  s == IB_CM_MRA_REP_RCVD || s == IB_CM_ESTABLISHED;

	switch (a->qp_state) {
	case IBV_QPS_INIT:
		if (!connecting && s != IB_CM_REQ_SENT && s != IB_CM_MRA_REQ_RCVD)
			return -EINVAL;
		*mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
		if (p->responder_resources)
			a->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		a->pkey_index = 0;
		a->port_num = 1;
		return 0;
	case IBV_QPS_RTR:
		if (!connecting)
			return -EINVAL;
		*mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN;
		memset(&a->ah_attr, 0, sizeof(a->ah_attr));
		a->ah_attr.is_global = 1;
		a->ah_attr.port_num = 1;
		a->ah_attr.sl = p->path.sl;
		a->ah_attr.static_rate = p->path.rate;
		a->ah_attr.grh.dgid = p->path.dgid;
		a->ah_attr.grh.sgid_index = 0;
		a->ah_attr.grh.flow_label = p->path.flow_label;
		a->ah_attr.grh.hop_limit = p->path.hop_limit;
		a->ah_attr.grh.traffic_class = p->path.traffic_class;
		a->path_mtu = (enum ibv_mtu)p->path_mtu;
		a->dest_qp_num = p->remote_qpn;
		a->rq_psn = p->rq_psn;
		if (p->qp_type == IBV_QPT_RC) {
			*mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
			a->max_dest_rd_atomic = p->responder_resources;
			a->min_rnr_timer = 0;
		}
		return 0;
	case IBV_QPS_RTS:
		/* RTS before the REP goes out is allowed, as in the kernel */
		if (!connecting)
			return -EINVAL;
		*mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		a->sq_psn = p->sq_psn;
		if (p->qp_type == IBV_QPT_RC) {
			*mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
				 IBV_QP_TIMEOUT;
			a->retry_cnt = p->retry_count;
			a->rnr_retry = p->rnr_retry_count;
			a->max_rd_atomic = p->initiator_depth;
			a->timeout = p->av_timeout;
		}
		return 0;
	default:
		return -EINVAL;
	}
}

/* ------------------------------------------------------------------ */
/* Receiving (the kernel's cm_*_handler)                              */
/* ------------------------------------------------------------------ */
static bool from_peer(struct cm_id_private *p, const union ibv_gid *sgid)
{
	if (memcmp(&p->dgid, sgid, sizeof(*sgid))) {
		p->dev->ctr.drop_forged++;
		return false;
	}
	return true;
}

/*
 * The opening every handler of a message about an existing connection
 * shares: p is the id the message names (NULL: none, counted unmatched);
 * the message must come from p's peer and find p in one of states, else
 * it is counted in *wrong_state. NULL: drop the message.
 */
static struct cm_id_private *cm_handler_begin(struct cm_device *dev, struct cm_id_private *p,
					      const union ibv_gid *sgid, uint32_t states,
					      uint64_t *wrong_state)
{
	if (!p) {
		dev->ctr.drop_unmatched++;
		return NULL;
	}
	if (!from_peer(p, sgid))
		return NULL;
	if (!(states & CM_STATE(p->id.state))) {
		(*wrong_state)++;
		return NULL;
	}
	return p;
}

static enum ibv_qp_type req_qp_type(const struct cm_mad *m)
{
	switch (cm_get(m, CM_REQ_TRANSPORT_SERVICE_TYPE)) {
	case CM_TRANSPORT_RC:
		return IBV_QPT_RC;
	case CM_TRANSPORT_UC:
		return IBV_QPT_UC;
	default:
		return 0;
	}
}

/*
 * Deviation from the kernel's CM, which rejects at once: a request for a
 * service nobody listens on waits up to CM_UNMATCHED_NS for its listener.
 * Two processes started together (a test script; perftest's and qperf's
 * servers listen after telling the client to go) would otherwise race the
 * rdma_listen; with the kernel's slower address resolution the client
 * rarely wins, here it would every time. Bounded: a full queue rejects.
 */
static bool cm_defer(struct cm_device *dev, const struct cm_mad *m, const union ibv_gid *sgid)
{
	struct cm_unmatched *u;

	if (dev->n_unmatched == CM_UNMATCHED_MAX)
		return false;
	/* the same request again (a retransmission): one is enough */
	for (unsigned int i = 0; i < dev->n_unmatched; i++)
		if (!memcmp(dev->unmatched[i].m.raw, m->raw, CM_MAD_SIZE))
			return true;
	u = &dev->unmatched[dev->n_unmatched++];
	u->m = *m;
	u->sgid = *sgid;
	u->deadline_ns = urvt_now_ns() + CM_UNMATCHED_NS;
	if (!urvt_timer_pending(dev->progress, &dev->unmatched_timer))
		urvt_timer_mod(dev->progress, &dev->unmatched_timer, u->deadline_ns);
	return true;
}

/*
 * A REQ or REP names a (QPN, CA GUID) that cur is connected to: the peer
 * has lost that connection, so cur goes too (the kernel's DREQ). Only when
 * the message comes from cur's peer, though: from anywhere else it is
 * forged (or confused) and must not tear down a working connection.
 */
static void cm_stale_conn(struct cm_id_private *cur, const union ibv_gid *sgid)
{
	if (cur->dead || cur->id.state != IB_CM_ESTABLISHED)
		return;
	if (from_peer(cur, sgid))
		ib_send_cm_dreq(&cur->id, NULL, 0);
}

static void cm_dup_req_handler(struct cm_id_private *cur, const union ibv_gid *sgid)
{
	struct cm_mad m;

	cur->dev->ctr.duplicates++;
	switch (cur->id.state) {
	case IB_CM_MRA_REQ_SENT:
		/* the user has not accepted yet: ask for patience */
		cm_format_mra(&m, cur, CM_MSG_RESPONSE_REQ, cur->service_timeout,
			      cur->private_data, cur->private_data_len);
		break;
	case IB_CM_TIMEWAIT:
		cm_format_rej(&m, cur, IB_CM_REJ_STALE_CONN, NULL, 0, NULL, 0);
		break;
	default:
		return; /* REQ_RCVD (being handed up) and later states: drop */
	}
	cm_send(cur->dev, sgid, &m);
}

static void cm_req_handler(struct cm_device *dev, const struct cm_mad *m,
			   const union ibv_gid *sgid, bool final)
{
	struct cm_id_private *p, *cur, *listen;
	struct ib_cm_event ev;
	struct ib_cm_req_event_param *rp = &ev.param.req_rcvd;
	struct cm_path *path = &rp->primary_path;
	const uint8_t *d = cm_cdata(m);
	int err;

	p = cm_alloc_id(dev, NULL, NULL, &err);
	if (!p) {
		dev->ctr.drop_no_resources++;
		return;
	}
	p->id.remote_id = (uint32_t)cm_get(m, CM_REQ_LOCAL_COMM_ID);
	p->id.service_id = cm_get(m, CM_REQ_SERVICE_ID);
	p->tid = cm_mad_tid(m);
	p->timeout_ms = cm_convert_to_ms((int)cm_get(m, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT));
	p->max_cm_retries = (uint8_t)cm_get(m, CM_REQ_MAX_CM_RETRIES);
	p->remote_qpn = (uint32_t)cm_get(m, CM_REQ_LOCAL_QPN);
	/* what the peer initiates, we respond to, and the other way round */
	p->initiator_depth = (uint8_t)cm_get(m, CM_REQ_RESPONDER_RESOURCES);
	p->responder_resources = (uint8_t)cm_get(m, CM_REQ_INITIATOR_DEPTH);
	p->path_mtu = (uint8_t)cm_get(m, CM_REQ_PATH_PACKET_PAYLOAD_MTU);
	p->pkey = (uint16_t)cm_get(m, CM_REQ_PARTITION_KEY);
	p->sq_psn = (uint32_t)cm_get(m, CM_REQ_STARTING_PSN);
	p->retry_count = (uint8_t)cm_get(m, CM_REQ_RETRY_COUNT);
	p->rnr_retry_count = (uint8_t)cm_get(m, CM_REQ_RNR_RETRY_COUNT);
	p->qp_type = req_qp_type(m);
	p->remote_ca_guid = cm_get(m, CM_REQ_LOCAL_CA_GUID);
	p->dgid = *sgid; /* responses go back where the REQ came from */
	p->id.state = IB_CM_REQ_RCVD;

	/* a duplicate: the kernel's cm_match_req */
	cur = rid_insert(p);
	if (cur) {
		cm_dup_req_handler(cur, sgid);
		goto free;
	}
	/* a stale connection: the peer reuses a QPN we still have connected */
	cur = rqp_insert(p);
	if (cur) {
		cm_cleanup_remote(p);
		cm_issue_rej(dev, m, sgid, IB_CM_REJ_STALE_CONN, CM_MSG_RESPONSE_REQ, NULL, 0);
		cm_stale_conn(cur, sgid);
		goto free;
	}
	listen = cm_find_listen(dev, p->id.service_id);
	if (!listen) {
		cm_cleanup_remote(p);
		if (!final && cm_defer(dev, m, sgid))
			goto free;
		cm_issue_rej(dev, m, sgid, IB_CM_REJ_INVALID_SERVICE_ID, CM_MSG_RESPONSE_REQ,
			     NULL, 0);
		goto free;
	}

	/* the path as the REQ describes it, seen from here */
	memset(&ev, 0, sizeof(ev));
	memcpy(path->dgid.raw, d + CM_REQ_PRIMARY_LOCAL_PORT_GID, 16);
	memcpy(path->sgid.raw, d + CM_REQ_PRIMARY_REMOTE_PORT_GID, 16);
	path->flow_label = (uint32_t)cm_get(m, CM_REQ_PRIMARY_FLOW_LABEL);
	path->hop_limit = (uint8_t)cm_get(m, CM_REQ_PRIMARY_HOP_LIMIT);
	path->traffic_class = (uint8_t)cm_get(m, CM_REQ_PRIMARY_TRAFFIC_CLASS);
	path->pkey = p->pkey;
	path->sl = (uint8_t)cm_get(m, CM_REQ_PRIMARY_SL);
	path->mtu = p->path_mtu;
	path->rate = (uint8_t)cm_get(m, CM_REQ_PRIMARY_PACKET_RATE);
	path->packet_life_time = (uint8_t)cm_get(m, CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT);
	path->packet_life_time -= path->packet_life_time > 0;
	if (memcmp(&path->sgid, &dev->gid, sizeof(dev->gid))) {
		/* not addressed to our GID: the kernel answers with ours */
		ib_send_cm_rej(&p->id, IB_CM_REJ_INVALID_GID, &dev->gid, sizeof(dev->gid),
			       NULL, 0);
		goto free;
	}
	path_to_av(p, path);
	p->dgid = *sgid;
	p->id.cm_handler = listen->id.cm_handler;
	p->id.context = listen->id.context;

	ev.event = IB_CM_REQ_RECEIVED;
	rp->listen_id = &listen->id;
	rp->src_gid = *sgid;
	rp->remote_ca_guid = p->remote_ca_guid;
	rp->remote_qkey = (uint32_t)cm_get(m, CM_REQ_LOCAL_Q_KEY);
	rp->remote_qpn = p->remote_qpn;
	rp->qp_type = p->qp_type;
	rp->starting_psn = p->sq_psn;
	rp->responder_resources = p->responder_resources;
	rp->initiator_depth = p->initiator_depth;
	rp->local_cm_response_timeout =
		(uint8_t)cm_get(m, CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT);
	rp->flow_control = (uint8_t)cm_get(m, CM_REQ_END_TO_END_FLOW_CONTROL);
	rp->remote_cm_response_timeout = (uint8_t)cm_get(m, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT);
	rp->retry_count = p->retry_count;
	rp->rnr_retry_count = p->rnr_retry_count;
	rp->srq = (uint8_t)cm_get(m, CM_REQ_SRQ);
	rp->ece.vendor_id = (uint32_t)cm_get(m, CM_REQ_VENDOR_ID);
	rp->ece.attr_mod = cm_mad_attr_mod(m);
	ev.private_data = d + CM_REQ_PRIVATE_DATA;
	cm_deliver(p, &ev);
	return;
free:
	p->user_gone = true;
	cm_free_id(p);
}

static void cm_dup_rep_handler(struct cm_device *dev, const struct cm_mad *m,
			       const union ibv_gid *sgid)
{
	struct cm_id_private *p = cm_handler_begin(
		dev,
		cm_acquire_id(dev, (uint32_t)cm_get(m, CM_REP_REMOTE_COMM_ID),
			      (uint32_t)cm_get(m, CM_REP_LOCAL_COMM_ID)),
		sgid, CM_ANY_STATE, NULL);
	struct cm_mad r;

	if (!p)
		return;
	dev->ctr.duplicates++;
	if (p->id.state == IB_CM_ESTABLISHED)
		cm_format_rtu(&r, p, p->private_data, p->private_data_len);
	else if (p->id.state == IB_CM_MRA_REP_SENT)
		cm_format_mra(&r, p, CM_MSG_RESPONSE_REP, p->service_timeout, p->private_data,
			      p->private_data_len);
	else
		return;
	cm_send(dev, &p->dgid, &r);
}

static void cm_rep_handler(struct cm_device *dev, const struct cm_mad *m,
			   const union ibv_gid *sgid)
{
	struct cm_id_private *p, *cur;
	struct ib_cm_event ev;
	struct ib_cm_rep_event_param *rp = &ev.param.rep_rcvd;

	p = cm_acquire_id(dev, (uint32_t)cm_get(m, CM_REP_REMOTE_COMM_ID), 0);
	if (!p) {
		cm_dup_rep_handler(dev, m, sgid);
		return;
	}
	if (!cm_handler_begin(dev, p, sgid, CM_STATE(IB_CM_REQ_SENT) | CM_STATE(IB_CM_MRA_REQ_RCVD),
			      &dev->ctr.drop_unmatched))
		return;
	p->id.remote_id = (uint32_t)cm_get(m, CM_REP_LOCAL_COMM_ID);
	p->remote_ca_guid = cm_get(m, CM_REP_LOCAL_CA_GUID);
	p->remote_qpn = (uint32_t)cm_get(m, CM_REP_LOCAL_QPN);
	if (rid_insert(p)) {
		/* another connection of ours already has these IDs */
		p->id.remote_id = 0;
		dev->ctr.duplicates++;
		return;
	}
	cur = rqp_insert(p);
	if (cur) {
		cm_cleanup_remote(p);
		p->id.remote_id = 0;
		cm_issue_rej(dev, m, sgid, IB_CM_REJ_STALE_CONN, CM_MSG_RESPONSE_REP, NULL, 0);
		cm_stale_conn(cur, sgid);
		return;
	}
	p->id.state = IB_CM_REP_RCVD;
	/*
	 * Deviation: the kernel takes the REP's depths as they are. A REP may
	 * ask for more than the REQ offered (perftest's server on rxe answers
	 * with rxe's 128 reads whatever the REQ said), which no QP of ours
	 * accepts; the QP gets what both sides agree to, the event the REP's
	 * values.
	 */
	p->initiator_depth = min_u8((uint8_t)cm_get(m, CM_REP_RESPONDER_RESOURCES),
				    p->initiator_depth);
	p->responder_resources = min_u8((uint8_t)cm_get(m, CM_REP_INITIATOR_DEPTH),
					p->responder_resources);
	p->sq_psn = (uint32_t)cm_get(m, CM_REP_STARTING_PSN);
	p->rnr_retry_count = (uint8_t)cm_get(m, CM_REP_RNR_RETRY_COUNT);
	p->target_ack_delay = (uint8_t)cm_get(m, CM_REP_TARGET_ACK_DELAY);
	p->av_timeout = cm_ack_timeout(p->target_ack_delay, (uint8_t)(p->av_timeout - 1));
	cm_cancel_msg(p);

	memset(&ev, 0, sizeof(ev));
	ev.event = IB_CM_REP_RECEIVED;
	rp->remote_ca_guid = p->remote_ca_guid;
	rp->remote_qkey = (uint32_t)cm_get(m, CM_REP_LOCAL_Q_KEY);
	rp->remote_qpn = p->remote_qpn;
	rp->starting_psn = p->sq_psn;
	rp->responder_resources = (uint8_t)cm_get(m, CM_REP_INITIATOR_DEPTH);
	rp->initiator_depth = (uint8_t)cm_get(m, CM_REP_RESPONDER_RESOURCES);
	rp->target_ack_delay = p->target_ack_delay;
	rp->failover_accepted = (uint8_t)cm_get(m, CM_REP_FAILOVER_ACCEPTED);
	rp->flow_control = (uint8_t)cm_get(m, CM_REP_END_TO_END_FLOW_CONTROL);
	rp->rnr_retry_count = p->rnr_retry_count;
	rp->srq = (uint8_t)cm_get(m, CM_REP_SRQ);
	rp->ece.vendor_id = (uint32_t)(cm_get(m, CM_REP_VENDOR_ID_H) << 16 |
				       cm_get(m, CM_REP_VENDOR_ID_M) << 8 |
				       cm_get(m, CM_REP_VENDOR_ID_L));
	rp->ece.attr_mod = cm_mad_attr_mod(m);
	ev.private_data = cm_cdata(m) + CM_REP_PRIVATE_DATA;
	cm_deliver(p, &ev);
}

static void cm_rtu_handler(struct cm_device *dev, const struct cm_mad *m,
			   const union ibv_gid *sgid)
{
	struct cm_id_private *p = cm_handler_begin(
		dev,
		cm_acquire_id(dev, (uint32_t)cm_get(m, CM_RTU_REMOTE_COMM_ID),
			      (uint32_t)cm_get(m, CM_RTU_LOCAL_COMM_ID)),
		sgid, CM_STATE(IB_CM_REP_SENT) | CM_STATE(IB_CM_MRA_REP_RCVD), &dev->ctr.duplicates);
	struct ib_cm_event ev = { .event = IB_CM_RTU_RECEIVED };

	if (!p)
		return;
	p->id.state = IB_CM_ESTABLISHED;
	cm_cancel_msg(p);
	ev.private_data = cm_cdata(m) + CM_RTU_PRIVATE_DATA;
	cm_deliver(p, &ev);
}

/* A DREP for a DREQ of a connection we do not know (the kernel's cm_issue_drep). */
static void cm_issue_drep(struct cm_device *dev, const struct cm_mad *dreq,
			  const union ibv_gid *to)
{
	struct cm_mad m;

	cm_mad_init(&m, CM_DREP_ATTR_ID, cm_mad_tid(dreq));
	cm_set(&m, CM_DREP_REMOTE_COMM_ID, cm_get(dreq, CM_DREQ_LOCAL_COMM_ID));
	cm_set(&m, CM_DREP_LOCAL_COMM_ID, cm_get(dreq, CM_DREQ_REMOTE_COMM_ID));
	cm_send(dev, to, &m);
}

static void cm_dreq_handler(struct cm_device *dev, const struct cm_mad *m,
			    const union ibv_gid *sgid)
{
	struct cm_id_private *p = cm_acquire_id(dev, (uint32_t)cm_get(m, CM_DREQ_REMOTE_COMM_ID),
						(uint32_t)cm_get(m, CM_DREQ_LOCAL_COMM_ID));
	struct ib_cm_event ev = { .event = IB_CM_DREQ_RECEIVED };
	struct cm_mad r;

	if (!p) {
		/* gone already (or never ours): the peer still wants its DREP */
		dev->ctr.duplicates++;
		cm_issue_drep(dev, m, sgid);
		return;
	}
	if (!cm_handler_begin(dev, p, sgid, CM_ANY_STATE, NULL))
		return;
	if (p->local_qpn != cm_get(m, CM_DREQ_REMOTE_QPN_EECN)) {
		dev->ctr.drop_forged++;
		return;
	}
	switch (p->id.state) {
	case IB_CM_REP_SENT:
	case IB_CM_DREQ_SENT:
		cm_cancel_msg(p);
		break;
	case IB_CM_ESTABLISHED:
	case IB_CM_MRA_REP_RCVD:
		break;
	case IB_CM_TIMEWAIT:
		dev->ctr.duplicates++;
		cm_format_drep(&r, p, p->private_data, p->private_data_len);
		cm_send(dev, &p->dgid, &r);
		return;
	case IB_CM_DREQ_RCVD:
		dev->ctr.duplicates++;
		return;
	default:
		dev->ctr.drop_unmatched++;
		return;
	}
	p->id.state = IB_CM_DREQ_RCVD;
	p->tid = cm_mad_tid(m);
	ev.private_data = cm_cdata(m) + CM_DREQ_PRIVATE_DATA;
	cm_deliver(p, &ev);
}

static void cm_drep_handler(struct cm_device *dev, const struct cm_mad *m,
			    const union ibv_gid *sgid)
{
	struct cm_id_private *p = cm_handler_begin(
		dev,
		cm_acquire_id(dev, (uint32_t)cm_get(m, CM_DREP_REMOTE_COMM_ID),
			      (uint32_t)cm_get(m, CM_DREP_LOCAL_COMM_ID)),
		sgid, CM_STATE(IB_CM_DREQ_SENT) | CM_STATE(IB_CM_DREQ_RCVD), &dev->ctr.drop_unmatched);
	struct ib_cm_event ev = { .event = IB_CM_DREP_RECEIVED };

	if (!p)
		return;
	cm_enter_timewait(p);
	ev.private_data = cm_cdata(m) + CM_DREP_PRIVATE_DATA;
	cm_deliver(p, &ev);
}

/* The kernel's cm_acquire_rejected_id. */
static struct cm_id_private *cm_acquire_rejected_id(struct cm_device *dev, const struct cm_mad *m)
{
	uint32_t remote_id = (uint32_t)cm_get(m, CM_REJ_LOCAL_COMM_ID);
	struct cm_id_private *p;

	if (cm_get(m, CM_REJ_REASON) == IB_CM_REJ_TIMEOUT) {
		/* the peer gave up on its REQ; its ARI holds its CA GUID */
		uint64_t guid;

		memcpy(&guid, cm_cdata(m) + CM_REJ_ARI, sizeof(guid));
		p = rid_find(dev, remote_id, be64toh(guid));
		return p && !p->dead ? p : NULL;
	}
	if (cm_get(m, CM_REJ_MESSAGE_REJECTED) == CM_MSG_RESPONSE_REQ)
		return cm_acquire_id(dev, (uint32_t)cm_get(m, CM_REJ_REMOTE_COMM_ID), 0);
	return cm_acquire_id(dev, (uint32_t)cm_get(m, CM_REJ_REMOTE_COMM_ID), remote_id);
}

static void cm_rej_handler(struct cm_device *dev, const struct cm_mad *m,
			   const union ibv_gid *sgid)
{
	struct cm_id_private *p =
		cm_handler_begin(dev, cm_acquire_rejected_id(dev, m), sgid, CM_ANY_STATE, NULL);
	struct ib_cm_event ev = { .event = IB_CM_REJ_RECEIVED };
	uint16_t reason = (uint16_t)cm_get(m, CM_REJ_REASON);

	if (!p)
		return;
	switch (p->id.state) {
	case IB_CM_REQ_SENT:
	case IB_CM_MRA_REQ_RCVD:
	case IB_CM_REP_SENT:
	case IB_CM_MRA_REP_RCVD:
		cm_cancel_msg(p);
		/* fall through */
	case IB_CM_REQ_RCVD:
	case IB_CM_MRA_REQ_SENT:
		if (reason == IB_CM_REJ_STALE_CONN)
			cm_enter_timewait(p);
		else
			cm_reset_to_idle(p);
		break;
	case IB_CM_DREQ_SENT:
		cm_cancel_msg(p);
		/* fall through */
	case IB_CM_REP_RCVD:
	case IB_CM_MRA_REP_SENT:
	case IB_CM_ESTABLISHED:
		cm_enter_timewait(p);
		break;
	default:
		dev->ctr.drop_unmatched++;
		return;
	}
	ev.param.rej_rcvd.reason = reason;
	ev.param.rej_rcvd.ari = cm_cdata(m) + CM_REJ_ARI;
	ev.param.rej_rcvd.ari_length = (uint8_t)cm_get(m, CM_REJ_REJECTED_INFO_LENGTH);
	ev.private_data = cm_cdata(m) + CM_REJ_PRIVATE_DATA;
	cm_deliver(p, &ev);
}

static void cm_mra_handler(struct cm_device *dev, const struct cm_mad *m,
			   const union ibv_gid *sgid)
{
	uint64_t mraed = cm_get(m, CM_MRA_MESSAGE_MRAED);
	uint32_t remote = (uint32_t)cm_get(m, CM_MRA_REMOTE_COMM_ID);
	struct ib_cm_event ev = { .event = IB_CM_MRA_RECEIVED };
	struct cm_id_private *p;
	uint8_t st = (uint8_t)cm_get(m, CM_MRA_SERVICE_TIMEOUT);

	if (mraed == CM_MSG_RESPONSE_REQ)
		p = cm_acquire_id(dev, remote, 0);
	else if (mraed == CM_MSG_RESPONSE_REP || mraed == CM_MSG_RESPONSE_OTHER)
		p = cm_acquire_id(dev, remote, (uint32_t)cm_get(m, CM_MRA_LOCAL_COMM_ID));
	else
		p = NULL;
	if (!cm_handler_begin(dev, p, sgid, CM_ANY_STATE, NULL))
		return;
	if (p->id.state == IB_CM_REQ_SENT && mraed == CM_MSG_RESPONSE_REQ)
		p->id.state = IB_CM_MRA_REQ_RCVD;
	else if (p->id.state == IB_CM_REP_SENT && mraed == CM_MSG_RESPONSE_REP)
		p->id.state = IB_CM_MRA_REP_RCVD;
	else {
		if (p->id.state == IB_CM_MRA_REQ_RCVD || p->id.state == IB_CM_MRA_REP_RCVD)
			dev->ctr.duplicates++;
		else
			dev->ctr.drop_unmatched++;
		return;
	}
	/* the peer's service time plus a round trip before the next resend */
	if (p->msg_active) {
		p->msg_state = p->id.state;
		p->msg_timeout_ms = cm_convert_to_ms(st) + cm_convert_to_ms(p->av_timeout);
		cm_arm_msg(p);
	}
	ev.param.mra_service_timeout = st;
	ev.private_data = cm_cdata(m) + CM_MRA_PRIVATE_DATA;
	cm_deliver(p, &ev);
}

static void cm_sidr_req_handler(struct cm_device *dev, const struct cm_mad *m,
				const union ibv_gid *sgid, bool final)
{
	struct cm_id_private *p, *listen;
	struct ib_cm_event ev;
	int err;

	p = cm_alloc_id(dev, NULL, NULL, &err);
	if (!p) {
		dev->ctr.drop_no_resources++;
		return;
	}
	p->id.remote_id = (uint32_t)cm_get(m, CM_SIDR_REQ_REQUESTID);
	p->id.service_id = cm_get(m, CM_SIDR_REQ_SERVICEID);
	p->tid = cm_mad_tid(m);
	p->dgid = *sgid;
	if (sidr_insert(p)) {
		dev->ctr.duplicates++;
		goto free;
	}
	p->id.state = IB_CM_SIDR_REQ_RCVD;
	listen = cm_find_listen(dev, p->id.service_id);
	if (!listen) {
		struct ib_cm_sidr_rep_param rep = { .status = IB_SIDR_UNSUPPORTED };

		if (!final && cm_defer(dev, m, sgid)) {
			sidr_remove(p);
			goto free;
		}
		ib_send_cm_sidr_rep(&p->id, &rep);
		goto free;
	}
	p->id.cm_handler = listen->id.cm_handler;
	p->id.context = listen->id.context;
	memset(&ev, 0, sizeof(ev));
	ev.event = IB_CM_SIDR_REQ_RECEIVED;
	ev.param.sidr_req_rcvd.listen_id = &listen->id;
	ev.param.sidr_req_rcvd.src_gid = *sgid;
	ev.param.sidr_req_rcvd.service_id = p->id.service_id;
	ev.param.sidr_req_rcvd.pkey = (uint16_t)cm_get(m, CM_SIDR_REQ_PARTITION_KEY);
	ev.private_data = cm_cdata(m) + CM_SIDR_REQ_PRIVATE_DATA;
	cm_deliver(p, &ev);
	return;
free:
	p->user_gone = true;
	cm_free_id(p);
}

static void cm_sidr_rep_handler(struct cm_device *dev, const struct cm_mad *m,
				const union ibv_gid *sgid)
{
	struct cm_id_private *p = cm_handler_begin(
		dev, cm_acquire_id(dev, (uint32_t)cm_get(m, CM_SIDR_REP_REQUESTID), 0), sgid,
		CM_STATE(IB_CM_SIDR_REQ_SENT), &dev->ctr.duplicates);
	struct ib_cm_event ev = { .event = IB_CM_SIDR_REP_RECEIVED };
	struct ib_cm_sidr_rep_event_param *rp = &ev.param.sidr_rep_rcvd;

	if (!p)
		return;
	p->id.state = IB_CM_IDLE;
	cm_cancel_msg(p);
	rp->status = (uint8_t)cm_get(m, CM_SIDR_REP_STATUS);
	rp->qkey = (uint32_t)cm_get(m, CM_SIDR_REP_Q_KEY);
	rp->qpn = (uint32_t)cm_get(m, CM_SIDR_REP_QPN);
	rp->info = cm_cdata(m) + CM_SIDR_REP_ADDITIONAL_INFORMATION;
	rp->info_len = (uint8_t)cm_get(m, CM_SIDR_REP_ADDITIONAL_INFORMATION_LENGTH);
	rp->ece.vendor_id = (uint32_t)(cm_get(m, CM_SIDR_REP_VENDOR_ID_H) << 8 |
				       cm_get(m, CM_SIDR_REP_VENDOR_ID_L));
	rp->ece.attr_mod = cm_mad_attr_mod(m);
	ev.private_data = cm_cdata(m) + CM_SIDR_REP_PRIVATE_DATA;
	cm_deliver(p, &ev);
}

void cm_recv_mad(struct cm_device *dev, const void *buf, size_t len, const union ibv_gid *sgid)
{
	struct cm_mad m;
	int attr = cm_mad_check(buf, len);

	dev->ctr.rx++;
	if (attr < 0) {
		dev->ctr.drop_malformed++;
		return;
	}
	/* one aligned copy: handlers read fields from it, events point into it */
	memcpy(m.raw, buf, CM_MAD_SIZE);
	dbg_mad("rx", sgid, &m);
	switch (attr) {
	case CM_REQ_ATTR_ID:
		cm_req_handler(dev, &m, sgid, false);
		break;
	case CM_MRA_ATTR_ID:
		cm_mra_handler(dev, &m, sgid);
		break;
	case CM_REJ_ATTR_ID:
		cm_rej_handler(dev, &m, sgid);
		break;
	case CM_REP_ATTR_ID:
		cm_rep_handler(dev, &m, sgid);
		break;
	case CM_RTU_ATTR_ID:
		cm_rtu_handler(dev, &m, sgid);
		break;
	case CM_DREQ_ATTR_ID:
		cm_dreq_handler(dev, &m, sgid);
		break;
	case CM_DREP_ATTR_ID:
		cm_drep_handler(dev, &m, sgid);
		break;
	case CM_SIDR_REQ_ATTR_ID:
		cm_sidr_req_handler(dev, &m, sgid, false);
		break;
	case CM_SIDR_REP_ATTR_ID:
		cm_sidr_rep_handler(dev, &m, sgid);
		break;
	default:
		/* LAP/APR (no alternate paths on RoCE), ClassPortInfo, unknown */
		dev->ctr.drop_malformed++;
		break;
	}
}

/* The deferred requests: those whose listener came, and those whose wait
 * is over (rejected now), leave the queue in arrival order. */
static void cm_unmatched_handler(struct urvt_timer *t)
{
	struct cm_device *dev = container_of(t, struct cm_device, unmatched_timer);
	uint64_t now, next = 0;

	pthread_mutex_lock(dev->lock);
	now = urvt_now_ns();
	for (unsigned int i = 0; i < dev->n_unmatched;) {
		struct cm_unmatched u = dev->unmatched[i];
		bool sidr = cm_mad_attr_id(&u.m) == CM_SIDR_REQ_ATTR_ID;
		uint64_t sid = cm_get(&u.m, sidr ? CM_SIDR_REQ_SERVICEID : CM_REQ_SERVICE_ID);

		if (!cm_find_listen(dev, sid) && now < u.deadline_ns) {
			if (!next || u.deadline_ns < next)
				next = u.deadline_ns;
			i++;
			continue;
		}
		memmove(&dev->unmatched[i], &dev->unmatched[i + 1],
			(dev->n_unmatched - i - 1) * sizeof(dev->unmatched[0]));
		dev->n_unmatched--;
		if (sidr)
			cm_sidr_req_handler(dev, &u.m, &u.sgid, true);
		else
			cm_req_handler(dev, &u.m, &u.sgid, true);
	}
	if (next)
		urvt_timer_mod(dev->progress, &dev->unmatched_timer, next);
	pthread_mutex_unlock(dev->lock);
}

/* ------------------------------------------------------------------ */
/* Device                                                             */
/* ------------------------------------------------------------------ */
struct cm_device *cm_device_create(const struct cm_dev_ops *ops, void *ctx,
				   struct urvt_progress *p, pthread_mutex_t *lock,
				   const union ibv_gid *gid, uint64_t node_guid, uint8_t ack_delay,
				   int *err)
{
	struct cm_device *dev = calloc(1, sizeof(*dev));

	if (!dev) {
		*err = -ENOMEM;
		return NULL;
	}
	dev->ops = ops;
	dev->ops_ctx = ctx;
	dev->progress = p;
	dev->lock = lock;
	dev->gid = *gid;
	dev->node_guid = node_guid;
	dev->ack_delay = ack_delay;
	if (getrandom(&dev->id_operand, sizeof(dev->id_operand), 0) != sizeof(dev->id_operand))
		dev->id_operand = (uint32_t)urvt_now_ns();
	dev->next_id = 1;
	urvt_work_init(&dev->reap_work, cm_reap);
	urvt_timer_init(&dev->unmatched_timer, cm_unmatched_handler);
	{
		const char *d = getenv("URVT_DEBUG");
		cm_debug = d && *d && *d != '0';
	}
	return dev;
}

void cm_device_destroy(struct cm_device *dev)
{
	pthread_mutex_lock(dev->lock);
	for (uint32_t i = 0; i < CM_HASH_SIZE; i++) {
		while (dev->lid[i]) {
			struct cm_id_private *p = dev->lid[i];
			p->user_gone = true;
			cm_free_id(p);
		}
	}
	pthread_mutex_unlock(dev->lock);
	urvt_timer_del_sync(dev->progress, &dev->unmatched_timer);
	urvt_progress_cancel_work_sync(dev->progress, &dev->reap_work);
	/* no work runs now: reap here */
	cm_reap(&dev->reap_work);
	free(dev);
}

const struct cm_counters *cm_device_counters(struct cm_device *dev)
{
	return &dev->ctr;
}
