/*
 * The core's entry points, called by the verbs edge (src/verbs). All return
 * 0 or a negative errno unless stated; constructors return the object or
 * NULL with *err set to a negative errno.
 */
#ifndef URVT_CORE_RVT_API_H
#define URVT_CORE_RVT_API_H

#include "core/keys.h"
#include "core/qp_table.h"
#include "core/rvt.h"
#include "core/transport.h"

/* device.c: the process-wide device, created on first open. */
/* Takes an open reference; the first creates the device and attaches the
 * transport (NULL: none, loopback only; later calls ignore it). */
struct rvt_dev_info *rvt_dev_get(urvt_transport_attach_fn attach, int *err);
void rvt_dev_put(struct rvt_dev_info *rdi);
struct ibv_device *urvt_ibdev(void);             /* static descriptor, never NULL */
__be64 urvt_node_guid(void);                     /* per process; no device needed */
int rvt_query_port(struct rvt_dev_info *rdi, uint8_t port, struct ibv_port_attr *attr);
int rvt_query_gid(struct rvt_dev_info *rdi, uint8_t port, int index, union ibv_gid *gid);
int rvt_query_pkey(struct rvt_dev_info *rdi, uint8_t port, int index, __be16 *pkey);

/* event.c: contexts, async events and completion channels. */
int urvt_context_init(struct urvt_context *uctx, struct rvt_dev_info *rdi);
void urvt_context_fini(struct urvt_context *uctx);
void urvt_dispatch_async_event(struct urvt_context *uctx, enum ibv_event_type type,
			       void *obj);
int urvt_get_async_event(struct urvt_context *uctx, struct ibv_async_event *event);
void urvt_ack_async_event(struct ibv_async_event *event);
struct urvt_comp_channel *urvt_create_comp_channel(struct urvt_context *uctx, int *err);
int urvt_destroy_comp_channel(struct urvt_comp_channel *ch);
int urvt_get_cq_event(struct urvt_comp_channel *ch, struct rvt_cq **cq);
void urvt_comp_channel_notify(struct urvt_comp_channel *ch, struct rvt_cq *cq);
/* Destroy drops the object's unread events, as the kernel does. */
void urvt_cancel_async_events(struct urvt_context *uctx, const void *obj);
void urvt_comp_channel_cancel(struct urvt_comp_channel *ch, const struct rvt_cq *cq);

/* pd.c, ah.c */
/* The live PD with this handle (ibv_pd.handle), or NULL. */
struct rvt_pd *rvt_find_pd(struct rvt_dev_info *rdi, uint32_t handle);
/* A ring's memory, zeroed: from the parent domain's allocator if domain is
 * one and it does not answer IBV_ALLOCATOR_USE_DEFAULT, else calloc
 * (*custom says which; rvt_buf_free takes it back). n * size bytes. */
void *rvt_buf_alloc(struct rvt_pd *domain, size_t n, size_t size, uint32_t type, bool *custom);
void rvt_buf_free(struct rvt_pd *domain, void *buf, uint32_t type, bool custom);
/* A parent domain's objects (its usecnt): taken at create, dropped at destroy. */
void rvt_domain_get(struct rvt_pd *domain);
void rvt_domain_put(struct rvt_pd *domain);
struct rvt_pd *rvt_alloc_pd(struct urvt_context *uctx, int *err);
int rvt_dealloc_pd(struct rvt_pd *pd);
struct rvt_ah *rvt_create_ah(struct rvt_pd *pd, const struct ibv_ah_attr *attr, int *err);
int rvt_destroy_ah(struct rvt_ah *ah);
/* dqpn: the QP the path leads to, or URVT_QPN_ANY (an AH) */
int rvt_av_from_attr(struct rvt_dev_info *rdi, const struct ibv_ah_attr *attr,
		     struct urvt_av *av, uint32_t dqpn);
/* An AV to this device that must still go over a link (XRC) */
void rvt_av_via_link(struct rvt_dev_info *rdi, struct urvt_av *av);

/* mr.c */
int rvt_lkey_table_init(struct rvt_lkey_table *t, uint32_t max);
void rvt_lkey_table_fini(struct rvt_lkey_table *t);
struct rvt_mregion *rvt_reg_mr(struct rvt_pd *pd, void *addr, size_t length,
			       uint64_t iova, int access, int *err);
int rvt_rereg_mr(struct rvt_mregion *mr, int flags, struct rvt_pd *pd, void *addr,
		 size_t length, int access);
