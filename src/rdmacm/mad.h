/*
 * The GSI agent: the device's QP1 as the CM uses it (the kernel's MAD
 * layer reduced to what the CM needs). It owns a PD, a CQ with a completion
 * channel watched by the progress thread, the GSI QP (ibv_create_qp_ex with
 * IBV_QP_CREATE_SOURCE_QPN, source QPN 1) and its receive buffers. Sends
 * are fire and forget (the CM does its own retransmission); receives are
 * handed to a callback under the CM lock.
 */
#ifndef URVT_RDMACM_MAD_H
#define URVT_RDMACM_MAD_H

#include <infiniband/verbs.h>
#include <pthread.h>

#include "rdmacm/cm_msgs.h"

struct urvt_progress;
struct cm_port;

/* A received MAD (len bytes after the GRH) from sgid; called with the lock held. */
typedef void (*cm_port_recv_fn)(void *arg, const void *mad, size_t len,
				const union ibv_gid *sgid);

struct cm_port *cm_port_open(struct ibv_context *ctx, struct urvt_progress *p,
			     pthread_mutex_t *lock, cm_port_recv_fn recv, void *arg, int *err);
/* Stop receiving, then free everything. Without the lock. */
void cm_port_close(struct cm_port *port);

/* The CM's send hook (struct cm_dev_ops): one MAD to dgid's QP1. 0,
 * -ENOBUFS when the send queue is full (the CM's retransmission covers
 * it), or the verbs' error. */
int cm_port_send(void *port, const union ibv_gid *dgid, const struct cm_mad *m);

#endif
