/*
 * Concurrency of the posting paths, the send engine token (s_sched) and the
 * CQ ring: two threads post RDMA WRITEs and SENDs on their own RC pairs and
 * RDMA WRITEs on one shared QP, while a third thread polls every CQ.
 * Every completion must arrive exactly once, in order per (thread, QP),
 * successful, with the data it moved intact. Bounded by count and time;
 * run under TSan by scripts/test (label "threads").
 *
 * Flow control: each (thread, stream) has NSLOTS buffer slots and at most
 * WINDOW WRs outstanding (WINDOW <= NSLOTS), so a slot is only rewritten
 * after the poller has checked the completion that last used it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ut.h"

#define WRS_PER_THREAD 100000u /* 200k WRs in all; about 2 s under TSan */
#define DEADLINE_MS 60000
#define NSLOTS 64u
#define SLOT 64u
#define WINDOW 32u

enum { Q_WRITE, Q_SEND, Q_SHARED, NQ };
#define NT 2

struct stream {
	_Atomic uint64_t posted;      /* by the poster */
	_Atomic uint64_t done;        /* send CQEs checked, by the poller */
	_Atomic uint64_t rdone;       /* receive CQEs checked (Q_SEND) */
	uint8_t *src;                 /* NSLOTS source slots (requester MR) */
	uint8_t *dst;                 /* NSLOTS destination slots (responder MR) */
	uint32_t lkey, rkey, dlkey;
};

static struct ut_dev dev;
static struct rvt_pd *pd;
static struct rvt_cq *cq_a[NT], *cq_b[NT], *cq_s, *cq_t;
static struct rvt_qp *qa[NT], *qb[NT], *qs, *qt;
static struct stream st[NT][NQ];
static struct rvt_mregion *mrs[NT][NQ][2];
static _Atomic int failed;
static char fail_text[256];
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t deadline;

__attribute__((format(printf, 1, 2))) static void t_fail(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&fail_lock);
	if (!atomic_load(&failed)) {
		va_start(ap, fmt);
		vsnprintf(fail_text, sizeof(fail_text), fmt, ap);
		va_end(ap);
		atomic_store(&failed, 1);
	}
	pthread_mutex_unlock(&fail_lock);
}

/* A test's two QPs, then its MR (no reference left on it), CQs and buffer. */
static void pair_free(struct rvt_qp *a, struct rvt_qp *b, struct rvt_mregion *mr,
		      struct rvt_cq *ca, struct rvt_cq *cb, void *buf)
{
	assert_int_equal(rvt_destroy_qp(a), 0);
	assert_int_equal(rvt_destroy_qp(b), 0);
	assert_int_equal(atomic_load(&mr->refcount), 1);
	assert_int_equal(rvt_dereg_mr(mr), 0);
	assert_int_equal(rvt_destroy_cq(ca), 0);
	assert_int_equal(rvt_destroy_cq(cb), 0);
	free(buf);
}

static bool t_stop(void)
{
	if (atomic_load(&failed))
		return true;
	if (ut_now_ms() > deadline) {
		t_fail("deadline of %d ms passed", DEADLINE_MS);
		return true;
	}
	return false;
}

static uint64_t mk_id(int t, int q, uint64_t seq)
{
	return ((uint64_t)t << 56) | ((uint64_t)q << 48) | seq;
}

static uint32_t msg_len(uint64_t seq)
{
	return 8 + (uint32_t)(seq * 7 % (SLOT - 7)); /* 8 .. 64 */
}

/* The message of seq: its sequence number, then a pattern from it. */
static void fill_msg(uint8_t *p, int t, int q, uint64_t seq)
{
	uint64_t id = mk_id(t, q, seq);

	memcpy(p, &id, 8);
	ut_fill(p + 8, msg_len(seq) - 8, (uint32_t)id ^ (uint32_t)(id >> 32));
}

static bool check_msg(const uint8_t *p, int t, int q, uint64_t seq)
{
	uint64_t id = mk_id(t, q, seq), got;

	memcpy(&got, p, 8);
	return got == id && ut_check(p + 8, msg_len(seq) - 8, (uint32_t)id ^ (uint32_t)(id >> 32));
}

