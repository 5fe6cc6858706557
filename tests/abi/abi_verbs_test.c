/*
 * The drop-in from an application's side. Built like any verbs program:
 * against the system <infiniband/verbs.h>, linked with the system
 * -libverbs, and run through urvt-run so the loader substitutes urvt's
 * libibverbs.so.1. Exit 0 pass, 1 fail, 77 skip.
 *
 *   abi_verbs_test            everything below, expecting the default MTU
 *   abi_verbs_test mtu N      only: port 1 active_mtu is N bytes
 *   abi_verbs_test mtu default  the same with N the default MTU
 *   abi_verbs_test mtu refused  URVT_MTU is not an MTU: the device does not
 *                             open (EINVAL) and says why on stderr
 *
 * The default MTU (docs/usage.md) comes from the interface: its MTU less
 * 80 bytes of RoCEv2 headers, rounded down to an IB MTU (lo: 4096).
 *
 * If URVT_ADDR is an IPv4 address, GID 0 must be ::ffff:URVT_ADDR and its
 * interface lo for 127/8.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <net/if.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

static int failures;

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			failures++;                                            \
		}                                                              \
	} while (0)

#define CHECK_EQ(a, b)                                                         \
	do {                                                                   \
		long long a_ = (long long)(a), b_ = (long long)(b);            \
		if (a_ != b_) {                                                \
			fprintf(stderr, "%s:%d: CHECK failed: %s == %s "       \
				"(%lld != %lld)\n", __FILE__, __LINE__, #a,    \
				#b, a_, b_);                                   \
			failures++;                                            \
		}                                                              \
	} while (0)

/* A constructor that must fail with NULL and errno EOPNOTSUPP. */
#define CHECK_NULL_EOPNOTSUPP(expr)                                            \
	do {                                                                   \
		errno = 0;                                                     \
		void *p_ = (void *)(expr);                                     \
		CHECK(p_ == NULL);                                             \
		CHECK_EQ(errno, EOPNOTSUPP);                                   \
	} while (0)

/* A constructor that must fail with NULL and errno e. */
#define CHECK_NULL_ERRNO(expr, e)                                              \
	do {                                                                   \
		errno = 0;                                                     \
		void *p_ = (void *)(expr);                                     \
		CHECK(p_ == NULL);                                             \
		CHECK_EQ(errno, e);                                            \
	} while (0)

/* Exported functions no installed header declares (rdma-core private). */
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

static void *libibverbs;	/* the copy the loader picked, by soname */

static void *sym(const char *name, const char *version)
{
	void *p = dlvsym(libibverbs, name, version);

	if (!p)
		fprintf(stderr, "missing %s@%s: %s\n", name, version, dlerror());
	return p;
}

static unsigned int mtu_bytes(enum ibv_mtu mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 0;
}

/* ------------------------------------------------------------------ */

static void test_loaded_copy(void)
{
	Dl_info info;

	CHECK(dladdr((void *)ibv_get_device_list, &info) != 0);
	if (info.dli_fname)
		printf("libibverbs.so.1 is %s\n", info.dli_fname);
	/* Run without urvt-run this is rdma-core's copy: fail loudly. */
	CHECK(info.dli_fname && strstr(info.dli_fname, "/lib/urvt/"));
}

static struct ibv_device *test_device_list(void)
{
	struct ibv_device **list;
	struct ibv_device *dev;
	int n = -1;

	list = ibv_get_device_list(&n);
	CHECK(list != NULL);
	if (!list)
		return NULL;
	CHECK_EQ(n, 1);
	CHECK(list[0] != NULL);
	CHECK(list[1] == NULL);
	dev = list[0];
	CHECK(!strcmp(ibv_get_device_name(dev), "urvt0"));
	CHECK_EQ(dev->node_type, IBV_NODE_CA);
	CHECK_EQ(dev->transport_type, IBV_TRANSPORT_IB);
	CHECK_EQ(ibv_get_device_index(dev), 0);
	ibv_free_device_list(list);

	list = ibv_get_device_list(NULL);	/* num is optional */
	CHECK(list && list[0] == dev);
	ibv_free_device_list(list);
	return dev;
}

