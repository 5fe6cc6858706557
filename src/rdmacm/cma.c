/*
 * The RDMA connection manager (the kernel's drivers/infiniband/core/cma.c
 * for RoCE): ids and their states, port spaces, local address and route
 * resolution, the CMA header in REQ / SIDR_REQ private data, and the
 * translation of IB CM events into rdma_cm events queued on the ids'
 * channels. The ids here are "user" ids in the kernel's sense: their QPs
 * are the application's, moved through their states by ucma.c.
 *
 * Where urvt differs from Linux (docs/rdmacm.md): a loopback address
 * (127/8, ::1) is a real address of one urvt device, not "any device", so
 * rdma_bind_addr(127.0.0.2) binds that address and a REQ for 127.0.0.2
 * reaches the process that owns it; address resolution needs no ARP (the
 * route's source address is the device's); the route is built locally as
 * the kernel does for RoCE.
 *
 * Ports, binding, address and route resolution are in cma_addr.c.
 *
 * Every function is called with cma_lock held.
 */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/random.h"
#include "rdmacm/addr.h"
#include "rdmacm/cma_priv.h"

#define CMA_MAX_BACKLOG 1024              /* net.rdma_ucm.max_backlog */
#define CMA_CM_MRA_SETTING (IB_CM_MRA_FLAG_DELAY | 24)

struct rdma_id_private *cma_all_ids;

uint32_t cma_random(void)
{
	return (uint32_t)urvt_random64();
}

struct rdma_id_private *cma_id_alloc(struct rdma_event_channel *ch, void *context,
				     enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	struct rdma_id_private *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->id.channel = ch;
	p->id.context = context;
	p->id.ps = ps;
	p->id.qp_type = qp_type;
	p->state = RDMA_CM_IDLE;
	p->seq_num = cma_random() & 0xffffff;
	pthread_cond_init(&p->cond, NULL);
	p->all_next = cma_all_ids;
	if (cma_all_ids)
		cma_all_ids->all_prev = p;
	cma_all_ids = p;
	return p;
}

void cma_id_free(struct rdma_id_private *p)
{
	if (p->all_prev)
		p->all_prev->all_next = p->all_next;
	else
		cma_all_ids = p->all_next;
	if (p->all_next)
		p->all_next->all_prev = p->all_prev;
	pthread_cond_destroy(&p->cond);
	free(p->connect);
	free(p->qp_init_attr);
	free(p);
}

void cma_attach_to_dev(struct rdma_id_private *p, struct cma_device *dev)
{
	p->cma_dev = dev;
	p->id.verbs = dev->verbs;
	p->id.pd = dev->pd;
	p->id.port_num = 1;
	p->id.route.addr.addr.ibaddr.sgid = dev->gid;
	p->id.route.addr.addr.ibaddr.pkey = htobe16(0xffff);
}

/*
 * Deviation (docs/rdmacm.md): a loopback address names this host. On Linux
 * all of 127/8 is every process's; here each process's device has its own
 * address, so a loopback address it does not hold (or holds busy) binds the
 * wildcard instead, the port kept (on the process's device if that is a
 * loopback one): rdma-core's tests connect 127.0.0.1 ->
 * 127.0.0.1 from two processes, libfabric's verbs provider binds
 * "localhost" when given no source.
 */

int cma_queue(struct rdma_id_private *p, struct rdma_id_private *owner,
	      enum rdma_cm_event_type type, int status, struct cma_event **out)
{
	struct cma_event *evt = cma_event_alloc(owner, &p->id, type, status);

	if (!evt)
		return -ENOMEM;
	if (out)
		*out = evt;
	cma_event_queue(to_uch(owner->id.channel), evt);
	return 0;
}

