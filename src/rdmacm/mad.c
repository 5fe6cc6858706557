#include "rdmacm/mad.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/compiler.h"
#include "base/progress.h"

#define GRH_BYTES 40
#define MAD_RECV_BUFS 256
#define MAD_SEND_DEPTH 128
#define MAD_BATCH 16
#define GSI_QKEY 0x80010000u

struct cm_port {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct urvt_progress *progress;
	pthread_mutex_t *lock;
	cm_port_recv_fn recv;
	void *arg;
	bool v4;                          /* the device address is IPv4 */
	atomic_int sends;                 /* posted, not yet completed */
	uint8_t (*buf)[GRH_BYTES + CM_MAD_SIZE];
};

static int post_recv(struct cm_port *port, uint64_t i)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)port->buf[i],
		.length = GRH_BYTES + CM_MAD_SIZE,
		.lkey = port->mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(port->qp, &wr, &bad);
}

/*
 * The sender of a received MAD: RoCEv2 over IPv4 puts the IPv4 header in
 * the last 20 bytes of the GRH slot (source address at byte 32), over IPv6
 * the GRH is the IPv6 header (source GID at byte 8).
 */
static void grh_sgid(const struct cm_port *port, const uint8_t *grh, union ibv_gid *sgid)
{
	memset(sgid, 0, sizeof(*sgid));
	if (port->v4) {
		sgid->raw[10] = sgid->raw[11] = 0xff;
		memcpy(&sgid->raw[12], grh + 32, 4);
	} else {
		memcpy(sgid->raw, grh + 8, 16);
	}
}

static void cm_port_rx(void *arg)
{
	struct cm_port *port = arg;
	struct ibv_wc wc[MAD_BATCH];
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	int n;

	if (!ibv_get_cq_event(port->ch, &ev_cq, &ev_ctx))
		ibv_ack_cq_events(ev_cq, 1);
	/* re-arm before draining: a completion after the last poll raises
	 * a new event */
	ibv_req_notify_cq(port->cq, 0);
	while ((n = ibv_poll_cq(port->cq, MAD_BATCH, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			union ibv_gid sgid;
			const uint8_t *b;

			if (wc[i].wr_id >= MAD_RECV_BUFS) {
				/* a send: its AH rode in wr_id (receives carry
				 * their buffer index; opcode is undefined on errors) */
				ibv_destroy_ah((struct ibv_ah *)(uintptr_t)wc[i].wr_id);
				atomic_fetch_sub(&port->sends, 1);
				continue;
			}
			if (wc[i].status != IBV_WC_SUCCESS) {
				/* flushed (the QP is going away): do not repost */
				continue;
			}
			b = port->buf[wc[i].wr_id];
			if (wc[i].byte_len > GRH_BYTES) {
				grh_sgid(port, b, &sgid);
				pthread_mutex_lock(port->lock);
				port->recv(port->arg, b + GRH_BYTES, wc[i].byte_len - GRH_BYTES, &sgid);
				pthread_mutex_unlock(port->lock);
			}
			post_recv(port, wc[i].wr_id);
		}
	}
}

int cm_port_send(void *p, const union ibv_gid *dgid, const struct cm_mad *m)
{
	struct cm_port *port = p;
	struct ibv_ah_attr aa = {
		.is_global = 1,
		.port_num = 1,
		.grh = { .dgid = *dgid, .sgid_index = 0, .hop_limit = 64 },
	};
	struct ibv_sge sge = { .addr = (uintptr_t)m->raw, .length = CM_MAD_SIZE };
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
	}, *bad;
	struct ibv_ah *ah;
	int ret;

	if (atomic_fetch_add(&port->sends, 1) >= MAD_SEND_DEPTH) {
		atomic_fetch_sub(&port->sends, 1);
		return -ENOBUFS;
	}
	ah = ibv_create_ah(port->pd, &aa);
	if (!ah) {
		atomic_fetch_sub(&port->sends, 1);
		return -errno;
	}
	wr.wr_id = (uintptr_t)ah;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = 1;
	wr.wr.ud.remote_qkey = GSI_QKEY;
	ret = ibv_post_send(port->qp, &wr, &bad);
	if (ret) {
		ibv_destroy_ah(ah);
		atomic_fetch_sub(&port->sends, 1);
		return -ret;
	}
	return 0;
}

static int gsi_to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = GSI_QKEY,
	};

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -errno;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -errno;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return -errno;
	return 0;
}