static void test_query_device(struct ibv_context *ctx, struct ibv_device *dev)
{
	struct ibv_device_attr a;
	struct ibv_device_attr_ex ex;
	struct verbs_context *vctx = verbs_get_ctx(ctx);
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	unsigned char buf[sizeof(ex) + 16];

	memset(&a, 0, sizeof(a));
	CHECK_EQ(ibv_query_device(ctx, &a), 0);
	CHECK(a.max_qp > 0 && a.max_qp_wr > 0 && a.max_sge > 0);
	CHECK(a.max_sge_rd > 0 && a.max_sge_rd <= a.max_sge);
	CHECK(a.max_cq > 0 && a.max_cqe >= a.max_qp_wr);
	CHECK(a.max_mr > 0 && a.max_mr_size > 0 && a.max_pd > 0);
	CHECK(a.max_qp_rd_atom > 0 && a.max_qp_init_rd_atom > 0);
	CHECK(a.max_res_rd_atom >= a.max_qp_rd_atom);
	CHECK(a.max_srq > 0 && a.max_srq_wr > 0 && a.max_srq_sge > 0);
	CHECK(a.max_ah > 0 && a.max_pkeys >= 1);
	CHECK_EQ(a.phys_port_cnt, 1);
	CHECK(a.node_guid != 0);
	/* The GUID of the list entry and of the open device agree. */
	CHECK_EQ(ibv_get_device_guid(dev), a.node_guid);

	/* Extended query through the header's inline wrapper. */
	memset(&ex, 0xa5, sizeof(ex));
	CHECK_EQ(ibv_query_device_ex(ctx, NULL, &ex), 0);
	CHECK(!memcmp(&ex.orig_attr, &a, sizeof(a)));
	CHECK_EQ(ex.odp_caps.general_caps, IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT);
	CHECK(ex.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_ATOMIC);
	CHECK(ex.completion_timestamp_mask == UINT64_MAX);
	CHECK_EQ(ex.hca_core_clock, 1000000); /* kHz: ns ticks */
	CHECK_EQ(ex.tso_caps.max_tso, 0);
	CHECK_EQ(ex.rss_caps.max_rwq_indirection_tables, 0);
	CHECK_EQ(ex.max_dm_size, 256 << 10);
	CHECK_EQ(ex.tm_caps.max_num_tags, 0);
	CHECK_EQ(ex.device_cap_flags_ex & 0xffffffffu, a.device_cap_flags);
	CHECK_EQ(ex.phys_port_cnt_ex, 1);

	/* urvt's op itself: comp_mask and sizes. */
	CHECK(vctx && vctx->query_device_ex);
	if (!vctx || !vctx->query_device_ex)
		return;
	CHECK_EQ(vctx->query_device_ex(ctx, &in, &ex, sizeof(ex)), EINVAL);
	CHECK_EQ(vctx->query_device_ex(ctx, NULL, &ex, sizeof(ex.orig_attr) - 1), EINVAL);
	memset(buf, 0xa5, sizeof(buf));
	CHECK_EQ(vctx->query_device_ex(ctx, NULL, (void *)buf, sizeof(ex.orig_attr)), 0);
	CHECK(!memcmp(buf, &a, sizeof(a)));
	CHECK_EQ(buf[sizeof(ex.orig_attr)], 0xa5);	/* nothing past attr_size */
	/* A newer, larger struct: known part filled, the rest zeroed. */
	memset(buf, 0xa5, sizeof(buf));
	CHECK_EQ(vctx->query_device_ex(ctx, NULL, (void *)buf, sizeof(buf)), 0);
	CHECK_EQ(buf[sizeof(buf) - 1], 0);
}

static void test_query_port(struct ibv_context *ctx, unsigned int want_mtu)
{
	struct ibv_port_attr p;
	struct verbs_context *vctx = verbs_get_ctx(ctx);
	int (*compat_query_port)(struct ibv_context *, uint8_t, void *);
	unsigned char buf[sizeof(p) + 8];
	size_t old_len = offsetof(struct ibv_port_attr, port_cap_flags2);

	memset(&p, 0xa5, sizeof(p));
	CHECK_EQ(ibv_query_port(ctx, 1, &p), 0);
	CHECK_EQ(p.state, IBV_PORT_ACTIVE);
	CHECK_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
	if (want_mtu)
		CHECK_EQ(mtu_bytes(p.active_mtu), want_mtu);
	else
		CHECK(mtu_bytes(p.active_mtu) != 0);
	CHECK(p.max_mtu >= p.active_mtu);
	CHECK(p.gid_tbl_len >= 1 && p.pkey_tbl_len >= 1);
	CHECK(p.max_msg_sz > 0);
	CHECK(ibv_query_port(ctx, 2, &p) != 0);
	CHECK(ibv_query_port(ctx, 0, &p) != 0);

	/* The op honours the caller's struct size, refuses a bigger one. */
	CHECK(vctx && vctx->query_port);
	if (vctx && vctx->query_port) {
		CHECK_EQ(vctx->query_port(ctx, 1, (void *)buf, sizeof(buf)), EINVAL);
		memset(buf, 0xa5, sizeof(buf));
		CHECK_EQ(vctx->query_port(ctx, 1, (void *)buf, old_len), 0);
		CHECK_EQ(buf[old_len], 0xa5);
		CHECK(!memcmp(buf, &p, offsetof(struct ibv_port_attr, flags)));
	}

	/* ibv_query_port@IBVERBS_1.1 writes the pre-port_cap_flags2 prefix only. */
	compat_query_port = sym("ibv_query_port", "IBVERBS_1.1");
	CHECK(compat_query_port != NULL);
	if (compat_query_port) {
		memset(buf, 0xa5, sizeof(buf));
		CHECK_EQ(compat_query_port(ctx, 1, buf), 0);
		CHECK_EQ(((struct ibv_port_attr *)buf)->state, IBV_PORT_ACTIVE);
		for (size_t i = 48; i < sizeof(buf); i++)
			CHECK_EQ(buf[i], 0xa5);
	}
}

