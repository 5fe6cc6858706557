/*
 * The IB communication manager (the kernel's drivers/infiniband/core/cm.c
 * brought to user space): cm_id state machine, communication IDs, the
 * listen table, duplicate and stale detection, MAD retransmission driven by
 * the CM response timeout and max CM retries, timewait, QP attributes from
 * the exchanged messages. It talks to peers through one MAD send hook (the
 * GSI QP in mad.c; a test's sink in the fuzzer) and is fed received MADs
 * by cm_recv_mad().
 *
 * Locking: every function here is called with the CM lock held (the one
 * mutex of the library, handed to cm_device_create); so are the event
 * handlers it calls. Its timers run on the progress thread and take the
 * lock themselves. Nothing here blocks.
 */
#ifndef URVT_RDMACM_CM_H
#define URVT_RDMACM_CM_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "rdmacm/cm_msgs.h"

struct urvt_progress;
struct cm_device;

/* URVT_DEBUG=1: one line on stderr per CM MAD sent and received and per
 * rdma_cm event queued */
extern int cm_debug;
void cm_dbg_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define CM_DBG(...)                                      \
	do {                                             \
		if (cm_debug)                            \
			cm_dbg_printf(__VA_ARGS__);      \
	} while (0)

enum ib_cm_state {
	IB_CM_IDLE,
	IB_CM_LISTEN,
	IB_CM_REQ_SENT,
	IB_CM_REQ_RCVD,
	IB_CM_MRA_REQ_SENT,
	IB_CM_MRA_REQ_RCVD,
	IB_CM_REP_SENT,
	IB_CM_REP_RCVD,
	IB_CM_MRA_REP_SENT,
	IB_CM_MRA_REP_RCVD,
	IB_CM_ESTABLISHED,
	IB_CM_DREQ_SENT,
	IB_CM_DREQ_RCVD,
	IB_CM_TIMEWAIT,
	IB_CM_SIDR_REQ_SENT,
	IB_CM_SIDR_REQ_RCVD,
	IB_CM_NSTATES,
};

extern const char *const ib_cm_state_str[IB_CM_NSTATES];

enum ib_cm_event_type {
	IB_CM_REQ_ERROR,
	IB_CM_REQ_RECEIVED,
	IB_CM_REP_ERROR,
	IB_CM_REP_RECEIVED,
	IB_CM_RTU_RECEIVED,
	IB_CM_USER_ESTABLISHED,
	IB_CM_DREQ_ERROR,
	IB_CM_DREQ_RECEIVED,
	IB_CM_DREP_RECEIVED,
	IB_CM_TIMEWAIT_EXIT,
	IB_CM_MRA_RECEIVED,
	IB_CM_REJ_RECEIVED,
	IB_CM_SIDR_REQ_ERROR,
	IB_CM_SIDR_REQ_RECEIVED,
	IB_CM_SIDR_REP_RECEIVED,
};

/* service_timeout flag of ib_send_cm_mra: only record the MRA, send it
 * when a duplicate of the MRAed message arrives (the kernel's
 * IB_CM_MRA_FLAG_DELAY, which rdma_cm uses) */
#define IB_CM_MRA_FLAG_DELAY 0x80

/* The path of a connection as the CM carries it on RoCE (sa_path_rec's
 * fields that REQ has room for). */
struct cm_path {
	union ibv_gid sgid, dgid;
	uint32_t flow_label;              /* 20 bits */
	uint16_t pkey;
	uint8_t hop_limit, traffic_class, sl;
	uint8_t mtu;                      /* enum ibv_mtu */
	uint8_t rate;
	uint8_t packet_life_time;
};

struct cm_ece {
	uint32_t vendor_id;               /* 24 bits */
	uint32_t attr_mod;
};

struct ib_cm_id;
struct ib_cm_event;
/* Nonzero: destroy the cm_id (as the kernel's handlers do; -ENOMEM from a
 * REQ handler drops the REQ silently so that a retry may succeed). */
