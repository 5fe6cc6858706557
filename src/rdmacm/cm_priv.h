/*
 * What the IB CM's files share (cm.h is the interface to the rest of the
 * rdma_cm): the cm_id and device structures, the tables, the helpers the
 * handlers and the ib_send_cm_* calls are built from. The CM is one state
 * machine split by concern (docs/rdmacm.md):
 *
 *   cm.c             tables, sending and retransmission, lifetime, message
 *                    formats, MRA, timers, QP attributes, receive dispatch,
 *                    the device;
 *   cm_active.c      REQ out, REP in, RTU out;
 *   cm_passive.c     listen, REQ in (and its wait for a listener), REP out,
 *                    RTU in;
 *   cm_sidr.c        SIDR_REQ / SIDR_REP both ways;
 *   cm_disconnect.c  REJ, DREQ, DREP both ways; destroying a cm_id.
 *
 * Everything here runs under the device's lock.
 */
#ifndef URVT_RDMACM_CM_PRIV_H
#define URVT_RDMACM_CM_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/compiler.h"
#include "base/timer.h"
#include "rdmacm/cm.h"

#define CM_MAX_IDS 65536
#define CM_HASH_BITS 12
#define CM_HASH_SIZE (1u << CM_HASH_BITS)
#define CM_HI_TID 0x75727674u             /* "urvt": our half of every TID */
/* A REQ / SIDR_REQ for a service nobody listens on waits this long for a
 * listener before it is rejected (docs/rdmacm.md: start-up races) */
#define CM_UNMATCHED_NS (250ull * 1000000)
#define CM_UNMATCHED_MAX 64

/* sets of states, for the checks handlers open with */
#define CM_STATE(s) (1u << (s))
#define CM_ANY_STATE (~0u)

struct cm_id_private {
	struct ib_cm_id id;
	struct cm_device *dev;

	/* tables (cm_device), each with its own link */
	struct cm_id_private *lid_next;   /* local ID */
	struct cm_id_private *rid_next;   /* (remote ID, remote CA GUID) */
	struct cm_id_private *rqp_next;   /* (remote QPN, remote CA GUID) */
	struct cm_id_private *sidr_next;  /* SIDR_REQs being answered */
	struct cm_id_private *listen_next;
	struct cm_id_private *reap_next;
	bool in_rid, in_rqp, in_sidr, in_listen;
	bool user_gone;                   /* ib_destroy_cm_id called */
	bool dead;                        /* on the reap list */

	/* the one message awaiting a response (the kernel's cm_id_priv->msg) */
	struct cm_mad msg;
	bool msg_active;
	enum ib_cm_state msg_state;       /* the state it belongs to */
	unsigned int msg_retries;         /* sends left after this one */
	uint64_t msg_timeout_ms;
	struct urvt_timer msg_timer;
	struct urvt_timer tw_timer;

	union ibv_gid dgid;               /* the peer's GID: MADs go to, and come from, it */
	struct cm_path path;
	uint8_t av_timeout;               /* the QP's local ACK timeout */
	uint64_t tid;
	uint64_t remote_ca_guid;
	uint32_t local_qpn, remote_qpn, sq_psn, rq_psn;
	uint64_t timeout_ms;
	uint16_t pkey;
	uint8_t path_mtu;
	uint8_t max_cm_retries, responder_resources, initiator_depth;
	uint8_t retry_count, rnr_retry_count, service_timeout, target_ack_delay;
	enum ibv_qp_type qp_type;
	/* kept for repeating an RTU, MRA or DREP to a duplicate */
	uint8_t private_data[IB_CM_RTU_PRIVATE_DATA_SIZE];
	uint8_t private_data_len;
};

struct cm_unmatched {
	struct cm_mad m;
	union ibv_gid sgid;
	uint64_t deadline_ns;
};

struct cm_device {
	const struct cm_dev_ops *ops;
	void *ops_ctx;
	struct urvt_progress *progress;
	pthread_mutex_t *lock;
	union ibv_gid gid;
	uint64_t node_guid;               /* network order, as on the wire */
	uint8_t ack_delay;

	uint32_t next_id, id_operand;     /* local IDs: counter ^ random */
	uint8_t id_slot;                  /* the host registry's slot, the IDs'
					     top byte (0: none, all 32 bits random) */
	struct cm_id_private *lid[CM_HASH_SIZE];
	struct cm_id_private *rid[CM_HASH_SIZE];
	struct cm_id_private *rqp[CM_HASH_SIZE];
	struct cm_id_private *sidr[CM_HASH_SIZE];
	struct cm_id_private *listen;
	struct cm_id_private *reap;
	struct urvt_work reap_work;
	/* requests waiting for a listener, in arrival order */
	struct cm_unmatched unmatched[CM_UNMATCHED_MAX];
	unsigned int n_unmatched;
	struct urvt_timer unmatched_timer;
	struct cm_counters ctr;
};

