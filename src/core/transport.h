/*
 * The core <-> transport contract (rdmavt's struct rvt_driver_provided).
 * The core knows a transport only through this table: the composition root
 * (src/verbs/device.c) hands rvt_dev_get the transport's attach function,
 * which the core calls once the device exists; attach registers the ops in
 * rdi->transport. With no transport every destination must be local.
 * See docs/architecture.md.
 */
#ifndef URVT_CORE_TRANSPORT_H
#define URVT_CORE_TRANSPORT_H

#include "core/rvt.h"

/* Called by rvt_dev_get under the device lock after the tables and the
 * progress engine exist: open the link, report the port (rvt_dev_set_port),
 * set rdi->transport. 0 or a negative errno (the device is not created). */
typedef int (*urvt_transport_attach_fn)(struct rvt_dev_info *rdi);

struct urvt_transport_ops {
	/* Last close, before the core's tables and progress engine go: undo
	 * attach (close the link, clear rdi->transport). */
	void (*detach)(struct rvt_dev_info *rdi);
	/* create_qp / destroy_qp: the transport's per-QP state, qp->priv
	 * (rdmavt's qp_priv_alloc/qp_priv_free). Alloc returns it zeroed, or
	 * NULL (create_qp fails with ENOMEM). Free runs after qp_reset. */
	void *(*qp_priv_alloc)(struct rvt_qp *qp);
	void (*qp_priv_free)(struct rvt_qp *qp, void *priv);
	/* Engine context (s_sched token held): make and send request packets
	 * for RC/UC QPs whose peer is remote. */
	void (*do_send)(struct rvt_qp *qp);
	/* Engine context: send one UD WQE (it is completed by the caller). */
	void (*ud_send)(struct rvt_qp *qp, struct rvt_swqe *wqe);
	/* post_send, s_hlock held, the send queue empty and its engine idle:
	 * send wqe (on the caller's stack, not in the ring) now, as ud_send
	 * would; false: nothing was done, the caller queues the WR instead
	 * (post.c post_ud_direct). Optional. */
	bool (*ud_send_direct)(struct rvt_qp *qp, struct rvt_swqe *wqe);
	/* Progress thread: the RC retransmit timer of qp expired. */
	void (*retry_timeout)(struct rvt_qp *qp);
	/* Reset/destroy, after the QP left the lookup table and its engine,
	 * timers and lookups have drained: drop queued packets and per-QP
	 * transport state (qp.c rvt_reset_qp). */
	void (*qp_reset)(struct rvt_qp *qp);
	/* The application's poll_cq (rvt_app_poll_cq): poll cq, and drive the
	 * network when it is empty. */
	int (*poll_cq)(struct rvt_cq *cq, int num_entries, struct ibv_wc *wc);
	/* The application is about to block for a completion event
	 * (rvt_req_notify_cq): someone else must receive. */
	void (*app_blocks)(struct rvt_dev_info *rdi);
	/* A thread is about to block in ibv_get_cq_event on fd (a channel's
	 * pipe, empty, in blocking mode): wait until something may have
	 * come, receiving meanwhile, so that what ends the wait takes one
	 * wake-up, not two. *wait_fd: the channel's own state for it (-1
	 * first; the core closes it with the channel). 0: look at fd again;
	 * negative: not waited, block on fd as usual. Optional. */
	int (*wait_event)(struct rvt_dev_info *rdi, int fd, int *wait_fd);
	/* An address vector was made (create_ah, modify_qp with an AV), for a
	 * destination other than ourselves: choose the link that carries it
	 * and note it in av->route (0 is the default link). Slow path: may
	 * make system calls. Optional. */
	void (*av_resolve)(struct rvt_dev_info *rdi, struct urvt_av *av);
	/* The first QP attached to multicast group gid: receive what is sent
	 * to it (0 or a negative errno: the attach fails); the last one left:
	 * stop. Slow path. Optional (no multicast). */
	int (*mcast_join)(struct rvt_dev_info *rdi, const union ibv_gid *gid);
	void (*mcast_leave)(struct rvt_dev_info *rdi, const union ibv_gid *gid);
};

/* Attach: the port the link picked, as the core reports it (GID index 0,
 * the interface for ibv_query_gid_ex, the active MTU from if_mtu; 0 if
 * unknown). -EINVAL (and one line on stderr) if URVT_MTU is not an MTU:
 * the device must not open. */
int rvt_dev_set_port(struct rvt_dev_info *rdi, const union ibv_gid *gid, unsigned int ifindex,
		      const char *ifname, int if_mtu);

/* Attach: the GID is shared with other processes (docs/host-identity.md);
 * this one's QPNs are range << 16 | n (at most 65534 QPs). */
void rvt_dev_set_qpn_range(struct rvt_dev_info *rdi, uint8_t range);

#endif
