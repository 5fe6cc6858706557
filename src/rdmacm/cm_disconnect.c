/*
 * How a connection ends (cm_priv.h): REJ, DREQ and DREP, sent and received
 * by either side, and destroying a cm_id in the way its state asks for.
 */
#include "rdmacm/cm_priv.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

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
	cm_save_private_data(p, private_data, len);
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

void cm_dreq_handler(struct cm_device *dev, const struct cm_mad *m,
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

void cm_drep_handler(struct cm_device *dev, const struct cm_mad *m,
		     const union ibv_gid *sgid)
{
	struct cm_id_private *p = cm_handler_begin(
		dev,
		cm_acquire_id(dev, (uint32_t)cm_get(m, CM_DREP_REMOTE_COMM_ID),
			      (uint32_t)cm_get(m, CM_DREP_LOCAL_COMM_ID)),
		sgid, CM_STATE(IB_CM_DREQ_SENT) | CM_STATE(IB_CM_DREQ_RCVD),
		&dev->ctr.drop_unmatched);
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
		p = cm_rid_find(dev, remote_id, be64toh(guid));
		return p && !p->dead ? p : NULL;
	}
	if (cm_get(m, CM_REJ_MESSAGE_REJECTED) == CM_MSG_RESPONSE_REQ)
		return cm_acquire_id(dev, (uint32_t)cm_get(m, CM_REJ_REMOTE_COMM_ID), 0);
	return cm_acquire_id(dev, (uint32_t)cm_get(m, CM_REJ_REMOTE_COMM_ID), remote_id);
}

void cm_rej_handler(struct cm_device *dev, const struct cm_mad *m,
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

/* The kernel's cm_destroy_id: say goodbye in the way the state asks for. */
void cm_destroy_id(struct cm_id_private *p, int err)
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