static void test_gids(struct ibv_context *ctx)
{
	const char *addr = getenv("URVT_ADDR");
	struct ibv_gid_entry e, table[4];
	enum { SYSFS_IB_ROCE_V1, SYSFS_ROCE_V2 } type = SYSFS_IB_ROCE_V1;
	int (*query_gid_type)(struct ibv_context *, uint8_t, unsigned int, void *);
	union ibv_gid gid, want;
	struct in_addr a4;
	ssize_t n;

	CHECK_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
	/* An IPv4 device address appears as the IPv4-mapped IPv6 address. */
	if (addr && inet_pton(AF_INET, addr, &a4) == 1) {
		memset(&want, 0, sizeof(want));
		want.raw[10] = 0xff;
		want.raw[11] = 0xff;
		memcpy(&want.raw[12], &a4, 4);
		CHECK(!memcmp(&gid, &want, sizeof(gid)));
	} else {
		CHECK(gid.global.interface_id != 0 || gid.global.subnet_prefix != 0);
	}
	errno = 0;
	CHECK_EQ(ibv_query_gid(ctx, 1, 1, &gid), -1);
	CHECK(errno != 0);
	CHECK_EQ(ibv_query_gid(ctx, 2, 0, &gid), -1);

	memset(&e, 0xa5, sizeof(e));
	CHECK_EQ(ibv_query_gid_ex(ctx, 1, 0, &e, 0), 0);
	CHECK(!memcmp(&e.gid, &gid, sizeof(gid)));
	CHECK_EQ(e.gid_index, 0);
	CHECK_EQ(e.port_num, 1);
	CHECK_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
	if (addr && inet_pton(AF_INET, addr, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127)
		CHECK_EQ(e.ndev_ifindex, if_nametoindex("lo"));
	else
		CHECK(e.ndev_ifindex != 0);
	CHECK(ibv_query_gid_ex(ctx, 1, 1, &e, 0) != 0);
	CHECK(ibv_query_gid_ex(ctx, 2, 0, &e, 0) != 0);
	CHECK_EQ(ibv_query_gid_ex(ctx, 1, 0, &e, 1), EINVAL);

	memset(table, 0xa5, sizeof(table));
	n = ibv_query_gid_table(ctx, table, 4, 0);
	CHECK_EQ(n, 1);
	CHECK(!memcmp(&table[0].gid, &gid, sizeof(gid)));
	CHECK_EQ(table[0].gid_type, IBV_GID_TYPE_ROCE_V2);
	CHECK_EQ(table[0].port_num, 1);
	CHECK_EQ(table[0].gid_index, 0);
	CHECK_EQ(table[1].gid_index, 0xa5a5a5a5u);	/* nothing past n */
	CHECK_EQ(ibv_query_gid_table(ctx, table, 0, 0), -EINVAL);
	CHECK(ibv_query_gid_table(ctx, table, 4, 1) < 0);

	/* The sysfs-style type query ibv_devinfo uses (IBVERBS_PRIVATE_34). */
	query_gid_type = sym("ibv_query_gid_type", "IBVERBS_PRIVATE_34");
	CHECK(query_gid_type != NULL);
	if (query_gid_type) {
		CHECK_EQ(query_gid_type(ctx, 1, 0, &type), 0);
		CHECK_EQ(type, SYSFS_ROCE_V2);
		CHECK_EQ(query_gid_type(ctx, 1, 7, &type), -1);
		CHECK_EQ(query_gid_type(ctx, 3, 0, &type), -1);
	}
}

static void test_pkeys(struct ibv_context *ctx)
{
	__be16 pkey = 0;

	CHECK_EQ(ibv_query_pkey(ctx, 1, 0, &pkey), 0);
	CHECK_EQ(be16toh(pkey), 0xffff);
	CHECK_EQ(ibv_query_pkey(ctx, 1, 1, &pkey), -1);
	CHECK_EQ(ibv_query_pkey(ctx, 2, 0, &pkey), -1);
	CHECK_EQ(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)), 0);
	CHECK_EQ(ibv_get_pkey_index(ctx, 1, htobe16(0x7fff)), -1);
}

