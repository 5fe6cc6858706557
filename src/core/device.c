/*
 * The device "urvt0": one per process, created by the first
 * ibv_open_device and torn down by the last ibv_close_device. It owns the
 * QPN and key tables and the progress thread; the transport, attached by
 * the composition root (src/verbs/device.c), owns the link and tells the
 * core the GID and interface it got (docs/architecture.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/progress.h"
#include "base/report.h"
#include "core/rvt_api.h"
#include "core/qp_table.h"
#include "core/transport.h"

static pthread_mutex_t g_dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rvt_dev_info *g_rdi;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

static struct ibv_device g_ibdev = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "urvt0",
	.dev_name = "uverbs-urvt0",
	.dev_path = "",
	.ibdev_path = "",
};

struct ibv_device *urvt_ibdev(void)
{
	return &g_ibdev;
}

/*
 * One GUID per process, stable from the first call on and known before the
 * device is opened (librdmacm asks for it at start-up). Its first byte
 * carries the locally administered bit, as a software-made EUI-64 should;
 * the rest mixes the host id and the pid.
 */
static __be64 g_guid;
static pthread_once_t g_guid_once = PTHREAD_ONCE_INIT;

static void init_guid(void)
{
	uint64_t v = ((uint64_t)(uint32_t)gethostid() << 24) ^ (uint64_t)getpid();
	uint8_t b[8];

	v *= 0x9e3779b97f4a7c15ull; /* spread the bits */
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (56 - 8 * i));
	b[0] = (uint8_t)((b[0] & ~0x01) | 0x02); /* unicast, locally administered */
	memcpy(&g_guid, b, 8);
}

__be64 urvt_node_guid(void)
{
	pthread_once(&g_guid_once, init_guid);
	return g_guid;
}

/*
 * The port's active MTU. By default, as rxe: the interface's MTU less the
 * RoCEv2 headers (RXE_MAX_HDR_LENGTH, 80 bytes) rounded down to an IB MTU:
 * lo (65536) -> 4096, Ethernet 1500 -> 1024, 9000 -> 4096; 1024 if the
 * interface is unknown. URVT_MTU (256..4096 bytes, or the enum 1..5)
 * overrides it; any other value fails the device open (-EINVAL), as every
 * bad variable does: a typo must not run a test at an MTU nobody asked for.
 */
static enum ibv_mtu mtu_from_if(int if_mtu)
{
	int m = if_mtu - 80;

	if (if_mtu <= 0)
		return IBV_MTU_1024;
	return m >= 4096 ? IBV_MTU_4096 : m >= 2048 ? IBV_MTU_2048 :
	       m >= 1024 ? IBV_MTU_1024 : m >= 512 ? IBV_MTU_512 : IBV_MTU_256;
}

static int active_mtu(int if_mtu, enum ibv_mtu *out)
{
	enum ibv_mtu def = mtu_from_if(if_mtu);
	const char *s = getenv("URVT_MTU");
	char *end;
	long v;

	*out = def;
	if (!s || !*s)
		return 0;
	v = strtol(s, &end, 10);
	switch (*end ? 0 : v) {
	case 1: case 256: *out = IBV_MTU_256; return 0;
	case 2: case 512: *out = IBV_MTU_512; return 0;
	case 3: case 1024: *out = IBV_MTU_1024; return 0;
	case 4: case 2048: *out = IBV_MTU_2048; return 0;
	case 5: case 4096: *out = IBV_MTU_4096; return 0;
	default:
		urvt_report("URVT_MTU=%s is not an MTU: use 256, 512, 1024, 2048 or 4096, or "
			    "unset it for the interface's (%u here)", s, 128u << def);
		return -EINVAL;
	}
}

