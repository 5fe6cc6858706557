/* Shared helpers of the core unit tests; see ut.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "ut.h"
#include "transport/net.h"
#include "wire/hdr.h"
#include "wire/ip.h"

uint64_t ut_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void ut_sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

void ut_open(struct ut_dev *d)
{
	const char *a = getenv("URVT_ADDR"), *n = getenv("URVT_NETDEV");
	int err = 0;

	/* an address of the test's own (a host of its own): fake peers send
	 * QPNs of any slot, which on the host's shared 127.0.0.1 would be
	 * other processes' (docs/host-identity.md) */
	if ((!a || !*a) && (!n || !*n)) {
		char addr[32];
		unsigned pid = (unsigned)getpid();
		snprintf(addr, sizeof(addr), "127.88.%u.%u", (pid / 250u) % 250u, pid % 250u + 2u);
		setenv("URVT_ADDR", addr, 1);
	}
	memset(d, 0, sizeof(*d));
	d->rdi = rvt_dev_get(urvt_transport_attach, &err);
	assert_non_null(d->rdi);
	d->uctx = calloc(1, sizeof(*d->uctx));
	assert_non_null(d->uctx);
	assert_int_equal(urvt_context_init(d->uctx, d->rdi), 0);
	d->uctx->vctx.context.num_comp_vectors = 1;
}

void ut_close(struct ut_dev *d)
{
	urvt_context_fini(d->uctx);
	free(d->uctx);
	rvt_dev_put(d->rdi);
	memset(d, 0, sizeof(*d));
}

bool ut_inproc(const struct ut_dev *d)
{
	return !d->rdi->no_inproc;
}

struct rvt_pd *ut_pd(struct ut_dev *d)
{
	int err = 0;
	struct rvt_pd *pd = rvt_alloc_pd(d->uctx, &err);

	assert_non_null(pd);
	return pd;
}

struct rvt_cq *ut_cq(struct ut_dev *d, int cqe)
{
	int err = 0;
	struct rvt_cq *cq = rvt_create_cq(d->uctx, cqe, NULL, 0, NULL, &err);

	assert_non_null(cq);
	return cq;
}

struct rvt_mregion *ut_mr(struct rvt_pd *pd, void *addr, size_t len, int access)
{
	int err = 0;
	struct rvt_mregion *mr = rvt_reg_mr(pd, addr, len, (uint64_t)(uintptr_t)addr, access, &err);

	assert_non_null(mr);
	return mr;
}

struct rvt_qp *ut_qp(struct ut_dev *d, struct rvt_pd *pd, enum ibv_qp_type type,
		     struct rvt_cq *scq, struct rvt_cq *rcq, struct rvt_srq *srq,
		     const struct ut_qp_caps *caps, bool sq_sig_all)
{
	struct ibv_qp_init_attr_ex a;
	struct rvt_qp *qp;
	int err = 0;

	memset(&a, 0, sizeof(a));
	a.qp_type = type;
	a.send_cq = ibv_cq_ex_to_cq(&scq->ibcq);
	a.recv_cq = ibv_cq_ex_to_cq(&rcq->ibcq);
	a.srq = srq ? &srq->ibsrq : NULL;
	a.sq_sig_all = sq_sig_all;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = &pd->ibpd;
	if (caps) {
		a.cap.max_send_wr = caps->send_wr;
		a.cap.max_recv_wr = caps->recv_wr;
		a.cap.max_send_sge = caps->send_sge;
		a.cap.max_recv_sge = caps->recv_sge;
		a.cap.max_inline_data = caps->inline_data;
	} else {
		a.cap.max_send_wr = 16;
		a.cap.max_recv_wr = 16;
		a.cap.max_send_sge = 4;
		a.cap.max_recv_sge = 4;
	}
	qp = rvt_create_qp(d->uctx, &a, &err);
	if (!qp)
		fail_msg("rvt_create_qp: %d", err);
	return qp;
}

