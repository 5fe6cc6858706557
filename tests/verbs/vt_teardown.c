/*
 * vt_teardown: an ordinary libibverbs program that tears urvt down in the
 * orders applications use (docs/usage.md "Teardown"): memory freed before
 * its MR is deregistered, ibv_close_device with live objects, exit() from a
 * completion-event thread or under a peer's traffic, return from main with
 * everything live, a peer killed mid-transfer, verbs called from atexit
 * handlers and destructors that run after urvt's own, fork with and without
 * verbs in the child. One mode per run:
 *
 *   urvt-run ./vt_teardown MODE
 *
 * Exit 0 on success; 1 on a failed check; a hang ends at alarm() (SIGALRM).
 * Peers of one process use the path URVT_PATH names; a peer process
 * (forked before any device exists) reaches this one over shm, or over UDP
 * with URVT_SHM=0.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NRECV 64
#define MSG 256
#define BIG (1u << 20)

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "FAIL: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	_exit(1);
}

#define CHECK(c) ((c) ? (void)0 : die("%s:%d: %s (errno %d)", __FILE__, __LINE__, #c, errno))

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* One side: a context with a PD, a CQ (on a channel if asked), an RC QP. */
struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	size_t len;
	union ibv_gid gid;
};

/* What a peer process and this one tell each other. */
struct wire_id {
	union ibv_gid gid;
	uint32_t qpn, rkey;
	uint64_t va;
};

static struct ibv_context *open_dev(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx;

	CHECK(list && n > 0);
	ctx = ibv_open_device(list[0]);
	CHECK(ctx);
	ibv_free_device_list(list);
	return ctx;
}

static struct ibv_qp *make_qp(struct side *s)
{
	struct ibv_qp_init_attr a = {
		.send_cq = s->cq,
		.recv_cq = s->cq,
		.cap = { .max_send_wr = 256, .max_recv_wr = NRECV, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &a);

	CHECK(qp);
	return qp;
}

static void side_init(struct side *s, struct ibv_context *ctx, bool channel, size_t len)
{
	memset(s, 0, sizeof(*s));
	s->ctx = ctx;
	CHECK(!ibv_query_gid(ctx, 1, 0, &s->gid));
	s->pd = ibv_alloc_pd(ctx);
	CHECK(s->pd);
	if (channel) {
		s->ch = ibv_create_comp_channel(ctx);
		CHECK(s->ch);
	}
	s->cq = ibv_create_cq(ctx, 1024, NULL, s->ch, 0);
	CHECK(s->cq);
	s->len = len;
	s->buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(s->buf != MAP_FAILED);
	s->mr = ibv_reg_mr(s->pd, s->buf, len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(s->mr);
	s->qp = make_qp(s);
}

/* RESET -> RTS towards (gid, dqpn); timeout 14 (67 ms), retry_cnt 7. */
static void to_rts(struct ibv_qp *qp, const union ibv_gid *gid, uint32_t dqpn)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dqpn;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_MAX_QP_RD_ATOMIC));
}

static int post_recv(struct side *s, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)(s->buf + (id % NRECV) * MSG), MSG, s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(s->qp, &wr, &bad);
}

static int post_send(struct side *s, enum ibv_wr_opcode op, uint64_t id, uint32_t off,
		     uint32_t len, uint64_t rva, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)(s->buf + off), len, s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.rdma.remote_addr = rva;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(s->qp, &wr, &bad);
}

/* Poll one completion (bounded). */
static bool poll1(struct ibv_cq *cq, struct ibv_wc *wc, double secs)
{
	double end = now_s() + secs;

	while (now_s() < end) {
		int r = ibv_poll_cq(cq, 1, wc);
		CHECK(r >= 0);
		if (r)
			return true;
	}
	return false;
}

/* Two sides of this process, connected (URVT_PATH chooses the path). */
static struct ibv_context *g_ctx;
static struct side A, B;

static void pair_up(bool channel, size_t len)
{
	g_ctx = open_dev();
	side_init(&A, g_ctx, false, len);
	side_init(&B, g_ctx, channel, len);
	to_rts(A.qp, &B.gid, B.qp->qp_num);
	to_rts(B.qp, &A.gid, A.qp->qp_num);
}

