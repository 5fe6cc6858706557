/*
 * The librdmacm API (rdma-core's librdmacm/cma.c, on top of cma.c instead
 * of /dev/infiniband/rdma_cm): the user-side half of every call. QPs are
 * the application's; ucma_qp.c creates them and moves them through their
 * states with the attributes cma.c computes (rdma_init_qp_attr). This file
 * answers a REP with the RTU when the application fetches
 * CONNECT_RESPONSE, makes ids without a channel synchronous, and converts
 * errors to -1 / errno as the man pages say.
 */
#include <errno.h>
#include <stdlib.h>
#include <rdma/rdma_verbs.h>
#include <string.h>

#include "rdmacm/addr.h"
#include "rdmacm/ucma_priv.h"

int ucma_err_ret(int ret)
{
	if (ret < 0) {
		errno = -ret;
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Ids                                                                */
/* ------------------------------------------------------------------ */
static int create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		     enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	struct rdma_event_channel *ch = channel;
	struct rdma_id_private *p;
	int ret = cma_init();

	if (ret)
		return ucma_err_ret(ret);
	if (!id)
		return ucma_set_errno(EINVAL);
	if (!ch) {
		ch = rdma_create_event_channel();
		if (!ch)
			return -1;
	}
	pthread_mutex_lock(&cma_lock);
	p = cma_id_alloc(ch, context, ps, qp_type);
	if (p)
		p->sync = !channel;
	pthread_mutex_unlock(&cma_lock);
	if (!p) {
		if (!channel)
			rdma_destroy_event_channel(ch);
		return ucma_set_errno(ENOMEM);
	}
	*id = &p->id;
	return 0;
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	enum ibv_qp_type qp_type = ps == RDMA_PS_IPOIB || ps == RDMA_PS_UDP ? IBV_QPT_UD
									    : IBV_QPT_RC;

	return create_id(channel, id, context, ps, qp_type);
}

static void leave_mc(struct rdma_cm_id *id, struct cma_multicast **pp);

int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct rdma_id_private *p = to_id_priv(id);
	struct rdma_event_channel *priv_ch = NULL;

	pthread_mutex_lock(&cma_lock);
	while (p->mc_list)
		leave_mc(id, &p->mc_list);
	cma_destroy(p);
	if (id->event) {
		struct cma_event *evt = (struct cma_event *)id->event;

		cma_event_complete(evt->id_priv);
		cma_event_free(evt);
		id->event = NULL;
	}
	/* events the application holds must be acked first (librdmacm) */
	while (p->events_completed < p->events_reported)
		pthread_cond_wait(&p->cond, &cma_lock);
	if (p->sync)
		priv_ch = id->channel;
	cma_id_free(p);
	pthread_mutex_unlock(&cma_lock);
	if (priv_ch)
		rdma_destroy_event_channel(priv_ch);
	return 0;
}

/* For ids without a channel: the call's event, its status as errno. */
int ucma_complete(struct rdma_cm_id *id)
{
	struct rdma_id_private *p = to_id_priv(id);
	int ret;

	if (!p->sync)
		return 0;
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	ret = rdma_get_cm_event(id->channel, &id->event);
	if (ret)
		return ret;
	if (id->event->status) {
		if (id->event->event == RDMA_CM_EVENT_REJECTED)
			return ucma_set_errno(ECONNREFUSED);
		return ucma_set_errno(id->event->status < 0 ? -id->event->status
							     : id->event->status);
	}
	return 0;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	int ret;

	if (!cma_addrlen(addr))
		return ucma_set_errno(EINVAL);
	pthread_mutex_lock(&cma_lock);
	ret = cma_bind_host(to_id_priv(id), addr);
	pthread_mutex_unlock(&cma_lock);
	return ucma_err_ret(ret);
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
		      int timeout_ms)
{
	int ret;

	(void)timeout_ms; /* resolution is immediate (no ARP) */
	if (!cma_addrlen(dst_addr) || (src_addr && !cma_addrlen(src_addr)))
		return ucma_set_errno(EINVAL);
	pthread_mutex_lock(&cma_lock);
	ret = cma_resolve_addr(to_id_priv(id), src_addr, dst_addr);
	pthread_mutex_unlock(&cma_lock);
	if (ret)
		return ucma_err_ret(ret);
	return ucma_complete(id);
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	int ret;

	(void)timeout_ms;
	pthread_mutex_lock(&cma_lock);
	ret = cma_resolve_route(to_id_priv(id));
	pthread_mutex_unlock(&cma_lock);
	if (ret)
		return ucma_err_ret(ret);
	return ucma_complete(id);
}