/* ------------------------------------------------------------------ */
/* The CMA header                                                     */
/* ------------------------------------------------------------------ */
static void cma_format_hdr(uint8_t *out, struct rdma_id_private *p)
{
	struct cma_hdr h;
	struct sockaddr *s = cma_src_addr(p), *d = cma_dst_addr(p);

	memset(&h, 0, sizeof(h));
	if (s->sa_family == AF_INET) {
		h.ip_version = 4;
		memcpy(&h.src[12], &((struct sockaddr_in *)s)->sin_addr, 4);
		memcpy(&h.dst[12], &((struct sockaddr_in *)d)->sin_addr, 4);
	} else {
		h.ip_version = 6;
		memcpy(h.src, &((struct sockaddr_in6 *)s)->sin6_addr, 16);
		memcpy(h.dst, &((struct sockaddr_in6 *)d)->sin6_addr, 16);
	}
	h.port = cma_port(s);
	cma_hdr_pack(out, &h);
}

static void cma_save_ip_info(struct rdma_id_private *conn, const struct cma_hdr *h,
			     uint16_t local_port)
{
	struct rdma_addr *a = &conn->id.route.addr;

	memset(&a->src_storage, 0, sizeof(a->src_storage));
	memset(&a->dst_storage, 0, sizeof(a->dst_storage));
	if (h->ip_version == 4) {
		a->src_sin.sin_family = a->dst_sin.sin_family = AF_INET;
		memcpy(&a->src_sin.sin_addr, &h->dst[12], 4);
		memcpy(&a->dst_sin.sin_addr, &h->src[12], 4);
		a->src_sin.sin_port = htons(local_port);
		a->dst_sin.sin_port = htons(h->port);
	} else {
		a->src_sin6.sin6_family = a->dst_sin6.sin6_family = AF_INET6;
		memcpy(&a->src_sin6.sin6_addr, h->dst, 16);
		memcpy(&a->dst_sin6.sin6_addr, h->src, 16);
		a->src_sin6.sin6_port = htons(local_port);
		a->dst_sin6.sin6_port = htons(h->port);
	}
}

/* Does listener l take a request whose CMA header is h (the kernel's
 * cma_match_private_data)? */
static bool cma_match_private_data(struct rdma_id_private *l, const struct cma_hdr *h)
{
	struct sockaddr *a = cma_src_addr(l);

	if (cma_zero_addr(a) && !l->afonly)
		return true;
	if (a->sa_family == AF_INET) {
		if (h->ip_version != 4)
			return false;
		return cma_zero_addr(a) || !memcmp(&h->dst[12], &((struct sockaddr_in *)a)->sin_addr, 4);
	}
	if (a->sa_family == AF_INET6) {
		if (h->ip_version != 6)
			return false;
		return cma_zero_addr(a) || !memcmp(h->dst, &((struct sockaddr_in6 *)a)->sin6_addr, 16);
	}
	return false;
}

static struct rdma_id_private *cma_find_listener(uint64_t sid, const struct cma_hdr *h)
{
	struct cma_bind_list *b = cma_ps_find(cm_service_ps(sid), cm_service_port(sid));

	if (!b)
		return NULL;
	for (struct rdma_id_private *p = b->owners; p; p = p->bind_next)
		if (p->state == RDMA_CM_LISTEN && cma_match_private_data(p, h))
			return p;
	return NULL;
}

/* ------------------------------------------------------------------ */
/* IB CM events -> rdma_cm events                                     */
/* ------------------------------------------------------------------ */
static void copy_pdata(struct cma_event *evt, const void *data, size_t len, uint8_t *out_len,
		       const void **out_ptr)
{
	if (!data || !len) {
		*out_len = 0;
		*out_ptr = NULL;
		return;
	}
	if (len > sizeof(evt->private_data))
		len = sizeof(evt->private_data);
	memcpy(evt->private_data, data, len);
	*out_len = (uint8_t)len;
	*out_ptr = evt->private_data;
}

static void cma_ud_ah_attr(struct rdma_id_private *p, struct ibv_ah_attr *ah)
{
	const struct ibv_sa_path_rec *r = &p->path_rec;

	memset(ah, 0, sizeof(*ah));
	ah->is_global = 1;
	ah->port_num = 1;
	ah->sl = r->sl;
	ah->grh.dgid = r->dgid;
	ah->grh.sgid_index = 0;
	ah->grh.flow_label = be32toh(r->flow_label);
	ah->grh.hop_limit = r->hop_limit;
	ah->grh.traffic_class = r->traffic_class;
}

