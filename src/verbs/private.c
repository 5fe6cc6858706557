/*
 * IBVERBS_PRIVATE_34: the provider ABI of rdma-core 44 (its driver.h).
 *
 * Why urvt exports it at all: Debian's perftest binaries link libmlx5.so.1
 * and libefa.so.1 directly, and those libraries (like every rdma-core
 * provider) import these symbols and are mapped with BIND_NOW. If one of
 * them is missing the dynamic loader refuses to start the program, before
 * any urvt code runs. So every symbol must exist; none has to work.
 *
 * What they do here: urvt has no kernel command channel (no /dev/infiniband
 * uverbs fd), so every command and ioctl wrapper fails with EOPNOTSUPP the
 * way a kernel without that command would. Provider registrations are
 * accepted and dropped: urvt is the only device, so the mlx5/efa code is
 * never asked to open anything. The few helpers that need no kernel
 * (verbs_init_cq, __verbs_log, ibv_query_gid_type) work.
 *
 * Signatures follow rdma-core's driver.h / cmd_ioctl.h. The command structs
 * come from rdma-core's private kern-abi.h, which is not installed; they are
 * declared incomplete because these functions never look inside them.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>

#include "verbs/ops.h"

/* Opaque rdma-core types (driver.h, cmd_ioctl.h, kern-abi.h). */
struct ibv_command_buffer;
struct verbs_device_ops;
struct verbs_sysfs_dev;
struct verbs_xrcd;
struct verbs_mr;
struct verbs_cq;
struct verbs_qp;
struct verbs_srq;
struct verbs_dm;
struct verbs_counters;
struct verbs_flow_action;
struct verbs_context_ops;
struct ibv_get_context;
struct ibv_query_port;
struct ibv_alloc_pd;
struct ibv_open_xrcd;
struct ibv_reg_mr;
struct ibv_rereg_mr;
struct ibv_alloc_mw;
struct ibv_create_cq;
struct ibv_create_cq_ex;
struct ibv_resize_cq;
struct ibv_modify_cq;
struct ibv_create_srq;
struct ibv_create_xsrq;
struct ibv_modify_srq;
struct ibv_query_srq;
struct ibv_create_qp;
struct ibv_create_qp_ex;
struct ibv_open_qp;
struct ibv_query_qp;
struct ibv_modify_qp;
struct ibv_modify_qp_ex;
struct ibv_create_wq;
struct ibv_modify_wq;

/* The sysfs GID type enum of driver.h (not enum ibv_gid_type). */
enum ibv_gid_type_sysfs {
	IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
	IBV_GID_TYPE_SYSFS_ROCE_V2,
};

/* ---- prototypes: the ABI as rdma-core's driver.h declares it ---- */
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs,
				     struct ibv_command_buffer *link);
int execute_ioctl(struct ibv_context *context, struct ibv_command_buffer *cmd);
void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd,
				    size_t alloc_size,
				    struct verbs_context *context_offset,
				    uint32_t driver_id);
struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data);
void verbs_register_driver_34(const struct verbs_device_ops *ops);
void verbs_set_ops(struct verbs_context *vctx, const struct verbs_context_ops *ops);
void verbs_uninit_context(struct verbs_context *context);
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
		   struct ibv_comp_channel *channel, void *cq_context);
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct verbs_sysfs_dev *sysfs_dev,
			      const char *fnfmt, ...)
	__attribute__((format(printf, 4, 5)));
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
		       unsigned int index, enum ibv_gid_type_sysfs *type);

int ibv_cmd_get_context(struct verbs_context *context, struct ibv_get_context *cmd,
			size_t cmd_size, struct ib_uverbs_get_context_resp *resp,
			size_t resp_size);
int ibv_cmd_query_context(struct ibv_context *ctx, struct ibv_command_buffer *driver);
int ibv_cmd_query_device_any(struct ibv_context *context,
			     const struct ibv_query_device_ex_input *input,
			     struct ibv_device_attr_ex *attr, size_t attr_size,
			     struct ib_uverbs_ex_query_device_resp *resp, size_t *resp_size);
int ibv_cmd_query_port(struct ibv_context *context, uint8_t port_num,
		       struct ibv_port_attr *port_attr, struct ibv_query_port *cmd,
		       size_t cmd_size);