/*
 * Every verbs_context op urvt leaves out must fail with EOPNOTSUPP. The
 * wrappers only read ->context of the object they are given before
 * deciding, so objects that cannot be created here are stand-ins carrying
 * the context.
 */
static void test_unsupported(struct ibv_context *ctx)
{
	struct ibv_td_init_attr td_attr = { 0 };
	struct ibv_parent_domain_init_attr pd_attr = { 0 };
	struct ibv_wq_init_attr wq_attr = { 0 };
	struct ibv_wq_attr wq_mod = { 0 };
	struct ibv_rwq_ind_table_init_attr ind_attr = { 0 };
	struct ibv_flow_attr flow_attr = { 0 };
	struct ibv_flow_action_esp_attr esp = { 0 };
	struct ibv_alloc_dm_attr dm_attr = { 0 };
	struct ibv_counters_init_attr cnt_attr = { 0 };
	struct ibv_counter_attach_attr cnt_attach = { 0 };
	struct ibv_modify_cq_attr cq_attr = { 0 };
	struct ibv_qp_rate_limit_attr rl = { 0 };
	struct ibv_ops_wr op = { 0 }, *bad_op = NULL;
	struct ibv_wq wq = { .context = ctx };
	struct ibv_rwq_ind_table ind = { .context = ctx };
	struct ibv_flow flow = { .context = ctx };
	struct ibv_flow_action action = { .context = ctx };
	struct ibv_counters counters = { .context = ctx };
	struct ibv_cq cq = { .context = ctx };
	struct ibv_srq srq = { .context = ctx };
	struct ibv_qp qp = { .context = ctx };
	struct ibv_pd fake_pd = { .context = ctx };
	uint64_t cval;
	struct ibv_pd *pd;

	/* thread and parent domains: tests/unit/test_verbs_ex.c; the header's
	 * wrappers reach urvt's ops */
	{
		struct ibv_td *t = ibv_alloc_td(ctx, &td_attr);

		CHECK(t != NULL);
		if (t)
			CHECK_EQ(ibv_dealloc_td(t), 0);
	}
	CHECK_NULL_ERRNO(ibv_alloc_parent_domain(ctx, &pd_attr), EINVAL); /* no pd */
	CHECK_NULL_EOPNOTSUPP(ibv_create_wq(ctx, &wq_attr));
	CHECK_EQ(ibv_modify_wq(&wq, &wq_mod), EOPNOTSUPP);
	CHECK_EQ(ibv_destroy_wq(&wq), EOPNOTSUPP);
	CHECK_NULL_EOPNOTSUPP(ibv_create_rwq_ind_table(ctx, &ind_attr));
	CHECK_EQ(ibv_destroy_rwq_ind_table(&ind), EOPNOTSUPP);
	CHECK_NULL_EOPNOTSUPP(ibv_create_flow(&qp, &flow_attr));
	CHECK_EQ(ibv_destroy_flow(&flow), EOPNOTSUPP);
	CHECK_NULL_EOPNOTSUPP(ibv_create_flow_action_esp(ctx, &esp));
	CHECK_EQ(ibv_modify_flow_action_esp(&action, &esp), EOPNOTSUPP);
	CHECK_EQ(ibv_destroy_flow_action(&action), EOPNOTSUPP);
	/* device memory: tests/unit/test_verbs_ex.c; the wrappers reach urvt */
	CHECK_NULL_ERRNO(ibv_alloc_dm(ctx, &dm_attr), EINVAL); /* length 0 */
	dm_attr.length = 64;
	{
		struct ibv_dm *d = ibv_alloc_dm(ctx, &dm_attr);

		CHECK(d != NULL);
		if (d) {
			CHECK_NULL_ERRNO(ibv_reg_dm_mr(&fake_pd, d, 0, 8, 0), EINVAL);
			CHECK_EQ(ibv_free_dm(d), 0);
		}
	}
	CHECK_NULL_EOPNOTSUPP(ibv_alloc_null_mr(&fake_pd));
	/* ibv_advise_mr is supported now: tests/unit/test_odp.c */
	CHECK_NULL_EOPNOTSUPP(ibv_create_counters(ctx, &cnt_attr));
	CHECK_EQ(ibv_destroy_counters(&counters), EOPNOTSUPP);
	CHECK_EQ(ibv_attach_counters_point_flow(&counters, &cnt_attach, &flow), EOPNOTSUPP);
	CHECK_EQ(ibv_read_counters(&counters, &cval, 1, 0), EOPNOTSUPP);
	CHECK_EQ(ibv_modify_cq(&cq, &cq_attr), EOPNOTSUPP);
	CHECK_EQ(ibv_post_srq_ops(&srq, &op, &bad_op), EOPNOTSUPP);
	CHECK(bad_op == &op);
	CHECK_EQ(ibv_modify_qp_rate_limit(&qp, &rl), EOPNOTSUPP);

	/* Import: only a context's own cmd_fd (tests/unit/test_verbs_ex.c);
	 * handle 0 is never issued. */
	CHECK_NULL_EOPNOTSUPP(ibv_import_device(-1));
	CHECK(ctx->cmd_fd >= 0);
	CHECK_NULL_ERRNO(ibv_import_pd(ctx, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_import_mr(&fake_pd, 0), EINVAL);
	/* Exported verbs urvt cannot offer. */
	CHECK_NULL_ERRNO(ibv_import_dm(ctx, 0), EINVAL);
	CHECK_NULL_EOPNOTSUPP(ibv_reg_dmabuf_mr(&fake_pd, 0, 4096, 0, -1, 0));

	/* Memory windows go through the context ops: types 1 and 2 are
	 * supported (tests/unit/test_mw.c), no other */
	pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL);
	if (pd) {
		struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);

		CHECK(mw != NULL);
		if (mw)
			CHECK_EQ(ibv_dealloc_mw(mw), 0);
		CHECK_NULL_EOPNOTSUPP(ibv_alloc_mw(pd, (enum ibv_mw_type)3));
		CHECK_EQ(ibv_dealloc_pd(pd), 0);
	}
}