static int cma_set_qkey(struct rdma_id_private *p, uint32_t qkey)
{
	if (p->qkey)
		return qkey && p->qkey != qkey ? -EINVAL : 0;
	if (qkey) {
		p->qkey = qkey;
		return 0;
	}
	if (p->id.ps == RDMA_PS_UDP || p->id.ps == RDMA_PS_IB)
		p->qkey = RDMA_UDP_QKEY;
	return 0;
}

static int cma_ib_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *ev)
{
	struct rdma_id_private *p = cm_id->context;
	struct cma_event *evt;
	enum rdma_cm_event_type type;
	int status = 0;

	if ((ev->event != IB_CM_TIMEWAIT_EXIT && p->state != RDMA_CM_CONNECT) ||
	    (ev->event == IB_CM_TIMEWAIT_EXIT && p->state != RDMA_CM_DISCONNECT))
		return 0;
	switch (ev->event) {
	case IB_CM_REQ_ERROR:
	case IB_CM_REP_ERROR:
		type = RDMA_CM_EVENT_UNREACHABLE;
		status = -ETIMEDOUT;
		break;
	case IB_CM_REP_RECEIVED:
		/* the application answers with the RTU (ucma.c): ask the peer
		 * to wait for it, should its REP come again */
		if (p->id.qp_type != IBV_QPT_UD)
			ib_send_cm_mra(cm_id, CMA_CM_MRA_SETTING, NULL, 0);
		type = RDMA_CM_EVENT_CONNECT_RESPONSE;
		break;
	case IB_CM_RTU_RECEIVED:
	case IB_CM_USER_ESTABLISHED:
		type = RDMA_CM_EVENT_ESTABLISHED;
		break;
	case IB_CM_DREQ_ERROR:
		status = -ETIMEDOUT;
		/* fall through */
	case IB_CM_DREQ_RECEIVED:
	case IB_CM_DREP_RECEIVED:
		if (p->state != RDMA_CM_CONNECT)
			return 0;
		p->state = RDMA_CM_DISCONNECT;
		type = RDMA_CM_EVENT_DISCONNECTED;
		break;
	case IB_CM_TIMEWAIT_EXIT:
		type = RDMA_CM_EVENT_TIMEWAIT_EXIT;
		break;
	case IB_CM_MRA_RECEIVED:
		return 0;
	case IB_CM_REJ_RECEIVED:
		type = RDMA_CM_EVENT_REJECTED;
		status = ev->param.rej_rcvd.reason;
		break;
	case IB_CM_SIDR_REQ_ERROR:
		type = RDMA_CM_EVENT_UNREACHABLE;
		status = -ETIMEDOUT;
		break;
	case IB_CM_SIDR_REP_RECEIVED:
		if (ev->param.sidr_rep_rcvd.status != IB_SIDR_SUCCESS) {
			type = RDMA_CM_EVENT_UNREACHABLE;
			status = ev->param.sidr_rep_rcvd.status;
		} else if (cma_set_qkey(p, ev->param.sidr_rep_rcvd.qkey)) {
			type = RDMA_CM_EVENT_ADDR_ERROR;
			status = -EINVAL;
		} else {
			type = RDMA_CM_EVENT_ESTABLISHED;
		}
		break;
	default:
		return 0;
	}
	if (cma_queue(p, p, type, status, &evt))
		return 0;
	switch (ev->event) {
	case IB_CM_REP_RECEIVED: {
		const struct ib_cm_rep_event_param *r = &ev->param.rep_rcvd;
		struct rdma_conn_param *c = &evt->event.param.conn;

		copy_pdata(evt, ev->private_data, IB_CM_REP_PRIVATE_DATA_SIZE,
			   &c->private_data_len, &c->private_data);
		c->responder_resources = r->responder_resources;
		c->initiator_depth = r->initiator_depth;
		c->flow_control = r->flow_control;
		c->rnr_retry_count = r->rnr_retry_count;
		c->srq = r->srq;
		c->qp_num = r->remote_qpn;
		evt->ece = r->ece;
		break;
	}
	case IB_CM_REJ_RECEIVED:
		copy_pdata(evt, ev->private_data, IB_CM_REJ_PRIVATE_DATA_SIZE,
			   &evt->event.param.conn.private_data_len,
			   &evt->event.param.conn.private_data);
		break;
	case IB_CM_SIDR_REP_RECEIVED: {
		struct rdma_ud_param *u = &evt->event.param.ud;

		copy_pdata(evt, ev->private_data, IB_CM_SIDR_REP_PRIVATE_DATA_SIZE,
			   &u->private_data_len, &u->private_data);
		if (type == RDMA_CM_EVENT_ESTABLISHED) {
			cma_ud_ah_attr(p, &u->ah_attr);
			u->qp_num = ev->param.sidr_rep_rcvd.qpn;
			u->qkey = ev->param.sidr_rep_rcvd.qkey;
		}
		evt->ece = ev->param.sidr_rep_rcvd.ece;
		break;
	}
	default:
		break;
	}
	return 0;
}

