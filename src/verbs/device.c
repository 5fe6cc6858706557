/*
 * Devices and contexts at the verbs edge: the device list (always the one
 * device "urvt0"), ibv_open_device / ibv_close_device and the context
 * layout the header's inline verbs rely on, and the device/port/GID/P_Key
 * queries. Core calls return negative errno; each verb converts once, to
 * its own convention (positive errno, or -1 / NULL with errno).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/report.h"
#include "core/rvt_api.h"
#include "transport/net.h"
#include "verbs/open_at.h"
#include "verbs/ops.h"
#include "wire/ip.h"

/* The header maps these names to inline wrappers; we define the real ones. */
#undef ibv_get_device_list
#undef ibv_query_port

/* ------------------------------------------------------------------ */
/* Device list                                                        */
/* ------------------------------------------------------------------ */

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list = calloc(2, sizeof(*list));

	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = urvt_ibdev();
	if (num_devices)
		*num_devices = 1;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

/*
 * The node GUID is derived from the device address, which the core picks
 * when the device is created, so answering needs the device: take and drop
 * an open reference (cheap when a context is already open, otherwise the
 * device is brought up and down once). 0 with errno if it cannot be made.
 */
__be64 ibv_get_device_guid(struct ibv_device *device)
{
	if (device != urvt_ibdev()) {
		errno = ENODEV;
		return 0;
	}
	/* Known without opening the device: no socket, no thread. */
	return urvt_node_guid();
}

/* rdma-core's kernel device index; urvt0 is the only (and first) device. */
int ibv_get_device_index(struct ibv_device *device)
{
	return device == urvt_ibdev() ? 0 : -1;
}

/* ------------------------------------------------------------------ */
/* Contexts                                                           */
/* ------------------------------------------------------------------ */

static void init_ops(struct urvt_context *uctx)
{
	struct verbs_context *vctx = &uctx->vctx;
	struct ibv_context_ops *ops = &vctx->context.ops;

	/* struct ibv_context_ops: what the header's inline fast paths call. */
	ops->poll_cq = urvt_poll_cq;
	ops->req_notify_cq = urvt_req_notify_cq;
	ops->post_send = urvt_post_send;
	ops->post_recv = urvt_post_recv;
	ops->post_srq_recv = urvt_post_srq_recv;
	ops->alloc_mw = urvt_alloc_mw;
	ops->bind_mw = urvt_bind_mw;
	ops->dealloc_mw = urvt_dealloc_mw;
	/* The two pre-verbs_context query slots, for very old inline code. */
	ops->_compat_query_device = ibv_query_device;
	ops->_compat_query_port = ibv_query_port;

	/*
	 * struct verbs_context: only what urvt implements. Every other op
	 * stays NULL, and the header's wrappers (ibv_alloc_td,
	 * ibv_create_wq, ibv_create_flow, ibv_alloc_dm, ibv_create_counters,
	 * ibv_modify_cq, ...) then fail with EOPNOTSUPP on their own.
	 */
	vctx->query_port = urvt_vctx_query_port;
	vctx->query_device_ex = urvt_query_device_ex;
	vctx->query_rt_values = urvt_query_rt_values;
	vctx->create_cq_ex = urvt_create_cq_ex;
	vctx->create_qp_ex = urvt_create_qp_ex;
	vctx->create_srq_ex = urvt_create_srq_ex;
	vctx->advise_mr = urvt_advise_mr;
	vctx->alloc_td = urvt_alloc_td;
	vctx->dealloc_td = urvt_dealloc_td;
	vctx->alloc_parent_domain = urvt_alloc_parent_domain;
	vctx->alloc_dm = urvt_alloc_dm;
	vctx->free_dm = urvt_free_dm;
	vctx->reg_dm_mr = urvt_reg_dm_mr;
	vctx->open_xrcd = urvt_open_xrcd;
	vctx->close_xrcd = urvt_close_xrcd;
	vctx->get_srq_num = urvt_get_srq_num;
	vctx->open_qp = urvt_open_qp;
}

/*
 * Every open context, for ibv_import_device. A context's cmd_fd is a memfd
 * of its own (no commands go through it: urvt has no kernel channel), so
 * that the fd, or a dup of it, names the context as a uverbs fd does.
 */
