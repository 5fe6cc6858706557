/*
 * The rdma_cm inside librdmacm.so.1 (docs/rdmacm.md). Two halves, as in
 * rdma-core + Linux:
 *
 *   ucma.c     the library's API and its user-side work (librdmacm's
 *              cma.c): synchronous ids, CONNECT_RESPONSE -> RTU, event
 *              post-processing, rdma_create_ep, ECE; ucma_qp.c its QPs,
 *              CQs and SRQs (ucma_priv.h);
 *   cma.c      the connection manager proper (the kernel's cma.c): id
 *              states, the CMA header, IB CM events -> rdma_cm events;
 *              cma_addr.c its port spaces, address and route resolution;
 *   event.c    event channels (a pollable eventfd per channel) and queues;
 *   device.c   the process's device, its GSI agent and IB CM;
 *   cm*.c      the IB CM (cm_priv.h), mad.c its GSI QP; addr.c address
 *              helpers; rsocket*.c rsockets (rsocket_priv.h).
 *
 * One lock (cma_lock) guards all of it; the progress thread (receives,
 * timers) takes it too. Functions named cma_* take the lock's holder
 * role as stated; internal calls return 0 or a negative errno, the API
 * edge (ucma.c, event.c's rdma_* functions) converts once.
 */
#ifndef URVT_RDMACM_CMA_PRIV_H
#define URVT_RDMACM_CMA_PRIV_H

#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stdint.h>

#include "rdmacm/cm.h"

struct urvt_progress;
struct cm_port;

extern pthread_mutex_t cma_lock;

/* The kernel's enum rdma_cm_state. */
enum rdma_cm_state {
	RDMA_CM_IDLE,
	RDMA_CM_ADDR_QUERY,
	RDMA_CM_ADDR_RESOLVED,
	RDMA_CM_ROUTE_QUERY,
	RDMA_CM_ROUTE_RESOLVED,
	RDMA_CM_CONNECT,
	RDMA_CM_DISCONNECT,
	RDMA_CM_ADDR_BOUND,
	RDMA_CM_LISTEN,
	RDMA_CM_DEVICE_REMOVAL,
	RDMA_CM_DESTROYING,
};

/* The process's device (one per process, docs/rdmacm.md). */
struct cma_device {
	struct ibv_context *verbs;
	struct ibv_pd *pd;                /* the ids' default PD (id->pd) */
	union ibv_gid gid;
	struct sockaddr_storage addr;     /* its IP address, port 0 */
	struct cm_port *port;
	struct cm_device *cm;
	uint64_t node_guid;               /* network order */
	int max_qpsize;
	uint8_t max_initiator_depth, max_responder_resources;
	uint8_t ack_delay;
	enum ibv_mtu active_mtu;
};

/* struct rdma_event_channel with its queue: the fd is readable exactly
 * while events are queued (one count in the eventfd). */
struct cma_event;
struct ucma_channel {
	struct rdma_event_channel ch;
	struct cma_event *head, *tail;
	bool signalled;
	unsigned waiters;                 /* threads in rdma_get_cm_event's wait (cma_lock) */
	bool dead;                        /* destroyed under them: the last one frees it */
};

/* librdmacm's struct cma_event: what rdma_get_cm_event hands out (its
 * private data buffer is the ABI's RDMA_MAX_PRIVATE_DATA, 256 bytes). */
#define CMA_MAX_PRIVATE_DATA 256
struct rdma_id_private;
struct cma_event {
	struct rdma_cm_event event;
	uint8_t private_data[CMA_MAX_PRIVATE_DATA];
	struct rdma_id_private *id_priv;  /* whose event it counts as (a
					     CONNECT_REQUEST: the listener's) */
	struct cma_event *next;
	struct cm_ece ece;
};

struct cma_bind_list {
	uint16_t ps, port;
	struct rdma_id_private *owners;
	struct cma_bind_list *next;
};

/* A multicast group an id joined (ucma.c rdma_join_multicast). */
struct cma_multicast {
	struct sockaddr_storage addr;
	union ibv_gid mgid;
	uint8_t join_flags;
	bool attached;                    /* the id's QP is attached to mgid */
	void *context;
	struct cma_multicast *next;
};

struct rdma_id_private {
	struct rdma_cm_id id;

	/* the connection manager (cma.c) */
	enum rdma_cm_state state;
	struct cma_device *cma_dev;       /* NULL until the id has the device */
	struct ib_cm_id *cm_id;
	struct cma_bind_list *bind_list;
	struct rdma_id_private *bind_next;
	struct rdma_id_private *all_next, *all_prev;
	struct ibv_sa_path_rec path_rec;  /* id.route.path_rec points here */
	uint32_t seq_num;                 /* our starting PSN (24 bits) */
	uint32_t qp_num, qkey;
	bool srq;
	int backlog;                      /* CONNECT_REQUESTs that may still queue */
	uint8_t tos, timeout, min_rnr_timer;
	bool tos_set, timeout_set, reuseaddr, afonly, afonly_set;
	/* its entry in the host registry's port table (cma_addr.c): index + 1,
	 * 0 for none; the pid that made it (a forked child's copy is not its) */
	int host_port;
	int32_t host_pid;

	/* the library's side (ucma.c, event.c) */
	int events_reported, events_completed;
	pthread_cond_t cond;
	bool sync;                        /* created without a channel */
	bool connect_error;
	void *connect;                    /* rdma_create_ep: ai_connect */
	size_t connect_len;
	struct ibv_qp_init_attr *qp_init_attr; /* passive rdma_create_ep */
	uint8_t initiator_depth, responder_resources;
	struct ibv_ece local_ece, remote_ece;
	struct cma_multicast *mc_list;    /* groups joined */
};