int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	int ret;

	pthread_mutex_lock(&cma_lock);
	ret = cma_init_qp_attr(to_id_priv(id), qp_attr, qp_attr_mask);
	pthread_mutex_unlock(&cma_lock);
	return ucma_err_ret(ret);
}

/* ------------------------------------------------------------------ */
/* Connect, listen, accept                                            */
/* ------------------------------------------------------------------ */
static int valid_param(struct rdma_id_private *p, const struct rdma_conn_param *param)
{
	struct cma_device *dev = p->cma_dev;

	if (p->id.ps != RDMA_PS_TCP)
		return 0;
	if (!p->id.qp && !param)
		return -EINVAL;
	if (!param || !dev)
		return 0;
	if (param->responder_resources != RDMA_MAX_RESP_RES &&
	    param->responder_resources > dev->max_responder_resources)
		return -EINVAL;
	if (param->initiator_depth != RDMA_MAX_INIT_DEPTH &&
	    param->initiator_depth > dev->max_initiator_depth)
		return -EINVAL;
	return 0;
}

/* The parameters the "kernel" gets (librdmacm's ucma_copy_conn_param_to_kern). */
static void kern_param(struct rdma_id_private *p, struct rdma_conn_param *dst,
		       const struct rdma_conn_param *src, uint8_t *buf)
{
	size_t len = 0;

	memset(dst, 0, sizeof(*dst));
	dst->qp_num = p->id.qp ? p->id.qp->qp_num : (src ? src->qp_num : 0);
	dst->srq = p->id.qp ? p->id.qp->srq != NULL : (src ? src->srq : 0);
	dst->responder_resources = p->responder_resources;
	dst->initiator_depth = p->initiator_depth;
	if (p->connect_len) {
		len = p->connect_len > CMA_MAX_PRIVATE_DATA ? CMA_MAX_PRIVATE_DATA : p->connect_len;
		memcpy(buf, p->connect, len);
	}
	if (src) {
		dst->flow_control = src->flow_control;
		dst->retry_count = src->retry_count;
		dst->rnr_retry_count = src->rnr_retry_count;
		if (src->private_data && src->private_data_len) {
			size_t n = src->private_data_len;
			if (len + n > CMA_MAX_PRIVATE_DATA)
				n = CMA_MAX_PRIVATE_DATA - len;
			memcpy(buf + len, src->private_data, n);
			len += n;
		}
	} else {
		dst->retry_count = 7;
		dst->rnr_retry_count = 7;
	}
	dst->private_data = len ? buf : NULL;
	/* more than fits a CM message: the CM refuses it (EINVAL) */
	dst->private_data_len = len > 255 ? 255 : (uint8_t)len;
}

/* RDMA_MAX_INIT_DEPTH / RDMA_MAX_RESP_RES (or no parameters) ask for as
 * much as the device allows, up to what the id has already. */
static uint8_t conn_depth(const struct rdma_conn_param *param, uint8_t asked, uint8_t as_much,
			  uint8_t now, uint8_t dev_max)
{
	if (param && asked != as_much)
		return asked;
	return now > dev_max ? dev_max : now;
}

/*
 * The opening rdma_connect and rdma_accept share, under cma_lock: the
 * parameters checked and the id's depths chosen. The active side asks for
 * the device's most by default; the passive side for what the REQ offered
 * (already in the id), capped by the device.
 */