static pthread_mutex_t ctx_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct urvt_context *ctx_list;
static uint64_t last_share_id;

static int ctx_cmd_fd(struct urvt_context *uctx, int fd)
{
	struct stat st;

	if (fd < 0)
		fd = memfd_create("urvt-context", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	uctx->cmd_ino = (uint64_t)st.st_ino;
	uctx->vctx.context.cmd_fd = fd;
	return 0;
}

static void ctx_publish(struct urvt_context *uctx, uint64_t share_id)
{
	pthread_mutex_lock(&ctx_list_lock);
	uctx->share_id = share_id ? share_id : ++last_share_id;
	uctx->next_ctx = ctx_list;
	ctx_list = uctx;
	pthread_mutex_unlock(&ctx_list_lock);
}

static void ctx_unpublish(struct urvt_context *uctx)
{
	struct urvt_context **pp;

	pthread_mutex_lock(&ctx_list_lock);
	for (pp = &ctx_list; *pp && *pp != uctx; pp = &(*pp)->next_ctx)
		;
	if (*pp)
		*pp = uctx->next_ctx;
	pthread_mutex_unlock(&ctx_list_lock);
}

/* The share group of the open context whose cmd_fd is the file fd names; 0 if none. */
static uint64_t ctx_share_of_fd(int fd)
{
	struct urvt_context *c;
	struct stat st;
	uint64_t id = 0;

	if (fstat(fd, &st))
		return 0;
	pthread_mutex_lock(&ctx_list_lock);
	for (c = ctx_list; c; c = c->next_ctx) {
		if (c->cmd_ino == (uint64_t)st.st_ino) {
			id = c->share_id;
			break;
		}
	}
	pthread_mutex_unlock(&ctx_list_lock);
	return id;
}

/* ibv_open_device; want: the GID (address) the device must have (NULL: any);
 * import_fd >= 0: the cmd_fd to adopt (ibv_import_device), share_id its group. */
static struct ibv_context *open_context(struct ibv_device *device, const union ibv_gid *want,
					int import_fd, uint64_t share_id)
{
	char addr[INET6_ADDRSTRLEN] = "";
	struct urvt_context *uctx;
	struct ibv_context *ctx;
	struct rvt_dev_info *rdi;
	unsigned long reports;
	int ret = 0;

	if (device != urvt_ibdev()) {
		errno = ENODEV;
		return NULL;
	}
	if (want) {
		bool v4 = urvt_gid_is_v4(want->raw);

		inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? &want->raw[12] : want->raw, addr, sizeof(addr));
	}
	uctx = calloc(1, sizeof(*uctx));
	if (!uctx) {
		errno = ENOMEM;
		return NULL;
	}
	/* The composition root (docs/architecture.md): the core device, with
	 * the RoCEv2/UDP transport attached to it, bound to want if it is
	 * made now. */
	reports = urvt_report_count();
	urvt_transport_want(want ? addr : NULL);
	rdi = rvt_dev_get(urvt_transport_attach, &ret);
	urvt_transport_want(NULL);
	if (!rdi) {
		/* every failure to start says what happened, once (base/report.h) */
		if (urvt_report_count() == reports)
			urvt_report("cannot open urvt0: %s", strerror(-ret));
		goto err_free;
	}
	/* it existed already, or URVT_ADDR / URVT_NETDEV chose: that address? */
	if (want && memcmp(rdi->gid.raw, want->raw, sizeof(rdi->gid.raw))) {
		ret = -EADDRNOTAVAIL;
		goto err_put_dev;
	}
	ret = urvt_context_init(uctx, rdi);	/* sets rdi, async_fd */
	if (ret)
		goto err_put_dev;
	ret = ctx_cmd_fd(uctx, import_fd);
	if (ret)
		goto err_fini;

	ctx = &uctx->vctx.context;
	/*
	 * The extended-context handshake of verbs.h: abi_compat marks the
	 * ibv_context as embedded at the end of a verbs_context, and sz says
	 * how much of that struct (counted back from the ibv_context) exists.
	 * The whole struct of the header we compile against is there.
	 */
	uctx->vctx.sz = sizeof(struct verbs_context);
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->device = device;
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	init_ops(uctx);
	ctx_publish(uctx, share_id);
	return ctx;

err_fini:
	urvt_context_fini(uctx);
err_put_dev:
	rvt_dev_put(rdi);
err_free:
	free(uctx);
	errno = -ret;
	return NULL;
}

