/*
 * The GSI QP (QPN 1) through the public verbs, as librdmacm makes it:
 * ibv_create_qp_ex with IBV_QP_CREATE_SOURCE_QPN and source_qpn 1 gives a
 * UD QP that receives RoCEv2 UD SENDs addressed to QPN 1 with the GSI
 * Q_Key 0x80010000 and sends with source QPN 1. Two processes, each with
 * its own device (127.31.11.1 and .2), exchange a 256-byte CM MAD and a
 * reply; the create rules (one GSI QP per device, UD only, source QPN 1
 * only, no other create flags) and the Q_Key check are asserted too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GSI_QKEY 0x80010000u
#define MAD_LEN 256
#define GRH_LEN 40
#define ADDR_A "127.31.11.1"
#define ADDR_B "127.31.11.2"

struct gsi {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t buf[8][GRH_LEN + MAD_LEN];
};

static struct ibv_context *open_dev(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;

	if (!list || !list[0])
		return NULL;
	ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	return ctx;
}

static struct ibv_qp *create_gsi(struct gsi *g, enum ibv_qp_type type, uint32_t flags,
				 uint32_t source_qpn)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = g->cq, .recv_cq = g->cq, .qp_type = type,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = MAD_LEN },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
		.pd = g->pd, .create_flags = flags, .source_qpn = source_qpn,
	};

	return ibv_create_qp_ex(g->ctx, &a);
}

/* Open, GSI QP to RTS, 8 receives posted. 0 or -1 (child-friendly: no asserts). */
static int gsi_up(struct gsi *g)
{
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				  .qkey = GSI_QKEY };

	memset(g, 0, sizeof(*g));
	g->ctx = open_dev();
	if (!g->ctx || !(g->pd = ibv_alloc_pd(g->ctx)) ||
	    !(g->cq = ibv_create_cq(g->ctx, 32, NULL, NULL, 0)))
		return -1;
	g->qp = create_gsi(g, IBV_QPT_UD, IBV_QP_CREATE_SOURCE_QPN, 1);
	if (!g->qp || g->qp->qp_num != 1)
		return -1;
	if (ibv_modify_qp(g->qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	at.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(g->qp, &at, IBV_QP_STATE))
		return -1;
	at.qp_state = IBV_QPS_RTS;
	at.sq_psn = 0;
	if (ibv_modify_qp(g->qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return -1;
	g->mr = ibv_reg_mr(g->pd, g->buf, sizeof(g->buf), IBV_ACCESS_LOCAL_WRITE);
	if (!g->mr)
		return -1;
	for (uint64_t i = 0; i < 8; i++) {
		struct ibv_sge sge = { (uintptr_t)g->buf[i], sizeof(g->buf[i]), g->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(g->qp, &wr, &bad))
			return -1;
	}
	return 0;
}

static void gsi_down(struct gsi *g)
{
	ibv_destroy_qp(g->qp);
	ibv_dereg_mr(g->mr);
	ibv_destroy_cq(g->cq);
	ibv_dealloc_pd(g->pd);
	ibv_close_device(g->ctx);
}

static void gid_of(const char *ip, union ibv_gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	gid->raw[10] = gid->raw[11] = 0xff;
	inet_pton(AF_INET, ip, &gid->raw[12]);
}

/* A CM MAD header (base version 1, class 0x07, class version 2, Send) + tag. */
static void make_mad(uint8_t *m, uint16_t attr_id, uint8_t tag)
{
	memset(m, 0, MAD_LEN);
	m[0] = 1;
	m[1] = 0x07;
	m[2] = 2;
	m[3] = 0x03;
	m[16] = (uint8_t)(attr_id >> 8);
	m[17] = (uint8_t)attr_id;
	for (int i = 24; i < MAD_LEN; i++)
		m[i] = (uint8_t)(tag + i);
}

static int send_mad(struct gsi *g, const char *to, uint32_t qkey, uint16_t attr_id, uint8_t tag)
{
	struct ibv_ah_attr ah = { .is_global = 1, .port_num = 1,
				  .grh = { .hop_limit = 64, .sgid_index = 0 } };
	uint8_t mad[MAD_LEN];
	struct ibv_sge sge = { (uintptr_t)mad, MAD_LEN, 0 };
	struct ibv_send_wr wr = { .wr_id = 100, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad;
	struct ibv_ah *a;
	struct ibv_wc wc;
	int ret = -1;

	gid_of(to, &ah.grh.dgid);
	a = ibv_create_ah(g->pd, &ah);
	if (!a)
		return -1;
	make_mad(mad, attr_id, tag);
	wr.wr.ud.ah = a;
	wr.wr.ud.remote_qpn = 1;
	wr.wr.ud.remote_qkey = qkey;
	if (ibv_post_send(g->qp, &wr, &bad))
		goto out;
	for (int i = 0; i < 3000; i++) {
		int n = ibv_poll_cq(g->cq, 1, &wc);
		if (n == 1 && wc.wr_id == 100) {
			ret = wc.status == IBV_WC_SUCCESS ? 0 : -1;
			break;
		}
		usleep(1000);
	}
out:
	ibv_destroy_ah(a);
	return ret;
}

/* Wait up to ms for one receive; 1 got (checked), 0 none, -1 wrong. */
static int recv_mad(struct gsi *g, const char *from, uint16_t attr_id, uint8_t tag, int ms)
{
	union ibv_gid sgid;
	struct ibv_wc wc;
	uint8_t want[MAD_LEN];

	/* RoCEv2 over IPv4: the 40-byte GRH slot holds the IPv4 header in its
	 * last 20 bytes (source address at 32), as rxe delivers it */
	gid_of(from, &sgid);
	make_mad(want, attr_id, tag);
	for (int i = 0; i < ms; i++) {
		int n = ibv_poll_cq(g->cq, 1, &wc);
		if (n == 1) {
			const uint8_t *b = g->buf[wc.wr_id];
			struct ibv_sge sge = { (uintptr_t)b, GRH_LEN + MAD_LEN, g->mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = wc.wr_id, .sg_list = &sge, .num_sge = 1 },
					   *bad;
			int ok = wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
				 wc.byte_len == GRH_LEN + MAD_LEN && wc.src_qp == 1 &&
				 (wc.wc_flags & IBV_WC_GRH) && wc.qp_num == 1 &&
				 !memcmp(b + 32, sgid.raw + 12, 4) && !memcmp(b + GRH_LEN, want, MAD_LEN);
			if (ibv_post_recv(g->qp, &wr, &bad))
				return -1;
			return ok ? 1 : -1;
		}
		usleep(1000);
	}
	return 0;
}

/* Child (B): wait for A, send a MAD with a wrong Q_Key (dropped) and a good
 * one, then expect A's reply. Exit status 0 on success. */
static int child_b(int ready_fd)
{
	struct gsi g;
	char c;

	setenv("URVT_ADDR", ADDR_B, 1);
	if (gsi_up(&g))
		return 2;
	if (read(ready_fd, &c, 1) != 1)
		return 3;
	if (send_mad(&g, ADDR_A, 0x12345678, 0x0010, 1))
		return 4;
	if (send_mad(&g, ADDR_A, GSI_QKEY, 0x0010, 7))
		return 5;
	if (recv_mad(&g, ADDR_A, 0x0013, 9, 5000) != 1)
		return 6;
	gsi_down(&g);
	return 0;
}

static void test_gsi_two_processes(void **state)
{
	int pfd[2], st = 0;
	struct gsi g;
	pid_t pid;

	(void)state;
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[1]);
		_exit(child_b(pfd[0]));
	}
	close(pfd[0]);
	setenv("URVT_ADDR", ADDR_A, 1);
	assert_int_equal(gsi_up(&g), 0);
	assert_int_equal(write(pfd[1], "g", 1), 1);
	/* the wrong-Q_Key MAD never shows; the good one does, from B's GID */
	assert_int_equal(recv_mad(&g, ADDR_B, 0x0010, 7, 5000), 1);
	assert_int_equal(send_mad(&g, ADDR_B, GSI_QKEY, 0x0013, 9), 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(recv_mad(&g, ADDR_B, 0x0010, 1, 50), 0);
	gsi_down(&g);
	close(pfd[1]);
}

/* The create rules, on this process's device. */
static void test_gsi_create_rules(void **state)
{
	struct gsi g = { 0 };
	struct ibv_qp *qp, *ud;
	struct ibv_qp_init_attr ia;

	(void)state;
	g.ctx = open_dev();
	assert_non_null(g.ctx);
	g.pd = ibv_alloc_pd(g.ctx);
	g.cq = ibv_create_cq(g.ctx, 16, NULL, NULL, 0);
	assert_non_null(g.pd);
	assert_non_null(g.cq);

	qp = create_gsi(&g, IBV_QPT_UD, IBV_QP_CREATE_SOURCE_QPN, 1);
	assert_non_null(qp);
	assert_int_equal(qp->qp_num, 1);
	/* one GSI QP per device */
	errno = 0;
	assert_null(create_gsi(&g, IBV_QPT_UD, IBV_QP_CREATE_SOURCE_QPN, 1));
	assert_int_equal(errno, EBUSY);
	/* only QPN 1, only UD, no other create flag */
	errno = 0;
	assert_null(create_gsi(&g, IBV_QPT_UD, IBV_QP_CREATE_SOURCE_QPN, 2));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(create_gsi(&g, IBV_QPT_RC, IBV_QP_CREATE_SOURCE_QPN, 1));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(create_gsi(&g, IBV_QPT_UD,
			       IBV_QP_CREATE_SOURCE_QPN | IBV_QP_CREATE_SCATTER_FCS, 1));
	assert_int_equal(errno, EOPNOTSUPP);
	/* ordinary QPs never get QPN 0 or 1 */
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = g.cq;
	ia.qp_type = IBV_QPT_UD;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ud = ibv_create_qp(g.pd, &ia);
	assert_non_null(ud);
	assert_true(ud->qp_num > 1);
	assert_int_equal(ibv_destroy_qp(ud), 0);
	/* destroy frees QPN 1 for the next GSI QP */
	assert_int_equal(ibv_destroy_qp(qp), 0);
	qp = create_gsi(&g, IBV_QPT_UD, IBV_QP_CREATE_SOURCE_QPN, 1);
	assert_non_null(qp);
	assert_int_equal(qp->qp_num, 1);
	assert_int_equal(ibv_destroy_qp(qp), 0);

	assert_int_equal(ibv_destroy_cq(g.cq), 0);
	assert_int_equal(ibv_dealloc_pd(g.pd), 0);
	assert_int_equal(ibv_close_device(g.ctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gsi_two_processes),
		cmocka_unit_test(test_gsi_create_rules),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
