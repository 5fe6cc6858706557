/*
 * What rdma-core's own test suite (tests/run_tests.py, pyverbs) asks of a
 * device beyond the basic verbs, through the public verbs (the built
 * libibverbs.so.1, system <infiniband/verbs.h>): a fork child gets a device
 * of its own, the zero-configuration address leaves 127.0.0.1 to those who
 * name it, modify to RESET leaves no completion of the QP's past behind, the
 * device attributes rxe reports, and the extended verbs (completion
 * timestamps and the clock, thread and parent domains, device memory, the
 * import verbs) each with its errno edge.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static struct ibv_context *open_first(void)
{
	struct ibv_device **list;
	struct ibv_context *c;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (!list || n < 1)
		return NULL;
	c = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	return c;
}

static int setup(void **state)
{
	(void)state;
	ctx = open_first();
	assert_non_null(ctx);
	pd = ibv_alloc_pd(ctx);
	assert_non_null(pd);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	assert_int_equal(ibv_close_device(ctx), 0);
	return 0;
}

/* Up to n completions within ~3 s. */
static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	struct timespec ts = { 0, 1000000 };
	int got = 0;

	for (int i = 0; i < 3000 && got < n; i++) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0)
			return r;
		got += r;
		if (!r)
			nanosleep(&ts, NULL);
	}
	return got;
}

static struct ibv_qp *rc_qp(struct ibv_pd *p, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};

	return ibv_create_qp(p, &ia);
}

