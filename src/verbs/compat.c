/*
 * The IBVERBS_1.0 entry points: libibverbs' ABI from before 1.1 (2007),
 * kept by rdma-core as non-default symbol versions (name@IBVERBS_1.0) so
 * binaries linked in that era still load. Nothing built since references
 * them; the symbol diff test requires them so the export set is exact.
 *
 * In the 1.0 ABI every handle is a different struct (ibv_device_1_0,
 * ibv_context_1_0, ibv_pd_1_0, ...: a 1.0 header followed by a pointer to
 * the real object), so no entry point below is "the same function with the
 * same arguments" as its 1.1 successor and none can simply forward. urvt
 * behaves like a provider without the 1.0 ABI: the only way in,
 * ibv_get_device_list@IBVERBS_1.0, reports no support, so no 1.0 handle can
 * ever exist, and everything taking one fails the same way.
 *
 *   symbol@IBVERBS_1.0       returns                        why
 *   ---------------------    -----------------------------  -----------------
 *   ibv_get_device_list      NULL, errno EOPNOTSUPP, *num=0  no 1.0 devices
 *   ibv_free_device_list     nothing (no-op)                 no 1.0 list exists
 *   ibv_get_device_name      NULL, errno EOPNOTSUPP          1.0 device handle
 *   ibv_get_device_guid      0, errno EOPNOTSUPP             1.0 device handle
 *   ibv_open_device          NULL, errno EOPNOTSUPP          1.0 device handle
 *   ibv_alloc_pd, ibv_reg_mr,
 *   ibv_create_cq/srq/qp/ah  NULL, errno EOPNOTSUPP          1.0 handles
 *   ibv_get_async_event,
 *   ibv_get_cq_event,
 *   ibv_query_gid/pkey       -1, errno EOPNOTSUPP            their man pages'
 *                                                            failure convention
 *   ibv_ack_async_event,
 *   ibv_ack_cq_events        nothing (no-op)                 void; nothing to ack
 *   every other int verb     EOPNOTSUPP                      errno-valued verbs
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

/*
 * Define urvt_compat_<name> and export it only as name@IBVERBS_1.0. The
 * implementation name is hidden by the version script's "local: *".
 * Top-level .symver works with gcc and clang alike (gcc's symver attribute
 * does not exist in clang 14).
 */