/* Unlink p from the chain at *head (via its link at offset off). */
#define CHAIN_DEL(headp, p, link)                                                  \
	do {                                                                       \
		struct cm_id_private **pp_ = (headp);                              \
		while (*pp_ && *pp_ != (p))                                        \
			pp_ = &(*pp_)->link;                                       \
		if (*pp_)                                                          \
			*pp_ = (p)->link;                                          \
		(p)->link = NULL;                                                  \
	} while (0)

static inline uint8_t min_u8(uint8_t a, uint8_t b)
{
	return a < b ? a : b;
}

static inline struct cm_id_private *to_priv(struct ib_cm_id *id)
{
	return container_of(id, struct cm_id_private, id);
}

static inline uint32_t hash32(uint64_t v)
{
	v *= 0x9e3779b97f4a7c15ull;
	return (uint32_t)(v >> (64 - CM_HASH_BITS));
}

/* cm.c: tables, sending, lifetime, message formats, the openings */

struct cm_id_private *cm_acquire_id(struct cm_device *dev, uint32_t local_id,
				    uint32_t remote_id);
uint32_t cm_rid_hash(uint32_t remote_id, uint64_t guid);
struct cm_id_private *cm_rid_find(struct cm_device *dev, uint32_t remote_id, uint64_t guid);
struct cm_id_private *cm_rid_insert(struct cm_id_private *p);
struct cm_id_private *cm_rqp_insert(struct cm_id_private *p);
void cm_cleanup_remote(struct cm_id_private *p);
struct cm_id_private *cm_find_listen(struct cm_device *dev, uint64_t service_id);
int cm_send(struct cm_device *dev, const union ibv_gid *dgid, const struct cm_mad *m);
uint64_t cm_form_tid(struct cm_id_private *p);
void cm_send_msg(struct cm_id_private *p, enum ib_cm_state state);
void cm_cancel_msg(struct cm_id_private *p);
void cm_save_private_data(struct cm_id_private *p, const void *data, uint8_t len);
void cm_free_id(struct cm_id_private *p);
struct cm_id_private *cm_alloc_id(struct cm_device *dev, ib_cm_handler handler,
				  void *context, int *err);
void cm_reset_to_idle(struct cm_id_private *p);
void cm_enter_timewait(struct cm_id_private *p);
void cm_deliver(struct cm_id_private *p, const struct ib_cm_event *ev);
void cm_format_rej(struct cm_mad *m, struct cm_id_private *p, enum ib_cm_rej_reason reason,
		   const void *ari, uint8_t ari_length, const void *pdata, uint8_t len);
void cm_format_mra(struct cm_mad *m, struct cm_id_private *p,
		   enum cm_msg_response mraed, uint8_t service_timeout,
		   const void *pdata, uint8_t len);
void cm_format_rtu(struct cm_mad *m, struct cm_id_private *p, const void *pdata,
		   uint8_t len);
void cm_format_drep(struct cm_mad *m, struct cm_id_private *p, const void *pdata,
		    uint8_t len);
void cm_issue_rej(struct cm_device *dev, const struct cm_mad *rcv,
		  const union ibv_gid *to, enum ib_cm_rej_reason reason,
		  enum cm_msg_response rejected, const void *ari, uint8_t ari_length);
bool cm_send_allowed(const struct ib_cm_id *id, const void *private_data, size_t len,
		     size_t max, uint32_t states);
void cm_path_to_av(struct cm_id_private *p, const struct cm_path *path);
struct cm_id_private *cm_handler_begin(struct cm_device *dev, struct cm_id_private *p,
				       const union ibv_gid *sgid, uint32_t states,
				       uint64_t *wrong_state);
void cm_stale_conn(struct cm_id_private *cur, const union ibv_gid *sgid);

/* cm_active.c */
void cm_rep_handler(struct cm_device *dev, const struct cm_mad *m,
		    const union ibv_gid *sgid);

/* cm_passive.c */
bool cm_defer(struct cm_device *dev, const struct cm_mad *m, const union ibv_gid *sgid);
void cm_req_handler(struct cm_device *dev, const struct cm_mad *m,
		    const union ibv_gid *sgid, bool final);
void cm_rtu_handler(struct cm_device *dev, const struct cm_mad *m,
		    const union ibv_gid *sgid);
void cm_unmatched_handler(struct urvt_timer *t);

/* cm_sidr.c */
void cm_sidr_remove(struct cm_id_private *p);
void cm_sidr_req_handler(struct cm_device *dev, const struct cm_mad *m,
			 const union ibv_gid *sgid, bool final);
void cm_sidr_rep_handler(struct cm_device *dev, const struct cm_mad *m,
			 const union ibv_gid *sgid);

/* cm_disconnect.c */
void cm_destroy_id(struct cm_id_private *p, int err);
void cm_dreq_handler(struct cm_device *dev, const struct cm_mad *m,
		     const union ibv_gid *sgid);
void cm_drep_handler(struct cm_device *dev, const struct cm_mad *m,
		     const union ibv_gid *sgid);
void cm_rej_handler(struct cm_device *dev, const struct cm_mad *m,
		    const union ibv_gid *sgid);

#endif