/* RESET -> INIT -> RTR -> RTS towards dest_qpn on this device; 0 or errno. */
static int rc_connect(struct ibv_qp *qp, uint32_t dest_qpn)
{
	struct ibv_qp_attr a;
	union ibv_gid gid;
	int ret;

	if (ibv_query_gid(qp->context, 1, 0, &gid))
		return errno;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ;
	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				    IBV_QP_ACCESS_FLAGS);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 64;
	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int post_recv1(struct ibv_qp *qp, struct ibv_mr *mr, void *buf, uint32_t len,
		      uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

static int post_send1(struct ibv_qp *qp, struct ibv_mr *mr, void *buf, uint32_t len,
		      uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	return ibv_post_send(qp, &wr, &bad);
}

/* ------------------------------------------------------------------ */
/* fork                                                               */
/* ------------------------------------------------------------------ */

/*
 * The child of a process with an open device: its ibv_open_device makes a
 * device of its own (another address: the parent keeps its own), whose
 * progress thread runs: a SEND posted before its receive completes only
 * after an RNR retry, which the progress thread's timer drives.
 */
static int child_traffic(const union ibv_gid *parent_gid)
{
	static char sbuf[64] = "from the child", rbuf[64];
	struct ibv_context *c = open_first();
	struct ibv_wc wc[2];
	struct ibv_qp *a, *b;
	struct ibv_cq *cq;
	struct ibv_pd *p;
	struct ibv_mr *mr;
	union ibv_gid gid;
	int n;

	if (!c || ibv_query_gid(c, 1, 0, &gid))
		return 10;
	/* the parent's device, inherited (no threads here), would be the
	 * same context; a device of its own shares the host's GID
	 * (docs/host-identity.md) but not the parent's QPN range */
	if (c == ctx)
		return 11;
	(void)parent_gid;
	p = ibv_alloc_pd(c);
	cq = ibv_create_cq(c, 16, NULL, NULL, 0);
	if (!p || !cq)
		return 12;
	a = rc_qp(p, cq);
	b = rc_qp(p, cq);
	mr = ibv_reg_mr(p, sbuf, sizeof(sbuf) + sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	if (!a || !b || !mr || rc_connect(a, b->qp_num) || rc_connect(b, a->qp_num))
		return 13;
	(void)mr;
	if (post_send1(a, mr, sbuf, sizeof(sbuf), 1))
		return 14;
	usleep(20000); /* the SEND meets no receive: RNR NAK, retry by timer */
	{
		struct ibv_mr *rmr = ibv_reg_mr(p, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);

		if (!rmr || post_recv1(b, rmr, rbuf, sizeof(rbuf), 2))
			return 15;
	}
	n = poll_n(cq, wc, 2);
	if (n != 2 || wc[0].status != IBV_WC_SUCCESS || wc[1].status != IBV_WC_SUCCESS)
		return 16;
	if (strcmp(rbuf, "from the child"))
		return 17;
	return 0;
}

/*
 * Forked right after the device opened, several times over: the device's
 * thread has finished starting by then (a start-up that allocates under a
 * sanitizer's allocator lock would otherwise leave the child's allocator
 * locked, and its own device's thread hung).
 */
static void test_fork_child_own_device(void **state)
{
	(void)state;
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	assert_int_equal(ibv_close_device(ctx), 0);
	for (int round = 0; round < 6; round++) {
		union ibv_gid gid;
		int status = 0;
		pid_t pid;

		ctx = open_first();
		assert_non_null(ctx);
		pid = fork();
		if (pid == 0)
			_exit(ibv_query_gid(ctx, 1, 0, &gid) ? 9 : child_traffic(&gid));
		assert_true(pid >= 0);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
		assert_int_equal(ibv_close_device(ctx), 0);
	}
	ctx = open_first();
	assert_non_null(ctx);
	pd = ibv_alloc_pd(ctx);
	assert_non_null(pd);
}

/* The default address is the host's shared 127.0.0.1 (docs/host-identity.md);
 * unshared (URVT_SHARE=0) a free 127.0.0.x other than 127.0.0.1 (while
 * there is one): a process that names 127.0.0.1 finds it free. */
static void test_default_addr_leaves_localhost(void **state)
{
	const char *share = getenv("URVT_SHARE");
	static const uint8_t localhost[16] = { [10] = 0xff, [11] = 0xff, [12] = 127, [15] = 1 };
	union ibv_gid gid;
	const char *a = getenv("URVT_ADDR"), *d = getenv("URVT_NETDEV");

	(void)state;
	if ((a && *a) || (d && *d))
		skip();
	assert_int_equal(ibv_query_gid(ctx, 1, 0, &gid), 0);
	assert_int_equal(gid.raw[10], 0xff);
	assert_int_equal(gid.raw[12], 127);
	if (share && !strcmp(share, "0"))
		assert_memory_not_equal(gid.raw, localhost, 16);
	else
		assert_memory_equal(gid.raw, localhost, 16);
}

/* ------------------------------------------------------------------ */
/* Modify to RESET                                                    */
/* ------------------------------------------------------------------ */

/*
 * A QP taken to RESET leaves none of its completions in its CQs (the flush
 * errors of its error state included), and other QPs' stay: traffic after
 * RESET -> RTS polls its own completions, not the old life's. (rdma-core's
 * test_mr_rereg_addr / _pd restate their QPs from ERR and then expect
 * success at the first poll.)
 */
static void test_reset_cleans_cq(void **state)
{
	static char buf[4][64];
	struct ibv_cq *cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	struct ibv_mr *mr;
	struct ibv_qp *a, *b, *other;
	struct ibv_wc wc[8];

	(void)state;
	assert_non_null(cq);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	a = rc_qp(pd, cq);
	b = rc_qp(pd, cq);
	other = rc_qp(pd, cq);
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(other);
	assert_int_equal(rc_connect(a, b->qp_num), 0);
	assert_int_equal(rc_connect(b, a->qp_num), 0);
	assert_int_equal(rc_connect(other, other->qp_num), 0);
	/* two receives on a, one on other; both go to ERR: three flushes */
	assert_int_equal(post_recv1(a, mr, buf[0], 64, 100), 0);
	assert_int_equal(post_recv1(a, mr, buf[1], 64, 101), 0);
	assert_int_equal(post_recv1(other, mr, buf[2], 64, 200), 0);
	assert_int_equal(ibv_modify_qp(a, &attr, IBV_QP_STATE), 0);
	assert_int_equal(ibv_modify_qp(other, &attr, IBV_QP_STATE), 0);
	/* a to RESET: its two flushes go, other's stays */
	attr.qp_state = IBV_QPS_RESET;
	assert_int_equal(ibv_modify_qp(a, &attr, IBV_QP_STATE), 0);
	assert_int_equal(poll_n(cq, wc, 1), 1);
	assert_int_equal(wc[0].wr_id, 200);
	assert_int_equal(wc[0].status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(ibv_poll_cq(cq, 8, wc), 0);
	/* back to RTS: the first completion is the new SEND's */
	assert_int_equal(rc_connect(a, b->qp_num), 0);
	assert_int_equal(post_recv1(b, mr, buf[3], 64, 300), 0);
	assert_int_equal(post_send1(a, mr, buf[0], 16, 301), 0);
	assert_int_equal(poll_n(cq, wc, 2), 2);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[1].status, IBV_WC_SUCCESS);
	assert_int_equal(ibv_destroy_qp(a), 0);
	assert_int_equal(ibv_destroy_qp(b), 0);
	assert_int_equal(ibv_destroy_qp(other), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

/* ------------------------------------------------------------------ */
/* Device attributes                                                  */
/* ------------------------------------------------------------------ */

/* rxe's vendor id (0xFFFFFF: software, no IEEE OUI), in both queries;
 * rdma-core's test_query_device(_ex) require a non-zero one. */
static void test_vendor_id(void **state)
{
	struct ibv_device_attr_ex ax;
	struct ibv_device_attr a;

	(void)state;
	assert_int_equal(ibv_query_device(ctx, &a), 0);
	assert_int_equal(a.vendor_id, 0xFFFFFF);
	assert_int_equal(ibv_query_device_ex(ctx, NULL, &ax), 0);
	assert_int_equal(ax.orig_attr.vendor_id, 0xFFFFFF);
}

/* ------------------------------------------------------------------ */
/* Import                                                             */
/* ------------------------------------------------------------------ */

/*
 * A context's cmd_fd is a real fd; ibv_import_device on a dup of it opens a
 * context that shares the first one's objects: ibv_import_pd and
 * ibv_import_mr by handle give the same PD (a QP of the importing context
 * sends from the imported MR to a QP of the first) and the same keys.
 * Unknown fds are EOPNOTSUPP, unknown handles EINVAL.
 */
static void test_import(void **state)
{
	static char buf[2][64] = { "imported" };
	struct ibv_context *c2, *c3;
	struct ibv_pd *pd2, *other;
	struct ibv_mr *mr, *mr2;
	struct ibv_cq *cq, *cq2;
	struct ibv_qp *a, *b;
	struct ibv_wc wc[2];
	int fds[2], fd;

	(void)state;
	assert_true(ctx->cmd_fd >= 0);
	fd = dup(ctx->cmd_fd);
	assert_true(fd >= 0);
	assert_int_equal(pipe(fds), 0);
	errno = 0;
	assert_null(ibv_import_device(fds[0]));
	assert_int_equal(errno, EOPNOTSUPP);
	close(fds[0]);
	close(fds[1]);
	c2 = ibv_import_device(fd);
	assert_non_null(c2);
	assert_int_equal(c2->cmd_fd, fd);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_non_null(mr);
	pd2 = ibv_import_pd(c2, pd->handle);
	assert_non_null(pd2);
	assert_ptr_equal(pd2->context, c2);
	assert_int_equal(pd2->handle, pd->handle);
	errno = 0;
	assert_null(ibv_import_pd(c2, pd->handle + 1000));
	assert_int_equal(errno, EINVAL);
	mr2 = ibv_import_mr(pd2, mr->handle);
	assert_non_null(mr2);
	assert_int_equal(mr2->lkey, mr->lkey);
	assert_int_equal(mr2->rkey, mr->rkey);
	assert_int_equal(mr2->length, mr->length);
	/* an MR of another PD is not this PD's */
	other = ibv_alloc_pd(ctx);
	assert_non_null(other);
	errno = 0;
	assert_null(ibv_import_mr(other, mr->handle));
	assert_int_equal(errno, EINVAL);
	/* a context that did not import shares nothing */
	c3 = open_first();
	assert_non_null(c3);
	errno = 0;
	assert_null(ibv_import_pd(c3, pd->handle));
	assert_int_equal(errno, EINVAL);
	assert_int_equal(ibv_close_device(c3), 0);

	cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	cq2 = ibv_create_cq(c2, 8, NULL, NULL, 0);
	assert_non_null(cq);
	assert_non_null(cq2);
	a = rc_qp(pd2, cq2);
	b = rc_qp(pd, cq);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(rc_connect(a, b->qp_num), 0);
	assert_int_equal(rc_connect(b, a->qp_num), 0);
	assert_int_equal(post_recv1(b, mr, buf[1], 64, 1), 0);
	assert_int_equal(post_send1(a, mr2, buf[0], 16, 2), 0);
	assert_int_equal(poll_n(cq2, wc, 1), 1);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(poll_n(cq, wc, 1), 1);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_string_equal(buf[1], "imported");

	assert_int_equal(ibv_destroy_qp(a), 0);
	assert_int_equal(ibv_destroy_qp(b), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_cq(cq2), 0);
	ibv_unimport_mr(mr2);
	ibv_unimport_pd(pd2);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_dealloc_pd(other), 0);
	assert_int_equal(ibv_close_device(c2), 0);
	/* the importing context owned the dup: closed with it */
	assert_int_equal(fcntl(fd, F_GETFD), -1);
	assert_true(fcntl(ctx->cmd_fd, F_GETFD) >= 0);
}

/* ------------------------------------------------------------------ */
/* Completion timestamps and the device clock                         */
/* ------------------------------------------------------------------ */

static uint64_t rt_clock(void)
{
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };

	assert_int_equal(ibv_query_rt_values_ex(ctx, &v), 0);
	assert_int_equal(v.comp_mask, IBV_VALUES_MASK_RAW_CLOCK);
	assert_int_equal(v.raw_clock.tv_sec, 0);
	return (uint64_t)v.raw_clock.tv_nsec;
}

static uint64_t wall_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/*
 * hca_core_clock 1 GHz with a 64-bit mask; ibv_query_rt_values_ex reads the
 * device clock; a CQ created with both timestamp flags stamps each
 * completion with the device clock and the wall clock of its making (both
 * between readings taken before the post and after the poll), and the
 * stamps survive ibv_resize_cq. A CQ without the flags has no readers.
 */
static void test_completion_timestamps(void **state)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 8,
		.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK | IBV_WC_EX_WITH_QP_NUM,
	};
	struct ibv_poll_cq_attr pa = { 0 };
	static char buf[2][64];
	uint64_t c0, c1, w0, w1, ts[2], wall[2];
	struct ibv_device_attr_ex ax;
	struct ibv_values_ex bad = { .comp_mask = 2 };
	struct ibv_cq_ex *cq, *plain;
	struct ibv_qp *a, *b;
	struct ibv_mr *mr;
	int n = 0, ret;

	(void)state;
	assert_int_equal(ibv_query_device_ex(ctx, NULL, &ax), 0);
	assert_int_equal(ax.hca_core_clock, 1000000);
	assert_true(ax.completion_timestamp_mask == UINT64_MAX);
	assert_int_equal(ibv_query_rt_values_ex(ctx, &bad), EINVAL);
	c0 = rt_clock();
	assert_true(rt_clock() >= c0);

	cq = ibv_create_cq_ex(ctx, &ca);
	assert_non_null(cq);
	assert_non_null(cq->read_completion_ts);
	assert_non_null(cq->read_completion_wallclock_ns);
	ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
	plain = ibv_create_cq_ex(ctx, &ca);
	assert_non_null(plain);
	assert_null(plain->read_completion_ts);
	assert_null(plain->read_completion_wallclock_ns);

	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	a = rc_qp(pd, ibv_cq_ex_to_cq(cq));
	b = rc_qp(pd, ibv_cq_ex_to_cq(cq));
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(rc_connect(a, b->qp_num), 0);
	assert_int_equal(rc_connect(b, a->qp_num), 0);
	c0 = rt_clock();
	w0 = wall_ns();
	assert_int_equal(post_recv1(b, mr, buf[1], 64, 1), 0);
	assert_int_equal(post_send1(a, mr, buf[0], 16, 2), 0);
	usleep(50000); /* both completions are in (in-process: at post time) */
	c1 = rt_clock();
	w1 = wall_ns();
	/* the stamps move with the entries when the ring does */
	assert_int_equal(ibv_resize_cq(ibv_cq_ex_to_cq(cq), 64), 0);
	for (int i = 0; i < 3000 && n < 2; i++) {
		ret = ibv_start_poll(cq, &pa);
		if (ret == ENOENT) {
			usleep(1000);
			continue;
		}
		assert_int_equal(ret, 0);
		do {
			assert_int_equal(cq->status, IBV_WC_SUCCESS);
			ts[n] = ibv_wc_read_completion_ts(cq);
			wall[n] = ibv_wc_read_completion_wallclock_ns(cq);
			n++;
		} while (n < 2 && ibv_next_poll(cq) == 0);
		ibv_end_poll(cq);
	}
	assert_int_equal(n, 2);
	for (int i = 0; i < 2; i++) {
		assert_true(ts[i] >= c0 && ts[i] <= c1);
		assert_true(wall[i] >= w0 && wall[i] <= w1);
	}
	assert_int_equal(ibv_destroy_qp(a), 0);
	assert_int_equal(ibv_destroy_qp(b), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
	assert_int_equal(ibv_destroy_cq(ibv_cq_ex_to_cq(plain)), 0);
}

/* ------------------------------------------------------------------ */
/* Thread and parent domains                                          */
/* ------------------------------------------------------------------ */

struct alloc_log {
	int allocs, frees, defaults;
	uint64_t types;                   /* bit per resource_type seen */
	void *last;
	struct ibv_pd *pd;                /* the parent domain they were called with */
	bool use_default;                 /* answer IBV_ALLOCATOR_USE_DEFAULT */
};

static void *log_alloc(struct ibv_pd *p, void *pd_context, size_t size, size_t alignment,
		       uint64_t resource_type)
{
	struct alloc_log *l = pd_context;
	void *buf;

	l->pd = p;
	l->types |= 1ull << (resource_type & 63);
	if (l->use_default) {
		l->defaults++;
		return IBV_ALLOCATOR_USE_DEFAULT;
	}
	if (posix_memalign(&buf, alignment < sizeof(void *) ? sizeof(void *) : alignment, size))
		return NULL;
	memset(buf, 0xa5, size); /* urvt must zero what it gets */
	l->allocs++;
	l->last = buf;
	return buf;
}

static void log_free(struct ibv_pd *p, void *pd_context, void *ptr, uint64_t resource_type)
{
	struct alloc_log *l = pd_context;

	(void)p;
	(void)resource_type;
	l->frees++;
	free(ptr);
}

/*
 * A parent domain on a PD (and a thread domain): the QP's rings and the
 * SRQ's and extended CQ's come from its allocators, called with the parent
 * domain and pd_context, and go back to them at destroy; traffic over a QP
 * made on it with an MR of the protection domain works; the PD, the TD and
 * the parent stay while something uses them (EBUSY). An allocator that
 * answers IBV_ALLOCATOR_USE_DEFAULT gets nothing to free. Bad attributes:
 * EINVAL.
 */
static void test_parent_domain(void **state)
{
	struct alloc_log log = { 0 };
	struct ibv_td_init_attr ta = { 0 };
	struct ibv_parent_domain_init_attr pa = { 0 };
	struct ibv_cq_init_attr_ex ca = { .cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS,
					  .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD };
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	static char buf[2][64] = { "parent domain" };
	struct ibv_pd *parent;
	struct ibv_cq_ex *cq;
	struct ibv_qp *a, *b;
	struct ibv_srq *srq;
	struct ibv_td *td;
	struct ibv_mr *mr;
	struct ibv_wc wc[2];

	(void)state;
	td = ibv_alloc_td(ctx, &ta);
	assert_non_null(td);
	ta.comp_mask = 1;
	errno = 0;
	assert_null(ibv_alloc_td(ctx, &ta));
	assert_int_equal(errno, EINVAL);

	pa.pd = pd;
	pa.td = td;
	pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
	pa.alloc = log_alloc;
	pa.free = log_free;
	pa.pd_context = &log;
	parent = ibv_alloc_parent_domain(ctx, &pa);
	assert_non_null(parent);
	assert_ptr_equal(parent->context, ctx);
	/* not on a parent domain, not without free */
	pa.pd = parent;
	errno = 0;
	assert_null(ibv_alloc_parent_domain(ctx, &pa));
	assert_int_equal(errno, EINVAL);
	pa.pd = pd;
	pa.free = NULL;
	errno = 0;
	assert_null(ibv_alloc_parent_domain(ctx, &pa));
	assert_int_equal(errno, EINVAL);
	pa.free = log_free;
	/* a CQ may name only a parent domain */
	ca.parent_domain = pd;
	errno = 0;
	assert_null(ibv_create_cq_ex(ctx, &ca));
	assert_int_equal(errno, EINVAL);

	ca.parent_domain = parent;
	cq = ibv_create_cq_ex(ctx, &ca);
	assert_non_null(cq);
	assert_int_equal(log.allocs, 1);
	assert_true(log.types & (1u << 5));
	srq = ibv_create_srq(parent, &sa);
	assert_non_null(srq);
	assert_int_equal(log.allocs, 2);
	assert_true(log.types & (1u << 4));
	a = rc_qp(parent, ibv_cq_ex_to_cq(cq));
	b = rc_qp(parent, ibv_cq_ex_to_cq(cq));
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(log.allocs, 6); /* send and receive ring each */
	assert_true(log.types & (1u << 1));
	assert_ptr_equal(log.pd, parent);
	assert_ptr_equal(a->pd, parent);

	/* an MR of the protection domain serves QPs of the parent */
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	assert_int_equal(rc_connect(a, b->qp_num), 0);
	assert_int_equal(rc_connect(b, a->qp_num), 0);
	assert_int_equal(post_recv1(b, mr, buf[1], 64, 1), 0);
	assert_int_equal(post_send1(a, mr, buf[0], 16, 2), 0);
	assert_int_equal(poll_n(ibv_cq_ex_to_cq(cq), wc, 2), 2);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[1].status, IBV_WC_SUCCESS);
	assert_string_equal(buf[1], "parent domain");
	/* a resize takes a new ring from the allocator and frees the old */
	assert_int_equal(ibv_resize_cq(ibv_cq_ex_to_cq(cq), 64), 0);
	assert_int_equal(log.allocs, 7);
	assert_int_equal(log.frees, 1);

	assert_int_equal(ibv_dealloc_pd(parent), EBUSY);
	assert_int_equal(ibv_dealloc_td(td), EBUSY);
	assert_int_equal(ibv_dealloc_pd(pd), EBUSY);
	assert_int_equal(ibv_destroy_qp(a), 0);
	assert_int_equal(ibv_destroy_qp(b), 0);
	assert_int_equal(ibv_destroy_srq(srq), 0);
	assert_int_equal(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
	assert_int_equal(log.frees, log.allocs);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_dealloc_pd(parent), 0);

	/* USE_DEFAULT: urvt allocates, and frees, itself */
	memset(&log, 0, sizeof(log));
	log.use_default = true;
	pa.td = NULL;
	parent = ibv_alloc_parent_domain(ctx, &pa);
	assert_non_null(parent);
	ca.parent_domain = parent;
	a = rc_qp(parent, ibv_cq_ex_to_cq(cq = ibv_create_cq_ex(ctx, &ca)));
	assert_non_null(a);
	assert_true(log.defaults >= 3);
	assert_int_equal(ibv_destroy_qp(a), 0);
	assert_int_equal(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
	assert_int_equal(log.frees, 0);
	assert_int_equal(ibv_dealloc_pd(parent), 0);
	/* without allocators: a PD like any other */
	pa.comp_mask = 0;
	parent = ibv_alloc_parent_domain(ctx, &pa);
	assert_non_null(parent);
	ca.parent_domain = parent;
	a = rc_qp(parent, ibv_cq_ex_to_cq(cq = ibv_create_cq_ex(ctx, &ca)));
	assert_non_null(a);
	assert_int_equal(ibv_destroy_qp(a), 0);
	assert_int_equal(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
	assert_int_equal(ibv_dealloc_pd(parent), 0);
	assert_int_equal(ibv_dealloc_td(td), 0);
}

/* ------------------------------------------------------------------ */
/* Device memory                                                      */
/* ------------------------------------------------------------------ */

static int post_write1(struct ibv_qp *qp, struct ibv_mr *mr, void *buf, uint32_t len,
		       uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { raddr, rkey } },
			   *bad;

	return ibv_post_send(qp, &wr, &bad);
}

/*
 * max_dm_size is reported and enforced (one pool); copies to and from a DM
 * take 4-byte-aligned offsets and lengths inside it (else EINVAL); a DM MR
 * needs IBV_ACCESS_ZERO_BASED and must fit the DM (length 0 is allowed); a SEND lands in a DM MR
 * and an RDMA WRITE to it at zero-based address 16 lands at DM offset
 * 16 + the MR's dm_offset, read back with ibv_memcpy_from_dm; the DM stays
 * while an MR is on it (EBUSY); ibv_import_dm in an importing context reads
 * the same memory.
 */
static void test_device_memory(void **state)
{
	struct ibv_alloc_dm_attr da = { .length = 4096, .log_align_req = 6 };
	const unsigned acc = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE |
			     IBV_ACCESS_REMOTE_WRITE;
	static char host[2][64] = { "to device memory", "written" };
	struct ibv_device_attr_ex ax;
	struct ibv_dm *dm, *big, *dm2;
	struct ibv_mr *dmr, *hmr;
	struct ibv_context *c2;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	struct ibv_wc wc[2];
	char out[64];
	uint32_t word = 0x11223344, back = 0;

	(void)state;
	assert_int_equal(ibv_query_device_ex(ctx, NULL, &ax), 0);
	assert_true(ax.max_dm_size >= 4096);
	dm = ibv_alloc_dm(ctx, &da);
	assert_non_null(dm);
	assert_non_null(dm->memcpy_to_dm);
	/* the pool: what is left is less than max_dm_size now */
	da.length = ax.max_dm_size;
	errno = 0;
	assert_null(ibv_alloc_dm(ctx, &da));
	assert_int_equal(errno, ENOMEM);
	da.length = ax.max_dm_size - 4096;
	big = ibv_alloc_dm(ctx, &da);
	assert_non_null(big);
	assert_int_equal(ibv_free_dm(big), 0);
	da.length = 64;
	da.comp_mask = 1;
	errno = 0;
	assert_null(ibv_alloc_dm(ctx, &da));
	assert_int_equal(errno, EINVAL);

	assert_int_equal(ibv_memcpy_to_dm(dm, 8, &word, 4), 0);
	assert_int_equal(ibv_memcpy_from_dm(&back, dm, 8, 4), 0);
	assert_int_equal(back, word);
	assert_int_equal(ibv_memcpy_to_dm(dm, 9, &word, 4), EINVAL);
	assert_int_equal(ibv_memcpy_to_dm(dm, 8, &word, 3), EINVAL);
	assert_int_equal(ibv_memcpy_from_dm(&back, dm, 4096, 4), EINVAL);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 4, 4096), EINVAL);

	errno = 0;
	assert_null(ibv_reg_dm_mr(pd, dm, 0, 64, IBV_ACCESS_LOCAL_WRITE));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(ibv_reg_dm_mr(pd, dm, 1024, 4096, acc));
	assert_int_equal(errno, EINVAL);
	/* zero length: an MR that grants nothing (mlx5 makes them) */
	dmr = ibv_reg_dm_mr(pd, dm, 0, 0, acc);
	assert_non_null(dmr);
	assert_int_equal(dmr->length, 0);
	assert_int_equal(ibv_dereg_mr(dmr), 0);
	dmr = ibv_reg_dm_mr(pd, dm, 1024, 1024, acc);
	assert_non_null(dmr);
	assert_int_equal(ibv_free_dm(dm), EBUSY);

	hmr = ibv_reg_mr(pd, host, sizeof(host), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(hmr);
	cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	assert_non_null(cq);
	a = rc_qp(pd, cq);
	b = rc_qp(pd, cq);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(rc_connect(a, b->qp_num), 0);
	assert_int_equal(rc_connect(b, a->qp_num), 0);
	/* SEND into the DM MR (its addresses start at 0) */
	assert_int_equal(post_recv1(b, dmr, NULL, 64, 1), 0);
	assert_int_equal(post_send1(a, hmr, host[0], 20, 2), 0);
	assert_int_equal(poll_n(cq, wc, 2), 2);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[1].status, IBV_WC_SUCCESS);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 1024, 20), 0);
	assert_string_equal(out, "to device memory");
	/* RDMA WRITE to zero-based address 64 of it */
	assert_int_equal(post_write1(a, hmr, host[1], 8, 64, dmr->rkey), 0);
	assert_int_equal(poll_n(cq, wc, 1), 1);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 1024 + 64, 8), 0);
	assert_string_equal(out, "written");

	/* an importing context's handle on it */
	c2 = ibv_import_device(dup(ctx->cmd_fd));
	assert_non_null(c2);
	dm2 = ibv_import_dm(c2, dm->handle);
	assert_non_null(dm2);
	assert_int_equal(ibv_memcpy_from_dm(out, dm2, 1024, 20), 0);
	assert_string_equal(out, "to device memory");
	ibv_unimport_dm(dm2);
	errno = 0;
	assert_null(ibv_import_dm(ctx, dm->handle + 1000));
	assert_int_equal(errno, EINVAL);
	assert_int_equal(ibv_close_device(c2), 0);

	assert_int_equal(ibv_destroy_qp(a), 0);
	assert_int_equal(ibv_destroy_qp(b), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_dereg_mr(hmr), 0);
	assert_int_equal(ibv_dereg_mr(dmr), 0);
	assert_int_equal(ibv_free_dm(dm), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fork_child_own_device),
		cmocka_unit_test(test_default_addr_leaves_localhost),
		cmocka_unit_test(test_reset_cleans_cq),
		cmocka_unit_test(test_vendor_id),
		cmocka_unit_test(test_import),
		cmocka_unit_test(test_completion_timestamps),
		cmocka_unit_test(test_parent_domain),
		cmocka_unit_test(test_device_memory),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
