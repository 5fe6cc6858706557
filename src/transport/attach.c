/*
 * The transport's side of the composition root (docs/architecture.md):
 * attach to a core device (open the links, report its address to the core
 * as a GID, create the engines' state, register the ops of
 * core/transport.h) and the per-QP private state the core hangs off
 * qp->priv, as rdmavt's drivers do with rvt_driver_provided.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/report.h"
#include "core/transport.h"
#include "link/links.h"
#include "transport/net.h"
#include "transport/tp.h"

static void *tp_qp_priv_alloc(struct rvt_qp *qp)
{
	/* its lock group and engine group are cache-line aligned */
	struct urvt_tp_qp *tp = aligned_alloc(64, sizeof(*tp));

	if (tp) {
		memset(tp, 0, sizeof(*tp));
		if (qp->type == IBV_QPT_UD && qp->rdi->transport_priv)
			urvt_net_ud_qps(qp->rdi->transport_priv, 1);
	}
	return tp;
}

static void tp_qp_priv_free(struct rvt_qp *qp, void *priv)
{
	if (qp->type == IBV_QPT_UD && qp->rdi->transport_priv)
		urvt_net_ud_qps(qp->rdi->transport_priv, -1);
	free(priv);
}

static void tp_detach(struct rvt_dev_info *rdi)
{
	urvt_net_destroy(rdi);
}

static const struct urvt_transport_ops urvt_roce_transport = {
	.detach = tp_detach,
	.qp_priv_alloc = tp_qp_priv_alloc,
	.qp_priv_free = tp_qp_priv_free,
	.do_send = urvt_tp_do_send,
	.ud_send = urvt_ud_send,
	.ud_send_direct = urvt_ud_send_direct,
	.retry_timeout = urvt_tp_retry_timeout,
	.qp_reset = urvt_tp_qp_reset,
	.poll_cq = urvt_net_poll_cq,
	.app_blocks = urvt_net_app_blocks,
	.wait_event = urvt_net_wait_event,
	.av_resolve = urvt_tp_av_resolve,
	.mcast_join = urvt_tp_mcast_join,
	.mcast_leave = urvt_tp_mcast_leave,
};

/* The address the next attach on this thread binds (urvt_transport_want). */
static _Thread_local const char *want_addr;

void urvt_transport_want(const char *addr)
{
	want_addr = addr;
}

int urvt_transport_attach(struct rvt_dev_info *rdi)
{
	struct urvt_links links;
	struct urvt_link *any;
	union ibv_gid gid;
	int ret;

	ret = urvt_links_open(want_addr, rdi->progress, &links);
	if (ret)
		return ret;
	/* RoCEv2: the GID is the IP address (IPv4 v4-mapped) of the link
	 * that reaches any GID */
	any = links.l[0];
	memcpy(gid.raw, &any->info.addr6, sizeof(gid.raw));
	ret = rvt_dev_set_port(rdi, &gid, any->info.ifindex, any->info.ifname,
			       any->info.if_mtu);
	if (!ret && any->info.slot)
		rvt_dev_set_qpn_range(rdi, any->info.slot);
	if (ret) {
		urvt_links_close(&links);
		return ret;
	}
	rdi->no_inproc = links.self_by_link;
	ret = urvt_net_create(rdi, links.l, links.n);
	if (ret) {
		urvt_links_close(&links);
		return ret;
	}
	rdi->transport = &urvt_roce_transport;
	return 0;
}