struct cm_port *cm_port_open(struct ibv_context *ctx, struct urvt_progress *p,
			     pthread_mutex_t *lock, cm_port_recv_fn recv, void *arg, int *err)
{
	struct ibv_qp_init_attr_ex qa = {
		.qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = MAD_SEND_DEPTH, .max_recv_wr = MAD_RECV_BUFS,
			 .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = CM_MAD_SIZE },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
		.create_flags = IBV_QP_CREATE_SOURCE_QPN,
		.source_qpn = 1,
	};
	struct cm_port *port = calloc(1, sizeof(*port));
	union ibv_gid gid;
	int ret = -ENOMEM;

	if (!port)
		goto err;
	port->ctx = ctx;
	port->progress = p;
	port->lock = lock;
	port->recv = recv;
	port->arg = arg;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		goto err_errno;
	port->v4 = !memcmp(gid.raw, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12);
	port->buf = calloc(MAD_RECV_BUFS, sizeof(*port->buf));
	if (!port->buf)
		goto err_free;
	if (!(port->pd = ibv_alloc_pd(ctx)) || !(port->ch = ibv_create_comp_channel(ctx)) ||
	    !(port->cq = ibv_create_cq(ctx, MAD_RECV_BUFS + MAD_SEND_DEPTH, port, port->ch, 0)))
		goto err_errno;
	qa.pd = port->pd;
	qa.send_cq = qa.recv_cq = port->cq;
	port->qp = ibv_create_qp_ex(ctx, &qa);
	if (!port->qp)
		goto err_errno;
	ret = gsi_to_rts(port->qp);
	if (ret)
		goto err_destroy;
	port->mr = ibv_reg_mr(port->pd, port->buf, MAD_RECV_BUFS * sizeof(*port->buf),
			      IBV_ACCESS_LOCAL_WRITE);
	if (!port->mr)
		goto err_errno;
	for (uint64_t i = 0; i < MAD_RECV_BUFS; i++) {
		ret = post_recv(port, i);
		if (ret) {
			ret = -ret;
			goto err_destroy;
		}
	}
	if (ibv_req_notify_cq(port->cq, 0)) {
		ret = -EIO;
		goto err_destroy;
	}
	ret = urvt_progress_add_fd(p, port->ch->fd, cm_port_rx, port);
	if (ret)
		goto err_destroy;
	return port;

err_errno:
	ret = errno ? -errno : -ENOMEM;
err_destroy:
	cm_port_close(port);
	*err = ret;
	return NULL;
err_free:
	free(port);
err:
	*err = ret;
	return NULL;
}

struct barrier {
	struct urvt_work w;
	pthread_mutex_t m;
	pthread_cond_t c;
	bool done;
};

static void barrier_fn(struct urvt_work *w)
{
	struct barrier *b = container_of(w, struct barrier, w);

	pthread_mutex_lock(&b->m);
	b->done = true;
	pthread_cond_signal(&b->c);
	pthread_mutex_unlock(&b->m);
}

/* Wait until the progress thread finished the fd callbacks it is in: work
 * runs after them in its loop. */
static void progress_barrier(struct urvt_progress *p)
{
	struct barrier b = { .m = PTHREAD_MUTEX_INITIALIZER, .c = PTHREAD_COND_INITIALIZER };

	urvt_work_init(&b.w, barrier_fn);
	urvt_progress_queue_work(p, &b.w);
	pthread_mutex_lock(&b.m);
	while (!b.done)
		pthread_cond_wait(&b.c, &b.m);
	pthread_mutex_unlock(&b.m);
	/* run_work touches w after fn returns: let it finish with it */
	urvt_progress_cancel_work_sync(p, &b.w);
}

void cm_port_close(struct cm_port *port)
{
	if (port->ch && !urvt_progress_del_fd(port->progress, port->ch->fd))
		progress_barrier(port->progress);
	if (port->qp)
		ibv_destroy_qp(port->qp);
	if (port->cq) {
		/* the AHs of sends not yet reaped */
		struct ibv_wc wc[MAD_BATCH];
		int n;

		while ((n = ibv_poll_cq(port->cq, MAD_BATCH, wc)) > 0)
			for (int i = 0; i < n; i++)
				if (wc[i].wr_id >= MAD_RECV_BUFS)
					ibv_destroy_ah((struct ibv_ah *)(uintptr_t)wc[i].wr_id);
		ibv_destroy_cq(port->cq);
	}
	if (port->ch)
		ibv_destroy_comp_channel(port->ch);
	if (port->mr)
		ibv_dereg_mr(port->mr);
	if (port->pd)
		ibv_dealloc_pd(port->pd);
	free(port->buf);
	free(port);
}
