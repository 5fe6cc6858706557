/*
 * The transport's side of the composition root (docs/architecture.md):
 * attach to a core device (open the link, report its address to the core
 * as a GID, create the engines' state, register the ops of
 * core/transport.h) and the per-QP private state the core hangs off
 * qp->priv, as rdmavt's drivers do with rvt_driver_provided.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/transport.h"
#include "link/udp.h"
#include "transport/net.h"
#include "transport/tp.h"

static void *tp_qp_priv_alloc(struct rvt_qp *qp)
{
	/* its lock group and engine group are cache-line aligned */
	struct urvt_tp_qp *tp = aligned_alloc(64, sizeof(*tp));

	if (tp)
		memset(tp, 0, sizeof(*tp));
	return tp;
}

static void tp_qp_priv_free(struct rvt_qp *qp, void *priv)
{
	free(priv);
}

static void tp_detach(struct rvt_dev_info *rdi)
{
	struct urvt_net *net = rdi->transport_priv;
	int fd = net->fd;

	urvt_net_destroy(rdi);
	close(fd);
}

static const struct urvt_transport_ops urvt_udp_transport = {
	.detach = tp_detach,
	.qp_priv_alloc = tp_qp_priv_alloc,
	.qp_priv_free = tp_qp_priv_free,
	.do_send = urvt_tp_do_send,
	.ud_send = urvt_ud_send,
	.retry_timeout = urvt_tp_retry_timeout,
	.qp_reset = urvt_tp_qp_reset,
	.poll_cq = urvt_net_poll_cq,
	.app_blocks = urvt_net_app_blocks,
};

/* The address the next attach on this thread must bind (urvt_transport_want). */
static _Thread_local const struct urvt_udp_addr *want_addr;

void urvt_transport_want(const struct urvt_udp_addr *want)
{
	want_addr = want;
}

int urvt_transport_attach(struct rvt_dev_info *rdi)
{
	struct urvt_udp_addr ua;
	union ibv_gid gid;
	int fd = urvt_udp_bind_device_at(want_addr, &ua);
	int ret;

	if (fd < 0)
		return fd;
	/* RoCEv2: the GID is the IP address (IPv4 v4-mapped) */
	memcpy(gid.raw, &ua.addr6, sizeof(gid.raw));
	rvt_dev_set_port(rdi, &gid, ua.ifindex, ua.ifname, ua.if_mtu);
	ret = urvt_net_create(rdi, fd, ua.family == AF_INET);
	if (ret) {
		close(fd);
		return ret;
	}
	rdi->transport = &urvt_udp_transport;
	return 0;
}