static int conn_begin(struct rdma_id_private *p, const struct rdma_conn_param *param, bool active)
{
	struct cma_device *dev = p->cma_dev;
	int ret = valid_param(p, param);

	if (ret || !dev)
		return ret;
	if (active) {
		p->initiator_depth = dev->max_initiator_depth;
		p->responder_resources = dev->max_responder_resources;
	}
	p->initiator_depth = conn_depth(param, param ? param->initiator_depth : 0,
					RDMA_MAX_INIT_DEPTH, p->initiator_depth,
					dev->max_initiator_depth);
	p->responder_resources = conn_depth(param, param ? param->responder_resources : 0,
					    RDMA_MAX_RESP_RES, p->responder_resources,
					    dev->max_responder_resources);
	return 0;
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct rdma_id_private *p = to_id_priv(id);
	uint8_t buf[CMA_MAX_PRIVATE_DATA];
	struct rdma_conn_param kc;
	struct ibv_ece ece;
	int ret;

	pthread_mutex_lock(&cma_lock);
	ret = conn_begin(p, conn_param, true);
	if (ret)
		goto out;
	kern_param(p, &kc, conn_param, buf);
	ece = p->local_ece;
	ret = cma_connect(p, &kc, &ece);
	if (!ret && p->connect_len) {
		free(p->connect);
		p->connect = NULL;
		p->connect_len = 0;
	}
out:
	pthread_mutex_unlock(&cma_lock);
	if (ret)
		return ucma_err_ret(ret);
	return ucma_complete(id);
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	int ret;

	pthread_mutex_lock(&cma_lock);
	ret = cma_listen(to_id_priv(id), backlog);
	pthread_mutex_unlock(&cma_lock);
	return ucma_err_ret(ret);
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct rdma_id_private *l = to_id_priv(listen);
	struct rdma_cm_event *event;
	int ret;

	if (!l->sync)
		return ucma_set_errno(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	ret = rdma_get_cm_event(listen->channel, &event);
	if (ret)
		return ret;
	if (event->event == RDMA_CM_EVENT_REJECTED) {
		ret = ucma_set_errno(ECONNREFUSED);
		goto err;
	}
	if (event->status) {
		ret = ucma_set_errno(event->status < 0 ? -event->status : event->status);
		goto err;
	}
	if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		ret = ucma_set_errno(EINVAL);
		goto err;
	}
	if (l->qp_init_attr) {
		struct ibv_qp_init_attr attr = *l->qp_init_attr;

		ret = rdma_create_qp(event->id, listen->pd, &attr);
		if (ret)
			goto err;
	}
	*id = event->id;
	(*id)->event = event;
	return 0;
err:
	listen->event = event;
	return ret;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct rdma_id_private *p = to_id_priv(id);
	uint8_t buf[CMA_MAX_PRIVATE_DATA];
	struct rdma_conn_param kc;
	struct ibv_ece ece;
	int ret;

	pthread_mutex_lock(&cma_lock);
	ret = conn_begin(p, conn_param, false);
	if (ret)
		goto out;
	if (id->qp_type != IBV_QPT_UD) {
		ret = ucma_modify_qp_rtr(p, p->responder_resources);
		if (!ret)
			ret = ucma_modify_qp_rts(p, p->initiator_depth);
		if (ret)
			goto out;
	}
	kern_param(p, &kc, conn_param, buf);
	/* answer with the vendor ID the peer sent, our options */
	ece.vendor_id = p->remote_ece.vendor_id;
	ece.options = p->local_ece.options;
	ret = cma_accept(p, &kc, &ece);
	if (ret)
		ucma_modify_qp_err(p);
out:
	pthread_mutex_unlock(&cma_lock);
	if (ret)
		return ucma_err_ret(ret);
	if (id->qp_type == IBV_QPT_UD)
		return 0;
	return ucma_complete(id);
}

static int reject_with_reason(struct rdma_cm_id *id, const void *private_data,
			      uint8_t private_data_len, uint8_t reason)
{
	int ret;

	pthread_mutex_lock(&cma_lock);
	ret = cma_reject(to_id_priv(id), private_data, private_data ? private_data_len : 0,
			 reason);
	pthread_mutex_unlock(&cma_lock);
	return ucma_err_ret(ret);
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return reject_with_reason(id, private_data, private_data_len, 0);
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	/* IBTA: CM_REJ_VENDOR_OPTION_NOT_SUPPORTED */
	return reject_with_reason(id, private_data, private_data_len,
				  IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED);
}

