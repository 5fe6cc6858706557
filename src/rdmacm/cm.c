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
 * The machine is split by concern (cm_priv.h lists the files); this file
 * holds what every side uses.
 *
 * Lifetime: a cm_id is freed only by the reap work on the progress thread
 * (cm_reap), after its timers were deleted: a timer handler that is about
 * to run finds it marked dead under the lock and returns.
 */
#include "rdmacm/cm_priv.h"

#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "base/compiler.h"
#include "base/progress.h"
#include "base/random.h"
#include "base/timer.h"

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

static void cm_dbg_mad(const char *dir, const union ibv_gid *gid, const struct cm_mad *m)
{
	const uint8_t *g = gid->raw;

	CM_DBG("urvt-cm[%d]: %s %s %s %u.%u.%u.%u comm %08x/%08x", (int)getpid(), dir,
	       cm_attr_str(cm_mad_attr_id(m)), *dir == 't' ? "to" : "from", g[12], g[13], g[14],
	       g[15], (unsigned int)cm_get(m, CM_REQ_LOCAL_COMM_ID),
	       (unsigned int)cm_get(m, CM_REJ_REMOTE_COMM_ID));
}

/* ------------------------------------------------------------------ */
/* Tables                                                             */
/* ------------------------------------------------------------------ */

static struct cm_id_private *cm_lid_find(struct cm_device *dev, uint32_t local_id)
{
	struct cm_id_private *p = dev->lid[hash32(local_id)];

	while (p && p->id.local_id != local_id)
		p = p->lid_next;
	return p;
}

/* The kernel's cm_acquire_id: the id owning local_id whose remote ID is remote_id. */
struct cm_id_private *cm_acquire_id(struct cm_device *dev, uint32_t local_id,
				    uint32_t remote_id)
{
	struct cm_id_private *p = cm_lid_find(dev, local_id);

	if (!p || p->dead || p->id.remote_id != remote_id)
		return NULL;
	return p;
}

uint32_t cm_rid_hash(uint32_t remote_id, uint64_t guid)
{
	return hash32(((uint64_t)remote_id << 32) ^ guid);
}

struct cm_id_private *cm_rid_find(struct cm_device *dev, uint32_t remote_id, uint64_t guid)
{
	struct cm_id_private *p = dev->rid[cm_rid_hash(remote_id, guid)];

	while (p && !(p->id.remote_id == remote_id && p->remote_ca_guid == guid))
		p = p->rid_next;
	return p;
}

/* Insert p by (its remote ID, remote CA GUID); the existing one if taken. */
struct cm_id_private *cm_rid_insert(struct cm_id_private *p)
{
	struct cm_device *dev = p->dev;
	struct cm_id_private *cur = cm_rid_find(dev, p->id.remote_id, p->remote_ca_guid);
	uint32_t h = cm_rid_hash(p->id.remote_id, p->remote_ca_guid);

	if (cur)
		return cur;
	p->rid_next = dev->rid[h];
	dev->rid[h] = p;
	p->in_rid = true;
	return NULL;
}