int ibv_cmd_alloc_pd(struct ibv_context *context, struct ibv_pd *pd,
		     struct ibv_alloc_pd *cmd, size_t cmd_size,
		     struct ib_uverbs_alloc_pd_resp *resp, size_t resp_size);
int ibv_cmd_dealloc_pd(struct ibv_pd *pd);
int ibv_cmd_open_xrcd(struct ibv_context *context, struct verbs_xrcd *xrcd,
		      int vxrcd_size, struct ibv_xrcd_init_attr *attr,
		      struct ibv_open_xrcd *cmd, size_t cmd_size,
		      struct ib_uverbs_open_xrcd_resp *resp, size_t resp_size);
int ibv_cmd_close_xrcd(struct verbs_xrcd *xrcd);
int ibv_cmd_reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t hca_va,
		   int access, struct verbs_mr *vmr, struct ibv_reg_mr *cmd,
		   size_t cmd_size, struct ib_uverbs_reg_mr_resp *resp, size_t resp_size);
int ibv_cmd_rereg_mr(struct verbs_mr *vmr, uint32_t flags, void *addr, size_t length,
		     uint64_t hca_va, int access, struct ibv_pd *pd,
		     struct ibv_rereg_mr *cmd, size_t cmd_sz,
		     struct ib_uverbs_rereg_mr_resp *resp, size_t resp_sz);
int ibv_cmd_dereg_mr(struct verbs_mr *vmr);
int ibv_cmd_query_mr(struct ibv_pd *pd, struct verbs_mr *vmr, uint32_t mr_handle);
int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		      uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge);
int ibv_cmd_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
			  uint64_t iova, int fd, int access, struct verbs_mr *vmr);
int ibv_cmd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type, struct ibv_mw *mw,
		     struct ibv_alloc_mw *cmd, size_t cmd_size,
		     struct ib_uverbs_alloc_mw_resp *resp, size_t resp_size);
int ibv_cmd_dealloc_mw(struct ibv_mw *mw);
int ibv_cmd_create_cq(struct ibv_context *context, int cqe,
		      struct ibv_comp_channel *channel, int comp_vector,
		      struct ibv_cq *cq, struct ibv_create_cq *cmd, size_t cmd_size,
		      struct ib_uverbs_create_cq_resp *resp, size_t resp_size);
int ibv_cmd_create_cq_ex(struct ibv_context *context,
			 const struct ibv_cq_init_attr_ex *cq_attr, struct verbs_cq *cq,
			 struct ibv_create_cq_ex *cmd, size_t cmd_size,
			 struct ib_uverbs_ex_create_cq_resp *resp, size_t resp_size,
			 uint32_t cmd_flags);
int ibv_cmd_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc);
int ibv_cmd_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int ibv_cmd_resize_cq(struct ibv_cq *cq, int cqe, struct ibv_resize_cq *cmd,
		      size_t cmd_size, struct ib_uverbs_resize_cq_resp *resp,
		      size_t resp_size);
int ibv_cmd_destroy_cq(struct ibv_cq *cq);
int ibv_cmd_modify_cq(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr,
		      struct ibv_modify_cq *cmd, size_t cmd_size);
int ibv_cmd_create_srq(struct ibv_pd *pd, struct ibv_srq *srq,
		       struct ibv_srq_init_attr *attr, struct ibv_create_srq *cmd,
		       size_t cmd_size, struct ib_uverbs_create_srq_resp *resp,
		       size_t resp_size);
int ibv_cmd_create_srq_ex(struct ibv_context *context, struct verbs_srq *srq,
			  struct ibv_srq_init_attr_ex *attr_ex,
			  struct ibv_create_xsrq *cmd, size_t cmd_size,
			  struct ib_uverbs_create_srq_resp *resp, size_t resp_size);
int ibv_cmd_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		       int srq_attr_mask, struct ibv_modify_srq *cmd, size_t cmd_size);
int ibv_cmd_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		      struct ibv_query_srq *cmd, size_t cmd_size);
int ibv_cmd_destroy_srq(struct ibv_srq *srq);
int ibv_cmd_create_qp(struct ibv_pd *pd, struct ibv_qp *qp,
		      struct ibv_qp_init_attr *attr, struct ibv_create_qp *cmd,
		      size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
		      size_t resp_size);