/* A SEND from A lands in B (in the receive B posts now, or the oldest it
 * has posted), checked where that receive points. */
static void send_check(unsigned seed, bool post)
{
	struct ibv_wc wc;
	uint8_t *at;

	memset(B.buf, 0, (size_t)NRECV * MSG);
	if (post)
		CHECK(!post_recv(&B, seed));
	for (int i = 0; i < MSG; i++)
		A.buf[i] = (uint8_t)(i + seed);
	CHECK(!post_send(&A, IBV_WR_SEND, 1, 0, MSG, 0, 0));
	CHECK(poll1(A.cq, &wc, 5));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND);
	CHECK(poll1(B.cq, &wc, 5));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == MSG);
	at = B.buf + (wc.wr_id % NRECV) * MSG;
	for (int i = 0; i < MSG; i++)
		CHECK(at[i] == (uint8_t)(i + seed));
}

static void side_destroy(struct side *s)
{
	CHECK(!ibv_destroy_qp(s->qp));
	CHECK(!ibv_dereg_mr(s->mr));
	CHECK(!ibv_destroy_cq(s->cq));
	if (s->ch)
		CHECK(!ibv_destroy_comp_channel(s->ch));
	CHECK(!ibv_dealloc_pd(s->pd));
	munmap(s->buf, s->len);
}

/* ------------------------------------------------------------------ */
/* (a) memory gone before ibv_dereg_mr                                */
/* ------------------------------------------------------------------ */
static void mode_dereg_freed(void)
{
	struct ibv_wc wc;
	uint8_t *heap = malloc(BIG);
	struct ibv_mr *hmr;

	pair_up(false, BIG);
	CHECK(heap);
	hmr = ibv_reg_mr(B.pd, heap, BIG, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(hmr);
	/* WRITEs into both, finished */
	memset(A.buf, 0x5a, BIG);
	CHECK(!post_send(&A, IBV_WR_RDMA_WRITE, 1, 0, BIG, (uintptr_t)B.buf, B.mr->rkey));
	CHECK(!post_send(&A, IBV_WR_RDMA_WRITE, 2, 0, BIG, (uintptr_t)heap, hmr->rkey));
	for (int i = 0; i < 2; i++) {
		CHECK(poll1(A.cq, &wc, 10));
		CHECK(wc.status == IBV_WC_SUCCESS);
	}
	CHECK(heap[BIG - 1] == 0x5a && B.buf[BIG - 1] == 0x5a);
	/* the memory goes first, then the MRs (ASan sees any touch of the heap
	 * block; the unmapped one faults) */
	free(heap);
	CHECK(!munmap(B.buf, BIG));
	CHECK(!ibv_dereg_mr(hmr));
	CHECK(!ibv_dereg_mr(B.mr));
	/* a WRITE at the old key now fails at the responder, the QPs stay safe */
	CHECK(!post_send(&A, IBV_WR_RDMA_WRITE, 3, 0, 64, (uintptr_t)B.buf, B.mr->rkey));
	CHECK(poll1(A.cq, &wc, 10));
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR);
	/* the requester's own source buffer, likewise */
	CHECK(!ibv_destroy_qp(A.qp));
	CHECK(!munmap(A.buf, BIG));
	CHECK(!ibv_dereg_mr(A.mr));
	CHECK(!ibv_destroy_qp(B.qp));
	CHECK(!ibv_destroy_cq(A.cq) && !ibv_destroy_cq(B.cq));
	CHECK(!ibv_dealloc_pd(A.pd) && !ibv_dealloc_pd(B.pd));
	CHECK(!ibv_close_device(g_ctx));
}

/* The peer still WRITEs into the MR when it is deregistered and unmapped:
 * the responder NAKs or drops, the requester sees success (landed before)
 * or an error, nothing touches the unmapped pages. */
