/*
 * The transport's side of the composition root (docs/architecture.md):
 * attach to a core device (open the link, report its address to the core
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
#include "link/shm.h"
#include "link/udp.h"
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
	.mcast_join = urvt_tp_mcast_join,
	.mcast_leave = urvt_tp_mcast_leave,
};

/*
 * URVT_PATH (docs/usage.md): which link carries this process's own peers.
 * auto (and inproc): the in-process path; shm: the shared-memory link to
 * ourselves; udp: UDP to our own address (and no shm link at all).
 */
enum path { PATH_AUTO, PATH_SHM, PATH_UDP };

static int parse_path(enum path *out)
{
	const char *env = getenv("URVT_PATH");

	*out = PATH_AUTO;
	if (!env || !*env || !strcmp(env, "auto") || !strcmp(env, "inproc"))
		return 0;
	if (!strcmp(env, "shm"))
		*out = PATH_SHM;
	else if (!strcmp(env, "udp"))
		*out = PATH_UDP;
	else {
		urvt_report("URVT_PATH=%s is not a path: use auto, inproc, shm or udp, or unset it",
			    env);
		return -EINVAL;
	}
	return 0;
}

/* URVT_SHM=0 turns the same-host shared-memory link off (docs/usage.md);
 * if it cannot open, the device runs on UDP alone, unless URVT_PATH=shm
 * asked for it. */
static int open_shm(const struct in6_addr *gid, enum path path, struct urvt_link **out)
{
	int err = 0;

	*out = NULL;
	if (path == PATH_UDP || urvt_env_off("URVT_SHM")) {
		if (path != PATH_SHM)
			return 0;
		urvt_report("URVT_PATH=shm needs the shm link, which URVT_SHM=0 turns off: unset "
			    "one of them");
		return -EINVAL;
	}
	*out = urvt_shm_open(gid, path == PATH_SHM, &err);
	if (*out)
		return 0;
	if (path == PATH_SHM) {
		urvt_report("URVT_PATH=shm: the shm link does not open (%s): use URVT_PATH=udp "
			    "or unset it", strerror(-err));
		return err;
	}
	URVT_DBG("shm link: %s: UDP only", strerror(-err));
	return 0;
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

	enum path path;

	ret = parse_path(&path);
	if (ret)
		return ret;
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
	ret = rvt_dev_set_port(rdi, &gid, link->info.ifindex, link->info.ifname,
			       link->info.if_mtu);
	if (ret) {
		urvt_link_close(link);
		return ret;
	}
	ret = open_shm(&link->info.addr6, path, &shm);
	if (ret) {
		urvt_link_close(link);
		return ret;
	}
	rdi->no_inproc = path != PATH_AUTO;
	ret = urvt_net_create(rdi, link, shm);
	if (ret) {
		urvt_link_close(shm);
		urvt_link_close(link);
		return ret;
	}
	rdi->transport = &urvt_udp_transport;
	return 0;
}