/* A REQ or SIDR_REQ for one of our ports (the kernel's cma_req_handler). */
static int cma_req_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *ev)
{
	bool sidr = ev->event == IB_CM_SIDR_REQ_RECEIVED;
	uint64_t sid = cm_id->service_id;
	struct rdma_id_private *l, *conn;
	struct cma_event *evt;
	struct cma_hdr h;
	enum ibv_qp_type qpt;

	if (!cm_service_is_ip(sid) || cma_hdr_unpack(ev->private_data, &h))
		return -EINVAL;
	l = cma_find_listener(sid, &h);
	if (!l)
		return -EINVAL;
	qpt = sidr ? IBV_QPT_UD : ev->param.req_rcvd.qp_type;
	if (qpt != l->id.qp_type)
		return -EINVAL;
	if (l->backlog <= 0)
		return -ENOMEM; /* the listener's queue is full: the REQ may come again */
	conn = cma_id_alloc(l->id.channel, l->id.context, l->id.ps, qpt);
	if (!conn)
		return -ENOMEM;
	cma_save_ip_info(conn, &h, cm_service_port(sid));
	cma_attach_to_dev(conn, l->cma_dev ? l->cma_dev : cma_device_if_open());
	if (sidr) {
		cma_fill_path(conn);
	} else {
		const struct cm_path *cp = &ev->param.req_rcvd.primary_path;
		struct ibv_sa_path_rec *r = &conn->path_rec;

		memset(r, 0, sizeof(*r));
		r->sgid = cp->sgid;
		r->dgid = cp->dgid;
		r->flow_label = htobe32(cp->flow_label);
		r->hop_limit = cp->hop_limit;
		r->traffic_class = cp->traffic_class;
		r->reversible = 1;
		r->numb_path = 1;
		r->pkey = htobe16(cp->pkey);
		r->sl = cp->sl;
		r->mtu_selector = r->rate_selector = r->packet_life_time_selector = 2;
		r->mtu = cp->mtu;
		r->rate = cp->rate;
		r->packet_life_time = cp->packet_life_time;
		conn->id.route.path_rec = r;
		conn->id.route.num_paths = 1;
		conn->id.route.addr.addr.ibaddr.dgid = r->dgid;
	}
	conn->cm_id = cm_id;
	cm_id->context = conn;
	cm_id->cm_handler = cma_ib_handler;
	conn->state = RDMA_CM_CONNECT;

	evt = cma_event_alloc(l, &conn->id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!evt) {
		cm_id->cm_handler = NULL;
		conn->cm_id = NULL;
		cma_id_free(conn);
		return -ENOMEM;
	}
	evt->event.listen_id = &l->id;
	if (sidr) {
		struct rdma_ud_param *u = &evt->event.param.ud;

		copy_pdata(evt, ev->private_data + CMA_HDR_SIZE,
			   IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE - CMA_HDR_SIZE, &u->private_data_len,
			   &u->private_data);
	} else {
		const struct ib_cm_req_event_param *r = &ev->param.req_rcvd;
		struct rdma_conn_param *c = &evt->event.param.conn;

		copy_pdata(evt, ev->private_data + CMA_HDR_SIZE,
			   IB_CM_REQ_PRIVATE_DATA_SIZE - CMA_HDR_SIZE, &c->private_data_len,
			   &c->private_data);
		c->responder_resources = r->responder_resources;
		c->initiator_depth = r->initiator_depth;
		c->flow_control = r->flow_control;
		c->retry_count = r->retry_count;
		c->rnr_retry_count = r->rnr_retry_count;
		c->srq = r->srq;
		c->qp_num = r->remote_qpn;
		evt->ece = r->ece;
	}
	l->backlog--;
	cma_event_queue(to_uch(l->id.channel), evt);
	/* not accepted yet: a duplicate REQ gets an MRA (sent only then) */
	if (!sidr)
		ib_send_cm_mra(cm_id, CMA_CM_MRA_SETTING, NULL, 0);
	return 0;
}