int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	int ret;

	pthread_mutex_lock(&cma_lock);
	ret = cma_notify(to_id_priv(id), event);
	pthread_mutex_unlock(&cma_lock);
	return ucma_err_ret(ret);
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	struct rdma_id_private *p = to_id_priv(id);
	int ret;

	if (!id->verbs || !id->verbs->device)
		return ucma_set_errno(EINVAL);
	pthread_mutex_lock(&cma_lock);
	/* IB transport: the QP goes to ERR first (librdmacm's ucma_shutdown) */
	ucma_modify_qp_err(p);
	ret = cma_disconnect(p);
	pthread_mutex_unlock(&cma_lock);
	if (ret)
		return ucma_err_ret(ret);
	return ucma_complete(id);
}

/* CONNECT_RESPONSE with a QP: RTR, RTS, then the RTU (librdmacm's
 * ucma_process_conn_resp). Caller holds the lock. */
static int process_conn_resp(struct rdma_id_private *p)
{
	int ret = ucma_modify_qp_rtr(p, RDMA_MAX_RESP_RES);

	if (!ret)
		ret = ucma_modify_qp_rts(p, RDMA_MAX_INIT_DEPTH);
	if (!ret)
		ret = cma_accept(p, NULL, NULL);
	if (ret)
		ucma_modify_qp_err(p);
	return ret;
}

static int process_conn_resp_ece(struct rdma_id_private *p, const struct cm_ece *remote)
{
	struct ibv_ece ece = { .vendor_id = remote->vendor_id, .options = remote->attr_mod };
	int ret;

	if (!remote->vendor_id) {
		ece.vendor_id = p->local_ece.vendor_id;
		ece.options = 0;
	} else if (remote->vendor_id != p->local_ece.vendor_id) {
		CM_DBG("id %p: the REP's ECE vendor 0x%x is not ours (0x%x)", (void *)&p->id,
		       remote->vendor_id, p->local_ece.vendor_id);
		ucma_modify_qp_err(p);
		return -EINVAL;
	}
	p->remote_ece.vendor_id = remote->vendor_id;
	ret = ibv_set_ece(p->id.qp, &ece);
	if (ret && ret != EOPNOTSUPP) {
		CM_DBG("id %p: ibv_set_ece: %s", (void *)&p->id, strerror(ret));
		return -ret;
	}
	ret = process_conn_resp(p);
	if (ret) {
		CM_DBG("id %p: the REP's QP attributes failed: %s", (void *)&p->id, strerror(-ret));
		return ret;
	}
	ret = ibv_query_ece(p->id.qp, &ece);
	if (ret && ret != EOPNOTSUPP) {
		CM_DBG("id %p: ibv_query_ece: %s", (void *)&p->id, strerror(ret));
		ucma_modify_qp_err(p);
		return -ret;
	}
	p->local_ece.options = ret == EOPNOTSUPP ? 0 : ece.options;
	return 0;
}

int rdma_establish(struct rdma_cm_id *id)
{
	int ret;

	if (id->qp)
		return ucma_set_errno(EINVAL);
	pthread_mutex_lock(&cma_lock);
	ret = process_conn_resp(to_id_priv(id));
	pthread_mutex_unlock(&cma_lock);
	return ucma_err_ret(ret);
}

/* ------------------------------------------------------------------ */
/* Events                                                             */
/* ------------------------------------------------------------------ */
int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct cma_event *evt;
	struct rdma_id_private *p;
	int ret;

	if (!event)
		return ucma_set_errno(EINVAL);
	pthread_mutex_lock(&cma_lock);