static struct ibv_context *open_device(struct ibv_device *device, const union ibv_gid *want)
{
	return open_context(device, want, -1, 0);
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	return open_device(device, NULL);
}

/*
 * ibv_import_device: cmd_fd is the cmd_fd of an open context of this
 * process, or a dup of it. The new context takes the fd over (closing the
 * context closes it) and shares that context's objects: ibv_import_pd and
 * ibv_import_mr find them by handle. A uverbs fd of another process (urvt
 * has none to share) or any other fd: EOPNOTSUPP, as a provider without
 * import answers.
 */
struct ibv_context *ibv_import_device(int cmd_fd)
{
	uint64_t share = cmd_fd >= 0 ? ctx_share_of_fd(cmd_fd) : 0;

	if (!share) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return open_context(urvt_ibdev(), NULL, cmd_fd, share);
}

/* verbs_open_device with struct urvt_open_attr (verbs/open_at.h). */
struct ibv_context *urvt_open_device_at(struct ibv_device *device, void *private_data)
{
	const struct urvt_open_attr *a = private_data;
	union ibv_gid want;

	if (!a || a->magic != URVT_OPEN_ATTR_MAGIC) {
		errno = EOPNOTSUPP; /* a provider's attributes: not an urvt device */
		return NULL;
	}
	memset(&want, 0, sizeof(want));
	switch (a->addr.ss_family) {
	case AF_UNSPEC:
		return open_device(device, NULL);
	case AF_INET:
		want.raw[10] = want.raw[11] = 0xff;
		memcpy(&want.raw[12], &((const struct sockaddr_in *)&a->addr)->sin_addr, 4);
		break;
	case AF_INET6:
		memcpy(want.raw, &((const struct sockaddr_in6 *)&a->addr)->sin6_addr, 16);
		break;
	default:
		errno = EAFNOSUPPORT;
		return NULL;
	}
	return open_device(device, &want);
}

int ibv_close_device(struct ibv_context *context)
{
	struct urvt_context *uctx = to_uctx(context);
	struct rvt_dev_info *rdi = uctx->rdi;

	/* Objects of the context point at it and at the device, whose last
	 * close stops the progress thread and frees its tables: closing under
	 * them freed what a QP's next event or packet used. The kernel's close
	 * destroys them and succeeds, and applications (perftest) close with
	 * some left: succeed, and leave the context and the device to them
	 * until the process exits (docs/deviations.md). */
	if (atomic_load(&uctx->live_objs))
		return 0;
	ctx_unpublish(uctx);
	close(context->cmd_fd);
	urvt_context_fini(uctx);
	pthread_mutex_destroy(&context->mutex);
	free(uctx);
	rvt_dev_put(rdi);
	return 0;
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	int ret = urvt_get_async_event(to_uctx(context), event);

	if (ret) {
		errno = -ret;
		return -1;
	}
	return 0;
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	urvt_ack_async_event(event);
}

/* ------------------------------------------------------------------ */
/* Device and port attributes                                         */
/* ------------------------------------------------------------------ */

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr)
{
	*device_attr = to_uctx(context)->rdi->dattr;
	return 0;
}

/*
 * The device clock completion timestamps and ibv_query_rt_values_ex read:
 * CLOCK_MONOTONIC in nanoseconds, so hca_core_clock (kHz) is 1 GHz and the
 * counter never wraps in practice (all 64 bits valid).
 */
#define URVT_HCA_CORE_CLOCK_KHZ 1000000ull

/*
 * Reports what urvt has and nothing more: on-demand paging, completion
 * timestamps and device memory, but no TSO, RSS, WQs, packet pacing, tag
 * matching or CQ moderation. The capability bits of orig_attr are repeated
 * in the low half of device_cap_flags_ex, as the kernel does.
 */
