/*
 * The core <-> transport contract (rdmavt's struct rvt_driver_provided):
 * what the send engine calls when a QP's peer is not in this process. The
 * UDP transport (src/transport) fills it in at device creation; with no
 * transport every destination must be local.
 */
#ifndef URVT_CORE_TRANSPORT_H
#define URVT_CORE_TRANSPORT_H

#include "core/rvt.h"

struct urvt_transport_ops {
	/* Engine context (s_sched token held): make and send request packets
	 * for RC/UC QPs whose peer is remote. */
	void (*do_send)(struct rvt_qp *qp);
	/* Engine context: send one UD WQE (it is completed by the caller). */
	void (*ud_send)(struct rvt_qp *qp, struct rvt_swqe *wqe);
	/* Progress thread: the RC retransmit timer of qp expired. */
	void (*retry_timeout)(struct rvt_qp *qp);
	/* Reset/destroy, after the QP left the lookup table and its engine,
	 * timers and lookups have drained: drop queued packets and per-QP
	 * transport state (qp.c rvt_reset_qp). */
	void (*qp_reset)(struct rvt_qp *qp);
};

#endif