retry:
	ret = cma_event_get(to_uch(channel), &evt);
	if (ret) {
		pthread_mutex_unlock(&cma_lock);
		return ucma_err_ret(ret);
	}
	p = evt->id_priv;
	p->events_reported++;
	switch (evt->event.event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST: {
		struct rdma_id_private *conn = to_id_priv(evt->event.id);

		p->backlog++;
		conn->initiator_depth = evt->event.param.conn.initiator_depth;
		conn->responder_resources = evt->event.param.conn.responder_resources;
		if (conn->id.qp_type == IBV_QPT_UD)
			conn->initiator_depth = conn->responder_resources = 0;
		conn->remote_ece.vendor_id = evt->ece.vendor_id;
		conn->remote_ece.options = evt->ece.attr_mod;
		if (p->sync) {
			/* a synchronous listener's connections are synchronous */
			struct rdma_event_channel *ch;

			pthread_mutex_unlock(&cma_lock);
			ch = rdma_create_event_channel();
			pthread_mutex_lock(&cma_lock);
			if (!ch) {
				/* leave the request as the kernel would */
				cma_destroy(conn);
				cma_id_free(conn);
				cma_event_complete(p);
				cma_event_free(evt);
				goto retry;
			}
			cma_event_move(conn, to_uch(ch));
			conn->id.channel = ch;
			conn->sync = true;
		}
		break;
	}
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		if (!p->id.qp) {
			p->remote_ece.vendor_id = evt->ece.vendor_id;
			p->remote_ece.options = evt->ece.attr_mod;
			break;
		}
		if (process_conn_resp_ece(p, &evt->ece)) {
			/* librdmacm reports -1 here, not an errno */
			evt->event.status = -1;
			evt->event.event = RDMA_CM_EVENT_CONNECT_ERROR;
			p->connect_error = true;
		} else {
			evt->event.event = RDMA_CM_EVENT_ESTABLISHED;
		}
		break;
	case RDMA_CM_EVENT_REJECTED:
		if (p->connect_error) {
			cma_event_complete(p);
			cma_event_free(evt);
			goto retry;
		}
		ucma_modify_qp_err(p);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (p->connect_error) {
			cma_event_complete(p);
			cma_event_free(evt);
			goto retry;
		}
		break;
	default:
		break;
	}
	pthread_mutex_unlock(&cma_lock);
	*event = &evt->event;
	return 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	switch (event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		return "RDMA_CM_EVENT_ADDR_RESOLVED";
	case RDMA_CM_EVENT_ADDR_ERROR:
		return "RDMA_CM_EVENT_ADDR_ERROR";
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		return "RDMA_CM_EVENT_ROUTE_RESOLVED";
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return "RDMA_CM_EVENT_ROUTE_ERROR";
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		return "RDMA_CM_EVENT_CONNECT_REQUEST";
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		return "RDMA_CM_EVENT_CONNECT_RESPONSE";
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return "RDMA_CM_EVENT_CONNECT_ERROR";
	case RDMA_CM_EVENT_UNREACHABLE:
		return "RDMA_CM_EVENT_UNREACHABLE";
	case RDMA_CM_EVENT_REJECTED:
		return "RDMA_CM_EVENT_REJECTED";
	case RDMA_CM_EVENT_ESTABLISHED:
		return "RDMA_CM_EVENT_ESTABLISHED";
	case RDMA_CM_EVENT_DISCONNECTED:
		return "RDMA_CM_EVENT_DISCONNECTED";
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return "RDMA_CM_EVENT_DEVICE_REMOVAL";
	case RDMA_CM_EVENT_MULTICAST_JOIN:
		return "RDMA_CM_EVENT_MULTICAST_JOIN";
	case RDMA_CM_EVENT_MULTICAST_ERROR:
		return "RDMA_CM_EVENT_MULTICAST_ERROR";
	case RDMA_CM_EVENT_ADDR_CHANGE:
		return "RDMA_CM_EVENT_ADDR_CHANGE";
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
	default:
		return "UNKNOWN EVENT";
	}
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	int ret;

	if (!optval)
		return ucma_set_errno(EFAULT);
	pthread_mutex_lock(&cma_lock);
	ret = cma_set_option(to_id_priv(id), level, optname, optval, optlen);
	pthread_mutex_unlock(&cma_lock);
	if (ret)
		return ucma_err_ret(ret);
	/* a path set by the application completes like rdma_resolve_route */
	if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH)
		return ucma_complete(id);
	return 0;
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct rdma_id_private *p = to_id_priv(id);
	struct rdma_event_channel *old = id->channel;
	bool sync = !channel, was_sync = p->sync;

	if (p->sync && !channel)
		return ucma_set_errno(EINVAL);
	if (sync) {
		channel = rdma_create_event_channel();
		if (!channel)
			return -1;
	}
	pthread_mutex_lock(&cma_lock);
	if (was_sync && id->event) {
		struct cma_event *evt = (struct cma_event *)id->event;

		cma_event_complete(evt->id_priv);
		cma_event_free(evt);
		id->event = NULL;
	}
	cma_event_move(p, to_uch(channel));
	p->sync = sync;
	id->channel = channel;
	/* the application must not handle this id's events on the old
	 * channel any more: wait for what it holds */
	while (p->events_completed < p->events_reported)
		pthread_cond_wait(&p->cond, &cma_lock);
	pthread_mutex_unlock(&cma_lock);
	if (was_sync)
		rdma_destroy_event_channel(old);
	return 0;
}