int cma_listen(struct rdma_id_private *p, int backlog)
{
	struct cma_device *dev;
	int ret;

	if (p->state == RDMA_CM_IDLE) {
		struct sockaddr_in any = { .sin_family = AF_INET };

		ret = cma_bind_addr(p, (struct sockaddr *)&any);
		if (ret)
			return ret;
	}
	if (p->state != RDMA_CM_ADDR_BOUND)
		return -EINVAL;
	if (p->reuseaddr && p->bind_list) {
		ret = cma_check_port(p->bind_list, p, false);
		if (ret)
			return ret;
	}
	/* a wildcard listener still needs the device to hear REQs on */
	ret = cma_get_device(NULL, &dev);
	if (ret)
		return ret;
	p->cm_id = ib_create_cm_id(dev->cm, cma_req_handler, p, &ret);
	if (!p->cm_id)
		return ret;
	ret = ib_cm_listen(p->cm_id, cm_service_id((uint16_t)p->id.ps, cma_port(cma_src_addr(p))));
	/* other processes' REQs for the port are forwarded here from now
	 * on; a reuseaddr port shared with them fails now (the host's rule) */
	if (!ret)
		ret = cma_host_port_listen(p);
	if (ret) {
		ib_destroy_cm_id(p->cm_id);
		p->cm_id = NULL;
		return ret;
	}
	if (!p->cma_dev)
		p->cma_dev = dev; /* for its connections; id.verbs stays NULL as in Linux */
	p->backlog = backlog > 0 && backlog < CMA_MAX_BACKLOG ? backlog : CMA_MAX_BACKLOG;
	p->state = RDMA_CM_LISTEN;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Connect, accept, reject, disconnect                                */
/* ------------------------------------------------------------------ */
/* What REQ and SIDR_REQ begin with: the private data behind the CMA header
 * (size bytes in all), a CM id of the connection, its path. */
static int cma_req_start(struct rdma_id_private *p, const struct rdma_conn_param *c,
			 uint8_t *pdata, size_t size, struct cm_path *path)
{
	int ret;

	if ((size_t)CMA_HDR_SIZE + c->private_data_len > size)
		return -EINVAL;
	memset(pdata, 0, size);
	if (c->private_data && c->private_data_len)
		memcpy(pdata + CMA_HDR_SIZE, c->private_data, c->private_data_len);
	cma_format_hdr(pdata, p);
	p->cm_id = ib_create_cm_id(p->cma_dev->cm, cma_ib_handler, p, &ret);
	if (!p->cm_id)
		return ret;
	cma_cm_path(p, path);
	return 0;
}

static int cma_connect_ib(struct rdma_id_private *p, const struct rdma_conn_param *c,
			  const struct ibv_ece *ece)
{
	uint8_t pdata[IB_CM_REQ_PRIVATE_DATA_SIZE];
	struct ib_cm_req_param req;
	struct cm_path path;
	int ret = cma_req_start(p, c, pdata, sizeof(pdata), &path);

	if (ret)
		return ret;
	memset(&req, 0, sizeof(req));
	req.primary_path = &path;
	req.service_id = cm_service_id((uint16_t)p->id.ps, cma_port(cma_dst_addr(p)));
	req.qp_num = p->qp_num;
	req.qp_type = p->id.qp_type;
	req.starting_psn = p->seq_num;
	req.private_data = pdata;
	req.private_data_len = (uint8_t)(CMA_HDR_SIZE + c->private_data_len);
	req.responder_resources = c->responder_resources;
	req.initiator_depth = c->initiator_depth;
	req.flow_control = c->flow_control;
	req.retry_count = c->retry_count > 7 ? 7 : c->retry_count;
	req.rnr_retry_count = c->rnr_retry_count > 7 ? 7 : c->rnr_retry_count;
	req.remote_cm_response_timeout = cma_response_timeout();
	req.local_cm_response_timeout = cma_response_timeout();
	req.max_cm_retries = cma_max_cm_retries();
	req.srq = p->srq;
	if (ece) {
		req.ece.vendor_id = ece->vendor_id;
		req.ece.attr_mod = ece->options;
	}
	ret = ib_send_cm_req(p->cm_id, &req);
	if (ret) {
		ib_destroy_cm_id(p->cm_id);
		p->cm_id = NULL;
	}
	return ret;
}

static int cma_resolve_ib_udp(struct rdma_id_private *p, const struct rdma_conn_param *c)
{
	uint8_t pdata[IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE];
	struct ib_cm_sidr_req_param req;
	struct cm_path path;
	int ret = cma_req_start(p, c, pdata, sizeof(pdata), &path);

	if (ret)
		return ret;
	memset(&req, 0, sizeof(req));
	req.path = &path;
	req.service_id = cm_service_id((uint16_t)p->id.ps, cma_port(cma_dst_addr(p)));
	req.timeout_ms = cm_convert_to_ms(cma_response_timeout());
	req.max_cm_retries = cma_max_cm_retries();
	req.private_data = pdata;
	req.private_data_len = (uint8_t)(CMA_HDR_SIZE + c->private_data_len);
	ret = ib_send_cm_sidr_req(p->cm_id, &req);
	if (ret) {
		ib_destroy_cm_id(p->cm_id);
		p->cm_id = NULL;
	}
	return ret;
}

/* The opening cma_connect and cma_accept share: the QP number and SRQ flag
 * the REQ or REP announces are the id's QP's, else those the caller's
 * parameters name (none: as they were). */
static void cma_conn_qp(struct rdma_id_private *p, const struct rdma_conn_param *c)
{
	if (p->id.qp) {
		p->qp_num = p->id.qp->qp_num;
		p->srq = p->id.qp->srq != NULL;
	} else if (c) {
		p->qp_num = c->qp_num;
		p->srq = c->srq;
	}
}

int cma_connect(struct rdma_id_private *p, const struct rdma_conn_param *c,
		const struct ibv_ece *ece)
{
	struct rdma_conn_param none;
	int ret;

	if (p->state != RDMA_CM_ROUTE_RESOLVED)
		return -EINVAL;
	if (!c) {
		memset(&none, 0, sizeof(none));
		c = &none;
	}
	p->state = RDMA_CM_CONNECT;
	cma_conn_qp(p, c);
	if (p->id.qp_type == IBV_QPT_UD)
		ret = cma_resolve_ib_udp(p, c);
	else
		ret = cma_connect_ib(p, c, ece);
	if (ret)
		p->state = RDMA_CM_ROUTE_RESOLVED;
	return ret;
}

int cma_reject(struct rdma_id_private *p, const void *pdata, uint8_t len, uint8_t reason)
{
	if (!p->cm_id)
		return -EINVAL;
	if (p->id.qp_type == IBV_QPT_UD) {
		struct ib_cm_sidr_rep_param rep = {
			.status = IB_SIDR_REJECT, .private_data = pdata, .private_data_len = len,
		};
		return ib_send_cm_sidr_rep(p->cm_id, &rep);
	}
	return ib_send_cm_rej(p->cm_id, reason ? reason : IB_CM_REJ_CONSUMER_DEFINED, NULL, 0,
			      pdata, len);
}

int cma_accept(struct rdma_id_private *p, const struct rdma_conn_param *c,
	       const struct ibv_ece *ece)
{
	int ret;

	if (p->state != RDMA_CM_CONNECT || !p->cm_id)
		return -EINVAL;
	cma_conn_qp(p, c);
	if (p->id.qp_type == IBV_QPT_UD) {
		struct ib_cm_sidr_rep_param rep = { .status = IB_SIDR_SUCCESS };

		ret = cma_set_qkey(p, 0);
		if (!ret) {
			rep.qp_num = p->qp_num;
			rep.qkey = p->qkey;
			if (c) {
				rep.private_data = c->private_data;
				rep.private_data_len = c->private_data_len;
			}
			if (ece) {
				rep.ece.vendor_id = ece->vendor_id;
				rep.ece.attr_mod = ece->options;
			}
			ret = ib_send_cm_sidr_rep(p->cm_id, &rep);
		}
	} else if (c) {
		struct ib_cm_rep_param rep = {
			.qp_num = p->qp_num,
			.starting_psn = p->seq_num,
			.private_data = c->private_data,
			.private_data_len = c->private_data_len,
			.responder_resources = c->responder_resources,
			.initiator_depth = c->initiator_depth,
			.flow_control = c->flow_control,
			.rnr_retry_count = c->rnr_retry_count > 7 ? 7 : c->rnr_retry_count,
			.srq = p->srq,
		};

		if (ece) {
			rep.ece.vendor_id = ece->vendor_id;
			rep.ece.attr_mod = ece->options;
		}
		ret = ib_send_cm_rep(p->cm_id, &rep);
	} else {
		/* the active side after CONNECT_RESPONSE: the RTU */
		ret = ib_send_cm_rtu(p->cm_id, NULL, 0);
	}
	if (ret)
		cma_reject(p, NULL, 0, 0);
	return ret;
}

int cma_disconnect(struct rdma_id_private *p)
{
	if (!p->cm_id)
		return -EINVAL;
	/* initiate, or answer the peer's DREQ */
	if (ib_send_cm_dreq(p->cm_id, NULL, 0))
		ib_send_cm_drep(p->cm_id, NULL, 0);
	return 0;
}

int cma_notify(struct rdma_id_private *p, enum ibv_event_type event)
{
	if (!p->cm_id)
		return -EINVAL;
	return ib_cm_notify(p->cm_id, event);
}

int cma_init_qp_attr(struct rdma_id_private *p, struct ibv_qp_attr *a, int *mask)
{
	int ret = 0;

	if (!p->cma_dev)
		return -EINVAL;
	if (!p->cm_id || p->id.qp_type == IBV_QPT_UD) {
		/* the kernel's cma_ib_init_qp_attr */
		a->pkey_index = 0;
		a->port_num = 1;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		if (p->id.qp_type == IBV_QPT_UD) {
			ret = cma_set_qkey(p, 0);
			if (ret)
				return ret;
			a->qkey = p->qkey;
			*mask |= IBV_QP_QKEY;
		} else {
			a->qp_access_flags = 0;
			*mask |= IBV_QP_ACCESS_FLAGS;
		}
	} else {
		ret = ib_cm_init_qp_attr(p->cm_id, a, mask);
	}
	if (ret)
		return ret;
	if (a->qp_state == IBV_QPS_RTR)
		a->rq_psn = p->seq_num;
	if ((*mask & IBV_QP_TIMEOUT) && p->timeout_set)
		a->timeout = p->timeout;
	return 0;
}

int cma_set_option(struct rdma_id_private *p, int level, int optname, const void *optval,
		   size_t optlen)
{
	if (level == RDMA_OPTION_IB) {
		if (optname != RDMA_OPTION_IB_PATH)
			return -ENOSYS;
		return cma_set_ib_path(p, optval, optlen);
	}
	if (level != RDMA_OPTION_ID)
		return -ENOSYS;
	switch (optname) {
	case RDMA_OPTION_ID_TOS:
		if (optlen != sizeof(uint8_t))
			return -EINVAL;
		p->tos = *(const uint8_t *)optval;
		p->tos_set = true;
		return 0;
	case RDMA_OPTION_ID_REUSEADDR: {
		int reuse;

		if (optlen != sizeof(int))
			return -EINVAL;
		reuse = *(const int *)optval;
		if (!reuse && p->state != RDMA_CM_IDLE)
			return -EINVAL;
		p->reuseaddr = reuse != 0;
		cma_host_port_flags(p); /* a bound id's entry says it too */
		return 0;
	}
	case RDMA_OPTION_ID_AFONLY:
		if (optlen != sizeof(int))
			return -EINVAL;
		if (p->state != RDMA_CM_IDLE && p->state != RDMA_CM_ADDR_BOUND)
			return -EINVAL;
		p->afonly = *(const int *)optval != 0;
		p->afonly_set = true;
		cma_host_port_flags(p);
		return 0;
	case RDMA_OPTION_ID_ACK_TIMEOUT:
		if (optlen != sizeof(uint8_t))
			return -EINVAL;
		if (p->id.qp_type != IBV_QPT_RC)
			return -EINVAL;
		p->timeout = *(const uint8_t *)optval;
		p->timeout_set = true;
		return 0;
	default:
		return -ENOSYS;
	}
}

/* rdma_join_multicast's kernel half for RoCEv2 (docs/multicast.md): the
 * id is bound to the device, UD, and the group address maps to its MGID
 * (IPv4: the IPv4-mapped GID; IPv6: the address itself). */
int cma_mc_gid(struct rdma_id_private *p, const struct sockaddr *addr, union ibv_gid *mgid)
{
	if (!p->cma_dev || (p->state != RDMA_CM_ADDR_BOUND && p->state != RDMA_CM_ADDR_RESOLVED) ||
	    p->id.qp_type != IBV_QPT_UD || !cma_addrlen(addr) || !cma_mcast_addr(addr))
		return -EINVAL;
	memset(mgid, 0, sizeof(*mgid));
	if (addr->sa_family == AF_INET) {
		mgid->raw[10] = mgid->raw[11] = 0xff;
		memcpy(mgid->raw + 12, &((const struct sockaddr_in *)addr)->sin_addr, 4);
	} else {
		memcpy(mgid->raw, &((const struct sockaddr_in6 *)addr)->sin6_addr, 16);
	}
	return 0;
}

/* The join's event: MULTICAST_JOIN with what reaches the group (an AH to
 * the MGID, QPN 0xFFFFFF, the id's Q_Key, the join's context as
 * private_data), or MULTICAST_ERROR with status. */
int cma_mc_event(struct rdma_id_private *p, const struct cma_multicast *mc, int status)
{
	struct cma_event *evt;
	struct rdma_ud_param *u;
	int ret = cma_set_qkey(p, 0);

	if (ret)
		return ret;
	ret = cma_queue(p, p, status ? RDMA_CM_EVENT_MULTICAST_ERROR : RDMA_CM_EVENT_MULTICAST_JOIN,
			status, &evt);
	if (ret)
		return ret;
	u = &evt->event.param.ud;
	u->private_data = mc->context;
	u->ah_attr.is_global = 1;
	u->ah_attr.port_num = 1;
	u->ah_attr.grh.dgid = mc->mgid;
	u->ah_attr.grh.hop_limit = 64; /* the kernel's for RoCEv2 groups */
	u->ah_attr.grh.traffic_class = p->tos;
	u->qp_num = 0xffffff; /* the multicast QPN */
	u->qkey = p->qkey;
	return 0;
}

/* The kernel's rdma_destroy_id, short of the memory: leave the protocol
 * (REJ/DREQ/DREP as the IB CM state asks), the port, queued events. */
void cma_destroy(struct rdma_id_private *p)
{
	p->state = RDMA_CM_DESTROYING;
	if (p->cm_id) {
		p->cm_id->cm_handler = NULL;
		ib_destroy_cm_id(p->cm_id);
		p->cm_id = NULL;
	}
	cma_release_port(p);
	cma_event_discard(p);
}