int ibv_cmd_create_qp_ex(struct ibv_context *context, struct verbs_qp *qp,
			 struct ibv_qp_init_attr_ex *attr_ex, struct ibv_create_qp *cmd,
			 size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
			 size_t resp_size);
int ibv_cmd_create_qp_ex2(struct ibv_context *context, struct verbs_qp *qp,
			  struct ibv_qp_init_attr_ex *qp_attr,
			  struct ibv_create_qp_ex *cmd, size_t cmd_size,
			  struct ib_uverbs_ex_create_qp_resp *resp, size_t resp_size);
int ibv_cmd_open_qp(struct ibv_context *context, struct verbs_qp *qp, int vqp_sz,
		    struct ibv_qp_open_attr *attr, struct ibv_open_qp *cmd,
		    size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
		    size_t resp_size);
int ibv_cmd_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *qp_attr, int attr_mask,
		     struct ibv_qp_init_attr *qp_init_attr, struct ibv_query_qp *cmd,
		     size_t cmd_size);
int ibv_cmd_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		      struct ibv_modify_qp *cmd, size_t cmd_size);
int ibv_cmd_modify_qp_ex(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
			 struct ibv_modify_qp_ex *cmd, size_t cmd_size,
			 struct ib_uverbs_ex_modify_qp_resp *resp, size_t resp_size);
int ibv_cmd_destroy_qp(struct ibv_qp *qp);
int ibv_cmd_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		      struct ibv_send_wr **bad_wr);
int ibv_cmd_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr);
int ibv_cmd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad_wr);
int ibv_cmd_create_ah(struct ibv_pd *pd, struct ibv_ah *ah, struct ibv_ah_attr *attr,
		      struct ib_uverbs_create_ah_resp *resp, size_t resp_size);
int ibv_cmd_destroy_ah(struct ibv_ah *ah);
int ibv_cmd_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
int ibv_cmd_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
int ibv_cmd_create_flow(struct ibv_qp *qp, struct ibv_flow *flow_id,
			struct ibv_flow_attr *flow_attr, void *ucmd, size_t ucmd_size);
int ibv_cmd_destroy_flow(struct ibv_flow *flow_id);
int ibv_cmd_create_flow_action_esp(struct ibv_context *ctx,
				   struct ibv_flow_action_esp_attr *attr,
				   struct verbs_flow_action *flow_action,
				   struct ibv_command_buffer *driver);
int ibv_cmd_modify_flow_action_esp(struct verbs_flow_action *flow_action,
				   struct ibv_flow_action_esp_attr *attr,
				   struct ibv_command_buffer *driver);
int ibv_cmd_destroy_flow_action(struct verbs_flow_action *action);
int ibv_cmd_create_wq(struct ibv_context *context, struct ibv_wq_init_attr *wq_init_attr,
		      struct ibv_wq *wq, struct ibv_create_wq *cmd, size_t cmd_size,
		      struct ib_uverbs_ex_create_wq_resp *resp, size_t resp_size);
int ibv_cmd_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr,
		      struct ibv_modify_wq *cmd, size_t cmd_size);
int ibv_cmd_destroy_wq(struct ibv_wq *wq);
int ibv_cmd_create_rwq_ind_table(struct ibv_context *context,
				 struct ibv_rwq_ind_table_init_attr *init_attr,
				 struct ibv_rwq_ind_table *rwq_ind_table,
				 struct ib_uverbs_ex_create_rwq_ind_table_resp *resp,
				 size_t resp_size);
int ibv_cmd_destroy_rwq_ind_table(struct ibv_rwq_ind_table *rwq_ind_table);
int ibv_cmd_create_counters(struct ibv_context *context,
			    struct ibv_counters_init_attr *init_attr,
			    struct verbs_counters *vcounters,
			    struct ibv_command_buffer *link);
int ibv_cmd_destroy_counters(struct verbs_counters *vcounters);
int ibv_cmd_read_counters(struct verbs_counters *vcounters, uint64_t *counters_value,
			  uint32_t ncounters, uint32_t flags,
			  struct ibv_command_buffer *link);
int ibv_cmd_alloc_dm(struct ibv_context *ctx, const struct ibv_alloc_dm_attr *dm_attr,
		     struct verbs_dm *dm, struct ibv_command_buffer *link);