/* ------------------------------------------------------------------ */
/* rdma_create_ep                                                     */
/* ------------------------------------------------------------------ */
static int passive_ep(struct rdma_cm_id *id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		      struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_id_private *p = to_id_priv(id);
	int ret = rdma_bind_addr(id, res->ai_src_addr);

	if (ret)
		return ret;
	if (pd)
		id->pd = pd;
	if (qp_init_attr) {
		p->qp_init_attr = malloc(sizeof(*qp_init_attr));
		if (!p->qp_init_attr)
			return ucma_set_errno(ENOMEM);
		*p->qp_init_attr = *qp_init_attr;
		p->qp_init_attr->qp_type = res->ai_qp_type;
	}
	return 0;
}

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cm_id = NULL;
	int ret;

	if (!id || !res)
		return ucma_set_errno(EINVAL);
	ret = create_id(NULL, &cm_id, NULL, res->ai_port_space, res->ai_qp_type);
	if (ret)
		return ret;
	if (res->ai_flags & RAI_PASSIVE) {
		ret = passive_ep(cm_id, res, pd, qp_init_attr);
		if (ret)
			goto err;
		*id = cm_id;
		return 0;
	}
	ret = rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000);
	if (ret)
		goto err;
	if (res->ai_route_len)
		ret = rdma_set_option(cm_id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, res->ai_route,
				      res->ai_route_len);
	else
		ret = rdma_resolve_route(cm_id, 2000);
	if (ret)
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = res->ai_qp_type;
		ret = rdma_create_qp(cm_id, pd, qp_init_attr);
		if (ret)
			goto err;
	}
	if (res->ai_connect_len) {
		struct rdma_id_private *p = to_id_priv(cm_id);

		p->connect = malloc(res->ai_connect_len);
		if (!p->connect) {
			ret = ucma_set_errno(ENOMEM);
			goto err;
		}
		memcpy(p->connect, res->ai_connect, res->ai_connect_len);
		p->connect_len = res->ai_connect_len;
	}
	*id = cm_id;
	return 0;
err:
	{
		int e = errno;
		rdma_destroy_ep(cm_id);
		errno = e;
	}
	return ret;
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

/* ------------------------------------------------------------------ */
/* Ports, ECE, multicast                                              */
/* ------------------------------------------------------------------ */
__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return htons(cma_port(&id->route.addr.src_addr));
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return htons(cma_port(&id->route.addr.dst_addr));
}

int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	struct rdma_id_private *p;

	if (!id || id->qp || !ece || !ece->vendor_id || ece->comp_mask)
		return ucma_set_errno(EINVAL);
	p = to_id_priv(id);
	p->local_ece.vendor_id = ece->vendor_id;
	p->local_ece.options = ece->options;
	return 0;
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	struct rdma_id_private *p;

	if (!id || id->qp || !ece)
		return ucma_set_errno(EINVAL);
	p = to_id_priv(id);
	ece->vendor_id = p->remote_ece.vendor_id;
	ece->options = p->remote_ece.options;
	ece->comp_mask = 0;
	return 0;
}

/*
 * Multicast (docs/multicast.md): the kernel half maps the group to its MGID
 * and queues MULTICAST_JOIN; librdmacm's half attaches the id's QP to the
 * MGID (not for a send-only join), which urvt does here, at the join, so a
 * failed attach comes back as MULTICAST_ERROR.
 */