static void mode_dereg_inflight(void)
{
	enum { N = 128 };
	struct ibv_wc wc;
	int ok = 0, err = 0, ret;
	enum ibv_wc_status first = IBV_WC_SUCCESS;

	pair_up(false, BIG);
	for (int i = 0; i < N; i++)
		CHECK(!post_send(&A, IBV_WR_RDMA_WRITE, (uint64_t)i, 0, BIG / 4,
				 (uintptr_t)B.buf + (uint64_t)(i % 4) * (BIG / 4), B.mr->rkey));
	/* EBUSY only after rdmavt's 5 s (docs/deviations.md): retry a few times */
	for (int i = 0; i < 4 && (ret = ibv_dereg_mr(B.mr)) == EBUSY; i++)
		;
	CHECK(ret == 0);
	CHECK(!munmap(B.buf, BIG));
	for (int i = 0; i < N; i++) {
		CHECK(poll1(A.cq, &wc, 20));
		if (wc.status == IBV_WC_SUCCESS) {
			CHECK(!err); /* in order: nothing succeeds after a failure */
			ok++;
		} else {
			/* the first failure says the responder refused (a NAK) or
			 * went silent (its QP in ERR drops); the rest flush */
			if (!err++)
				first = wc.status;
			else
				CHECK(wc.status == IBV_WC_WR_FLUSH_ERR);
		}
	}
	printf("WRITEs: %d landed before the deregistration, %d failed (first: %s)\n", ok, err,
	       err ? ibv_wc_status_str(first) : "-");
	CHECK(!err || first == IBV_WC_REM_ACCESS_ERR || first == IBV_WC_REM_OP_ERR ||
	      first == IBV_WC_RETRY_EXC_ERR);
	/* the B QP may be in ERR (a WRITE's target went, docs/deviations.md) */
	CHECK(!ibv_destroy_qp(B.qp));
	CHECK(!ibv_destroy_qp(A.qp));
	CHECK(!ibv_dereg_mr(A.mr));
	munmap(A.buf, BIG);
	CHECK(!ibv_destroy_cq(A.cq) && !ibv_destroy_cq(B.cq));
	CHECK(!ibv_dealloc_pd(A.pd) && !ibv_dealloc_pd(B.pd));
	CHECK(!ibv_close_device(g_ctx));
}

/* ------------------------------------------------------------------ */
/* (b) ibv_close_device with live objects                             */
/* ------------------------------------------------------------------ */
static void mode_close_live(bool then_exit)
{
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	struct ibv_ah *ah;
	int ret;

	pair_up(true, BIG);
	aa.grh.dgid = A.gid;
	aa.grh.hop_limit = 64;
	ah = ibv_create_ah(B.pd, &aa);
	CHECK(ah);
	for (int i = 1; i < 8; i++)
		CHECK(!post_recv(&B, (uint64_t)i));
	CHECK(!ibv_req_notify_cq(B.cq, 0));
	/* succeeds, as the kernel's close does; the objects stay usable
	 * until the process exits (docs/deviations.md) */
	ret = ibv_close_device(g_ctx);
	CHECK(ret == 0);
	send_check(1, false);
	if (then_exit)
		exit(0); /* everything live: the exit must still be clean */
	/* and may still be destroyed, each with success */
	CHECK(!ibv_destroy_ah(ah));
	side_destroy(&A);
	CHECK(!ibv_destroy_qp(B.qp));
	CHECK(!ibv_dereg_mr(B.mr));
	CHECK(!ibv_destroy_cq(B.cq));
	CHECK(!ibv_dealloc_pd(B.pd));
	CHECK(!ibv_destroy_comp_channel(B.ch));
	munmap(B.buf, B.len);
}

/* ------------------------------------------------------------------ */
/* (c) exit from the completion-event path                            */
/* ------------------------------------------------------------------ */
static _Atomic bool stop_sending; /* the sender thread reads it */
static pthread_t tx_thread;
static bool tx_started;

/* A sends to B as fast as B's receives allow (RNR retry is infinite). */
static void *sender(void *arg)
{
	struct ibv_wc wc[16];
	int out = 0;

	(void)arg;
	while (!stop_sending) {
		if (out < 128 && !post_send(&A, IBV_WR_SEND, 0, 0, MSG, 0, 0))
			out++;
		int n = ibv_poll_cq(A.cq, 16, wc);
		if (n > 0)
			out -= n;
	}
	return NULL;
}

/* B's receive side, driven by completion events; exits the process from
 * inside its handling after `exit_after` events (0: never). */
static int exit_after;
static volatile int events;