int rvt_dereg_mr(struct rvt_mregion *mr);
/* rvt_lkey_ok, rvt_rkey_ok, rvt_put_mr, rvt_put_sge: inline, in keys.h. */
/* Invalidate by rkey (LOCAL_INV / SEND_WITH_INV); -EINVAL if not found. */
int rvt_invalidate_rkey(struct rvt_qp *qp, uint32_t rkey);

/* cq.c */
struct rvt_cq *rvt_create_cq(struct urvt_context *uctx, int cqe,
			     struct urvt_comp_channel *ch, int comp_vector,
			     const struct ibv_cq_init_attr_ex *ex, int *err);
int rvt_destroy_cq(struct rvt_cq *cq);
int rvt_resize_cq(struct rvt_cq *cq, int cqe);
int rvt_poll_cq(struct rvt_cq *cq, int num_entries, struct ibv_wc *wc);
/* ibv_poll_cq: through the transport's poll_cq hook (it drives the network
 * when the CQ is empty), else rvt_poll_cq. */
int rvt_app_poll_cq(struct rvt_cq *cq, int num_entries, struct ibv_wc *wc);
int rvt_req_notify_cq(struct rvt_cq *cq, int solicited_only);
/* Can a packet that arrives put a completion into cq? Not if every QP
 * using it uses it as a UD send CQ: nothing to receive for its poller.
 * A CQ no QP uses yet answers yes, so its poller receives as it always
 * did (transport/poll.c). */
static inline bool rvt_cq_rx_fills(const struct rvt_cq *cq)
{
	int uses = atomic_load_explicit(&cq->usecnt, memory_order_relaxed);

	return !uses || uses != atomic_load_explicit(&cq->ud_send_uses, memory_order_relaxed);
}
/* Enter a completion; false if the CQ overflowed (entry lost, CQ_ERR raised). */
bool rvt_cq_enter(struct rvt_cq *cq, const struct ibv_wc *wc, bool solicited);
/* A receive batch holds the completion events it raises on this thread
 * until its responses have left (rvt_cq_events_release with what hold
 * returned): the peer sees the ACK before our application can answer. */
bool rvt_cq_events_hold(void);
void rvt_cq_events_release(bool was_held);
/* How many events this thread holds; rvt_cq_events_first moves those of cq
 * held since the count was 'since' in front of the others held since then
 * (the in-process loopback signals the sender's completion first, ruc.c). */
uint32_t rvt_cq_events_held(void);
void rvt_cq_events_first(uint32_t since, const struct rvt_cq *cq);
/* Does this thread run a QP's send engine (holds an s_sched token)? */
bool rvt_engine_on_thread(void);
void rvt_cq_clean(struct rvt_cq *cq, uint32_t qpn); /* drop qpn's completions */

/* srq.c */
struct rvt_srq *rvt_create_srq(struct rvt_pd *pd, struct ibv_srq_init_attr *attr,
			       int *err);
int rvt_modify_srq(struct rvt_srq *srq, struct ibv_srq_attr *attr, int attr_mask);
int rvt_query_srq(struct rvt_srq *srq, struct ibv_srq_attr *attr);
int rvt_destroy_srq(struct rvt_srq *srq);
int rvt_post_srq_recv(struct rvt_srq *srq, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr);
/* domain: whose allocators the ring uses (NULL: none); type RVT_RES_TYPE_*. */
int rvt_rq_init(struct rvt_rq *rq, uint32_t max_wr, uint32_t max_sge, struct rvt_pd *domain,
		uint32_t type);
/* Queue one receive WR (caller holds rq->p_lock): -EINVAL too many SGEs, -ENOMEM full. */
int rvt_rq_post_one(struct rvt_rq *rq, const struct ibv_recv_wr *wr);
void rvt_rq_fini(struct rvt_rq *rq);

/* xrc.c (qp-semantics §16) */
struct rvt_xrcd *rvt_open_xrcd(struct urvt_context *uctx, const struct ibv_xrcd_init_attr *attr,
			       int *err);
int rvt_close_xrcd(struct rvt_xrcd *x);
/* the two handles name one domain */
bool rvt_xrcd_same(const struct rvt_xrcd *a, const struct rvt_xrcd *b);
void rvt_xsrq_table_init(struct rvt_xsrq_table *t);
void rvt_xsrq_table_fini(struct rvt_xsrq_table *t);
struct rvt_srq *rvt_create_xsrq(struct rvt_pd *pd, struct rvt_xrcd *xrcd, struct rvt_cq *cq,
				struct ibv_srq_init_attr *attr, int *err);
