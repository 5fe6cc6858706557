/*
 * The functions the context's op tables point at (struct ibv_context_ops and
 * struct verbs_context). They are implemented in verbs.c on top of the core;
 * device.c installs them when a context is opened. Ops urvt does not provide
 * stay NULL in the verbs_context: the header's inline wrappers then return
 * EOPNOTSUPP (or NULL with errno EOPNOTSUPP) themselves.
 */
#ifndef URVT_VERBS_OPS_H
#define URVT_VERBS_OPS_H

#include <infiniband/verbs.h>

/* struct ibv_context_ops */
int urvt_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int urvt_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int urvt_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int urvt_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int urvt_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad_wr);
struct ibv_mw *urvt_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int urvt_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);
int urvt_dealloc_mw(struct ibv_mw *mw);

/* struct verbs_context */
int urvt_vctx_query_port(struct ibv_context *context, uint8_t port_num,
			 struct ibv_port_attr *port_attr, size_t port_attr_len);
int urvt_query_device_ex(struct ibv_context *context,
			 const struct ibv_query_device_ex_input *input,
			 struct ibv_device_attr_ex *attr, size_t attr_size);
int urvt_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		   struct ibv_sge *sg_list, uint32_t num_sge);
int urvt_query_rt_values(struct ibv_context *context, struct ibv_values_ex *values);
struct ibv_cq_ex *urvt_create_cq_ex(struct ibv_context *context,
				    struct ibv_cq_init_attr_ex *init_attr);
struct ibv_qp *urvt_create_qp_ex(struct ibv_context *context,
				 struct ibv_qp_init_attr_ex *init_attr);
struct ibv_srq *urvt_create_srq_ex(struct ibv_context *context,
				   struct ibv_srq_init_attr_ex *init_attr);
/* XRC (qp-semantics §16) */
struct ibv_xrcd *urvt_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *attr);
int urvt_close_xrcd(struct ibv_xrcd *xrcd);
int urvt_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);
struct ibv_qp *urvt_open_qp(struct ibv_context *context, struct ibv_qp_open_attr *attr);

/* dm.c: device memory (host memory of the process standing in) */
#define URVT_MAX_DM_SIZE (256u << 10)   /* max_dm_size: all DMs of the device together */
struct ibv_dm *urvt_alloc_dm(struct ibv_context *context, struct ibv_alloc_dm_attr *attr);
int urvt_free_dm(struct ibv_dm *dm);
struct ibv_mr *urvt_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t dm_offset,
			      size_t length, unsigned int access);
void urvt_dm_mr_deregistered(struct ibv_mr *mr); /* after a successful dereg */

/* verbs.c: thread and parent domains */
struct ibv_td *urvt_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr);
int urvt_dealloc_td(struct ibv_td *td);
struct ibv_pd *urvt_alloc_parent_domain(struct ibv_context *context,
					struct ibv_parent_domain_init_attr *attr);

/* device.c: verbs_open_device's urvt case (verbs/open_at.h) */
struct ibv_context *urvt_open_device_at(struct ibv_device *device, void *private_data);

/* qp_ex.c: the ibv_wr_* API of QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS */
struct rvt_qp;
int urvt_qp_ex_check(const struct ibv_qp_init_attr_ex *attr); /* 0 or -EOPNOTSUPP */
int urvt_qp_ex_init(struct rvt_qp *qp);                        /* 0 or -ENOMEM */
void urvt_qp_ex_fini(void *wr_priv);

#endif