struct cm_id_private *cm_rqp_insert(struct cm_id_private *p)
{
	struct cm_device *dev = p->dev;
	uint32_t h = cm_rid_hash(p->remote_qpn, p->remote_ca_guid);
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
void cm_cleanup_remote(struct cm_id_private *p)
{
	struct cm_device *dev = p->dev;

	if (p->in_rid) {
		CHAIN_DEL(&dev->rid[cm_rid_hash(p->id.remote_id, p->remote_ca_guid)], p, rid_next);
		p->in_rid = false;
	}
	if (p->in_rqp) {
		CHAIN_DEL(&dev->rqp[cm_rid_hash(p->remote_qpn, p->remote_ca_guid)], p, rqp_next);
		p->in_rqp = false;
	}
}

struct cm_id_private *cm_find_listen(struct cm_device *dev, uint64_t service_id)
{
	for (struct cm_id_private *p = dev->listen; p; p = p->listen_next)
		if (p->id.service_id == service_id && !p->dead)
			return p;
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Sending                                                            */
/* ------------------------------------------------------------------ */
int cm_send(struct cm_device *dev, const union ibv_gid *dgid, const struct cm_mad *m)
{
	int ret = dev->ops->send(dev->ops_ctx, dgid, m);

	cm_dbg_mad(ret ? "tx-failed" : "tx", dgid, m);
	if (ret)
		dev->ctr.tx_errors++;
	else
		dev->ctr.tx++;
	return ret;
}

uint64_t cm_form_tid(struct cm_id_private *p)
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
void cm_send_msg(struct cm_id_private *p, enum ib_cm_state state)
{
	p->msg_active = true;
	p->msg_state = state;
	p->msg_retries = p->max_cm_retries;
	p->msg_timeout_ms = p->timeout_ms;
	cm_send(p->dev, &p->dgid, &p->msg);
	cm_arm_msg(p);
}

void cm_cancel_msg(struct cm_id_private *p)
{
	p->msg_active = false;
	urvt_timer_del(p->dev->progress, &p->msg_timer);
}

void cm_save_private_data(struct cm_id_private *p, const void *data, uint8_t len)
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
void cm_free_id(struct cm_id_private *p)
{
	struct cm_device *dev = p->dev;

	if (p->dead)
		return;
	p->dead = true;
	cm_cancel_msg(p);
	urvt_timer_del(dev->progress, &p->tw_timer);
	cm_cleanup_remote(p);
	cm_sidr_remove(p);
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

struct cm_id_private *cm_alloc_id(struct cm_device *dev, ib_cm_handler handler,
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
		/* a reply reaching another process of the host group is
		 * forwarded by this byte (docs/host-identity.md) */
		if (dev->id_slot)
			id = (uint32_t)dev->id_slot << 24 | (id & 0xffffffu);
	} while (!id || cm_lid_find(dev, id));
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
void cm_reset_to_idle(struct cm_id_private *p)
{
	p->id.state = IB_CM_IDLE;
	cm_cancel_msg(p);
	cm_cleanup_remote(p);
}

/* The kernel's cm_enter_timewait: convert(av timeout) ms, then IDLE. */
void cm_enter_timewait(struct cm_id_private *p)
{
	cm_cancel_msg(p);
	cm_cleanup_remote(p);
	p->id.state = IB_CM_TIMEWAIT;
	urvt_timer_mod(p->dev->progress, &p->tw_timer,
		       urvt_now_ns() + cm_convert_to_ms(p->av_timeout) * 1000000ull);
}

/* Hand ev to the id's user; a nonzero answer destroys the id. */
void cm_deliver(struct cm_id_private *p, const struct ib_cm_event *ev)
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
void cm_format_rej(struct cm_mad *m, struct cm_id_private *p, enum ib_cm_rej_reason reason,
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

void cm_format_mra(struct cm_mad *m, struct cm_id_private *p,
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

void cm_format_rtu(struct cm_mad *m, struct cm_id_private *p, const void *pdata,
		   uint8_t len)
{
	cm_mad_init(m, CM_RTU_ATTR_ID, p->tid);
	cm_set(m, CM_RTU_LOCAL_COMM_ID, p->id.local_id);
	cm_set(m, CM_RTU_REMOTE_COMM_ID, p->id.remote_id);
	if (pdata && len)
		memcpy(cm_data(m) + CM_RTU_PRIVATE_DATA, pdata, len);
}

void cm_format_drep(struct cm_mad *m, struct cm_id_private *p, const void *pdata,
		    uint8_t len)
{
	cm_mad_init(m, CM_DREP_ATTR_ID, p->tid);
	cm_set(m, CM_DREP_LOCAL_COMM_ID, p->id.local_id);
	cm_set(m, CM_DREP_REMOTE_COMM_ID, p->id.remote_id);
	if (pdata && len)
		memcpy(cm_data(m) + CM_DREP_PRIVATE_DATA, pdata, len);
}

/* A REJ answering a message no cm_id takes (the kernel's cm_issue_rej). */
void cm_issue_rej(struct cm_device *dev, const struct cm_mad *rcv,
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
bool cm_send_allowed(const struct ib_cm_id *id, const void *private_data, size_t len,
		     size_t max, uint32_t states)
{
	return !(private_data && len > max) && (states & CM_STATE(id->state));
}

void cm_path_to_av(struct cm_id_private *p, const struct cm_path *path)
{
	p->path = *path;
	p->dgid = path->dgid;
	p->pkey = path->pkey;
	/* the kernel's cm_init_av_by_path */
	p->av_timeout = (uint8_t)(path->packet_life_time + 1);
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
	cm_save_private_data(p, private_data, len);
	return 0;
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
static bool cm_from_peer(struct cm_id_private *p, const union ibv_gid *sgid)
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
struct cm_id_private *cm_handler_begin(struct cm_device *dev, struct cm_id_private *p,
				       const union ibv_gid *sgid, uint32_t states,
				       uint64_t *wrong_state)
{
	if (!p) {
		dev->ctr.drop_unmatched++;
		return NULL;
	}
	if (!cm_from_peer(p, sgid))
		return NULL;
	if (!(states & CM_STATE(p->id.state))) {
		(*wrong_state)++;
		return NULL;
	}
	return p;
}

/*
 * A REQ or REP names a (QPN, CA GUID) that cur is connected to: the peer
 * has lost that connection, so cur goes too (the kernel's DREQ). Only when
 * the message comes from cur's peer, though: from anywhere else it is
 * forged (or confused) and must not tear down a working connection.
 */
void cm_stale_conn(struct cm_id_private *cur, const union ibv_gid *sgid)
{
	if (cur->dead || cur->id.state != IB_CM_ESTABLISHED)
		return;
	if (cm_from_peer(cur, sgid))
		ib_send_cm_dreq(&cur->id, NULL, 0);
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
	cm_dbg_mad("rx", sgid, &m);
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
	dev->id_operand = (uint32_t)urvt_random64();
	dev->next_id = 1;
	urvt_work_init(&dev->reap_work, cm_reap);
	urvt_timer_init(&dev->unmatched_timer, cm_unmatched_handler);
	{
		const char *d = getenv("URVT_DEBUG");
		cm_debug = d && *d && *d != '0';
	}
	return dev;
}

void cm_device_set_id_slot(struct cm_device *dev, uint8_t slot)
{
	dev->id_slot = slot;
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