int urvt_query_device_ex(struct ibv_context *context,
			 const struct ibv_query_device_ex_input *input,
			 struct ibv_device_attr_ex *attr, size_t attr_size)
{
	const struct ibv_device_attr *dattr = &to_uctx(context)->rdi->dattr;
	struct ibv_device_attr_ex ex;

	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(attr->orig_attr))
		return EINVAL;

	memset(&ex, 0, sizeof(ex));
	ex.orig_attr = *dattr;
	ex.device_cap_flags_ex = dattr->device_cap_flags;
	ex.completion_timestamp_mask = UINT64_MAX;
	ex.hca_core_clock = URVT_HCA_CORE_CLOCK_KHZ;
	ex.phys_port_cnt_ex = dattr->phys_port_cnt;
	/* On-demand paging (core/odp.h), implicit too, for every operation
	 * of the QP types urvt has (UD: SEND and receives only). */
	ex.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
	ex.odp_caps.per_transport_caps.rc_odp_caps =
		IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
		IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	ex.odp_caps.per_transport_caps.uc_odp_caps =
		IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
		IBV_ODP_SUPPORT_SRQ_RECV;
	ex.odp_caps.per_transport_caps.ud_odp_caps =
		IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
	/* XRC runs the RC engines and their key checks (qp-semantics §16) */
	ex.xrc_odp_caps = ex.odp_caps.per_transport_caps.rc_odp_caps;
	ex.max_dm_size = URVT_MAX_DM_SIZE;

	/* A caller built against a newer header gets zeros for what we lack. */
	memset(attr, 0, attr_size);
	memcpy(attr, &ex, attr_size < sizeof(ex) ? attr_size : sizeof(ex));
	return 0;
}

/*
 * verbs_context->query_rt_values: the device clock now (IBV_VALUES_MASK_RAW_CLOCK),
 * in the units of completion timestamps: the count of hca_core_clock ticks in
 * raw_clock.tv_nsec (tv_sec 0), as mlx5 reports its cycle counter. comp_mask
 * says what was filled.
 */
int urvt_query_rt_values(struct ibv_context *context, struct ibv_values_ex *values)
{
	struct timespec t;

	(void)context;
	if (values->comp_mask & ~(uint32_t)IBV_VALUES_MASK_RAW_CLOCK)
		return EINVAL;
	if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		values->raw_clock.tv_sec = 0;
		values->raw_clock.tv_nsec = (long)((uint64_t)t.tv_sec * 1000000000ull +
						   (uint64_t)t.tv_nsec);
	}
	return 0;
}

/*
 * verbs_context->query_port: the inline ibv_query_port passes the size of
 * the ibv_port_attr it was compiled with. Smaller (older) callers get that
 * prefix; a size larger than the struct we know is refused, as we could not
 * vouch for the fields behind it.
 */
int urvt_vctx_query_port(struct ibv_context *context, uint8_t port_num,
			 struct ibv_port_attr *port_attr, size_t port_attr_len)
{
	struct ibv_port_attr attr;
	int ret;

	if (port_attr_len > sizeof(attr))
		return EINVAL;
	ret = rvt_query_port(to_uctx(context)->rdi, port_num, &attr);
	if (ret)
		return -ret;
	memcpy(port_attr, &attr, port_attr_len);
	return 0;
}

/*
 * The exported ibv_query_port@IBVERBS_1.1 predates port_cap_flags2: its
 * struct ends at 'flags'. Only that prefix may be written.
 */
struct _compat_ibv_port_attr {
	enum ibv_port_state state;
	enum ibv_mtu max_mtu;
	enum ibv_mtu active_mtu;
	int gid_tbl_len;
	uint32_t port_cap_flags;
	uint32_t max_msg_sz;
	uint32_t bad_pkey_cntr;
	uint32_t qkey_viol_cntr;
	uint16_t pkey_tbl_len;
	uint16_t lid;
	uint16_t sm_lid;
	uint8_t lmc;
	uint8_t max_vl_num;
	uint8_t sm_sl;
	uint8_t subnet_timeout;
	uint8_t init_type_reply;
	uint8_t active_width;
	uint8_t active_speed;
	uint8_t phys_state;
	uint8_t link_layer;
	uint8_t flags;
};
_Static_assert(offsetof(struct _compat_ibv_port_attr, flags) ==
	       offsetof(struct ibv_port_attr, flags), "old port_attr is a prefix");
_Static_assert(sizeof(struct _compat_ibv_port_attr) <= sizeof(struct ibv_port_attr),
	       "old port_attr is a prefix");