static int join_mc(struct rdma_cm_id *id, const struct sockaddr *addr, uint32_t flags,
		   void *context)
{
	struct rdma_id_private *p = to_id_priv(id);
	struct cma_multicast *mc;
	int ret, status = 0;

	if (flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
		return ucma_set_errno(EINVAL);
	mc = calloc(1, sizeof(*mc));
	if (!mc)
		return ucma_set_errno(ENOMEM);
	pthread_mutex_lock(&cma_lock);
	ret = cma_mc_gid(p, addr, &mc->mgid);
	if (ret)
		goto err;
	memcpy(&mc->addr, addr, cma_addrlen(addr));
	mc->join_flags = (uint8_t)flags;
	mc->context = context;
	if (id->qp && flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER) {
		status = -ibv_attach_mcast(id->qp, &mc->mgid, 0);
		mc->attached = !status;
	}
	ret = cma_mc_event(p, mc, status);
	if (ret) {
		ucma_detach_mc(id, mc);
		goto err;
	}
	mc->next = p->mc_list;
	p->mc_list = mc;
	pthread_mutex_unlock(&cma_lock);
	return ucma_complete(id);
err:
	pthread_mutex_unlock(&cma_lock);
	free(mc);
	return ucma_err_ret(ret);
}

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc_join_attr,
			   void *context)
{
	const uint32_t need = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;

	if (!mc_join_attr || (mc_join_attr->comp_mask & need) != need ||
	    (mc_join_attr->comp_mask & ~need) || !mc_join_attr->addr)
		return ucma_set_errno(EINVAL);
	return join_mc(id, mc_join_attr->addr, mc_join_attr->join_flags, context);
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	if (!addr || !cma_addrlen(addr))
		return ucma_set_errno(EINVAL);
	return join_mc(id, addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

/* Off the list and detached (cma_lock held). */
static void leave_mc(struct rdma_cm_id *id, struct cma_multicast **pp)
{
	struct cma_multicast *mc = *pp;

	*pp = mc->next;
	ucma_detach_mc(id, mc);
	free(mc);
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct rdma_id_private *p = to_id_priv(id);
	socklen_t len = addr ? cma_addrlen(addr) : 0;
	struct cma_multicast **pp;

	if (!len)
		return ucma_set_errno(EINVAL);
	pthread_mutex_lock(&cma_lock);
	for (pp = &p->mc_list; *pp; pp = &(*pp)->next)
		if (!memcmp(&(*pp)->addr, addr, len))
			break;
	if (!*pp) {
		pthread_mutex_unlock(&cma_lock);
		return ucma_set_errno(EADDRNOTAVAIL);
	}
	leave_mc(id, pp);
	pthread_mutex_unlock(&cma_lock);
	return 0;
}

/* rsockets' queue sizes (librdmacm's ucma_max_qpsize). */
int ucma_max_qpsize(struct rdma_cm_id *id);
int ucma_max_qpsize(struct rdma_cm_id *id)
{
	struct rdma_id_private *p = id ? to_id_priv(id) : NULL;
	struct cma_device *dev;
	int n = 0;

	pthread_mutex_lock(&cma_lock);
	dev = p && p->cma_dev ? p->cma_dev : cma_device_if_open();
	if (dev)
		n = dev->max_qpsize;
	pthread_mutex_unlock(&cma_lock);
	return n ? n : 16384;
}

/*
 * The process exits: leave every connection as the kernel does when the
 * process's rdma_cm file closes (DREQ, DREP or REJ as each state asks), so
 * peers do not wait for the CM timeouts. Memory is left to the exit.
 */
static void __attribute__((destructor)) ucma_exit(void)
{
	if (pthread_mutex_trylock(&cma_lock))
		return; /* another thread is inside the library: leave it be */
	for (struct rdma_id_private *p = cma_all_ids; p; p = p->all_next) {
		if (p->cm_id) {
			p->cm_id->cm_handler = NULL;
			ib_destroy_cm_id(p->cm_id);
			p->cm_id = NULL;
		}
	}
	pthread_mutex_unlock(&cma_lock);
}