/* IBVERBS_PRIVATE_34 and IBVERBS_1.0 behave as docs/abi.md says. */
static void test_private_and_compat(struct ibv_context *ctx)
{
	int (*cmd_alloc_pd)(struct ibv_context *, struct ibv_pd *, void *, size_t,
			    void *, size_t);
	int (*cmd_poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
	int (*exec_ioctl)(struct ibv_context *, void *);
	void *(*init_and_alloc)(struct ibv_device *, int, size_t, void *, uint32_t);
	struct ibv_context *(*open_device)(struct ibv_device *, void *);
	void (*register_driver)(const void *);
	void (*init_cq)(struct ibv_cq *, struct ibv_context *, struct ibv_comp_channel *,
			void *);
	unsigned int (*final_num_attrs)(unsigned int, void *);
	int (*read_ibdev_sysfs)(char *, size_t, void *, const char *, ...);
	bool *allow_disassociate;
	void **(*get_list_1_0)(int *);
	void *(*open_1_0)(void *);
	int (*query_gid_1_0)(void *, uint8_t, int, union ibv_gid *);
	void (*register_driver_1_1)(const char *, void *);
	struct ibv_pd pd = { .context = ctx };
	struct ibv_cq cq;
	char buf[16];
	int num = -1;

	cmd_alloc_pd = sym("ibv_cmd_alloc_pd", "IBVERBS_PRIVATE_34");
	CHECK(cmd_alloc_pd && cmd_alloc_pd(ctx, &pd, NULL, 0, NULL, 0) == EOPNOTSUPP);
	exec_ioctl = sym("execute_ioctl", "IBVERBS_PRIVATE_34");
	CHECK(exec_ioctl && exec_ioctl(ctx, NULL) == EOPNOTSUPP);
	cmd_poll_cq = sym("ibv_cmd_poll_cq", "IBVERBS_PRIVATE_34");
	CHECK(cmd_poll_cq && cmd_poll_cq(&cq, 1, NULL) < 0);
	init_and_alloc = sym("_verbs_init_and_alloc_context", "IBVERBS_PRIVATE_34");
	CHECK(init_and_alloc != NULL);
	if (init_and_alloc)
		CHECK_NULL_EOPNOTSUPP(init_and_alloc(ctx->device, -1, 64, NULL, 0));
	open_device = sym("verbs_open_device", "IBVERBS_PRIVATE_34");
	CHECK(open_device != NULL);
	if (open_device)
		CHECK_NULL_EOPNOTSUPP(open_device(ctx->device, NULL));
	register_driver = sym("verbs_register_driver_34", "IBVERBS_PRIVATE_34");
	CHECK(register_driver != NULL);
	if (register_driver)
		register_driver(buf);	/* accepted and ignored */
	final_num_attrs = sym("__ioctl_final_num_attrs", "IBVERBS_PRIVATE_34");
	CHECK(final_num_attrs && final_num_attrs(5, NULL) == 5);
	read_ibdev_sysfs = sym("ibv_read_ibdev_sysfs_file", "IBVERBS_PRIVATE_34");
	CHECK(read_ibdev_sysfs && read_ibdev_sysfs(buf, sizeof(buf), NULL, "x") < 0);
	allow_disassociate = sym("verbs_allow_disassociate_destroy", "IBVERBS_PRIVATE_34");
	CHECK(allow_disassociate && *allow_disassociate == false);

	init_cq = sym("verbs_init_cq", "IBVERBS_PRIVATE_34");
	CHECK(init_cq != NULL);
	if (init_cq) {
		memset(&cq, 0xa5, sizeof(cq));
		init_cq(&cq, ctx, NULL, buf);
		CHECK(cq.context == ctx && cq.channel == NULL && cq.cq_context == buf);
		CHECK(cq.comp_events_completed == 0 && cq.async_events_completed == 0);
	}

	/* The 1.0 ABI: reported unsupported, nothing to free or ack. */
	get_list_1_0 = sym("ibv_get_device_list", "IBVERBS_1.0");
	CHECK(get_list_1_0 != NULL);
	if (get_list_1_0) {
		CHECK_NULL_EOPNOTSUPP(get_list_1_0(&num));
		CHECK_EQ(num, 0);
	}
	open_1_0 = sym("ibv_open_device", "IBVERBS_1.0");
	CHECK(open_1_0 != NULL);
	if (open_1_0)
		CHECK_NULL_EOPNOTSUPP(open_1_0(buf));
	query_gid_1_0 = sym("ibv_query_gid", "IBVERBS_1.0");
	CHECK(query_gid_1_0 && query_gid_1_0(buf, 1, 0, NULL) == -1 && errno == EOPNOTSUPP);
	register_driver_1_1 = sym("ibv_register_driver", "IBVERBS_1.1");
	CHECK(register_driver_1_1 != NULL);
	if (register_driver_1_1)
		register_driver_1_1("mthca", NULL);
	/* The default versions are the functions the program linked. */
	CHECK(sym("ibv_get_device_list", "IBVERBS_1.1") == (void *)ibv_get_device_list);
	CHECK(sym("ibv_get_device_list", "IBVERBS_1.0") != (void *)ibv_get_device_list);
}

static void test_misc(struct ibv_context *ctx)
{
	struct ib_uverbs_qp_attr kq;
	struct ibv_qp_attr q;
	struct ib_user_path_rec kp, kp2;
	struct ibv_sa_path_rec sp;
	struct ibv_ah_attr ah = { 0 };
	uint8_t mac[ETHERNET_LL_SIZE] = { 0 };
	uint16_t vid = 0;
	char dir[] = "/tmp/urvt-abi-XXXXXX", path[64], buf[8];
	FILE *f;

	CHECK_EQ(ibv_fork_init(), 0);
	CHECK_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
	CHECK_EQ(ibv_dontfork_range(buf, sizeof(buf)), 0);
	CHECK_EQ(ibv_dofork_range(buf, sizeof(buf)), 0);

	/* Kernel QP attributes: every field lands in its verbs twin. */
	memset(&kq, 0, sizeof(kq));
	kq.qp_state = IBV_QPS_RTS;
	kq.cur_qp_state = IBV_QPS_RTR;
	kq.path_mtu = IBV_MTU_2048;
	kq.qkey = 0x11223344;
	kq.rq_psn = 0x123456;
	kq.sq_psn = 0x654321;
	kq.dest_qp_num = 0xabcdef;
	kq.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	kq.max_send_wr = 17;
	kq.max_recv_wr = 19;
	kq.max_inline_data = 64;
	kq.ah_attr.grh.dgid[15] = 0x42;
	kq.ah_attr.grh.flow_label = 0x12345;
	kq.ah_attr.dlid = 0x77;
	kq.ah_attr.is_global = 1;
	kq.ah_attr.port_num = 1;
	kq.alt_ah_attr.sl = 3;
	kq.pkey_index = 5;
	kq.max_rd_atomic = 4;
	kq.max_dest_rd_atomic = 8;
	kq.min_rnr_timer = 12;
	kq.timeout = 14;
	kq.retry_cnt = 7;
	kq.rnr_retry = 6;
	kq.alt_timeout = 9;
	memset(&q, 0, sizeof(q));
	ibv_copy_qp_attr_from_kern(&q, &kq);
	CHECK_EQ(q.qp_state, IBV_QPS_RTS);
	CHECK_EQ(q.cur_qp_state, IBV_QPS_RTR);
	CHECK_EQ(q.path_mtu, IBV_MTU_2048);
	CHECK_EQ(q.qkey, 0x11223344);
	CHECK_EQ(q.rq_psn, 0x123456);
	CHECK_EQ(q.sq_psn, 0x654321);
	CHECK_EQ(q.dest_qp_num, 0xabcdef);
	CHECK_EQ(q.qp_access_flags, IBV_ACCESS_REMOTE_WRITE);
	CHECK_EQ(q.cap.max_send_wr, 17);
	CHECK_EQ(q.cap.max_recv_wr, 19);
	CHECK_EQ(q.cap.max_inline_data, 64);
	CHECK_EQ(q.ah_attr.grh.dgid.raw[15], 0x42);
	CHECK_EQ(q.ah_attr.grh.flow_label, 0x12345);
	CHECK_EQ(q.ah_attr.dlid, 0x77);
	CHECK_EQ(q.ah_attr.is_global, 1);
	CHECK_EQ(q.ah_attr.port_num, 1);
	CHECK_EQ(q.alt_ah_attr.sl, 3);
	CHECK_EQ(q.pkey_index, 5);
	CHECK_EQ(q.max_rd_atomic, 4);
	CHECK_EQ(q.max_dest_rd_atomic, 8);
	CHECK_EQ(q.min_rnr_timer, 12);
	CHECK_EQ(q.timeout, 14);
	CHECK_EQ(q.retry_cnt, 7);
	CHECK_EQ(q.rnr_retry, 6);
	CHECK_EQ(q.alt_timeout, 9);

	/* Path records survive kernel -> verbs -> kernel unchanged. */
	memset(&kp, 0, sizeof(kp));
	for (size_t i = 0; i < 16; i++) {
		kp.dgid[i] = (uint8_t)i;
		kp.sgid[i] = (uint8_t)(0xf0 | i);
	}
	kp.dlid = htobe16(0x1234);
	kp.slid = htobe16(0x4321);
	kp.raw_traffic = 1;
	kp.flow_label = htobe32(0xabcde);
	kp.reversible = 1;
	kp.mtu = IBV_MTU_4096;
	kp.pkey = htobe16(0xffff);
	kp.hop_limit = 64;
	kp.traffic_class = 3;
	kp.numb_path = 1;
	kp.sl = 2;
	kp.mtu_selector = 2;
	kp.rate_selector = 2;
	kp.rate = IBV_RATE_100_GBPS;
	kp.packet_life_time_selector = 2;
	kp.packet_life_time = 18;
	kp.preference = 1;
	ibv_copy_path_rec_from_kern(&sp, &kp);
	CHECK_EQ(sp.dgid.raw[15], 15);
	CHECK_EQ(sp.sgid.raw[0], 0xf0);
	CHECK_EQ(be16toh(sp.dlid), 0x1234);
	CHECK_EQ(be32toh(sp.flow_label), 0xabcde);
	CHECK_EQ(sp.mtu, IBV_MTU_4096);
	CHECK_EQ(sp.rate, IBV_RATE_100_GBPS);
	CHECK_EQ(sp.packet_life_time, 18);
	memset(&kp2, 0, sizeof(kp2));
	ibv_copy_path_rec_to_kern(&kp2, &sp);
	CHECK(!memcmp(&kp, &kp2, sizeof(kp)));

	/* sysfs helpers read real files. */
	CHECK(!strcmp(ibv_get_sysfs_path(), getenv("SYSFS_PATH") ? getenv("SYSFS_PATH")
								  : "/sys"));
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/attr", dir);
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fputs("abc\n", f);
		fclose(f);
		CHECK_EQ(ibv_read_sysfs_file(dir, "attr", buf, sizeof(buf)), 3);
		CHECK(!strcmp(buf, "abc"));
		CHECK_EQ(ibv_read_sysfs_file(dir, "attr", buf, 2), -1);	/* no room */
		unlink(path);
	}
	errno = 0;
	CHECK_EQ(ibv_read_sysfs_file(dir, "missing", buf, sizeof(buf)), -1);
	CHECK_EQ(errno, ENOENT);
	rmdir(dir);

	/* The documented stand-in MAC. */
	ah.is_global = 1;
	ah.port_num = 1;
	ah.grh.sgid_index = 0;
	ah.grh.dgid.raw[10] = 0xff;
	ah.grh.dgid.raw[11] = 0xff;
	ah.grh.dgid.raw[12] = 10;
	ah.grh.dgid.raw[13] = 1;
	ah.grh.dgid.raw[14] = 2;
	ah.grh.dgid.raw[15] = 3;
	CHECK_EQ(ibv_resolve_eth_l2_from_gid(ctx, &ah, mac, &vid), 0);
	CHECK(mac[0] == 0x02 && mac[1] == 0 && mac[2] == 10 && mac[5] == 3);
	CHECK_EQ(vid, 0xffff);
	ah.grh.sgid_index = 9;
	CHECK(ibv_resolve_eth_l2_from_gid(ctx, &ah, mac, &vid) < 0);
}