static inline struct rdma_id_private *to_id_priv(struct rdma_cm_id *id)
{
	return (struct rdma_id_private *)id;
}

static inline struct ucma_channel *to_uch(struct rdma_event_channel *ch)
{
	return (struct ucma_channel *)ch;
}

/* device.c */
int cma_init(void);                    /* once: lock, progress thread; 0 or -errno */
struct urvt_progress *cma_progress(void);
/* The device, opened on first need. want: the address it must have (NULL:
 * any, i.e. the existing one or the default selection). Caller holds the lock. */
int cma_get_device(const struct sockaddr *want, struct cma_device **out);
struct cma_device *cma_device_if_open(void);
/* Options read from the environment (docs/rdmacm.md): CM response timeout
 * exponent and max CM retries. */
uint8_t cma_response_timeout(void);
uint8_t cma_max_cm_retries(void);

/* event.c (caller holds the lock unless stated) */
struct cma_event *cma_event_alloc(struct rdma_id_private *owner, struct rdma_cm_id *id,
				  enum rdma_cm_event_type type, int status);
void cma_event_queue(struct ucma_channel *ch, struct cma_event *evt);
/* Remove and free the queued events of id (for a listener, destroying the
 * connection ids its CONNECT_REQUESTs carry). */
void cma_event_discard(struct rdma_id_private *id_priv);
/* Move id's queued events to another channel (rdma_migrate_id). */
void cma_event_move(struct rdma_id_private *id_priv, struct ucma_channel *to);
/* Take the next event, blocking (lock dropped while waiting) unless the fd
 * is O_NONBLOCK: 0 or -EAGAIN / -EINTR. */
int cma_event_get(struct ucma_channel *ch, struct cma_event **out);
void cma_event_complete(struct rdma_id_private *id_priv);
void cma_event_free(struct cma_event *evt);

/* cma.c (caller holds the lock) */
struct rdma_id_private *cma_id_alloc(struct rdma_event_channel *ch, void *context,
				     enum rdma_port_space ps, enum ibv_qp_type qp_type);
void cma_id_free(struct rdma_id_private *id_priv);
/* Leave every protocol and port of the id (the kernel's rdma_destroy_id
 * before the memory goes). */
void cma_destroy(struct rdma_id_private *id_priv);
int cma_bind_addr(struct rdma_id_private *id_priv, const struct sockaddr *addr);
/* cma_bind_addr, but a loopback address we lack binds the wildcard */
int cma_bind_host(struct rdma_id_private *id_priv, const struct sockaddr *addr);
int cma_resolve_addr(struct rdma_id_private *id_priv, const struct sockaddr *src,
		     const struct sockaddr *dst);
int cma_resolve_route(struct rdma_id_private *id_priv);
int cma_set_ib_path(struct rdma_id_private *id_priv, const void *paths, size_t len);
int cma_listen(struct rdma_id_private *id_priv, int backlog);
int cma_connect(struct rdma_id_private *id_priv, const struct rdma_conn_param *param,
		const struct ibv_ece *ece);
int cma_accept(struct rdma_id_private *id_priv, const struct rdma_conn_param *param,
	       const struct ibv_ece *ece);
int cma_reject(struct rdma_id_private *id_priv, const void *pdata, uint8_t len, uint8_t reason);
int cma_disconnect(struct rdma_id_private *id_priv);
int cma_notify(struct rdma_id_private *id_priv, enum ibv_event_type event);
int cma_init_qp_attr(struct rdma_id_private *id_priv, struct ibv_qp_attr *attr, int *mask);
int cma_mc_gid(struct rdma_id_private *id_priv, const struct sockaddr *addr, union ibv_gid *mgid);
int cma_mc_event(struct rdma_id_private *id_priv, const struct cma_multicast *mc, int status);
int cma_set_option(struct rdma_id_private *id_priv, int level, int optname, const void *optval,
		   size_t optlen);
/* Shared by cma.c and cma_addr.c */
/* cma.c */
uint32_t cma_random(void);
void cma_attach_to_dev(struct rdma_id_private *p, struct cma_device *dev);
int cma_queue(struct rdma_id_private *p, struct rdma_id_private *owner,
	      enum rdma_cm_event_type type, int status, struct cma_event **out);
/* cma_addr.c */
struct cma_bind_list *cma_ps_find(uint16_t ps, uint16_t port);
void cma_release_port(struct rdma_id_private *p);
int cma_check_port(struct cma_bind_list *b, struct rdma_id_private *p, bool reuseaddr);
/* The host-wide port table (docs/rdmacm.md): a listening id's mark there,
 * after checking a reuseaddr id against other processes' ports again (0 or
 * a negative errno); an option change (REUSEADDR, AFONLY) of a bound id.
 * Without a registry, nothing. */
int cma_host_port_listen(struct rdma_id_private *p);
void cma_host_port_flags(struct rdma_id_private *p);
void cma_fill_path(struct rdma_id_private *p);
void cma_cm_path(struct rdma_id_private *p, struct cm_path *c);

static inline struct sockaddr *cma_src_addr(struct rdma_id_private *p)
{
	return &p->id.route.addr.src_addr;
}

static inline struct sockaddr *cma_dst_addr(struct rdma_id_private *p)
{
	return &p->id.route.addr.dst_addr;
}

static inline int cma_family(struct rdma_id_private *p)
{
	return p->id.route.addr.src_addr.sa_family;
}

/* An id without a channel (synchronous): wait for its call's event (ucma.c,
 * librdmacm's ucma_complete); 0 or -1 with errno (EAGAIN when the
 * application made its private channel non-blocking). rsockets use it. */
int ucma_complete(struct rdma_cm_id *id);

/* Every id, for rdma_get_devices-style walks and cleanup. */
extern struct rdma_id_private *cma_all_ids;

#endif