/* ---------------------------------------------------------------- */
static void post_one(int t, int q, uint64_t seq)
{
	struct stream *s = &st[t][q];
	uint32_t slot = (uint32_t)(seq % NSLOTS) * SLOT, len = msg_len(seq);
	struct ibv_sge sge = { .addr = (uintptr_t)s->src + slot, .length = len, .lkey = s->lkey };
	struct ibv_send_wr wr = { .wr_id = mk_id(t, q, seq), .sg_list = &sge, .num_sge = 1,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct rvt_qp *qp = q == Q_SHARED ? qs : qa[t];
	int ret;

	fill_msg(s->src + slot, t, q, seq);
	if (q == Q_SEND) {
		struct ibv_sge rs = { .addr = (uintptr_t)s->dst + slot, .length = SLOT,
				      .lkey = s->dlkey };
		struct ibv_recv_wr rw = { .wr_id = mk_id(t, q, seq), .sg_list = &rs, .num_sge = 1 };
		struct ibv_recv_wr *rbad;
		ret = rvt_post_recv(qb[t], &rw, &rbad);
		if (ret) {
			t_fail("post_recv t%d seq %llu: %d", t, (unsigned long long)seq, ret);
			return;
		}
		wr.opcode = IBV_WR_SEND;
	} else {
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = (uintptr_t)s->dst + slot;
		wr.wr.rdma.rkey = s->rkey;
	}
	for (;;) {
		ret = rvt_post_send(qp, &wr, &bad);
		if (ret != -ENOMEM)
			break;
		/* the engine is running on another thread: let it retire */
		if (t_stop())
			return;
		sched_yield();
	}
	if (ret)
		t_fail("post_send t%d q%d seq %llu: %d", t, q, (unsigned long long)seq, ret);
	else
		atomic_store_explicit(&s->posted, seq + 1, memory_order_release);
}

static void *poster(void *arg)
{
	int t = (int)(intptr_t)arg;

	for (uint64_t i = 0; i < WRS_PER_THREAD && !atomic_load(&failed); i++) {
		/* 2 of 5 on the shared QP, the rest alternating WRITE/SEND */
		int q = (i % 5 == 1 || i % 5 == 3) ? Q_SHARED : (i & 1) ? Q_SEND : Q_WRITE;
		struct stream *s = &st[t][q];
		uint64_t seq = atomic_load_explicit(&s->posted, memory_order_relaxed);

		for (;;) {
			uint64_t done = atomic_load_explicit(&s->done, memory_order_acquire);
			if (q == Q_SEND) {
				uint64_t r = atomic_load_explicit(&s->rdone, memory_order_acquire);
				done = r < done ? r : done;
			}
			if (seq - done < WINDOW)
				break;
			if (t_stop())
				return NULL;
			sched_yield();
		}
		post_one(t, q, seq);
	}
	return NULL;
}

/* Send completions: stream order, success, data at the destination. */
static void on_send_cqe(const struct ibv_wc *wc)
{
	int t = (int)(wc->wr_id >> 56), q = (int)((wc->wr_id >> 48) & 0xff);
	uint64_t seq = wc->wr_id & 0xffffffffffffull;
	struct stream *s;

	if (t >= NT || q >= NQ) {
		t_fail("unknown wr_id %#llx", (unsigned long long)wc->wr_id);
		return;
	}
	s = &st[t][q];
	if (wc->status != IBV_WC_SUCCESS) {
		t_fail("t%d q%d seq %llu: status %d", t, q, (unsigned long long)seq, wc->status);
		return;
	}
	if (seq != atomic_load_explicit(&s->done, memory_order_relaxed)) {
		t_fail("t%d q%d: completion %llu, expected %llu (lost, duplicated or reordered)",
		       t, q, (unsigned long long)seq,
		       (unsigned long long)atomic_load(&s->done));
		return;
	}
	if (wc->byte_len != msg_len(seq) ||
	    wc->opcode != (q == Q_SEND ? IBV_WC_SEND : IBV_WC_RDMA_WRITE)) {
		t_fail("t%d q%d seq %llu: byte_len %u opcode %d", t, q, (unsigned long long)seq,
		       wc->byte_len, wc->opcode);
		return;
	}
	if (q != Q_SEND && !check_msg(s->dst + (seq % NSLOTS) * SLOT, t, q, seq)) {
		t_fail("t%d q%d seq %llu: RDMA WRITE data wrong", t, q, (unsigned long long)seq);
		return;
	}
	atomic_store_explicit(&s->done, seq + 1, memory_order_release);
}

static void on_recv_cqe(int t, const struct ibv_wc *wc)
{
	struct stream *s = &st[t][Q_SEND];
	uint64_t seq = atomic_load_explicit(&s->rdone, memory_order_relaxed);

	if (wc->status != IBV_WC_SUCCESS || wc->wr_id != mk_id(t, Q_SEND, seq) ||
	    wc->opcode != IBV_WC_RECV || wc->byte_len != msg_len(seq) ||
	    wc->src_qp != qa[t]->qpn) {
		t_fail("t%d receive %llu: wr_id %#llx status %d byte_len %u", t,
		       (unsigned long long)seq, (unsigned long long)wc->wr_id, wc->status,
		       wc->byte_len);
		return;
	}
	if (!check_msg(s->dst + (seq % NSLOTS) * SLOT, t, Q_SEND, seq)) {
		t_fail("t%d receive %llu: data wrong", t, (unsigned long long)seq);
		return;
	}
	atomic_store_explicit(&s->rdone, seq + 1, memory_order_release);
}

static bool all_done(void)
{
	for (int t = 0; t < NT; t++)
		for (int q = 0; q < NQ; q++) {
			struct stream *s = &st[t][q];
			uint64_t want = atomic_load(&s->posted);
			if (atomic_load(&s->done) != want ||
			    (q == Q_SEND && atomic_load(&s->rdone) != want))
				return false;
		}
	return true;
}

static _Atomic int posters_running;

static void *poller(void *arg)
{
	struct ibv_wc wc[16];

	(void)arg;
	while (!t_stop()) {
		int got = 0;
		for (int t = 0; t < NT; t++) {
			int n = rvt_poll_cq(cq_a[t], 16, wc);
			for (int i = 0; i < n; i++)
				on_send_cqe(&wc[i]);
			got += n;
			n = rvt_poll_cq(cq_b[t], 16, wc);
			for (int i = 0; i < n; i++)
				on_recv_cqe(t, &wc[i]);
			got += n;
		}
		{
			int n = rvt_poll_cq(cq_s, 16, wc);
			for (int i = 0; i < n; i++)
				on_send_cqe(&wc[i]);
			got += n;
			if (rvt_poll_cq(cq_t, 16, wc) > 0)
				t_fail("completion on the shared QP's responder");
		}
		if (!got) {
			if (!atomic_load(&posters_running) && all_done())
				return NULL;
			sched_yield();
		}
	}
	return NULL;
}

/* ---------------------------------------------------------------- */
static void connect_pair(struct rvt_qp *a, struct rvt_qp *b)
{
	int acc = IBV_ACCESS_REMOTE_WRITE;

	ut_to_init(a, acc, 0);
	ut_to_init(b, acc, 0);
	ut_to_rtr(&dev, a, b->qpn, 1);
	ut_to_rtr(&dev, b, a->qpn, 1);
	ut_to_rts(a, 7, 7, 0);
	ut_to_rts(b, 7, 7, 0);
}

static int setup(void **state)
{
	struct ut_qp_caps caps = { 128, 128, 1, 1, 0 };

	(void)state;
	ut_open(&dev);
	pd = ut_pd(&dev);
	for (int t = 0; t < NT; t++) {
		cq_a[t] = ut_cq(&dev, 512);
		cq_b[t] = ut_cq(&dev, 512);
		qa[t] = ut_qp(&dev, pd, IBV_QPT_RC, cq_a[t], cq_a[t], NULL, &caps, false);
		qb[t] = ut_qp(&dev, pd, IBV_QPT_RC, cq_b[t], cq_b[t], NULL, &caps, false);
		connect_pair(qa[t], qb[t]);
	}
	cq_s = ut_cq(&dev, 512);
	cq_t = ut_cq(&dev, 16);
	qs = ut_qp(&dev, pd, IBV_QPT_RC, cq_s, cq_s, NULL, &caps, false);
	qt = ut_qp(&dev, pd, IBV_QPT_RC, cq_t, cq_t, NULL, &caps, false);
	connect_pair(qs, qt);
	for (int t = 0; t < NT; t++)
		for (int q = 0; q < NQ; q++) {
			struct stream *s = &st[t][q];
			s->src = aligned_alloc(64, NSLOTS * SLOT);
			s->dst = aligned_alloc(64, NSLOTS * SLOT);
			assert_non_null(s->src);
			assert_non_null(s->dst);
			memset(s->src, 0, NSLOTS * SLOT);
			memset(s->dst, 0, NSLOTS * SLOT);
			mrs[t][q][0] = ut_mr(pd, s->src, NSLOTS * SLOT, 0);
			mrs[t][q][1] = ut_mr(pd, s->dst, NSLOTS * SLOT,
					     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
			s->lkey = mrs[t][q][0]->ibmr.lkey;
			s->rkey = mrs[t][q][1]->ibmr.rkey;
			s->dlkey = mrs[t][q][1]->ibmr.lkey;
		}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int t = 0; t < NT; t++) {
		assert_int_equal(rvt_destroy_qp(qa[t]), 0);
		assert_int_equal(rvt_destroy_qp(qb[t]), 0);
		assert_int_equal(rvt_destroy_cq(cq_a[t]), 0);
		assert_int_equal(rvt_destroy_cq(cq_b[t]), 0);
	}
	assert_int_equal(rvt_destroy_qp(qs), 0);
	assert_int_equal(rvt_destroy_qp(qt), 0);
	assert_int_equal(rvt_destroy_cq(cq_s), 0);
	assert_int_equal(rvt_destroy_cq(cq_t), 0);
	for (int t = 0; t < NT; t++)
		for (int q = 0; q < NQ; q++) {
			for (int k = 0; k < 2; k++) {
				assert_int_equal(atomic_load(&mrs[t][q][k]->refcount), 1);
				assert_int_equal(rvt_dereg_mr(mrs[t][q][k]), 0);
			}
			free(st[t][q].src);
			free(st[t][q].dst);
		}
	assert_int_equal(rvt_dealloc_pd(pd), 0);
	ut_async_drain(&dev);
	ut_close(&dev);
	return 0;
}

static void test_two_posters_one_poller(void **state)
{
	pthread_t p[NT], c;
	uint64_t t0 = ut_now_ms(), total = 0;

	(void)state;
	deadline = t0 + DEADLINE_MS;
	atomic_store(&posters_running, 1);
	assert_int_equal(pthread_create(&c, NULL, poller, NULL), 0);
	for (int t = 0; t < NT; t++)
		assert_int_equal(pthread_create(&p[t], NULL, poster, (void *)(intptr_t)t), 0);
	for (int t = 0; t < NT; t++)
		pthread_join(p[t], NULL);
	atomic_store(&posters_running, 0);
	pthread_join(c, NULL);
	if (atomic_load(&failed))
		fail_msg("%s", fail_text);
	for (int t = 0; t < NT; t++) {
		uint64_t sum = 0;
		for (int q = 0; q < NQ; q++) {
			struct stream *s = &st[t][q];
			assert_int_equal(atomic_load(&s->done), atomic_load(&s->posted));
			sum += atomic_load(&s->posted);
		}
		assert_int_equal(atomic_load(&st[t][Q_SEND].rdone),
				 atomic_load(&st[t][Q_SEND].posted));
		assert_int_equal(sum, WRS_PER_THREAD);
		total += sum;
	}
	/* nothing left anywhere, every WQE retired */
	for (int t = 0; t < NT; t++) {
		ut_cq_empty(cq_a[t], 0);
		ut_cq_empty(cq_b[t], 0);
		assert_int_equal(qa[t]->s_last, qa[t]->s_head);
		assert_int_equal(ut_state(qa[t]), IBV_QPS_RTS);
		assert_int_equal(ut_state(qb[t]), IBV_QPS_RTS);
	}
	ut_cq_empty(cq_s, 0);
	assert_int_equal(qs->s_last, qs->s_head);
	assert_int_equal(ut_state(qs), IBV_QPS_RTS);
	print_message("%llu WRs in %llu ms\n", (unsigned long long)total,
		      (unsigned long long)(ut_now_ms() - t0));
}

/* ---------------------------------------------------------------- */
/* Two responders sharing one SRQ: the SRQ is consumed by two engines  */
/* while the poller refills it and re-arms its limit.                 */
/* ---------------------------------------------------------------- */
#define SRQ_SENDS_PER_THREAD 50000u
#define NRSLOTS 64u

static struct rvt_srq *srq;
static struct rvt_cq *cq_x[NT], *cq_y[NT];
static struct rvt_qp *qx[NT], *qy[NT];
static uint8_t *ssrc[NT], *rbuf;
static struct rvt_mregion *ssrc_mr[NT], *rbuf_mr;
static _Atomic uint64_t sposted[NT], sdone[NT], rseq[NT];
static uint64_t limit_events, rearms;

static int post_srq_slot(uint32_t k)
{
	struct ibv_sge sge = { .addr = (uintptr_t)rbuf + k * SLOT, .length = SLOT,
			       .lkey = rbuf_mr->ibmr.lkey };
	struct ibv_recv_wr wr = { .wr_id = k, .sg_list = &sge, .num_sge = 1 }, *bad;

	return rvt_post_srq_recv(srq, &wr, &bad);
}

static void *srq_sender(void *arg)
{
	int t = (int)(intptr_t)arg;

	for (uint64_t seq = 0; seq < SRQ_SENDS_PER_THREAD && !atomic_load(&failed); seq++) {
		uint32_t slot = (uint32_t)(seq % NSLOTS) * SLOT;
		struct ibv_sge sge = { .addr = (uintptr_t)ssrc[t] + slot, .length = msg_len(seq),
				       .lkey = ssrc_mr[t]->ibmr.lkey };
		struct ibv_send_wr wr = { .wr_id = seq, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr *bad;
		int ret;

		while (seq - atomic_load_explicit(&sdone[t], memory_order_acquire) >= WINDOW) {
			if (t_stop())
				return NULL;
			sched_yield();
		}
		fill_msg(ssrc[t] + slot, t, Q_SEND, seq);
		while ((ret = rvt_post_send(qx[t], &wr, &bad)) == -ENOMEM) {
			if (t_stop())
				return NULL;
			sched_yield();
		}
		if (ret) {
			t_fail("srq sender t%d: post_send %d", t, ret);
			return NULL;
		}
		atomic_store_explicit(&sposted[t], seq + 1, memory_order_release);
	}
	return NULL;
}

static void srq_drain_events(void)
{
	struct pollfd pfd = { .fd = dev.uctx->vctx.context.async_fd, .events = POLLIN };
	struct ibv_async_event ev;

	while (poll(&pfd, 1, 0) == 1) {
		if (urvt_get_async_event(dev.uctx, &ev))
			break;
		if (ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == &srq->ibsrq)
			limit_events++;
		else
			t_fail("unexpected async event %d", ev.event_type);
	}
}

static void *srq_poller(void *arg)
{
	struct ibv_wc wc[16];
	uint64_t recvs = 0;

	(void)arg;
	while (!t_stop()) {
		int got = 0;
		for (int t = 0; t < NT; t++) {
			int n = rvt_poll_cq(cq_x[t], 16, wc);
			for (int i = 0; i < n; i++) {
				uint64_t want = atomic_load_explicit(&sdone[t], memory_order_relaxed);
				if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != want)
					t_fail("srq t%d send %llu: wr_id %llu status %d", t,
					       (unsigned long long)want,
					       (unsigned long long)wc[i].wr_id, wc[i].status);
				else
					atomic_store_explicit(&sdone[t], want + 1,
							      memory_order_release);
			}
			got += n;
			n = rvt_poll_cq(cq_y[t], 16, wc);
			for (int i = 0; i < n; i++) {
				uint64_t want = atomic_load_explicit(&rseq[t], memory_order_relaxed);
				uint32_t k = (uint32_t)wc[i].wr_id;
				if (wc[i].status != IBV_WC_SUCCESS || k >= NRSLOTS ||
				    wc[i].byte_len != msg_len(want) ||
				    !check_msg(rbuf + k * SLOT, t, Q_SEND, want)) {
					t_fail("srq t%d receive %llu: slot %u status %d len %u", t,
					       (unsigned long long)want, k, wc[i].status,
					       wc[i].byte_len);
					break;
				}
				atomic_store_explicit(&rseq[t], want + 1, memory_order_relaxed);
				if (post_srq_slot(k))
					t_fail("srq re-post of slot %u failed", k);
				if (++recvs % 512 == 0) {
					struct ibv_srq_attr a = { .srq_limit = 16 };
					if (rvt_modify_srq(srq, &a, IBV_SRQ_LIMIT))
						t_fail("modify_srq LIMIT failed");
					rearms++;
				}
			}
			got += n;
		}
		srq_drain_events();
		if (!got) {
			bool done = !atomic_load(&posters_running);
			for (int t = 0; t < NT && done; t++)
				done = atomic_load(&sdone[t]) == atomic_load(&sposted[t]) &&
				       atomic_load(&rseq[t]) == atomic_load(&sposted[t]);
			if (done)
				return NULL;
			sched_yield();
		}
	}
	return NULL;
}

static void test_shared_srq(void **state)
{
	struct ut_qp_caps caps = { 64, 0, 1, 1, 0 };
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 2 * NRSLOTS, .max_sge = 1 } };
	pthread_t p[NT], c;
	uint64_t t0 = ut_now_ms();
	int err = 0;

	(void)state;
	atomic_store(&failed, 0);
	deadline = t0 + DEADLINE_MS;
	ut_async_drain(&dev);
	srq = rvt_create_srq(pd, &sa, &err);
	assert_non_null(srq);
	rbuf = aligned_alloc(64, NRSLOTS * SLOT);
	assert_non_null(rbuf);
	rbuf_mr = ut_mr(pd, rbuf, NRSLOTS * SLOT, IBV_ACCESS_LOCAL_WRITE);
	for (int t = 0; t < NT; t++) {
		cq_x[t] = ut_cq(&dev, 256);
		cq_y[t] = ut_cq(&dev, 256);
		qx[t] = ut_qp(&dev, pd, IBV_QPT_RC, cq_x[t], cq_x[t], NULL, &caps, false);
		qy[t] = ut_qp(&dev, pd, IBV_QPT_RC, cq_y[t], cq_y[t], srq, &caps, false);
		connect_pair(qx[t], qy[t]);
		ssrc[t] = aligned_alloc(64, NSLOTS * SLOT);
		assert_non_null(ssrc[t]);
		ssrc_mr[t] = ut_mr(pd, ssrc[t], NSLOTS * SLOT, 0);
	}
	for (uint32_t k = 0; k < NRSLOTS; k++)
		assert_int_equal(post_srq_slot(k), 0);

	atomic_store(&posters_running, 1);
	assert_int_equal(pthread_create(&c, NULL, srq_poller, NULL), 0);
	for (int t = 0; t < NT; t++)
		assert_int_equal(pthread_create(&p[t], NULL, srq_sender, (void *)(intptr_t)t), 0);
	for (int t = 0; t < NT; t++)
		pthread_join(p[t], NULL);
	atomic_store(&posters_running, 0);
	pthread_join(c, NULL);
	if (atomic_load(&failed))
		fail_msg("%s", fail_text);
	for (int t = 0; t < NT; t++) {
		assert_int_equal(atomic_load(&sposted[t]), SRQ_SENDS_PER_THREAD);
		assert_int_equal(atomic_load(&sdone[t]), SRQ_SENDS_PER_THREAD);
		assert_int_equal(atomic_load(&rseq[t]), SRQ_SENDS_PER_THREAD);
		ut_cq_empty(cq_x[t], 0);
		ut_cq_empty(cq_y[t], 0);
	}
	/* every slot is posted again; the limit fired at most once per arming */
	srq_drain_events();
	assert_int_equal(rvt_rq_count(&srq->rq), NRSLOTS);
	assert_true(limit_events <= rearms);
	for (int t = 0; t < NT; t++) {
		assert_int_equal(rvt_destroy_qp(qx[t]), 0);
		assert_int_equal(rvt_destroy_qp(qy[t]), 0);
		assert_int_equal(rvt_destroy_cq(cq_x[t]), 0);
		assert_int_equal(rvt_destroy_cq(cq_y[t]), 0);
		assert_int_equal(rvt_dereg_mr(ssrc_mr[t]), 0);
		free(ssrc[t]);
	}
	assert_int_equal(rvt_destroy_srq(srq), 0);
	assert_int_equal(rvt_dereg_mr(rbuf_mr), 0);
	free(rbuf);
	print_message("%u SENDs through a shared SRQ in %llu ms (%llu limit events, %llu arms)\n",
		      NT * SRQ_SENDS_PER_THREAD, (unsigned long long)(ut_now_ms() - t0),
		      (unsigned long long)limit_events, (unsigned long long)rearms);
}