/* ------------------------------------------------------------------ */

/* Open the device with stderr captured, so a warning can be checked. */
static struct ibv_context *open_capturing(struct ibv_device *dev, char *out, size_t len)
{
	struct ibv_context *ctx;
	FILE *tmp = tmpfile();
	int saved = dup(2);
	size_t n = 0;

	out[0] = '\0';
	if (!tmp || saved < 0)
		return ibv_open_device(dev);
	fflush(stderr);
	dup2(fileno(tmp), 2);
	ctx = ibv_open_device(dev);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	n = fread(out, 1, len - 1, tmp);
	out[n] = '\0';
	fclose(tmp);
	fputs(out, stderr);
	return ctx;
}

/* The default active MTU for URVT_ADDR, as urvt derives it from the
 * interface; 0 if the test cannot tell (then any valid MTU passes). */
static unsigned int default_mtu(void)
{
	const char *a = getenv("URVT_ADDR");
	struct ifreq ifr;
	int fd, m = -1;

	if (!a || strncmp(a, "127.", 4))
		return 0;	/* 127/8 is on lo; others: unknown here */
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd >= 0 && !ioctl(fd, SIOCGIFMTU, &ifr))
		m = ifr.ifr_mtu - 80;
	if (fd >= 0)
		close(fd);
	if (m < 0)
		return 0;
	for (unsigned int b = 4096; b > 256; b /= 2)
		if (m >= (int)b)
			return b;
	return 256;
}