int ibv_query_port(struct ibv_context *context, uint8_t port_num,
		   struct _compat_ibv_port_attr *port_attr)
{
	return urvt_vctx_query_port(context, port_num, (struct ibv_port_attr *)port_attr,
				    sizeof(*port_attr));
}

/* ------------------------------------------------------------------ */
/* GID and P_Key tables                                               */
/* ------------------------------------------------------------------ */

/* ibv_query_gid and ibv_query_pkey: 0, or -1 with errno (their man pages). */
int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
		  union ibv_gid *gid)
{
	int ret = rvt_query_gid(to_uctx(context)->rdi, port_num, index, gid);

	if (ret) {
		errno = -ret;
		return -1;
	}
	return 0;
}

static bool gid_is_zero(const union ibv_gid *gid)
{
	static const union ibv_gid zero;

	return !memcmp(gid, &zero, sizeof(*gid));
}

/* One table entry; positive errno, ENODATA for an unused slot. */
static int gid_entry(struct rvt_dev_info *rdi, uint32_t port_num, uint32_t index,
		     struct ibv_gid_entry *entry)
{
	int ret;

	if (port_num > UINT8_MAX || index > INT32_MAX)
		return EINVAL;
	memset(entry, 0, sizeof(*entry));
	ret = rvt_query_gid(rdi, (uint8_t)port_num, (int)index, &entry->gid);
	if (ret)
		return -ret;
	if (gid_is_zero(&entry->gid))
		return ENODATA;
	entry->gid_index = index;
	entry->port_num = port_num;
	/* urvt speaks RoCEv2 only: every GID is a UDP/IP address. */
	entry->gid_type = IBV_GID_TYPE_ROCE_V2;
	entry->ndev_ifindex = rdi->ifindex;
	return 0;
}

/* Copy an entry into a caller's slot of entry_size bytes (any header age). */
static void put_entry(void *dst, size_t entry_size, const struct ibv_gid_entry *entry)
{
	memset(dst, 0, entry_size);
	memcpy(dst, entry, entry_size < sizeof(*entry) ? entry_size : sizeof(*entry));
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry e;
	int ret;

	if (flags || !entry_size)
		return EINVAL;
	ret = gid_entry(to_uctx(context)->rdi, port_num, gid_index, &e);
	if (ret)
		return ret;
	put_entry(entry, entry_size, &e);
	return 0;
}

/* All valid entries of all ports; the count, or a negative errno. */
ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	struct rvt_dev_info *rdi = to_uctx(context)->rdi;
	uint8_t *out = (uint8_t *)entries;
	size_t n = 0;

	if (flags || !entry_size)
		return -EINVAL;
	for (uint8_t port = 1; port <= rdi->dattr.phys_port_cnt; port++) {
		struct ibv_port_attr pattr;
		int ret = rvt_query_port(rdi, port, &pattr);

		if (ret)
			return ret;
		for (int i = 0; i < pattr.gid_tbl_len; i++) {
			struct ibv_gid_entry e;

			ret = gid_entry(rdi, port, (uint32_t)i, &e);
			if (ret == ENODATA)
				continue;
			if (ret)
				return -ret;
			/* The kernel refuses a buffer too small for the table. */
			if (n == max_entries)
				return -EINVAL;
			put_entry(out + n * entry_size, entry_size, &e);
			n++;
		}
	}
	return (ssize_t)n;
}

int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
		   __be16 *pkey)
{
	int ret = rvt_query_pkey(to_uctx(context)->rdi, port_num, index, pkey);

	if (ret) {
		errno = -ret;
		return -1;
	}
	return 0;
}

/* The index of a P_Key in the port's table, or -1 with errno. */
int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	struct rvt_dev_info *rdi = to_uctx(context)->rdi;
	struct ibv_port_attr pattr;
	int ret = rvt_query_port(rdi, port_num, &pattr);

	if (ret) {
		errno = -ret;
		return -1;
	}
	for (int i = 0; i < pattr.pkey_tbl_len; i++) {
		__be16 p;

		if (!rvt_query_pkey(rdi, port_num, i, &p) && p == pkey)
			return i;
	}
	errno = ENOENT;
	return -1;
}