#define COMPAT_1_0(ret, name, ...)                                            \
	ret urvt_compat_##name(__VA_ARGS__);                                  \
	__asm__(".symver urvt_compat_" #name ", " #name "@IBVERBS_1.0");      \
	ret urvt_compat_##name(__VA_ARGS__)

/* 1.0 handles are opaque here: nothing ever dereferences one. */
struct ibv_device_1_0;
struct ibv_context_1_0;
struct ibv_pd_1_0;
struct ibv_mr_1_0;
struct ibv_cq_1_0;
struct ibv_srq_1_0;
struct ibv_qp_1_0;
struct ibv_ah_1_0;
struct ibv_qp_init_attr_1_0;

/* ---- devices and contexts ---- */

COMPAT_1_0(struct ibv_device_1_0 **, ibv_get_device_list, int *num)
{
	if (num)
		*num = 0;
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT_1_0(void, ibv_free_device_list, struct ibv_device_1_0 **list)
{
}

COMPAT_1_0(const char *, ibv_get_device_name, struct ibv_device_1_0 *device)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT_1_0(__be64, ibv_get_device_guid, struct ibv_device_1_0 *device)
{
	errno = EOPNOTSUPP;
	return 0;
}

COMPAT_1_0(struct ibv_context_1_0 *, ibv_open_device, struct ibv_device_1_0 *device)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT_1_0(int, ibv_close_device, struct ibv_context_1_0 *context)
{
	return EOPNOTSUPP;
}

COMPAT_1_0(int, ibv_get_async_event, struct ibv_context_1_0 *context,
	   struct ibv_async_event *event)
{
	errno = EOPNOTSUPP;
	return -1;
}

COMPAT_1_0(void, ibv_ack_async_event, struct ibv_async_event *event)
{
}

COMPAT_1_0(int, ibv_query_device, struct ibv_context_1_0 *context,
	   struct ibv_device_attr *device_attr)
{
	return EOPNOTSUPP;
}

COMPAT_1_0(int, ibv_query_port, struct ibv_context_1_0 *context, uint8_t port_num,
	   struct ibv_port_attr *port_attr)
{
	return EOPNOTSUPP;
}

COMPAT_1_0(int, ibv_query_gid, struct ibv_context_1_0 *context, uint8_t port_num,
	   int index, union ibv_gid *gid)
{
	errno = EOPNOTSUPP;
	return -1;
}

COMPAT_1_0(int, ibv_query_pkey, struct ibv_context_1_0 *context, uint8_t port_num,
	   int index, __be16 *pkey)
{
	errno = EOPNOTSUPP;
	return -1;
}

/* ---- PD, MR ---- */

COMPAT_1_0(struct ibv_pd_1_0 *, ibv_alloc_pd, struct ibv_context_1_0 *context)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT_1_0(int, ibv_dealloc_pd, struct ibv_pd_1_0 *pd)
{
	return EOPNOTSUPP;
}

COMPAT_1_0(struct ibv_mr_1_0 *, ibv_reg_mr, struct ibv_pd_1_0 *pd, void *addr,
	   size_t length, int access)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT_1_0(int, ibv_dereg_mr, struct ibv_mr_1_0 *mr)
{
	return EOPNOTSUPP;
}

/* ---- CQ ---- */

COMPAT_1_0(struct ibv_cq_1_0 *, ibv_create_cq, struct ibv_context_1_0 *context,
	   int cqe, void *cq_context, struct ibv_comp_channel *channel, int comp_vector)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT_1_0(int, ibv_resize_cq, struct ibv_cq_1_0 *cq, int cqe)
{
	return EOPNOTSUPP;
}

COMPAT_1_0(int, ibv_destroy_cq, struct ibv_cq_1_0 *cq)
{
	return EOPNOTSUPP;
}

COMPAT_1_0(int, ibv_get_cq_event, struct ibv_comp_channel *channel,
	   struct ibv_cq_1_0 **cq, void **cq_context)
{
	errno = EOPNOTSUPP;
	return -1;
}

COMPAT_1_0(void, ibv_ack_cq_events, struct ibv_cq_1_0 *cq, unsigned int nevents)
{
}

/* ---- SRQ ---- */

COMPAT_1_0(struct ibv_srq_1_0 *, ibv_create_srq, struct ibv_pd_1_0 *pd,
	   struct ibv_srq_init_attr *srq_init_attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT_1_0(int, ibv_modify_srq, struct ibv_srq_1_0 *srq, struct ibv_srq_attr *srq_attr,
	   int srq_attr_mask)
{
	return EOPNOTSUPP;
}

COMPAT_1_0(int, ibv_query_srq, struct ibv_srq_1_0 *srq, struct ibv_srq_attr *srq_attr)
{
	return EOPNOTSUPP;
}

COMPAT_1_0(int, ibv_destroy_srq, struct ibv_srq_1_0 *srq)
{
	return EOPNOTSUPP;
}

/* ---- QP ---- */

COMPAT_1_0(struct ibv_qp_1_0 *, ibv_create_qp, struct ibv_pd_1_0 *pd,
	   struct ibv_qp_init_attr_1_0 *qp_init_attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT_1_0(int, ibv_query_qp, struct ibv_qp_1_0 *qp, struct ibv_qp_attr *attr,
	   int attr_mask, struct ibv_qp_init_attr_1_0 *init_attr)
{
	return EOPNOTSUPP;
}

COMPAT_1_0(int, ibv_modify_qp, struct ibv_qp_1_0 *qp, struct ibv_qp_attr *attr,
	   int attr_mask)
{
	return EOPNOTSUPP;
}

COMPAT_1_0(int, ibv_destroy_qp, struct ibv_qp_1_0 *qp)
{
	return EOPNOTSUPP;
}

/* ---- AH, multicast ---- */

COMPAT_1_0(struct ibv_ah_1_0 *, ibv_create_ah, struct ibv_pd_1_0 *pd,
	   struct ibv_ah_attr *attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT_1_0(int, ibv_destroy_ah, struct ibv_ah_1_0 *ah)
{
	return EOPNOTSUPP;
}

COMPAT_1_0(int, ibv_attach_mcast, struct ibv_qp_1_0 *qp, union ibv_gid *gid,
	   uint16_t lid)
{
	return EOPNOTSUPP;
}

COMPAT_1_0(int, ibv_detach_mcast, struct ibv_qp_1_0 *qp, union ibv_gid *gid,
	   uint16_t lid)
{
	return EOPNOTSUPP;
}