static void *event_loop(void *arg)
{
	struct ibv_cq *cq;
	void *cctx;
	struct ibv_wc wc[16];

	(void)arg;
	for (;;) {
		if (ibv_get_cq_event(B.ch, &cq, &cctx))
			die("ibv_get_cq_event: %s", strerror(errno));
		ibv_ack_cq_events(cq, 1);
		events++;
		CHECK(!ibv_req_notify_cq(cq, 0));
		int n;
		while ((n = ibv_poll_cq(cq, 16, wc)) > 0)
			for (int i = 0; i < n; i++) {
				CHECK(wc[i].status == IBV_WC_SUCCESS);
				CHECK(!post_recv(&B, wc[i].wr_id + NRECV));
			}
		if (exit_after && events >= exit_after)
			exit(0);
	}
	return NULL;
}

static void mode_exit_event(bool in_handler)
{
	pthread_t ev, tx;
	double end;

	pair_up(true, BIG);
	send_check(1, true); /* the path carries traffic before the wait */
	for (int i = 0; i < NRECV; i++)
		CHECK(!post_recv(&B, (uint64_t)i));
	CHECK(!ibv_req_notify_cq(B.cq, 0));
	exit_after = in_handler ? 200 : 0;
	CHECK(!pthread_create(&ev, NULL, event_loop, NULL));
	if (!in_handler) {
		/* the thread is blocked in ibv_get_cq_event, nothing comes */
		sleep_ms(100);
		CHECK(events == 0);
		exit(0);
	}
	CHECK(!pthread_create(&tx, NULL, sender, NULL));
	/* the event thread exits the process under traffic */
	end = now_s() + 20;
	while (now_s() < end)
		sleep_ms(10);
	die("the event thread did not exit (%d events)", events);
}

/* ------------------------------------------------------------------ */
/* A peer process                                                     */
/* ------------------------------------------------------------------ */
static pid_t peer_pid;
static int to_peer[2], from_peer[2];
static struct wire_id peer_id; /* the peer's QP and MR */

static void xfer(int wfd, int rfd, const struct wire_id *mine, struct wire_id *theirs)
{
	CHECK(write(wfd, mine, sizeof(*mine)) == (ssize_t)sizeof(*mine));
	CHECK(read(rfd, theirs, sizeof(*theirs)) == (ssize_t)sizeof(*theirs));
}

/* The peer: one side of its own; sends (role 's') or receives ('r') until
 * its QP fails, its parent dies, or 30 s. */
static void peer_main(char role)
{
	struct side P;
	struct wire_id me, them;
	struct ibv_wc wc[16];
	double end = now_s() + 30;
	int out = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	side_init(&P, open_dev(), false, BIG);
	me = (struct wire_id){ P.gid, P.qp->qp_num, P.mr->rkey, (uintptr_t)P.buf };
	xfer(from_peer[1], to_peer[0], &me, &them);
	to_rts(P.qp, &them.gid, them.qpn);
	for (int i = 0; i < NRECV; i++)
		CHECK(!post_recv(&P, (uint64_t)i));
	CHECK(write(from_peer[1], "R", 1) == 1);
	while (now_s() < end) {
		if (role == 's' && out < 128) {
			/* SENDs and WRITEs alternately */
			if (!post_send(&P, out % 2 ? IBV_WR_SEND : IBV_WR_RDMA_WRITE, 0, 0,
				       out % 2 ? MSG : 4096, them.va, them.rkey))
				out++;
		}
		int n = ibv_poll_cq(P.cq, 16, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				_exit(0); /* the other side went */
			if (wc[i].opcode & IBV_WC_RECV)
				CHECK(!post_recv(&P, wc[i].wr_id));
			else
				out--;
		}
	}
	_exit(0);
}

/* Fork the peer before this process opens a device, then connect A to it. */
static void with_peer(char role)
{
	struct wire_id me, *them = &peer_id;
	char c;

	CHECK(!pipe(to_peer) && !pipe(from_peer));
	peer_pid = fork();
	CHECK(peer_pid >= 0);
	if (peer_pid == 0)
		peer_main(role);
	g_ctx = open_dev();
	side_init(&A, g_ctx, false, BIG);
	me = (struct wire_id){ A.gid, A.qp->qp_num, A.mr->rkey, (uintptr_t)A.buf };
	xfer(to_peer[1], from_peer[0], &me, them);
	to_rts(A.qp, &them->gid, them->qpn);
	for (int i = 0; i < NRECV; i++)
		CHECK(!post_recv(&A, (uint64_t)i));
	CHECK(read(from_peer[0], &c, 1) == 1);
}