typedef int (*ib_cm_handler)(struct ib_cm_id *id, const struct ib_cm_event *ev);

struct ib_cm_id {
	ib_cm_handler cm_handler;
	void *context;
	uint64_t service_id;
	uint32_t local_id;                /* comm IDs as on the wire */
	uint32_t remote_id;
	enum ib_cm_state state;
};

struct ib_cm_req_event_param {
	struct ib_cm_id *listen_id;
	struct cm_path primary_path;
	union ibv_gid src_gid;            /* where the REQ came from (GRH) */
	uint64_t remote_ca_guid;
	uint32_t remote_qkey, remote_qpn, starting_psn;
	enum ibv_qp_type qp_type;         /* 0 if neither RC nor UC */
	uint8_t responder_resources, initiator_depth;
	uint8_t local_cm_response_timeout, remote_cm_response_timeout;
	uint8_t flow_control, retry_count, rnr_retry_count, srq;
	struct cm_ece ece;
};

struct ib_cm_rep_event_param {
	uint64_t remote_ca_guid;
	uint32_t remote_qkey, remote_qpn, starting_psn;
	uint8_t responder_resources, initiator_depth, target_ack_delay, failover_accepted;
	uint8_t flow_control, rnr_retry_count, srq;
	struct cm_ece ece;
};

struct ib_cm_rej_event_param {
	const uint8_t *ari;
	uint8_t ari_length;
	uint16_t reason;
};

struct ib_cm_sidr_req_event_param {
	struct ib_cm_id *listen_id;
	union ibv_gid src_gid;
	uint64_t service_id;
	uint16_t pkey;
};

struct ib_cm_sidr_rep_event_param {
	uint8_t status;
	uint32_t qkey, qpn;
	const uint8_t *info;
	uint8_t info_len;
	struct cm_ece ece;
};

struct ib_cm_event {
	enum ib_cm_event_type event;
	union {
		struct ib_cm_req_event_param req_rcvd;
		struct ib_cm_rep_event_param rep_rcvd;
		struct ib_cm_rej_event_param rej_rcvd;
		struct ib_cm_sidr_req_event_param sidr_req_rcvd;
		struct ib_cm_sidr_rep_event_param sidr_rep_rcvd;
		uint8_t mra_service_timeout;
	} param;
	const uint8_t *private_data;      /* into the message (its full size) */
};

struct ib_cm_req_param {
	const struct cm_path *primary_path;
	uint64_t service_id;
	uint32_t qp_num;
	enum ibv_qp_type qp_type;
	uint32_t starting_psn;
	const void *private_data;
	uint8_t private_data_len;
	uint8_t responder_resources, initiator_depth;
	uint8_t remote_cm_response_timeout, local_cm_response_timeout;
	uint8_t flow_control, retry_count, rnr_retry_count, max_cm_retries, srq;
	struct cm_ece ece;
};

struct ib_cm_rep_param {
	uint32_t qp_num, starting_psn;
	const void *private_data;
	uint8_t private_data_len;
	uint8_t responder_resources, initiator_depth, failover_accepted;
	uint8_t flow_control, rnr_retry_count, srq;
	struct cm_ece ece;
};

struct ib_cm_sidr_req_param {
	const struct cm_path *path;
	uint64_t service_id;
	uint64_t timeout_ms;
	uint8_t max_cm_retries;
	const void *private_data;
	uint8_t private_data_len;
};

struct ib_cm_sidr_rep_param {
	uint32_t qp_num, qkey;
	enum ib_cm_sidr_status status;
	const void *info;
	uint8_t info_length;
	const void *private_data;
	uint8_t private_data_len;
	struct cm_ece ece;
};

