/*
 * vt_wr_net: ibv_wr_* batches between two processes (two urvt devices on
 * two loopback addresses), so the WRs cross the network transport and the
 * responder checks every PSN: batches mixing RDMA_WRITE, SEND_WITH_IMM,
 * RDMA_READ and FETCH_AND_ADD on RC, interleaved with aborted and failing
 * batches (which must consume no PSN, or the peer would see a gap), and a
 * batch of UD datagrams. The parent is the requester, the forked child the
 * responder; they swap addresses over pipes. Exit 0/1; alarm-bounded.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ITERS 200
#define WLEN 3000                  /* three packets at MTU 1024 */
#define SLEN 100
#define QKEY 0x11111111u
#define MEM (2u << 20)
/* layout: SEND sources/receive slots at 128 * i, RDMA_WRITE i at 64 KiB + 4 KiB * i,
 * READ results at 1 MiB, the FETCH_AND_ADD word at 1.5 MiB, UD sources at 1.75 MiB */

struct peer {
	uint32_t rc_qpn, ud_qpn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static const char *who = "?";
static int failures;

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "FAIL (%s): ", who);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	failures++;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed * 17 + 3);
}

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq_ex *cq;
	struct ibv_qp *rc, *ud;
	struct ibv_mr *mr;
	uint8_t *mem;
	union ibv_gid gid;
};

/* n completions (or fewer after timeout); wr_id/status/opcode/imm kept. */
static int poll_n(struct ibv_cq_ex *cq, struct ibv_wc *wc, int n, double timeout)
{
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	double end = now_s() + timeout;
	int got = 0;

	while (got < n && now_s() < end) {
		if (ibv_start_poll(cq, &attr))
			continue;
		do {
			wc[got].wr_id = cq->wr_id;
			wc[got].status = cq->status;
			wc[got].opcode = ibv_wc_read_opcode(cq);
			wc[got].byte_len = ibv_wc_read_byte_len(cq);
			wc[got].wc_flags = ibv_wc_read_wc_flags(cq);
			wc[got].imm_data = ibv_wc_read_imm_data(cq);
			got++;
		} while (got < n && !ibv_next_poll(cq));
		ibv_end_poll(cq);
	}
	return got;
}

static struct ibv_qp *make_qp(struct dev *d, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.send_cq = a.recv_cq = ibv_cq_ex_to_cq(d->cq);
	a.cap.max_send_wr = 64;
	a.cap.max_recv_wr = ITERS + 8;
	a.cap.max_send_sge = a.cap.max_recv_sge = 2;
	a.qp_type = t;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.pd = d->pd;
	a.send_ops_flags = t == IBV_QPT_UD ? IBV_QP_EX_WITH_SEND :
			   IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND_WITH_IMM |
				   IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	return ibv_create_qp_ex(d->ctx, &a);
}