/* A receives the peer's traffic (reposting) for a while. */
static void receive_for(int ms)
{
	struct ibv_wc wc[16];
	double end = now_s() + ms / 1000.0;
	int got = 0;

	while (now_s() < end) {
		int n = ibv_poll_cq(A.cq, 16, wc);
		CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			CHECK(wc[i].status == IBV_WC_SUCCESS);
			CHECK(!post_recv(&A, wc[i].wr_id));
			got++;
		}
	}
	CHECK(got > 0); /* the peer's traffic flowed */
}

/* (c, d) exit while the peer sends: the progress thread is mid-batch. */
static void mode_exit_traffic(const char *how)
{
	with_peer('s');
	receive_for(300);
	if (!strcmp(how, "return"))
		return; /* main returns with everything live */
	if (!strcmp(how, "_exit"))
		_exit(0);
	exit(0);
}

/* (d) the peer is killed mid-transfer: A's RC QP ends in RETRY_EXC_ERR,
 * within (retry_cnt + 1) x timeout and slack (docs/transport.md "Tests"). */
static void mode_peer_kill(void)
{
	struct ibv_wc wc[16];
	int out = 0, sent = 0, status;
	double t_kill = 0, end;
	bool retry_exc = false;

	with_peer('r');
	end = now_s() + 30;
	while (!retry_exc && now_s() < end) {
		if (out < 64 && !post_send(&A, sent % 2 ? IBV_WR_SEND : IBV_WR_RDMA_WRITE, 0, 0,
					   sent % 2 ? MSG : 65536, peer_id.va, peer_id.rkey)) {
			out++;
			sent++;
		}
		if (sent == 200 && !t_kill) {
			CHECK(!kill(peer_pid, SIGKILL));
			t_kill = now_s();
		}
		int n = ibv_poll_cq(A.cq, 16, wc);
		for (int i = 0; i < n; i++) {
			out--;
			if (wc[i].status == IBV_WC_RETRY_EXC_ERR)
				retry_exc = true;
			else if (wc[i].status != IBV_WC_SUCCESS && wc[i].status != IBV_WC_WR_FLUSH_ERR)
				die("status %s", ibv_wc_status_str(wc[i].status));
			else if (wc[i].status == IBV_WC_WR_FLUSH_ERR && !retry_exc)
				die("flushed before RETRY_EXC_ERR");
		}
	}
	CHECK(t_kill > 0);
	CHECK(retry_exc);
	printf("RETRY_EXC_ERR %.2f s after the kill\n", now_s() - t_kill);
	/* 8 x 67 ms of retries; generous for a loaded machine */
	CHECK(now_s() - t_kill < 10);
	CHECK(waitpid(peer_pid, &status, 0) == peer_pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	/* the rest flushes; then everything goes */
	end = now_s() + 10;
	while (out > 0 && now_s() < end) {
		int n = ibv_poll_cq(A.cq, 16, wc);
		for (int i = 0; i < n; i++, out--)
			CHECK(wc[i].status == IBV_WC_WR_FLUSH_ERR);
	}
	CHECK(out == 0);
	side_destroy(&A);
	CHECK(!ibv_close_device(g_ctx));
}

/* ------------------------------------------------------------------ */
/* (e) verbs from atexit handlers and destructors after urvt's own    */
/* ------------------------------------------------------------------ */
static volatile int late_cleanup; /* 1: from atexit, 2: from a destructor */

static void cleanup_everything(const char *who)
{
	struct ibv_wc wc[16];

	if (!g_ctx)
		die("%s: nothing to clean", who);
	stop_sending = true;
	if (tx_started)
		CHECK(!pthread_join(tx_thread, NULL));
	/* completions can still be polled; destroys must neither hang nor fail */
	while (ibv_poll_cq(A.cq, 16, wc) > 0)
		;
	side_destroy(&A);
	side_destroy(&B);
	CHECK(!ibv_close_device(g_ctx));
	g_ctx = NULL;
	printf("%s: cleanup after urvt's exit handler ok\n", who);
	fflush(stdout);
}

static void atexit_cleanup(void)
{
	if (late_cleanup == 1)
		cleanup_everything("atexit");
}

__attribute__((destructor)) static void dtor_cleanup(void)
{
	if (late_cleanup == 2)
		cleanup_everything("destructor");
}

static void mode_late_cleanup(int how)
{
	/* registered before the device exists: runs after urvt's handler */
	CHECK(!atexit(atexit_cleanup));
	late_cleanup = how;
	pair_up(false, BIG);
	for (int i = 0; i < NRECV; i++)
		CHECK(!post_recv(&B, (uint64_t)i));
	send_check(7, false); /* takes one receive; traffic works */
	CHECK(!post_recv(&B, 0));
	/* a sender keeps going while main returns (its QP's sends unfinished) */
	CHECK(!pthread_create(&tx_thread, NULL, sender, NULL));
	tx_started = true;
	sleep_ms(50);
}

/* ------------------------------------------------------------------ */
/* (f) fork                                                           */
/* ------------------------------------------------------------------ */
static void mode_fork(bool child_verbs)
{
	int status;
	pid_t pid;

#ifdef __SANITIZE_THREAD__
	/* TSan cannot start threads in the child of a threaded process, and
	 * the child's device starts its progress thread */
	if (child_verbs) {
		printf("SKIP: fork_verbs under ThreadSanitizer\n");
		exit(77);
	}
#endif

	pair_up(false, BIG);
	send_check(1, true);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (!child_verbs)
			exit(0); /* no exec: atexit handlers and destructors run here */
		/* docs/deviations.md: the child forgets the inherited device, its
		 * next ibv_open_device makes one of its own: the host's GID
		 * (docs/host-identity.md), QPNs of its own slot (or, unshared,
		 * an address of its own) */
		struct ibv_context *parent_ctx = g_ctx;
		union ibv_gid parent_gid = A.gid;
		uint32_t parent_qpn = A.qp->qp_num;
		pair_up(false, 65536);
		CHECK(g_ctx != parent_ctx);
		if (!memcmp(&A.gid, &parent_gid, sizeof(parent_gid)))
			CHECK((A.qp->qp_num >> 16) != (parent_qpn >> 16));
		for (unsigned i = 0; i < 20; i++)
			send_check(i, true);
		side_destroy(&A);
		side_destroy(&B);
		CHECK(!ibv_close_device(g_ctx));
		exit(0);
	}
	/* the parent's QPs work while the child lives and after it went */
	for (unsigned i = 0; i < 20; i++)
		send_check(100 + i, true);
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	for (unsigned i = 0; i < 20; i++)
		send_check(200 + i, true);
	side_destroy(&A);
	side_destroy(&B);
	CHECK(!ibv_close_device(g_ctx));
}

