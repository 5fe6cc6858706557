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

#include "core/transport.h"
#include "link/shm.h"
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
	urvt_net_destroy(rdi);
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
	.av_resolve = urvt_tp_av_resolve,
};

/* URVT_SHM=0 turns the same-host shared-memory link off (docs/usage.md);
 * if it cannot open, the device runs on UDP alone. */
static struct urvt_link *open_shm(const struct in6_addr *gid)
{
	const char *env = getenv("URVT_SHM");
	struct urvt_link *shm;
	int err;

	if (env && !strcmp(env, "0"))
		return NULL;
	shm = urvt_shm_open(gid, &err);
	if (!shm)
		URVT_DBG("shm link: %s: UDP only", strerror(-err));
	return shm;
}

/* The address the next attach on this thread binds (urvt_transport_want). */
static _Thread_local const char *want_addr;

void urvt_transport_want(const char *addr)
{
	want_addr = addr;
}

int urvt_transport_attach(struct rvt_dev_info *rdi)
{
	struct urvt_udp_cfg cfg;
	struct urvt_link *link, *shm;
	union ibv_gid gid;
	int ret;

	urvt_udp_cfg_from_env(&cfg, rdi->progress);
	/* URVT_ADDR / URVT_NETDEV win; the opener sees the mismatch */
	if (want_addr && (!cfg.addr || !*cfg.addr) && (!cfg.netdev || !*cfg.netdev)) {
		cfg.addr = want_addr;
		cfg.netdev = NULL;
	}
	link = urvt_udp_open(&cfg, &ret);
	if (!link)
		return ret;
	/* RoCEv2: the GID is the IP address (IPv4 v4-mapped) */
	memcpy(gid.raw, &link->info.addr6, sizeof(gid.raw));
	rvt_dev_set_port(rdi, &gid, link->info.ifindex, link->info.ifname, link->info.if_mtu);
	shm = open_shm(&link->info.addr6);
	ret = urvt_net_create(rdi, link, shm);
	if (ret) {
		urvt_link_close(shm);
		urvt_link_close(link);
		return ret;
	}
	rdi->transport = &urvt_udp_transport;
	return 0;
}
