/*
 * The IB CM's passive side (cm_priv.h): listeners, the REQ in (or a
 * repeated one, or one waiting for its listener), the REP out, the RTU in.
 */
#include "rdmacm/cm_priv.h"

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "base/progress.h"
#include "base/timer.h"

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

static enum ibv_qp_type cm_req_qp_type(const struct cm_mad *m)
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
bool cm_defer(struct cm_device *dev, const struct cm_mad *m, const union ibv_gid *sgid)
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

void cm_req_handler(struct cm_device *dev, const struct cm_mad *m,
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
	p->qp_type = cm_req_qp_type(m);
	p->remote_ca_guid = cm_get(m, CM_REQ_LOCAL_CA_GUID);
	p->dgid = *sgid; /* responses go back where the REQ came from */
	p->id.state = IB_CM_REQ_RCVD;

	/* a duplicate: the kernel's cm_match_req */
	cur = cm_rid_insert(p);
	if (cur) {
		cm_dup_req_handler(cur, sgid);
		goto free;
	}
	/* a stale connection: the peer reuses a QPN we still have connected */
	cur = cm_rqp_insert(p);
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
	cm_path_to_av(p, path);
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

/* The deferred requests: those whose listener came, and those whose wait
 * is over (rejected now), leave the queue in arrival order. */
void cm_unmatched_handler(struct urvt_timer *t)
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

void cm_rtu_handler(struct cm_device *dev, const struct cm_mad *m,
		    const union ibv_gid *sgid)
{
	struct cm_id_private *p = cm_handler_begin(
		dev,
		cm_acquire_id(dev, (uint32_t)cm_get(m, CM_RTU_REMOTE_COMM_ID),
			      (uint32_t)cm_get(m, CM_RTU_LOCAL_COMM_ID)),
		sgid, CM_STATE(IB_CM_REP_SENT) | CM_STATE(IB_CM_MRA_REP_RCVD),
		&dev->ctr.duplicates);
	struct ib_cm_event ev = { .event = IB_CM_RTU_RECEIVED };

	if (!p)
		return;
	p->id.state = IB_CM_ESTABLISHED;
	cm_cancel_msg(p);
	ev.private_data = cm_cdata(m) + CM_RTU_PRIVATE_DATA;
	cm_deliver(p, &ev);
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