int ibv_cmd_free_dm(struct verbs_dm *dm);
int ibv_cmd_reg_dm_mr(struct ibv_pd *pd, struct verbs_dm *dm, uint64_t offset,
		      size_t length, unsigned int access, struct verbs_mr *vmr,
		      struct ibv_command_buffer *link);

/* ---- data ---- */

/* rdma-core lets the application opt in to destroying objects of a
 * disassociated (hot-unplugged) device. urvt's device never disappears. */
bool verbs_allow_disassociate_destroy;

/* ---- the ioctl / device machinery ---- */

/*
 * rdma-core sums the attributes of the linked command buffers here. With no
 * ioctl channel nothing is ever linked or sent, and the caller only uses the
 * number to size a stack buffer, so its own count is the answer.
 */
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs,
				     struct ibv_command_buffer *link)
{
	return num_attrs;
}

int execute_ioctl(struct ibv_context *context, struct ibv_command_buffer *cmd)
{
	return EOPNOTSUPP;
}

/* Provider logging: honour rdma-core's VERBS_LOG_LEVEL (0 = off, 4 = debug). */
void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...)
{
	static int max_level = -1;
	int saved_errno = errno;
	va_list ap;

	if (max_level < 0) {
		const char *env = getenv("VERBS_LOG_LEVEL");

		max_level = env ? atoi(env) : 0;
	}
	if ((int)level > max_level || level == 0)
		goto out;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
out:
	errno = saved_errno;
}

void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd,
				    size_t alloc_size,
				    struct verbs_context *context_offset,
				    uint32_t driver_id)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/* mlx5dv_open_device() and friends end here: not an mlx5 device, unless
 * private_data is urvt's own open request (verbs/open_at.h). */
struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data)
{
	return urvt_open_device_at(device, private_data);
}

/*
 * Called from every provider's constructor when its library is loaded.
 * urvt does not enumerate kernel devices, so there is nothing to match a
 * provider against: accept and forget.
 */
void verbs_register_driver_34(const struct verbs_device_ops *ops)
{
}

/* Only reachable from a provider's alloc_context, which urvt never calls. */
void verbs_set_ops(struct verbs_context *vctx, const struct verbs_context_ops *ops)
{
}

void verbs_uninit_context(struct verbs_context *context)
{
}

/* Same bookkeeping as ibv_create_cq does for a new CQ; needs no kernel. */
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
		   struct ibv_comp_channel *channel, void *cq_context)
{
	cq->context = context;
	cq->channel = channel;
	if (channel) {
		pthread_mutex_lock(&context->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&context->mutex);
	}
	cq->cq_context = cq_context;
	cq->comp_events_completed = 0;
	cq->async_events_completed = 0;
	pthread_mutex_init(&cq->mutex, NULL);
	pthread_cond_init(&cq->cond, NULL);
}

/* urvt devices have no sysfs directory: every attribute file is missing. */
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct verbs_sysfs_dev *sysfs_dev,
			      const char *fnfmt, ...)
{
	errno = ENOENT;
	return -1;
}

/*
 * Real: ibv_devinfo prints the type of every GID through this. urvt's only
 * GID (port 1, index 0) is RoCE v2. An empty entry reads as v1, as rdma-core
 * answers for unused slots; a slot or port that does not exist is an error
 * (-1, errno EINVAL).
 */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
		       unsigned int index, enum ibv_gid_type_sysfs *type)
{
	static const union ibv_gid zero;
	union ibv_gid gid;

	if (index > INT32_MAX || ibv_query_gid(context, port_num, (int)index, &gid)) {
		errno = EINVAL;
		return -1;
	}
	*type = memcmp(&gid, &zero, sizeof(gid)) ? IBV_GID_TYPE_SYSFS_ROCE_V2
						 : IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
	return 0;
}

/* ---- kernel commands: no uverbs channel, so none is supported ---- */

