/*
 * SIDR (cm_priv.h): service ID resolution for UD ids, SIDR_REQ out and in,
 * SIDR_REP out and in, and the table of SIDR_REQs being answered.
 */
#include "rdmacm/cm_priv.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

static uint32_t cm_sidr_hash(uint32_t remote_id, const union ibv_gid *gid)
{
	uint64_t g;

	memcpy(&g, gid->raw + 8, sizeof(g));
	return cm_rid_hash(remote_id, g);
}

static struct cm_id_private *cm_sidr_insert(struct cm_id_private *p)
{
	struct cm_device *dev = p->dev;
	uint32_t h = cm_sidr_hash(p->id.remote_id, &p->dgid);
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

void cm_sidr_remove(struct cm_id_private *p)
{
	if (!p->in_sidr)
		return;
	CHAIN_DEL(&p->dev->sidr[cm_sidr_hash(p->id.remote_id, &p->dgid)], p, sidr_next);
	p->in_sidr = false;
}

int ib_send_cm_sidr_req(struct ib_cm_id *id, const struct ib_cm_sidr_req_param *param)
{
	struct cm_id_private *p = to_priv(id);
	struct cm_mad *m = &p->msg;

	if (!param->path ||
	    !cm_send_allowed(id, param->private_data, param->private_data_len,
			     IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE, CM_STATE(IB_CM_IDLE)))
		return -EINVAL;
	cm_path_to_av(p, param->path);
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
	cm_sidr_remove(p);
	return 0;
}

void cm_sidr_req_handler(struct cm_device *dev, const struct cm_mad *m,
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
	if (cm_sidr_insert(p)) {
		dev->ctr.duplicates++;
		goto free;
	}
	p->id.state = IB_CM_SIDR_REQ_RCVD;
	listen = cm_find_listen(dev, p->id.service_id);
	if (!listen) {
		struct ib_cm_sidr_rep_param rep = { .status = IB_SIDR_UNSUPPORTED };

		if (!final && cm_defer(dev, m, sgid)) {
			cm_sidr_remove(p);
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

void cm_sidr_rep_handler(struct cm_device *dev, const struct cm_mad *m,
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