static void init_attrs(struct rvt_dev_info *rdi)
{
	struct ibv_device_attr *a = &rdi->dattr;
	struct ibv_port_attr *p = &rdi->port_attr;
	rdi->node_guid = urvt_node_guid();

	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "urvt-0.1.0");
	a->node_guid = rdi->node_guid;
	a->sys_image_guid = rdi->node_guid;
	a->max_mr_size = URVT_MAX_MR_SIZE;
	a->page_size_cap = 0xfffff000u;
	a->vendor_id = URVT_VENDOR_ID;
	a->vendor_part_id = 0;
	a->hw_ver = 0;
	a->max_qp = URVT_MAX_QP;
	a->max_qp_wr = URVT_MAX_QP_WR;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE |
			      IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_PORT_ACTIVE_EVENT |
			      IBV_DEVICE_UD_AV_PORT_ENFORCE | IBV_DEVICE_N_NOTIFY_CQ |
			      IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
	a->device_cap_flags |= IBV_DEVICE_XRC; /* qp-semantics §16 */
	a->max_sge = URVT_MAX_SGE;
	a->max_sge_rd = URVT_MAX_SGE;
	a->max_cq = URVT_MAX_CQ;
	a->max_cqe = URVT_MAX_CQE;
	a->max_mr = URVT_MAX_MR - 1; /* lkey slot 0 is never used: key 0 stays invalid */
	a->max_mw = URVT_MAX_MR - 1; /* windows share the key table (core/mw.c) */
	a->max_pd = URVT_MAX_PD;
	a->max_qp_rd_atom = URVT_MAX_RD_ATOMIC;
	a->max_qp_init_rd_atom = URVT_MAX_RD_ATOMIC;
	a->max_res_rd_atom = URVT_MAX_RD_ATOMIC * 1024;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_ah = URVT_MAX_AH;
	a->max_srq = URVT_MAX_SRQ;
	a->max_mcast_grp = URVT_MAX_MCAST_GRP;
	a->max_mcast_qp_attach = URVT_MAX_MCAST_QP_ATTACH;
	a->max_total_mcast_qp_attach = URVT_MAX_MCAST_GRP * URVT_MAX_MCAST_QP_ATTACH;
	a->max_srq_wr = URVT_MAX_SRQ_WR;
	a->max_srq_sge = URVT_MAX_SRQ_SGE;
	a->max_pkeys = URVT_PKEY_TABLE_LEN;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = URVT_PORT_COUNT;

	memset(p, 0, sizeof(*p));
	p->state = IBV_PORT_ACTIVE;
	p->max_mtu = IBV_MTU_4096;
	p->active_mtu = mtu_from_if(0); /* until a transport reports its link */
	p->gid_tbl_len = 1;
	p->port_cap_flags = IBV_PORT_CM_SUP;
	p->max_msg_sz = URVT_MAX_MSG_SZ;
	p->pkey_tbl_len = URVT_PKEY_TABLE_LEN;
	p->max_vl_num = 1;
	/* 4X HDR, 200 Gb/s: what urvt moves between two processes of a host
	 * (docs/performance.md "MPI on one host": UCX sizes its rendezvous
	 * threshold by it; 4X EDR kept 64 KiB messages in eager copies) */
	p->active_width = 2;  /* 4X */
	p->active_speed = 64; /* HDR */
	p->phys_state = 5;    /* LinkUp */
	p->link_layer = IBV_LINK_LAYER_ETHERNET;
}

int rvt_dev_set_port(struct rvt_dev_info *rdi, const union ibv_gid *gid, unsigned int ifindex,
		     const char *ifname, int if_mtu)
{
	rdi->gid = *gid;
	rdi->ifindex = ifindex;
	snprintf(rdi->ifname, sizeof(rdi->ifname), "%s", ifname ? ifname : "");
	return active_mtu(if_mtu, &rdi->port_attr.active_mtu);
}

void rvt_dev_set_qpn_range(struct rvt_dev_info *rdi, uint8_t range)
{
	rvt_qpn_table_set_range(&rdi->qpn_table, range);
	if (rdi->dattr.max_qp > 0xfffe)
		rdi->dattr.max_qp = 0xfffe;
}

static struct rvt_dev_info *dev_create(urvt_transport_attach_fn attach, int *err)
{
	struct rvt_dev_info *rdi = calloc(1, sizeof(*rdi));
	int ret;

	if (!rdi) {
		*err = -ENOMEM;
		return NULL;
	}
	rdi->ibdev = g_ibdev;
	pthread_mutex_init(&rdi->lock, NULL);
	rvt_mcast_init(rdi);
	rvt_xsrq_table_init(&rdi->xsrq_table);
	init_attrs(rdi);