static int dev_open(struct dev *d)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_cq_init_attr_ex ca = { .cqe = 1024,
					  .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM };
	struct ibv_qp_attr a;

	if (!list || !list[0])
		return -1;
	d->ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!d->ctx || ibv_query_gid(d->ctx, 1, 0, &d->gid))
		return -1;
	d->pd = ibv_alloc_pd(d->ctx);
	d->cq = ibv_create_cq_ex(d->ctx, &ca);
	d->mem = aligned_alloc(4096, MEM);
	if (!d->pd || !d->cq || !d->mem)
		return -1;
	memset(d->mem, 0, MEM);
	d->mr = ibv_reg_mr(d->pd, d->mem, MEM,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	d->rc = make_qp(d, IBV_QPT_RC);
	d->ud = make_qp(d, IBV_QPT_UD);
	if (!d->mr || !d->rc || !d->ud)
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			    IBV_ACCESS_REMOTE_ATOMIC;
	if (ibv_modify_qp(d->rc, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS))
		return -1;
	a.qkey = QKEY;
	if (ibv_modify_qp(d->ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(d->ud, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	return ibv_modify_qp(d->ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) ? -1 : 0;
}

static int rc_connect(struct dev *d, const struct peer *p)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = p->rc_qpn;
	a.rq_psn = 0x123;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = p->gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(d->rc, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x123;
	a.timeout = 12;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	return ibv_modify_qp(d->rc, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
						IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
						IBV_QP_MAX_QP_RD_ATOMIC) ? -1 : 0;
}

static int xfer(int wfd, int rfd, const struct peer *mine, struct peer *theirs)
{
	if (write(wfd, mine, sizeof(*mine)) != (ssize_t)sizeof(*mine))
		return -1;
	return read(rfd, theirs, sizeof(*theirs)) == (ssize_t)sizeof(*theirs) ? 0 : -1;
}

static uint8_t *recv_slot(struct dev *d, int i)
{
	return d->mem + (size_t)i * 128;
}
static uint64_t write_off(int i)
{
	return (64u << 10) + (uint64_t)i * 4096;
}

static int responder(int wfd, int rfd)
{
	struct dev d;
	struct peer me, req;
	struct ibv_wc wc[ITERS + 8];
	char done;

	who = "responder";
	memset(&d, 0, sizeof(d));
	if (dev_open(&d)) {
		fail("device setup");
		return 1;
	}
	for (int i = 0; i < ITERS + 4; i++) {
		struct ibv_sge sge = { (uintptr_t)recv_slot(&d, i), 128, d.mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_recv(i < ITERS ? d.rc : d.ud, &rw, &bad))
			fail("post_recv %d", i);
	}
	me = (struct peer){ d.rc->qp_num, d.ud->qp_num, d.mr->rkey, (uintptr_t)d.mem, d.gid };
	if (xfer(wfd, rfd, &me, &req) || rc_connect(&d, &req)) {
		fail("connect");
		return 1;
	}
	/* every SEND_WITH_IMM, in order, with its data */
	if (poll_n(d.cq, wc, ITERS + 4, 40) != ITERS + 4) {
		fail("receive completions missing");
		return 1;
	}
	for (int i = 0; i < ITERS + 4; i++) {
		uint8_t ref[SLEN];

		if (wc[i].status != IBV_WC_SUCCESS) {
			fail("recv %d: %s", i, ibv_wc_status_str(wc[i].status));
			continue;
		}
		if (wc[i].wr_id >= ITERS) { /* UD: 40 bytes of GRH first */
			fill(ref, 64, 5000 + (unsigned)(wc[i].wr_id - ITERS));
			if (wc[i].byte_len != 40 + 64 ||
			    memcmp(recv_slot(&d, (int)wc[i].wr_id) + 40, ref, 64))
				fail("UD datagram %llu", (unsigned long long)wc[i].wr_id);
			continue;
		}
		fill(ref, SLEN, 1000 + (unsigned)wc[i].wr_id);
		if (ntohl(wc[i].imm_data) != wc[i].wr_id || wc[i].byte_len != SLEN ||
		    memcmp(recv_slot(&d, (int)wc[i].wr_id), ref, SLEN))
			fail("recv %d: imm %u len %u or data", i, ntohl(wc[i].imm_data),
			     wc[i].byte_len);
	}
	/* the requester is done with our memory when it says so */
	if (read(rfd, &done, 1) != 1)
		fail("no done from the requester");
	for (int i = 0; i < ITERS; i++) {
		uint8_t ref[WLEN];

		fill(ref, WLEN, (unsigned)i);
		if (memcmp(d.mem + write_off(i), ref, WLEN)) {
			fail("RDMA_WRITE %d data", i);
			break;
		}
	}
	return failures ? 1 : 0;
}

static void wr_write_send(struct ibv_qp_ex *qx, struct dev *d, const struct peer *p, int i,
			  uint32_t lkey)
{
	uint8_t *w = d->mem + write_off(i), *s = d->mem + (size_t)i * 128;

	qx->wr_id = (uint64_t)i;
	qx->wr_flags = 0;
	ibv_wr_rdma_write(qx, p->rkey, p->addr + write_off(i));
	ibv_wr_set_sge(qx, lkey, (uintptr_t)w, WLEN);
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(qx, htonl((uint32_t)i));
	ibv_wr_set_sge(qx, d->mr->lkey, (uintptr_t)s, SLEN);
}

static int requester(int wfd, int rfd)
{
	struct dev d;
	struct peer me, resp;
	struct ibv_qp_ex *qx;
	struct ibv_wc wc[8];
	int aborted = 0, refused = 0;

	who = "requester";
	memset(&d, 0, sizeof(d));
	if (dev_open(&d)) {
		fail("device setup");
		return 1;
	}
	me = (struct peer){ d.rc->qp_num, d.ud->qp_num, d.mr->rkey, (uintptr_t)d.mem, d.gid };
	if (xfer(wfd, rfd, &me, &resp) || rc_connect(&d, &resp)) {
		fail("connect");
		return 1;
	}
	if (!memcmp(&me.gid, &resp.gid, sizeof(me.gid)))
		printf("note: both processes have the same GID\n");
	qx = ibv_qp_to_qp_ex(d.rc);
	for (int i = 0; i < ITERS; i++) {
		fill(d.mem + write_off(i), WLEN, (unsigned)i);
		fill(d.mem + (size_t)i * 128, SLEN, 1000 + (unsigned)i);
		/* every third iteration: the same batch aborted first */
		if (i % 3 == 0) {
			ibv_wr_start(qx);
			wr_write_send(qx, &d, &resp, i, d.mr->lkey);
			ibv_wr_abort(qx);
			aborted++;
		}
		/* every fifth: refused for a bad lkey in its first WR */
		if (i % 5 == 0) {
			ibv_wr_start(qx);
			wr_write_send(qx, &d, &resp, i, d.mr->lkey ^ 0x3c3c00);
			if (ibv_wr_complete(qx) != EINVAL)
				fail("bad lkey batch %d not refused", i);
			refused++;
		}
		ibv_wr_start(qx);
		wr_write_send(qx, &d, &resp, i, d.mr->lkey);
		if (ibv_wr_complete(qx)) {
			fail("batch %d", i);
			break;
		}
		if (poll_n(d.cq, wc, 1, 20) != 1 || wc[0].status != IBV_WC_SUCCESS ||
		    wc[0].wr_id != (uint64_t)i) {
			fail("batch %d completion", i);
			break;
		}
	}
	/* READ back two of the writes and FETCH_AND_ADD on the peer, in one batch */
	{
		uint8_t *rd = d.mem + (1u << 20);
		uint64_t *res = (uint64_t *)(void *)(rd + 8192);
		uint8_t ref[WLEN];

		memset(rd, 0, 2 * WLEN);
		ibv_wr_start(qx);
		qx->wr_id = 100001;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_read(qx, resp.rkey, resp.addr + write_off(7));
		ibv_wr_set_sge(qx, d.mr->lkey, (uintptr_t)rd, WLEN);
		qx->wr_id = 100002;
		ibv_wr_rdma_read(qx, resp.rkey, resp.addr + write_off(ITERS - 1));
		ibv_wr_set_sge(qx, d.mr->lkey, (uintptr_t)(rd + WLEN), WLEN);
		qx->wr_id = 100003;
		ibv_wr_atomic_fetch_add(qx, resp.rkey, resp.addr + (3u << 19), 7);
		ibv_wr_set_sge(qx, d.mr->lkey, (uintptr_t)res, 8);
		if (ibv_wr_complete(qx) || poll_n(d.cq, wc, 3, 20) != 3) {
			fail("READ/atomic batch");
		} else {
			for (int k = 0; k < 3; k++)
				if (wc[k].status != IBV_WC_SUCCESS || wc[k].wr_id != 100001u + (unsigned)k)
					fail("READ/atomic completion %d: %s", k,
					     ibv_wc_status_str(wc[k].status));
			fill(ref, WLEN, 7);
			if (memcmp(rd, ref, WLEN))
				fail("RDMA_READ 7 data");
			fill(ref, WLEN, ITERS - 1);
			if (memcmp(rd + WLEN, ref, WLEN))
				fail("RDMA_READ %d data", ITERS - 1);
			if (*res != 0)
				fail("FETCH_AND_ADD original %llu", (unsigned long long)*res);
		}
	}
	/* UD: a batch of four datagrams to the peer */
	{
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
		struct ibv_qp_ex *ux = ibv_qp_to_qp_ex(d.ud);
		struct ibv_ah *ah;

		aa.grh.dgid = resp.gid;
		aa.grh.hop_limit = 64;
		ah = ibv_create_ah(d.pd, &aa);
		if (!ah) {
			fail("create_ah");
		} else {
			ibv_wr_start(ux);
			for (int k = 0; k < 4; k++) {
				uint8_t *b = d.mem + (7u << 18) + (size_t)k * 64;

				fill(b, 64, 5000 + (unsigned)k);
				ux->wr_id = 200000u + (unsigned)k;
				ux->wr_flags = IBV_SEND_SIGNALED;
				ibv_wr_send(ux);
				ibv_wr_set_ud_addr(ux, ah, resp.ud_qpn, QKEY);
				ibv_wr_set_sge(ux, d.mr->lkey, (uintptr_t)b, 64);
			}
			if (ibv_wr_complete(ux) || poll_n(d.cq, wc, 4, 20) != 4)
				fail("UD batch");
			ibv_destroy_ah(ah);
		}
	}
	if (write(wfd, "d", 1) != 1)
		fail("done");
	if (!failures)
		printf("ok  %d RC batches (RDMA_WRITE %d B + SEND_WITH_IMM) across processes, %d "
		       "aborted and %d refused in between, READ/READ/FETCH_AND_ADD batch, UD batch "
		       "of 4\n", ITERS, WLEN, aborted, refused);
	return failures ? 1 : 0;
}

int main(void)
{
	int p2c[2], c2p[2], status = 0, ret;
	pid_t pid;

	if (pipe(p2c) || pipe(c2p))
		return 1;
	pid = fork();
	if (pid < 0)
		return 1;
	alarm(90); /* bounded even if the peer hangs */
	if (pid == 0) {
		close(p2c[1]);
		close(c2p[0]);
		_exit(responder(c2p[1], p2c[0]));
	}
	close(p2c[0]);
	close(c2p[1]);
	ret = requester(p2c[1], c2p[0]);
	close(p2c[1]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "FAIL: responder exit status %#x\n", status);
		ret = 1;
	}
	printf("%s\n", ret ? "FAILED" : "PASSED");
	return ret;
}