int ibv_cmd_get_context(struct verbs_context *context, struct ibv_get_context *cmd,
			size_t cmd_size, struct ib_uverbs_get_context_resp *resp,
			size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_context(struct ibv_context *ctx, struct ibv_command_buffer *driver)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_device_any(struct ibv_context *context,
			     const struct ibv_query_device_ex_input *input,
			     struct ibv_device_attr_ex *attr, size_t attr_size,
			     struct ib_uverbs_ex_query_device_resp *resp, size_t *resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_port(struct ibv_context *context, uint8_t port_num,
		       struct ibv_port_attr *port_attr, struct ibv_query_port *cmd,
		       size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_alloc_pd(struct ibv_context *context, struct ibv_pd *pd,
		     struct ibv_alloc_pd *cmd, size_t cmd_size,
		     struct ib_uverbs_alloc_pd_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_dealloc_pd(struct ibv_pd *pd)
{
	return EOPNOTSUPP;
}

int ibv_cmd_open_xrcd(struct ibv_context *context, struct verbs_xrcd *xrcd,
		      int vxrcd_size, struct ibv_xrcd_init_attr *attr,
		      struct ibv_open_xrcd *cmd, size_t cmd_size,
		      struct ib_uverbs_open_xrcd_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_close_xrcd(struct verbs_xrcd *xrcd)
{
	return EOPNOTSUPP;
}

int ibv_cmd_reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t hca_va,
		   int access, struct verbs_mr *vmr, struct ibv_reg_mr *cmd,
		   size_t cmd_size, struct ib_uverbs_reg_mr_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_rereg_mr(struct verbs_mr *vmr, uint32_t flags, void *addr, size_t length,
		     uint64_t hca_va, int access, struct ibv_pd *pd,
		     struct ibv_rereg_mr *cmd, size_t cmd_sz,
		     struct ib_uverbs_rereg_mr_resp *resp, size_t resp_sz)
{
	return EOPNOTSUPP;
}

int ibv_cmd_dereg_mr(struct verbs_mr *vmr)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_mr(struct ibv_pd *pd, struct verbs_mr *vmr, uint32_t mr_handle)
{
	return EOPNOTSUPP;
}

int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		      uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge)
{
	return EOPNOTSUPP;
}

int ibv_cmd_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
			  uint64_t iova, int fd, int access, struct verbs_mr *vmr)
{
	return EOPNOTSUPP;
}

int ibv_cmd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type, struct ibv_mw *mw,
		     struct ibv_alloc_mw *cmd, size_t cmd_size,
		     struct ib_uverbs_alloc_mw_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_dealloc_mw(struct ibv_mw *mw)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_cq(struct ibv_context *context, int cqe,
		      struct ibv_comp_channel *channel, int comp_vector,
		      struct ibv_cq *cq, struct ibv_create_cq *cmd, size_t cmd_size,
		      struct ib_uverbs_create_cq_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_cq_ex(struct ibv_context *context,
			 const struct ibv_cq_init_attr_ex *cq_attr, struct verbs_cq *cq,
			 struct ibv_create_cq_ex *cmd, size_t cmd_size,
			 struct ib_uverbs_ex_create_cq_resp *resp, size_t resp_size,
			 uint32_t cmd_flags)
{
	return EOPNOTSUPP;
}

/* A poll returns a count, so failure is -1 (rdma-core's convention here). */
int ibv_cmd_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc)
{
	errno = EOPNOTSUPP;
	return -1;
}

int ibv_cmd_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return EOPNOTSUPP;
}

int ibv_cmd_resize_cq(struct ibv_cq *cq, int cqe, struct ibv_resize_cq *cmd,
		      size_t cmd_size, struct ib_uverbs_resize_cq_resp *resp,
		      size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_cq(struct ibv_cq *cq)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_cq(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr,
		      struct ibv_modify_cq *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_srq(struct ibv_pd *pd, struct ibv_srq *srq,
		       struct ibv_srq_init_attr *attr, struct ibv_create_srq *cmd,
		       size_t cmd_size, struct ib_uverbs_create_srq_resp *resp,
		       size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_srq_ex(struct ibv_context *context, struct verbs_srq *srq,
			  struct ibv_srq_init_attr_ex *attr_ex,
			  struct ibv_create_xsrq *cmd, size_t cmd_size,
			  struct ib_uverbs_create_srq_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		       int srq_attr_mask, struct ibv_modify_srq *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		      struct ibv_query_srq *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_srq(struct ibv_srq *srq)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_qp(struct ibv_pd *pd, struct ibv_qp *qp,
		      struct ibv_qp_init_attr *attr, struct ibv_create_qp *cmd,
		      size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
		      size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_qp_ex(struct ibv_context *context, struct verbs_qp *qp,
			 struct ibv_qp_init_attr_ex *attr_ex, struct ibv_create_qp *cmd,
			 size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
			 size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_qp_ex2(struct ibv_context *context, struct verbs_qp *qp,
			  struct ibv_qp_init_attr_ex *qp_attr,
			  struct ibv_create_qp_ex *cmd, size_t cmd_size,
			  struct ib_uverbs_ex_create_qp_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_open_qp(struct ibv_context *context, struct verbs_qp *qp, int vqp_sz,
		    struct ibv_qp_open_attr *attr, struct ibv_open_qp *cmd,
		    size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
		    size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *qp_attr, int attr_mask,
		     struct ibv_qp_init_attr *qp_init_attr, struct ibv_query_qp *cmd,
		     size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		      struct ibv_modify_qp *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_qp_ex(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
			 struct ibv_modify_qp_ex *cmd, size_t cmd_size,
			 struct ib_uverbs_ex_modify_qp_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_qp(struct ibv_qp *qp)
{
	return EOPNOTSUPP;
}

/* The post wrappers report the first WR as the one that failed. */
int ibv_cmd_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		      struct ibv_send_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return EOPNOTSUPP;
}

int ibv_cmd_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return EOPNOTSUPP;
}

int ibv_cmd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return EOPNOTSUPP;
}

int ibv_cmd_create_ah(struct ibv_pd *pd, struct ibv_ah *ah, struct ibv_ah_attr *attr,
		      struct ib_uverbs_create_ah_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_ah(struct ibv_ah *ah)
{
	return EOPNOTSUPP;
}

int ibv_cmd_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return EOPNOTSUPP;
}

int ibv_cmd_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_flow(struct ibv_qp *qp, struct ibv_flow *flow_id,
			struct ibv_flow_attr *flow_attr, void *ucmd, size_t ucmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_flow(struct ibv_flow *flow_id)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_flow_action_esp(struct ibv_context *ctx,
				   struct ibv_flow_action_esp_attr *attr,
				   struct verbs_flow_action *flow_action,
				   struct ibv_command_buffer *driver)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_flow_action_esp(struct verbs_flow_action *flow_action,
				   struct ibv_flow_action_esp_attr *attr,
				   struct ibv_command_buffer *driver)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_flow_action(struct verbs_flow_action *action)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_wq(struct ibv_context *context, struct ibv_wq_init_attr *wq_init_attr,
		      struct ibv_wq *wq, struct ibv_create_wq *cmd, size_t cmd_size,
		      struct ib_uverbs_ex_create_wq_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr,
		      struct ibv_modify_wq *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_wq(struct ibv_wq *wq)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_rwq_ind_table(struct ibv_context *context,
				 struct ibv_rwq_ind_table_init_attr *init_attr,
				 struct ibv_rwq_ind_table *rwq_ind_table,
				 struct ib_uverbs_ex_create_rwq_ind_table_resp *resp,
				 size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_rwq_ind_table(struct ibv_rwq_ind_table *rwq_ind_table)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_counters(struct ibv_context *context,
			    struct ibv_counters_init_attr *init_attr,
			    struct verbs_counters *vcounters,
			    struct ibv_command_buffer *link)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_counters(struct verbs_counters *vcounters)
{
	return EOPNOTSUPP;
}

int ibv_cmd_read_counters(struct verbs_counters *vcounters, uint64_t *counters_value,
			  uint32_t ncounters, uint32_t flags,
			  struct ibv_command_buffer *link)
{
	return EOPNOTSUPP;
}

int ibv_cmd_alloc_dm(struct ibv_context *ctx, const struct ibv_alloc_dm_attr *dm_attr,
		     struct verbs_dm *dm, struct ibv_command_buffer *link)
{
	return EOPNOTSUPP;
}

int ibv_cmd_free_dm(struct verbs_dm *dm)
{
	return EOPNOTSUPP;
}

int ibv_cmd_reg_dm_mr(struct ibv_pd *pd, struct verbs_dm *dm, uint64_t offset,
		      size_t length, unsigned int access, struct verbs_mr *vmr,
		      struct ibv_command_buffer *link)
{
	return EOPNOTSUPP;
}