/* ---------------------------------------------------------------- */
/* A responder cycling RESET-INIT-RTR-RTS-ERR while a UC sender keeps  */
/* sending to it: reset/error racing the loopback path.               */
/* ---------------------------------------------------------------- */
#define CHURN_CYCLES 1000u
#define CHURN_RECVS_PER_CYCLE 16u
#define CHURN_MAX_RIDS (1u << 20)

static struct rvt_qp *ua, *ub;
static struct rvt_cq *uca, *ucb;
static struct rvt_mregion *umr;
static uint8_t *ubuf;
static _Atomic uint64_t u_posted, u_done;
static _Atomic int u_sender_running, u_churning;
static uint8_t *rid_seen;
static uint64_t u_recv_ok, u_recv_flush, u_cycles;

static void *churn_sender(void *arg)
{
	(void)arg;
	/* until the churner is through its cycles */
	for (uint64_t seq = 0; atomic_load(&u_churning) && !atomic_load(&failed); seq++) {
		struct ibv_sge sge = { .addr = (uintptr_t)ubuf, .length = 32, .lkey = umr->ibmr.lkey };
		struct ibv_send_wr wr = { .wr_id = seq, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr *bad;
		int ret;

		while (seq - atomic_load_explicit(&u_done, memory_order_acquire) >= WINDOW) {
			if (t_stop())
				goto out;
			sched_yield();
		}
		while ((ret = rvt_post_send(ua, &wr, &bad)) == -ENOMEM) {
			if (t_stop())
				goto out;
			sched_yield();
		}
		if (ret) {
			t_fail("churn sender: post_send %d", ret);
			break;
		}
		atomic_store_explicit(&u_posted, seq + 1, memory_order_release);
	}
out:
	atomic_store(&u_sender_running, 0);
	return NULL;
}

static int churn_modify(struct rvt_qp *qp, int state)
{
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE;

	memset(&a, 0, sizeof(a));
	a.qp_state = (enum ibv_qp_state)state;
	if (state == IBV_QPS_INIT) {
		a.port_num = 1;
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (state == IBV_QPS_RTR) {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = ua->qpn;
		ut_loopback_ah_attr(&dev, &a.ah_attr);
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	} else if (state == IBV_QPS_RTS) {
		mask |= IBV_QP_SQ_PSN;
	}
	return rvt_modify_qp(qp, &a, mask);
}

static void *churner(void *arg)
{
	static const int cycle[] = { IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
				     IBV_QPS_ERR };
	uint32_t rid = 0;

	(void)arg;
	while (u_cycles < CHURN_CYCLES && !t_stop()) {
		for (size_t i = 0; i < ARRAY_SIZE(cycle); i++) {
			int ret = churn_modify(ub, cycle[i]);
			if (ret) {
				t_fail("churn: modify to %d: %d", cycle[i], ret);
				return NULL;
			}
			if (cycle[i] == IBV_QPS_INIT) {
				for (uint32_t k = 0; k < CHURN_RECVS_PER_CYCLE && rid < CHURN_MAX_RIDS;
				     k++, rid++) {
					struct ibv_sge sge = { .addr = (uintptr_t)ubuf + 64 + (rid % 64) * 64,
							       .length = 64, .lkey = umr->ibmr.lkey };
					struct ibv_recv_wr wr = { .wr_id = rid, .sg_list = &sge,
								  .num_sge = 1 }, *bad;
					ret = rvt_post_recv(ub, &wr, &bad);
					if (ret) {
						t_fail("churn: post_recv %d", ret);
						return NULL;
					}
				}
			}
			/* stay a little in RTS so that some messages land */
			for (int y = 0; y < (cycle[i] == IBV_QPS_RTS ? 30 : 1); y++)
				sched_yield();
		}
		u_cycles++;
	}
	atomic_store(&u_churning, 0);
	return NULL;
}

static void *churn_poller(void *arg)
{
	struct ibv_wc wc[16];

	(void)arg;
	while (!t_stop()) {
		int n = rvt_poll_cq(uca, 16, wc), m;
		for (int i = 0; i < n; i++) {
			uint64_t want = atomic_load_explicit(&u_done, memory_order_relaxed);
			/* UC: a message to a responder not ready is dropped, the
			 * sender still succeeds */
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != want)
				t_fail("churn send %llu: wr_id %llu status %d",
				       (unsigned long long)want, (unsigned long long)wc[i].wr_id,
				       wc[i].status);
			atomic_store_explicit(&u_done, want + 1, memory_order_release);
		}
		m = rvt_poll_cq(ucb, 16, wc);
		for (int i = 0; i < m; i++) {
			uint64_t rid = wc[i].wr_id;
			if (rid >= CHURN_MAX_RIDS || rid_seen[rid]++)
				t_fail("churn receive %llu completed twice (or unknown)",
				       (unsigned long long)rid);
			if (wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len == 32)
				u_recv_ok++;
			else if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
				u_recv_flush++;
			else
				t_fail("churn receive %llu: status %d len %u", (unsigned long long)rid,
				       wc[i].status, wc[i].byte_len);
		}
		if (!n && !m) {
			if (!atomic_load(&u_sender_running) &&
			    atomic_load(&u_done) == atomic_load(&u_posted))
				return NULL;
			sched_yield();
		}
	}
	return NULL;
}

static void test_responder_state_churn(void **state)
{
	struct ut_qp_caps caps = { 64, 64, 1, 1, 0 };
	pthread_t s, c, p;
	uint64_t t0 = ut_now_ms();

	(void)state;
	atomic_store(&failed, 0);
	deadline = t0 + DEADLINE_MS;
	rid_seen = calloc(CHURN_MAX_RIDS, 1);
	ubuf = aligned_alloc(64, 8192);
	assert_non_null(rid_seen);
	assert_non_null(ubuf);
	memset(ubuf, 0x3c, 8192);
	umr = ut_mr(pd, ubuf, 8192, IBV_ACCESS_LOCAL_WRITE);
	uca = ut_cq(&dev, 256);
	ucb = ut_cq(&dev, 4096);
	ua = ut_qp(&dev, pd, IBV_QPT_UC, uca, uca, NULL, &caps, false);
	ub = ut_qp(&dev, pd, IBV_QPT_UC, ucb, ucb, NULL, &caps, false);
	ut_to_init(ua, IBV_ACCESS_REMOTE_WRITE, 0);
	ut_to_rtr(&dev, ua, ub->qpn, 1);
	ut_to_rts(ua, 0, 0, 0);

	atomic_store(&u_sender_running, 1);
	atomic_store(&u_churning, 1);
	assert_int_equal(pthread_create(&p, NULL, churn_poller, NULL), 0);
	assert_int_equal(pthread_create(&c, NULL, churner, NULL), 0);
	assert_int_equal(pthread_create(&s, NULL, churn_sender, NULL), 0);
	pthread_join(s, NULL);
	pthread_join(c, NULL);
	pthread_join(p, NULL);
	if (atomic_load(&failed))
		fail_msg("%s", fail_text);
	assert_true(atomic_load(&u_posted) > 0);
	assert_int_equal(atomic_load(&u_done), atomic_load(&u_posted));
	assert_int_equal(u_cycles, CHURN_CYCLES);
	assert_int_equal(ut_state(ua), IBV_QPS_RTS);
	assert_int_equal(ua->s_last, ua->s_head);
	assert_true(u_cycles > 0);
	pair_free(ua, ub, umr, uca, ucb, ubuf);
	free(rid_seen);
	print_message("%llu UC SENDs against %llu responder cycles in %llu ms "
		      "(%llu received, %llu flushed)\n", (unsigned long long)atomic_load(&u_posted),
		      (unsigned long long)u_cycles, (unsigned long long)(ut_now_ms() - t0),
		      (unsigned long long)u_recv_ok, (unsigned long long)u_recv_flush);
}

/* ---------------------------------------------------------------- */
/* The requester moved to ERR while a thread keeps posting to it:      */
/* every WR completes once, successes first, then only flushes.        */
/* ---------------------------------------------------------------- */
#define KILL_WRS 40000u

static struct rvt_qp *ka, *kb;
static struct rvt_cq *kca, *kcb;
static _Atomic uint64_t k_posted, k_done, k_flushed;
static _Atomic int k_killed;

static void *kill_sender(void *arg)
{
	(void)arg;
	for (uint64_t seq = 0; seq < KILL_WRS && !atomic_load(&failed); seq++) {
		struct ibv_sge sge = { .addr = (uintptr_t)ubuf, .length = 16, .lkey = umr->ibmr.lkey };
		struct ibv_send_wr wr = { .wr_id = seq, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		int ret;

		wr.wr.rdma.remote_addr = (uintptr_t)ubuf + 4096;
		wr.wr.rdma.rkey = umr->ibmr.rkey;
		/* a fast link and a slow main thread: the last quarter comes
		 * after the move to ERR in any case */
		while (seq == KILL_WRS / 4 * 3 && !atomic_load(&k_killed)) {
			if (t_stop())
				return NULL;
			sched_yield();
		}
		while (seq - atomic_load_explicit(&k_done, memory_order_acquire) >= WINDOW) {
			if (t_stop())
				return NULL;
			sched_yield();
		}
		while ((ret = rvt_post_send(ka, &wr, &bad)) == -ENOMEM) {
			if (t_stop())
				return NULL;
			sched_yield();
		}
		if (ret) {
			t_fail("kill sender: post_send %d", ret);
			return NULL;
		}
		atomic_store_explicit(&k_posted, seq + 1, memory_order_release);
	}
	return NULL;
}

static void *kill_poller(void *arg)
{
	struct ibv_wc wc[16];

	(void)arg;
	while (!t_stop() && atomic_load(&k_done) < KILL_WRS) {
		int n = rvt_poll_cq(kca, 16, wc);
		for (int i = 0; i < n; i++) {
			uint64_t want = atomic_load_explicit(&k_done, memory_order_relaxed);
			bool flushing = atomic_load(&k_flushed) > 0;
			if (wc[i].wr_id != want ||
			    (wc[i].status != IBV_WC_WR_FLUSH_ERR &&
			     (flushing || wc[i].status != IBV_WC_SUCCESS)))
				t_fail("kill: completion %llu: wr_id %llu status %d after %llu flushes",
				       (unsigned long long)want, (unsigned long long)wc[i].wr_id,
				       wc[i].status, (unsigned long long)atomic_load(&k_flushed));
			if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
				atomic_fetch_add(&k_flushed, 1);
			atomic_store_explicit(&k_done, want + 1, memory_order_release);
		}
		if (!n)
			sched_yield();
	}
	return NULL;
}

static void test_requester_err_while_posting(void **state)
{
	struct ut_qp_caps caps = { 64, 1, 1, 1, 0 };
	pthread_t s, p;
	struct ibv_wc wc;

	(void)state;
	atomic_store(&failed, 0);
	atomic_store(&k_killed, 0);
	deadline = ut_now_ms() + DEADLINE_MS;
	ubuf = aligned_alloc(64, 8192);
	assert_non_null(ubuf);
	umr = ut_mr(pd, ubuf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	kca = ut_cq(&dev, 256);
	kcb = ut_cq(&dev, 16);
	ka = ut_qp(&dev, pd, IBV_QPT_RC, kca, kca, NULL, &caps, false);
	kb = ut_qp(&dev, pd, IBV_QPT_RC, kcb, kcb, NULL, &caps, false);
	connect_pair(ka, kb);
	assert_int_equal(pthread_create(&p, NULL, kill_poller, NULL), 0);
	assert_int_equal(pthread_create(&s, NULL, kill_sender, NULL), 0);
	while (atomic_load(&k_done) < KILL_WRS / 4 && !atomic_load(&failed) &&
	       ut_now_ms() < deadline)
		sched_yield();
	ut_modify_state(ka, IBV_QPS_ERR);
	atomic_store(&k_killed, 1);
	pthread_join(s, NULL);
	pthread_join(p, NULL);
	if (atomic_load(&failed))
		fail_msg("%s", fail_text);
	assert_int_equal(atomic_load(&k_posted), KILL_WRS);
	assert_int_equal(atomic_load(&k_done), KILL_WRS);
	assert_true(atomic_load(&k_flushed) > 0);
	assert_true(atomic_load(&k_flushed) < KILL_WRS);
	assert_int_equal(rvt_poll_cq(kca, 1, &wc), 0);
	assert_int_equal(ka->s_last, ka->s_head);
	pair_free(ka, kb, umr, kca, kcb, ubuf);
	print_message("%u WRITEs, %llu flushed after the move to ERR\n", KILL_WRS,
		      (unsigned long long)atomic_load(&k_flushed));
}

/* ---------------------------------------------------------------- */
/* Destroying a QP while the progress thread flushes its send queue */
/* (qp-semantics §6.1: destroy is legal in any state, even with     */
/* work in flight).                                                 */
/* ---------------------------------------------------------------- */
static void *destroy_thread(void *arg)
{
	return (void *)(intptr_t)rvt_destroy_qp(arg);
}

static void test_destroy_during_async_flush(void **state)
{
	struct ut_qp_caps caps = { 64, 1, 1, 1, 0 };
	struct rvt_cq *ca = ut_cq(&dev, 64), *cb = ut_cq(&dev, 256);
	struct rvt_qp *a = ut_qp(&dev, pd, IBV_QPT_RC, ca, ca, NULL, &caps, false);
	struct rvt_qp *b = ut_qp(&dev, pd, IBV_QPT_RC, cb, cb, NULL, &caps, false);
	static uint64_t dst;
	struct rvt_mregion *m = ut_mr(pd, &dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { .addr = (uintptr_t)&dst, .length = 8, .lkey = m->ibmr.lkey };
	struct ibv_send_wr wr = { .opcode = IBV_WR_RDMA_WRITE };
	struct ibv_send_wr rd = { .wr_id = 100, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_wc wc, wcs[8];
	struct timespec until;
	pthread_t d;
	void *ret;

	(void)state;
	connect_pair(a, b);
	/* b: a few zero-length WRITEs held in SQD */
	ut_modify_state(b, IBV_QPS_SQD);
	for (int i = 0; i < 8; i++) {
		wr.wr_id = (uint64_t)i;
		ut_post_send(b, &wr);
	}
	/*
	 * White box: hold b's CQ producer lock, so that the flush of b's send
	 * queue stops inside its first rvt_cq_enter. A WRITE from a with a key
	 * that does not exist puts b in ERR (from a's engine in-process, from
	 * the thread that receives it over a link), which leaves the flush of
	 * b's queue to the progress thread (qp-semantics §5.5 step 3). a's
	 * completion is not waited for here: over a link the progress thread
	 * may be the one to receive its NAK, after the flush.
	 */
	urvt_bias_lock(&cb->p_lock);
	rd.wr.rdma.remote_addr = 64;
	rd.wr.rdma.rkey = 0x1234567;
	ut_post_send(a, &rd);
	for (uint64_t end = ut_now_ms() + UT_TIMEOUT_MS; ut_state(b) != IBV_QPS_ERR &&
							 ut_now_ms() < end;)
		ut_sleep_ms(1);
	if (ut_state(b) != IBV_QPS_ERR) {
		urvt_bias_unlock(&cb->p_lock);
		fail_msg("b did not go to ERR within %d ms", UT_TIMEOUT_MS);
	}
	/* the progress thread is now held mid-flush: destroy b from another
	 * thread, then let the flush go on */
	ut_sleep_ms(30);
	assert_int_equal(pthread_create(&d, NULL, destroy_thread, b), 0);
	ut_sleep_ms(50);
	urvt_bias_unlock(&cb->p_lock);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	if (pthread_timedjoin_np(d, &ret, &until)) {
		print_error("destroy_qp did not return: the flush spins on a QP in RESET\n");
		_exit(1); /* the progress thread cannot be stopped any more */
	}
	assert_int_equal((intptr_t)ret, 0);
	/* at most the one entry whose enter was under way */
	assert_true(rvt_poll_cq(cb, 8, wcs) <= 1);
	ut_poll1(ca, &wc);
	assert_int_equal(wc.wr_id, 100);
	assert_int_equal(wc.status, IBV_WC_REM_ACCESS_ERR);
	assert_int_equal(rvt_destroy_qp(a), 0);
	assert_int_equal(atomic_load(&m->refcount), 1);
	assert_int_equal(rvt_dereg_mr(m), 0);
	assert_int_equal(rvt_destroy_cq(ca), 0);
	assert_int_equal(rvt_destroy_cq(cb), 0);
}

/* ---------------------------------------------------------------- */
/* modify (RTS <-> SQD) and query while another thread posts: the     */
/* engine's cursors are read by the slow path (TSan), and every WR     */
/* still completes exactly once.                                       */
/* ---------------------------------------------------------------- */
#define SQD_WRS 20000u

static struct rvt_qp *zq;
static struct rvt_cq *zcq;
static _Atomic uint64_t z_posted;

static void *sqd_poster(void *arg)
{
	(void)arg;
	for (uint64_t seq = 0; seq < SQD_WRS && !t_stop(); seq++) {
		struct ibv_send_wr wr = { .wr_id = seq, .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		int ret;

		while ((ret = rvt_post_send(zq, &wr, &bad)) == -ENOMEM) {
			if (t_stop())
				return NULL;
			sched_yield();
		}
		if (ret) {
			t_fail("sqd poster: %d", ret);
			return NULL;
		}
		atomic_store(&z_posted, seq + 1);
	}
	return NULL;
}

static void test_sqd_toggle_and_query_while_posting(void **state)
{
	struct ut_qp_caps caps = { 256, 1, 1, 1, 0 };
	uint64_t done = 0;
	int toggles = 0;
	pthread_t p;

	(void)state;
	atomic_store(&failed, 0);
	deadline = ut_now_ms() + DEADLINE_MS;
	zcq = ut_cq(&dev, 32768);
	zq = ut_qp(&dev, pd, IBV_QPT_RC, zcq, zcq, NULL, &caps, false);
	ut_connect(&dev, zq, zq->qpn, IBV_ACCESS_REMOTE_WRITE);
	assert_int_equal(pthread_create(&p, NULL, sqd_poster, NULL), 0);
	while (done < SQD_WRS && !atomic_load(&failed) && ut_now_ms() < deadline) {
		struct ibv_qp_attr q;
		struct ibv_wc wc[64];
		int n;

		ut_modify_state(zq, IBV_QPS_SQD);
		assert_int_equal(rvt_query_qp(zq, &q, 0, NULL), 0);
		assert_int_equal(q.qp_state, IBV_QPS_SQD);
		ut_modify_state(zq, IBV_QPS_RTS);
		assert_int_equal(rvt_query_qp(zq, &q, 0, NULL), 0);
		toggles++;
		n = rvt_poll_cq(zcq, 64, wc);
		for (int i = 0; i < n; i++, done++) {
			assert_int_equal(wc[i].wr_id, done);
			assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
		}
	}
	pthread_join(p, NULL);
	if (atomic_load(&failed))
		fail_msg("%s", fail_text);
	assert_int_equal(done, SQD_WRS);
	assert_true(toggles > 1);
	assert_int_equal(rvt_destroy_qp(zq), 0);
	assert_int_equal(rvt_destroy_cq(zcq), 0);
}

/* ---------------------------------------------------------------- */
/* post_direct's cached peer (qp.c lb_cache): the peer is destroyed     */
/* (its structure recycled for the next one) and the sender cycles      */
/* through ERR/RESET/RTS while a thread posts lone UC RDMA WRITEs.      */
/* ---------------------------------------------------------------- */
#define PEER_CHURN_CYCLES 300u

static struct rvt_qp *pa;
static struct rvt_cq *pca, *pcb;
static struct rvt_mregion *pmr;
static uint8_t *pbuf;
/*
 * A sender thread the main thread can hold while it modifies or destroys
 * the sender's QPs: hold_sender returns once the sender has seen the hold
 * (gen acknowledged); sender_held spins, acknowledging, until let go.
 */
struct sender_hold {
	_Atomic int hold, running;
	_Atomic uint64_t gen, ack;
};

static void hold_sender(struct sender_hold *h)
{
	uint64_t g;

	atomic_store(&h->hold, 1);
	g = atomic_fetch_add(&h->gen, 1) + 1;
	while (atomic_load(&h->ack) != g && !t_stop())
		sched_yield();
}

/* In the sender's loop: true if it was held (and now let go or stopping). */
static bool sender_held(struct sender_hold *h)
{
	if (!atomic_load(&h->hold))
		return false;
	while (atomic_load(&h->hold) && atomic_load(&h->running) && !t_stop()) {
		atomic_store(&h->ack, atomic_load(&h->gen));
		sched_yield();
	}
	return true;
}

static struct sender_hold pc_h;
static _Atomic uint64_t pc_ok, pc_flush, pc_posted, pc_refused, pc_signaled;

static void *pc_sender(void *arg)
{
	(void)arg;
	for (uint64_t seq = 0; atomic_load(&pc_h.running) && !t_stop(); seq++) {
		struct ibv_sge sge = { .addr = (uintptr_t)pbuf + (seq & 63) * 8, .length = 8,
				       .lkey = pmr->ibmr.lkey };
		struct ibv_send_wr wr = { .wr_id = seq, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = (seq & 3) ? 0 : IBV_SEND_SIGNALED }, *bad;
		int ret;

		/* the sender's own modifies come while it does not post */
		if (sender_held(&pc_h))
			continue;
		/* flow control: at most WINDOW signaled WRs without a CQE (a
		 * flush completes unsignaled ones too, hence the signed test) */
		if ((int64_t)(atomic_load(&pc_signaled) - atomic_load(&pc_ok) -
			      atomic_load(&pc_flush)) >= (int64_t)WINDOW) {
			seq--;
			sched_yield();
			continue;
		}
		wr.wr.rdma.remote_addr = (uintptr_t)pbuf + 4096 + (seq & 63) * 8;
		wr.wr.rdma.rkey = pmr->ibmr.rkey;
		if (wr.send_flags)
			atomic_fetch_add(&pc_signaled, 1);
		ret = rvt_post_send(pa, &wr, &bad);
		if (ret == -ENOMEM) {
			if (wr.send_flags)
				atomic_fetch_sub(&pc_signaled, 1);
			atomic_fetch_add(&pc_refused, 1);
			sched_yield();
			continue;
		}
		if (ret) {
			t_fail("peer churn: post_send %d", ret);
			break;
		}
		atomic_fetch_add(&pc_posted, 1);
	}
	return NULL;
}

static void *pc_poller(void *arg)
{
	struct ibv_wc wc[16];

	(void)arg;
	while (atomic_load(&pc_h.running) && !t_stop()) {
		int n = rvt_poll_cq(pca, 16, wc);
		for (int i = 0; i < n; i++) {
			/* UC: a missing peer drops the message, the sender succeeds */
			if (wc[i].status == IBV_WC_SUCCESS)
				atomic_fetch_add(&pc_ok, 1);
			else if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
				atomic_fetch_add(&pc_flush, 1);
			else
				t_fail("peer churn: wr_id %llu status %d",
				       (unsigned long long)wc[i].wr_id, wc[i].status);
		}
		while (rvt_poll_cq(pcb, 16, wc) > 0)
			;
		if (!n)
			sched_yield();
	}
	return NULL;
}

static void test_direct_peer_churn(void **state)
{
	struct ut_qp_caps caps = { 64, 4, 1, 1, 0 };
	uint64_t t0 = ut_now_ms();
	struct rvt_qp *pb = NULL;
	pthread_t s, c;

	(void)state;
	atomic_store(&failed, 0);
	deadline = t0 + DEADLINE_MS;
	pbuf = aligned_alloc(64, 8192);
	assert_non_null(pbuf);
	memset(pbuf, 0x3c, 8192);
	pmr = ut_mr(pd, pbuf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	pca = ut_cq(&dev, 4096);
	pcb = ut_cq(&dev, 256);
	pa = ut_qp(&dev, pd, IBV_QPT_UC, pca, pca, NULL, &caps, false);

	atomic_store(&pc_h.running, 1);
	atomic_store(&pc_h.hold, 1);
	assert_int_equal(pthread_create(&c, NULL, pc_poller, NULL), 0);
	assert_int_equal(pthread_create(&s, NULL, pc_sender, NULL), 0);
	for (uint32_t i = 0; i < PEER_CHURN_CYCLES && !atomic_load(&failed); i++) {
		hold_sender(&pc_h);
		if (pb) {
			ut_modify_state(pa, IBV_QPS_ERR);
			ut_modify_state(pa, IBV_QPS_RESET);
			assert_int_equal(rvt_destroy_qp(pb), 0);
		}
		pb = ut_qp(&dev, pd, IBV_QPT_UC, pcb, pcb, NULL, &caps, false);
		ut_to_init(pb, IBV_ACCESS_REMOTE_WRITE, 0);
		/* pa caches pb at RTR/RTS (pb is in the table from INIT) */
		ut_to_init(pa, IBV_ACCESS_REMOTE_WRITE, 0);
		ut_to_rtr(&dev, pa, pb->qpn, 1);
		ut_to_rts(pa, 0, 0, 0);
		ut_to_rtr(&dev, pb, pa->qpn, 1);
		ut_to_rts(pb, 0, 0, 0);
		/* a reset discards queued WRs without completions: start the
		 * window afresh (the sender is held, the poller only adds) */
		atomic_store(&pc_signaled, atomic_load(&pc_ok) + atomic_load(&pc_flush));
		atomic_store(&pc_h.hold, 0);
		for (int y = 0; y < 20; y++)
			sched_yield();
		/* on a loaded machine 20 yields may not let the sender run:
		 * the first cycle waits (bounded) until it has posted */
		for (uint64_t w = ut_now_ms() + 2000; i == 0 && !atomic_load(&pc_posted) &&
						  ut_now_ms() < w && !t_stop();)
			sched_yield();
		/* destroyed under the sender's feet (pa in RTS, posting): the
		 * cache must go first; the structure is recycled at once */
		if (i & 1)
			ut_modify_state(pb, IBV_QPS_ERR);
		assert_int_equal(rvt_destroy_qp(pb), 0);
		pb = ut_qp(&dev, pd, IBV_QPT_UC, pcb, pcb, NULL, &caps, false);
		ut_to_init(pb, IBV_ACCESS_REMOTE_WRITE, 0);
		ut_to_rtr(&dev, pb, pa->qpn, 1);
		ut_to_rts(pb, 0, 0, 0);
		for (int y = 0; y < 10; y++)
			sched_yield();
	}
	hold_sender(&pc_h);
	atomic_store(&pc_h.running, 0);
	pthread_join(s, NULL);
	pthread_join(c, NULL);
	if (atomic_load(&failed))
		fail_msg("%s", fail_text);
	assert_true(atomic_load(&pc_posted) > 0);
	assert_null(pa->lb_peer); /* pb went: evicted */
	pair_free(pa, pb, pmr, pca, pcb, pbuf);
	print_message("%llu lone UC WRITEs (%llu refused) against %u destroyed peers in %llu ms "
		      "(%llu completed, %llu flushed)\n",
		      (unsigned long long)atomic_load(&pc_posted),
		      (unsigned long long)atomic_load(&pc_refused), PEER_CHURN_CYCLES,
		      (unsigned long long)(ut_now_ms() - t0), (unsigned long long)atomic_load(&pc_ok),
		      (unsigned long long)atomic_load(&pc_flush));
}

/* ---------------------------------------------------------------- */
/* post_direct takes no MR references (qp_table.c rvt_direct_barrier): */
/* a thread posts lone UC RDMA WRITEs while the source and the target  */
/* MR are deregistered (or the target re-registered elsewhere) and     */
/* registered again. Once dereg/rereg returns, the old source is never */
/* read again (poisoned, the poison never arrives) and nothing lands   */
/* in the old target (zeroed, stays zero). Under TSan a copy after the */
/* barrier is also a reported race with the poisoning/zeroing.         */
/* ---------------------------------------------------------------- */
#define MR_CHURN_CYCLES 150u
#define MR_CHURN_WAIT 64u      /* post attempts between the steps */
#define MR_CHURN_BYTES 4096u
#define MR_POISON 0xee
#define MR_DATA 0x5a

static struct rvt_qp *ma, *mb;
static struct rvt_cq *mca, *mcb;
static uint8_t *msrc, *mdst, *mdst2;
static _Atomic uint64_t m_lkey, m_rkey;
static struct sender_hold mc_h;
static _Atomic uint64_t mc_attempts, mc_posted, mc_refused;

static void *mc_sender(void *arg)
{
	(void)arg;
	for (uint64_t seq = 0; atomic_load(&mc_h.running) && !t_stop(); seq++) {
		struct ibv_sge sge = { .addr = (uintptr_t)msrc + (seq & 63) * 8, .length = 8,
				       .lkey = (uint32_t)atomic_load(&m_lkey) };
		struct ibv_send_wr wr = { .wr_id = seq, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = (seq & 15) ? 0 : IBV_SEND_SIGNALED }, *bad;
		int ret;

		if (sender_held(&mc_h))
			continue;
		wr.wr.rdma.remote_addr = (uintptr_t)mdst + (seq & 63) * 8;
		wr.wr.rdma.rkey = (uint32_t)atomic_load(&m_rkey);
		ret = rvt_post_send(ma, &wr, &bad);
		atomic_fetch_add(&mc_attempts, 1);
		if (ret == 0) {
			atomic_fetch_add(&mc_posted, 1);
		} else if (ret == -ENOMEM || ret == -EINVAL) {
			/* a full queue, or a stale lkey (checked at post time) */
			atomic_fetch_add(&mc_refused, 1);
			sched_yield();
		} else {
			t_fail("mr churn: post_send %d", ret);
			break;
		}
	}
	return NULL;
}

static void *mc_poller(void *arg)
{
	struct ibv_wc wc[16];

	(void)arg;
	while (atomic_load(&mc_h.running) && !t_stop()) {
		/* any status: stale keys fail WRs and put the target QP in ERR */
		int n = rvt_poll_cq(mca, 16, wc);
		while (rvt_poll_cq(mcb, 16, wc) > 0)
			;
		if (!n)
			sched_yield();
	}
	return NULL;
}

/* Let the sender make n more attempts (bounded by time). */
static void mc_let_post(uint64_t n)
{
	uint64_t target = atomic_load(&mc_attempts) + n, end = ut_now_ms() + 500;

	while (atomic_load(&mc_attempts) < target && ut_now_ms() < end && !t_stop())
		sched_yield();
}

static void mc_dereg(struct rvt_mregion *mr)
{
	int ret = -EBUSY;

	/* EBUSY: a reference was held for 5 s (a very slow machine) */
	for (int k = 0; k < 3 && ret == -EBUSY; k++)
		ret = rvt_dereg_mr(mr);
	assert_int_equal(ret, 0);
}

static bool mc_all(const uint8_t *p, size_t n, uint8_t v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return false;
	return true;
}

/*
 * dereg/rereg wait for every QP's s_hlock (rvt_direct_barrier); an
 * ibv_wr_* batch holds its QP's s_hlock from start to complete. A thread
 * that deregisters an MR inside its own batch must not wait for itself,
 * and the batch must still post afterwards. Bounded: a deadlock here
 * hangs, so the work runs in a thread and the test gives it 10 s.
 */
struct batch_dereg_arg {
	struct rvt_qp *qp;
	struct rvt_mregion *gone;         /* deregistered inside the batch */
	struct ibv_send_wr wr;            /* added to the batch after that */
	int dereg_ret, end_ret;
	atomic_bool done;
};

static void *batch_dereg_fn(void *p)
{
	struct batch_dereg_arg *a = p;
	struct rvt_post_batch b;

	rvt_post_batch_start(a->qp, &b);
	a->dereg_ret = rvt_dereg_mr(a->gone);
	rvt_post_batch_add(a->qp, &b, &a->wr);
	a->end_ret = rvt_post_batch_end(a->qp, &b, true);
	atomic_store(&a->done, true);
	return NULL;
}

static void test_dereg_inside_own_batch(void **state)
{
	struct ut_qp_caps caps = { 16, 1, 1, 1, 0 };
	struct batch_dereg_arg a = { 0 };
	uint8_t *buf = calloc(1, 3 * 4096);
	struct rvt_mregion *src, *dst;
	struct ibv_sge sge;
	struct ibv_wc wc;
	struct ut_dev bdev;
	struct rvt_pd *bpd;
	struct rvt_cq *cq;
	uint64_t end;
	pthread_t t;

	(void)state;
	assert_non_null(buf);
	ut_open(&bdev);
	bpd = ut_pd(&bdev);
	cq = ut_cq(&bdev, 64);
	a.qp = ut_qp(&bdev, bpd, IBV_QPT_RC, cq, cq, NULL, &caps, true);
	ut_connect(&bdev, a.qp, a.qp->qpn, IBV_ACCESS_REMOTE_WRITE);
	src = ut_mr(bpd, buf, 4096, 0);
	dst = ut_mr(bpd, buf + 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	a.gone = ut_mr(bpd, buf + 8192, 4096, 0);
	memset(buf, 0x5a, 64);
	sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 64, .lkey = src->lkey };
	a.wr = (struct ibv_send_wr){ .wr_id = 7, .sg_list = &sge, .num_sge = 1,
				     .opcode = IBV_WR_RDMA_WRITE };
	a.wr.wr.rdma.remote_addr = (uintptr_t)(buf + 4096);
	a.wr.wr.rdma.rkey = dst->lkey;
	/* a deadlock on its own batch would hang: the work runs in a thread */
	assert_int_equal(pthread_create(&t, NULL, batch_dereg_fn, &a), 0);
	end = ut_now_ms() + 10000;
	while (!atomic_load(&a.done) && ut_now_ms() < end)
		ut_sleep_ms(1);
	assert_true(atomic_load(&a.done));
	pthread_join(t, NULL);
	assert_int_equal(a.dereg_ret, 0);
	assert_int_equal(a.end_ret, 0);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 7);
	assert_memory_equal(buf + 4096, buf, 64);
	assert_int_equal(rvt_destroy_qp(a.qp), 0);
	mc_dereg(src);
	mc_dereg(dst);
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(bpd), 0);
	ut_close(&bdev);
	free(buf);
}

static void test_direct_mr_churn(void **state)
{
	struct ut_qp_caps caps = { 64, 4, 1, 1, 0 };
	int dacc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct rvt_mregion *smr, *dmr;
	uint64_t t0 = ut_now_ms(), landed = 0;
	pthread_t s, c;

	(void)state;
	atomic_store(&failed, 0);
	deadline = t0 + DEADLINE_MS;
	msrc = aligned_alloc(64, MR_CHURN_BYTES);
	mdst = aligned_alloc(64, MR_CHURN_BYTES);
	mdst2 = aligned_alloc(64, MR_CHURN_BYTES);
	assert_non_null(msrc);
	assert_non_null(mdst);
	assert_non_null(mdst2);
	memset(msrc, MR_DATA, MR_CHURN_BYTES);
	memset(mdst, 0, MR_CHURN_BYTES);
	memset(mdst2, 0, MR_CHURN_BYTES);
	mca = ut_cq(&dev, 4096);
	mcb = ut_cq(&dev, 256);
	ma = ut_qp(&dev, pd, IBV_QPT_UC, mca, mca, NULL, &caps, false);
	mb = ut_qp(&dev, pd, IBV_QPT_UC, mcb, mcb, NULL, &caps, false);
	smr = ut_mr(pd, msrc, MR_CHURN_BYTES, 0);
	dmr = ut_mr(pd, mdst, MR_CHURN_BYTES, dacc);
	atomic_store(&m_lkey, smr->ibmr.lkey);
	atomic_store(&m_rkey, dmr->ibmr.rkey);
	ut_to_init(mb, IBV_ACCESS_REMOTE_WRITE, 0);
	ut_to_init(ma, IBV_ACCESS_REMOTE_WRITE, 0);
	ut_to_rtr(&dev, ma, mb->qpn, 1);
	ut_to_rts(ma, 0, 0, 0);
	ut_to_rtr(&dev, mb, ma->qpn, 1);
	ut_to_rts(mb, 0, 0, 0);
	/* the direct path is on (over a link the same rules hold for the
	 * requester's copies and the responder's key checks) */
	assert_ptr_equal(ma->lb_peer, ut_inproc(&dev) ? mb : NULL);

	atomic_store(&mc_h.running, 1);
	atomic_store(&mc_h.hold, 0);
	assert_int_equal(pthread_create(&c, NULL, mc_poller, NULL), 0);
	assert_int_equal(pthread_create(&s, NULL, mc_sender, NULL), 0);
	for (uint32_t i = 0; i < MR_CHURN_CYCLES && !atomic_load(&failed) && !t_stop(); i++) {
		bool src_first = !(i & 1);

		mc_let_post(MR_CHURN_WAIT);
		if (i % 3 == 2) {
			/* the target moves to mdst2 (same key): mdst is retired
			 * (EBUSY: a responder held it, as for mc_dereg) */
			int ret = -EBUSY;
			for (int k = 0; k < 50 && ret == -EBUSY; k++)
				ret = rvt_rereg_mr(dmr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
						   mdst2, MR_CHURN_BYTES, 0);
			assert_int_equal(ret, 0);
			memset(mdst, 0, MR_CHURN_BYTES);
			mc_let_post(MR_CHURN_WAIT);
			if (!mc_all(mdst, MR_CHURN_BYTES, 0))
				t_fail("cycle %u: a WRITE landed in the target after rereg", i);
		}
		if (src_first) {
			mc_dereg(smr);
			memset(msrc, MR_POISON, MR_CHURN_BYTES);
			mc_let_post(MR_CHURN_WAIT);
		}
		mc_dereg(dmr);
		/* the old source was never read after its dereg */
		for (uint32_t k = 0; k < MR_CHURN_BYTES; k++)
			if (mdst[k] == MR_POISON)
				t_fail("cycle %u: the source was read after dereg", i);
		landed += !mc_all(mdst, MR_CHURN_BYTES, 0);
		memset(mdst, 0, MR_CHURN_BYTES);
		mc_let_post(MR_CHURN_WAIT);
		if (!mc_all(mdst, MR_CHURN_BYTES, 0))
			t_fail("cycle %u: a WRITE landed in the target after dereg", i);
		if (!src_first) {
			mc_dereg(smr);
			memset(msrc, MR_POISON, MR_CHURN_BYTES);
			mc_let_post(MR_CHURN_WAIT);
		}
		/* again: stale keys put the target QP in ERR */
		hold_sender(&mc_h);
		ut_modify_state(ma, IBV_QPS_ERR);
		ut_modify_state(ma, IBV_QPS_RESET);
		ut_modify_state(mb, IBV_QPS_ERR);
		ut_modify_state(mb, IBV_QPS_RESET);
		memset(msrc, MR_DATA, MR_CHURN_BYTES);
		smr = ut_mr(pd, msrc, MR_CHURN_BYTES, 0);
		dmr = ut_mr(pd, mdst, MR_CHURN_BYTES, dacc);
		atomic_store(&m_lkey, smr->ibmr.lkey);
		atomic_store(&m_rkey, dmr->ibmr.rkey);
		ut_to_init(mb, IBV_ACCESS_REMOTE_WRITE, 0);
		ut_to_init(ma, IBV_ACCESS_REMOTE_WRITE, 0);
		ut_to_rtr(&dev, ma, mb->qpn, 1);
		ut_to_rts(ma, 0, 0, 0);
		ut_to_rtr(&dev, mb, ma->qpn, 1);
		ut_to_rts(mb, 0, 0, 0);
		atomic_store(&mc_h.hold, 0);
	}
	hold_sender(&mc_h);
	atomic_store(&mc_h.running, 0);
	pthread_join(s, NULL);
	pthread_join(c, NULL);
	if (atomic_load(&failed))
		fail_msg("%s", fail_text);
	assert_true(atomic_load(&mc_posted) > 0);
	assert_true(landed > 0); /* the WRITEs did reach the target */
	assert_int_equal(rvt_destroy_qp(ma), 0);
	assert_int_equal(rvt_destroy_qp(mb), 0);
	mc_dereg(smr);
	mc_dereg(dmr);
	assert_int_equal(rvt_destroy_cq(mca), 0);
	assert_int_equal(rvt_destroy_cq(mcb), 0);
	free(msrc);
	free(mdst);
	free(mdst2);
	print_message("%llu lone UC WRITEs posted (%llu refused), %u MR retirements of each side "
		      "in %llu ms, writes landed in %llu cycles\n",
		      (unsigned long long)atomic_load(&mc_posted),
		      (unsigned long long)atomic_load(&mc_refused), MR_CHURN_CYCLES,
		      (unsigned long long)(ut_now_ms() - t0), (unsigned long long)landed);
}

/*
 * A modify of the responder waits for every post_direct that checked its
 * old state (qp.c lb_barrier; post_direct takes no lock of the peer's):
 * once a modify of the responder to ERR has returned, no WRITE lands,
 * while the sender, the fast owner of its s_hlock by then
 * (base/biaslock.h), goes on posting. UC, so the refused WRITEs complete
 * and the sender goes on. Each cycle then brings the responder back
 * (RESET..RTS, the sender held meanwhile: a WRITE to a QP in INIT would
 * put it in ERR, as rdmavt's loopback does) and checks that WRITEs land
 * again. The window between post_direct's look at the state and its copy
 * is a few instructions, so a plain run rarely sees a late WRITE; under
 * TSan the plain reads of the target race with it unless the barrier
 * ordered them (reported with lb_barrier left out).
 */
#define GATE_CYCLES 200u
static struct rvt_qp *ga, *gb;
static struct rvt_cq *gca, *gcb;
static struct rvt_mregion *gmr;
static uint64_t *gbuf; /* [0]: the sender's source, [8]: the target */
static _Atomic int g_run;
static _Atomic uint64_t g_posted;
static struct sender_hold g_h;

static void *gate_sender(void *arg)
{
	(void)arg;
	for (uint64_t v = 1; atomic_load(&g_run) && !t_stop(); v++) {
		struct ibv_sge sge = { .addr = (uintptr_t)&gbuf[0], .length = 8,
				       .lkey = gmr->ibmr.lkey };
		struct ibv_send_wr wr = { .wr_id = v, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE }, *bad;
		int ret;

		if (sender_held(&g_h))
			continue;
		gbuf[0] = v;
		wr.wr.rdma.remote_addr = (uintptr_t)&gbuf[8];
		wr.wr.rdma.rkey = gmr->ibmr.rkey;
		ret = rvt_post_send(ga, &wr, &bad);
		if (ret == -ENOMEM) { /* queued ones (refused direct) not yet run */
			sched_yield();
			continue;
		}
		if (ret) {
			t_fail("gate: post_send %d", ret);
			break;
		}
		/* relaxed: no happens-before from the sender's WRITEs to the
		 * reader but the one the barrier makes (TSan checks it) */
		atomic_fetch_add_explicit(&g_posted, 1, memory_order_relaxed);
	}
	return NULL;
}

/* Until the sender has posted n more WRs (bounded by the deadline). */
static void gate_wait_posts(uint64_t n)
{
	uint64_t want = atomic_load_explicit(&g_posted, memory_order_relaxed) + n;

	while (atomic_load_explicit(&g_posted, memory_order_relaxed) < want && !t_stop())
		sched_yield();
}

static void gate_responder_up(void)
{
	ut_modify_state(gb, IBV_QPS_RESET);
	ut_to_init(gb, IBV_ACCESS_REMOTE_WRITE, 0);
	ut_to_rtr(&dev, gb, ga->qpn, 1);
	ut_to_rts(gb, 0, 0, 0);
}

static void test_direct_write_stops_at_modify(void **state)
{
	struct ut_qp_caps caps = { 64, 4, 1, 1, 0 };
	uint64_t t0 = ut_now_ms(), last = 0, owned = 0;
	uint32_t cycles = 0;
	pthread_t s;

	(void)state;
	atomic_store(&failed, 0);
	deadline = t0 + DEADLINE_MS;
	gbuf = aligned_alloc(64, 4096);
	assert_non_null(gbuf);
	memset(gbuf, 0, 4096);
	gmr = ut_mr(pd, gbuf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	gca = ut_cq(&dev, 256);
	gcb = ut_cq(&dev, 256);
	ga = ut_qp(&dev, pd, IBV_QPT_UC, gca, gca, NULL, &caps, false);
	gb = ut_qp(&dev, pd, IBV_QPT_UC, gcb, gcb, NULL, &caps, false);
	ut_to_init(ga, 0, 0);
	gate_responder_up();
	ut_to_rtr(&dev, ga, gb->qpn, 1);
	ut_to_rts(ga, 0, 0, 0);

	atomic_store(&g_run, 1);
	atomic_store(&g_h.running, 1);
	atomic_store(&g_h.hold, 0);
	assert_int_equal(pthread_create(&s, NULL, gate_sender, NULL), 0);
	for (; cycles < GATE_CYCLES && !t_stop(); cycles++) {
		uint64_t before, after;

		gate_wait_posts(2000);
		/* over a link (URVT_PATH) a WRITE lands after its post returned:
		 * wait for one (only the in-process path lands it in post_send) */
		for (uint64_t w = ut_now_ms() + 2000; !ga->lb_direct && ut_now_ms() < w &&
						    __atomic_load_n(&gbuf[8], __ATOMIC_RELAXED) <= last;)
			sched_yield();
		owned += atomic_load(&ga->s_hlock.owner) != 0;
		ut_modify_state(gb, IBV_QPS_ERR);
		/* the modify returned: whatever the sender does now is refused */
		before = gbuf[8]; /* plain: TSan reports it if a WRITE can still land */
		gate_wait_posts(2000);
		after = gbuf[8];
		if (before != after)
			t_fail("cycle %u: a WRITE landed after the modify returned (%llu -> %llu)",
			       cycles, (unsigned long long)before, (unsigned long long)after);
		if (before <= last)
			t_fail("cycle %u: no WRITE landed while allowed (%llu)", cycles,
			       (unsigned long long)before);
		last = before;
		if (atomic_load(&failed))
			break;
		hold_sender(&g_h);
		/* nothing queued may reach the responder while it is in INIT */
		while (load_acquire(&ga->s_last) != ga->s_head && !t_stop())
			sched_yield();
		gate_responder_up();
		atomic_store(&g_h.hold, 0);
	}
	hold_sender(&g_h);
	atomic_store(&g_h.running, 0);
	atomic_store(&g_run, 0);
	pthread_join(s, NULL);
	if (atomic_load(&failed))
		fail_msg("%s", fail_text);
	assert_int_equal(cycles, GATE_CYCLES);
	/* the sender had the fast way in (where membarrier is there) */
	if (urvt_bias_available())
		assert_true(owned > 0);
	pair_free(ga, gb, gmr, gca, gcb, gbuf);
	print_message("%u cycles, %llu WRITEs, the sender the fast owner at %llu of the modifies, "
		      "%llu ms\n", cycles, (unsigned long long)atomic_load(&g_posted),
		      (unsigned long long)owned, (unsigned long long)(ut_now_ms() - t0));
}

/* ---------------------------------------------------------------- */
/* UD: two threads post SENDs through one UD QP while a third        */
/* receives on another. Over a link each post goes out at once        */
/* (post.c post_ud_direct) or, when the other thread's WR is still    */
/* in the queue, through the engine; in-process through ud_loopback.  */
/* Every message arrives whole, once, in its sender's order.          */
/* ---------------------------------------------------------------- */
#define UD_MSGS 10000u
#define UD_WIN 64u
#define UD_RSLOTS 256u
#define UD_RSLOT 64u

static struct rvt_qp *ud_a, *ud_b;
static struct rvt_cq *ud_acq, *ud_bcq;
static struct rvt_ah *ud_ah;
static uint8_t *ud_rbuf;
static struct rvt_mregion *ud_rmr;
static _Atomic uint64_t ud_got[NT];

static void *ud_poster(void *arg)
{
	int t = (int)(intptr_t)arg;

	for (uint64_t seq = 0; seq < UD_MSGS && !t_stop(); seq++) {
		uint64_t msg[2] = { (uint64_t)t, seq };
		struct ibv_sge sge = { .addr = (uintptr_t)msg, .length = sizeof(msg) };
		struct ibv_send_wr wr = {
			.wr_id = seq, .opcode = IBV_WR_SEND, .sg_list = &sge, .num_sge = 1,
			/* a completion now and then: the send CQ is nobody's to poll */
			.send_flags = IBV_SEND_INLINE | (seq % 64 == 63 ? IBV_SEND_SIGNALED : 0),
		}, *bad;
		int ret;

		wr.wr.ud.ah = &ud_ah->ibah;
		wr.wr.ud.remote_qpn = ud_b->qpn;
		wr.wr.ud.remote_qkey = 0x3333;
		while (seq - atomic_load(&ud_got[t]) >= UD_WIN && !t_stop())
			sched_yield();
		ret = rvt_post_send(ud_a, &wr, &bad);
		if (ret == -ENOMEM) { /* the other thread's WRs fill the queue */
			seq--;
			sched_yield();
			continue;
		}
		if (ret)
			t_fail("UD post_send: %d", ret);
	}
	return NULL;
}

static void *ud_receiver(void *arg)
{
	uint64_t want[NT] = { 0 };

	(void)arg;
	while (!t_stop()) {
		struct ibv_wc wc;
		uint64_t msg[2];
		uint8_t *slot;
		bool done = true;

		for (int t = 0; t < NT; t++)
			done &= want[t] == UD_MSGS;
		if (done)
			break;
		if (rvt_app_poll_cq(ud_bcq, 1, &wc) != 1)
			continue;
		slot = ud_rbuf + wc.wr_id * UD_RSLOT;
		memcpy(msg, slot + 40, sizeof(msg));
		if (wc.status != IBV_WC_SUCCESS || wc.byte_len != 40 + sizeof(msg) ||
		    msg[0] >= NT || msg[1] != want[msg[0]]) {
			t_fail("UD receive: status %d len %u, message (%llu, %llu)", wc.status,
			       wc.byte_len, (unsigned long long)msg[0], (unsigned long long)msg[1]);
			break;
		}
		want[msg[0]]++;
		atomic_store(&ud_got[msg[0]], want[msg[0]]);
		memset(slot, 0, UD_RSLOT);
		ut_post_recv(ud_b, wc.wr_id, slot, UD_RSLOT, ud_rmr->ibmr.lkey);
	}
	return NULL;
}

static void test_ud_two_posters(void **state)
{
	struct ut_qp_caps caps = { 64, UD_RSLOTS, 1, 1, 64 };
	struct ibv_ah_attr aha;
	pthread_t p[NT], r;
	uint64_t t0 = ut_now_ms();
	int err = 0;

	(void)state;
	deadline = t0 + DEADLINE_MS;
	ud_acq = ut_cq(&dev, 1024);
	ud_bcq = ut_cq(&dev, 1024);
	ud_a = ut_qp(&dev, pd, IBV_QPT_UD, ud_acq, ud_acq, NULL, &caps, false);
	ud_b = ut_qp(&dev, pd, IBV_QPT_UD, ud_bcq, ud_bcq, NULL, &caps, false);
	for (int i = 0; i < 2; i++) {
		struct rvt_qp *q = i ? ud_b : ud_a;
		ut_to_init(q, 0, 0x3333);
		ut_to_rtr(&dev, q, 0, 0);
		ut_to_rts(q, 0, 0, 0);
	}
	ut_loopback_ah_attr(&dev, &aha);
	ud_ah = rvt_create_ah(pd, &aha, &err);
	assert_non_null(ud_ah);
	ud_rbuf = aligned_alloc(64, UD_RSLOTS * UD_RSLOT);
	assert_non_null(ud_rbuf);
	ud_rmr = ut_mr(pd, ud_rbuf, UD_RSLOTS * UD_RSLOT, IBV_ACCESS_LOCAL_WRITE);
	for (uint32_t k = 0; k < UD_RSLOTS; k++)
		ut_post_recv(ud_b, k, ud_rbuf + k * UD_RSLOT, UD_RSLOT, ud_rmr->ibmr.lkey);
	assert_int_equal(pthread_create(&r, NULL, ud_receiver, NULL), 0);
	for (int t = 0; t < NT; t++)
		assert_int_equal(pthread_create(&p[t], NULL, ud_poster, (void *)(intptr_t)t), 0);
	for (int t = 0; t < NT; t++)
		pthread_join(p[t], NULL);
	pthread_join(r, NULL);
	if (atomic_load(&failed))
		fail_msg("%s", fail_text);
	for (int t = 0; t < NT; t++)
		assert_int_equal(atomic_load(&ud_got[t]), UD_MSGS);
	assert_int_equal(ud_a->s_last, ud_a->s_head);
	assert_int_equal(ut_state(ud_a), IBV_QPS_RTS);
	assert_int_equal(ut_state(ud_b), IBV_QPS_RTS);
	ut_async_drain(&dev);
	pair_free(ud_a, ud_b, ud_rmr, ud_acq, ud_bcq, ud_rbuf);
	assert_int_equal(rvt_destroy_ah(ud_ah), 0);
	print_message("%u UD SENDs from %d threads in %llu ms\n", NT * UD_MSGS, NT,
		      (unsigned long long)(ut_now_ms() - t0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_posters_one_poller),
		cmocka_unit_test(test_shared_srq),
		cmocka_unit_test(test_responder_state_churn),
		cmocka_unit_test(test_requester_err_while_posting),
		cmocka_unit_test(test_destroy_during_async_flush),
		cmocka_unit_test(test_sqd_toggle_and_query_while_posting),
		cmocka_unit_test(test_direct_peer_churn),
		cmocka_unit_test(test_direct_mr_churn),
		cmocka_unit_test(test_dereg_inside_own_batch),
		cmocka_unit_test(test_direct_write_stops_at_modify),
		cmocka_unit_test(test_ud_two_posters),
	};

	cmocka_set_test_filter(getenv("UT_FILTER")); /* e.g. UT_FILTER=test_read */
	return cmocka_run_group_tests(tests, setup, teardown);
}