static int valid_mtu_env(const char *s)
{
	static const char *const ok[] = { "256", "512", "1024", "2048", "4096" };

	if (!s || !*s)
		return 1;	/* unset: default, nothing to warn about */
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!strcmp(s, ok[i]))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	unsigned int want_mtu = default_mtu();
	struct ibv_device *dev;
	struct ibv_context *ctx;
	char captured[4096];
	int only_mtu = 0;

	if (argc == 3 && !strcmp(argv[1], "mtu") && !strcmp(argv[2], "refused")) {
		only_mtu = 2;
	} else if (argc == 3 && !strcmp(argv[1], "mtu")) {
		if (strcmp(argv[2], "default"))
			want_mtu = (unsigned int)strtoul(argv[2], NULL, 0);
		only_mtu = 1;
	} else if (argc != 1) {
		fprintf(stderr, "usage: %s [mtu BYTES|default|refused]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);

	libibverbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
	CHECK(libibverbs != NULL);
	if (!libibverbs)
		return 1;
	test_loaded_copy();
	dev = test_device_list();
	if (!dev)
		return 1;

	ctx = open_capturing(dev, captured, sizeof(captured));
	if (only_mtu == 2) {
		/* A bad URVT_MTU fails the open, with one line saying so. */
		CHECK(ctx == NULL && errno == EINVAL);
		CHECK(!valid_mtu_env(getenv("URVT_MTU")));
		CHECK(strstr(captured, "urvt: URVT_MTU=") == captured);
		CHECK(strchr(captured, '\n') == captured + strlen(captured) - 1);
		if (ctx)
			ibv_close_device(ctx);
		printf("%s: %d failure(s)\n", argv[0], failures);
		return failures ? 1 : 0;
	}
	CHECK(ctx != NULL);
	if (!ctx) {
		fprintf(stderr, "ibv_open_device: %s\n", strerror(errno));
		return 1;
	}
	CHECK(ctx->device == dev);
	CHECK_EQ(ctx->num_comp_vectors, 1);
	CHECK(verbs_get_ctx(ctx) != NULL);

	if (only_mtu) {
		struct ibv_port_attr p;

		CHECK_EQ(ibv_query_port(ctx, 1, &p), 0);
		if (want_mtu)
			CHECK_EQ(mtu_bytes(p.active_mtu), want_mtu);
		else
			CHECK(mtu_bytes(p.active_mtu) != 0);
	} else {
		test_query_device(ctx, dev);
		test_query_port(ctx, want_mtu);
		test_gids(ctx);
		test_pkeys(ctx);
		test_unsupported(ctx);
		test_private_and_compat(ctx);
		test_misc(ctx);
	}
	CHECK_EQ(ibv_close_device(ctx), 0);

	/* The device can be opened again after the last close. */
	ctx = ibv_open_device(dev);
	CHECK(ctx != NULL);
	if (ctx)
		CHECK_EQ(ibv_close_device(ctx), 0);

	printf("%s: %d failure(s)\n", argv[0], failures);
	return failures ? 1 : 0;
}
