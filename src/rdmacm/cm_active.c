/*
 * The IB CM's active side (cm_priv.h): the REQ out, the REP (or a repeated
 * one) in, the RTU out. Rejects, MRAs and disconnects, which either side
 * sends, are in cm_disconnect.c and cm.c.
 */
#include "rdmacm/cm_priv.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

int ib_send_cm_req(struct ib_cm_id *id, const struct ib_cm_req_param *param)
{
	struct cm_id_private *p = to_priv(id);
	const struct cm_path *pri = param->primary_path;
	struct cm_mad *m = &p->msg;

	if (!pri || (param->qp_type != IBV_QPT_RC && param->qp_type != IBV_QPT_UC) ||
	    !cm_send_allowed(id, param->private_data, param->private_data_len,
			     IB_CM_REQ_PRIVATE_DATA_SIZE, CM_STATE(IB_CM_IDLE)))
		return -EINVAL;
	cm_path_to_av(p, pri);
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

void cm_rep_handler(struct cm_device *dev, const struct cm_mad *m,
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
	if (cm_rid_insert(p)) {
		/* another connection of ours already has these IDs */
		p->id.remote_id = 0;
		dev->ctr.duplicates++;
		return;
	}
	cur = cm_rqp_insert(p);
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
	cm_save_private_data(p, private_data, len);
	return 0;
}