/* What cm_recv_mad did with each MAD (tests and the fuzzer read them). */
struct cm_counters {
	uint64_t rx, tx, tx_errors, retries;
	uint64_t duplicates;              /* REQ/REP/RTU/DREQ/MRA/SIDR_REQ seen again */
	uint64_t drop_malformed;          /* size, class, version, method, attribute */
	uint64_t drop_unmatched;          /* no cm_id with those comm IDs / state */
	uint64_t drop_forged;             /* right IDs, wrong sender GID or QPN */
	uint64_t drop_no_resources;       /* cm_id limit */
	uint64_t ids;                     /* cm_ids now */
};

struct cm_dev_ops {
	/* Send one MAD to dgid's QP1 (no response tracking); 0 or -errno. */
	int (*send)(void *ctx, const union ibv_gid *dgid, const struct cm_mad *m);
};

/*
 * The CM of one device. gid: its GID (the REQ's remote port GID must be
 * it); node_guid (network order) and ack_delay go into REQ/REP; lock is the
 * CM lock every call is made under; p runs the timers.
 */
struct cm_device *cm_device_create(const struct cm_dev_ops *ops, void *ctx,
				   struct urvt_progress *p, pthread_mutex_t *lock,
				   const union ibv_gid *gid, uint64_t node_guid, uint8_t ack_delay,
				   int *err);
/* Make slot (the host registry's, 1..254) the top byte of every local
 * communication ID and SIDR request ID created from now on, the low 24 bits
 * staying counter ^ random: another process of the host group forwards our
 * replies by it (docs/host-identity.md). Call right after creating. */
void cm_device_set_id_slot(struct cm_device *dev, uint8_t slot);
/* Free everything (ids included); no handler runs after it. Called
 * without the lock, from a thread other than the progress thread. */
void cm_device_destroy(struct cm_device *dev);
const struct cm_counters *cm_device_counters(struct cm_device *dev);

/* One received MAD (len bytes, as the GSI QP delivered it after the GRH),
 * from sgid. */
void cm_recv_mad(struct cm_device *dev, const void *mad, size_t len, const union ibv_gid *sgid);

struct ib_cm_id *ib_create_cm_id(struct cm_device *dev, ib_cm_handler handler, void *context,
				 int *err);
/* Leave the protocol as the kernel does for the state (REJ, DREQ, DREP...);
 * the id is gone for the caller, its timewait may outlive it. */
void ib_destroy_cm_id(struct ib_cm_id *id);
int ib_cm_listen(struct ib_cm_id *id, uint64_t service_id);

int ib_send_cm_req(struct ib_cm_id *id, const struct ib_cm_req_param *param);
int ib_send_cm_rep(struct ib_cm_id *id, const struct ib_cm_rep_param *param);
int ib_send_cm_rtu(struct ib_cm_id *id, const void *private_data, uint8_t len);
int ib_send_cm_rej(struct ib_cm_id *id, enum ib_cm_rej_reason reason, const void *ari,
		   uint8_t ari_length, const void *private_data, uint8_t len);
int ib_send_cm_mra(struct ib_cm_id *id, uint8_t service_timeout, const void *private_data,
		   uint8_t len);
int ib_send_cm_dreq(struct ib_cm_id *id, const void *private_data, uint8_t len);
int ib_send_cm_drep(struct ib_cm_id *id, const void *private_data, uint8_t len);
int ib_send_cm_sidr_req(struct ib_cm_id *id, const struct ib_cm_sidr_req_param *param);
int ib_send_cm_sidr_rep(struct ib_cm_id *id, const struct ib_cm_sidr_rep_param *param);
/* IBV_EVENT_COMM_EST: data arrived before the RTU. */
int ib_cm_notify(struct ib_cm_id *id, enum ibv_event_type event);
/* The QP attributes for qp_attr->qp_state (INIT, RTR, RTS) from the
 * exchanged REQ/REP; -EINVAL in a state that has none. */
int ib_cm_init_qp_attr(struct ib_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask);

#endif