	ret = rvt_qpn_table_init(&rdi->qpn_table);
	if (ret)
		goto err_free;
	ret = rvt_qp_table_init(&rdi->qp_table);
	if (ret)
		goto err_qpn;
	ret = rvt_lkey_table_init(&rdi->lkey_table, URVT_MAX_MR);
	if (ret)
		goto err_qpt;
	rdi->progress = urvt_progress_create(&ret);
	if (!rdi->progress)
		goto err_lkey;
	/* the transport needs the progress thread (fd, timers) */
	ret = attach ? attach(rdi) : 0;
	if (ret)
		goto err_progress;
	return rdi;

err_progress:
	urvt_progress_destroy(rdi->progress);
err_lkey:
	rvt_lkey_table_fini(&rdi->lkey_table);
err_qpt:
	rvt_qp_table_fini(&rdi->qp_table);
err_qpn:
	rvt_qpn_table_fini(&rdi->qpn_table);
err_free:
	rvt_mcast_fini(rdi);
	rvt_xsrq_table_fini(&rdi->xsrq_table);
	pthread_mutex_destroy(&rdi->lock);
	free(rdi);
	*err = ret;
	return NULL;
}

static void dev_destroy(struct rvt_dev_info *rdi)
{
	if (rdi->transport)
		rdi->transport->detach(rdi);
	urvt_progress_destroy(rdi->progress);
	rvt_lkey_table_fini(&rdi->lkey_table);
	rvt_qp_table_fini(&rdi->qp_table);
	rvt_qpn_table_fini(&rdi->qpn_table);
	rvt_mcast_fini(rdi);
	rvt_xsrq_table_fini(&rdi->xsrq_table);
	pthread_mutex_destroy(&rdi->lock);
	free(rdi);
}

/*
 * fork(): the child gets a copy of the device but none of its threads (the
 * progress thread that runs timers, the network and deferred work), so the
 * copy can never make progress there. The child forgets it: its contexts and
 * objects stay as inert memory, and its next ibv_open_device makes a device
 * of its own, with its own address, as a process started afresh would. On
 * rdma-core the child likewise opens a new context (the parent's is unusable
 * there without ibv_fork_init). The lock is held across fork, so the child
 * never inherits it taken by a thread that no longer exists.
 */
static void fork_prepare(void)
{
	pthread_mutex_lock(&g_dev_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&g_dev_lock);
}

static void fork_child(void)
{
	if (g_rdi)
		g_rdi->orphaned = true;
	g_rdi = NULL;
	pthread_mutex_unlock(&g_dev_lock);
}

static void fork_init(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

struct rvt_dev_info *rvt_dev_get(urvt_transport_attach_fn attach, int *err)
{
	struct rvt_dev_info *rdi;

	pthread_once(&g_fork_once, fork_init);
	pthread_mutex_lock(&g_dev_lock);
	if (!g_rdi)
		g_rdi = dev_create(attach, err);
	rdi = g_rdi;
	if (rdi)
		rdi->open_count++;
	pthread_mutex_unlock(&g_dev_lock);
	return rdi;
}

void rvt_dev_put(struct rvt_dev_info *rdi)
{
	pthread_mutex_lock(&g_dev_lock);
	/* A device inherited across fork has no threads to stop: it is left
	 * as it is (fork_child). */
	if (--rdi->open_count == 0 && !rdi->orphaned) {
		dev_destroy(rdi);
		g_rdi = NULL;
	}
	pthread_mutex_unlock(&g_dev_lock);
}

int rvt_query_port(struct rvt_dev_info *rdi, uint8_t port, struct ibv_port_attr *attr)
{
	if (port < 1 || port > URVT_PORT_COUNT)
		return -EINVAL;
	*attr = rdi->port_attr;
	return 0;
}

int rvt_query_gid(struct rvt_dev_info *rdi, uint8_t port, int index, union ibv_gid *gid)
{
	if (port < 1 || port > URVT_PORT_COUNT || index != 0)
		return -EINVAL;
	*gid = rdi->gid;
	return 0;
}

int rvt_query_pkey(struct rvt_dev_info *rdi, uint8_t port, int index, __be16 *pkey)
{
	if (port < 1 || port > URVT_PORT_COUNT || index < 0 || index >= URVT_PKEY_TABLE_LEN)
		return -EINVAL;
	*pkey = htobe16(URVT_DEFAULT_PKEY);
	return 0;
}