int main(int argc, char **argv)
{
	const char *m = argc > 1 ? argv[1] : "";

	alarm(60); /* a hang fails (SIGALRM) before CTest's timeout */
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(m, "dereg_freed"))
		mode_dereg_freed();
	else if (!strcmp(m, "dereg_inflight"))
		mode_dereg_inflight();
	else if (!strcmp(m, "close_live"))
		mode_close_live(false);
	else if (!strcmp(m, "close_live_exit"))
		mode_close_live(true);
	else if (!strcmp(m, "exit_event_blocked"))
		mode_exit_event(false);
	else if (!strcmp(m, "exit_event_handler"))
		mode_exit_event(true);
	else if (!strcmp(m, "exit_traffic") && argc > 2)
		mode_exit_traffic(argv[2]);
	else if (!strcmp(m, "peer_kill"))
		mode_peer_kill();
	else if (!strcmp(m, "atexit"))
		mode_late_cleanup(1);
	else if (!strcmp(m, "destructor"))
		mode_late_cleanup(2);
	else if (!strcmp(m, "fork_exit"))
		mode_fork(false);
	else if (!strcmp(m, "fork_verbs"))
		mode_fork(true);
	else
		die("usage: vt_teardown MODE (see the source)");
	printf("PASS %s\n", m);
	return 0;
}