/* rvt_destroy_srq's part for an XRC SRQ: withdraw its number, wait for the
 * packets using it */
void rvt_xsrq_destroy(struct rvt_srq *srq);
int rvt_get_srq_num(struct rvt_srq *srq, uint32_t *srq_num);
/* The XRC SRQ of a number, held until rvt_xsrq_put; NULL if none. No lock. */
struct rvt_srq *rvt_xsrq_get(struct rvt_dev_info *rdi, uint32_t srq_num);
void rvt_xsrq_put(struct rvt_dev_info *rdi, struct rvt_srq *srq);
/* ibv_open_qp: one more handle of an XRC_RECV QP of the domain */
struct rvt_qp *rvt_open_qp(struct urvt_context *uctx, const struct ibv_qp_open_attr *attr,
			   int *err);
/* drop a handle; true when it was the last (then destroy the QP) */
bool rvt_xrc_handle_put(struct rvt_qp *qp);

/* qp.c */
extern const char *const rvt_qp_state_name[IBV_QPS_ERR + 1];
bool rvt_modify_qp_is_ok(int cur, int next, enum ibv_qp_type type, int mask);
struct rvt_qp *rvt_create_qp(struct urvt_context *uctx, struct ibv_qp_init_attr_ex *attr,
			     int *err);
int rvt_modify_qp(struct rvt_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
int rvt_query_qp(struct rvt_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr);
int rvt_destroy_qp(struct rvt_qp *qp);

/* ---- ruc.c ---- */
/* ATOMIC_WRITE of val at va through rkey, as qp's responder (keys.h results). */
enum rvt_rkey_res rvt_atomic_write(struct rvt_qp *qp, uint64_t va, uint32_t rkey, uint64_t val);

/* ---- mcast.c: UD multicast ---- */
bool rvt_gid_is_mcast(const uint8_t gid[16]);
int rvt_attach_mcast(struct rvt_qp *qp, const union ibv_gid *gid, uint16_t lid);
int rvt_detach_mcast(struct rvt_qp *qp, const union ibv_gid *gid, uint16_t lid);
/* The groups qp is attached to (ibv_destroy_qp refuses while there are). */
unsigned rvt_mcast_groups_of(struct rvt_qp *qp);
void rvt_mcast_detach_all(struct rvt_qp *qp);
/* The QPs attached to gid, each referenced (rvt_put_qp), at most max. */
unsigned rvt_mcast_qps(struct rvt_dev_info *rdi, const uint8_t gid[16], struct rvt_qp **out,
		       unsigned max);
void rvt_mcast_init(struct rvt_dev_info *rdi);
void rvt_mcast_fini(struct rvt_dev_info *rdi);
/* rvt_lookup_qpn (referenced), rvt_put_qp: inline, in qp_table.h. */
void rvt_error_qp(struct rvt_qp *qp, enum ibv_wc_status err);

/* post.c */
int rvt_post_send(struct rvt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int rvt_post_recv(struct rvt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);

/*
 * An ibv_wr_* batch: WRs checked by post_send's own rvt_post_one_wr and
 * written to the slots after s_head, published all together or not at all.
 * start takes s_hlock and end releases it: nothing else may post to the QP
 * (or modify it) in between.
 */
struct rvt_post_batch {
	uint32_t n;             /* slots filled: s_head .. s_head + n - 1 */
	uint32_t n_local;       /* queued local operations among them */
	uint32_t ssn, next_psn; /* the batch's s_ssn / s_next_psn, stored on commit */
	int err;                /* first failure (negative errno); the rest is skipped */
};
void rvt_post_batch_start(struct rvt_qp *qp, struct rvt_post_batch *b);
void rvt_post_batch_add(struct rvt_qp *qp, struct rvt_post_batch *b,
			const struct ibv_send_wr *wr);
/* An error found outside rvt_post_one_wr (an unsupported builder). */
static inline void rvt_post_batch_fail(struct rvt_post_batch *b, int err)
{
	if (!b->err)
		b->err = err;
}
/* commit: publish and run the engine, or return the first error (nothing
 * posted); !commit: discard. Returns 0 or a negative errno. */
int rvt_post_batch_end(struct rvt_qp *qp, struct rvt_post_batch *b, bool commit);

#endif