int ut_qp_try(struct ut_dev *d, struct ibv_qp_init_attr_ex *attr)
{
	int err = 0;
	struct rvt_qp *qp = rvt_create_qp(d->uctx, attr, &err);

	if (!qp) {
		assert_true(err < 0);
		return err;
	}
	assert_int_equal(rvt_destroy_qp(qp), 0);
	return 0;
}

void ut_loopback_ah_attr(struct ut_dev *d, struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->is_global = 1;
	ah->port_num = 1;
	ah->grh.dgid = d->rdi->gid;
	ah->grh.sgid_index = 0;
	ah->grh.hop_limit = 64;
}

void ut_modify_state(struct rvt_qp *qp, enum ibv_qp_state s)
{
	struct ibv_qp_attr a = { .qp_state = s };

	assert_int_equal(rvt_modify_qp(qp, &a, IBV_QP_STATE), 0);
}

int ut_state(struct rvt_qp *qp)
{
	struct ibv_qp_attr a;

	assert_int_equal(rvt_query_qp(qp, &a, 0, NULL), 0);
	return a.qp_state;
}

void ut_to_init(struct rvt_qp *qp, int access, uint32_t qkey)
{
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	if (qp->type == IBV_QPT_UD) {
		a.qkey = qkey;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = (unsigned int)access;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	assert_int_equal(rvt_modify_qp(qp, &a, mask), 0);
}

static void to_rtr(struct rvt_qp *qp, const struct ibv_ah_attr *ah, uint32_t dest_qpn,
		   uint32_t rq_psn, uint8_t min_rnr_timer)
{
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (qp->type != IBV_QPT_UD) {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = dest_qpn;
		a.rq_psn = rq_psn;
		a.ah_attr = *ah;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (qp->type == IBV_QPT_RC) {
			a.max_dest_rd_atomic = 4;
			a.min_rnr_timer = min_rnr_timer;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	assert_int_equal(rvt_modify_qp(qp, &a, mask), 0);
}

static void to_rts(struct rvt_qp *qp, uint32_t sq_psn, uint8_t timeout, uint8_t retry_cnt,
		   uint8_t rnr_retry, uint8_t max_rd_atomic)
{
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	if (qp->type == IBV_QPT_RC) {
		a.timeout = timeout;
		a.retry_cnt = retry_cnt;
		a.rnr_retry = rnr_retry;
		a.max_rd_atomic = max_rd_atomic;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	assert_int_equal(rvt_modify_qp(qp, &a, mask), 0);
}

void ut_to_rtr_psn(struct ut_dev *d, struct rvt_qp *qp, uint32_t dest_qpn, uint32_t rq_psn,
		   uint8_t min_rnr_timer)
{
	struct ibv_ah_attr ah;

	ut_loopback_ah_attr(d, &ah);
	to_rtr(qp, &ah, dest_qpn, rq_psn, min_rnr_timer);
}

void ut_to_rtr(struct ut_dev *d, struct rvt_qp *qp, uint32_t dest_qpn, uint8_t min_rnr_timer)
{
	ut_to_rtr_psn(d, qp, dest_qpn, 0, min_rnr_timer);
}

void ut_to_rts(struct rvt_qp *qp, uint8_t retry_cnt, uint8_t rnr_retry, uint8_t max_rd_atomic)
{
	to_rts(qp, 0, 14, retry_cnt, rnr_retry, max_rd_atomic);
}

void ut_to_rtr_path(struct rvt_qp *qp, const struct ut_path *p)
{
	struct ibv_ah_attr ah;

	memset(&ah, 0, sizeof(ah));
	ah.is_global = 1;
	ah.port_num = 1;
	ah.grh.hop_limit = 64;
	urvt_gid_from_v4(ah.grh.dgid.raw, p->peer_s_addr);
	to_rtr(qp, &ah, p->dest_qpn, p->rq_psn, p->min_rnr_timer);
}

void ut_to_rts_path(struct rvt_qp *qp, const struct ut_path *p)
{
	to_rts(qp, p->sq_psn, p->timeout, p->retry_cnt, p->rnr_retry, p->max_rd_atomic);
}

void ut_connect(struct ut_dev *d, struct rvt_qp *qp, uint32_t dest_qpn, int access)
{
	ut_to_init(qp, access, 0x11111111u);
	ut_to_rtr(d, qp, dest_qpn, 1);
	ut_to_rts(qp, 7, 7, 4);
}

int ut_poll(struct rvt_cq *cq, struct ibv_wc *wc, int n, int timeout_ms)
{
	uint64_t end = ut_now_ms() + (uint64_t)timeout_ms;
	int got = 0;

	for (;;) {
		int r = rvt_poll_cq(cq, n - got, wc + got);
		assert_true(r >= 0);
		got += r;
		if (got >= n || ut_now_ms() >= end)
			return got;
		if (!r)
			ut_sleep_ms(1);
	}
}

void ut_poll1(struct rvt_cq *cq, struct ibv_wc *wc)
{
	if (ut_poll(cq, wc, 1, UT_TIMEOUT_MS) != 1)
		fail_msg("no completion within %d ms", UT_TIMEOUT_MS);
}

void ut_cq_empty(struct rvt_cq *cq, int ms)
{
	struct ibv_wc wc;
	int n = ut_poll(cq, &wc, 1, ms);

	if (n)
		fail_msg("unexpected completion wr_id %llu status %d opcode %d",
			 (unsigned long long)wc.wr_id, wc.status, wc.opcode);
}

bool ut_async_wait(struct ut_dev *d, struct ibv_async_event *ev, int timeout_ms)
{
	struct pollfd p = { .fd = d->uctx->vctx.context.async_fd, .events = POLLIN };
	int r;

	do {
		r = poll(&p, 1, timeout_ms);
	} while (r < 0 && errno == EINTR);
	if (r <= 0)
		return false;
	assert_int_equal(urvt_get_async_event(d->uctx, ev), 0);
	return true;
}

int ut_async_drain(struct ut_dev *d)
{
	struct ibv_async_event ev;
	int n = 0;

	while (ut_async_wait(d, &ev, 0))
		n++;
	return n;
}

int ut_async_count(struct ut_dev *d, enum ibv_event_type type, const void *obj, int wait_ms)
{
	struct ibv_async_event ev;
	int n = 0;

	if (wait_ms)
		ut_sleep_ms(wait_ms);
	while (ut_async_wait(d, &ev, 0))
		if (ev.event_type == type && (const void *)ev.element.qp == obj)
			n++;
	return n;
}

void ut_fill(void *buf, size_t len, uint32_t seed)
{
	uint8_t *p = buf;
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

bool ut_check(const void *buf, size_t len, uint32_t seed)
{
	const uint8_t *p = buf;
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		if (p[i] != (uint8_t)x)
			return false;
	}
	return true;
}

void ut_post_send(struct rvt_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int ret = rvt_post_send(qp, wr, &bad);

	if (ret)
		fail_msg("rvt_post_send: %d", ret);
}

void ut_post_recv(struct rvt_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = addr ? 1 : 0 };
	struct ibv_recv_wr *bad = NULL;
	int ret = rvt_post_recv(qp, &wr, &bad);

	if (ret)
		fail_msg("rvt_post_recv: %d", ret);
}

bool ut_peer_recv(int fd, struct urvt_pkt *p, uint8_t *buf, size_t cap, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n;

	if (poll(&pfd, 1, ms) <= 0)
		return false;
	n = recv(fd, buf, cap, 0);
	assert_true(n > 0);
	assert_int_equal(urvt_pkt_parse(buf, (size_t)n, p), 0);
	return true;
}
